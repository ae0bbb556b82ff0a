// Routes: RTM_NEWROUTE (add: CREATE|EXCL, replace: CREATE|REPLACE) /
// RTM_DELROUTE / RTM_GETROUTE.
#include <sys/socket.h>

#include <vector>

#include "ops.h"

namespace np {

namespace {

struct RouteReq {
  IpAddr dst;
  int dstLen = 0;
  bool hasGw = false, hasSrc = false, onlink = false, hasScope = false, hasMetric = false, hasProto = false;
  IpAddr gw, src;
  LinkRef dev;
  bool hasDev = false;
  uint8_t scope = 0, proto = 0, type = RTN_UNICAST;
  bool hasType = false;
  uint32_t table = RT_TABLE_MAIN, metric = 0;
  std::string dstText;
};

bool readRoute(Args& a, const Napi::Value& arg, RouteReq& r) {
  Napi::Object o;
  if (!a.object(arg, "route", o)) return false;
  Napi::Value dstv = a.prop(o, "dst");
  Napi::Value v;
  if (Args::present(v = a.prop(o, "gateway")) && a.ip(v, "route.gateway", r.gw)) r.hasGw = true;
  if (Args::present(v = a.prop(o, "src")) && a.ip(v, "route.src", r.src)) r.hasSrc = true;
  if (Args::present(v = a.prop(o, "dev")) && a.link(v, "route.dev", r.dev)) r.hasDev = true;
  if (Args::present(v = a.prop(o, "scope")) && readScope(a, v, "route.scope", r.scope)) r.hasScope = true;
  if (Args::present(v = a.prop(o, "onlink"))) a.boolean(v, "route.onlink", r.onlink);
  if (Args::present(v = a.prop(o, "table"))) a.uint(v, "route.table", 1, 0xffffffffu, r.table);
  if (Args::present(v = a.prop(o, "metric")) && a.uint(v, "route.metric", 0, 0xffffffffu, r.metric)) r.hasMetric = true;
  if (Args::present(v = a.prop(o, "protocol"))) {
    const char* expect = "'boot', 'static', 'kernel' or an integer 0..255";
    if (v.IsString()) {
      std::string s = v.As<Napi::String>().Utf8Value();
      if (s == "boot") r.proto = RTPROT_BOOT;
      else if (s == "static") r.proto = RTPROT_STATIC;
      else if (s == "kernel") r.proto = RTPROT_KERNEL;
      else a.fail("route.protocol", expect, v);
    } else {
      uint32_t n = 0;
      if (!v.IsNumber()) a.fail("route.protocol", expect, v);
      else if (a.uint(v, "route.protocol", 0, 255, n)) r.proto = static_cast<uint8_t>(n);
    }
    r.hasProto = true;
  }
  if (Args::present(v = a.prop(o, "type"))) {
    std::string t;
    if (a.string(v, "route.type", t)) {
      if (t == "unicast") r.type = RTN_UNICAST;
      else if (t == "blackhole") r.type = RTN_BLACKHOLE;
      else if (t == "unreachable") r.type = RTN_UNREACHABLE;
      else a.fail("route.type", "'unicast', 'blackhole' or 'unreachable'", v);
      r.hasType = true;
    }
  }
  if (!a.ok()) return false;
  const char* dstExpect = "'default', '0.0.0.0/0', '::/0' or a CIDR like '10.0.0.5/32'";
  if (!dstv.IsString()) return a.fail("route.dst", dstExpect, dstv);
  r.dstText = dstv.As<Napi::String>().Utf8Value();
  if (r.dstText == "default") {
    r.dst = IpAddr{};
    r.dst.family = r.hasGw ? r.gw.family : AF_INET;
    r.dstLen = 0;
  } else if (!parseCidr(r.dstText, r.dst, r.dstLen, true)) {
    return a.fail("route.dst", dstExpect, dstv);
  }
  if (r.hasGw && r.gw.family != r.dst.family)
    return a.failText("route.gateway", "of the same family as route.dst '" + r.dstText + "'", "'" + formatIp(r.gw.family, r.gw.bytes) + "'");
  if (r.hasSrc && r.src.family != r.dst.family)
    return a.failText("route.src", "of the same family as route.dst '" + r.dstText + "'", "'" + formatIp(r.src.family, r.src.bytes) + "'");
  // A blackhole/unreachable route has no next hop: the kernel would refuse
  // one with a less helpful EINVAL.
  if (r.type != RTN_UNICAST && (r.hasGw || r.hasDev))
    return a.failText("route.type", "'unicast' when route.gateway or route.dev is given", "'" + std::string(r.type == RTN_BLACKHOLE ? "blackhole" : "unreachable") + "'");
  return true;
}

Napi::Value routeChange(Handle& h, const Napi::CallbackInfo& info, const char* fn, uint16_t type, uint16_t flags) {
  Napi::Env env = info.Env();
  Args a(env, fn);
  RouteReq r;
  if (!readRoute(a, info[0], r)) return env.Undefined();
  NlError e;
  uint32_t oif = 0;
  if (r.hasDev && !linkIndex(h, r.dev, oif, e)) return throwNlError(env, e), env.Undefined();
  const bool del = type == RTM_DELROUTE;
  NlMsg m(type, flags);
  rtmsg rt{};
  rt.rtm_family = static_cast<uint8_t>(r.dst.family);
  rt.rtm_dst_len = static_cast<uint8_t>(r.dstLen);
  // Tables above 255 only fit in RTA_TABLE; rtm_table then says UNSPEC.
  rt.rtm_table = static_cast<uint8_t>(r.table < 256 ? r.table : static_cast<uint32_t>(RT_TABLE_UNSPEC));
  // Defaults follow ip-route(8): a route without gateway is on-link (scope
  // link), with a gateway it is universe. A delete leaves scope, protocol
  // and type as wildcards unless given, so it matches what add created.
  if (del) {
    rt.rtm_scope = r.hasScope ? r.scope : static_cast<uint8_t>(RT_SCOPE_NOWHERE);
    rt.rtm_protocol = r.hasProto ? r.proto : 0;
    rt.rtm_type = r.hasType ? r.type : static_cast<uint8_t>(RTN_UNSPEC);
  } else {
    // Blackhole/unreachable routes are scope universe, as ip-route(8) makes them.
    const bool noNextHop = r.type != RTN_UNICAST;
    rt.rtm_scope = r.hasScope ? r.scope : static_cast<uint8_t>(r.hasGw || noNextHop ? RT_SCOPE_UNIVERSE : RT_SCOPE_LINK);
    rt.rtm_protocol = r.hasProto ? r.proto : static_cast<uint8_t>(RTPROT_BOOT);
    rt.rtm_type = r.type;
  }
  if (r.onlink) rt.rtm_flags |= RTNH_F_ONLINK;
  m.put(rt);
  m.u32(RTA_TABLE, r.table);
  if (r.dstLen > 0) m.attr(RTA_DST, r.dst.bytes, r.dst.len());
  if (r.hasGw) m.attr(RTA_GATEWAY, r.gw.bytes, r.gw.len());
  if (r.hasSrc) m.attr(RTA_PREFSRC, r.src.bytes, r.src.len());
  if (oif) m.u32(RTA_OIF, oif);
  if (r.hasMetric) m.u32(RTA_PRIORITY, r.metric);
  if (!h.sock.request(m, e)) {
    e.subject = r.dstText;
    return throwNlError(env, e), env.Undefined();
  }
  return env.Undefined();
}

}  // namespace

Napi::Value RouteAdd(Handle& h, const Napi::CallbackInfo& info) {
  return routeChange(h, info, "routeAdd", RTM_NEWROUTE, NLM_F_CREATE | NLM_F_EXCL);
}
Napi::Value RouteReplace(Handle& h, const Napi::CallbackInfo& info) {
  return routeChange(h, info, "routeReplace", RTM_NEWROUTE, NLM_F_CREATE | NLM_F_REPLACE);
}
Napi::Value RouteDel(Handle& h, const Napi::CallbackInfo& info) {
  return routeChange(h, info, "routeDel", RTM_DELROUTE, 0);
}

Napi::Value RouteList(Handle& h, const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Args a(env, "routeList");
  uint32_t family = 0, table = RT_TABLE_MAIN, oif = 0, proto = 0;
  LinkRef ref;
  bool hasLink = false, hasProto = false;
  if (Args::present(info[0])) {
    Napi::Object o;
    if (!a.object(info[0], "options", o)) return env.Undefined();
    Napi::Value v;
    if (Args::present(v = a.prop(o, "family")) && a.uint(v, "options.family", 4, 6, family) && family == 5)
      a.fail("options.family", "4 or 6", v);
    if (Args::present(v = a.prop(o, "table"))) a.uint(v, "options.table", 1, 0xffffffffu, table);
    if (Args::present(v = a.prop(o, "link"))) hasLink = a.link(v, "options.link", ref);
    if (Args::present(v = a.prop(o, "protocol"))) hasProto = a.uint(v, "options.protocol", 0, 255, proto);
    if (!a.ok()) return env.Undefined();
  }
  NlError e;
  if (hasLink && !linkIndex(h, ref, oif, e)) return throwNlError(env, e), env.Undefined();
  NlMsg m(RTM_GETROUTE, 0);
  rtmsg rq{};
  rq.rtm_family = family == 4 ? AF_INET : family == 6 ? AF_INET6 : AF_UNSPEC;
  m.put(rq);
  Napi::Array arr = Napi::Array::New(env);
  uint32_t n = 0;
  bool ok = h.sock.dump(m, e, [&](const nlmsghdr* r) {
    if (r->nlmsg_type != RTM_NEWROUTE || r->nlmsg_len < NLMSG_LENGTH(sizeof(rtmsg))) return;
    auto* rt = static_cast<const rtmsg*>(NLMSG_DATA(r));
    if (rt->rtm_family != AF_INET && rt->rtm_family != AF_INET6) return;
    if (rt->rtm_flags & RTM_F_CLONED) return;
    if (hasProto && rt->rtm_protocol != proto) return;
    Attrs at(RTM_RTA(rt), r->nlmsg_len - NLMSG_LENGTH(sizeof(rtmsg)));
    uint32_t tbl = at.has(RTA_TABLE) ? at.u32(RTA_TABLE) : rt->rtm_table;
    if (tbl != table) return;
    uint32_t o = at.u32(RTA_OIF);
    if (oif && o != oif) return;
    size_t alen = rt->rtm_family == AF_INET ? 4 : 16;
    uint8_t zero[16] = {};
    const void* dst = zero;
    if (auto* d = at.get(RTA_DST); d && RTA_PAYLOAD(d) >= alen) dst = RTA_DATA(d);
    Napi::Object ob = Napi::Object::New(env);
    ob.Set("family", rt->rtm_family == AF_INET ? 4 : 6);
    ob.Set("dst", formatIp(rt->rtm_family, dst) + "/" + std::to_string(rt->rtm_dst_len));
    if (auto* g = at.get(RTA_GATEWAY); g && RTA_PAYLOAD(g) >= alen) ob.Set("gateway", formatIp(rt->rtm_family, RTA_DATA(g)));
    if (at.has(RTA_OIF)) ob.Set("oif", o);
    ob.Set("scope", rt->rtm_scope);
    ob.Set("table", tbl);
    if (at.has(RTA_PRIORITY)) ob.Set("metric", at.u32(RTA_PRIORITY));
    ob.Set("protocol", rt->rtm_protocol);
    ob.Set("type", rt->rtm_type);
    ob.Set("flags", rt->rtm_flags);
    if (auto* s = at.get(RTA_PREFSRC); s && RTA_PAYLOAD(s) >= alen) ob.Set("src", formatIp(rt->rtm_family, RTA_DATA(s)));
    arr.Set(n++, ob);
  });
  if (!ok) return throwNlError(env, e), env.Undefined();
  if (env.IsExceptionPending()) return env.Undefined();
  return arr;
}

}  // namespace np
