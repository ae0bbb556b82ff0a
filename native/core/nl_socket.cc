#include "core/nl_socket.h"

#include <errno.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cstring>

#ifndef NETLINK_EXT_ACK
#define NETLINK_EXT_ACK 11
#endif
#ifndef NETLINK_CAP_ACK
#define NETLINK_CAP_ACK 10
#endif
#ifndef SOL_NETLINK
#define SOL_NETLINK 270
#endif

namespace np {

namespace {
// Kernel dump skbs are at most 32 KiB unless an object needs more
// (min_dump_alloc); start at 64 KiB and grow when a peek says so.
constexpr size_t kInitialBuf = 64 * 1024;
constexpr int kDumpRetries = 5;
}  // namespace

const char* rtmName(uint16_t t) {
  switch (t) {
    case RTM_NEWLINK: return "RTM_NEWLINK";
    case RTM_DELLINK: return "RTM_DELLINK";
    case RTM_GETLINK: return "RTM_GETLINK";
    case RTM_SETLINK: return "RTM_SETLINK";
    case RTM_NEWADDR: return "RTM_NEWADDR";
    case RTM_DELADDR: return "RTM_DELADDR";
    case RTM_GETADDR: return "RTM_GETADDR";
    case RTM_NEWROUTE: return "RTM_NEWROUTE";
    case RTM_DELROUTE: return "RTM_DELROUTE";
    case RTM_GETROUTE: return "RTM_GETROUTE";
    case RTM_NEWNEIGH: return "RTM_NEWNEIGH";
    case RTM_DELNEIGH: return "RTM_DELNEIGH";
    case RTM_GETNEIGH: return "RTM_GETNEIGH";
    default: return "RTM_UNKNOWN";
  }
}

NlSocket::~NlSocket() { close(); }

void NlSocket::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

bool NlSocket::open(NlError& e, int protocol) {
  int fd = ::socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, protocol);
  if (fd < 0) {
    e.set(errno, "socket");
    return false;
  }
  int one = 1;
  // Extended acks carry the kernel's reason text; capped acks keep the ack
  // small (the request is not echoed back). Both are best effort: old
  // kernels without them still work, only with less detail.
  (void)setsockopt(fd, SOL_NETLINK, NETLINK_EXT_ACK, &one, sizeof one);
  (void)setsockopt(fd, SOL_NETLINK, NETLINK_CAP_ACK, &one, sizeof one);
  sockaddr_nl sa{};
  sa.nl_family = AF_NETLINK;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) < 0) {
    e.set(errno, "bind");
    ::close(fd);
    return false;
  }
  socklen_t sl = sizeof sa;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &sl) < 0) {
    e.set(errno, "getsockname");
    ::close(fd);
    return false;
  }
  close();
  fd_ = fd;
  portId_ = sa.nl_pid;
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  seq_ = static_cast<uint32_t>(ts.tv_nsec ^ ts.tv_sec);
  buf_.resize(kInitialBuf);
  return true;
}

bool NlSocket::send(NlMsg& m, NlError& e) {
  if (fd_ < 0) {
    e.set(EBADF, rtmName(m.type()));
    return false;
  }
  auto* h = m.hdr();
  h->nlmsg_seq = ++seq_;
  h->nlmsg_pid = 0;
  sockaddr_nl kernel{};
  kernel.nl_family = AF_NETLINK;
  for (;;) {
    ssize_t n = ::sendto(fd_, m.data(), m.size(), 0, reinterpret_cast<sockaddr*>(&kernel), sizeof kernel);
    if (n >= 0) return true;
    if (errno == EINTR) continue;
    e.set(errno, rtmName(m.type()));
    return false;
  }
}

ssize_t NlSocket::recvOne(NlError& e) {
  for (;;) {
    sockaddr_nl from{};
    iovec iov{buf_.data(), buf_.size()};
    msghdr mh{};
    mh.msg_name = &from;
    mh.msg_namelen = sizeof from;
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    // Peek with MSG_TRUNC first: it returns the real datagram length, so a
    // datagram bigger than the buffer is never silently cut.
    ssize_t n = ::recvmsg(fd_, &mh, MSG_PEEK | MSG_TRUNC);
    if (n < 0) {
      if (errno == EINTR) continue;
      e.err = errno;
      return -1;
    }
    if (static_cast<size_t>(n) > buf_.size()) {
      buf_.resize(static_cast<size_t>(n) + 4096);
      continue;
    }
    iov = {buf_.data(), buf_.size()};
    mh.msg_iov = &iov;
    mh.msg_namelen = sizeof from;
    n = ::recvmsg(fd_, &mh, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      e.err = errno;
      return -1;
    }
    // Only the kernel (port 0) may answer us.
    if (from.nl_pid != 0) continue;
    return n;
  }
}

