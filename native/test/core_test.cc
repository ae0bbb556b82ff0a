// Unit tests of native/core without Node: the bytes each op's message builder
// produces, checked against golden buffers written out field by field from
// the kernel's uapi layouts, and the parsing of canned kernel answers. Built
// and run by test/unit/native-core.test.ts (scripts/build-core-test); exits 1
// on any mismatch, printing each.
#include <arpa/inet.h>
#include <linux/if.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netfilter/nfnetlink_conntrack.h>
#include <linux/netfilter/nfnetlink_log.h>
#include <linux/if_addr.h>
#include <linux/if_link.h>
#include <linux/neighbour.h>
#include <linux/veth.h>
#include <sys/socket.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "core/addr.h"
#include "core/conntrack.h"
#include "core/flowlog.h"
#include "core/link.h"
#include "core/names.h"
#include "core/neigh.h"
#include "core/route.h"
#include "core/sysctl.h"
#include "core/tunnel.h"

using namespace np;

namespace {

int failures = 0, checks = 0;

void check(bool ok, const std::string& what) {
  ++checks;
  if (ok) return;
  ++failures;
  std::printf("FAIL %s\n", what.c_str());
}

template <typename T>
void checkEq(const T& got, const T& want, const std::string& what) {
  check(got == want, what);
}
void checkEq(const std::string& got, const char* want, const std::string& what) {
  check(got == want, what + ": got '" + got + "', want '" + want + "'");
}

// "10 00 ..." (spaces and '|' between fields ignored) -> bytes.
std::vector<uint8_t> hex(const char* s) {
  std::vector<uint8_t> out;
  for (const char* p = s; *p;) {
    if (*p == ' ' || *p == '|' || *p == '\n') {
      ++p;
      continue;
    }
    unsigned v;
    std::sscanf(p, "%2x", &v);
    out.push_back(static_cast<uint8_t>(v));
    p += 2;
  }
  return out;
}

std::string hexOf(const uint8_t* p, size_t n) {
  std::string s;
  char b[4];
  for (size_t i = 0; i < n; ++i) {
    std::snprintf(b, sizeof b, "%02x ", p[i]);
    s += b;
  }
  return s;
}

void checkBytes(NlMsg& m, const char* golden, const std::string& what) {
  std::vector<uint8_t> want = hex(golden);
  bool same = m.size() == want.size() && std::memcmp(m.data(), want.data(), want.size()) == 0;
  if (!same) {
    std::printf("  got:  %s\n  want: %s\n", hexOf(m.data(), m.size()).c_str(), hexOf(want.data(), want.size()).c_str());
  }
  check(same, what + " bytes");
}

IpAddr ip(const char* s) {
  IpAddr a;
  parseIp(s, a);
  return a;
}

// A canned kernel answer: the message as the kernel lays it out, built with
// the same writer (its layout is what checkBytes pins above).
const nlmsghdr* hdrOf(NlMsg& m) { return m.hdr(); }

void vethAddBytes() {
  VethSpec s;
  s.name = "veth0";
  s.peerName = "eth0";
  s.mtu = 1450;
  s.peerNsFd = 5;
  NlMsg m = buildVethAddMsg(s);
  checkBytes(m,
             "78 00 00 00 | 10 00 | 00 06 | 00 00 00 00 | 00 00 00 00"  // len 120, RTM_NEWLINK, CREATE|EXCL
             "00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00"          // ifinfomsg
             "0a 00 03 00 76 65 74 68 30 00 00 00"                      // IFLA_IFNAME "veth0"
             "08 00 04 00 aa 05 00 00"                                  // IFLA_MTU 1450
             "44 00 12 00"                                              // IFLA_LINKINFO (68)
             "  09 00 01 00 76 65 74 68 00 00 00 00"                    //   IFLA_INFO_KIND "veth"
             "  34 00 02 00"                                            //   IFLA_INFO_DATA (52)
             "    30 00 01 00"                                          //     VETH_INFO_PEER (48)
             "      00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00"    //       ifinfomsg
             "      09 00 03 00 65 74 68 30 00 00 00 00"                //       IFLA_IFNAME "eth0"
             "      08 00 04 00 aa 05 00 00"                            //       IFLA_MTU 1450
             "      08 00 1c 00 05 00 00 00",                           //       IFLA_NET_NS_FD 5
             "vethAdd");
}

void linkMessages() {
  LinkRef byName;
  byName.name = "eth0";
  NlMsg get = buildLinkGetMsg(byName);
  checkBytes(get,
             "34 00 00 00 | 12 00 | 00 00 | 00 00 00 00 | 00 00 00 00"  // len 52, RTM_GETLINK
             "00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00"          // ifinfomsg, index 0
             "09 00 03 00 65 74 68 30 00 00 00 00"                      // IFLA_IFNAME "eth0"
             "08 00 1d 00 08 00 00 00",                                 // IFLA_EXT_MASK SKIP_STATS
             "linkGet by name");
  NlMsg group = buildLinkDelGroupMsg(77);
  checkBytes(group,
             "28 00 00 00 | 11 00 | 00 00 | 00 00 00 00 | 00 00 00 00"  // len 40, RTM_DELLINK
             "00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00"          // ifinfomsg: no index
             "08 00 1b 00 4d 00 00 00",                                 // IFLA_GROUP 77
             "linkDelGroup");
  LinkRef byIndex;
  byIndex.index = 9;
  LinkChange c;
  c.hasUp = c.up = true;
  c.name = "eth1";
  NlMsg set = buildLinkSetMsg(byIndex, c);
  checkBytes(set,
             "2c 00 00 00 | 10 00 | 00 00 | 00 00 00 00 | 00 00 00 00"  // len 44, RTM_NEWLINK
             "00 00 | 00 00 | 09 00 00 00 | 01 00 00 00 | 01 00 00 00"  // index 9, flags UP, change UP
             "09 00 03 00 65 74 68 31 00 00 00 00",                     // IFLA_IFNAME "eth1" (the new name)
             "linkSet rename+up");
}

void routeMessages() {
  RouteSpec r;
  parseCidr("10.1.2.0/24", r.dst, r.dstLen, false);
  r.dstText = "10.1.2.0/24";
  r.hasGw = true;
  r.gw = ip("10.0.0.1");
  NlMsg add = buildRouteMsg(r, 7, RouteOp::kAdd);
  checkBytes(add,
             "3c 00 00 00 | 18 00 | 00 06 | 00 00 00 00 | 00 00 00 00"  // len 60, RTM_NEWROUTE, CREATE|EXCL
             "02 18 00 00 fe 03 00 01 00 00 00 00"                      // inet /24 main boot universe unicast
             "08 00 0f 00 fe 00 00 00"                                  // RTA_TABLE 254
             "08 00 01 00 0a 01 02 00"                                  // RTA_DST
             "08 00 05 00 0a 00 00 01"                                  // RTA_GATEWAY
             "08 00 04 00 07 00 00 00",                                 // RTA_OIF 7
             "routeAdd");
  RouteSpec d;
  parseCidr("fd00::/64", d.dst, d.dstLen, false);
  d.table = 1000;
  d.hasMetric = true;
  d.metric = 5;
  NlMsg del = buildRouteMsg(d, 0, RouteOp::kDel);
  checkBytes(del,
             "40 00 00 00 | 19 00 | 00 00 | 00 00 00 00 | 00 00 00 00"  // len 64, RTM_DELROUTE
             "0a 40 00 00 00 00 ff 00 00 00 00 00"                      // inet6 /64 table UNSPEC, wildcards
             "08 00 0f 00 e8 03 00 00"                                  // RTA_TABLE 1000
             "14 00 01 00 fd 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00"  // RTA_DST fd00::
             "08 00 06 00 05 00 00 00",                                 // RTA_PRIORITY 5
             "routeDel");
  RouteSpec b;
  parseCidr("192.0.2.0/24", b.dst, b.dstLen, false);
  b.type = RTN_BLACKHOLE;
  NlMsg bh = buildRouteMsg(b, 0, RouteOp::kReplace);
  checkEq<uint16_t>(bh.hdr()->nlmsg_flags, NLM_F_CREATE | NLM_F_REPLACE, "routeReplace flags");
  auto* rt = reinterpret_cast<const rtmsg*>(bh.data() + NLMSG_HDRLEN);
  checkEq<int>(rt->rtm_scope, RT_SCOPE_UNIVERSE, "blackhole scope universe");
  checkEq<int>(rt->rtm_type, RTN_BLACKHOLE, "blackhole type");
}

void addrMessages() {
  AddrSpec s;
  parseCidr("fd00::5/128", s.ip, s.prefix, false);
  s.nodad = true;
  NlMsg add = buildAddrMsg(s, 3, true);
  checkBytes(add,
             "48 00 00 00 | 14 00 | 00 06 | 00 00 00 00 | 00 00 00 00"  // len 72, RTM_NEWADDR, CREATE|EXCL
             "0a 80 00 00 03 00 00 00"                                  // inet6 /128 universe, ifindex 3
             "14 00 02 00 fd 00 00 00 00 00 00 00 00 00 00 00 00 00 00 05"  // IFA_LOCAL
             "14 00 01 00 fd 00 00 00 00 00 00 00 00 00 00 00 00 00 00 05"  // IFA_ADDRESS
             "08 00 08 00 02 00 00 00",                                 // IFA_FLAGS NODAD
             "addrAdd v6 nodad");
  AddrSpec v4;
  parseCidr("10.0.0.5/32", v4.ip, v4.prefix, true);
  v4.nodad = true;  // IPv4 has no DAD: no IFA_FLAGS
  NlMsg del = buildAddrMsg(v4, 3, false);
  checkBytes(del,
             "28 00 00 00 | 15 00 | 00 00 | 00 00 00 00 | 00 00 00 00"  // len 40, RTM_DELADDR
             "02 20 00 00 03 00 00 00"                                  // inet /32, ifindex 3
             "08 00 02 00 0a 00 00 05"                                  // IFA_LOCAL
             "08 00 01 00 0a 00 00 05",                                 // IFA_ADDRESS
             "addrDel v4");
}

void neighMessages() {
  NeighSpec n;
  n.dst = ip("10.0.0.2");
  parseMac("ee:ee:ee:ee:ee:01", n.lladdr);
  NlMsg set = buildNeighMsg(n, 4, true);
  checkBytes(set,
             "30 00 00 00 | 1c 00 | 00 05 | 00 00 00 00 | 00 00 00 00"  // len 48, RTM_NEWNEIGH, CREATE|REPLACE
             "02 00 00 00 04 00 00 00 80 00 00 00"                      // inet, ifindex 4, PERMANENT
             "08 00 01 00 0a 00 00 02"                                  // NDA_DST
             "0a 00 02 00 ee ee ee ee ee 01 00 00",                     // NDA_LLADDR
             "neighSet");
  NlMsg del = buildNeighMsg(n, 4, false);
  checkBytes(del,
             "24 00 00 00 | 1d 00 | 00 00 | 00 00 00 00 | 00 00 00 00"  // len 36, RTM_DELNEIGH
             "02 00 00 00 04 00 00 00 00 00 00 00"                      // inet, ifindex 4
             "08 00 01 00 0a 00 00 02",                                 // NDA_DST
             "neighDel");
  FdbSpec f;
  parseMac("66:77:88:99:aa:bb", f.lladdr);
  f.dst = ip("192.0.2.7");
  NlMsg fdb = buildFdbMsg(f, 6, true);
  checkBytes(fdb,
             "30 00 00 00 | 1c 00 | 00 05 | 00 00 00 00 | 00 00 00 00"  // len 48, RTM_NEWNEIGH, CREATE|REPLACE
             "07 00 00 00 06 00 00 00 80 00 02 00"                      // bridge, ifindex 6, PERMANENT, NTF_SELF
             "0a 00 02 00 66 77 88 99 aa bb 00 00"                      // NDA_LLADDR
             "08 00 01 00 c0 00 02 07",                                 // NDA_DST
             "fdbSet");
  NlMsg dump = buildNeighDumpMsg(AF_INET6, 6);
  checkBytes(dump,
             "24 00 00 00 | 1e 00 | 00 00 | 00 00 00 00 | 00 00 00 00"  // len 36, RTM_GETNEIGH
             "0a 00 00 00 06 00 00 00 00 00 00 00"                      // inet6, ifindex 6
             "08 00 08 00 06 00 00 00",                                 // NDA_IFINDEX 6
             "neighList dump");
}

void tunnelMessages() {
  TunnelSpec v;
  v.kind = TunnelKind::kVxlan;
  v.name = "vx0";
  v.vni = 4096;
  v.hasLocal = true;
  v.local = ip("192.0.2.1");
  NlMsg m = buildTunnelAddMsg(v, 2);
  checkBytes(m,
             "64 00 00 00 | 10 00 | 00 06 | 00 00 00 00 | 00 00 00 00"  // len 100, RTM_NEWLINK, CREATE|EXCL
             "00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00"          // ifinfomsg
             "08 00 03 00 76 78 30 00"                                  // IFLA_IFNAME "vx0"
             "3c 00 12 00"                                              // IFLA_LINKINFO (60)
             "  0a 00 01 00 76 78 6c 61 6e 00 00 00"                    //   IFLA_INFO_KIND "vxlan"
             "  2c 00 02 00"                                            //   IFLA_INFO_DATA (44)
             "    08 00 01 00 00 10 00 00"                              //     IFLA_VXLAN_ID 4096
             "    06 00 0f 00 12 b5 00 00"                              //     IFLA_VXLAN_PORT 4789 (BE)
             "    08 00 04 00 c0 00 02 01"                              //     IFLA_VXLAN_LOCAL
             "    08 00 03 00 02 00 00 00"                              //     IFLA_VXLAN_LINK 2
             "    05 00 07 00 00 00 00 00",                             //     IFLA_VXLAN_LEARNING 0
             "vxlanAdd");
}

void parseAnswers() {
  // RTM_NEWLINK: a veth whose peer is in another namespace (same ifindex there).
  NlMsg l(RTM_NEWLINK, 0);
  ifinfomsg ifi{};
  ifi.ifi_index = 3;
  ifi.ifi_flags = IFF_UP;
  l.put(ifi);
  l.str(IFLA_IFNAME, "eth0");
  l.u32(IFLA_MTU, 1500);
  uint8_t mac[6] = {0x0a, 0x58, 0x0a, 0x00, 0x00, 0x05};
  l.attr(IFLA_ADDRESS, mac, 6);
  l.u32(IFLA_LINK, 3);
  l.s32(IFLA_LINK_NETNSID, 0);
  size_t li = l.nestBegin(IFLA_LINKINFO);
  l.str(IFLA_INFO_KIND, "veth");
  l.nestEnd(li);
  Link link;
  check(parseLink(hdrOf(l), link), "parseLink accepts");
  checkEq(link.name, "eth0", "link.name");
  checkEq(link.kind, "veth", "link.kind");
  checkEq(link.mac, "0a:58:0a:00:00:05", "link.mac");
  checkEq<uint32_t>(link.mtu, 1500, "link.mtu");
  check(link.hasParent && link.parent == 3 && link.hasNsid, "link parent in another namespace");
  NlMsg notLink(RTM_NEWADDR, 0);
  notLink.put(ifi);
  check(!parseLink(hdrOf(notLink), link), "parseLink refuses other messages");

  // RTM_NEWROUTE in a table above 255 (RTA_TABLE), and a cloned one.
  NlMsg r(RTM_NEWROUTE, 0);
  rtmsg rt{};
  rt.rtm_family = AF_INET;
  rt.rtm_dst_len = 24;
  rt.rtm_table = RT_TABLE_UNSPEC;
  rt.rtm_protocol = RTPROT_STATIC;
  rt.rtm_type = RTN_UNICAST;
  size_t off = r.put(rt);
  r.u32(RTA_TABLE, 1000);
  IpAddr dst = ip("10.1.2.0"), gw = ip("10.0.0.1");
  r.attr(RTA_DST, dst.bytes, 4);
  r.attr(RTA_GATEWAY, gw.bytes, 4);
  r.u32(RTA_OIF, 7);
  Route route;
  check(parseRoute(hdrOf(r), route), "parseRoute accepts");
  checkEq(route.dst, "10.1.2.0/24", "route.dst");
  checkEq(route.gateway, "10.0.0.1", "route.gateway");
  check(route.hasOif && route.oif == 7, "route.oif");
  checkEq<uint32_t>(route.table, 1000, "route.table from RTA_TABLE");
  check(!route.hasMetric && !route.hasSrc, "route without metric/src");
  r.at<rtmsg>(off)->rtm_flags |= RTM_F_CLONED;
  check(!parseRoute(hdrOf(r), route), "parseRoute skips cloned routes");

  // RTM_NEWADDR for IPv6: IFA_ADDRESS only, flags in IFA_FLAGS.
  NlMsg a(RTM_NEWADDR, 0);
  ifaddrmsg ifa{};
  ifa.ifa_family = AF_INET6;
  ifa.ifa_prefixlen = 64;
  ifa.ifa_scope = RT_SCOPE_LINK;
  ifa.ifa_index = 2;
  a.put(ifa);
  IpAddr ll = ip("fe80::1");
  a.attr(IFA_ADDRESS, ll.bytes, 16);
  a.u32(IFA_FLAGS, IFA_F_PERMANENT | IFA_F_NODAD);
  Addr addr;
  check(parseAddr(hdrOf(a), addr), "parseAddr accepts");
  checkEq(addr.address, "fe80::1", "addr.address");
  check(addr.prefix == 64 && addr.index == 2 && addr.scope == RT_SCOPE_LINK, "addr prefix/index/scope");
  checkEq<uint32_t>(addr.flags, IFA_F_PERMANENT | IFA_F_NODAD, "addr.flags from IFA_FLAGS");

  // RTM_NEWNEIGH: an IPv4 neighbour and a bridge FDB entry.
  NlMsg n(RTM_NEWNEIGH, 0);
  ndmsg nd{};
  nd.ndm_family = AF_INET;
  nd.ndm_ifindex = 4;
  nd.ndm_state = NUD_PERMANENT;
  n.put(nd);
  IpAddr nip = ip("10.0.0.2");
  n.attr(NDA_DST, nip.bytes, 4);
  n.attr(NDA_LLADDR, mac, 6);
  Neigh neigh;
  check(parseNeigh(hdrOf(n), neigh), "parseNeigh accepts");
  checkEq(neigh.dst, "10.0.0.2", "neigh.dst");
  check(neigh.hasLladdr && neigh.lladdr == "0a:58:0a:00:00:05" && neigh.permanent, "neigh lladdr/permanent");
  FdbEntry fdb;
  check(parseFdb(hdrOf(n), fdb) && fdb.hasDst && fdb.dst == "10.0.0.2", "parseFdb reads NDA_DST");
  NlMsg fb(RTM_NEWNEIGH, 0);
  nd.ndm_family = 7;  // AF_BRIDGE
  nd.ndm_flags = NTF_SELF;
  fb.put(nd);
  fb.attr(NDA_LLADDR, mac, 6);
  check(parseFdb(hdrOf(fb), fdb) && !fdb.hasDst && fdb.flags == NTF_SELF, "fdb entry without dst");
  check(!parseNeigh(hdrOf(fb), neigh), "parseNeigh skips bridge entries");
}

void sysctlKeys() {
  SysctlKey k;
  check(parseSysctlKey("net.ipv4.conf.eth0/100.forwarding", k), "sysctl key with VLAN name");
  checkEq(k.path, "/proc/sys/net/ipv4/conf/eth0.100/forwarding", "sysctl path");
  for (const char* bad : {"kernel.pid_max", "net..x", "net.ipv4/../x", "net.ipv4.conf.a b", "net.", "net.ipv4."})
    check(!parseSysctlKey(bad, k), std::string("sysctl key refused: ") + bad);
}

void names() {
  uint8_t v = 0;
  check(parseScopeName("link", v) && v == RT_SCOPE_LINK, "scope 'link'");
  check(parseScopeName("global", v) && v == RT_SCOPE_UNIVERSE, "scope 'global' is universe");
  check(!parseScopeName("Link", v), "scope names are case-sensitive");
  check(parseRouteProtocolName("static", v) && v == RTPROT_STATIC, "protocol 'static'");
  check(parseRouteTypeName("unreachable", v) && v == RTN_UNREACHABLE, "type 'unreachable'");
  check(!parseRouteTypeName("local", v), "type 'local' refused");
}


// nfnetlink_log: the bind and copy-mode config messages, and an NFULNL_MSG_PACKET as the kernel
// sends it for `log group 22 prefix "np1 A I 0 eop"` on a TCP SYN 10.173.0.2:40000 -> 10.173.1.3:80.
void nflogMessages() {
  NlMsg bind = buildNflogBindMsg(22);
  checkBytes(bind,
             "1c 00 00 00 | 01 04 | 00 00 | 00 00 00 00 | 00 00 00 00"  // len 28, ULOG<<8|CONFIG
             "| 00 00 00 16"                                               // AF_UNSPEC, v0, res_id=htons(22)
             "| 05 00 01 00 01 00 00 00",                                  // NFULA_CFG_CMD: BIND
             "nflog bind");
  NlMsg mode = buildNflogModeMsg(22, 128);
  checkBytes(mode,
             "20 00 00 00 | 01 04 | 00 00 | 00 00 00 00 | 00 00 00 00 | 00 00 00 16"
             "| 0a 00 02 00 | 00 00 00 80 | 02 00 | 00 00",  // NFULA_CFG_MODE: range 128 (be), COPY_PACKET
             "nflog mode");

  NlMsg pk((NFNL_SUBSYS_ULOG << 8) | NFULNL_MSG_PACKET, 0);
  nfgenmsg g{};
  g.nfgen_family = AF_INET;
  g.res_id = htons(22);
  pk.put(g);
  const uint8_t hdr[4] = {0x08, 0x00, 2, 0};
  pk.attr(NFULA_PACKET_HDR, hdr, 4);
  const uint32_t in = htonl(3), out = htonl(7);
  pk.attr(NFULA_IFINDEX_INDEV, &in, 4);
  pk.attr(NFULA_IFINDEX_OUTDEV, &out, 4);
  std::vector<uint8_t> ipv4 = hex(
      "45 00 00 3c | 12 34 40 00 | 40 06 00 00 | 0a ad 00 02 | 0a ad 01 03"  // IPv4, 60 bytes, TCP
      "| 9c 40 00 50");                                                      // ports 40000 -> 80
  pk.attr(NFULA_PAYLOAD, ipv4.data(), ipv4.size());
  pk.str(NFULA_PREFIX, "np1 A I 0 eop");
  NflogPacket p;
  check(parseNflogPacket(hdrOf(pk), p), "parseNflogPacket accepts");
  checkEq(p.prefix, "np1 A I 0 eop", "nflog prefix");
  checkEq(p.tuple.src, "10.173.0.2", "nflog src");
  checkEq(p.tuple.dst, "10.173.1.3", "nflog dst");
  check(p.tuple.proto == 6 && p.tuple.hasPorts && p.tuple.sport == 40000 && p.tuple.dport == 80, "nflog TCP ports");
  check(p.length == 60 && p.indev == 3 && p.outdev == 7, "nflog length and interfaces");

  // IPv6 with a hop-by-hop header before UDP; a later IPv4 fragment has no ports.
  std::vector<uint8_t> ipv6 = hex(
      "60 00 00 00 | 00 10 00 40 | fd 00 00 00 00 00 00 00 00 00 00 00 00 00 00 01"
      "| fd 00 00 00 00 00 00 00 00 00 00 00 00 00 00 02"
      "| 11 00 00 00 00 00 00 00 | 00 35 00 35");
  NflogPacket p6;
  check(parseIpHeaders(ipv6.data(), ipv6.size(), p6), "IPv6 headers parse");
  check(p6.tuple.proto == 17 && p6.tuple.hasPorts && p6.tuple.sport == 53 && p6.tuple.dport == 53 && p6.tuple.src == "fd00::1", "IPv6 UDP after hop-by-hop");
  std::vector<uint8_t> frag = hex("45 00 00 3c 12 34 00 10 40 06 00 00 0a ad 00 02 0a ad 01 03 9c 40 00 50");
  NflogPacket pf;
  check(parseIpHeaders(frag.data(), frag.size(), pf) && !pf.tuple.hasPorts, "a non-first fragment has no ports");
  check(!parseIpHeaders(ipv4.data(), 10, pf), "a cut IPv4 header is refused");
}

// A ctnetlink DESTROY event with accounting and TCP state, and a NEW one (NLM_F_CREATE).
void ctEvents() {
  auto tuple = [](NlMsg& m, uint16_t type, const char* s, const char* d, uint16_t sp, uint16_t dp) {
    size_t t = m.nestBegin(type | NLA_F_NESTED);
    size_t i = m.nestBegin(CTA_TUPLE_IP | NLA_F_NESTED);
    IpAddr a = ip(s), b = ip(d);
    m.attr(CTA_IP_V4_SRC, a.bytes, 4);
    m.attr(CTA_IP_V4_DST, b.bytes, 4);
    m.nestEnd(i);
    size_t p = m.nestBegin(CTA_TUPLE_PROTO | NLA_F_NESTED);
    m.u8(CTA_PROTO_NUM, 6);
    uint16_t spn = htons(sp), dpn = htons(dp);
    m.attr(CTA_PROTO_SRC_PORT, &spn, 2);
    m.attr(CTA_PROTO_DST_PORT, &dpn, 2);
    m.nestEnd(p);
    m.nestEnd(t);
  };
  auto counters = [](NlMsg& m, uint16_t type, uint64_t packets, uint64_t bytes) {
    size_t c = m.nestBegin(type | NLA_F_NESTED);
    std::vector<uint8_t> be(8);
    for (int i = 0; i < 8; ++i) be[i] = static_cast<uint8_t>(packets >> (56 - 8 * i));
    m.attr(CTA_COUNTERS_PACKETS, be.data(), 8);
    for (int i = 0; i < 8; ++i) be[i] = static_cast<uint8_t>(bytes >> (56 - 8 * i));
    m.attr(CTA_COUNTERS_BYTES, be.data(), 8);
    m.nestEnd(c);
  };
  NlMsg d((NFNL_SUBSYS_CTNETLINK << 8) | IPCTNL_MSG_CT_DELETE, 0);
  nfgenmsg g{};
  g.nfgen_family = AF_INET;
  d.put(g);
  tuple(d, CTA_TUPLE_ORIG, "10.173.0.2", "10.173.1.3", 40000, 80);
  tuple(d, CTA_TUPLE_REPLY, "10.173.1.3", "10.173.0.2", 80, 40000);
  const uint32_t id = htonl(0xdeadbeef);
  d.attr(CTA_ID, &id, 4);
  counters(d, CTA_COUNTERS_ORIG, 6, 420);
  counters(d, CTA_COUNTERS_REPLY, 5, 0x100000000ull);  // above 32 bits
  size_t pi = d.nestBegin(CTA_PROTOINFO | NLA_F_NESTED);
  size_t tcp = d.nestBegin(CTA_PROTOINFO_TCP | NLA_F_NESTED);
  d.u8(CTA_PROTOINFO_TCP_STATE, 7);  // TIME_WAIT
  d.nestEnd(tcp);
  d.nestEnd(pi);
  CtEvent ev;
  check(parseCtEvent(hdrOf(d), ev), "parseCtEvent accepts a DESTROY");
  check(ev.type == CtEvent::kDestroy && ev.family == AF_INET && ev.hasId && ev.id == 0xdeadbeef, "destroy type/family/id");
  check(ev.orig.src == "10.173.0.2" && ev.orig.dport == 80 && ev.reply.src == "10.173.1.3", "destroy tuples");
  check(ev.hasCounters && ev.origPackets == 6 && ev.origBytes == 420 && ev.replyPackets == 5 &&
            ev.replyBytes == 0x100000000ull,
        "destroy counters (64-bit)");
  check(ev.tcpState == 8, "tcp state kept (+1)");

  NlMsg n((NFNL_SUBSYS_CTNETLINK << 8) | IPCTNL_MSG_CT_NEW, NLM_F_CREATE | NLM_F_EXCL);
  n.put(g);
  tuple(n, CTA_TUPLE_ORIG, "10.173.0.2", "203.0.113.2", 40001, 443);
  check(parseCtEvent(hdrOf(n), ev) && ev.type == CtEvent::kNew && !ev.hasCounters && !ev.hasReply, "NEW event");
  NlMsg u((NFNL_SUBSYS_CTNETLINK << 8) | IPCTNL_MSG_CT_NEW, 0);
  u.put(g);
  tuple(u, CTA_TUPLE_ORIG, "10.173.0.2", "203.0.113.2", 40001, 443);
  check(parseCtEvent(hdrOf(u), ev) && ev.type == CtEvent::kDump, "a NEW without NLM_F_CREATE is not a new connection");
  NlMsg other((NFNL_SUBSYS_ULOG << 8) | NFULNL_MSG_PACKET, 0);
  other.put(g);
  check(!parseCtEvent(hdrOf(other), ev), "not a ctnetlink message");
}

}  // namespace

int main() {
  vethAddBytes();
  linkMessages();
  routeMessages();
  addrMessages();
  neighMessages();
  tunnelMessages();
  parseAnswers();
  sysctlKeys();
  names();
  nflogMessages();
  ctEvents();
  std::printf("%d checks, %d failed\n", checks, failures);
  return failures ? 1 : 0;
}
