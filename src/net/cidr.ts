// The bottom layer for addresses: parsing, formatting and arithmetic of IPv4
// and IPv6 addresses and prefixes on bigints, used by every other layer (no
// node:net isIP, no second parser elsewhere). No I/O. One strict parser
// (parseCidr / tryParseCidr) with a lenient mode ({strict:false}) for stored or
// user data that may carry host bits. Errors are CidrError (a plain Error subclass) with a message that names the
// offending text; callers wrap them with the field name they came from.

export type Family = 4 | 6;

export interface IP {
  family: Family;
  value: bigint;
}

export interface Cidr {
  family: Family;
  /** The network address (host bits zero). */
  base: bigint;
  prefix: number;
}

export class CidrError extends Error {
  override name = 'CidrError';
}

function bitsOf(family: Family): number {
  return family === 4 ? 32 : 128;
}

const V4_MAX = (1n << 32n) - 1n;
const V6_MAX = (1n << 128n) - 1n;

function parseV4(s: string): bigint | undefined {
  const parts = s.split('.');
  if (parts.length !== 4) return undefined;
  let v = 0n;
  for (const p of parts) {
    // Leading zeros are refused: inet_aton reads "010" as octal 8, so such text
    // means different addresses to different tools.
    if (!/^(0|[1-9][0-9]{0,2})$/.test(p)) return undefined;
    const n = Number(p);
    if (n > 255) return undefined;
    v = (v << 8n) | BigInt(n);
  }
  return v;
}

function parseV6(s: string): bigint | undefined {
  if (s.includes('%')) return undefined; // zone IDs have no meaning in a pool
  let head = s;
  let tailV4: bigint | undefined;
  const lastColon = s.lastIndexOf(':');
  if (lastColon >= 0 && s.slice(lastColon + 1).includes('.')) {
    tailV4 = parseV4(s.slice(lastColon + 1));
    if (tailV4 === undefined) return undefined;
    // keep the ':' so "::1.2.3.4" leaves "::" behind
    head = s.slice(0, lastColon + 1);
    if (head.endsWith('::')) {
      // "::" directly before the IPv4 part
    } else {
      head = head.slice(0, -1);
    }
  }
  const groupsWanted = tailV4 === undefined ? 8 : 6;
  const dbl = head.indexOf('::');
  if (dbl >= 0 && head.indexOf('::', dbl + 1) >= 0) return undefined;
  const parseGroups = (t: string): bigint[] | undefined => {
    if (t === '') return [];
    const out: bigint[] = [];
    for (const g of t.split(':')) {
      if (!/^[0-9a-fA-F]{1,4}$/.test(g)) return undefined;
      out.push(BigInt('0x' + g));
    }
    return out;
  };
  let groups: bigint[];
  if (dbl >= 0) {
    const left = parseGroups(head.slice(0, dbl));
    const right = parseGroups(head.slice(dbl + 2));
    if (!left || !right) return undefined;
    const fill = groupsWanted - left.length - right.length;
    // RFC 4291 2.2: "::" stands for one or more groups of zeros.
    if (fill < 1) return undefined;
    groups = [...left, ...Array<bigint>(fill).fill(0n), ...right];
  } else {
    const g = parseGroups(head);
    if (!g) return undefined;
    groups = g;
  }
  if (groups.length !== groupsWanted) return undefined;
  let v = 0n;
  for (const g of groups) v = (v << 16n) | g;
  if (tailV4 !== undefined) v = (v << 32n) | tailV4;
  return v;
}

/** Parse an IPv4 or IPv6 address (no prefix). Returns undefined when it is neither. */
export function tryParseIP(s: string): IP | undefined {
  const t = s.trim();
  if (t.includes(':')) {
    const v = parseV6(t);
    return v === undefined ? undefined : { family: 6, value: v };
  }
  const v = parseV4(t);
  return v === undefined ? undefined : { family: 4, value: v };
}

export function parseIP(s: string): IP {
  const ip = tryParseIP(s);
  if (!ip) throw new CidrError(`'${s}' is not an IPv4 or IPv6 address`);
  return ip;
}

function formatV4(v: bigint): string {
  return [24n, 16n, 8n, 0n].map((sh) => String((v >> sh) & 0xffn)).join('.');
}

