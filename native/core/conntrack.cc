// Conntrack entries of an address (without N-API), deleted over ctnetlink (NETLINK_NETFILTER,
// subsystem CTNETLINK): a dump of the table, then one IPCTNL_MSG_CT_DELETE per
// entry whose original or reply tuple has one of the addresses as source or
// destination. A deleted pod's address is reused by the next pod; an entry
// left behind would let that pod inherit an established (allowed) state.
#include <linux/netfilter/nfnetlink.h>
#include <linux/netfilter/nfnetlink_conntrack.h>
#include <sys/socket.h>

#include <cstring>
#include <vector>

#include "core/conntrack.h"
#include "core/netns.h"

namespace np {

namespace {

constexpr uint16_t kCtGet = (NFNL_SUBSYS_CTNETLINK << 8) | IPCTNL_MSG_CT_GET;
constexpr uint16_t kCtDelete = (NFNL_SUBSYS_CTNETLINK << 8) | IPCTNL_MSG_CT_DELETE;

// One entry to delete: its L3 family, its original tuple (the nested
// attribute as the dump gave it, copied back unchanged) and its zone.
struct Victim {
  uint8_t family = 0;
  std::vector<uint8_t> tuple;
  bool hasZone = false;
  uint16_t zone = 0;
};

bool sameAddr(const rtattr* a, const IpAddr& ip) {
  return a && RTA_PAYLOAD(a) == ip.len() && std::memcmp(RTA_DATA(a), ip.bytes, ip.len()) == 0;
}

// Does the tuple (CTA_TUPLE_ORIG or CTA_TUPLE_REPLY) name one of the addresses?
bool tupleHas(const rtattr* tuple, const std::vector<IpAddr>& addrs) {
  if (!tuple) return false;
  Attrs t = Attrs::nested(tuple);
  const rtattr* ipA = t.get(CTA_TUPLE_IP);
  if (!ipA) return false;
  Attrs ip = Attrs::nested(ipA);
  for (const IpAddr& a : addrs) {
    const unsigned src = a.family == AF_INET ? CTA_IP_V4_SRC : CTA_IP_V6_SRC;
    const unsigned dst = a.family == AF_INET ? CTA_IP_V4_DST : CTA_IP_V6_DST;
    if (sameAddr(ip.get(src), a) || sameAddr(ip.get(dst), a)) return true;
  }
  return false;
}

// The ctnetlink messages: a dump of both families, and the delete of one entry.
NlMsg buildCtDumpMsg() {
  NlMsg m(kCtGet, 0);
  nfgenmsg g{};
  g.nfgen_family = AF_UNSPEC;
  g.version = NFNETLINK_V0;
  m.put(g);
  return m;
}

NlMsg buildCtDeleteMsg(const Victim& v) {
  NlMsg del(kCtDelete, 0);
  nfgenmsg dg{};
  dg.nfgen_family = v.family;
  dg.version = NFNETLINK_V0;
  del.put(dg);
  const size_t t = del.nestBegin(CTA_TUPLE_ORIG | NLA_F_NESTED);
  // The nested payload as dumped (its own header excluded).
  del.raw(v.tuple.data() + RTA_LENGTH(0), v.tuple.size() - RTA_LENGTH(0));
  del.nestEnd(t);
  if (v.hasZone) del.attr(CTA_ZONE, &v.zone, 2);
  return del;
}

// The entry to delete when the answer m names one of addrs.
bool parseVictim(const nlmsghdr* m, const std::vector<IpAddr>& addrs, Victim& v) {
  if (NFNL_SUBSYS_ID(m->nlmsg_type) != NFNL_SUBSYS_CTNETLINK) return false;
  if (m->nlmsg_len < NLMSG_LENGTH(sizeof(nfgenmsg))) return false;
  auto* gm = static_cast<const nfgenmsg*>(NLMSG_DATA(m));
  const size_t off = NLMSG_ALIGN(sizeof(nfgenmsg));
  Attrs at(static_cast<const uint8_t*>(NLMSG_DATA(m)) + off, m->nlmsg_len - NLMSG_LENGTH(off));
  const rtattr* orig = at.get(CTA_TUPLE_ORIG);
  if (!orig || !(tupleHas(orig, addrs) || tupleHas(at.get(CTA_TUPLE_REPLY), addrs))) return false;
  v.family = gm->nfgen_family;
  auto* p = reinterpret_cast<const uint8_t*>(orig);
  v.tuple.assign(p, p + orig->rta_len);
  if (const rtattr* z = at.get(CTA_ZONE); z && RTA_PAYLOAD(z) >= 2) {
    v.hasZone = true;
    std::memcpy(&v.zone, RTA_DATA(z), 2);
  }
  return true;
}

std::string subjectOf(const std::vector<IpAddr>& addrs) {
  std::string s;
  for (const IpAddr& a : addrs) s += (s.empty() ? "" : ",") + formatIp(a.family, a.bytes);
  return s;
}

}  // namespace

bool conntrackFlush(Handle& h, const std::vector<IpAddr>& addrs, uint32_t& deleted, NlError& e) {
  deleted = 0;
  if (addrs.empty()) return true;
  NlSocket sock;
  auto fail = [&](const char* op) {
    e.op = op;
    e.subject = subjectOf(addrs) + (h.nsPath.empty() ? "" : " in " + h.nsPath);
    if (e.err == EPROTONOSUPPORT || e.err == EOPNOTSUPP)
      e.extack = "the kernel has no conntrack netlink support (module nf_conntrack_netlink)";
    return false;
  };
  {
    NsSwitch sw(h.nsFd, e);
    if (sw.ok()) sock.open(e, NETLINK_NETFILTER);
  }
  if (e.failed()) return fail("socket(NETLINK_NETFILTER)");

  // AF_UNSPEC dumps both families; each message's nfgen_family is its L3 family.
  NlMsg dump = buildCtDumpMsg();
  std::vector<Victim> victims;
  bool ok = sock.dump(dump, e, [&](const nlmsghdr* m) {
    Victim v;
    if (parseVictim(m, addrs, v)) victims.push_back(std::move(v));
  });
  if (!ok) return fail("IPCTNL_MSG_CT_GET");

  for (const Victim& v : victims) {
    // Never without the tuple: a CT_DELETE without one flushes the whole table.
    if (v.tuple.empty()) continue;
    NlMsg del = buildCtDeleteMsg(v);
    NlError de;
    if (sock.request(del, de)) {
      ++deleted;
      continue;
    }
    // Gone meanwhile (expired, or deleted by someone else): what we wanted.
    if (de.err == ENOENT) continue;
    e = de;
    return fail("IPCTNL_MSG_CT_DELETE");
  }
  return true;
}

}  // namespace np
