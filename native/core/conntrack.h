// Conntrack entries naming an address, deleted over ctnetlink, without N-API.
#pragma once

#include <cstdint>
#include <vector>

#include "core/handle.h"
#include "core/ip.h"

namespace np {

// Deletes every entry whose original or reply tuple has one of addrs as
// source or destination, in the handle's namespace (a ctnetlink socket of its
// own, opened there). deleted counts what this call removed.
bool conntrackFlush(Handle& h, const std::vector<IpAddr>& addrs, uint32_t& deleted, NlError& e);

}  // namespace np
