// Overlay devices: the JS face of core/tunnel (vxlanAdd, ipipAdd and
// tunnelMessage, the bytes those would send).
#include <sys/socket.h>

#include "bind/ops.h"
#include "core/tunnel.h"

namespace np {

namespace {

// Reads the fields both kinds share.
bool readCommon(Args& a, const Napi::Object& o, TunnelSpec& r) {
  Napi::Value v;
  a.ifname(a.prop(o, "name"), "options.name", r.name);
  if (Args::present(v = a.prop(o, "mtu"))) a.uint(v, "options.mtu", 68, 65535, r.mtu);
  if (Args::present(v = a.prop(o, "local")) && a.ip(v, "options.local", r.local)) r.hasLocal = true;
  if (Args::present(v = a.prop(o, "dev")) && a.link(v, "options.dev", r.dev)) r.hasDev = true;
  if (Args::present(v = a.prop(o, "mac"))) r.hasMac = a.mac(v, "options.mac", r.mac);
  return a.ok();
}

bool readIpip(Args& a, const Napi::Object& o, TunnelSpec& r) {
  Napi::Value v;
  if (Args::present(v = a.prop(o, "remote")) && a.ip(v, "options.remote", r.remote)) r.hasRemote = true;
  if (Args::present(v = a.prop(o, "ttl"))) a.uint(v, "options.ttl", 0, 255, r.ttl);
  if (!a.ok()) return false;
  const char* v4 = "an IPv4 address (ipip carries IPv4 in IPv4)";
  if (r.hasLocal && r.local.family != AF_INET) return a.failText("options.local", v4, "'" + formatIp(r.local) + "'");
  if (r.hasRemote && r.remote.family != AF_INET)
    return a.failText("options.remote", v4, "'" + formatIp(r.remote) + "'");
  if (r.hasMac) return a.failText("options.mac", "absent (an ipip device has no link-layer address)", "a MAC");
  return true;
}

bool readVxlan(Args& a, const Napi::Object& o, TunnelSpec& r) {
  Napi::Value v;
  a.uint(a.prop(o, "vni"), "options.vni", 1, 0xffffff, r.vni);
  if (Args::present(v = a.prop(o, "port"))) a.uint(v, "options.port", 1, 65535, r.port);
  if (Args::present(v = a.prop(o, "learning"))) a.boolean(v, "options.learning", r.learning);
  return a.ok();
}

bool readTunnel(Args& a, const Napi::Value& arg, TunnelKind kind, TunnelSpec& r) {
  Napi::Object o;
  r.kind = kind;
  if (!a.object(arg, "options", o) || !readCommon(a, o, r)) return false;
  return kind == TunnelKind::kIpip ? readIpip(a, o, r) : readVxlan(a, o, r);
}

Napi::Value tunnelAddJs(Handle& h, const Napi::CallbackInfo& info, const char* fn, TunnelKind kind) {
  Napi::Env env = info.Env();
  Args a(env, fn);
  TunnelSpec r;
  if (!readTunnel(a, info[0], kind, r)) return env.Undefined();
  NlError e;
  if (!tunnelAdd(h, r, e)) return throwNlError(env, e), env.Undefined();
  return env.Undefined();
}

}  // namespace

Napi::Value VxlanAdd(Handle& h, const Napi::CallbackInfo& i) {
  return tunnelAddJs(h, i, "vxlanAdd", TunnelKind::kVxlan);
}
Napi::Value IpipAdd(Handle& h, const Napi::CallbackInfo& i) { return tunnelAddJs(h, i, "ipipAdd", TunnelKind::kIpip); }

Napi::Value TunnelMessage(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Args a(env, "tunnelMessage");
  std::string kindText;
  if (!a.string(info[0], "kind", kindText)) return env.Undefined();
  TunnelKind kind;
  if (kindText == "ipip") kind = TunnelKind::kIpip;
  else if (kindText == "vxlan") kind = TunnelKind::kVxlan;
  else return a.fail("kind", "'ipip' or 'vxlan'", info[0]), env.Undefined();
  TunnelSpec r;
  if (!readTunnel(a, info[1], kind, r)) return env.Undefined();
  // Without a kernel to resolve names, options.dev must be an ifindex here.
  if (r.hasDev && !r.dev.index) {
    a.failText("options.dev", "an ifindex (tunnelMessage resolves no names)", "'" + r.dev.name + "'");
    return env.Undefined();
  }
  NlMsg m = buildTunnelAddMsg(r, r.hasDev ? r.dev.index : 0);
  // As the socket would send it.
  m.hdr()->nlmsg_flags |= NLM_F_REQUEST | NLM_F_ACK;
  return Napi::Buffer<uint8_t>::Copy(env, m.data(), m.size());
}

}  // namespace np
