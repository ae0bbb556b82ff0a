// Addresses: the JS face of core/addr (addrAdd, addrDel, addrList).
#include <sys/socket.h>

#include "bind/ops.h"
#include "core/addr.h"

namespace np {

namespace {

void addrToJs(const Addr& d, Napi::Object& o) {
  o.Set("index", d.index);
  o.Set("family", d.family == AF_INET ? 4 : 6);
  o.Set("cidr", d.address + "/" + std::to_string(d.prefix));
  o.Set("address", d.address);
  o.Set("prefixLen", d.prefix);
  o.Set("scope", d.scope);
  o.Set("flags", d.flags);
}

Napi::Value addrChangeJs(Handle& h, const Napi::CallbackInfo& info, bool add) {
  Napi::Env env = info.Env();
  Args a(env, add ? "addrAdd" : "addrDel");
  AddrSpec s;
  if (!a.link(info[0], "link", s.link)) return env.Undefined();
  if (!a.cidr(info[1], "cidr", s.ip, s.prefix, true)) return env.Undefined();
  s.cidr = info[1].As<Napi::String>().Utf8Value();
  if (add && Args::present(info[2])) {
    Napi::Object o;
    if (!a.object(info[2], "options", o)) return env.Undefined();
    Napi::Value v;
    if (Args::present(v = a.prop(o, "nodad"))) a.boolean(v, "options.nodad", s.nodad);
    if (Args::present(v = a.prop(o, "scope"))) a.scope(v, "options.scope", s.scope);
    if (!a.ok()) return env.Undefined();
  }
  NlError e;
  if (!(add ? addrAdd(h, s, e) : addrDel(h, s, e))) return throwNlError(env, e), env.Undefined();
  return env.Undefined();
}

}  // namespace

Napi::Value AddrAdd(Handle& h, const Napi::CallbackInfo& info) { return addrChangeJs(h, info, true); }
Napi::Value AddrDel(Handle& h, const Napi::CallbackInfo& info) { return addrChangeJs(h, info, false); }

Napi::Value AddrList(Handle& h, const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Args a(env, "addrList");
  ListFilter f;
  if (!a.listOptions(info[0], true, "link", true, f)) return env.Undefined();
  return listToJs(env, h, f, addrList, addrToJs);
}

}  // namespace np
