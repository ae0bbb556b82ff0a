// Links over rtnetlink, without N-API: typed requests, the RTM_*LINK messages
// they become, the parsed answer, and the ops that send them on a Handle.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/handle.h"
#include "core/ip.h"
#include "core/nl_msg.h"

namespace np {

// One RTM_NEWLINK answer.
struct Link {
  uint32_t index = 0;
  std::string name, kind, mac;
  uint32_t mtu = 0, flags = 0;
  uint8_t operState = 0;
  bool hasTx = false, hasRx = false, hasParent = false, hasNsid = false;
  uint32_t tx = 0, rx = 0, parent = 0, group = 0;
  int32_t nsid = 0;
};

// A veth pair; peerNsFd >= 0 places the peer in that namespace in the same message.
struct VethSpec {
  std::string name, peerName;
  uint32_t mtu = 0, numRxQueues = 0, numTxQueues = 0;  // 0: kernel default
  bool hasMac = false, hasPeerMac = false;
  uint8_t mac[6] = {}, peerMac[6] = {};
  int peerNsFd = -1;
};

// What linkSet changes; absent fields stay as they are.
struct LinkChange {
  bool hasUp = false, up = false, hasMac = false, hasGroup = false;
  uint32_t mtu = 0, group = 0;
  uint8_t mac[6] = {};
  std::string name;  // a rename; needs the link by index
  int nsFd = -1;     // move into this namespace
};

// What the address, route and neighbour lists filter on (besides their own fields).
struct ListFilter {
  int family = 0;  // AF_UNSPEC, AF_INET or AF_INET6
  bool hasLink = false;
  LinkRef link;
};

NlMsg buildLinkGetMsg(const LinkRef& ref);
NlMsg buildLinkDumpMsg();
NlMsg buildVethAddMsg(const VethSpec& spec);
// ref by index when change.name is set (IFLA_IFNAME would be the lookup key).
NlMsg buildLinkSetMsg(const LinkRef& ref, const LinkChange& change);
NlMsg buildLinkDelMsg(const LinkRef& ref);
// Every link of the namespace in `group` (ifindex 0, no name, IFLA_GROUP).
NlMsg buildLinkDelGroupMsg(uint32_t group);
// false when h is not an RTM_NEWLINK with an ifinfomsg.
bool parseLink(const nlmsghdr* h, Link& out);

// found=false (and true returned) when the kernel says ENODEV.
bool linkGet(Handle& h, const LinkRef& ref, Link& out, bool& found, NlError& e);
// Resolves a link to its ifindex (RTM_GETLINK when given by name); ENODEV is an error.
bool linkIndex(Handle& h, const LinkRef& ref, uint32_t& index, NlError& e);
// The filter's link as an ifindex (0 when it names none).
bool filterIndex(Handle& h, const ListFilter& f, uint32_t& index, NlError& e);
bool linkList(Handle& h, std::vector<Link>& out, NlError& e);
bool vethAdd(Handle& h, const VethSpec& spec, NlError& e);
bool linkSet(Handle& h, const LinkRef& ref, const LinkChange& change, NlError& e);
bool linkDel(Handle& h, const LinkRef& ref, NlError& e);

}  // namespace np
