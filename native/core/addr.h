// Addresses over rtnetlink, without N-API: RTM_NEWADDR / RTM_DELADDR / RTM_GETADDR.
#pragma once

#include <linux/if_addr.h>
#include <linux/rtnetlink.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/handle.h"
#include "core/ip.h"
#include "core/link.h"
#include "core/nl_msg.h"

namespace np {

struct AddrSpec {
  LinkRef link;
  IpAddr ip;
  int prefix = 0;
  bool nodad = false;  // IPv6 only: no duplicate address detection
  uint8_t scope = RT_SCOPE_UNIVERSE;
  std::string cidr;  // as given, for error subjects
};

// One RTM_NEWADDR answer.
struct Addr {
  uint32_t index = 0;
  int family = 0;
  std::string address;
  int prefix = 0;
  uint8_t scope = 0;
  uint32_t flags = 0;
};

NlMsg buildAddrMsg(const AddrSpec& spec, uint32_t index, bool add);
inline NlMsg buildAddrDumpMsg(int family) { return buildFamilyDumpMsg<ifaddrmsg>(RTM_GETADDR, family); }
// false for other messages, other families and answers without an address.
bool parseAddr(const nlmsghdr* h, Addr& out);

bool addrAdd(Handle& h, const AddrSpec& spec, NlError& e);
bool addrDel(Handle& h, const AddrSpec& spec, NlError& e);
bool addrList(Handle& h, const ListFilter& f, std::vector<Addr>& out, NlError& e);

}  // namespace np
