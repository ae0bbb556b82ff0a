// Event sources of flow logs, without N-API: an nfnetlink_log subscriber (the
// packets the policy table's `log group N` rules send, with their prefix and
// headers) and a ctnetlink subscriber (conntrack NEW and DESTROY events). Both
// are a NETLINK_NETFILTER socket made in a namespace and read without
// blocking; native/bind/flowlog.cc polls them on the Node event loop.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "core/conntrack.h"
#include "core/nl_socket.h"

namespace np {

// One packet an NFLOG rule sent: its prefix and what its headers say.
struct NflogPacket {
  uint8_t family = 0;  // AF_INET or AF_INET6
  std::string prefix;
  uint32_t indev = 0, outdev = 0;  // ifindex, 0 when none
  CtTuple tuple;  // addresses, protocol and ports, as a conntrack entry's
  uint32_t length = 0;  // the IP packet's length (total, not what was copied)
};

// NFULNL_MSG_CONFIG messages: bind this socket to `group` (NFULNL_CFG_CMD_BIND), and copy the
// first `copyRange` bytes of each packet (NFULNL_COPY_PACKET): enough for the IP and L4 headers.
NlMsg buildNflogBindMsg(uint16_t group);
NlMsg buildNflogModeMsg(uint16_t group, uint32_t copyRange);
// An NFULNL_MSG_PACKET as a packet; false for other messages or a payload without an IP header.
bool parseNflogPacket(const nlmsghdr* m, NflogPacket& out);
// The IP (and TCP/UDP/SCTP port) headers at p (n bytes copied), as parseNflogPacket reads them.
bool parseIpHeaders(const uint8_t* p, size_t n, NflogPacket& out);

// A netlink socket that receives events (multicast groups, or an NFLOG group bound to it).
class EventSocket {
 public:
  // NFLOG group `group` in the namespace of nsFd (< 0: the caller's).
  bool openNflog(int nsFd, uint16_t group, uint32_t copyRange, int rcvbuf, NlError& e);
  // ctnetlink NEW and DESTROY events in the namespace of nsFd.
  bool openConntrack(int nsFd, int rcvbuf, NlError& e);
  int fd() const { return sock_.fd(); }
  void close() { sock_.close(); }
  // Reads what is queued, without blocking, up to maxDatagrams: each message to onMsg. An overrun
  // (ENOBUFS: the kernel dropped events because the socket was full) is counted in overruns and
  // reading goes on. False on another error.
  bool drain(const std::function<void(const nlmsghdr*)>& onMsg, int maxDatagrams, uint32_t& overruns, NlError& e);

 private:
  bool openIn(int nsFd, int rcvbuf, NlError& e);
  NlSocket sock_;
  std::vector<uint8_t> buf_;
};

}  // namespace np