/** RFC 5952 text: lower case, no leading zeros, the longest run (first on a tie) of 2+ zero groups as "::". */
function formatV6(v: bigint): string {
  const groups: number[] = [];
  for (let i = 7; i >= 0; i--) groups.push(Number((v >> BigInt(i * 16)) & 0xffffn));
  // RFC 5952 section 5: IPv4-mapped addresses keep the dotted quad.
  if (groups.slice(0, 5).every((g) => g === 0) && groups[5] === 0xffff) {
    return `::ffff:${formatV4(v & V4_MAX)}`;
  }
  let bestStart = -1;
  let bestLen = 0;
  for (let i = 0; i < 8; ) {
    if (groups[i] !== 0) {
      i++;
      continue;
    }
    let j = i;
    while (j < 8 && groups[j] === 0) j++;
    if (j - i > bestLen) {
      bestStart = i;
      bestLen = j - i;
    }
    i = j;
  }
  const hex = (gs: number[]) => gs.map((g) => g.toString(16)).join(':');
  if (bestLen < 2) return hex(groups);
  return `${hex(groups.slice(0, bestStart))}::${hex(groups.slice(bestStart + bestLen))}`;
}

export function formatIP(ip: IP): string;
export function formatIP(family: Family, value: bigint): string;
export function formatIP(a: IP | Family, b?: bigint): string {
  const [family, value] = typeof a === 'object' ? [a.family, a.value] : [a, b!];
  return family === 4 ? formatV4(value) : formatV6(value);
}

/** Canonical text of an address string (throws CidrError when invalid). */
export function canonicalIP(s: string): string {
  return formatIP(parseIP(s));
}

function hostMask(family: Family, prefix: number): bigint {
  return (1n << BigInt(bitsOf(family) - prefix)) - 1n;
}

function maskOf(family: Family, prefix: number): bigint {
  return (family === 4 ? V4_MAX : V6_MAX) ^ hostMask(family, prefix);
}

/**
 * Parse `addr/len`. Strict by default: host bits must be zero, and the error
 * names the masked form ("did you mean 10.0.0.0/24?"). With `{strict:false}`
 * the host bits are cleared silently.
 */
export function parseCidr(s: string, opts: { strict?: boolean } = {}): Cidr {
  const strict = opts.strict ?? true;
  const t = s.trim();
  const slash = t.indexOf('/');
  if (slash < 0) throw new CidrError(`'${s}' is not a CIDR: expected <address>/<prefix length>, e.g. 10.0.0.0/16`);
  const ip = tryParseIP(t.slice(0, slash));
  if (!ip) throw new CidrError(`'${s}' is not a CIDR: '${t.slice(0, slash)}' is not an IPv4 or IPv6 address`);
  const lenText = t.slice(slash + 1);
  const max = bitsOf(ip.family);
  if (!/^(0|[1-9][0-9]{0,2})$/.test(lenText) || Number(lenText) > max) {
    throw new CidrError(`'${s}' is not a CIDR: prefix length '${lenText}' must be an integer from 0 to ${max}`);
  }
  const prefix = Number(lenText);
  const base = ip.value & maskOf(ip.family, prefix);
  if (strict && base !== ip.value) {
    throw new CidrError(`'${s}' has host bits set: the network is ${formatCidr({ family: ip.family, base, prefix })}`);
  }
  return { family: ip.family, base, prefix };
}

/**
 * parseCidr, or undefined when the text is not one: the one "parse or nothing"
 * for every caller. Strict by default (host bits set = not a CIDR); with
 * `{strict:false}` host bits are cleared (stored data that may predate
 * validation, annotations that name a pool by a non-canonical CIDR).
 */
export function tryParseCidr(s: string, opts: { strict?: boolean } = {}): Cidr | undefined {
  try {
    return parseCidr(s, opts);
  } catch (e) {
    if (e instanceof CidrError) return undefined;
    throw e;
  }
}

/** 4 or 6 for an address text (no prefix), 0 when it is neither (node:net isIP's contract). */
export function ipFamily(s: string): 0 | Family {
  return tryParseIP(s)?.family ?? 0;
}

/**
 * `addr/len` as an interface address, host bits allowed (`10.0.0.5/24`, as in
 * CNI results and pod addresses); undefined when it is not one.
 */
export function tryParseIPPrefix(s: string): { ip: IP; prefix: number } | undefined {
  const slash = s.indexOf('/');
  if (slash < 0) return undefined;
  const ip = tryParseIP(s.slice(0, slash));
  const lenText = s.slice(slash + 1).trim();
  if (!ip || !/^(0|[1-9][0-9]{0,2})$/.test(lenText) || Number(lenText) > bitsOf(ip.family)) return undefined;
  return { ip, prefix: Number(lenText) };
}

