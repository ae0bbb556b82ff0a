// Neighbours and the bridge FDB of a VXLAN device over rtnetlink, without
// N-API: RTM_NEWNEIGH / RTM_DELNEIGH / RTM_GETNEIGH, on AF_INET/AF_INET6 for
// neighbours and on AF_BRIDGE with NTF_SELF for FDB entries.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/handle.h"
#include "core/ip.h"
#include "core/link.h"
#include "core/nl_msg.h"

namespace np {

// A permanent neighbour entry (lladdr unused by a delete).
struct NeighSpec {
  LinkRef dev;
  IpAddr dst;
  uint8_t lladdr[6] = {};
};

// A VXLAN device's FDB entry: frames for lladdr go to the remote VTEP dst.
struct FdbSpec {
  LinkRef dev;
  uint8_t lladdr[6] = {};
  IpAddr dst;
};

// One RTM_NEWNEIGH answer on AF_INET/AF_INET6.
struct Neigh {
  uint32_t index = 0;
  int family = 0;
  std::string dst, lladdr;
  bool hasLladdr = false, permanent = false;
  uint16_t state = 0;
};

// One RTM_NEWNEIGH answer on AF_BRIDGE.
struct FdbEntry {
  uint32_t index = 0;
  std::string lladdr, dst;
  bool hasDst = false;
  uint16_t state = 0;
  uint8_t flags = 0;
};

// set: RTM_NEWNEIGH create-or-replace; else RTM_DELNEIGH.
NlMsg buildNeighMsg(const NeighSpec& spec, uint32_t index, bool set);
NlMsg buildFdbMsg(const FdbSpec& spec, uint32_t index, bool set);
// A dump of `family`'s neighbours (AF_BRIDGE: FDB) on one link.
NlMsg buildNeighDumpMsg(int family, uint32_t index);
bool parseNeigh(const nlmsghdr* h, Neigh& out);
bool parseFdb(const nlmsghdr* h, FdbEntry& out);

bool neighSet(Handle& h, const NeighSpec& spec, NlError& e);
bool neighDel(Handle& h, const NeighSpec& spec, NlError& e);
// filter.link is required.
bool neighList(Handle& h, const ListFilter& f, std::vector<Neigh>& out, NlError& e);
bool fdbSet(Handle& h, const FdbSpec& spec, NlError& e);
bool fdbDel(Handle& h, const FdbSpec& spec, NlError& e);
// f.link is required; f.family is ignored (the FDB is AF_BRIDGE).
bool fdbList(Handle& h, const ListFilter& f, std::vector<FdbEntry>& out, NlError& e);

}  // namespace np
