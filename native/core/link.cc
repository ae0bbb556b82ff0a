// Links: RTM_GETLINK / RTM_NEWLINK (veth with the peer placed in another
// namespace in the same message) / RTM_DELLINK.
#include "core/link.h"

#include <linux/if.h>
#include <linux/if_link.h>
#include <linux/veth.h>
#include <net/if_arp.h>

namespace np {

namespace {

// ifinfomsg identifying the link: by index, or by IFLA_IFNAME (the kernel
// looks names up itself for GET/NEW/DEL, saving a round trip).
void putLinkId(NlMsg& m, const LinkRef& ref) {
  ifinfomsg ifi{};
  ifi.ifi_family = AF_UNSPEC;
  ifi.ifi_index = static_cast<int>(ref.index);
  m.put(ifi);
  if (!ref.index && !ref.name.empty()) m.str(IFLA_IFNAME, ref.name);
}

// The attributes both ends of a veth carry.
void putVethEnd(NlMsg& m, const std::string& name, const VethSpec& s, const uint8_t* mac) {
  m.str(IFLA_IFNAME, name);
  if (s.mtu) m.u32(IFLA_MTU, s.mtu);
  if (mac) m.attr(IFLA_ADDRESS, mac, 6);
  if (s.numTxQueues) m.u32(IFLA_NUM_TX_QUEUES, s.numTxQueues);
  if (s.numRxQueues) m.u32(IFLA_NUM_RX_QUEUES, s.numRxQueues);
}

// Sends m and names the link in a failure.
bool requestFor(Handle& h, NlMsg& m, const std::string& subject, NlError& e) {
  if (h.sock.request(m, e)) return true;
  e.subject = subject;
  return false;
}

}  // namespace

NlMsg buildLinkGetMsg(const LinkRef& ref) {
  NlMsg m(RTM_GETLINK, 0);
  putLinkId(m, ref);
  m.u32(IFLA_EXT_MASK, RTEXT_FILTER_SKIP_STATS);
  return m;
}

// No index and no name: the request matches every link.
NlMsg buildLinkDumpMsg() { return buildLinkGetMsg(LinkRef{}); }

NlMsg buildVethAddMsg(const VethSpec& s) {
  NlMsg m(RTM_NEWLINK, NLM_F_CREATE | NLM_F_EXCL);
  ifinfomsg ifi{};
  ifi.ifi_family = AF_UNSPEC;
  m.put(ifi);
  putVethEnd(m, s.name, s, s.hasMac ? s.mac : nullptr);
  size_t li = m.nestBegin(IFLA_LINKINFO);
  m.str(IFLA_INFO_KIND, "veth");
  size_t data = m.nestBegin(IFLA_INFO_DATA);
  size_t peer = m.nestBegin(VETH_INFO_PEER);
  // VETH_INFO_PEER's payload is a full ifinfomsg followed by IFLA_* attributes.
  m.put(ifi);
  putVethEnd(m, s.peerName, s, s.hasPeerMac ? s.peerMac : nullptr);
  if (s.peerNsFd >= 0) m.u32(IFLA_NET_NS_FD, static_cast<uint32_t>(s.peerNsFd));
  m.nestEnd(peer);
  m.nestEnd(data);
  m.nestEnd(li);
  return m;
}

NlMsg buildLinkSetMsg(const LinkRef& ref, const LinkChange& c) {
  NlMsg m(RTM_NEWLINK, 0);
  ifinfomsg ifi{};
  ifi.ifi_family = AF_UNSPEC;
  ifi.ifi_index = static_cast<int>(ref.index);
  if (c.hasUp) {
    ifi.ifi_change = IFF_UP;
    ifi.ifi_flags = c.up ? IFF_UP : 0;
  }
  m.put(ifi);
  if (!ref.index) m.str(IFLA_IFNAME, ref.name);
  else if (!c.name.empty()) m.str(IFLA_IFNAME, c.name);
  if (c.mtu) m.u32(IFLA_MTU, c.mtu);
  if (c.hasGroup) m.u32(IFLA_GROUP, c.group);
  if (c.hasMac) m.attr(IFLA_ADDRESS, c.mac, 6);
  if (c.nsFd >= 0) m.u32(IFLA_NET_NS_FD, static_cast<uint32_t>(c.nsFd));
  return m;
}

NlMsg buildLinkDelMsg(const LinkRef& ref) {
  NlMsg m(RTM_DELLINK, 0);
  putLinkId(m, ref);
  return m;
}

NlMsg buildLinkDelGroupMsg(uint32_t group) {
  NlMsg m(RTM_DELLINK, 0);
  putLinkId(m, LinkRef{});
  m.u32(IFLA_GROUP, group);
  return m;
}

bool parseLink(const nlmsghdr* h, Link& d) {
  Attrs a;
  const ifinfomsg* ifi = fixedHeaderOf<ifinfomsg>(h, RTM_NEWLINK, a);
  if (!ifi) return false;
  d = Link{};
  d.index = static_cast<uint32_t>(ifi->ifi_index);
  d.flags = ifi->ifi_flags;
  d.name = a.str(IFLA_IFNAME);
  d.mtu = a.u32(IFLA_MTU);
  d.operState = a.u8(IFLA_OPERSTATE);
  d.group = a.u32(IFLA_GROUP);
  if (auto* m = a.get(IFLA_ADDRESS)) d.mac = formatMac(static_cast<const uint8_t*>(RTA_DATA(m)), RTA_PAYLOAD(m));
  if ((d.hasTx = a.has(IFLA_NUM_TX_QUEUES))) d.tx = a.u32(IFLA_NUM_TX_QUEUES);
  if ((d.hasRx = a.has(IFLA_NUM_RX_QUEUES))) d.rx = a.u32(IFLA_NUM_RX_QUEUES);
  if ((d.hasNsid = a.has(IFLA_LINK_NETNSID))) d.nsid = static_cast<int32_t>(a.u32(IFLA_LINK_NETNSID));
  // IFLA_LINK equal to the own index means "no parent", except when the
  // parent is in another namespace (a veth peer there may well have the
  // same ifindex).
  if (a.has(IFLA_LINK) && (a.u32(IFLA_LINK) != d.index || d.hasNsid)) {
    d.hasParent = true;
    d.parent = a.u32(IFLA_LINK);
  }
  if (auto* li = a.get(IFLA_LINKINFO)) d.kind = Attrs::nested(li).str(IFLA_INFO_KIND);
  if (d.kind.empty() && ifi->ifi_type == ARPHRD_LOOPBACK) d.kind = "loopback";
  return true;
}

bool linkGet(Handle& h, const LinkRef& ref, Link& out, bool& found, NlError& e) {
  NlMsg m = buildLinkGetMsg(ref);
  found = false;
  bool ok = h.sock.request(m, e, [&](const nlmsghdr* r) { found = parseLink(r, out) || found; });
  if (ok) return true;
  e.subject = ref.subject();
  if (e.err != ENODEV) return false;
  e = NlError{};
  found = false;
  return true;
}

bool linkIndex(Handle& h, const LinkRef& ref, uint32_t& index, NlError& e) {
  if (ref.index) {
    index = ref.index;
    return true;
  }
  Link d;
  bool found;
  if (!linkGet(h, ref, d, found, e)) return false;
  if (!found) {
    e.set(ENODEV, "RTM_GETLINK", ref.subject());
    return false;
  }
  index = d.index;
  return true;
}

bool filterIndex(Handle& h, const ListFilter& f, uint32_t& index, NlError& e) {
  index = 0;
  return !f.hasLink || linkIndex(h, f.link, index, e);
}

bool linkList(Handle& h, std::vector<Link>& out, NlError& e) {
  NlMsg m = buildLinkDumpMsg();
  return dumpParsed(h, m, parseLink, [](const Link&) { return true; }, out, e);
}

bool vethAdd(Handle& h, const VethSpec& spec, NlError& e) {
  NlMsg m = buildVethAddMsg(spec);
  return requestFor(h, m, spec.name, e);
}

bool linkSet(Handle& h, const LinkRef& ref, const LinkChange& change, NlError& e) {
  LinkRef target = ref;
  // A rename by name needs the index: IFLA_IFNAME would be read as the
  // lookup key, not the new name.
  if (!change.name.empty() && !target.index && !linkIndex(h, ref, target.index, e)) return false;
  NlMsg m = buildLinkSetMsg(target, change);
  return requestFor(h, m, target.subject(), e);
}

bool linkDel(Handle& h, const LinkRef& ref, NlError& e) {
  NlMsg m = buildLinkDelMsg(ref);
  return requestFor(h, m, ref.subject(), e);
}

}  // namespace np
