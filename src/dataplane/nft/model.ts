// A typed model of nftables content: tables, chains, rules (typed matches,
// statements, a verdict, a comment), sets and verdict maps with typed
// elements. Producers (the policy compiler, the agent's base ruleset) build
// these values; src/dataplane/nft/render.ts is the only code that turns them
// into nftables syntax, and it refuses any value that cannot be written as
// valid tokens. Validation lives here so a producer can refuse a bad object
// (an endpoint with an interface name nft cannot hold) before it reaches a
// batch: one bad object then costs its own rules, never the node's batch.
import { formatCidr, formatIP, parseCidr } from '../../net/cidr.js';

/** A value nft cannot hold as a token: refused before rendering. */
export class NftModelError extends Error {
  override name = 'NftModelError';
}

/**
 * Identifiers (tables, chains, sets, maps): a closed alphabet, bounded. nft's
 * scanner reads [A-Za-z][A-Za-z0-9/_.-]* as one identifier; '/' is left out
 * (it reads as a prefix length after an address-like token).
 */
const IDENT = /^[A-Za-z][A-Za-z0-9_.-]{0,62}$/;

export function checkIdent(name: string, what = 'name'): string {
  if (!IDENT.test(name)) {
    throw new NftModelError(
      `${what} ${JSON.stringify(name)} is not an nftables identifier ` +
        '(a letter, then up to 62 letters, digits, "_", "." or "-")',
    );
  }
  return name;
}

/**
 * Interface names as the kernel takes them (1-15 bytes, not "." or "..", no
 * '/', ':' or whitespace), further limited to letters, digits, '_', '.' and
 * '-' so that the name can also be part of a chain name. Host veths are
 * always of that form; anything else is refused.
 */
const IFNAME = /^[A-Za-z0-9_.-]{1,15}$/;

export function ifnameProblem(name: unknown): string | undefined {
  if (typeof name !== 'string') return 'is not a string';
  if (name === '.' || name === '..') return 'is "." or ".." (the kernel refuses it)';
  if (!IFNAME.test(name)) return 'must be 1-15 letters, digits, "_", "." or "-"';
  return undefined;
}

export function checkIfname(name: string): string {
  const p = ifnameProblem(name);
  if (p) throw new NftModelError(`interface name ${JSON.stringify(name)} ${p}`);
  return name;
}

/** A prefix of interface names for a wildcard match (`npi*`): the same alphabet, at most 14 bytes. */
export function checkIfnamePrefix(p: string): string {
  if (!/^[A-Za-z0-9_.-]{1,14}$/.test(p)) {
    throw new NftModelError(`interface name prefix ${JSON.stringify(p)} must be 1-14 letters, digits, "_", "." or "-"`);
  }
  return p;
}

/** nft holds a comment of at most 128 bytes (with its terminating NUL). */
export const COMMENT_MAX_BYTES = 127;
/** The kernel's log prefix holds 128 bytes with the NUL. */
export const LOG_PREFIX_MAX_BYTES = 127;

/**
 * Free text made safe for a quoted nft string: printable ASCII except the
 * quote, the backslash and '$' (nft expands variables in log prefixes); any
 * other byte becomes '?'; cut to `max` bytes (ASCII: one byte a character).
 */
export function safeText(s: string, max = COMMENT_MAX_BYTES): string {
  let t = '';
  for (const ch of s) {
    const c = ch.codePointAt(0)!;
    t += c >= 0x20 && c <= 0x7e && ch !== '"' && ch !== '\\' && ch !== '$' ? ch : '?';
    if (t.length >= max) break;
  }
  return t.slice(0, max);
}

type Family = 4 | 6;
type Dir = 's' | 'd';
type CtState = 'established' | 'related' | 'new' | 'invalid' | 'untracked';
export const ICMPV6_TYPES = [
  'nd-neighbor-solicit',
  'nd-neighbor-advert',
  'nd-router-solicit',
  'nd-router-advert',
  'nd-redirect',
] as const;
export type Icmpv6Type = (typeof ICMPV6_TYPES)[number];

