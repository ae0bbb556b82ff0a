// Entering a network namespace on the calling thread, briefly.
#pragma once

#include <string>

#include "core/nl_socket.h"

namespace np {

// Opens a namespace file (O_CLOEXEC) and checks it is a network namespace.
// Returns the fd or -1 with e filled.
int openNetnsFd(const std::string& path, NlError& e);

// While alive, the calling thread is in the target namespace (targetFd < 0:
// no switch). The destructor restores the thread's original namespace; if
// that fails the process aborts, because every later call on this thread
// (JS included) would silently act on the wrong namespace.
class NsSwitch {
 public:
  NsSwitch(int targetFd, NlError& e);
  ~NsSwitch();
  NsSwitch(const NsSwitch&) = delete;
  NsSwitch& operator=(const NsSwitch&) = delete;
  bool ok() const { return ok_; }

 private:
  int origFd_ = -1;
  bool switched_ = false;
  bool ok_ = false;
};

// Opens `sock` inside the namespace of nsFd (nsFd < 0: the calling thread's):
// a netlink socket stays bound to the namespace it was created in, so this is
// how every op reaches its target namespace without setns around each call.
// A failure without a subject of its own is reported against nsPath.
bool openSocketIn(int nsFd, const std::string& nsPath, NlSocket& sock, NlError& e, int protocol = NETLINK_ROUTE);

}  // namespace np
