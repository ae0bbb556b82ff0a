#include "bind/args.h"

#include <sys/socket.h>

#include <cctype>
#include <cmath>
#include <cstdio>

#include "core/names.h"

namespace np {

std::string describe(const Napi::Value& v) {
  napi_valuetype t = v.Type();
  switch (t) {
    case napi_undefined: return "undefined";
    case napi_null: return "null";
    case napi_boolean: return v.As<Napi::Boolean>().Value() ? "true" : "false";
    case napi_number: {
      double d = v.As<Napi::Number>().DoubleValue();
      char b[32];
      std::snprintf(b, sizeof b, "%.17g", d);
      return b;
    }
    case napi_string: {
      std::string s = v.As<Napi::String>().Utf8Value();
      if (s.size() > 64) s = s.substr(0, 61) + "...";
      return "'" + s + "'";
    }
    case napi_object: return v.IsArray() ? "an array" : "an object";
    case napi_function: return "a function";
    case napi_bigint: return "a bigint";
    case napi_symbol: return "a symbol";
    default: return "an unsupported value";
  }
}

bool Args::failText(const std::string& field, const std::string& expect, const std::string& got) {
  if (!failed_) {
    failed_ = true;
    throwTypeError(env_, std::string(fn_) + ": " + field + " must be " + expect + ", got " + got);
  }
  return false;
}

bool Args::fail(const std::string& field, const std::string& expect, const Napi::Value& got) {
  return failText(field, expect, describe(got));
}

Napi::Value Args::prop(const Napi::Object& obj, const char* key) {
  if (!ok()) return env_.Undefined();
  Napi::Value v = obj.Get(key);
  if (env_.IsExceptionPending()) {
    failed_ = true;
    return env_.Undefined();
  }
  return v;
}

bool Args::object(const Napi::Value& v, const std::string& field, Napi::Object& out) {
  if (!ok()) return false;
  if (!v.IsObject() || v.IsArray() || v.IsFunction()) return fail(field, "an object", v);
  out = v.As<Napi::Object>();
  return true;
}

bool Args::string(const Napi::Value& v, const std::string& field, std::string& out) {
  if (!ok()) return false;
  if (!v.IsString()) return fail(field, "a string", v);
  out = v.As<Napi::String>().Utf8Value();
  return ok();
}

bool Args::uint(const Napi::Value& v, const std::string& field, uint32_t min, uint32_t max, uint32_t& out) {
  if (!ok()) return false;
  std::string expect = "an integer " + std::to_string(min) + ".." + std::to_string(max);
  if (!v.IsNumber()) return fail(field, expect, v);
  double d = v.As<Napi::Number>().DoubleValue();
  if (!std::isfinite(d) || d != std::floor(d) || d < min || d > max) return fail(field, expect, v);
  out = static_cast<uint32_t>(d);
  return true;
}

bool Args::boolean(const Napi::Value& v, const std::string& field, bool& out) {
  if (!ok()) return false;
  if (!v.IsBoolean()) return fail(field, "a boolean", v);
  out = v.As<Napi::Boolean>().Value();
  return true;
}

bool Args::ifname(const Napi::Value& v, const std::string& field, std::string& out) {
  if (!ok()) return false;
  const char* expect = "an interface name (1-15 bytes, no '/', ':' or whitespace)";
  if (!v.IsString()) return fail(field, expect, v);
  out = v.As<Napi::String>().Utf8Value();
  if (!validIfname(out)) return fail(field, expect, v);
  return true;
}

bool Args::link(const Napi::Value& v, const std::string& field, LinkRef& out) {
  if (!ok()) return false;
  const char* expect = "an interface name (1-15 bytes, no '/', ':' or whitespace) or an ifindex (integer >= 1)";
  if (v.IsNumber()) {
    double d = v.As<Napi::Number>().DoubleValue();
    if (!std::isfinite(d) || d != std::floor(d) || d < 1 || d > 2147483647) return fail(field, expect, v);
    out.index = static_cast<uint32_t>(d);
    out.name.clear();
    return true;
  }
  if (!v.IsString()) return fail(field, expect, v);
  out.name = v.As<Napi::String>().Utf8Value();
  out.index = 0;
  if (!validIfname(out.name)) return fail(field, expect, v);
  return true;
}

bool Args::mac(const Napi::Value& v, const std::string& field, uint8_t out[6]) {
  if (!ok()) return false;
  const char* expect = "a MAC address like 'ee:ee:ee:ee:ee:ee'";
  if (!v.IsString() || !parseMac(v.As<Napi::String>().Utf8Value(), out)) return fail(field, expect, v);
  return true;
}

bool Args::ip(const Napi::Value& v, const std::string& field, IpAddr& out) {
  if (!ok()) return false;
  const char* expect = "an IPv4 or IPv6 address like '10.0.0.1' or 'fe80::1'";
  if (!v.IsString() || !parseIp(v.As<Napi::String>().Utf8Value(), out)) return fail(field, expect, v);
  return true;
}

bool Args::ips(const Napi::Value& v, const std::string& field, std::vector<IpAddr>& out) {
  if (!v.IsArray()) {
    IpAddr one;
    if (ip(v, field, one)) out.push_back(one);
    return ok();
  }
  Napi::Array arr = v.As<Napi::Array>();
  for (uint32_t i = 0; i < arr.Length() && ok(); ++i) {
    IpAddr one;
    if (ip(arr.Get(i), field + "." + std::to_string(i), one)) out.push_back(one);
  }
  return ok();
}

bool Args::cidr(const Napi::Value& v, const std::string& field, IpAddr& out, int& prefix, bool allowBare) {
  if (!ok()) return false;
  const char* expect = "an address with prefix length like '10.0.0.5/32' or 'fd00::5/128'";
  if (!v.IsString() || !parseCidr(v.As<Napi::String>().Utf8Value(), out, prefix, allowBare))
    return fail(field, expect, v);
  return true;
}

bool Args::family(const Napi::Value& v, const std::string& field, int& out) {
  if (!ok()) return false;
  if (!v.IsNumber() || (v.As<Napi::Number>().DoubleValue() != 4 && v.As<Napi::Number>().DoubleValue() != 6))
    return fail(field, "4 or 6", v);
  out = v.As<Napi::Number>().DoubleValue() == 4 ? AF_INET : AF_INET6;
  return true;
}

bool Args::scope(const Napi::Value& v, const std::string& field, uint8_t& out) {
  if (!ok()) return false;
  const char* expect = "'universe', 'global', 'site', 'link', 'host' or an integer 0..255";
  if (v.IsString()) return parseScopeName(v.As<Napi::String>().Utf8Value(), out) || fail(field, expect, v);
  uint32_t n;
  if (!v.IsNumber()) return fail(field, expect, v);
  if (!uint(v, field, 0, 255, n)) return false;
  out = static_cast<uint8_t>(n);
  return true;
}

bool Args::listOptions(const Napi::Value& arg, bool optional, const char* linkKey, bool withFamily, ListFilter& f,
                       Napi::Object* obj) {
  if (optional && !present(arg)) return ok();
  Napi::Object o;
  if (!object(arg, "options", o)) return false;
  if (obj) *obj = o;
  const bool linkRequired = !optional;
  Napi::Value v;
  if (withFamily && present(v = prop(o, "family"))) family(v, "options.family", f.family);
  v = prop(o, linkKey);
  if (linkRequired || present(v)) f.hasLink = link(v, std::string("options.") + linkKey, f.link);
  return ok();
}

}  // namespace np