export function formatCidr(c: Cidr): string {
  return `${formatIP(c.family, c.base)}/${c.prefix}`;
}

/** Number of addresses in the prefix. */
export function cidrSize(c: Cidr): bigint {
  return 1n << BigInt(bitsOf(c.family) - c.prefix);
}

export function lastAddress(c: Cidr): bigint {
  return c.base + cidrSize(c) - 1n;
}

export function containsIP(c: Cidr, ip: IP): boolean {
  return c.family === ip.family && (ip.value & maskOf(c.family, c.prefix)) === c.base;
}

/** True when `inner` lies entirely inside `outer` (equal counts as inside). */
export function containsCidr(outer: Cidr, inner: Cidr): boolean {
  return (
    outer.family === inner.family &&
    inner.prefix >= outer.prefix &&
    (inner.base & maskOf(outer.family, outer.prefix)) === outer.base
  );
}

export function overlaps(a: Cidr, b: Cidr): boolean {
  return containsCidr(a, b) || containsCidr(b, a);
}

export function cidrEquals(a: Cidr, b: Cidr): boolean {
  return a.family === b.family && a.prefix === b.prefix && a.base === b.base;
}

/** The n-th address (0-based) of the prefix. */
export function nthAddress(c: Cidr, n: number | bigint): IP {
  const i = BigInt(n);
  if (i < 0n || i >= cidrSize(c))
    throw new CidrError(`address index ${i} is outside ${formatCidr(c)} (${cidrSize(c)} addresses)`);
  return { family: c.family, value: c.base + i };
}

/** Ordinal (0-based offset) of `ip` inside `c`; throws when outside. */
export function ordinalOf(c: Cidr, ip: IP): number {
  if (!containsIP(c, ip)) throw new CidrError(`${formatIP(ip)} is not inside ${formatCidr(c)}`);
  return Number(ip.value - c.base);
}

/** The enclosing prefix of `ip` with the given length (the block an address falls in). */
export function enclosing(ip: IP, prefix: number): Cidr {
  return { family: ip.family, base: ip.value & maskOf(ip.family, prefix), prefix };
}

/** Number of blocks of length `blockSize` in `pool`. */
export function blockCount(pool: Cidr, blockSize: number): bigint {
  checkBlockSize(pool, blockSize);
  return 1n << BigInt(blockSize - pool.prefix);
}

function checkBlockSize(pool: Cidr, blockSize: number): void {
  const max = bitsOf(pool.family);
  if (!Number.isInteger(blockSize) || blockSize < 0 || blockSize > max) {
    throw new CidrError(`block size ${blockSize} is not a valid IPv${pool.family} prefix length (0-${max})`);
  }
  if (blockSize < pool.prefix) {
    throw new CidrError(
      `pool ${formatCidr(pool)} is smaller than one /${blockSize} block: use a block size of at least ` +
        `${pool.prefix}, or a larger pool`,
    );
  }
}

/** The i-th block of the pool. */
export function blockAt(pool: Cidr, blockSize: number, i: bigint): Cidr {
  const n = blockCount(pool, blockSize);
  if (i < 0n || i >= n)
    throw new CidrError(`block index ${i} is outside ${formatCidr(pool)} (${n} blocks of /${blockSize})`);
  return { family: pool.family, base: pool.base + (i << BigInt(bitsOf(pool.family) - blockSize)), prefix: blockSize };
}

/**
 * The pool's blocks in address order, lazily: an IPv6 /64 pool holds 2^58
 * blocks of /122, so callers stop as soon as they found what they need.
 */
export function* splitBlocks(pool: Cidr, blockSize: number): Generator<Cidr> {
  const n = blockCount(pool, blockSize);
  const step = 1n << BigInt(bitsOf(pool.family) - blockSize);
  let base = pool.base;
  for (let i = 0n; i < n; i++, base += step) yield { family: pool.family, base, prefix: blockSize };
}

/**
 * An address as its own one-address prefix (`10.0.0.5/32`, `fd00::5/128`): how
 * a pod's address sits on its interface and in its endpoint (the node reaches
 * each pod by its per-pod /32 or /128 route, docs/networking.md). Text in, text out.
 */
export function hostPrefix(ip: string): string {
  return ip.includes(':') ? `${ip}/128` : `${ip}/32`;
}

/** The address part of `addr/len` (the text unchanged when it has no length). */
export function addressOf(s: string): string {
  const slash = s.indexOf('/');
  return slash < 0 ? s : s.slice(0, slash);
}
