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
  if (!a.ips(info[0], "addrs", addrs)) return env.Undefined();
  uint32_t deleted = 0;
  NlError e;
  if (!conntrackFlush(h, addrs, deleted, e)) return throwNlError(env, e), env.Undefined();
  return Napi::Number::New(env, deleted);
}

void setCtTuple(Napi::Env env, Napi::Object& o, const CtTuple& t, bool reply) {
  if (!t.src.empty()) o.Set(reply ? "replySrc" : "src", Napi::String::New(env, t.src));
  if (!t.dst.empty()) o.Set(reply ? "replyDst" : "dst", Napi::String::New(env, t.dst));
  if (t.hasPorts) {
    o.Set(reply ? "replySport" : "sport", Napi::Number::New(env, t.sport));
    o.Set(reply ? "replyDport" : "dport", Napi::Number::New(env, t.dport));
  }
}

// conntrackList(addrs: string | string[]) -> the entries naming one of them:
// { family, protocol, src, dst, sport?, dport?, replySrc, replyDst, replySport?, replyDport?, id?, key }
Napi::Value ConntrackList(Handle& h, const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Args a(env, "conntrackList");
  std::vector<IpAddr> addrs;
  if (!a.ips(info[0], "addrs", addrs)) return env.Undefined();
  std::vector<CtEntry> entries;
  NlError e;
  if (!conntrackList(h, addrs, entries, e)) return throwNlError(env, e), env.Undefined();
  return arrayToJs(env, entries, [](Napi::Env env, const CtEntry& c) {
    Napi::Object o = Napi::Object::New(env);
    setCtFields(env, o, c);
    o.Set("key", Napi::Buffer<uint8_t>::Copy(env, c.key.data(), c.key.size()));
    return o;
  });
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
