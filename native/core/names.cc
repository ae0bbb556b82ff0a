#include "core/names.h"

#include <linux/rtnetlink.h>

#include <cstring>

namespace np {

namespace {

struct Named {
  const char* name;
  uint8_t value;
};

template <size_t N>
bool byName(const Named (&table)[N], const std::string& s, uint8_t& out) {
  for (const Named& n : table) {
    if (s != n.name) continue;
    out = n.value;
    return true;
  }
  return false;
}

const Named kScopes[] = {{"universe", RT_SCOPE_UNIVERSE}, {"global", RT_SCOPE_UNIVERSE}, {"site", RT_SCOPE_SITE},
                         {"link", RT_SCOPE_LINK},         {"host", RT_SCOPE_HOST}};
const Named kProtocols[] = {{"boot", RTPROT_BOOT}, {"static", RTPROT_STATIC}, {"kernel", RTPROT_KERNEL}};
const Named kTypes[] = {{"unicast", RTN_UNICAST}, {"blackhole", RTN_BLACKHOLE}, {"unreachable", RTN_UNREACHABLE}};

}  // namespace

bool parseScopeName(const std::string& s, uint8_t& out) { return byName(kScopes, s, out); }
bool parseRouteProtocolName(const std::string& s, uint8_t& out) { return byName(kProtocols, s, out); }
bool parseRouteTypeName(const std::string& s, uint8_t& out) { return byName(kTypes, s, out); }

}  // namespace np
