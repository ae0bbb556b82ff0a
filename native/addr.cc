// Addresses: RTM_NEWADDR / RTM_DELADDR / RTM_GETADDR.
#include <linux/if_addr.h>
#include <sys/socket.h>

#include <vector>

#include "ops.h"

namespace np {

bool readScope(Args& a, const Napi::Value& v, const std::string& field, uint8_t& out) {
  const char* expect = "'universe', 'global', 'site', 'link', 'host' or an integer 0..255";
  if (v.IsString()) {
    std::string s = v.As<Napi::String>().Utf8Value();
    if (s == "universe" || s == "global") out = RT_SCOPE_UNIVERSE;
    else if (s == "site") out = RT_SCOPE_SITE;
    else if (s == "link") out = RT_SCOPE_LINK;
    else if (s == "host") out = RT_SCOPE_HOST;
    else return a.fail(field, expect, v);
    return true;
  }
  uint32_t n;
  if (!v.IsNumber()) return a.fail(field, expect, v);
  if (!a.uint(v, field, 0, 255, n)) return false;
  out = static_cast<uint8_t>(n);
  return true;
}

namespace {

struct AddrData {
  uint32_t index;
  int family;
  std::string address;
  int prefix;
  uint8_t scope;
  uint32_t flags;
};

Napi::Value addrChange(Handle& h, const Napi::CallbackInfo& info, bool add) {
  Napi::Env env = info.Env();
  Args a(env, add ? "addrAdd" : "addrDel");
  LinkRef ref;
  IpAddr ip;
  int prefix = 0;
  bool nodad = false;
  uint8_t scope = RT_SCOPE_UNIVERSE;
  if (!a.link(info[0], "link", ref)) return env.Undefined();
  if (!a.cidr(info[1], "cidr", ip, prefix, true)) return env.Undefined();
  std::string cidr = info[1].As<Napi::String>().Utf8Value();
  if (add && Args::present(info[2])) {
    Napi::Object o;
    if (!a.object(info[2], "options", o)) return env.Undefined();
    Napi::Value v;
    if (Args::present(v = a.prop(o, "nodad"))) a.boolean(v, "options.nodad", nodad);
    if (Args::present(v = a.prop(o, "scope"))) readScope(a, v, "options.scope", scope);
    if (!a.ok()) return env.Undefined();
  }
  NlError e;
  uint32_t index;
  if (!linkIndex(h, ref, index, e)) return throwNlError(env, e), env.Undefined();
  NlMsg m(add ? RTM_NEWADDR : RTM_DELADDR, add ? NLM_F_CREATE | NLM_F_EXCL : 0);
  ifaddrmsg ifa{};
  ifa.ifa_family = static_cast<uint8_t>(ip.family);
  ifa.ifa_prefixlen = static_cast<uint8_t>(prefix);
  ifa.ifa_scope = scope;
  ifa.ifa_index = index;
  m.put(ifa);
  m.attr(IFA_LOCAL, ip.bytes, ip.len());
  m.attr(IFA_ADDRESS, ip.bytes, ip.len());
  // DAD is IPv6 only; IPv4 ignores the flag, so it is sent only for IPv6.
  if (add && nodad && ip.family == AF_INET6) m.u32(IFA_FLAGS, IFA_F_NODAD);
  if (!h.sock.request(m, e)) {
    e.subject = cidr + " dev " + ref.subject();
    return throwNlError(env, e), env.Undefined();
  }
  return env.Undefined();
}

}  // namespace

Napi::Value AddrAdd(Handle& h, const Napi::CallbackInfo& info) { return addrChange(h, info, true); }
Napi::Value AddrDel(Handle& h, const Napi::CallbackInfo& info) { return addrChange(h, info, false); }

Napi::Value AddrList(Handle& h, const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Args a(env, "addrList");
  uint32_t family = 0, index = 0;
  LinkRef ref;
  bool hasLink = false;
  if (Args::present(info[0])) {
    Napi::Object o;
    if (!a.object(info[0], "options", o)) return env.Undefined();
    Napi::Value v;
    if (Args::present(v = a.prop(o, "family")) && a.uint(v, "options.family", 4, 6, family) && family == 5)
      a.fail("options.family", "4 or 6", v);
    if (Args::present(v = a.prop(o, "link"))) hasLink = a.link(v, "options.link", ref);
    if (!a.ok()) return env.Undefined();
  }
  NlError e;
  if (hasLink && !linkIndex(h, ref, index, e)) return throwNlError(env, e), env.Undefined();
  NlMsg m(RTM_GETADDR, 0);
  ifaddrmsg ifa{};
  ifa.ifa_family = family == 4 ? AF_INET : family == 6 ? AF_INET6 : AF_UNSPEC;
  m.put(ifa);
  std::vector<AddrData> out;
  bool ok = h.sock.dump(m, e, [&](const nlmsghdr* r) {
    if (r->nlmsg_type != RTM_NEWADDR || r->nlmsg_len < NLMSG_LENGTH(sizeof(ifaddrmsg))) return;
    auto* x = static_cast<const ifaddrmsg*>(NLMSG_DATA(r));
    if (index && x->ifa_index != index) return;
    if (x->ifa_family != AF_INET && x->ifa_family != AF_INET6) return;
    if (family && x->ifa_family != (family == 4 ? AF_INET : AF_INET6)) return;
    Attrs at(IFA_RTA(x), r->nlmsg_len - NLMSG_LENGTH(sizeof(ifaddrmsg)));
    // IFA_LOCAL is the interface's own address; IFA_ADDRESS is the peer on
    // point-to-point links (and the only one given for IPv6).
    const rtattr* ad = at.get(IFA_LOCAL) ? at.get(IFA_LOCAL) : at.get(IFA_ADDRESS);
    size_t need = x->ifa_family == AF_INET ? 4 : 16;
    if (!ad || RTA_PAYLOAD(ad) < need) return;
    AddrData d;
    d.index = x->ifa_index;
    d.family = x->ifa_family;
    d.address = formatIp(x->ifa_family, RTA_DATA(ad));
    d.prefix = x->ifa_prefixlen;
    d.scope = x->ifa_scope;
    d.flags = at.has(IFA_FLAGS) ? at.u32(IFA_FLAGS) : x->ifa_flags;
    out.push_back(std::move(d));
  });
  if (!ok) return throwNlError(env, e), env.Undefined();
  Napi::Array arr = Napi::Array::New(env, out.size());
  for (size_t i = 0; i < out.size(); ++i) {
    const AddrData& d = out[i];
    Napi::Object o = Napi::Object::New(env);
    o.Set("index", d.index);
    o.Set("family", d.family == AF_INET ? 4 : 6);
    o.Set("cidr", d.address + "/" + std::to_string(d.prefix));
    o.Set("address", d.address);
    o.Set("prefixLen", d.prefix);
    o.Set("scope", d.scope);
    o.Set("flags", d.flags);
    arr.Set(static_cast<uint32_t>(i), o);
  }
  return arr;
}

}  // namespace np
