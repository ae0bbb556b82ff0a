// Links: RTM_GETLINK / RTM_NEWLINK (veth with the peer placed in another
// namespace in the same message) / RTM_DELLINK.
#include <linux/if.h>
#include <linux/if_link.h>
#include <linux/veth.h>
#include <net/if_arp.h>

#include <vector>

#include "netns.h"
#include "ops.h"

namespace np {

namespace {

struct LinkData {
  uint32_t index = 0;
  std::string name, kind, mac;
  uint32_t mtu = 0, flags = 0;
  uint8_t operState = 0;
  bool hasTx = false, hasRx = false, hasParent = false, hasNsid = false;
  uint32_t tx = 0, rx = 0, parent = 0, group = 0;
  int32_t nsid = 0;
};

bool parseLink(const nlmsghdr* h, LinkData& d) {
  if (h->nlmsg_type != RTM_NEWLINK || h->nlmsg_len < NLMSG_LENGTH(sizeof(ifinfomsg))) return false;
  auto* ifi = static_cast<const ifinfomsg*>(NLMSG_DATA(h));
  Attrs a(IFLA_RTA(ifi), h->nlmsg_len - NLMSG_LENGTH(sizeof(ifinfomsg)));
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

Napi::Object toJs(Napi::Env env, const LinkData& d) {
  Napi::Object o = Napi::Object::New(env);
  o.Set("index", d.index);
  o.Set("name", d.name);
  o.Set("kind", d.kind);
  o.Set("mtu", d.mtu);
  o.Set("mac", d.mac);
  o.Set("up", (d.flags & IFF_UP) != 0);
  o.Set("flags", d.flags);
  o.Set("operState", d.operState);
  o.Set("group", d.group);
  if (d.hasTx) o.Set("numTxQueues", d.tx);
  if (d.hasRx) o.Set("numRxQueues", d.rx);
  if (d.hasParent) o.Set("parentIndex", d.parent);
  if (d.hasNsid) o.Set("linkNetnsId", d.nsid);
  return o;
}

// ifinfomsg identifying the link: by index, or by IFLA_IFNAME (the kernel
// looks names up itself for GET/NEW/DEL, saving a round trip).
size_t putLinkId(NlMsg& m, const LinkRef& ref) {
  ifinfomsg ifi{};
  ifi.ifi_family = AF_UNSPEC;
  ifi.ifi_index = static_cast<int>(ref.index);
  size_t off = m.put(ifi);
  if (!ref.index) m.str(IFLA_IFNAME, ref.name);
  return off;
}

// found=false (and no error) when the kernel says ENODEV.
bool getLink(Handle& h, const LinkRef& ref, LinkData& d, bool& found, NlError& e) {
  NlMsg m(RTM_GETLINK, 0);
  putLinkId(m, ref);
  m.u32(IFLA_EXT_MASK, RTEXT_FILTER_SKIP_STATS);
  found = false;
  bool ok = h.sock.request(m, e, [&](const nlmsghdr* r) { found = parseLink(r, d) || found; });
  if (!ok) {
    e.subject = ref.subject();
    if (e.err == ENODEV) {
      e = NlError{};
      found = false;
      return true;
    }
    return false;
  }
  return true;
}

}  // namespace

bool linkIndex(Handle& h, const LinkRef& ref, uint32_t& index, NlError& e) {
  if (ref.index) {
    index = ref.index;
    return true;
  }
  LinkData d;
  bool found;
  if (!getLink(h, ref, d, found, e)) return false;
  if (!found) {
    e.set(ENODEV, "RTM_GETLINK", ref.subject());
    return false;
  }
  index = d.index;
  return true;
}

Napi::Value LinkGet(Handle& h, const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Args a(env, "linkGet");
  LinkRef ref;
  if (!a.link(info[0], "link", ref)) return env.Undefined();
  LinkData d;
  bool found;
  NlError e;
  if (!getLink(h, ref, d, found, e)) return throwNlError(env, e), env.Undefined();
  if (!found) {
    e.set(ENODEV, "RTM_GETLINK", ref.subject());
    return throwNlError(env, e), env.Undefined();
  }
  return toJs(env, d);
}

Napi::Value LinkFind(Handle& h, const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Args a(env, "linkFind");
  LinkRef ref;
  if (!a.link(info[0], "link", ref)) return env.Undefined();
  LinkData d;
  bool found;
  NlError e;
  if (!getLink(h, ref, d, found, e)) return throwNlError(env, e), env.Undefined();
  if (!found) return env.Undefined();
  return toJs(env, d);
}

Napi::Value LinkList(Handle& h, const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  NlMsg m(RTM_GETLINK, 0);
  ifinfomsg ifi{};
  ifi.ifi_family = AF_UNSPEC;
  m.put(ifi);
  m.u32(IFLA_EXT_MASK, RTEXT_FILTER_SKIP_STATS);
  std::vector<LinkData> links;
  NlError e;
  bool ok = h.sock.dump(m, e, [&](const nlmsghdr* r) {
    LinkData d;
    if (parseLink(r, d)) links.push_back(std::move(d));
  });
  if (!ok) return throwNlError(env, e), env.Undefined();
  Napi::Array arr = Napi::Array::New(env, links.size());
  for (size_t i = 0; i < links.size(); ++i) arr.Set(static_cast<uint32_t>(i), toJs(env, links[i]));
  return arr;
}

Napi::Value VethAdd(Handle& h, const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Args a(env, "vethAdd");
  Napi::Object o;
  std::string name, peer;
  uint32_t mtu = 0, rxq = 0, txq = 0;
  uint8_t mac[6], peerMac[6];
  bool hasMac = false, hasPeerMac = false;
  int peerNsFd = -1;
  if (!a.object(info[0], "options", o)) return env.Undefined();
  a.ifname(a.prop(o, "name"), "options.name", name);
  a.ifname(a.prop(o, "peerName"), "options.peerName", peer);
  Napi::Value v;
  if (Args::present(v = a.prop(o, "mtu"))) a.uint(v, "options.mtu", 68, 65535, mtu);
  if (Args::present(v = a.prop(o, "mac"))) hasMac = a.mac(v, "options.mac", mac);
  if (Args::present(v = a.prop(o, "peerMac"))) hasPeerMac = a.mac(v, "options.peerMac", peerMac);
  // The kernel caps queues at 4096 (real_num_*_queues are u16 and
  // dev_get_valid_name rejects more).
  if (Args::present(v = a.prop(o, "numRxQueues"))) a.uint(v, "options.numRxQueues", 1, 4096, rxq);
  if (Args::present(v = a.prop(o, "numTxQueues"))) a.uint(v, "options.numTxQueues", 1, 4096, txq);
  Napi::Value nsv = a.prop(o, "peerNetns");
  if (!a.ok()) return env.Undefined();
  if (Args::present(nsv)) {
    // The NetNS object exposes its fd; a closed one has fd -1.
    Napi::Object nso;
    if (!a.object(nsv, "options.peerNetns", nso)) return env.Undefined();
    Napi::Value fdv = a.prop(nso, "fd");
    uint32_t fd = 0;
    if (!fdv.IsNumber() || fdv.As<Napi::Number>().Int32Value() < 0) {
      a.fail("options.peerNetns", "an open NetNS from openNetns()", nsv);
      return env.Undefined();
    }
    if (!a.uint(fdv, "options.peerNetns.fd", 0, 0x7fffffff, fd)) return env.Undefined();
    peerNsFd = static_cast<int>(fd);
  }
  if (name == peer && peerNsFd < 0) {
    a.failText("options.peerName", "different from options.name when both ends are in one namespace", "'" + peer + "'");
    return env.Undefined();
  }

  NlMsg m(RTM_NEWLINK, NLM_F_CREATE | NLM_F_EXCL);
  ifinfomsg ifi{};
  ifi.ifi_family = AF_UNSPEC;
  m.put(ifi);
  m.str(IFLA_IFNAME, name);
  if (mtu) m.u32(IFLA_MTU, mtu);
  if (hasMac) m.attr(IFLA_ADDRESS, mac, 6);
  if (txq) m.u32(IFLA_NUM_TX_QUEUES, txq);
  if (rxq) m.u32(IFLA_NUM_RX_QUEUES, rxq);
  size_t li = m.nestBegin(IFLA_LINKINFO);
  m.str(IFLA_INFO_KIND, "veth");
  size_t data = m.nestBegin(IFLA_INFO_DATA);
  size_t peerNest = m.nestBegin(VETH_INFO_PEER);
  // VETH_INFO_PEER's payload is a full ifinfomsg followed by IFLA_* attributes.
  m.put(ifi);
  m.str(IFLA_IFNAME, peer);
  if (mtu) m.u32(IFLA_MTU, mtu);
  if (hasPeerMac) m.attr(IFLA_ADDRESS, peerMac, 6);
  if (txq) m.u32(IFLA_NUM_TX_QUEUES, txq);
  if (rxq) m.u32(IFLA_NUM_RX_QUEUES, rxq);
  if (peerNsFd >= 0) m.u32(IFLA_NET_NS_FD, static_cast<uint32_t>(peerNsFd));
  m.nestEnd(peerNest);
  m.nestEnd(data);
  m.nestEnd(li);

  NlError e;
  if (!h.sock.request(m, e)) {
    e.subject = name;
    return throwNlError(env, e), env.Undefined();
  }
  return env.Undefined();
}

Napi::Value LinkSet(Handle& h, const Napi::CallbackInfo& info, NetnsFdOf fdOf) {
  Napi::Env env = info.Env();
  Args a(env, "linkSet");
  LinkRef ref;
  Napi::Object o;
  if (!a.link(info[0], "link", ref)) return env.Undefined();
  if (!a.object(info[1], "changes", o)) return env.Undefined();
  bool hasUp = false, up = false, hasMac = false, hasGroup = false;
  uint32_t mtu = 0, group = 0;
  uint8_t mac[6];
  std::string newName;
  int nsFd = -1;
  Napi::Value v;
  if (Args::present(v = a.prop(o, "up"))) hasUp = a.boolean(v, "changes.up", up);
  if (Args::present(v = a.prop(o, "mtu"))) a.uint(v, "changes.mtu", 68, 65535, mtu);
  if (Args::present(v = a.prop(o, "mac"))) hasMac = a.mac(v, "changes.mac", mac);
  if (Args::present(v = a.prop(o, "name"))) a.ifname(v, "changes.name", newName);
  if (Args::present(v = a.prop(o, "group"))) hasGroup = a.uint(v, "changes.group", 0, 0xffffffffu, group);
  if (Args::present(v = a.prop(o, "netns"))) {
    nsFd = fdOf(env, v);
    if (nsFd < 0 && a.ok()) a.fail("changes.netns", "an open NetNS from openNetns()", v);
  }
  if (!a.ok()) return env.Undefined();

  NlError e;
  // A rename by name needs the index: IFLA_IFNAME would be read as the
  // lookup key, not the new name.
  if (!newName.empty() && !ref.index) {
    if (!linkIndex(h, ref, ref.index, e)) return throwNlError(env, e), env.Undefined();
  }
  NlMsg m(RTM_NEWLINK, 0);
  ifinfomsg ifi{};
  ifi.ifi_family = AF_UNSPEC;
  ifi.ifi_index = static_cast<int>(ref.index);
  if (hasUp) {
    ifi.ifi_change = IFF_UP;
    ifi.ifi_flags = up ? IFF_UP : 0;
  }
  m.put(ifi);
  if (!ref.index) m.str(IFLA_IFNAME, ref.name);
  else if (!newName.empty()) m.str(IFLA_IFNAME, newName);
  if (mtu) m.u32(IFLA_MTU, mtu);
  if (hasGroup) m.u32(IFLA_GROUP, group);
  if (hasMac) m.attr(IFLA_ADDRESS, mac, 6);
  if (nsFd >= 0) m.u32(IFLA_NET_NS_FD, static_cast<uint32_t>(nsFd));
  if (!h.sock.request(m, e)) {
    e.subject = ref.subject();
    return throwNlError(env, e), env.Undefined();
  }
  return env.Undefined();
}

Napi::Value LinkDel(Handle& h, const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Args a(env, "linkDel");
  LinkRef ref;
  if (!a.link(info[0], "link", ref)) return env.Undefined();
  NlMsg m(RTM_DELLINK, 0);
  putLinkId(m, ref);
  NlError e;
  if (!h.sock.request(m, e)) {
    e.subject = ref.subject();
    return throwNlError(env, e), env.Undefined();
  }
  return env.Undefined();
}

}  // namespace np

namespace np {

namespace {

// RTM_DELLINK of a veth waits in the kernel for an RCU grace period (~15-20
// ms), so linkDelAsync sends it from a libuv threadpool thread. The request
// gets its own socket, created here on the JS thread inside the handle's
// namespace (a netlink socket stays bound to the namespace it was created
// in): the pool thread never calls setns, and the handle's socket and
// sequence numbers are never touched off the JS thread, so any number of
// these may be pending on one handle while it keeps serving sync calls.
class LinkDelWorker : public Napi::AsyncWorker {
 public:
  LinkDelWorker(Napi::Env env, const LinkRef& ref)
      : Napi::AsyncWorker(env, "netplugin:linkDel"), deferred_(Napi::Promise::Deferred::New(env)), ref_(ref),
        msg_(RTM_DELLINK, 0) {
    putLinkId(msg_, ref_);
  }
  // Every link of the namespace in `group` (ifindex 0, no name, IFLA_GROUP):
  // the kernel unregisters them, and each veth's peer wherever it is, as one
  // batch under a single RCU grace period.
  LinkDelWorker(Napi::Env env, uint32_t group)
      : Napi::AsyncWorker(env, "netplugin:linkDelGroup"), deferred_(Napi::Promise::Deferred::New(env)),
        msg_(RTM_DELLINK, 0) {
    ifinfomsg ifi{};
    ifi.ifi_family = AF_UNSPEC;
    msg_.put(ifi);
    msg_.u32(IFLA_GROUP, group);
    ref_.name = "group " + std::to_string(group);
  }

