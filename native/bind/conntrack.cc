// Conntrack: the JS face of core/conntrack (conntrackFlush, conntrackList, conntrackDelete).
#include <sys/socket.h>

#include <vector>

#include "bind/ops.h"
#include "core/conntrack.h"

namespace np {

// conntrackFlush(addrs: string | string[]) -> number of entries deleted, in
// the handle's namespace.
Napi::Value ConntrackFlush(Handle& h, const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Args a(env, "conntrackFlush");
  std::vector<IpAddr> addrs;
  if (info[0].IsArray()) {
    Napi::Array arr = info[0].As<Napi::Array>();
    for (uint32_t i = 0; i < arr.Length() && a.ok(); ++i) {
      IpAddr ip;
      if (a.ip(arr.Get(i), "addrs." + std::to_string(i), ip)) addrs.push_back(ip);
    }
  } else {
    IpAddr ip;
    if (a.ip(info[0], "addrs", ip)) addrs.push_back(ip);
  }
  if (!a.ok()) return env.Undefined();
  uint32_t deleted = 0;
  NlError e;
  if (!conntrackFlush(h, addrs, deleted, e)) return throwNlError(env, e), env.Undefined();
  return Napi::Number::New(env, deleted);
}

namespace {

void setTuple(Napi::Env env, Napi::Object& o, const CtTuple& t, bool reply) {
  const char* k[4] = {"src", "dst", "sport", "dport"};
  const char* r[4] = {"replySrc", "replyDst", "replySport", "replyDport"};
  const char** n = reply ? r : k;
  if (!t.src.empty()) o.Set(n[0], Napi::String::New(env, t.src));
  if (!t.dst.empty()) o.Set(n[1], Napi::String::New(env, t.dst));
  if (t.hasPorts) {
    o.Set(n[2], Napi::Number::New(env, t.sport));
    o.Set(n[3], Napi::Number::New(env, t.dport));
  }
}

}  // namespace

// conntrackList(addrs: string | string[]) -> the entries naming one of them:
// { family, protocol, src, dst, sport?, dport?, replySrc, replyDst, replySport?, replyDport?, id?, key }
Napi::Value ConntrackList(Handle& h, const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Args a(env, "conntrackList");
  std::vector<IpAddr> addrs;
  if (info[0].IsArray()) {
    Napi::Array arr = info[0].As<Napi::Array>();
    for (uint32_t i = 0; i < arr.Length() && a.ok(); ++i) {
      IpAddr ip;
      if (a.ip(arr.Get(i), "addrs." + std::to_string(i), ip)) addrs.push_back(ip);
    }
  } else {
    IpAddr ip;
    if (a.ip(info[0], "addrs", ip)) addrs.push_back(ip);
  }
  if (!a.ok()) return env.Undefined();
  std::vector<CtEntry> entries;
  NlError e;
  if (!conntrackList(h, addrs, entries, e)) return throwNlError(env, e), env.Undefined();
  Napi::Array out = Napi::Array::New(env, entries.size());
  for (uint32_t i = 0; i < entries.size(); ++i) {
    const CtEntry& c = entries[i];
    Napi::Object o = Napi::Object::New(env);
    o.Set("family", Napi::Number::New(env, c.family == AF_INET6 ? 6 : 4));
    o.Set("protocol", Napi::Number::New(env, c.orig.proto));
    setTuple(env, o, c.orig, false);
    if (c.hasReply) setTuple(env, o, c.reply, true);
    if (c.hasId) o.Set("id", Napi::Number::New(env, c.id));
    o.Set("key", Napi::Buffer<uint8_t>::Copy(env, c.key.data(), c.key.size()));
    out.Set(i, o);
  }
  return out;
}

// conntrackDelete(keys: Buffer[]) -> number deleted.
Napi::Value ConntrackDelete(Handle& h, const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Args a(env, "conntrackDelete");
  if (!info[0].IsArray()) {
    a.fail("keys", "an array of the keys conntrackList gave", info[0]);
    return env.Undefined();
  }
  Napi::Array arr = info[0].As<Napi::Array>();
  std::vector<std::vector<uint8_t>> keys;
  for (uint32_t i = 0; i < arr.Length(); ++i) {
    Napi::Value x = arr.Get(i);
    if (env.IsExceptionPending()) return env.Undefined();
    std::vector<uint8_t> k;
    if (x.IsBuffer()) {
      auto b = x.As<Napi::Buffer<uint8_t>>();
      k.assign(b.Data(), b.Data() + b.Length());
    }
    if (!ctKeyValid(k)) {
      a.fail("keys." + std::to_string(i), "a key conntrackList gave", x);
      return env.Undefined();
    }
    keys.push_back(std::move(k));
  }
  uint32_t deleted = 0;
  NlError e;
  if (!conntrackDelete(h, keys, deleted, e)) return throwNlError(env, e), env.Undefined();
  return Napi::Number::New(env, deleted);
}

}  // namespace np
