// Addon entry: openNetns(path) -> NetNS, netlink(ns?) -> Netlink,
// setErrorClass(NetlinkError), ABI_VERSION. Context-aware (Napi::Addon
// instance data per environment) so worker threads can load it too.
#include <fcntl.h>
#include <unistd.h>

#include "core/netns.h"
#include "bind/ops.h"

namespace np {

namespace {

class NetNSWrap : public Napi::ObjectWrap<NetNSWrap> {
 public:
  static Napi::Function Define(Napi::Env env) {
    return DefineClass(env, "NetNS",
                       {InstanceAccessor<&NetNSWrap::Path>("path", napi_enumerable),
                        InstanceAccessor<&NetNSWrap::Fd>("fd", napi_enumerable),
                        InstanceMethod<&NetNSWrap::Close>("close")});
  }

  // new NetNS(path): opens the namespace file.
  explicit NetNSWrap(const Napi::CallbackInfo& info) : Napi::ObjectWrap<NetNSWrap>(info) {
    Napi::Env env = info.Env();
    Args a(env, "openNetns");
    if (!a.string(info[0], "path", path_)) return;
    if (path_.empty() || path_[0] != '/') {
      a.fail("path", "an absolute path to a network namespace (/var/run/netns/<name> or /proc/<pid>/ns/net)", info[0]);
      return;
    }
    NlError e;
    fd_ = openNetnsFd(path_, e);
    if (fd_ < 0) throwNlError(env, e);
  }
  ~NetNSWrap() override { closeFd(); }

  int fd() const { return fd_; }
  const std::string& path() const { return path_; }

 private:
  Napi::Value Path(const Napi::CallbackInfo& info) { return Napi::String::New(info.Env(), path_); }
  Napi::Value Fd(const Napi::CallbackInfo& info) { return Napi::Number::New(info.Env(), fd_); }
  Napi::Value Close(const Napi::CallbackInfo& info) {
    closeFd();
    return info.Env().Undefined();
  }
  void closeFd() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

  std::string path_;
  int fd_ = -1;
};

// The fd of a NetNS object (or -1 when v is not an open one).
int netnsFdOf(Napi::Env env, const Napi::Value& v) {
  AddonData* d = addonData(env);
  if (!d || !v.IsObject()) return -1;
  bool is = v.As<Napi::Object>().InstanceOf(d->netnsCtor.Value());
  if (env.IsExceptionPending() || !is) return -1;
  NetNSWrap* w = NetNSWrap::Unwrap(v.As<Napi::Object>());
  return w ? w->fd() : -1;
}

class NetlinkWrap : public Napi::ObjectWrap<NetlinkWrap> {
 public:
  using M = Napi::Value (*)(Handle&, const Napi::CallbackInfo&);

