// Addresses: RTM_NEWADDR / RTM_DELADDR / RTM_GETADDR.
#include "core/addr.h"

#include <linux/if_addr.h>
#include <sys/socket.h>

namespace np {

NlMsg buildAddrMsg(const AddrSpec& s, uint32_t index, bool add) {
  NlMsg m(add ? RTM_NEWADDR : RTM_DELADDR, add ? NLM_F_CREATE | NLM_F_EXCL : 0);
  ifaddrmsg ifa{};
  ifa.ifa_family = static_cast<uint8_t>(s.ip.family);
  ifa.ifa_prefixlen = static_cast<uint8_t>(s.prefix);
  ifa.ifa_scope = s.scope;
  ifa.ifa_index = index;
  m.put(ifa);
  m.attr(IFA_LOCAL, s.ip.bytes, s.ip.len());
  m.attr(IFA_ADDRESS, s.ip.bytes, s.ip.len());
  // DAD is IPv6 only; IPv4 ignores the flag, so it is sent only for IPv6.
  if (add && s.nodad && s.ip.family == AF_INET6) m.u32(IFA_FLAGS, IFA_F_NODAD);
  return m;
}

bool parseAddr(const nlmsghdr* r, Addr& d) {
  Attrs at;
  const ifaddrmsg* x = fixedHeaderOf<ifaddrmsg>(r, RTM_NEWADDR, at);
  if (!x || (x->ifa_family != AF_INET && x->ifa_family != AF_INET6)) return false;
  // IFA_LOCAL is the interface's own address; IFA_ADDRESS is the peer on
  // point-to-point links (and the only one given for IPv6).
  const rtattr* ad = at.get(IFA_LOCAL) ? at.get(IFA_LOCAL) : at.get(IFA_ADDRESS);
  size_t need = x->ifa_family == AF_INET ? 4 : 16;
  if (!ad || RTA_PAYLOAD(ad) < need) return false;
  d = Addr{};
  d.index = x->ifa_index;
  d.family = x->ifa_family;
  d.address = formatIp(x->ifa_family, RTA_DATA(ad));
  d.prefix = x->ifa_prefixlen;
  d.scope = x->ifa_scope;
  d.flags = at.has(IFA_FLAGS) ? at.u32(IFA_FLAGS) : x->ifa_flags;
  return true;
}

namespace {

bool addrChange(Handle& h, const AddrSpec& s, bool add, NlError& e) {
  uint32_t index;
  if (!linkIndex(h, s.link, index, e)) return false;
  NlMsg m = buildAddrMsg(s, index, add);
  if (h.sock.request(m, e)) return true;
  e.subject = s.cidr + " dev " + s.link.subject();
  return false;
}

}  // namespace

bool addrAdd(Handle& h, const AddrSpec& spec, NlError& e) { return addrChange(h, spec, true, e); }
bool addrDel(Handle& h, const AddrSpec& spec, NlError& e) { return addrChange(h, spec, false, e); }

bool addrList(Handle& h, const ListFilter& f, std::vector<Addr>& out, NlError& e) {
  uint32_t index;
  if (!filterIndex(h, f, index, e)) return false;
  NlMsg m = buildAddrDumpMsg(f.family);
  auto keep = [&](const Addr& d) { return (!index || d.index == index) && (!f.family || d.family == f.family); };
  return dumpParsed(h, m, parseAddr, keep, out, e);
}

}  // namespace np
