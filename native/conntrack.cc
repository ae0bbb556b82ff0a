// Conntrack entries of an address, deleted over ctnetlink (NETLINK_NETFILTER,
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

#include <cctype>
#include <cstring>
#include <tuple>
#include <vector>

#include "netns.h"
#include "ops.h"

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
  // CTA_ID (network order), so a delete never takes a newer entry with the same tuple.
  bool hasId = false;
  uint32_t id = 0;
  const rtattr* reply = nullptr;  // only valid inside the dump callback
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

std::string subjectOf(const std::vector<IpAddr>& addrs) {
  std::string s;
  for (const IpAddr& a : addrs) s += (s.empty() ? "" : ",") + formatIp(a.family, a.bytes);
  return s;
}

// The addresses of a call's first argument (a string or an array of them).
bool addrsArg(Args& a, const Napi::Value& v, std::vector<IpAddr>& addrs) {
  if (v.IsArray()) {
    Napi::Array arr = v.As<Napi::Array>();
    for (uint32_t i = 0; i < arr.Length() && a.ok(); ++i) {
      IpAddr ip;
      if (a.ip(arr.Get(i), "addrs." + std::to_string(i), ip)) addrs.push_back(ip);
    }
  } else {
    IpAddr ip;
    if (a.ip(v, "addrs", ip)) addrs.push_back(ip);
  }
  return a.ok();
}

Napi::Value fail(Napi::Env env, Handle& h, NlError& e, const char* op, const std::string& subject) {
  e.op = op;
  e.subject = subject + (h.nsPath.empty() ? "" : " in " + h.nsPath);
  if (e.err == EPROTONOSUPPORT || e.err == EOPNOTSUPP)
    e.extack = "the kernel has no conntrack netlink support (module nf_conntrack_netlink)";
  throwNlError(env, e);
  return env.Undefined();
}

bool openCt(Handle& h, NlSocket& sock, NlError& e) {
  {
    NsSwitch sw(h.nsFd, e);
    if (sw.ok()) sock.open(e, NETLINK_NETFILTER);
  }
  return !e.failed();
}

// Dumps the table and calls `take` for every entry naming one of the addresses.
template <typename F>
bool collect(NlSocket& sock, const std::vector<IpAddr>& addrs, NlError& e, F take) {
  // AF_UNSPEC dumps both families; each message's nfgen_family is its L3 family.
  NlMsg dump(kCtGet, 0);
  nfgenmsg g{};
  g.nfgen_family = AF_UNSPEC;
  g.version = NFNETLINK_V0;
  dump.put(g);
  return sock.dump(dump, e, [&](const nlmsghdr* m) {
    if (NFNL_SUBSYS_ID(m->nlmsg_type) != NFNL_SUBSYS_CTNETLINK) return;
    if (m->nlmsg_len < NLMSG_LENGTH(sizeof(nfgenmsg))) return;
    auto* gm = static_cast<const nfgenmsg*>(NLMSG_DATA(m));
    const size_t off = NLMSG_ALIGN(sizeof(nfgenmsg));
    Attrs at(static_cast<const uint8_t*>(NLMSG_DATA(m)) + off, m->nlmsg_len - NLMSG_LENGTH(off));
    const rtattr* orig = at.get(CTA_TUPLE_ORIG);
    if (!orig || !(tupleHas(orig, addrs) || tupleHas(at.get(CTA_TUPLE_REPLY), addrs))) return;
    Victim v;
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
    take(std::move(v));
  });
}

// One CT_DELETE; true when deleted or already gone (ENOENT: expired, deleted meanwhile, or a
// newer entry has the tuple now and the id differs).
bool deleteOne(NlSocket& sock, const Victim& v, NlError& e, bool& deleted) {
  deleted = false;
  // Never without the tuple: a CT_DELETE without one flushes the whole table.
  if (v.tuple.size() <= RTA_LENGTH(0)) return true;
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
  NlError de;
  if (sock.request(del, de)) {
    deleted = true;
    return true;
  }
  if (de.err == ENOENT) return true;
  e = de;
  return false;
}

