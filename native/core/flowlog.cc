// nfnetlink_log and ctnetlink event sockets (core/flowlog.h).
#include "core/flowlog.h"

#include <linux/netfilter/nfnetlink.h>
#include <linux/netfilter/nfnetlink_log.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <arpa/inet.h>
#include <errno.h>

#include <cstring>

#include "core/ip.h"
#include "core/netns.h"

namespace np {

namespace {

constexpr uint16_t kUlogConfig = (NFNL_SUBSYS_ULOG << 8) | NFULNL_MSG_CONFIG;
constexpr uint16_t kUlogPacket = (NFNL_SUBSYS_ULOG << 8) | NFULNL_MSG_PACKET;
constexpr size_t kEventBuf = 256 * 1024;

NlMsg configMsg(uint16_t group, uint8_t family) {
  NlMsg m(kUlogConfig, 0);
  nfgenmsg g{};
  g.nfgen_family = family;
  g.version = NFNETLINK_V0;
  g.res_id = htons(group);
  m.put(g);
  return m;
}

// Ports of TCP, UDP, UDP-Lite and SCTP: the first four bytes of their header.
void ports(uint8_t proto, const uint8_t* l4, size_t n, CtTuple& out) {
  if (proto != IPPROTO_TCP && proto != IPPROTO_UDP && proto != IPPROTO_UDPLITE && proto != IPPROTO_SCTP) return;
  if (n < 4) return;
  out.hasPorts = true;
  out.sport = static_cast<uint16_t>(l4[0] << 8 | l4[1]);
  out.dport = static_cast<uint16_t>(l4[2] << 8 | l4[3]);
}

}  // namespace

NlMsg buildNflogBindMsg(uint16_t group) {
  NlMsg m = configMsg(group, AF_UNSPEC);
  nfulnl_msg_config_cmd cmd{};
  cmd.command = NFULNL_CFG_CMD_BIND;
  m.attr(NFULA_CFG_CMD, &cmd, sizeof cmd);
  return m;
}

NlMsg buildNflogModeMsg(uint16_t group, uint32_t copyRange) {
  NlMsg m = configMsg(group, AF_UNSPEC);
  nfulnl_msg_config_mode mode{};
  mode.copy_range = htonl(copyRange);
  mode.copy_mode = NFULNL_COPY_PACKET;
  m.attr(NFULA_CFG_MODE, &mode, sizeof mode);
  return m;
}

bool parseIpHeaders(const uint8_t* p, size_t n, NflogPacket& out) {
  if (n < 1) return false;
  const unsigned version = p[0] >> 4;
  if (version == 4) {
    if (n < 20) return false;
    const size_t ihl = (p[0] & 0x0f) * 4u;
    if (ihl < 20 || ihl > n) return false;
    out.family = AF_INET;
    out.length = static_cast<uint32_t>(p[2] << 8 | p[3]);
    out.tuple.proto = p[9];
    out.tuple.src = formatIp(AF_INET, p + 12);
    out.tuple.dst = formatIp(AF_INET, p + 16);
    // Only the first fragment carries the L4 header.
    const bool firstFragment = ((p[6] & 0x1f) << 8 | p[7]) == 0;
    if (firstFragment) ports(out.tuple.proto, p + ihl, n - ihl, out.tuple);
    return true;
  }
  if (version == 6) {
    if (n < 40) return false;
    out.family = AF_INET6;
    out.length = static_cast<uint32_t>(p[4] << 8 | p[5]) + 40;
    out.tuple.src = formatIp(AF_INET6, p + 8);
    out.tuple.dst = formatIp(AF_INET6, p + 24);
    uint8_t next = p[6];
    size_t off = 40;
    // Extension headers before the L4 one (hop-by-hop, routing, destination options, fragment).
    for (int i = 0; i < 8; ++i) {
      if (next == 0 || next == 43 || next == 60) {
        if (off + 2 > n) break;
        const uint8_t nh = p[off];
        off += (p[off + 1] + 1u) * 8u;
        next = nh;
      } else if (next == 44) {
        if (off + 8 > n) break;
        const bool first = ((p[off + 2] << 8 | p[off + 3]) & 0xfff8) == 0;
        next = p[off];
        off += 8;
        if (!first) {
          out.tuple.proto = next;
          return true;
        }
      } else {
        break;
      }
    }
    out.tuple.proto = next;
    if (off <= n) ports(next, p + off, n - off, out.tuple);
    return true;
  }
  return false;
}

bool parseNflogPacket(const nlmsghdr* m, NflogPacket& out) {
  if (m->nlmsg_type != kUlogPacket || m->nlmsg_len < NLMSG_LENGTH(sizeof(nfgenmsg))) return false;
  const size_t off = NLMSG_ALIGN(sizeof(nfgenmsg));
  Attrs at(static_cast<const uint8_t*>(NLMSG_DATA(m)) + off, m->nlmsg_len - NLMSG_LENGTH(off));
  const rtattr* payload = at.get(NFULA_PAYLOAD);
  if (!payload) return false;
  out = NflogPacket{};
  if (!parseIpHeaders(static_cast<const uint8_t*>(RTA_DATA(payload)), RTA_PAYLOAD(payload), out)) return false;
  out.prefix = at.str(NFULA_PREFIX);
  if (at.has(NFULA_IFINDEX_INDEV)) out.indev = ntohl(at.u32(NFULA_IFINDEX_INDEV));
  if (at.has(NFULA_IFINDEX_OUTDEV)) out.outdev = ntohl(at.u32(NFULA_IFINDEX_OUTDEV));
  return true;
}

bool EventSocket::openIn(int nsFd, int rcvbuf, NlError& e) {
  if (!openSocketIn(nsFd, "", sock_, e, NETLINK_NETFILTER)) return false;
  // Bursts are absorbed by the socket buffer; FORCE lifts rmem_max (the agent has CAP_NET_ADMIN).
  if (rcvbuf > 0 && ::setsockopt(sock_.fd(), SOL_SOCKET, SO_RCVBUFFORCE, &rcvbuf, sizeof rcvbuf) < 0) {
    (void)::setsockopt(sock_.fd(), SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
  }
  buf_.resize(kEventBuf);
  return true;
}

bool EventSocket::openNflog(int nsFd, uint16_t group, uint32_t copyRange, int rcvbuf, NlError& e) {
  const std::string subject = "nflog group " + std::to_string(group);
  if (!openIn(nsFd, rcvbuf, e)) {
    e.subject = subject;
    return false;
  }
  NlMsg bind = buildNflogBindMsg(group);
  NlMsg mode = buildNflogModeMsg(group, copyRange);
  if (!sock_.request(bind, e) || !sock_.request(mode, e)) {
    e.op = "NFULNL_MSG_CONFIG";
    e.subject = subject;
    if (e.err == EBUSY) e.extack = "another process (or socket) is bound to this NFLOG group";
    sock_.close();
    return false;
  }
  return true;
}

bool EventSocket::openConntrack(int nsFd, int rcvbuf, NlError& e) {
  if (!openIn(nsFd, rcvbuf, e)) {
    e.subject = "conntrack events";
    return false;
  }
  for (int g : {NFNLGRP_CONNTRACK_NEW, NFNLGRP_CONNTRACK_DESTROY}) {
    if (::setsockopt(sock_.fd(), SOL_NETLINK, NETLINK_ADD_MEMBERSHIP, &g, sizeof g) < 0) {
      e.set(errno, "NETLINK_ADD_MEMBERSHIP", "conntrack events");
      if (e.err == ENOENT || e.err == EINVAL) e.extack = "no conntrack netlink support (module nf_conntrack_netlink)";
      sock_.close();
      return false;
    }
  }
  return true;
}

bool EventSocket::drain(const std::function<void(const nlmsghdr*)>& onMsg, int maxDatagrams, uint32_t& overruns,
                        NlError& e) {
  for (int i = 0; i < maxDatagrams; ++i) {
    sockaddr_nl from{};
    socklen_t fl = sizeof from;
    ssize_t n = ::recvfrom(sock_.fd(), buf_.data(), buf_.size(), MSG_DONTWAIT, reinterpret_cast<sockaddr*>(&from), &fl);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return true;
      if (errno == ENOBUFS) {
        ++overruns;
        continue;
      }
      e.set(errno, "recv", "flow events");
      return false;
    }
    if (from.nl_pid != 0) continue;  // only the kernel speaks here
    int rem = static_cast<int>(n);
    for (auto* h = reinterpret_cast<const nlmsghdr*>(buf_.data()); NLMSG_OK(h, rem); h = NLMSG_NEXT(h, rem)) {
      if (h->nlmsg_type == NLMSG_ERROR || h->nlmsg_type == NLMSG_DONE || h->nlmsg_type == NLMSG_NOOP) continue;
      onMsg(h);
    }
  }
  return true;
}

}  // namespace np
