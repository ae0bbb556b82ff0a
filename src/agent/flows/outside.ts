// An address outside the cluster's endpoints, as a flow names it: `net` with
// name `pvt` for the private and special-use ranges that never route on the
// internet, `pub` for everything else. Documentation ranges (192.0.2.0/24,
// 198.51.100.0/24, 203.0.113.0/24, 2001:db8::/32) are not private: they stand
// for public addresses in examples and tests, and count as `pub`.
import { containsIP, parseCidr, tryParseIP } from '../../net/cidr.js';
import type { FlowEndpoint } from '../../flows/record.js';

const PRIVATE = [
  '10.0.0.0/8', // RFC 1918
  '172.16.0.0/12',
  '192.168.0.0/16',
  '100.64.0.0/10', // RFC 6598 shared address space (carrier-grade NAT)
  '127.0.0.0/8', // loopback
  '169.254.0.0/16', // link-local
  '0.0.0.0/8',
  'fc00::/7', // unique local
  'fe80::/10', // link-local
  '::1/128',
  '::/128',
].map((c) => parseCidr(c));

export function isPrivateAddress(addr: string): boolean {
  const ip = tryParseIP(addr);
  if (!ip) return true;
  // An IPv4-mapped address is its IPv4 address.
  if (ip.family === 6 && ip.value >> 32n === 0xffffn) {
    const v = ip.value;
    return isPrivateAddress(`${(v >> 24n) & 255n}.${(v >> 16n) & 255n}.${(v >> 8n) & 255n}.${v & 255n}`);
  }
  return PRIVATE.some((c) => c.family === ip.family && containsIP(c, ip));
}

export function classifyOutside(addr: string): FlowEndpoint {
  return { type: 'net', namespace: '', name: isPrivateAddress(addr) ? 'pvt' : 'pub', labels: {} };
}
