// Routes over rtnetlink, without N-API: RTM_NEWROUTE (add: CREATE|EXCL,
// replace: CREATE|REPLACE) / RTM_DELROUTE / RTM_GETROUTE.
#pragma once

#include <linux/rtnetlink.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/handle.h"
#include "core/ip.h"
#include "core/link.h"
#include "core/nl_msg.h"

namespace np {

struct RouteSpec {
  IpAddr dst;
  int dstLen = 0;
  std::string dstText;  // as given ('default' or a CIDR), for error subjects
  bool hasGw = false, hasSrc = false, hasDev = false, onlink = false;
  IpAddr gw, src;
  LinkRef dev;
  bool hasScope = false, hasProto = false, hasType = false, hasMetric = false;
  uint8_t scope = 0, proto = 0, type = RTN_UNICAST;
  uint32_t table = RT_TABLE_MAIN, metric = 0;
};

enum class RouteOp { kAdd, kReplace, kDel };

// One RTM_NEWROUTE answer (unicast families only).
struct Route {
  int family = 0;
  std::string dst;  // 'a/len'
  bool hasGateway = false, hasOif = false, hasMetric = false, hasSrc = false;
  std::string gateway, src;
  uint32_t oif = 0, table = 0, metric = 0;
  uint8_t scope = 0, protocol = 0, type = 0;
  uint32_t flags = 0;
};

struct RouteFilter : ListFilter {
  uint32_t table = RT_TABLE_MAIN;
  bool hasProto = false;
  uint8_t protocol = 0;
};

// oif: the resolved spec.dev (0 for none).
NlMsg buildRouteMsg(const RouteSpec& spec, uint32_t oif, RouteOp op);
inline NlMsg buildRouteDumpMsg(int family) { return buildFamilyDumpMsg<rtmsg>(RTM_GETROUTE, family); }
// false for other messages, other families and cloned (cache) routes.
bool parseRoute(const nlmsghdr* h, Route& out);

bool routeChange(Handle& h, const RouteSpec& spec, RouteOp op, NlError& e);
bool routeList(Handle& h, const RouteFilter& f, std::vector<Route>& out, NlError& e);

}  // namespace np