// A tuple's addresses, protocol and ports, as JS fields (prefix: '' or 'reply').
void tupleFields(Napi::Env env, Napi::Object& o, const rtattr* tuple, const char* pre) {
  if (!tuple) return;
  auto key = [&](const char* k) {
    std::string s = pre;
    if (s.empty()) return std::string(k);
    s += static_cast<char>(std::toupper(static_cast<unsigned char>(k[0])));
    return s + (k + 1);
  };
  Attrs t = Attrs::nested(tuple);
  if (const rtattr* ipA = t.get(CTA_TUPLE_IP)) {
    Attrs ip = Attrs::nested(ipA);
    for (auto [src, dst, fam, len] : {std::tuple{CTA_IP_V4_SRC, CTA_IP_V4_DST, AF_INET, 4u},
                                      std::tuple{CTA_IP_V6_SRC, CTA_IP_V6_DST, AF_INET6, 16u}}) {
      const rtattr* s = ip.get(src);
      const rtattr* d = ip.get(dst);
      if (s && RTA_PAYLOAD(s) == len) o.Set(key("src"), Napi::String::New(env, formatIp(fam, RTA_DATA(s))));
      if (d && RTA_PAYLOAD(d) == len) o.Set(key("dst"), Napi::String::New(env, formatIp(fam, RTA_DATA(d))));
    }
  }
  if (const rtattr* pA = t.get(CTA_TUPLE_PROTO)) {
    Attrs pr = Attrs::nested(pA);
    if (!pre[0]) o.Set("protocol", Napi::Number::New(env, pr.u8(CTA_PROTO_NUM)));
    auto port = [&](unsigned a, const char* k) {
      const rtattr* x = pr.get(a);
      if (!x || RTA_PAYLOAD(x) < 2) return;
      uint16_t v;
      std::memcpy(&v, RTA_DATA(x), 2);
      o.Set(key(k), Napi::Number::New(env, ntohs(v)));
    };
    port(CTA_PROTO_SRC_PORT, "sport");
    port(CTA_PROTO_DST_PORT, "dport");
  }
}

}  // namespace

// conntrackFlush(addrs: string | string[]) -> number of entries deleted, in
// the handle's namespace.
Napi::Value ConntrackFlush(Handle& h, const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Args a(env, "conntrackFlush");
  std::vector<IpAddr> addrs;
  if (!addrsArg(a, info[0], addrs)) return env.Undefined();
  if (addrs.empty()) return Napi::Number::New(env, 0);
  NlError e;
  NlSocket sock;
  if (!openCt(h, sock, e)) return fail(env, h, e, "socket(NETLINK_NETFILTER)", subjectOf(addrs));
  std::vector<Victim> victims;
  if (!collect(sock, addrs, e, [&](Victim&& v) { victims.push_back(std::move(v)); }))
    return fail(env, h, e, "IPCTNL_MSG_CT_GET", subjectOf(addrs));
  uint32_t deleted = 0;
  for (const Victim& v : victims) {
    bool d = false;
    if (!deleteOne(sock, v, e, d)) return fail(env, h, e, "IPCTNL_MSG_CT_DELETE", subjectOf(addrs));
    deleted += d ? 1 : 0;
  }
  return Napi::Number::New(env, deleted);
}

