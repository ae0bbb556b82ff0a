// Routes: the JS face of core/route (routeAdd, routeReplace, routeDel, routeList).
#include <sys/socket.h>

#include "bind/ops.h"
#include "core/names.h"
#include "core/route.h"

namespace np {

namespace {

bool readRoute(Args& a, const Napi::Value& arg, RouteSpec& r) {
  Napi::Object o;
  if (!a.object(arg, "route", o)) return false;
  Napi::Value dstv = a.prop(o, "dst");
  Napi::Value v;
  if (Args::present(v = a.prop(o, "gateway")) && a.ip(v, "route.gateway", r.gw)) r.hasGw = true;
  if (Args::present(v = a.prop(o, "src")) && a.ip(v, "route.src", r.src)) r.hasSrc = true;
  if (Args::present(v = a.prop(o, "dev")) && a.link(v, "route.dev", r.dev)) r.hasDev = true;
  if (Args::present(v = a.prop(o, "scope")) && a.scope(v, "route.scope", r.scope)) r.hasScope = true;
  if (Args::present(v = a.prop(o, "onlink"))) a.boolean(v, "route.onlink", r.onlink);
  if (Args::present(v = a.prop(o, "table"))) a.uint(v, "route.table", 1, 0xffffffffu, r.table);
  if (Args::present(v = a.prop(o, "metric")) && a.uint(v, "route.metric", 0, 0xffffffffu, r.metric))
    r.hasMetric = true;
  if (Args::present(v = a.prop(o, "protocol"))) {
    const char* expect = "'boot', 'static', 'kernel' or an integer 0..255";
    uint32_t n = 0;
    if (v.IsString()) {
      if (!parseRouteProtocolName(v.As<Napi::String>().Utf8Value(), r.proto)) a.fail("route.protocol", expect, v);
    } else if (!v.IsNumber()) {
      a.fail("route.protocol", expect, v);
    } else if (a.uint(v, "route.protocol", 0, 255, n)) {
      r.proto = static_cast<uint8_t>(n);
    }
    r.hasProto = true;
  }
  if (Args::present(v = a.prop(o, "type"))) {
    std::string t;
    if (a.string(v, "route.type", t)) {
      if (!parseRouteTypeName(t, r.type)) a.fail("route.type", "'unicast', 'blackhole' or 'unreachable'", v);
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
  const std::string same = "of the same family as route.dst '" + r.dstText + "'";
  if (r.hasGw && r.gw.family != r.dst.family) return a.failText("route.gateway", same, "'" + formatIp(r.gw) + "'");
  if (r.hasSrc && r.src.family != r.dst.family) return a.failText("route.src", same, "'" + formatIp(r.src) + "'");
  // A blackhole/unreachable route has no next hop: the kernel would refuse
  // one with a less helpful EINVAL.
  if (r.type != RTN_UNICAST && (r.hasGw || r.hasDev))
    return a.failText("route.type", "'unicast' when route.gateway or route.dev is given",
                      std::string(r.type == RTN_BLACKHOLE ? "'blackhole'" : "'unreachable'"));
  return true;
}

void routeToJs(const Route& d, Napi::Object& ob) {
  ob.Set("family", d.family == AF_INET ? 4 : 6);
  ob.Set("dst", d.dst);
  if (d.hasGateway) ob.Set("gateway", d.gateway);
  if (d.hasOif) ob.Set("oif", d.oif);
  ob.Set("scope", d.scope);
  ob.Set("table", d.table);
  if (d.hasMetric) ob.Set("metric", d.metric);
  ob.Set("protocol", d.protocol);
  ob.Set("type", d.type);
  ob.Set("flags", d.flags);
  if (d.hasSrc) ob.Set("src", d.src);
}

Napi::Value routeChangeJs(Handle& h, const Napi::CallbackInfo& info, const char* fn, RouteOp op) {
  Napi::Env env = info.Env();
  Args a(env, fn);
  RouteSpec r;
  if (!readRoute(a, info[0], r)) return env.Undefined();
  NlError e;
  if (!routeChange(h, r, op, e)) return throwNlError(env, e), env.Undefined();
  return env.Undefined();
}

}  // namespace

Napi::Value RouteAdd(Handle& h, const Napi::CallbackInfo& i) { return routeChangeJs(h, i, "routeAdd", RouteOp::kAdd); }
Napi::Value RouteDel(Handle& h, const Napi::CallbackInfo& i) { return routeChangeJs(h, i, "routeDel", RouteOp::kDel); }
Napi::Value RouteReplace(Handle& h, const Napi::CallbackInfo& i) {
  return routeChangeJs(h, i, "routeReplace", RouteOp::kReplace);
}

Napi::Value RouteList(Handle& h, const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Args a(env, "routeList");
  RouteFilter f;
  Napi::Object o;
  if (!a.listOptions(info[0], true, "link", true, f, &o)) return env.Undefined();
  if (!o.IsEmpty()) {
    Napi::Value v;
    uint32_t proto = 0;
    if (Args::present(v = a.prop(o, "table"))) a.uint(v, "options.table", 1, 0xffffffffu, f.table);
    if (Args::present(v = a.prop(o, "protocol"))) f.hasProto = a.uint(v, "options.protocol", 0, 255, proto);
    if (!a.ok()) return env.Undefined();
    f.protocol = static_cast<uint8_t>(proto);
  }
  return listToJs(env, h, f, routeList, routeToJs);
}

}  // namespace np
