// Addresses, MACs and interface names as the kernel takes them: parsing from
// and formatting to the text forms the JS API uses. No N-API here.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace np {

struct IpAddr {
  int family = 0;  // AF_INET or AF_INET6
  uint8_t bytes[16] = {};
  size_t len() const;
  int maxPrefix() const;
};

// A link named by ifname or ifindex.
struct LinkRef {
  uint32_t index = 0;
  std::string name;
  std::string subject() const { return name.empty() ? "ifindex " + std::to_string(index) : name; }
};

bool parseIp(const std::string& s, IpAddr& out);
// 'a/b'; without '/', the full-length prefix when allowBare.
bool parseCidr(const std::string& s, IpAddr& out, int& prefix, bool allowBare);
bool parseMac(const std::string& s, uint8_t mac[6]);
std::string formatIp(int family, const void* bytes);
std::string formatIp(const IpAddr& ip);
std::string formatMac(const uint8_t* p, size_t len);
// Linux interface name rules (dev_valid_name): 1..15 bytes, not '.' or '..',
// no '/', ':' or whitespace.
bool validIfname(const std::string& s);

}  // namespace np
