#include "core/netns.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#ifndef NS_GET_NSTYPE
#define NS_GET_NSTYPE 0xb703  // _IO(0xb7, 0x3), Linux 4.11
#endif

namespace np {

int openNetnsFd(const std::string& path, NlError& e) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    e.set(errno, "openNetns", path);
    return -1;
  }
  int type = ::ioctl(fd, NS_GET_NSTYPE);
  if (type != CLONE_NEWNET) {
    // A regular file or another kind of namespace: setns would fail later
    // with EINVAL, far from the path that caused it.
    int err = type < 0 ? (errno == ENOTTY ? EINVAL : errno) : EINVAL;
    ::close(fd);
    e.set(err, "openNetns", path);
    e.extack = "not a network namespace file";
    return -1;
  }
  return fd;
}

NsSwitch::NsSwitch(int targetFd, NlError& e) {
  if (targetFd < 0) {
    ok_ = true;
    return;
  }
  // /proc/thread-self, not /proc/self: namespaces are per thread and this
  // may run on a worker thread.
  origFd_ = ::open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
  if (origFd_ < 0) {
    e.set(errno, "setns", "/proc/thread-self/ns/net");
    return;
  }
  if (::setns(targetFd, CLONE_NEWNET) != 0) {
    e.set(errno, "setns");
    ::close(origFd_);
    origFd_ = -1;
    return;
  }
  switched_ = true;
  ok_ = true;
}

NsSwitch::~NsSwitch() {
  if (switched_ && ::setns(origFd_, CLONE_NEWNET) != 0) {
    int err = errno;
    std::fprintf(stderr,
                 "netplugin netlink addon: FATAL: could not return the thread to its original network "
                 "namespace (setns: %s); aborting rather than running on in the wrong namespace\n",
                 std::strerror(err));
    std::abort();
  }
  if (origFd_ >= 0) ::close(origFd_);
}

bool openSocketIn(int nsFd, const std::string& nsPath, NlSocket& sock, NlError& e, int protocol) {
  {
    NsSwitch sw(nsFd, e);
    if (sw.ok()) sock.open(e, protocol);
  }
  if (e.failed() && e.subject.empty()) e.subject = nsPath;
  return !e.failed();
}

}  // namespace np
