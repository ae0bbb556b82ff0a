// The operations of a Netlink handle, one file per rtnetlink object. Each
// takes the JS arguments, validates them (TypeError naming the field), talks
// to the kernel and returns a JS value or throws a NetlinkError.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "args.h"
#include "common.h"

namespace np {

// A NETLINK_ROUTE socket plus the namespace it was created in (nsFd < 0: the
// namespace of the thread that created it), which sysctls need.
struct Handle {
  NlSocket sock;
  int nsFd = -1;
  std::string nsPath;
  // Open directories /proc/sys/net/<family> of this namespace, by family
  // ("ipv4", "ipv6", ...): sysctls are opened relative to them (sysctl.cc says
  // why). Closed with the handle (closeSysctlDirs).
  std::vector<std::pair<std::string, int>> sysctlDirs;
};

// Closes the handle's cached sysctl directories.
void closeSysctlDirs(Handle& h);

// Resolves a link to its ifindex (RTM_GETLINK when given by name).
bool linkIndex(Handle& h, const LinkRef& ref, uint32_t& index, NlError& e);

Napi::Value LinkGet(Handle& h, const Napi::CallbackInfo& info);
Napi::Value LinkFind(Handle& h, const Napi::CallbackInfo& info);
Napi::Value LinkList(Handle& h, const Napi::CallbackInfo& info);
Napi::Value VethAdd(Handle& h, const Napi::CallbackInfo& info);
// linkSet's options.netns is a NetNS object; the wrapper hands its fd here.
using NetnsFdOf = int (*)(Napi::Env env, const Napi::Value& v);
Napi::Value LinkSet(Handle& h, const Napi::CallbackInfo& info, NetnsFdOf fdOf);
Napi::Value LinkDel(Handle& h, const Napi::CallbackInfo& info);
// linkDel on a libuv threadpool thread: returns a Promise<void>.
Napi::Value LinkDelAsync(Handle& h, const Napi::CallbackInfo& info);
// RTM_DELLINK of every link in one link group (IFLA_GROUP), on the threadpool.
Napi::Value LinkDelGroupAsync(Handle& h, const Napi::CallbackInfo& info);

Napi::Value AddrAdd(Handle& h, const Napi::CallbackInfo& info);
Napi::Value AddrDel(Handle& h, const Napi::CallbackInfo& info);
Napi::Value AddrList(Handle& h, const Napi::CallbackInfo& info);

Napi::Value RouteAdd(Handle& h, const Napi::CallbackInfo& info);
Napi::Value RouteReplace(Handle& h, const Napi::CallbackInfo& info);
Napi::Value RouteDel(Handle& h, const Napi::CallbackInfo& info);
Napi::Value RouteList(Handle& h, const Napi::CallbackInfo& info);

Napi::Value NeighSet(Handle& h, const Napi::CallbackInfo& info);
Napi::Value NeighList(Handle& h, const Napi::CallbackInfo& info);
Napi::Value NeighDel(Handle& h, const Napi::CallbackInfo& info);

// Overlay links and the VXLAN device's FDB (native/tunnel.cc).
Napi::Value VxlanAdd(Handle& h, const Napi::CallbackInfo& info);
Napi::Value IpipAdd(Handle& h, const Napi::CallbackInfo& info);
Napi::Value FdbSet(Handle& h, const Napi::CallbackInfo& info);
Napi::Value FdbDel(Handle& h, const Napi::CallbackInfo& info);
Napi::Value FdbList(Handle& h, const Napi::CallbackInfo& info);
// Not a netlink call: the RTM_NEWLINK bytes ipipAdd/vxlanAdd would send
// (kind, options) -> Buffer, so the messages are testable without the kernel
// module (this project's test kernels have no ipip).
Napi::Value TunnelMessage(const Napi::CallbackInfo& info);

Napi::Value SysctlGet(Handle& h, const Napi::CallbackInfo& info);
Napi::Value SysctlSet(Handle& h, const Napi::CallbackInfo& info);

// Conntrack entries naming an address, deleted over ctnetlink (native/conntrack.cc).
Napi::Value ConntrackFlush(Handle& h, const Napi::CallbackInfo& info);

// Not a netlink call: SO_PEERCRED of a unix socket fd (the agent's CNI socket).
Napi::Value PeerCred(const Napi::CallbackInfo& info);

// Not netlink calls: flock(2) for the host locks (native/flock.cc says how the wait is bounded).
Napi::Value FlockTry(const Napi::CallbackInfo& info);
Napi::Value FlockWaitAsync(const Napi::CallbackInfo& info);

// nftables scripts through libnftables (dlopen'ed on first use). Return
// { ok, missing, rc, output, error }; nftRunAsync runs on the libuv threadpool.
Napi::Value NftRun(const Napi::CallbackInfo& info, NetnsFdOf fdOf);
Napi::Value NftRunAsync(const Napi::CallbackInfo& info, NetnsFdOf fdOf);

// Shared by route/addr: 'universe'|'global'|'site'|'link'|'host'|0..255.
bool readScope(Args& a, const Napi::Value& v, const std::string& field, uint8_t& out);

}  // namespace np