  static Napi::Function Define(Napi::Env env) {
    return DefineClass(env, "Netlink",
                       {
                           InstanceAccessor<&NetlinkWrap::Netns>("netns", napi_enumerable),
                           InstanceMethod<&NetlinkWrap::Close>("close"),
                           InstanceMethod<&NetlinkWrap::Call<LinkGet>>("linkGet"),
                           InstanceMethod<&NetlinkWrap::Call<LinkFind>>("linkFind"),
                           InstanceMethod<&NetlinkWrap::Call<LinkList>>("linkList"),
                           InstanceMethod<&NetlinkWrap::Call<VethAdd>>("vethAdd"),
                           InstanceMethod<&NetlinkWrap::LinkSetM>("linkSet"),
                           InstanceMethod<&NetlinkWrap::Call<LinkDel>>("linkDel"),
                           InstanceMethod<&NetlinkWrap::CallAsync<LinkDelAsync>>("linkDelAsync"),
                           InstanceMethod<&NetlinkWrap::CallAsync<LinkDelGroupAsync>>("linkDelGroupAsync"),
                           InstanceMethod<&NetlinkWrap::Call<AddrAdd>>("addrAdd"),
                           InstanceMethod<&NetlinkWrap::Call<AddrDel>>("addrDel"),
                           InstanceMethod<&NetlinkWrap::Call<AddrList>>("addrList"),
                           InstanceMethod<&NetlinkWrap::Call<RouteAdd>>("routeAdd"),
                           InstanceMethod<&NetlinkWrap::Call<RouteReplace>>("routeReplace"),
                           InstanceMethod<&NetlinkWrap::Call<RouteDel>>("routeDel"),
                           InstanceMethod<&NetlinkWrap::Call<RouteList>>("routeList"),
                           InstanceMethod<&NetlinkWrap::Call<NeighSet>>("neighSet"),
                           InstanceMethod<&NetlinkWrap::Call<NeighList>>("neighList"),
                           InstanceMethod<&NetlinkWrap::Call<NeighDel>>("neighDel"),
                           InstanceMethod<&NetlinkWrap::Call<VxlanAdd>>("vxlanAdd"),
                           InstanceMethod<&NetlinkWrap::Call<IpipAdd>>("ipipAdd"),
                           InstanceMethod<&NetlinkWrap::Call<FdbSet>>("fdbSet"),
                           InstanceMethod<&NetlinkWrap::Call<FdbDel>>("fdbDel"),
                           InstanceMethod<&NetlinkWrap::Call<FdbList>>("fdbList"),
                           InstanceMethod<&NetlinkWrap::Call<SysctlGet>>("sysctlGet"),
                           InstanceMethod<&NetlinkWrap::Call<SysctlSet>>("sysctlSet"),
                           InstanceMethod<&NetlinkWrap::Call<ConntrackFlush>>("conntrackFlush"),
                           InstanceMethod<&NetlinkWrap::Call<ConntrackList>>("conntrackList"),
                           InstanceMethod<&NetlinkWrap::Call<ConntrackDelete>>("conntrackDelete"),
                           InstanceMethod<&NetlinkWrap::Call<ConntrackDump>>("conntrackDump"),
                       });
  }

  // new Netlink(ns?): the socket is created inside ns (setns, socket(),
  // setns back) and then used from this thread; no ns = this thread's own.
  explicit NetlinkWrap(const Napi::CallbackInfo& info) : Napi::ObjectWrap<NetlinkWrap>(info) {
    Napi::Env env = info.Env();
    Args a(env, "netlink");
    if (Args::present(info[0]) && !info[0].IsNull()) {
      int fd = netnsFdOf(env, info[0]);
      if (env.IsExceptionPending()) return;
      if (fd < 0) {
        a.fail("ns", "an open NetNS from openNetns() (or omitted for the caller's namespace)", info[0]);
        return;
      }
      // Our own fd: sysctls need the namespace after the caller closed its NetNS.
      h_.nsFd = ::fcntl(fd, F_DUPFD_CLOEXEC, 0);
      if (h_.nsFd < 0) {
        NlError e;
        e.set(errno, "netlink", NetNSWrap::Unwrap(info[0].As<Napi::Object>())->path());
        throwNlError(env, e);
        return;
      }
      h_.nsPath = NetNSWrap::Unwrap(info[0].As<Napi::Object>())->path();
    }
    NlError e;
    if (!openSocketIn(h_.nsFd, h_.nsPath, h_.sock, e)) throwNlError(env, e);
  }
  ~NetlinkWrap() override { closeAll(); }

 private:
  template <M fn>
  Napi::Value Call(const Napi::CallbackInfo& info) {
    if (!checkOpen(info.Env())) return info.Env().Undefined();
    return fn(h_, info);
  }
  // Promise-returning methods report a closed handle by rejecting.
  template <M fn>
  Napi::Value CallAsync(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    if (checkOpen(env)) return fn(h_, info);
    return rejectedWithPending(env);
  }
  Napi::Value LinkSetM(const Napi::CallbackInfo& info) {
    if (!checkOpen(info.Env())) return info.Env().Undefined();
    return LinkSet(h_, info, netnsFdOf);
  }
  bool checkOpen(Napi::Env env) {
    if (h_.sock.isOpen()) return true;
    NlError e;
    e.set(EBADF, "netlink", h_.nsPath.empty() ? "closed handle" : h_.nsPath + " (closed handle)");
    throwNlError(env, e);
    return false;
  }
  Napi::Value Netns(const Napi::CallbackInfo& info) { return Napi::String::New(info.Env(), h_.nsPath); }
  Napi::Value Close(const Napi::CallbackInfo& info) {
    closeAll();
    return info.Env().Undefined();
  }
  void closeAll() {
    h_.sock.close();
    closeSysctlDirs(h_);
    if (h_.nsFd >= 0) ::close(h_.nsFd);
    h_.nsFd = -1;
  }

