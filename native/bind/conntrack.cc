// Conntrack: the JS face of core/conntrack (conntrackFlush).
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

}  // namespace np
