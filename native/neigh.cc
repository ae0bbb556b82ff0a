// Neighbours: RTM_NEWNEIGH (permanent entries, created or replaced) and
// RTM_DELNEIGH. Listing lives with the FDB dump in tunnel.cc.
#include <linux/neighbour.h>
#include <sys/socket.h>

#include "ops.h"

namespace np {

namespace {

// Permanent entries are created or replaced (RTM_NEWNEIGH, with lladdr) and
// deleted (RTM_DELNEIGH, by dst) through the same reader.
Napi::Value neighChange(Handle& h, const Napi::CallbackInfo& info, const char* fn, uint16_t type, uint16_t flags) {
  Napi::Env env = info.Env();
  Args a(env, fn);
  Napi::Object o;
  LinkRef ref;
  IpAddr dst;
  uint8_t mac[6];
  const bool add = type == RTM_NEWNEIGH;
  if (!a.object(info[0], "neigh", o)) return env.Undefined();
  a.link(a.prop(o, "dev"), "neigh.dev", ref);
  a.ip(a.prop(o, "dst"), "neigh.dst", dst);
  if (add) a.mac(a.prop(o, "lladdr"), "neigh.lladdr", mac);
  if (!a.ok()) return env.Undefined();
  NlError e;
  uint32_t index;
  if (!linkIndex(h, ref, index, e)) return throwNlError(env, e), env.Undefined();
  NlMsg m(type, flags);
  ndmsg nd{};
  nd.ndm_family = static_cast<uint8_t>(dst.family);
  nd.ndm_ifindex = static_cast<int>(index);
  if (add) nd.ndm_state = NUD_PERMANENT;
  m.put(nd);
  m.attr(NDA_DST, dst.bytes, dst.len());
  if (add) m.attr(NDA_LLADDR, mac, 6);
  if (!h.sock.request(m, e)) {
    e.subject = formatIp(dst.family, dst.bytes) + " dev " + ref.subject();
    return throwNlError(env, e), env.Undefined();
  }
  return env.Undefined();
}

}  // namespace

Napi::Value NeighSet(Handle& h, const Napi::CallbackInfo& info) { return neighChange(h, info, "neighSet", RTM_NEWNEIGH, NLM_F_CREATE | NLM_F_REPLACE); }
Napi::Value NeighDel(Handle& h, const Napi::CallbackInfo& info) { return neighChange(h, info, "neighDel", RTM_DELNEIGH, 0); }

}  // namespace np
