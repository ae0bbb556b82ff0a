// Sysctls: the JS face of core/sysctl (sysctlGet, sysctlSet).
#include "bind/ops.h"
#include "core/sysctl.h"

namespace np {

namespace {

const char* kKeyExpect =
    "a 'net.' sysctl key in dotted form like 'net.ipv4.conf.eth0.forwarding' (components of "
    "[A-Za-z0-9_-], a '/' standing for a '.' inside an interface name)";

// The key, or a TypeError naming it.
bool readKey(Args& a, const Napi::Value& v, SysctlKey& k) {
  std::string key;
  if (!a.string(v, "key", key)) return false;
  return parseSysctlKey(key, k) || a.fail("key", kKeyExpect, v);
}

}  // namespace

Napi::Value SysctlGet(Handle& h, const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Args a(env, "sysctlGet");
  SysctlKey k;
  if (!readKey(a, info[0], k)) return env.Undefined();
  std::string out;
  NlError e;
  if (!sysctlGet(h, k, out, e)) return throwNlError(env, e), env.Undefined();
  return Napi::String::New(env, out);
}

Napi::Value SysctlSet(Handle& h, const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Args a(env, "sysctlSet");
  SysctlKey k;
  std::string value;
  if (!readKey(a, info[0], k)) return env.Undefined();
  Napi::Value v = info[1];
  if (v.IsNumber()) {
    double d = v.As<Napi::Number>().DoubleValue();
    if (d != static_cast<double>(static_cast<long long>(d)))
      return a.fail("value", "an integer or a string", v), env.Undefined();
    value = std::to_string(static_cast<long long>(d));
  } else if (v.IsString()) {
    value = v.As<Napi::String>().Utf8Value();
    if (value.find('\n') != std::string::npos || value.find('\0') != std::string::npos)
      return a.fail("value", "a single-line string", v), env.Undefined();
  } else {
    return a.fail("value", "an integer or a string", v), env.Undefined();
  }
  NlError e;
  if (!sysctlSet(h, k, value, e)) return throwNlError(env, e), env.Undefined();
  return env.Undefined();
}

}  // namespace np
