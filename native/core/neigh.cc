// Neighbours (permanent entries) and VXLAN FDB entries.
#include "core/neigh.h"

#include <linux/neighbour.h>
#include <sys/socket.h>

#ifndef AF_BRIDGE
#define AF_BRIDGE 7
#endif

namespace np {

namespace {

NlMsg ndMsg(bool set, int family, uint32_t index, uint16_t state, uint8_t flags) {
  NlMsg m(set ? RTM_NEWNEIGH : RTM_DELNEIGH, set ? NLM_F_CREATE | NLM_F_REPLACE : 0);
  ndmsg nd{};
  nd.ndm_family = static_cast<uint8_t>(family);
  nd.ndm_ifindex = static_cast<int>(index);
  nd.ndm_state = state;
  nd.ndm_flags = flags;
  m.put(nd);
  return m;
}

// Resolves the link, sends m built for its index, names the entry in a failure.
template <typename Build>
bool neighRequest(Handle& h, const LinkRef& dev, const std::string& what, Build build, NlError& e) {
  uint32_t index;
  if (!linkIndex(h, dev, index, e)) return false;
  NlMsg m = build(index);
  if (h.sock.request(m, e)) return true;
  e.subject = what + " dev " + dev.subject();
  return false;
}

// The entries of `family` on dev (parse also checks the entry's family).
template <typename Entry>
bool neighDump(Handle& h, int family, const LinkRef& dev, bool (*parse)(const nlmsghdr*, Entry&),
               std::vector<Entry>& out, NlError& e) {
  uint32_t index;
  if (!linkIndex(h, dev, index, e)) return false;
  NlMsg m = buildNeighDumpMsg(family, index);
  return dumpParsed(h, m, parse, [&](const Entry& d) { return d.index == index; }, out, e);
}

}  // namespace

NlMsg buildNeighMsg(const NeighSpec& s, uint32_t index, bool set) {
  NlMsg m = ndMsg(set, s.dst.family, index, set ? NUD_PERMANENT : 0, 0);
  m.attr(NDA_DST, s.dst.bytes, s.dst.len());
  if (set) m.attr(NDA_LLADDR, s.lladdr, 6);
  return m;
}

NlMsg buildFdbMsg(const FdbSpec& s, uint32_t index, bool set) {
  // NTF_SELF: the entry belongs to the VXLAN device's own FDB (not a bridge
  // master's), which is where the VXLAN driver looks up the remote VTEP.
  NlMsg m = ndMsg(set, AF_BRIDGE, index, NUD_PERMANENT, NTF_SELF);
  m.attr(NDA_LLADDR, s.lladdr, 6);
  m.attr(NDA_DST, s.dst.bytes, s.dst.len());
  return m;
}

NlMsg buildNeighDumpMsg(int family, uint32_t index) {
  NlMsg m(RTM_GETNEIGH, 0);
  ndmsg nd{};
  nd.ndm_family = static_cast<uint8_t>(family);
  nd.ndm_ifindex = static_cast<int>(index);
  m.put(nd);
  if (index) m.u32(NDA_IFINDEX, index);
  return m;
}

bool parseNeigh(const nlmsghdr* r, Neigh& d) {
  Attrs at;
  const ndmsg* n = fixedHeaderOf<ndmsg>(r, RTM_NEWNEIGH, at);
  if (!n || (n->ndm_family != AF_INET && n->ndm_family != AF_INET6)) return false;
  auto* dst = at.get(NDA_DST);
  if (!dst || RTA_PAYLOAD(dst) != (n->ndm_family == AF_INET ? 4u : 16u)) return false;
  d = Neigh{};
  d.index = static_cast<uint32_t>(n->ndm_ifindex);
  d.family = n->ndm_family;
  d.dst = formatIp(n->ndm_family, RTA_DATA(dst));
  if (auto* ll = at.get(NDA_LLADDR)) {
    d.hasLladdr = true;
    d.lladdr = formatMac(static_cast<const uint8_t*>(RTA_DATA(ll)), RTA_PAYLOAD(ll));
  }
  d.state = n->ndm_state;
  d.permanent = (n->ndm_state & NUD_PERMANENT) != 0;
  return true;
}

bool parseFdb(const nlmsghdr* r, FdbEntry& d) {
  Attrs at;
  const ndmsg* n = fixedHeaderOf<ndmsg>(r, RTM_NEWNEIGH, at);
  if (!n) return false;
  auto* ll = at.get(NDA_LLADDR);
  if (!ll || RTA_PAYLOAD(ll) != 6) return false;
  d = FdbEntry{};
  d.index = static_cast<uint32_t>(n->ndm_ifindex);
  d.lladdr = formatMac(static_cast<const uint8_t*>(RTA_DATA(ll)), 6);
  if (auto* dst = at.get(NDA_DST)) {
    if (RTA_PAYLOAD(dst) == 4) d.dst = formatIp(AF_INET, RTA_DATA(dst));
    else if (RTA_PAYLOAD(dst) == 16) d.dst = formatIp(AF_INET6, RTA_DATA(dst));
    d.hasDst = !d.dst.empty();
  }
  d.state = n->ndm_state;
  d.flags = n->ndm_flags;
  return true;
}

bool neighSet(Handle& h, const NeighSpec& s, NlError& e) {
  return neighRequest(h, s.dev, formatIp(s.dst), [&](uint32_t i) { return buildNeighMsg(s, i, true); }, e);
}
bool neighDel(Handle& h, const NeighSpec& s, NlError& e) {
  return neighRequest(h, s.dev, formatIp(s.dst), [&](uint32_t i) { return buildNeighMsg(s, i, false); }, e);
}

bool fdbSet(Handle& h, const FdbSpec& s, NlError& e) {
  const std::string what = formatMac(s.lladdr, 6) + " dst " + formatIp(s.dst);
  return neighRequest(h, s.dev, what, [&](uint32_t i) { return buildFdbMsg(s, i, true); }, e);
}
bool fdbDel(Handle& h, const FdbSpec& s, NlError& e) {
  const std::string what = formatMac(s.lladdr, 6) + " dst " + formatIp(s.dst);
  return neighRequest(h, s.dev, what, [&](uint32_t i) { return buildFdbMsg(s, i, false); }, e);
}

bool neighList(Handle& h, const ListFilter& f, std::vector<Neigh>& out, NlError& e) {
  return neighDump(h, f.family, f.link, parseNeigh, out, e);
}

bool fdbList(Handle& h, const ListFilter& f, std::vector<FdbEntry>& out, NlError& e) {
  return neighDump(h, AF_BRIDGE, f.link, parseFdb, out, e);
}

}  // namespace np
