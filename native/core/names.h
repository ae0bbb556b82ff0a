// The names the JS API uses for rtnetlink constants (scopes, route protocols
// and types), one table each.
#pragma once

#include <cstdint>
#include <string>

namespace np {

// 'universe'|'global'|'site'|'link'|'host' -> RT_SCOPE_*.
bool parseScopeName(const std::string& s, uint8_t& out);
// 'boot'|'static'|'kernel' -> RTPROT_*.
bool parseRouteProtocolName(const std::string& s, uint8_t& out);
// 'unicast'|'blackhole'|'unreachable' -> RTN_*.
bool parseRouteTypeName(const std::string& s, uint8_t& out);

}  // namespace np
