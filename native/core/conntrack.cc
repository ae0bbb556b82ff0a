// Conntrack entries of an address (without N-API), deleted over ctnetlink (NETLINK_NETFILTER,
// subsystem CTNETLINK): a dump of the table, then one IPCTNL_MSG_CT_DELETE per
// entry whose original or reply tuple has one of the addresses as source or
// destination. A deleted pod's address is reused by the next pod; an entry
// left behind would let that pod inherit an established (allowed) state.
// conntrackList/conntrackDelete split the same into its two halves, so the
// agent can delete only the entries a policy change denies.
#include <linux/netfilter/nfnetlink.h>
#include <linux/netfilter/nfnetlink_conntrack.h>
#include <sys/socket.h>

#include <arpa/inet.h>

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
  // CTA_ID (network order): a delete never takes a newer entry with the same tuple.
  bool hasId = false;
  uint32_t id = 0;
  const rtattr* reply = nullptr;  // valid only inside the dump callback
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
  if (v.hasId) del.attr(CTA_ID, &v.id, 4);
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
  if (const rtattr* id = at.get(CTA_ID); id && RTA_PAYLOAD(id) >= 4) {
    v.hasId = true;
    std::memcpy(&v.id, RTA_DATA(id), 4);
  }
  v.reply = at.get(CTA_TUPLE_REPLY);
  return true;
}

void parseTuple(const rtattr* tuple, CtTuple& out) {
  Attrs t = Attrs::nested(tuple);
  if (const rtattr* ipA = t.get(CTA_TUPLE_IP)) {
    Attrs ip = Attrs::nested(ipA);
    auto put = [&](unsigned a, int fam, unsigned len, std::string& to) {
      const rtattr* x = ip.get(a);
      if (x && RTA_PAYLOAD(x) == len) to = formatIp(fam, RTA_DATA(x));
    };
    put(CTA_IP_V4_SRC, AF_INET, 4, out.src);
    put(CTA_IP_V4_DST, AF_INET, 4, out.dst);
    put(CTA_IP_V6_SRC, AF_INET6, 16, out.src);
    put(CTA_IP_V6_DST, AF_INET6, 16, out.dst);
  }
  if (const rtattr* pA = t.get(CTA_TUPLE_PROTO)) {
    Attrs pr = Attrs::nested(pA);
    out.proto = pr.u8(CTA_PROTO_NUM);
    const rtattr* sp = pr.get(CTA_PROTO_SRC_PORT);
    const rtattr* dp = pr.get(CTA_PROTO_DST_PORT);
    if (sp && dp && RTA_PAYLOAD(sp) >= 2 && RTA_PAYLOAD(dp) >= 2) {
      out.hasPorts = true;
      std::memcpy(&out.sport, RTA_DATA(sp), 2);
      std::memcpy(&out.dport, RTA_DATA(dp), 2);
      out.sport = ntohs(out.sport);
      out.dport = ntohs(out.dport);
    }
  }
}

// key: family(1) hasZone(1) zone(2) hasId(1) pad(3) id(4, network order) tuple(...)
constexpr size_t kKeyHead = 12;

std::vector<uint8_t> keyOf(const Victim& v) {
  std::vector<uint8_t> k(kKeyHead);
  k[0] = v.family;
  k[1] = v.hasZone;
  std::memcpy(&k[2], &v.zone, 2);
  k[4] = v.hasId;
  std::memcpy(&k[8], &v.id, 4);
  k.insert(k.end(), v.tuple.begin(), v.tuple.end());
  return k;
}

Victim victimOf(const std::vector<uint8_t>& k) {
  Victim v;
  v.family = k[0];
  v.hasZone = k[1];
  std::memcpy(&v.zone, &k[2], 2);
  v.hasId = k[4];
  std::memcpy(&v.id, &k[8], 4);
  v.tuple.assign(k.begin() + kKeyHead, k.end());
  return v;
}

bool openCt(Handle& h, NlSocket& sock, NlError& e) {
  NsSwitch sw(h.nsFd, e);
  if (sw.ok()) sock.open(e, NETLINK_NETFILTER);
  return !e.failed();
}

