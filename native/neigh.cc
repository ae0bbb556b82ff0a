// Neighbours: RTM_NEWNEIGH (permanent entries, created or replaced).
#include <linux/neighbour.h>
#include <sys/socket.h>

#include "ops.h"

namespace np {

Napi::Value NeighSet(Handle& h, const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Args a(env, "neighSet");
  Napi::Object o;
  LinkRef ref;
  IpAddr dst;
  uint8_t mac[6];
  if (!a.object(info[0], "neigh", o)) return env.Undefined();
  a.link(a.prop(o, "dev"), "neigh.dev", ref);
  a.ip(a.prop(o, "dst"), "neigh.dst", dst);
  a.mac(a.prop(o, "lladdr"), "neigh.lladdr", mac);
  if (!a.ok()) return env.Undefined();
  NlError e;
  uint32_t index;
  if (!linkIndex(h, ref, index, e)) return throwNlError(env, e), env.Undefined();
  NlMsg m(RTM_NEWNEIGH, NLM_F_CREATE | NLM_F_REPLACE);
  ndmsg nd{};
  nd.ndm_family = static_cast<uint8_t>(dst.family);
  nd.ndm_ifindex = static_cast<int>(index);
  nd.ndm_state = NUD_PERMANENT;
  m.put(nd);
  m.attr(NDA_DST, dst.bytes, dst.len());
  m.attr(NDA_LLADDR, mac, 6);
  if (!h.sock.request(m, e)) {
    e.subject = formatIp(dst.family, dst.bytes) + " dev " + ref.subject();
    return throwNlError(env, e), env.Undefined();
  }
  return env.Undefined();
}

}  // namespace np