  Napi::Promise promise() { return deferred_.Promise(); }

  // On the JS thread, before Queue(). A failure here is a NlError like any
  // other (e.g. EMFILE from socket(), or setns into a namespace gone bad).
  bool openSocket(const Handle& h, NlError& e) {
    {
      NsSwitch sw(h.nsFd, e);
      if (sw.ok()) sock_.open(e);
    }
    if (e.failed() && e.subject.empty()) e.subject = h.nsPath;
    return !e.failed();
  }

 protected:
  void Execute() override {
    if (!sock_.request(msg_, err_)) {
      err_.subject = ref_.subject();
      // Only to route completion to OnError; the message is never shown.
      SetError("netlink");
    }
    // Closed here so the fd is back before the promise settles.
    sock_.close();
  }
  void OnOK() override { deferred_.Resolve(Env().Undefined()); }
  void OnError(const Napi::Error&) override { rejectWith(Env(), deferred_, err_); }

 public:
  static void rejectWith(Napi::Env env, Napi::Promise::Deferred& d, const NlError& e) {
    Napi::Value v = makeNlError(env, e);
    if (env.IsExceptionPending()) v = env.GetAndClearPendingException().Value();
    d.Reject(v);
  }

 private:
  Napi::Promise::Deferred deferred_;
  LinkRef ref_;
  NlMsg msg_;
  NlSocket sock_;
  NlError err_;
};

// A promise already rejected with whatever exception is pending (argument
// TypeErrors): an async API reports bad input by rejecting, not throwing.
Napi::Value rejectedWithPending(Napi::Env env) {
  // Cleared first: N-API refuses to create a promise while an exception is pending.
  Napi::Value err = env.GetAndClearPendingException().Value();
  Napi::Promise::Deferred d = Napi::Promise::Deferred::New(env);
  d.Reject(err);
  return d.Promise();
}

// Opens the worker's socket in the handle's namespace and queues it. The
// worker is deleted by node-addon-api after OnOK/OnError; when it is never
// queued it is ours to delete.
Napi::Value queueDelete(Napi::Env env, const Handle& h, LinkDelWorker* w) {
  Napi::Promise p = w->promise();
  NlError e;
  if (!w->openSocket(h, e)) {
    Napi::Promise::Deferred d = Napi::Promise::Deferred::New(env);
    LinkDelWorker::rejectWith(env, d, e);
    delete w;
    return d.Promise();
  }
  w->Queue();
  return p;
}

}  // namespace

Napi::Value LinkDelAsync(Handle& h, const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Args a(env, "linkDelAsync");
  LinkRef ref;
  if (!a.link(info[0], "link", ref)) return rejectedWithPending(env);
  return queueDelete(env, h, new LinkDelWorker(env, ref));
}

Napi::Value LinkDelGroupAsync(Handle& h, const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Args a(env, "linkDelGroupAsync");
  uint32_t group = 0;
  // Group 0 is every link's default group: deleting it would take the whole
  // namespace down, so only a group a caller set explicitly can be named.
  if (!a.uint(info[0], "group", 1, 0xffffffffu, group)) return rejectedWithPending(env);
  return queueDelete(env, h, new LinkDelWorker(env, group));
}

}  // namespace np
