// Routes: RTM_NEWROUTE / RTM_DELROUTE / RTM_GETROUTE.
#include "core/route.h"

#include <sys/socket.h>

namespace np {

NlMsg buildRouteMsg(const RouteSpec& r, uint32_t oif, RouteOp op) {
  const bool del = op == RouteOp::kDel;
  const int flags = op == RouteOp::kAdd       ? NLM_F_CREATE | NLM_F_EXCL
                    : op == RouteOp::kReplace ? NLM_F_CREATE | NLM_F_REPLACE
                                              : 0;
  NlMsg m(del ? RTM_DELROUTE : RTM_NEWROUTE, static_cast<uint16_t>(flags));
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
    const int dflt = r.hasGw || noNextHop ? RT_SCOPE_UNIVERSE : RT_SCOPE_LINK;
    rt.rtm_scope = r.hasScope ? r.scope : static_cast<uint8_t>(dflt);
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
  return m;
}

bool parseRoute(const nlmsghdr* r, Route& out) {
  Attrs at;
  const rtmsg* rt = fixedHeaderOf<rtmsg>(r, RTM_NEWROUTE, at);
  if (!rt || (rt->rtm_family != AF_INET && rt->rtm_family != AF_INET6)) return false;
  if (rt->rtm_flags & RTM_F_CLONED) return false;
  const size_t alen = rt->rtm_family == AF_INET ? 4 : 16;
  // The address of an attribute, when it is long enough for the family.
  auto addr = [&](unsigned type) -> const void* {
    const rtattr* a = at.get(type);
    return a && RTA_PAYLOAD(a) >= alen ? RTA_DATA(a) : nullptr;
  };
  static const uint8_t kZero[16] = {};
  out = Route{};
  const void* dst = addr(RTA_DST);
  out.family = rt->rtm_family;
  out.dst = formatIp(rt->rtm_family, dst ? dst : kZero) + "/" + std::to_string(rt->rtm_dst_len);
  if (const void* g = addr(RTA_GATEWAY)) {
    out.hasGateway = true;
    out.gateway = formatIp(rt->rtm_family, g);
  }
  if (const void* s = addr(RTA_PREFSRC)) {
    out.hasSrc = true;
    out.src = formatIp(rt->rtm_family, s);
  }
  out.hasOif = at.has(RTA_OIF);
  out.oif = at.u32(RTA_OIF);
  out.table = at.has(RTA_TABLE) ? at.u32(RTA_TABLE) : rt->rtm_table;
  out.hasMetric = at.has(RTA_PRIORITY);
  out.metric = at.u32(RTA_PRIORITY);
  out.scope = rt->rtm_scope;
  out.protocol = rt->rtm_protocol;
  out.type = rt->rtm_type;
  out.flags = rt->rtm_flags;
  return true;
}

bool routeChange(Handle& h, const RouteSpec& spec, RouteOp op, NlError& e) {
  uint32_t oif = 0;
  if (spec.hasDev && !linkIndex(h, spec.dev, oif, e)) return false;
  NlMsg m = buildRouteMsg(spec, oif, op);
  if (h.sock.request(m, e)) return true;
  e.subject = spec.dstText;
  return false;
}

bool routeList(Handle& h, const RouteFilter& f, std::vector<Route>& out, NlError& e) {
  uint32_t oif;
  if (!filterIndex(h, f, oif, e)) return false;
  NlMsg m = buildRouteDumpMsg(f.family);
  auto keep = [&](const Route& d) {
    return (!f.hasProto || d.protocol == f.protocol) && d.table == f.table && (!oif || d.oif == oif);
  };
  return dumpParsed(h, m, parseRoute, keep, out, e);
}

}  // namespace np
