#include "core/ip.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <cctype>
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

std::string formatIp(const IpAddr& ip) { return formatIp(ip.family, ip.bytes); }

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

}  // namespace np
