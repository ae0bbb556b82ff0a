// VXLAN and IPIP links: RTM_NEWLINK with the kind's IFLA_INFO_DATA.
#include "core/tunnel.h"

#include <arpa/inet.h>
#include <linux/if_link.h>
#include <linux/if_tunnel.h>
#include <sys/socket.h>

#include "core/link.h"

namespace np {

namespace {

// RTM_NEWLINK kind "ipip": IFLA_IPTUN_LINK / LOCAL / REMOTE / TTL and PMTUDISC
// on (the kernel's default for ip(8)-created tunnels, kept explicit).
void putIpipData(NlMsg& m, const TunnelSpec& r, uint32_t devIndex) {
  if (devIndex) m.u32(IFLA_IPTUN_LINK, devIndex);
  if (r.hasLocal) m.attr(IFLA_IPTUN_LOCAL, r.local.bytes, 4);
  if (r.hasRemote) m.attr(IFLA_IPTUN_REMOTE, r.remote.bytes, 4);
  m.u8(IFLA_IPTUN_TTL, static_cast<uint8_t>(r.ttl));
  m.u8(IFLA_IPTUN_PMTUDISC, 1);
}

// RTM_NEWLINK kind "vxlan": VNI, destination port (network order), the local
// VTEP address (its family picks the underlay family), the underlay device,
// and learning off: every remote VTEP comes from an FDB entry we program.
void putVxlanData(NlMsg& m, const TunnelSpec& r, uint32_t devIndex) {
  m.u32(IFLA_VXLAN_ID, r.vni);
  uint16_t port = htons(static_cast<uint16_t>(r.port));
  m.attr(IFLA_VXLAN_PORT, &port, 2);
  if (r.hasLocal) {
    if (r.local.family == AF_INET) m.attr(IFLA_VXLAN_LOCAL, r.local.bytes, 4);
    else m.attr(IFLA_VXLAN_LOCAL6, r.local.bytes, 16);
  }
  if (devIndex) m.u32(IFLA_VXLAN_LINK, devIndex);
  m.u8(IFLA_VXLAN_LEARNING, r.learning ? 1 : 0);
}

}  // namespace

const char* tunnelKindName(TunnelKind k) { return k == TunnelKind::kIpip ? "ipip" : "vxlan"; }

NlMsg buildTunnelAddMsg(const TunnelSpec& r, uint32_t devIndex) {
  NlMsg m(RTM_NEWLINK, NLM_F_CREATE | NLM_F_EXCL);
  ifinfomsg ifi{};
  ifi.ifi_family = AF_UNSPEC;
  m.put(ifi);
  m.str(IFLA_IFNAME, r.name);
  if (r.mtu) m.u32(IFLA_MTU, r.mtu);
  if (r.hasMac) m.attr(IFLA_ADDRESS, r.mac, 6);
  size_t li = m.nestBegin(IFLA_LINKINFO);
  m.str(IFLA_INFO_KIND, tunnelKindName(r.kind));
  size_t data = m.nestBegin(IFLA_INFO_DATA);
  if (r.kind == TunnelKind::kIpip) putIpipData(m, r, devIndex);
  else putVxlanData(m, r, devIndex);
  m.nestEnd(data);
  m.nestEnd(li);
  return m;
}

bool tunnelAdd(Handle& h, const TunnelSpec& spec, NlError& e) {
  uint32_t dev = 0;
  if (spec.hasDev && !linkIndex(h, spec.dev, dev, e)) return false;
  NlMsg m = buildTunnelAddMsg(spec, dev);
  if (h.sock.request(m, e)) return true;
  e.subject = spec.name;
  // The kernel answers a link kind it has no module for with EOPNOTSUPP
  // and "Unknown device type" in the extended ack.
  if (e.err == EOPNOTSUPP) {
    const std::string kind = tunnelKindName(spec.kind);
    e.extack = (e.extack.empty() ? std::string("Unknown device type") : e.extack) + ": this kernel has no '" + kind +
               "' module (modprobe " + kind + ")";
  }
  return false;
}

}  // namespace np
