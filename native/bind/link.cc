// Links: the JS face of core/link (linkGet/Find/List, vethAdd, linkSet,
// linkDel and its threadpool variants).
#include <linux/if.h>

#include "bind/ops.h"
#include "core/link.h"
#include "core/netns.h"

namespace np {

namespace {

Napi::Object linkToJs(Napi::Env env, const Link& d) {
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

// linkGet and linkFind differ only in what a missing link is: an ENODEV
// NetlinkError or undefined.
Napi::Value linkLookup(Handle& h, const Napi::CallbackInfo& info, const char* fn, bool missingIsError) {
  Napi::Env env = info.Env();
  Args a(env, fn);
  LinkRef ref;
  if (!a.link(info[0], "link", ref)) return env.Undefined();
  Link d;
  bool found;
  NlError e;
  if (!linkGet(h, ref, d, found, e)) return throwNlError(env, e), env.Undefined();
  if (found) return linkToJs(env, d);
  if (!missingIsError) return env.Undefined();
  e.set(ENODEV, "RTM_GETLINK", ref.subject());
  return throwNlError(env, e), env.Undefined();
}

}  // namespace

Napi::Value LinkGet(Handle& h, const Napi::CallbackInfo& info) { return linkLookup(h, info, "linkGet", true); }
Napi::Value LinkFind(Handle& h, const Napi::CallbackInfo& info) { return linkLookup(h, info, "linkFind", false); }

Napi::Value LinkList(Handle& h, const Napi::CallbackInfo& info) {
  return listAllToJs(info.Env(), h, linkList, linkToJs);
}

Napi::Value VethAdd(Handle& h, const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Args a(env, "vethAdd");
  Napi::Object o;
  VethSpec s;
  if (!a.object(info[0], "options", o)) return env.Undefined();
  a.ifname(a.prop(o, "name"), "options.name", s.name);
  a.ifname(a.prop(o, "peerName"), "options.peerName", s.peerName);
  Napi::Value v;
  if (Args::present(v = a.prop(o, "mtu"))) a.uint(v, "options.mtu", 68, 65535, s.mtu);
  if (Args::present(v = a.prop(o, "mac"))) s.hasMac = a.mac(v, "options.mac", s.mac);
  if (Args::present(v = a.prop(o, "peerMac"))) s.hasPeerMac = a.mac(v, "options.peerMac", s.peerMac);
  // The kernel caps queues at 4096 (real_num_*_queues are u16 and
  // dev_get_valid_name rejects more).
  if (Args::present(v = a.prop(o, "numRxQueues"))) a.uint(v, "options.numRxQueues", 1, 4096, s.numRxQueues);
  if (Args::present(v = a.prop(o, "numTxQueues"))) a.uint(v, "options.numTxQueues", 1, 4096, s.numTxQueues);
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
    s.peerNsFd = static_cast<int>(fd);
  }
  if (s.name == s.peerName && s.peerNsFd < 0) {
    a.failText("options.peerName", "different from options.name when both ends are in one namespace",
               "'" + s.peerName + "'");
    return env.Undefined();
  }
  NlError e;
  if (!vethAdd(h, s, e)) return throwNlError(env, e), env.Undefined();
  return env.Undefined();
}

Napi::Value LinkSet(Handle& h, const Napi::CallbackInfo& info, NetnsFdOf fdOf) {
  Napi::Env env = info.Env();
  Args a(env, "linkSet");
  LinkRef ref;
  Napi::Object o;
  if (!a.link(info[0], "link", ref)) return env.Undefined();
  if (!a.object(info[1], "changes", o)) return env.Undefined();
  LinkChange c;
  Napi::Value v;
  if (Args::present(v = a.prop(o, "up"))) c.hasUp = a.boolean(v, "changes.up", c.up);
  if (Args::present(v = a.prop(o, "mtu"))) a.uint(v, "changes.mtu", 68, 65535, c.mtu);
  if (Args::present(v = a.prop(o, "mac"))) c.hasMac = a.mac(v, "changes.mac", c.mac);
  if (Args::present(v = a.prop(o, "name"))) a.ifname(v, "changes.name", c.name);
  if (Args::present(v = a.prop(o, "group"))) c.hasGroup = a.uint(v, "changes.group", 0, 0xffffffffu, c.group);
  if (Args::present(v = a.prop(o, "netns"))) {
    c.nsFd = fdOf(env, v);
    if (c.nsFd < 0 && a.ok()) a.fail("changes.netns", "an open NetNS from openNetns()", v);
  }
  if (!a.ok()) return env.Undefined();
  NlError e;
  if (!linkSet(h, ref, c, e)) return throwNlError(env, e), env.Undefined();
  return env.Undefined();
}

Napi::Value LinkDel(Handle& h, const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Args a(env, "linkDel");
  LinkRef ref;
  if (!a.link(info[0], "link", ref)) return env.Undefined();
  NlError e;
  if (!linkDel(h, ref, e)) return throwNlError(env, e), env.Undefined();
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
        msg_(buildLinkDelMsg(ref)) {}
  // Every link of the namespace in `group` (ifindex 0, no name, IFLA_GROUP):
  // the kernel unregisters them, and each veth's peer wherever it is, as one
  // batch under a single RCU grace period.
  LinkDelWorker(Napi::Env env, uint32_t group)
      : Napi::AsyncWorker(env, "netplugin:linkDelGroup"), deferred_(Napi::Promise::Deferred::New(env)),
        msg_(buildLinkDelGroupMsg(group)) {
    ref_.name = "group " + std::to_string(group);
  }

  Napi::Promise promise() { return deferred_.Promise(); }

  // On the JS thread, before Queue(). A failure here is a NlError like any
  // other (e.g. EMFILE from socket(), or setns into a namespace gone bad).
  bool openSocket(const Handle& h, NlError& e) { return openSocketIn(h.nsFd, h.nsPath, sock_, e); }

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
  void OnError(const Napi::Error&) override { rejectWithNlError(Env(), deferred_, err_); }

 private:
  Napi::Promise::Deferred deferred_;
  LinkRef ref_;
  NlMsg msg_;
  NlSocket sock_;
  NlError err_;
};

// Opens the worker's socket in the handle's namespace and queues it. The
// worker is deleted by node-addon-api after OnOK/OnError; when it is never
// queued it is ours to delete.
Napi::Value queueDelete(Napi::Env env, const Handle& h, LinkDelWorker* w) {
  Napi::Promise p = w->promise();
  NlError e;
  if (!w->openSocket(h, e)) {
    Napi::Promise::Deferred d = Napi::Promise::Deferred::New(env);
    rejectWithNlError(env, d, e);
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
