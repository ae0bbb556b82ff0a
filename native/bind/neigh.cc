// Neighbours and VXLAN FDB entries: the JS face of core/neigh (neighSet,
// neighDel, neighList, fdbSet, fdbDel, fdbList).
#include "bind/ops.h"
#include "core/neigh.h"

namespace np {

namespace {

// Neighbour and FDB entries are read alike: { dev, dst, lladdr } under `what`
// ('neigh' or 'fdb'); a neighbour delete goes by dst alone.
template <typename Spec>
Napi::Value entryChangeJs(Handle& h, const Napi::CallbackInfo& info, const char* fn, const std::string& what,
                          bool withLladdr, bool (*op)(Handle&, const Spec&, NlError&)) {
  Napi::Env env = info.Env();
  Args a(env, fn);
  Napi::Object o;
  Spec s;
  if (!a.object(info[0], what, o)) return env.Undefined();
  a.link(a.prop(o, "dev"), what + ".dev", s.dev);
  a.ip(a.prop(o, "dst"), what + ".dst", s.dst);
  if (withLladdr) a.mac(a.prop(o, "lladdr"), what + ".lladdr", s.lladdr);
  if (!a.ok()) return env.Undefined();
  NlError e;
  if (!op(h, s, e)) return throwNlError(env, e), env.Undefined();
  return env.Undefined();
}

void neighToJs(const Neigh& n, Napi::Object& ob) {
  ob.Set("dst", n.dst);
  if (n.hasLladdr) ob.Set("lladdr", n.lladdr);
  ob.Set("state", n.state);
  ob.Set("permanent", n.permanent);
}

void fdbToJs(const FdbEntry& d, Napi::Object& ob) {
  ob.Set("lladdr", d.lladdr);
  if (d.hasDst) ob.Set("dst", d.dst);
  ob.Set("state", d.state);
  ob.Set("flags", d.flags);
}

}  // namespace

Napi::Value NeighSet(Handle& h, const Napi::CallbackInfo& info) {
  return entryChangeJs<NeighSpec>(h, info, "neighSet", "neigh", true, neighSet);
}
Napi::Value NeighDel(Handle& h, const Napi::CallbackInfo& info) {
  return entryChangeJs<NeighSpec>(h, info, "neighDel", "neigh", false, neighDel);
}
Napi::Value FdbSet(Handle& h, const Napi::CallbackInfo& info) {
  return entryChangeJs<FdbSpec>(h, info, "fdbSet", "fdb", true, fdbSet);
}
Napi::Value FdbDel(Handle& h, const Napi::CallbackInfo& info) {
  return entryChangeJs<FdbSpec>(h, info, "fdbDel", "fdb", true, fdbDel);
}

Napi::Value NeighList(Handle& h, const Napi::CallbackInfo& info) {
  Args a(info.Env(), "neighList");
  ListFilter f;
  if (!a.listOptions(info[0], false, "dev", true, f)) return info.Env().Undefined();
  return listToJs(info.Env(), h, f, neighList, neighToJs);
}

Napi::Value FdbList(Handle& h, const Napi::CallbackInfo& info) {
  Args a(info.Env(), "fdbList");
  ListFilter f;
  if (!a.listOptions(info[0], false, "dev", false, f)) return info.Env().Undefined();
  return listToJs(info.Env(), h, f, fdbList, fdbToJs);
}

}  // namespace np
