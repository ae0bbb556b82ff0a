#include "args.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <cctype>
#include <cmath>
#include <cstdio>

namespace np {

size_t IpAddr::len() const { return family == AF_INET ? 4 : 16; }
int IpAddr::maxPrefix() const { return family == AF_INET ? 32 : 128; }

bool parseIp(const std::string& s, IpAddr& out) {
  if (s.find(':') != std::string::npos) {
    out.family = AF_INET6;
    return inet_pton(AF_INET6, s.c_str(), out.bytes) == 1;
  }
  out.family = AF_INET;
  return inet_pton(AF_INET, s.c_str(), out.bytes) == 1;
}

bool parseCidr(const std::string& s, IpAddr& out, int& prefix, bool allowBare) {
  auto slash = s.find('/');
  if (slash == std::string::npos) {
    if (!allowBare || !parseIp(s, out)) return false;
    prefix = out.maxPrefix();
    return true;
  }
  if (!parseIp(s.substr(0, slash), out)) return false;
  std::string p = s.substr(slash + 1);
  if (p.empty() || p.size() > 3) return false;
  for (char c : p)
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  prefix = std::stoi(p);
  return prefix <= out.maxPrefix();
}

bool parseMac(const std::string& s, uint8_t mac[6]) {
  if (s.size() != 17) return false;
  for (int i = 0; i < 6; ++i) {
    if (i < 5 && s[i * 3 + 2] != ':') return false;
    unsigned v = 0;
    for (int j = 0; j < 2; ++j) {
      char c = s[i * 3 + j];
      v <<= 4;
      if (c >= '0' && c <= '9') v |= c - '0';
      else if (c >= 'a' && c <= 'f') v |= c - 'a' + 10;
      else if (c >= 'A' && c <= 'F') v |= c - 'A' + 10;
      else return false;
    }
    mac[i] = static_cast<uint8_t>(v);
  }
  return true;
}

std::string formatIp(int family, const void* bytes) {
  char buf[INET6_ADDRSTRLEN];
  if (!inet_ntop(family, bytes, buf, sizeof buf)) return "";
  return buf;
}

std::string formatMac(const uint8_t* p, size_t len) {
  std::string out;
  char b[4];
  for (size_t i = 0; i < len; ++i) {
    std::snprintf(b, sizeof b, i ? ":%02x" : "%02x", p[i]);
    out += b;
  }
  return out;
}

bool validIfname(const std::string& s) {
  if (s.empty() || s.size() > 15 || s == "." || s == "..") return false;
  for (char c : s)
    if (c == '/' || c == ':' || std::isspace(static_cast<unsigned char>(c)) || c == '\0') return false;
  return true;
}

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

bool Args::cidr(const Napi::Value& v, const std::string& field, IpAddr& out, int& prefix, bool allowBare) {
  if (!ok()) return false;
  const char* expect = "an address with prefix length like '10.0.0.5/32' or 'fd00::5/128'";
  if (!v.IsString() || !parseCidr(v.As<Napi::String>().Utf8Value(), out, prefix, allowBare))
    return fail(field, expect, v);
  return true;
}

}  // namespace np
