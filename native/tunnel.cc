// Overlay devices and their forwarding state: VXLAN and IPIP links
// (RTM_NEWLINK), bridge FDB entries of a VXLAN device (RTM_*NEIGH on
// AF_BRIDGE with NTF_SELF), and neighbour list/delete for reconciling the
// permanent entries neighSet creates.
#include <arpa/inet.h>
#include <linux/if_link.h>
#include <linux/if_tunnel.h>
#include <linux/neighbour.h>
#include <sys/socket.h>

#include <vector>

#include "ops.h"

#ifndef AF_BRIDGE
#define AF_BRIDGE 7
#endif

namespace np {

namespace {

struct TunnelReq {
  std::string name;
  uint32_t mtu = 0;
  bool hasLocal = false, hasRemote = false, hasDev = false, hasMac = false;
  IpAddr local, remote;
  LinkRef dev;
  uint8_t mac[6] = {};
  // vxlan
  uint32_t vni = 0, port = 4789;
  bool learning = false;
  // ipip
  uint32_t ttl = 0;
};

// Reads the fields both kinds share; `fn`-prefixed TypeErrors name the field.
bool readCommon(Args& a, const Napi::Object& o, TunnelReq& r) {
  Napi::Value v;
  a.ifname(a.prop(o, "name"), "options.name", r.name);
  if (Args::present(v = a.prop(o, "mtu"))) a.uint(v, "options.mtu", 68, 65535, r.mtu);
  if (Args::present(v = a.prop(o, "local")) && a.ip(v, "options.local", r.local)) r.hasLocal = true;
  if (Args::present(v = a.prop(o, "dev")) && a.link(v, "options.dev", r.dev)) r.hasDev = true;
  if (Args::present(v = a.prop(o, "mac"))) r.hasMac = a.mac(v, "options.mac", r.mac);
  return a.ok();
}

void putHeader(NlMsg& m, const TunnelReq& r) {
  ifinfomsg ifi{};
  ifi.ifi_family = AF_UNSPEC;
  m.put(ifi);
  m.str(IFLA_IFNAME, r.name);
  if (r.mtu) m.u32(IFLA_MTU, r.mtu);
  if (r.hasMac) m.attr(IFLA_ADDRESS, r.mac, 6);
}

bool readIpip(Args& a, const Napi::Value& arg, TunnelReq& r) {
  Napi::Object o;
  if (!a.object(arg, "options", o)) return false;
  if (!readCommon(a, o, r)) return false;
  Napi::Value v;
  if (Args::present(v = a.prop(o, "remote")) && a.ip(v, "options.remote", r.remote)) r.hasRemote = true;
  if (Args::present(v = a.prop(o, "ttl"))) a.uint(v, "options.ttl", 0, 255, r.ttl);
  if (!a.ok()) return false;
  if (r.hasLocal && r.local.family != AF_INET) return a.failText("options.local", "an IPv4 address (ipip carries IPv4 in IPv4)", "'" + formatIp(r.local.family, r.local.bytes) + "'");
  if (r.hasRemote && r.remote.family != AF_INET) return a.failText("options.remote", "an IPv4 address (ipip carries IPv4 in IPv4)", "'" + formatIp(r.remote.family, r.remote.bytes) + "'");
  if (r.hasMac) return a.failText("options.mac", "absent (an ipip device has no link-layer address)", "a MAC");
  return true;
}

// RTM_NEWLINK kind "ipip": IFLA_IPTUN_LINK / LOCAL / REMOTE / TTL and PMTUDISC
// on (the kernel's default for ip(8)-created tunnels, kept explicit).
void buildIpip(NlMsg& m, const TunnelReq& r, uint32_t devIndex) {
  putHeader(m, r);
  size_t li = m.nestBegin(IFLA_LINKINFO);
  m.str(IFLA_INFO_KIND, "ipip");
  size_t data = m.nestBegin(IFLA_INFO_DATA);
  if (devIndex) m.u32(IFLA_IPTUN_LINK, devIndex);
  if (r.hasLocal) m.attr(IFLA_IPTUN_LOCAL, r.local.bytes, 4);
  if (r.hasRemote) m.attr(IFLA_IPTUN_REMOTE, r.remote.bytes, 4);
  m.u8(IFLA_IPTUN_TTL, static_cast<uint8_t>(r.ttl));
  m.u8(IFLA_IPTUN_PMTUDISC, 1);
  m.nestEnd(data);
  m.nestEnd(li);
}

bool readVxlan(Args& a, const Napi::Value& arg, TunnelReq& r) {
  Napi::Object o;
  if (!a.object(arg, "options", o)) return false;
  if (!readCommon(a, o, r)) return false;
  Napi::Value v;
  a.uint(a.prop(o, "vni"), "options.vni", 1, 0xffffff, r.vni);
  if (Args::present(v = a.prop(o, "port"))) a.uint(v, "options.port", 1, 65535, r.port);
  if (Args::present(v = a.prop(o, "learning"))) a.boolean(v, "options.learning", r.learning);
  return a.ok();
}

// RTM_NEWLINK kind "vxlan": VNI, destination port (network order), the local
// VTEP address (its family picks the underlay family), the underlay device,
// and learning off: every remote VTEP comes from an FDB entry we program.
void buildVxlan(NlMsg& m, const TunnelReq& r, uint32_t devIndex) {
  putHeader(m, r);
  size_t li = m.nestBegin(IFLA_LINKINFO);
  m.str(IFLA_INFO_KIND, "vxlan");
  size_t data = m.nestBegin(IFLA_INFO_DATA);
  m.u32(IFLA_VXLAN_ID, r.vni);
  uint16_t port = htons(static_cast<uint16_t>(r.port));
  m.attr(IFLA_VXLAN_PORT, &port, 2);
  if (r.hasLocal) {
    if (r.local.family == AF_INET) m.attr(IFLA_VXLAN_LOCAL, r.local.bytes, 4);
    else m.attr(IFLA_VXLAN_LOCAL6, r.local.bytes, 16);
  }
  if (devIndex) m.u32(IFLA_VXLAN_LINK, devIndex);
  m.u8(IFLA_VXLAN_LEARNING, r.learning ? 1 : 0);
  m.nestEnd(data);
  m.nestEnd(li);
}

Napi::Value sendLink(Handle& h, Napi::Env env, NlMsg& m, const std::string& name, const char* kindHint) {
  NlError e;
  if (!h.sock.request(m, e)) {
    e.subject = name;
    // The kernel answers a link kind it has no module for with EOPNOTSUPP
    // and "Unknown device type" in the extended ack.
    if (e.err == EOPNOTSUPP)
      e.extack = (e.extack.empty() ? std::string("Unknown device type") : e.extack) + ": this kernel has no '" + kindHint + "' module (modprobe " + kindHint + ")";
    return throwNlError(env, e), env.Undefined();
  }
  return env.Undefined();
}

struct FdbReq {
  LinkRef dev;
  uint8_t mac[6] = {};
  IpAddr dst;
};

bool readFdb(Args& a, const Napi::Value& arg, FdbReq& r) {
  Napi::Object o;
  if (!a.object(arg, "fdb", o)) return false;
  a.link(a.prop(o, "dev"), "fdb.dev", r.dev);
  a.mac(a.prop(o, "lladdr"), "fdb.lladdr", r.mac);
  a.ip(a.prop(o, "dst"), "fdb.dst", r.dst);
  return a.ok();
}

Napi::Value fdbChange(Handle& h, const Napi::CallbackInfo& info, const char* fn, uint16_t type, uint16_t flags) {
  Napi::Env env = info.Env();
  Args a(env, fn);
  FdbReq r;
  if (!readFdb(a, info[0], r)) return env.Undefined();
  NlError e;
  uint32_t index;
  if (!linkIndex(h, r.dev, index, e)) return throwNlError(env, e), env.Undefined();
  NlMsg m(type, flags);
  ndmsg nd{};
  nd.ndm_family = AF_BRIDGE;
  nd.ndm_ifindex = static_cast<int>(index);
  nd.ndm_state = NUD_PERMANENT;
  // NTF_SELF: the entry belongs to the VXLAN device's own FDB (not a bridge
  // master's), which is where the VXLAN driver looks up the remote VTEP.
  nd.ndm_flags = NTF_SELF;
  m.put(nd);
  m.attr(NDA_LLADDR, r.mac, 6);
  m.attr(NDA_DST, r.dst.bytes, r.dst.len());
  if (!h.sock.request(m, e)) {
    e.subject = formatMac(r.mac, 6) + " dst " + formatIp(r.dst.family, r.dst.bytes) + " dev " + r.dev.subject();
    return throwNlError(env, e), env.Undefined();
  }
  return env.Undefined();
}

// Dumps neighbours of `family` (AF_BRIDGE for FDB) on one link.
bool dumpNeigh(Handle& h, uint8_t family, uint32_t oif, NlError& e, const std::function<void(const ndmsg*, const Attrs&)>& fn) {
  NlMsg m(RTM_GETNEIGH, 0);
  ndmsg nd{};
  nd.ndm_family = family;
  nd.ndm_ifindex = static_cast<int>(oif);
  m.put(nd);
  if (oif) m.u32(NDA_IFINDEX, oif);
  return h.sock.dump(m, e, [&](const nlmsghdr* r) {
    if (r->nlmsg_type != RTM_NEWNEIGH || r->nlmsg_len < NLMSG_LENGTH(sizeof(ndmsg))) return;
    auto* n = static_cast<const ndmsg*>(NLMSG_DATA(r));
    if (oif && static_cast<uint32_t>(n->ndm_ifindex) != oif) return;
    Attrs at(reinterpret_cast<const uint8_t*>(n) + NLMSG_ALIGN(sizeof(ndmsg)), r->nlmsg_len - NLMSG_LENGTH(sizeof(ndmsg)));
    fn(n, at);
  });
}

bool readListLink(Args& a, const Napi::CallbackInfo& info, LinkRef& ref, uint32_t& family, bool withFamily) {
  Napi::Object o;
  if (!a.object(info[0], "options", o)) return false;
  a.link(a.prop(o, "dev"), "options.dev", ref);
  Napi::Value v;
  if (withFamily && Args::present(v = a.prop(o, "family")) && a.uint(v, "options.family", 4, 6, family) && family == 5)
    a.fail("options.family", "4 or 6", v);
  return a.ok();
}

}  // namespace

namespace {

// Reads the options, resolves the underlay device and sends the RTM_NEWLINK.
Napi::Value addTunnel(Handle& h, const Napi::CallbackInfo& info, const char* fn, const char* kind, bool (*read)(Args&, const Napi::Value&, TunnelReq&),
                      void (*build)(NlMsg&, const TunnelReq&, uint32_t)) {
  Napi::Env env = info.Env();
  Args a(env, fn);
  TunnelReq r;
  if (!read(a, info[0], r)) return env.Undefined();
  NlError e;
  uint32_t dev = 0;
  if (r.hasDev && !linkIndex(h, r.dev, dev, e)) return throwNlError(env, e), env.Undefined();
  NlMsg m(RTM_NEWLINK, NLM_F_CREATE | NLM_F_EXCL);
  build(m, r, dev);
  return sendLink(h, env, m, r.name, kind);
}

}  // namespace

Napi::Value VxlanAdd(Handle& h, const Napi::CallbackInfo& info) { return addTunnel(h, info, "vxlanAdd", "vxlan", readVxlan, buildVxlan); }
Napi::Value IpipAdd(Handle& h, const Napi::CallbackInfo& info) { return addTunnel(h, info, "ipipAdd", "ipip", readIpip, buildIpip); }

Napi::Value TunnelMessage(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Args a(env, "tunnelMessage");
  std::string kind;
  if (!a.string(info[0], "kind", kind)) return env.Undefined();
  TunnelReq r;
  // Without a kernel to resolve names, options.dev must be an ifindex here.
  uint32_t dev = 0;
  NlMsg m(RTM_NEWLINK, NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL);
  if (kind == "ipip") {
    if (!readIpip(a, info[1], r)) return env.Undefined();
  } else if (kind == "vxlan") {
    if (!readVxlan(a, info[1], r)) return env.Undefined();
  } else {
    a.fail("kind", "'ipip' or 'vxlan'", info[0]);
    return env.Undefined();
  }
  if (r.hasDev) {
    if (!r.dev.index) {
      a.failText("options.dev", "an ifindex (tunnelMessage resolves no names)", "'" + r.dev.name + "'");
      return env.Undefined();
    }
    dev = r.dev.index;
  }
  if (kind == "ipip") buildIpip(m, r, dev);
  else buildVxlan(m, r, dev);
  return Napi::Buffer<uint8_t>::Copy(env, m.data(), m.size());
}

Napi::Value FdbSet(Handle& h, const Napi::CallbackInfo& info) {
  return fdbChange(h, info, "fdbSet", RTM_NEWNEIGH, NLM_F_CREATE | NLM_F_REPLACE);
}
Napi::Value FdbDel(Handle& h, const Napi::CallbackInfo& info) {
  return fdbChange(h, info, "fdbDel", RTM_DELNEIGH, 0);
}

Napi::Value FdbList(Handle& h, const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Args a(env, "fdbList");
  LinkRef ref;
  uint32_t family = 0;
  if (!readListLink(a, info, ref, family, false)) return env.Undefined();
  NlError e;
  uint32_t oif;
  if (!linkIndex(h, ref, oif, e)) return throwNlError(env, e), env.Undefined();
  Napi::Array arr = Napi::Array::New(env);
  uint32_t n = 0;
  bool ok = dumpNeigh(h, AF_BRIDGE, oif, e, [&](const ndmsg* nd, const Attrs& at) {
    auto* ll = at.get(NDA_LLADDR);
    if (!ll || RTA_PAYLOAD(ll) != 6) return;
    Napi::Object ob = Napi::Object::New(env);
    ob.Set("lladdr", formatMac(static_cast<const uint8_t*>(RTA_DATA(ll)), 6));
    if (auto* d = at.get(NDA_DST)) {
      if (RTA_PAYLOAD(d) == 4) ob.Set("dst", formatIp(AF_INET, RTA_DATA(d)));
      else if (RTA_PAYLOAD(d) == 16) ob.Set("dst", formatIp(AF_INET6, RTA_DATA(d)));
    }
    ob.Set("state", nd->ndm_state);
    ob.Set("flags", nd->ndm_flags);
    arr.Set(n++, ob);
  });
  if (!ok) return throwNlError(env, e), env.Undefined();
  return arr;
}

Napi::Value NeighList(Handle& h, const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Args a(env, "neighList");
  LinkRef ref;
  uint32_t family = 0;
  if (!readListLink(a, info, ref, family, true)) return env.Undefined();
  NlError e;
  uint32_t oif;
  if (!linkIndex(h, ref, oif, e)) return throwNlError(env, e), env.Undefined();
  Napi::Array arr = Napi::Array::New(env);
  uint32_t n = 0;
  uint8_t fam = family == 4 ? AF_INET : family == 6 ? AF_INET6 : AF_UNSPEC;
  bool ok = dumpNeigh(h, fam, oif, e, [&](const ndmsg* nd, const Attrs& at) {
    if (nd->ndm_family != AF_INET && nd->ndm_family != AF_INET6) return;
    auto* d = at.get(NDA_DST);
    if (!d || RTA_PAYLOAD(d) != (nd->ndm_family == AF_INET ? 4u : 16u)) return;
    Napi::Object ob = Napi::Object::New(env);
    ob.Set("dst", formatIp(nd->ndm_family, RTA_DATA(d)));
    if (auto* ll = at.get(NDA_LLADDR)) ob.Set("lladdr", formatMac(static_cast<const uint8_t*>(RTA_DATA(ll)), RTA_PAYLOAD(ll)));
    ob.Set("state", nd->ndm_state);
    ob.Set("permanent", (nd->ndm_state & NUD_PERMANENT) != 0);
    arr.Set(n++, ob);
  });
  if (!ok) return throwNlError(env, e), env.Undefined();
  return arr;
}

}  // namespace np