bool ctFail(Handle& h, NlError& e, const char* op, const std::string& subject) {
  e.op = op;
  e.subject = subject + (h.nsPath.empty() ? "" : " in " + h.nsPath);
  if (e.err == EPROTONOSUPPORT || e.err == EOPNOTSUPP)
    e.extack = "the kernel has no conntrack netlink support (module nf_conntrack_netlink)";
  return false;
}

// CT_DELETE of one entry, counted in deleted. One gone meanwhile (expired, or
// deleted by someone else) is what we wanted.
bool deleteOne(NlSocket& sock, const Victim& v, uint32_t& deleted, NlError& e) {
  NlMsg del = buildCtDeleteMsg(v);
  NlError de;
  if (sock.request(del, de)) {
    ++deleted;
    return true;
  }
  if (de.err == ENOENT) return true;
  e = de;
  return false;
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
  if (!openCt(h, sock, e)) return ctFail(h, e, "socket(NETLINK_NETFILTER)", subjectOf(addrs));

  // AF_UNSPEC dumps both families; each message's nfgen_family is its L3 family.
  NlMsg dump = buildCtDumpMsg();
  std::vector<Victim> victims;
  bool ok = sock.dump(dump, e, [&](const nlmsghdr* m) {
    Victim v;
    if (parseVictim(m, addrs, v)) victims.push_back(std::move(v));
  });
  if (!ok) return ctFail(h, e, "IPCTNL_MSG_CT_GET", subjectOf(addrs));

  for (const Victim& v : victims) {
    // Never without the tuple: a CT_DELETE without one flushes the whole table.
    if (v.tuple.empty()) continue;
    if (!deleteOne(sock, v, deleted, e)) return ctFail(h, e, "IPCTNL_MSG_CT_DELETE", subjectOf(addrs));
  }
  return true;
}


bool conntrackList(Handle& h, const std::vector<IpAddr>& addrs, std::vector<CtEntry>& out, NlError& e) {
  out.clear();
  if (addrs.empty()) return true;
  NlSocket sock;
  if (!openCt(h, sock, e)) return ctFail(h, e, "socket(NETLINK_NETFILTER)", subjectOf(addrs));
  NlMsg dump = buildCtDumpMsg();
  bool ok = sock.dump(dump, e, [&](const nlmsghdr* m) {
    Victim v;
    if (!parseVictim(m, addrs, v) || v.tuple.empty()) return;
    CtEntry c;
    c.family = v.family;
    parseTuple(reinterpret_cast<const rtattr*>(v.tuple.data()), c.orig);
    if (v.reply) {
      c.hasReply = true;
      parseTuple(v.reply, c.reply);
    }
    c.hasId = v.hasId;
    c.id = ntohl(v.id);
    c.key = keyOf(v);
    out.push_back(std::move(c));
  });
  if (!ok) return ctFail(h, e, "IPCTNL_MSG_CT_GET", subjectOf(addrs));
  return true;
}

namespace {

uint64_t be64(const rtattr* a) {
  if (!a || RTA_PAYLOAD(a) < 8) return 0;
  uint8_t b[8];
  std::memcpy(b, RTA_DATA(a), 8);
  uint64_t v = 0;
  for (uint8_t x : b) v = (v << 8) | x;
  return v;
}

// CTA_COUNTERS_ORIG/REPLY: 64-bit counters (or the old 32-bit ones).
bool counters(const rtattr* a, uint64_t& packets, uint64_t& bytes) {
  if (!a) return false;
  Attrs c = Attrs::nested(a);
  if (c.has(CTA_COUNTERS_PACKETS)) {
    packets = be64(c.get(CTA_COUNTERS_PACKETS));
    bytes = be64(c.get(CTA_COUNTERS_BYTES));
    return true;
  }
  if (c.has(CTA_COUNTERS32_PACKETS)) {
    packets = ntohl(c.u32(CTA_COUNTERS32_PACKETS));
    bytes = ntohl(c.u32(CTA_COUNTERS32_BYTES));
    return true;
  }
  return false;
}

}  // namespace