/** A canonical address (no prefix length) of the given family, or a refusal. */
export function checkAddr(a: string, family?: Family): string {
  let c;
  try {
    c = parseCidr(a.includes('/') ? a : `${a}/${a.includes(':') ? 128 : 32}`, { strict: true });
  } catch (e) {
    throw new NftModelError(`${JSON.stringify(a)} is not an IP address: ${(e as Error).message}`);
  }
  if (c.prefix !== (c.family === 6 ? 128 : 32)) {
    throw new NftModelError(`${JSON.stringify(a)} is a network, not an address`);
  }
  if (family && c.family !== family) throw new NftModelError(`${a} is not an IPv${family} address`);
  return formatIP(c.family, c.base);
}

/** A canonical network or address; a host prefix is written as the bare address. */
export function checkNet(n: string, family?: Family): string {
  let c;
  try {
    c = parseCidr(n.includes('/') ? n : `${n}/${n.includes(':') ? 128 : 32}`, { strict: false });
  } catch (e) {
    throw new NftModelError(`${JSON.stringify(n)} is not a network: ${(e as Error).message}`);
  }
  if (family && c.family !== family) throw new NftModelError(`${n} is not an IPv${family} network`);
  return c.prefix === (c.family === 6 ? 128 : 32) ? formatIP(c.family, c.base) : formatCidr(c);
}

export function checkMac(m: string): string {
  if (!/^[0-9a-fA-F]{2}(:[0-9a-fA-F]{2}){5}$/.test(m)) {
    throw new NftModelError(`${JSON.stringify(m)} is not a MAC address`);
  }
  return m.toLowerCase();
}

function checkInt(n: number, lo: number, hi: number, what: string): number {
  if (!Number.isInteger(n) || n < lo || n > hi) {
    throw new NftModelError(`${what} ${n} is not an integer in ${lo}..${hi}`);
  }
  return n;
}
export const checkPort = (n: number) => checkInt(n, 0, 65535, 'port');
export const checkProto = (n: number) => checkInt(n, 0, 255, 'protocol');
export const checkMark = (n: number) => checkInt(n, 0, 0xffffffff, 'mark');

export type Match =
  | { m: 'l4proto'; proto: number; neg?: boolean }
  | { m: 'nfproto'; family: Family }
  | { m: 'ports'; dir: Dir; ranges: Array<[number, number]>; neg?: boolean }
  | { m: 'nets'; family: Family; dir: Dir; nets: string[]; neg?: boolean }
  /** Address in a named set of addresses. */
  | { m: 'addrSet'; family: Family; dir: Dir; set: string; neg?: boolean }
  /** address . protocol . port in a named set of such tuples. */
  | { m: 'addrProtoPortSet'; family: Family; dir: Dir; set: string; neg?: boolean }
  /** The packet mark has one of `mask`'s bits. */
  | { m: 'markAny'; mask: number }
  /** Interface name, exact or by prefix (`npi*`). */
  | { m: 'ifname'; dir: 'in' | 'out'; name: string; prefix?: boolean; neg?: boolean }
  | { m: 'ifnameSet'; dir: 'in' | 'out'; set: string; neg?: boolean }
  /** The input interface with the source address (or MAC), in a set of such pairs. */
  | { m: 'ifnameAddrSet'; family: Family; set: string; neg?: boolean }
  | { m: 'ifnameMacSet'; set: string; neg?: boolean }
  | { m: 'ctState'; states: CtState[] }
  /** A TCP packet whose fin/syn/rst/ack flags are not a bare SYN (not the opening of a connection). */
  | { m: 'tcpNotSyn' }
  | { m: 'icmpv6Type'; types: Icmpv6Type[] }
  /** The connection was destination-translated (`ct status dnat`). */
  | { m: 'ctStatusDnat' }
  /** source address . destination address in a named set of such pairs. */
  | { m: 'addrPairSet'; family: Family; set: string; neg?: boolean };

