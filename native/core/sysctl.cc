// Sysctls of a namespace, without N-API. /proc/sys/net resolves to the network namespace of
// the thread that opens the file (not of the process that mounted /proc), so
// the file is opened after a brief setns and read/written there.
//
// Key rule (sysctl(8)'s dotted form): components are separated by '.', and a
// '/' inside a component stands for a '.' in it, so the VLAN interface
// "eth0.100" is written net.ipv4.conf.eth0/100.forwarding and maps to
// /proc/sys/net/ipv4/conf/eth0.100/forwarding.
#include "core/sysctl.h"

#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#include "core/netns.h"

namespace np {

bool parseSysctlKey(const std::string& key, SysctlKey& out) {
  std::string& path = out.path;
  out.key = key;
  if (key.size() < 5 || key.compare(0, 4, "net.") != 0 || key.size() > 256) return false;
  path = "/proc/sys/";
  size_t start = 0;
  while (start <= key.size()) {
    size_t dot = key.find('.', start);
    if (dot == std::string::npos) dot = key.size();
    std::string comp = key.substr(start, dot - start);
    if (comp.empty()) return false;
    for (char& c : comp) {
      bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
                c == '-' || c == '/';
      if (!ok) return false;
      if (c == '/') c = '.';
    }
    if (comp == "." || comp == "..") return false;
    if (start) path += '/';
    path += comp;
    start = dot + 1;
  }
  return true;
}

namespace {

// Opens a sysctl file; the caller's thread is in the handle's namespace.
//
// Not by its full path: the /proc/sys/net/<family> directory (ipv4, ipv6, ...)
// has one dentry per network namespace that ever looked it up, all with the
// same parent and name, so all in one dcache hash chain, and every path walk
// through it compares against each (proc_sys_compare, taking sysctl_lock for
// each, once in RCU mode and again in ref mode). With 1000 pod namespaces a
// node's write to net.ipv4.conf.<veth>.proxy_arp costs ~0.13 ms instead of
// ~5 us, and an ADD writes several. Below that level the dentries are the
// namespace's own: the directory is opened once per handle (one walk) and
// every sysctl of that family is opened relative to it.
int openSysctlAt(Handle& h, const std::string& path, int flags) {
  static const size_t kNet = sizeof("/proc/sys/net/") - 1;
  size_t slash = path.find('/', kNet);
  if (slash == std::string::npos || slash + 1 >= path.size()) return ::open(path.c_str(), flags);
  std::string family = path.substr(kNet, slash - kNet);
  int dir = -1;
  for (const auto& d : h.sysctlDirs)
    if (d.first == family) dir = d.second;
  if (dir < 0) {
    dir = ::open(path.substr(0, slash).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    // No such family here (IPv6 disabled on the node): the full path gives the caller's errno.
    if (dir < 0) return ::open(path.c_str(), flags);
    h.sysctlDirs.emplace_back(family, dir);
  }
  return ::openat(dir, path.c_str() + slash + 1, flags);
}

// Opens the key's file in the handle's namespace; -1 with e filled (op names the caller).
int openSysctl(Handle& h, const SysctlKey& k, int flags, const char* op, NlError& e) {
  int fd;
  {
    NsSwitch sw(h.nsFd, e);
    if (!sw.ok()) {
      e.subject = h.nsPath;
      return -1;
    }
    fd = openSysctlAt(h, k.path, flags);
  }
  if (fd < 0) e.set(errno, op, k.key);
  return fd;
}

}  // namespace

void closeSysctlDirs(Handle& h) {
  for (const auto& d : h.sysctlDirs) ::close(d.second);
  h.sysctlDirs.clear();
}

bool sysctlGet(Handle& h, const SysctlKey& k, std::string& out, NlError& e) {
  int fd = openSysctl(h, k, O_RDONLY | O_CLOEXEC, "sysctlGet", e);
  if (fd < 0) return false;
  out.clear();
  char buf[4096];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      e.set(errno, "sysctlGet", k.key);
      ::close(fd);
      return false;
    }
    if (n == 0 || out.size() > 1 << 20) break;
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
  return true;
}

bool sysctlSet(Handle& h, const SysctlKey& k, const std::string& value, NlError& e) {
  int fd = openSysctl(h, k, O_WRONLY | O_CLOEXEC, "sysctlSet", e);
  if (fd < 0) return false;
  ssize_t n;
  do n = ::write(fd, value.data(), value.size());
  while (n < 0 && errno == EINTR);
  int err = n < 0 ? errno : (static_cast<size_t>(n) != value.size() ? EIO : 0);
  ::close(fd);
  if (!err) return true;
  e.set(err, "sysctlSet", k.key);
  return false;
}

}  // namespace np
