// The JS face of the addon's operations, one file per object. Each reads the
// JS arguments into the typed requests of native/core (TypeError naming the
// field), runs the core op and returns a JS value or throws a NetlinkError.
#pragma once

#include <sys/socket.h>

#include <cstdint>
#include <string>
#include <vector>

#include "bind/args.h"
#include "bind/common.h"
#include "core/conntrack.h"
#include "core/handle.h"

namespace np {

// entries as a JS array, each converted by toJs(env, entry).
template <typename Entry, typename ToJs>
Napi::Array arrayToJs(Napi::Env env, const std::vector<Entry>& entries, ToJs toJs) {
  Napi::Array arr = Napi::Array::New(env, entries.size());
  for (size_t i = 0; i < entries.size(); ++i) arr.Set(static_cast<uint32_t>(i), toJs(env, entries[i]));
  return arr;
}

// A core list op's answer as a JS array, each entry converted by toJs; a
// failure thrown as a NetlinkError.
template <typename Filter, typename Entry>
Napi::Value listToJs(Napi::Env env, Handle& h, const Filter& f,
                     bool (*list)(Handle&, const Filter&, std::vector<Entry>&, NlError&),
                     void (*toJs)(const Entry&, Napi::Object&)) {
  std::vector<Entry> out;
  NlError e;
  if (!list(h, f, out, e)) return throwNlError(env, e), env.Undefined();
  return arrayToJs(env, out, [toJs](Napi::Env env, const Entry& x) {
    Napi::Object o = Napi::Object::New(env);
    toJs(x, o);
    return o;
  });
}

// The same for a list op without a filter (every link, every conntrack entry).
template <typename Entry>
Napi::Value listAllToJs(Napi::Env env, Handle& h, bool (*list)(Handle&, std::vector<Entry>&, NlError&),
                        Napi::Object (*toJs)(Napi::Env, const Entry&)) {
  std::vector<Entry> out;
  NlError e;
  if (!list(h, out, e)) return throwNlError(env, e), env.Undefined();
  return arrayToJs(env, out, toJs);
}

// A conntrack tuple's fields on o (src, dst, sport, dport; replySrc, ... for
// the reply direction); the ports only where the protocol has them.
void setCtTuple(Napi::Env env, Napi::Object& o, const CtTuple& t, bool reply);

// What a listed conntrack entry and a conntrack event both carry: family,
// protocol, the tuples and the id.
template <typename Ct>
void setCtFields(Napi::Env env, Napi::Object& o, const Ct& c) {
  o.Set("family", Napi::Number::New(env, c.family == AF_INET6 ? 6 : 4));
  o.Set("protocol", Napi::Number::New(env, c.orig.proto));
  setCtTuple(env, o, c.orig, false);
  if (c.hasReply) setCtTuple(env, o, c.reply, true);
  if (c.hasId) o.Set("id", Napi::Number::New(env, c.id));
}

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
// Listing them, and deleting the listed ones a caller chose.
Napi::Value ConntrackList(Handle& h, const Napi::CallbackInfo& info);
Napi::Value ConntrackDelete(Handle& h, const Napi::CallbackInfo& info);
// Every conntrack entry of the namespace, with accounting (native/bind/flowlog.cc).
Napi::Value ConntrackDump(Handle& h, const Napi::CallbackInfo& info);
// flowReader(kind, options, onEvents): an NFLOG or conntrack event reader on the event loop.
Napi::Value FlowReader(const Napi::CallbackInfo& info, NetnsFdOf fdOf);

// Not a netlink call: SO_PEERCRED of a unix socket fd (the agent's CNI socket).
Napi::Value PeerCred(const Napi::CallbackInfo& info);

// Not netlink calls: flock(2) for the host locks (native/flock.cc says how the wait is bounded).
Napi::Value FlockTry(const Napi::CallbackInfo& info);
Napi::Value FlockWaitAsync(const Napi::CallbackInfo& info);

// nftables scripts through libnftables (dlopen'ed on first use). Return
// { ok, missing, rc, output, error }; nftRunAsync runs on the libuv threadpool.
Napi::Value NftRun(const Napi::CallbackInfo& info, NetnsFdOf fdOf);
Napi::Value NftRunAsync(const Napi::CallbackInfo& info, NetnsFdOf fdOf);


}  // namespace np