// conntrackList(addrs: string | string[]) -> the entries naming one of them:
// { family, protocol, src, dst, sport?, dport?, replySrc, replyDst, replySport?, replyDport?, id?, key }
// where key (a Buffer: the original tuple as dumped, with zone and id) is what conntrackDelete takes.
Napi::Value ConntrackList(Handle& h, const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Args a(env, "conntrackList");
  std::vector<IpAddr> addrs;
  if (!addrsArg(a, info[0], addrs)) return env.Undefined();
  Napi::Array out = Napi::Array::New(env);
  if (addrs.empty()) return out;
  NlError e;
  NlSocket sock;
  if (!openCt(h, sock, e)) return fail(env, h, e, "socket(NETLINK_NETFILTER)", subjectOf(addrs));
  uint32_t n = 0;
  bool ok = collect(sock, addrs, e, [&](Victim&& v) {
    Napi::Object o = Napi::Object::New(env);
    o.Set("family", Napi::Number::New(env, v.family == AF_INET6 ? 6 : 4));
    const rtattr* orig = reinterpret_cast<const rtattr*>(v.tuple.data());
    tupleFields(env, o, orig, "");
    tupleFields(env, o, v.reply, "reply");
    if (v.hasId) o.Set("id", Napi::Number::New(env, ntohl(v.id)));
    // key: family(1) hasZone(1) zone(2) hasId(1) pad(3) id(4) tuple(...)
    std::vector<uint8_t> k(12);
    k[0] = v.family;
    k[1] = v.hasZone;
    std::memcpy(&k[2], &v.zone, 2);
    k[4] = v.hasId;
    std::memcpy(&k[8], &v.id, 4);
    k.insert(k.end(), v.tuple.begin(), v.tuple.end());
    o.Set("key", Napi::Buffer<uint8_t>::Copy(env, k.data(), k.size()));
    out.Set(n++, o);
  });
  if (!ok) return fail(env, h, e, "IPCTNL_MSG_CT_GET", subjectOf(addrs));
  return out;
}

// conntrackDelete(keys: Buffer[]) -> number deleted; a key is one conntrackList gave (an entry
// gone meanwhile, or replaced by a newer one with the same tuple, is not deleted nor counted).
Napi::Value ConntrackDelete(Handle& h, const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Args a(env, "conntrackDelete");
  if (!info[0].IsArray()) {
    a.fail("keys", "an array of the keys conntrackList gave", info[0]);
    return env.Undefined();
  }
  Napi::Array arr = info[0].As<Napi::Array>();
  std::vector<Victim> victims;
  for (uint32_t i = 0; i < arr.Length(); ++i) {
    Napi::Value x = arr.Get(i);
    if (env.IsExceptionPending()) return env.Undefined();
    bool good = x.IsBuffer();
    Victim v;
    if (good) {
      auto b = x.As<Napi::Buffer<uint8_t>>();
      const uint8_t* p = b.Data();
      const size_t len = b.Length();
      good = len > 12 + RTA_LENGTH(0) && (p[0] == AF_INET || p[0] == AF_INET6);
      if (good) {
        v.family = p[0];
        v.hasZone = p[1];
        std::memcpy(&v.zone, p + 2, 2);
        v.hasId = p[4];
        std::memcpy(&v.id, p + 8, 4);
        v.tuple.assign(p + 12, p + len);
        auto* t = reinterpret_cast<const rtattr*>(v.tuple.data());
        // The whole tuple, with an address and a protocol part, or nothing is sent.
        good = t->rta_len == v.tuple.size() && (t->rta_type & NLA_TYPE_MASK) == CTA_TUPLE_ORIG;
        if (good) {
          Attrs ta = Attrs::nested(t);
          good = ta.has(CTA_TUPLE_IP) && ta.has(CTA_TUPLE_PROTO);
        }
      }
    }
    if (!good) {
      a.fail("keys." + std::to_string(i), "a key conntrackList gave", x);
      return env.Undefined();
    }
    victims.push_back(std::move(v));
  }
  if (victims.empty()) return Napi::Number::New(env, 0);
  NlError e;
  NlSocket sock;
  const std::string subject = std::to_string(victims.size()) + " conntrack entries";
  if (!openCt(h, sock, e)) return fail(env, h, e, "socket(NETLINK_NETFILTER)", subject);
  uint32_t deleted = 0;
  for (const Victim& v : victims) {
    bool d = false;
    if (!deleteOne(sock, v, e, d)) return fail(env, h, e, "IPCTNL_MSG_CT_DELETE", subject);
    deleted += d ? 1 : 0;
  }
  return Napi::Number::New(env, deleted);
}

}  // namespace np