bool parseCtEvent(const nlmsghdr* m, CtEvent& out) {
  if (NFNL_SUBSYS_ID(m->nlmsg_type) != NFNL_SUBSYS_CTNETLINK) return false;
  const uint8_t msg = NFNL_MSG_TYPE(m->nlmsg_type);
  if (msg != IPCTNL_MSG_CT_NEW && msg != IPCTNL_MSG_CT_DELETE) return false;
  if (m->nlmsg_len < NLMSG_LENGTH(sizeof(nfgenmsg))) return false;
  auto* gm = static_cast<const nfgenmsg*>(NLMSG_DATA(m));
  const size_t off = NLMSG_ALIGN(sizeof(nfgenmsg));
  Attrs at(static_cast<const uint8_t*>(NLMSG_DATA(m)) + off, m->nlmsg_len - NLMSG_LENGTH(off));
  const rtattr* orig = at.get(CTA_TUPLE_ORIG);
  if (!orig) return false;
  out = CtEvent{};
  out.type = msg == IPCTNL_MSG_CT_DELETE ? CtEvent::kDestroy
             : (m->nlmsg_flags & NLM_F_CREATE) ? CtEvent::kNew
                                               : CtEvent::kDump;
  out.family = gm->nfgen_family;
  parseTuple(orig, out.orig);
  if (const rtattr* r = at.get(CTA_TUPLE_REPLY)) {
    out.hasReply = true;
    parseTuple(r, out.reply);
  }
  if (const rtattr* id = at.get(CTA_ID); id && RTA_PAYLOAD(id) >= 4) {
    out.hasId = true;
    out.id = ntohl(at.u32(CTA_ID));
  }
  if (const rtattr* mk = at.get(CTA_MARK); mk && RTA_PAYLOAD(mk) >= 4) {
    out.hasMark = true;
    out.mark = ntohl(at.u32(CTA_MARK));
  }
  const bool o = counters(at.get(CTA_COUNTERS_ORIG), out.origPackets, out.origBytes);
  const bool r = counters(at.get(CTA_COUNTERS_REPLY), out.replyPackets, out.replyBytes);
  out.hasCounters = o || r;
  if (const rtattr* pi = at.get(CTA_PROTOINFO)) {
    Attrs p = Attrs::nested(pi);
    if (const rtattr* tcp = p.get(CTA_PROTOINFO_TCP)) {
      Attrs t = Attrs::nested(tcp);
      if (t.has(CTA_PROTOINFO_TCP_STATE)) out.tcpState = static_cast<uint8_t>(t.u8(CTA_PROTOINFO_TCP_STATE) + 1);
    }
  }
  return true;
}

bool conntrackDump(Handle& h, std::vector<CtEvent>& out, NlError& e) {
  out.clear();
  NlSocket sock;
  if (!openCt(h, sock, e)) return ctFail(h, e, "socket(NETLINK_NETFILTER)", "conntrack table");
  NlMsg dump = buildCtDumpMsg();
  bool ok = sock.dump(dump, e, [&](const nlmsghdr* m) {
    CtEvent ev;
    if (parseCtEvent(m, ev)) {
      ev.type = CtEvent::kDump;
      out.push_back(std::move(ev));
    }
  });
  if (!ok) return ctFail(h, e, "IPCTNL_MSG_CT_GET", "conntrack table");
  return true;
}

bool ctKeyValid(const std::vector<uint8_t>& k) {
  if (k.size() <= kKeyHead + RTA_LENGTH(0) || (k[0] != AF_INET && k[0] != AF_INET6)) return false;
  auto* t = reinterpret_cast<const rtattr*>(k.data() + kKeyHead);
  if (t->rta_len != k.size() - kKeyHead || (t->rta_type & NLA_TYPE_MASK) != CTA_TUPLE_ORIG) return false;
  Attrs ta = Attrs::nested(t);
  return ta.has(CTA_TUPLE_IP) && ta.has(CTA_TUPLE_PROTO);
}

bool conntrackDelete(Handle& h, const std::vector<std::vector<uint8_t>>& keys, uint32_t& deleted, NlError& e) {
  deleted = 0;
  if (keys.empty()) return true;
  const std::string subject = std::to_string(keys.size()) + " conntrack entries";
  NlSocket sock;
  if (!openCt(h, sock, e)) return ctFail(h, e, "socket(NETLINK_NETFILTER)", subject);
  for (const auto& k : keys) {
    // Never without a whole tuple: a CT_DELETE without one flushes the whole table.
    if (!ctKeyValid(k)) continue;
    if (!deleteOne(sock, victimOf(k), deleted, e)) return ctFail(h, e, "IPCTNL_MSG_CT_DELETE", subject);
  }
  return true;
}

}  // namespace np