  Handle h_;
};

class NetlinkAddon : public Napi::Addon<NetlinkAddon> {
 public:
  NetlinkAddon(Napi::Env env, Napi::Object exports) {
    Napi::Function ns = NetNSWrap::Define(env);
    Napi::Function nl = NetlinkWrap::Define(env);
    if (env.IsExceptionPending()) return;
    data_.netnsCtor = Napi::Persistent(ns);
    data_.netlinkCtor = Napi::Persistent(nl);
    DefineAddon(exports, {
                             InstanceMethod<&NetlinkAddon::OpenNetns>("openNetns"),
                             InstanceMethod<&NetlinkAddon::Netlink>("netlink"),
                             InstanceMethod<&NetlinkAddon::SetErrorClass>("setErrorClass"),
                             InstanceMethod<&NetlinkAddon::PeerCredM>("peerCred"),
                             InstanceMethod<&NetlinkAddon::FlockTryM>("flockTry"),
                             InstanceMethod<&NetlinkAddon::FlockWaitM>("flockWait"),
                             InstanceMethod<&NetlinkAddon::TunnelMessageM>("tunnelMessage"),
                             InstanceMethod<&NetlinkAddon::NftRunM>("nftRun"),
                             InstanceMethod<&NetlinkAddon::NftRunAsyncM>("nftRunAsync"),
                             InstanceMethod<&NetlinkAddon::FlowReaderM>("flowReader"),
                             InstanceValue("ABI_VERSION", Napi::Number::New(env, kAbiVersion), napi_enumerable),
                             InstanceValue("NetNS", ns, napi_enumerable),
                             InstanceValue("Netlink", nl, napi_enumerable),
                         });
  }

  AddonData data_;

 private:
  Napi::Value OpenNetns(const Napi::CallbackInfo& info) {
    return data_.netnsCtor.New({info[0]});
  }
  Napi::Value Netlink(const Napi::CallbackInfo& info) {
    if (info.Length() == 0) return data_.netlinkCtor.New({});
    return data_.netlinkCtor.New({info[0]});
  }
  Napi::Value PeerCredM(const Napi::CallbackInfo& info) { return PeerCred(info); }
  Napi::Value FlockTryM(const Napi::CallbackInfo& info) { return FlockTry(info); }
  Napi::Value FlockWaitM(const Napi::CallbackInfo& info) { return FlockWaitAsync(info); }
  Napi::Value TunnelMessageM(const Napi::CallbackInfo& info) { return TunnelMessage(info); }
  Napi::Value NftRunM(const Napi::CallbackInfo& info) { return NftRun(info, netnsFdOf); }
  Napi::Value NftRunAsyncM(const Napi::CallbackInfo& info) { return NftRunAsync(info, netnsFdOf); }
  Napi::Value FlowReaderM(const Napi::CallbackInfo& info) { return FlowReader(info, netnsFdOf); }
  Napi::Value SetErrorClass(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    if (!info[0].IsFunction()) {
      Args a(env, "setErrorClass");
      a.fail("cls", "a constructor (the NetlinkError class)", info[0]);
      return env.Undefined();
    }
    data_.errorClass = Napi::Persistent(info[0].As<Napi::Function>());
    return env.Undefined();
  }
};

}  // namespace

AddonData* addonData(Napi::Env env) {
  NetlinkAddon* a = env.GetInstanceData<NetlinkAddon>();
  return a ? &a->data_ : nullptr;
}

}  // namespace np

using np::NetlinkAddon;
NODE_API_ADDON(NetlinkAddon)
