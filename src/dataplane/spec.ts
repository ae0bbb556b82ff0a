// The dataplane's input: plain data, never Kubernetes types. Validation names
// the field, the value and the fix.
import { formatIP, tryParseIPPrefix } from '../net/cidr.js';

export interface WorkloadSpec {
  /** The container's network namespace: /var/run/netns/<name> or /proc/<pid>/ns/net. */
  netnsPath: string;
  /** Interface name inside the container (CNI_IFNAME), e.g. 'eth0'. */
  ifname: string;
  /** Host-side veth name (see hostVethName). */
  hostIfname: string;
  mtu?: number;
  /** num_rx_queues and num_tx_queues of both veth ends (netconf num_queues, default 1). */
  numQueues: number;
  /** Host veth MAC, e.g. 'ee:ee:ee:ee:ee:ee'. */
  hostMac: string;
  /** Container interface MAC; the kernel picks a random one when absent. */
  containerMac?: string;
  /** The pod's own addresses with the prefix as given: '10.0.0.5/32', 'fd00::5/128'. */
  addresses: string[];
  allowIpForwarding: boolean;
  /** Namespace playing the host (tests, nested setups); default: the caller's namespace. */
  hostNetnsPath?: string;
}

export interface WorkloadState {
  hostIfname: string;
  hostIndex: number;
  containerMac: string;
  containerIndex: number;
  mtu: number;
}

export interface TeardownOptions {
  netnsPath?: string | undefined;
  ifname: string;
  hostIfname: string;
  /** As in WorkloadSpec. */
  hostNetnsPath?: string;
  /**
   * When the netns is gone, leave the host end alone instead of deleting it by
   * name: the caller does not know that it still owns it (a newer sandbox of the
   * same pod reuses the name).
   */
  keepHostEnd?: boolean;
  /**
   * The MAC every host veth of ours carries. When the host end would be
   * deleted by name, it is deleted only if the link itself is a veth with this
   * MAC (and then by its index, so a link renamed in between is not hit);
   * anything else of that name is not ours and is left alone.
   */
  hostMac?: string;
}

interface ParsedAddress {
  cidr: string;
  ip: string;
  family: 4 | 6;
  prefixLen: number;
}

const IFNAME = /^[^/:\s]{1,15}$/;
export const MAC = /^[0-9a-fA-F]{2}(:[0-9a-fA-F]{2}){5}$/;

function bad(fn: string, field: string, value: unknown, must: string): never {
  throw new TypeError(`${fn}: ${field} must be ${must}, got ${JSON.stringify(value) ?? String(value)}`);
}

export function checkIfname(fn: string, field: string, v: unknown): string {
  if (typeof v !== 'string' || !IFNAME.test(v) || v === '.' || v === '..') {
    bad(fn, field, v, "an interface name of 1-15 bytes without '/', ':' or whitespace");
  }
  return v;
}

export function checkPath(fn: string, field: string, v: unknown): string {
  if (typeof v !== 'string' || !v.startsWith('/'))
    bad(fn, field, v, 'an absolute path to a network namespace (e.g. /var/run/netns/<name>)');
  return v;
}

function parseAddress(fn: string, field: string, v: unknown): ParsedAddress {
  const must = "an address with its prefix length, e.g. '10.0.0.5/32' or 'fd00::5/128'";
  if (typeof v !== 'string') bad(fn, field, v, must);
  const p = tryParseIPPrefix(v);
  if (!p) bad(fn, field, v, must);
  // The kernel reports addresses in canonical form (fd00::5, lower case); so do we.
  const canon = formatIP(p.ip);
  return { cidr: `${canon}/${p.prefix}`, ip: canon, family: p.ip.family, prefixLen: p.prefix };
}

export interface ValidSpec extends WorkloadSpec {
  parsed: ParsedAddress[];
}

export function validateSpec(fn: string, spec: unknown): ValidSpec {
  if (typeof spec !== 'object' || spec === null) bad(fn, 'spec', spec, 'a WorkloadSpec object');
  const s = spec as WorkloadSpec;
  checkPath(fn, 'spec.netnsPath', s.netnsPath);
  if (s.hostNetnsPath !== undefined) checkPath(fn, 'spec.hostNetnsPath', s.hostNetnsPath);
  checkIfname(fn, 'spec.ifname', s.ifname);
  checkIfname(fn, 'spec.hostIfname', s.hostIfname);
  if (s.mtu !== undefined && !(Number.isInteger(s.mtu) && s.mtu >= 68 && s.mtu <= 65535))
    bad(fn, 'spec.mtu', s.mtu, 'an integer 68..65535 (or unset for the kernel default)');
  if (!(Number.isInteger(s.numQueues) && s.numQueues >= 1 && s.numQueues <= 4096))
    bad(fn, 'spec.numQueues', s.numQueues, 'an integer 1..4096 (netconf num_queues, default 1)');
  if (typeof s.hostMac !== 'string' || !MAC.test(s.hostMac))
    bad(fn, 'spec.hostMac', s.hostMac, "a MAC address like 'ee:ee:ee:ee:ee:ee'");
  if (s.containerMac !== undefined && (typeof s.containerMac !== 'string' || !MAC.test(s.containerMac))) {
    bad(fn, 'spec.containerMac', s.containerMac, "a MAC address like '02:42:0a:00:00:05' (or unset for a random one)");
  }
  if (typeof s.allowIpForwarding !== 'boolean')
    bad(fn, 'spec.allowIpForwarding', s.allowIpForwarding, 'a boolean (container_settings.allow_ip_forwarding)');
  if (!Array.isArray(s.addresses)) bad(fn, 'spec.addresses', s.addresses, "an array of addresses like ['10.0.0.5/32']");
  const parsed = s.addresses.map((a, i) => parseAddress(fn, `spec.addresses[${i}]`, a));
  return {
    ...s,
    hostMac: s.hostMac.toLowerCase(),
    ...(s.containerMac !== undefined ? { containerMac: s.containerMac.toLowerCase() } : {}),
    parsed,
  };
}
