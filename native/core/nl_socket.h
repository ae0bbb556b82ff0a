// A NETLINK_ROUTE socket with synchronous request/ack and dump helpers.
#pragma once

#include <linux/netlink.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/nl_msg.h"

namespace np {

// A failure from the kernel (or a syscall on its way there). op/subject are
// filled by the caller that knows what was asked.
struct NlError {
  int err = 0;          // positive errno
  std::string extack;   // NLMSGERR_ATTR_MSG, when the kernel gave one
  std::string op;       // 'RTM_NEWLINK', 'setns', 'sysctl', ...
  std::string subject;  // ifname, dst, key, path
  bool failed() const { return err != 0; }
  void set(int e, std::string o, std::string s = "") {
    err = e;
    op = std::move(o);
    if (!s.empty()) subject = std::move(s);
  }
};

// Name of an RTM_* message type, for error reports.
const char* rtmName(uint16_t type);

class NlSocket {
 public:
  NlSocket() = default;
  ~NlSocket();
  NlSocket(const NlSocket&) = delete;
  NlSocket& operator=(const NlSocket&) = delete;

  // Creates the socket in the calling thread's current namespace
  // (NETLINK_NETFILTER for ctnetlink, native/conntrack.cc).
  bool open(NlError& e, int protocol = NETLINK_ROUTE);
  void close();
  bool isOpen() const { return fd_ >= 0; }
  // The socket's fd, for an event reader polling it (core/flowlog.cc); -1 when closed.
  int fd() const { return fd_; }

  // Sends a request with NLM_F_REQUEST|NLM_F_ACK and waits for the ack. Reply
  // messages that arrive before the ack (RTM_GETLINK by name) go to onMsg.
  bool request(NlMsg& m, NlError& e, const std::function<void(const nlmsghdr*)>& onMsg = nullptr);
  // Sends a NLM_F_DUMP request and hands every message to onMsg until
  // NLMSG_DONE, across as many recv()s as the dump takes. Restarts (up to a
  // few times) when the kernel flags the dump as interrupted by a change.
  bool dump(NlMsg& m, NlError& e, const std::function<void(const nlmsghdr*)>& onMsg);

 private:
  bool send(NlMsg& m, NlError& e);
  // Receives one datagram into buf_; returns its length or -1.
  ssize_t recvOne(NlError& e);
  bool transact(NlMsg& m, bool isDump, NlError& e, const std::function<void(const nlmsghdr*)>& onMsg, bool* interrupted);

  int fd_ = -1;
  uint32_t portId_ = 0;
  uint32_t seq_ = 0;
  std::vector<uint8_t> buf_;
};

}  // namespace np