namespace {
// Parses the error/ack payload: errno and NLMSGERR_ATTR_MSG.
void parseAck(const nlmsghdr* h, NlError& e) {
  if (h->nlmsg_len < NLMSG_LENGTH(sizeof(nlmsgerr))) {
    e.err = EPROTO;
    return;
  }
  auto* err = static_cast<const nlmsgerr*>(NLMSG_DATA(h));
  e.err = -err->error;
  if (!(h->nlmsg_flags & NLM_F_ACK_TLVS)) return;
  // TLVs follow the nlmsgerr; with NLM_F_CAPPED the echoed request is only
  // its header, otherwise the whole request is echoed first.
  size_t off = NLMSG_HDRLEN + sizeof(nlmsgerr);
  if (!(h->nlmsg_flags & NLM_F_CAPPED)) off += err->msg.nlmsg_len - NLMSG_HDRLEN;
  if (off >= h->nlmsg_len) return;
  Attrs a(reinterpret_cast<const uint8_t*>(h) + off, h->nlmsg_len - off);
  if (a.has(NLMSGERR_ATTR_MSG)) e.extack = a.str(NLMSGERR_ATTR_MSG);
}

// NLMSG_DONE carries an int error (a dump that failed mid-way) and, with
// extended acks, TLVs after it.
void parseDone(const nlmsghdr* h, NlError& e) {
  if (h->nlmsg_len < NLMSG_LENGTH(sizeof(int))) return;
  int err;
  std::memcpy(&err, NLMSG_DATA(h), sizeof err);
  if (err >= 0) return;
  e.err = -err;
  if (!(h->nlmsg_flags & NLM_F_ACK_TLVS)) return;
  size_t off = NLMSG_HDRLEN + NLMSG_ALIGN(sizeof(int));
  if (off >= h->nlmsg_len) return;
  Attrs a(reinterpret_cast<const uint8_t*>(h) + off, h->nlmsg_len - off);
  if (a.has(NLMSGERR_ATTR_MSG)) e.extack = a.str(NLMSGERR_ATTR_MSG);
}
}  // namespace

bool NlSocket::transact(NlMsg& m, bool isDump, NlError& e, const std::function<void(const nlmsghdr*)>& onMsg,
                        bool* interrupted) {
  const char* op = rtmName(m.type());
  if (!send(m, e)) return false;
  const uint32_t seq = m.hdr()->nlmsg_seq;
  for (;;) {
    ssize_t n = recvOne(e);
    if (n < 0) {
      e.op = op;
      return false;
    }
    int rem = static_cast<int>(n);
    for (auto* h = reinterpret_cast<const nlmsghdr*>(buf_.data()); NLMSG_OK(h, rem); h = NLMSG_NEXT(h, rem)) {
      // Leftovers of an earlier, abandoned exchange are skipped.
      if (h->nlmsg_seq != seq || (h->nlmsg_pid != portId_ && h->nlmsg_pid != 0)) continue;
      if (h->nlmsg_flags & NLM_F_DUMP_INTR) *interrupted = true;
      if (h->nlmsg_type == NLMSG_ERROR) {
        parseAck(h, e);
        if (e.err) e.op = op;
        return e.err == 0;
      }
      if (h->nlmsg_type == NLMSG_DONE) {
        parseDone(h, e);
        if (e.err) e.op = op;
        return e.err == 0;
      }
      if (h->nlmsg_type == NLMSG_NOOP || h->nlmsg_type == NLMSG_OVERRUN) continue;
      if (onMsg) onMsg(h);
      if (!isDump && !(m.hdr()->nlmsg_flags & NLM_F_ACK)) return true;
    }
  }
}

bool NlSocket::request(NlMsg& m, NlError& e, const std::function<void(const nlmsghdr*)>& onMsg) {
  m.hdr()->nlmsg_flags |= NLM_F_REQUEST | NLM_F_ACK;
  bool intr = false;
  return transact(m, false, e, onMsg, &intr);
}

bool NlSocket::dump(NlMsg& m, NlError& e, const std::function<void(const nlmsghdr*)>& onMsg) {
  m.hdr()->nlmsg_flags |= NLM_F_REQUEST | NLM_F_DUMP;
  // Messages are collected and delivered only once a dump completed without
  // interruption, so the caller never sees a mix of two snapshots.
  for (int attempt = 0; attempt < kDumpRetries; ++attempt) {
    std::vector<std::vector<uint8_t>> msgs;
    bool intr = false;
    bool ok = transact(
        m, true, e,
        [&](const nlmsghdr* h) {
          auto* p = reinterpret_cast<const uint8_t*>(h);
          msgs.emplace_back(p, p + h->nlmsg_len);
        },
        &intr);
    if (!ok) return false;
    if (intr && attempt + 1 < kDumpRetries) continue;
    for (auto& v : msgs) onMsg(reinterpret_cast<const nlmsghdr*>(v.data()));
    return true;
  }
  return true;
}

}  // namespace np
