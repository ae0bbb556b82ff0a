// Conntrack entries naming an address, deleted over ctnetlink, without N-API.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/handle.h"
#include "core/ip.h"

namespace np {

// Deletes every entry whose original or reply tuple has one of addrs as
// source or destination, in the handle's namespace (a ctnetlink socket of its
// own, opened there). deleted counts what this call removed.
bool conntrackFlush(Handle& h, const std::vector<IpAddr>& addrs, uint32_t& deleted, NlError& e);

// One tuple of an entry: addresses, protocol number, ports where the protocol has them.
struct CtTuple {
  std::string src, dst;
  uint8_t proto = 0;
  bool hasPorts = false;
  uint16_t sport = 0, dport = 0;
};
struct CtEntry {
  uint8_t family = 0;  // AF_INET or AF_INET6
  CtTuple orig, reply;
  bool hasReply = false;
  bool hasId = false;
  uint32_t id = 0;  // host order
  // Opaque, for conntrackDelete: family, zone, id and the original tuple as dumped.
  std::vector<uint8_t> key;
};

// The entries conntrackFlush would delete, not deleted.
bool conntrackList(Handle& h, const std::vector<IpAddr>& addrs, std::vector<CtEntry>& out, NlError& e);
// Whether a key is one conntrackList could give (a whole original tuple with addresses and protocol).
bool ctKeyValid(const std::vector<uint8_t>& key);
// Deletes the entries of the keys (valid ones only) by tuple, zone and id: an entry gone
// meanwhile or re-created under the same tuple is left alone and not counted.
bool conntrackDelete(Handle& h, const std::vector<std::vector<uint8_t>>& keys, uint32_t& deleted, NlError& e);

// A ctnetlink event (NEW or DESTROY, from the multicast groups) or an entry of a dump, with its
// accounting (net.netfilter.nf_conntrack_acct=1 when the entry was created) and TCP state.
struct CtEvent {
  enum Type : uint8_t { kNew, kDestroy, kDump } type = kDump;
  uint8_t family = 0;  // AF_INET or AF_INET6
  CtTuple orig, reply;
  bool hasReply = false;
  bool hasId = false;
  uint32_t id = 0;  // host order
  bool hasCounters = false;
  uint64_t origPackets = 0, origBytes = 0, replyPackets = 0, replyBytes = 0;
  uint8_t tcpState = 0;  // TCP_CONNTRACK_* + 1; 0 when not TCP
  bool hasMark = false;
  uint32_t mark = 0;
};

// One ctnetlink message (IPCTNL_MSG_CT_NEW or IPCTNL_MSG_CT_DELETE) as an event; false for others.
// A NEW without NLM_F_CREATE is an update (only sent to the update group) and is taken as kDump.
bool parseCtEvent(const nlmsghdr* m, CtEvent& out);
// Every entry of the handle's namespace, with accounting.
bool conntrackDump(Handle& h, std::vector<CtEvent>& out, NlError& e);

}  // namespace np
