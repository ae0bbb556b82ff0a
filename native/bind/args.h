// Reading JS arguments into C++ values. Every failure throws one TypeError
// that names the function, the field, what it must be and what it got, and
// marks the reader failed so later reads are no-ops.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "bind/common.h"
#include "core/ip.h"
#include "core/link.h"

namespace np {

class Args {
 public:
  Args(Napi::Env env, const char* fn) : env_(env), fn_(fn) {}
  bool ok() const { return !failed_ && !env_.IsExceptionPending(); }
  Napi::Env env() const { return env_; }

  // Throws "<fn>: <field> must be <expect>, got <value>".
  bool fail(const std::string& field, const std::string& expect, const Napi::Value& got);
  bool failText(const std::string& field, const std::string& expect, const std::string& got);

  // obj[key] or undefined; a throwing getter fails the reader.
  Napi::Value prop(const Napi::Object& obj, const char* key);
  bool object(const Napi::Value& v, const std::string& field, Napi::Object& out);
  bool string(const Napi::Value& v, const std::string& field, std::string& out);
  bool uint(const Napi::Value& v, const std::string& field, uint32_t min, uint32_t max, uint32_t& out);
  bool boolean(const Napi::Value& v, const std::string& field, bool& out);
  bool link(const Napi::Value& v, const std::string& field, LinkRef& out);
  bool ifname(const Napi::Value& v, const std::string& field, std::string& out);
  bool mac(const Napi::Value& v, const std::string& field, uint8_t out[6]);
  bool ip(const Napi::Value& v, const std::string& field, IpAddr& out);
  // One address or an array of them (errors name "<field>.<i>"), appended to out.
  bool ips(const Napi::Value& v, const std::string& field, std::vector<IpAddr>& out);
  // 4 or 6 -> AF_INET or AF_INET6.
  bool family(const Napi::Value& v, const std::string& field, int& out);
  // 'universe'|'global'|'site'|'link'|'host'|0..255, as route and address scopes.
  bool scope(const Napi::Value& v, const std::string& field, uint8_t& out);
  // A list call's options object (may be absent when optional; then the link
  // is optional too): family (4|6, when withFamily) and the link under linkKey
  // ("options.<linkKey>" in errors). obj, when given, receives the object for
  // the call's own fields (empty when absent).
  bool listOptions(const Napi::Value& arg, bool optional, const char* linkKey, bool withFamily, ListFilter& f,
                   Napi::Object* obj = nullptr);
  bool cidr(const Napi::Value& v, const std::string& field, IpAddr& out, int& prefix, bool allowBare);

  static bool present(const Napi::Value& v) { return !v.IsUndefined(); }

 private:
  Napi::Env env_;
  const char* fn_;
  bool failed_ = false;
};

// How a JS value is shown in a TypeError: strings quoted, others by value/type.
std::string describe(const Napi::Value& v);

}  // namespace np