export type Stmt =
  | { s: 'counter' }
  /** A log line; with `group`, to that NFLOG (nfnetlink_log) group instead of the kernel log. */
  | { s: 'log'; prefix: string; group?: number }
  | { s: 'markSet'; op: 'and' | 'or'; value: number }
  /** Address translation to the value of the packet's source/destination address in a data map (nat chains). */
  | { s: 'natMap'; nat: 'dnat' | 'snat'; family: Family; key: Dir; map: string }
  /**
   * A per-interface rate limit through a dynamic set of interface names (`update @set { iifname limit
   * rate R/second burst B packets }`): the rest of the rule runs only while that interface is under it.
   */
  | { s: 'limitPerIf'; set: string; key: 'iifname' | 'oifname'; rate: number; burst: number }
  /** No conntrack entry for this packet (a raw-priority chain only). */
  | { s: 'notrack' };

/** The NFLOG group of a log statement (nfnetlink_log takes a 16-bit group). */
export const checkLogGroup = (n: number) => checkInt(n, 0, 65535, 'log group');

export type Verdict =
  | { v: 'accept' | 'drop' | 'return' }
  | { v: 'jump' | 'goto'; chain: string }
  /** The verdict of the interface's entry in a verdict map (no entry: go on). */
  | { v: 'vmap'; dir: 'in' | 'out'; map: string };

export interface Rule {
  matches: Match[];
  stmts?: Stmt[];
  verdict?: Verdict;
  comment?: string;
}

/** Who an object belongs to (for comments, and to report the object a refused batch named). */
export interface Owner {
  kind:
    | 'Endpoint'
    | 'NetworkPolicy'
    | 'GlobalNetworkPolicy'
    | 'Profile'
    | 'Set'
    | 'Base'
    | 'HostEndpoint'
    | 'HostDispatch';
  namespace?: string;
  name: string;
  /** The endpoint's identity (container ID) where known. */
  id?: string;
  /** The endpoint's pod, where known. */
  pod?: string;
}

export function ownerId(o: Owner): string {
  return `${o.kind}/${o.namespace ?? ''}/${o.name}`;
}

export interface Chain {
  comment: string;
  rules: Rule[];
  owner: Owner;
}

export interface BaseChain {
  name: string;
  /** The chain type (default filter); nat chains see the first packet of each connection only. */
  type?: 'filter' | 'nat';
  hook: 'prerouting' | 'input' | 'forward' | 'output' | 'postrouting';
  /** A number, or the standard name (filter = 0, raw = -300, mangle = -150). */
  priority: 'raw' | 'mangle' | 'filter' | number;
  policy: 'accept' | 'drop';
  comment: string;
  rules: Rule[];
}

export type ElemType = 'ifname' | 'ipv4_addr' | 'ipv6_addr' | 'inet_proto' | 'inet_service' | 'ether_addr';
export type ElemValue = string | number;

export interface NftSet {
  /** The element's fields (one, or a concatenation). */
  type: ElemType[];
  interval?: boolean;
  comment?: string;
  /** Elements by their key (elemKey of the values). */
  elements: Map<string, ElemValue[]>;
  /** Whose it is (a set shared by several policies: the set itself). */
  owner?: Owner;
  /** Filled by rules (`update @set`), not by the agent: entries expire after `timeoutSeconds`; at most `size`. */
  dynamic?: { timeoutSeconds: number; size: number };
}

export interface NftMap {
  key: ElemType[];
  /** `verdict`, or the data type of a data map. */
  data: 'verdict' | ElemType;
  comment: string;
}

/** The key of an element (its fields joined; no field holds a NUL). */
export function elemKey(values: ElemValue[]): string {
  return values.join('\0');
}

export function checkElem(t: ElemType, v: ElemValue): ElemValue {
  switch (t) {
    case 'ifname':
      return checkIfname(String(v));
    case 'ipv4_addr':
      return checkAddr(String(v), 4);
    case 'ipv6_addr':
      return checkAddr(String(v), 6);
    case 'inet_proto':
      return checkProto(Number(v));
    case 'inet_service':
      return checkPort(Number(v));
    case 'ether_addr':
      return checkMac(String(v));
  }
}
