// Neighbours and VXLAN FDB entries: the JS face of core/neigh (neighSet,
// neighDel, neighList, fdbSet, fdbDel, fdbList).
#include "bind/ops.h"
#include "core/neigh.h"

namespace np {

namespace {

// Permanent entries are created or replaced (with lladdr) and deleted (by dst)
// through the same reader.
Napi::Value neighChangeJs(Handle& h, const Napi::CallbackInfo& info, const char* fn, bool set) {
  Napi::Env env = info.Env();
  Args a(env, fn);
  Napi::Object o;
  NeighSpec s;
  if (!a.object(info[0], "neigh", o)) return env.Undefined();
  a.link(a.prop(o, "dev"), "neigh.dev", s.dev);
  a.ip(a.prop(o, "dst"), "neigh.dst", s.dst);
  if (set) a.mac(a.prop(o, "lladdr"), "neigh.lladdr", s.lladdr);
  if (!a.ok()) return env.Undefined();
  NlError e;
  if (!(set ? neighSet(h, s, e) : neighDel(h, s, e))) return throwNlError(env, e), env.Undefined();
  return env.Undefined();
}

Napi::Value fdbChangeJs(Handle& h, const Napi::CallbackInfo& info, const char* fn, bool set) {
  Napi::Env env = info.Env();
  Args a(env, fn);
  Napi::Object o;
  FdbSpec s;
  if (!a.object(info[0], "fdb", o)) return env.Undefined();
  a.link(a.prop(o, "dev"), "fdb.dev", s.dev);
  a.mac(a.prop(o, "lladdr"), "fdb.lladdr", s.lladdr);
  a.ip(a.prop(o, "dst"), "fdb.dst", s.dst);
  if (!a.ok()) return env.Undefined();
  NlError e;
  if (!(set ? fdbSet(h, s, e) : fdbDel(h, s, e))) return throwNlError(env, e), env.Undefined();
  return env.Undefined();
}

// The options of neighList/fdbList: { dev, family? }.
bool readListOptions(Args& a, const Napi::Value& arg, ListFilter& f, bool withFamily) {
  Napi::Object o;
  if (!a.object(arg, "options", o)) return false;
  f.hasLink = a.link(a.prop(o, "dev"), "options.dev", f.link);
  Napi::Value v;
  if (withFamily && Args::present(v = a.prop(o, "family"))) a.family(v, "options.family", f.family);
  return a.ok();
}

}  // namespace

Napi::Value NeighSet(Handle& h, const Napi::CallbackInfo& info) { return neighChangeJs(h, info, "neighSet", true); }
Napi::Value NeighDel(Handle& h, const Napi::CallbackInfo& info) { return neighChangeJs(h, info, "neighDel", false); }
Napi::Value FdbSet(Handle& h, const Napi::CallbackInfo& info) { return fdbChangeJs(h, info, "fdbSet", true); }
Napi::Value FdbDel(Handle& h, const Napi::CallbackInfo& info) { return fdbChangeJs(h, info, "fdbDel", false); }

Napi::Value NeighList(Handle& h, const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Args a(env, "neighList");
  ListFilter f;
  if (!readListOptions(a, info[0], f, true)) return env.Undefined();
  std::vector<Neigh> out;
  NlError e;
  if (!neighList(h, f, out, e)) return throwNlError(env, e), env.Undefined();
  Napi::Array arr = Napi::Array::New(env, out.size());
  for (size_t i = 0; i < out.size(); ++i) {
    Napi::Object ob = Napi::Object::New(env);
    ob.Set("dst", out[i].dst);
    if (out[i].hasLladdr) ob.Set("lladdr", out[i].lladdr);
    ob.Set("state", out[i].state);
    ob.Set("permanent", out[i].permanent);
    arr.Set(static_cast<uint32_t>(i), ob);
  }
  return arr;
}

Napi::Value FdbList(Handle& h, const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Args a(env, "fdbList");
  ListFilter f;
  if (!readListOptions(a, info[0], f, false)) return env.Undefined();
  std::vector<FdbEntry> out;
  NlError e;
  if (!fdbList(h, f.link, out, e)) return throwNlError(env, e), env.Undefined();
  Napi::Array arr = Napi::Array::New(env, out.size());
  for (size_t i = 0; i < out.size(); ++i) {
    Napi::Object ob = Napi::Object::New(env);
    ob.Set("lladdr", out[i].lladdr);
    if (out[i].hasDst) ob.Set("dst", out[i].dst);
    ob.Set("state", out[i].state);
    ob.Set("flags", out[i].flags);
    arr.Set(static_cast<uint32_t>(i), ob);
  }
  return arr;
}

}  // namespace np
