// Overlay devices over rtnetlink, without N-API: VXLAN and IPIP links (RTM_NEWLINK).
#pragma once

#include <cstdint>
#include <string>

#include "core/handle.h"
#include "core/ip.h"
#include "core/nl_msg.h"

namespace np {

enum class TunnelKind { kIpip, kVxlan };

struct TunnelSpec {
  TunnelKind kind = TunnelKind::kVxlan;
  std::string name;
  uint32_t mtu = 0;
  bool hasLocal = false, hasRemote = false, hasDev = false, hasMac = false;
  IpAddr local, remote;
  LinkRef dev;  // the underlay device
  uint8_t mac[6] = {};
  // vxlan
  uint32_t vni = 0, port = 4789;
  bool learning = false;
  // ipip
  uint32_t ttl = 0;
};

// 'ipip' / 'vxlan', the kind's rtnetlink name (and module name).
const char* tunnelKindName(TunnelKind k);
// devIndex: the resolved spec.dev (0 for none).
NlMsg buildTunnelAddMsg(const TunnelSpec& spec, uint32_t devIndex);
bool tunnelAdd(Handle& h, const TunnelSpec& spec, NlError& e);

}  // namespace np
