// Sysctls of a namespace (net.* only), without N-API.
#pragma once

#include <string>

#include "core/handle.h"

namespace np {

struct SysctlKey {
  std::string key;   // dotted, as given: net.ipv4.conf.eth0/100.forwarding
  std::string path;  // /proc/sys/net/ipv4/conf/eth0.100/forwarding
};

// sysctl(8)'s dotted form -> its /proc/sys path; false for anything but a
// plain 'net.' key (no empty, '.' or '..' components, no other characters).
bool parseSysctlKey(const std::string& key, SysctlKey& out);
// The value with trailing newline/spaces removed.
bool sysctlGet(Handle& h, const SysctlKey& k, std::string& out, NlError& e);
bool sysctlSet(Handle& h, const SysctlKey& k, const std::string& value, NlError& e);

}  // namespace np
