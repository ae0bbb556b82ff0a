// A NETLINK_ROUTE socket plus the namespace it was created in: what every
// rtnetlink op of native/core runs against.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "core/nl_socket.h"

namespace np {

// nsFd < 0: the namespace of the thread that created the socket. Sysctls and
// ctnetlink need the namespace itself, not only the socket bound to it.
struct Handle {
  NlSocket sock;
  int nsFd = -1;
  std::string nsPath;
  // Open directories /proc/sys/net/<family> of this namespace, by family
  // ("ipv4", "ipv6", ...): sysctls are opened relative to them (core/sysctl.cc
  // says why). Closed with the handle (closeSysctlDirs).
  std::vector<std::pair<std::string, int>> sysctlDirs;
};

// Sends the dump request m and keeps each answer that parse accepts and keep
// (a predicate on the parsed entry) wants.
template <typename Entry, typename Keep>
bool dumpParsed(Handle& h, NlMsg& m, bool (*parse)(const nlmsghdr*, Entry&), Keep keep, std::vector<Entry>& out,
                NlError& e) {
  return h.sock.dump(m, e, [&](const nlmsghdr* r) {
    Entry d;
    if (parse(r, d) && keep(d)) out.push_back(std::move(d));
  });
}

// Closes the handle's cached sysctl directories.
void closeSysctlDirs(Handle& h);

}  // namespace np
