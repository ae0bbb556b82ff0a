// The one place that writes nftables syntax: rules, chains, sets and maps of
// the typed model (./model.ts) become nft commands. Every identifier, name,
// number and address is checked again here and every string is reduced to a
// safe alphabet, so what this module emits is made of valid tokens only; a
// value that does not fit throws NftModelError before any command exists.
import { createHash } from 'node:crypto';
import {
  checkElem,
  checkIdent,
  checkIfname,
  checkIfnamePrefix,
  checkLogGroup,
  checkMark,
  checkNet,
  checkPort,
  checkProto,
  COMMENT_MAX_BYTES,
  ICMPV6_TYPES,
  LOG_PREFIX_MAX_BYTES,
  NftModelError,
  safeText,
  type BaseChain,
  type Chain,
  type ElemType,
  type ElemValue,
  type Match,
  type NftMap,
  type NftSet,
  type Rule,
  type Stmt,
  type Verdict,
} from './model.js';

const PROTO_NAMES: Record<number, string> = {
  1: 'icmp',
  6: 'tcp',
  17: 'udp',
  58: 'ipv6-icmp',
  132: 'sctp',
  136: 'udplite',
};
const CT_STATES = new Set(['established', 'related', 'new', 'invalid', 'untracked']);

/** `inet <table>`. */
export function tableRef(table: string): string {
  return `inet ${checkIdent(table, 'table')}`;
}

function comment(text: string): string {
  return `comment "${safeText(text, COMMENT_MAX_BYTES)}"`;
}

const hex = (n: number) => '0x' + checkMark(n).toString(16).padStart(8, '0');
const ip = (f: 4 | 6) => (f === 6 ? 'ip6' : 'ip');
const neq = (neg?: boolean) => (neg ? '!= ' : '');
const quoteIf = (n: string) => `"${checkIfname(n)}"`;

function proto(n: number): string {
  return PROTO_NAMES[checkProto(n)] ?? String(n);
}

function portRanges(rs: Array<[number, number]>): string {
  if (rs.length === 0) throw new NftModelError('a port match needs at least one port');
  const one = ([a, b]: [number, number]) =>
    checkPort(a) === checkPort(b) ? `${a}` : a < b ? `${a}-${b}` : bad(`port range ${a}-${b}`);
  const items = [...new Set(rs.map(one))];
  return `{ ${items.join(', ')} }`;
}

function bad(what: string): never {
  throw new NftModelError(`${what} cannot be written`);
}

function renderMatch(x: Match): string {
  switch (x.m) {
    case 'l4proto':
      return `meta l4proto ${neq(x.neg)}${proto(x.proto)}`;
    case 'nfproto':
      return `meta nfproto ipv${x.family === 6 ? 6 : 4}`;
    case 'ports':
      return `th ${x.dir === 's' ? 's' : 'd'}port ${neq(x.neg)}${portRanges(x.ranges)}`;
    case 'nets': {
      if (x.nets.length === 0) throw new NftModelError('a network match needs at least one network');
      return `${ip(x.family)} ${x.dir}addr ${neq(x.neg)}{ ${x.nets.map((n) => checkNet(n, x.family)).join(', ')} }`;
    }
    case 'addrSet':
      return `${ip(x.family)} ${x.dir}addr ${neq(x.neg)}@${checkIdent(x.set, 'set')}`;
    case 'addrProtoPortSet':
      return `${ip(x.family)} ${x.dir}addr . meta l4proto . th ${x.dir}port ${neq(x.neg)}@${checkIdent(x.set, 'set')}`;
    case 'markAny':
      return `meta mark and ${hex(x.mask)} != 0`;
    case 'ifname': {
      const name = x.prefix ? `"${checkIfnamePrefix(x.name)}*"` : quoteIf(x.name);
      return `${x.dir === 'in' ? 'iifname' : 'oifname'} ${neq(x.neg)}${name}`;
    }
    case 'ifnameSet':
      return `${x.dir === 'in' ? 'iifname' : 'oifname'} ${neq(x.neg)}@${checkIdent(x.set, 'set')}`;
    case 'ifnameAddrSet':
      return `iifname . ${ip(x.family)} saddr ${neq(x.neg)}@${checkIdent(x.set, 'set')}`;
    case 'ifnameMacSet':
      return `iifname . ether saddr ${neq(x.neg)}@${checkIdent(x.set, 'set')}`;
    case 'ctState': {
      if (x.states.length === 0 || x.states.some((s) => !CT_STATES.has(s))) bad(`ct state ${x.states.join(',')}`);
      return `ct state ${x.states.join(',')}`;
    }
    case 'tcpNotSyn':
      return 'tcp flags & (fin | syn | rst | ack) != syn';
    case 'icmpv6Type': {
      const known = ICMPV6_TYPES as readonly string[];
      if (x.types.length === 0 || x.types.some((t) => !known.includes(t))) bad(`icmpv6 type ${x.types.join(',')}`);
      return `icmpv6 type { ${x.types.join(', ')} }`;
    }
    case 'ctStatusDnat':
      return 'ct status dnat';
    case 'addrPairSet':
      return `${ip(x.family)} saddr . ${ip(x.family)} daddr ${neq(x.neg)}@${checkIdent(x.set, 'set')}`;
  }
}

function renderStmt(s: Stmt): string {
  switch (s.s) {
    case 'counter':
      return 'counter';
    case 'log': {
      const group = s.group === undefined ? '' : ` group ${checkLogGroup(s.group)}`;
      return `log prefix "${safeText(s.prefix, LOG_PREFIX_MAX_BYTES)}"${group}`;
    }
    case 'limitPerIf': {
      const key = s.key === 'oifname' ? 'oifname' : 'iifname';
      const rate = checkRate(s.rate);
      const burst = checkRate(s.burst);
      return `update @${checkIdent(s.set, 'set')} { ${key} limit rate ${rate}/second burst ${burst} packets }`;
    }
    case 'markSet':
      return `meta mark set meta mark ${s.op === 'and' ? 'and' : 'or'} ${hex(s.value)}`;
    case 'natMap': {
      const f = ip(s.family);
      return (
        `${s.nat === 'snat' ? 'snat' : 'dnat'} ${f} to ${f} ${s.key === 's' ? 's' : 'd'}addr map @` +
        `${checkIdent(s.map, 'map')}`
      );
    }
    case 'notrack':
      return 'notrack';
  }
}

function checkRate(n: number): number {
  if (!Number.isInteger(n) || n < 1 || n > 1_000_000) bad(`rate ${n}`);
  return n;
}

function renderVerdict(v: Verdict): string {
  switch (v.v) {
    case 'accept':
    case 'drop':
    case 'return':
      return v.v;
    case 'jump':
    case 'goto':
      return `${v.v} ${checkIdent(v.chain, 'chain')}`;
    case 'vmap':
      return `${v.dir === 'in' ? 'iifname' : 'oifname'} vmap @${checkIdent(v.map, 'map')}`;
  }
}

/** A rule's text, as it follows `add rule <table> <chain>`. */
export function renderRule(r: Rule): string {
  const parts = r.matches.map(renderMatch);
  for (const s of r.stmts ?? []) parts.push(renderStmt(s));
  if (r.verdict) parts.push(renderVerdict(r.verdict));
  if (parts.length === 0) throw new NftModelError('a rule needs a match, a statement or a verdict');
  if (r.comment !== undefined) parts.push(comment(r.comment));
  return parts.join(' ');
}

/** The commands creating a regular chain with its rules (the chain must not exist). */
export function chainCommands(T: string, name: string, c: Chain): string[] {
  checkIdent(name, 'chain');
  return [`add chain ${T} ${name} { ${comment(c.comment)}; }`, ...ruleCommands(T, name, c.rules)];
}

export function ruleCommands(T: string, name: string, rules: Rule[]): string[] {
  return rules.map((r) => `add rule ${T} ${name} ${renderRule(r)}`);
}

export function baseChainCommands(T: string, c: BaseChain): string[] {
  const prio = typeof c.priority === 'number' ? String(Math.trunc(c.priority)) : c.priority;
  if (!['raw', 'mangle', 'filter'].includes(prio) && !/^-?\d{1,4}$/.test(prio)) bad(`priority ${prio}`);
  const policy = c.policy === 'drop' ? 'drop' : 'accept';
  const type = c.type === 'nat' ? 'nat' : 'filter';
  const spec = `type ${type} hook ${c.hook} priority ${prio}; policy ${policy}; ${comment(c.comment)};`;
  const head = `add chain ${T} ${checkIdent(c.name, 'chain')} { ${spec} }`;
  return [head, ...ruleCommands(T, c.name, c.rules)];
}

function typeText(t: ElemType[]): string {
  return t.join(' . ');
}

export function setCommand(T: string, name: string, s: NftSet): string {
  let flags = s.interval ? ' flags interval;' : '';
  if (s.dynamic) {
    const { timeoutSeconds: t, size } = s.dynamic;
    if (!Number.isInteger(t) || t < 1 || t > 86400 || !Number.isInteger(size) || size < 1 || size > 1 << 20) {
      bad(`dynamic set timeout ${t} size ${size}`);
    }
    flags = ` flags dynamic,timeout; timeout ${t}s; size ${size};`;
  }
  const c = s.comment !== undefined ? ` ${comment(s.comment)};` : '';
  return `add set ${T} ${checkIdent(name, 'set')} { type ${typeText(s.type)};${flags}${c} }`;
}

export function mapCommand(T: string, name: string, m: NftMap): string {
  const data = m.data === 'verdict' ? 'verdict' : m.data;
  return `add map ${T} ${checkIdent(name, 'map')} { type ${typeText(m.key)} : ${data}; ${comment(m.comment)}; }`;
}

function elemText(type: ElemType[], values: ElemValue[]): string {
  if (values.length !== type.length) bad(`element of ${values.length} fields for ${typeText(type)}`);
  return values
    .map((v, i) => {
      const t = type[i]!;
      const c = checkElem(t, v);
      if (t === 'ifname') return `"${c}"`;
      if (t === 'inet_proto') return proto(c as number);
      return String(c);
    })
    .join(' . ');
}

/** `add`/`delete element` commands, at most 500 elements a command. */
export function elementCommands(
  T: string,
  kind: 'add' | 'delete',
  name: string,
  type: ElemType[],
  items: Iterable<ElemValue[]>,
): string[] {
  checkIdent(name, 'set');
  return batched(
    T,
    kind,
    name,
    [...items].map((v) => elemText(type, v)),
  );
}

/** Data map entries: key → value (or only the key, for a delete). */
export function dataMapElementCommands(
  T: string,
  kind: 'add' | 'delete',
  name: string,
  key: ElemType[],
  data: ElemType,
  items: Iterable<[ElemValue[], ElemValue | undefined]>,
): string[] {
  checkIdent(name, 'map');
  const text = ([k, v]: [ElemValue[], ElemValue | undefined]) =>
    v === undefined ? elemText(key, k) : `${elemText(key, k)} : ${elemText([data], [v])}`;
  return batched(T, kind, name, [...items].map(text));
}

/** Verdict map entries: key → `jump <chain>` (or only the key, for a delete). */
export function mapElementCommands(
  T: string,
  kind: 'add' | 'delete',
  name: string,
  key: ElemType[],
  items: Iterable<[ElemValue[], string | undefined]>,
): string[] {
  checkIdent(name, 'map');
  const text = ([k, chain]: [ElemValue[], string | undefined]) =>
    chain === undefined ? elemText(key, k) : `${elemText(key, k)} : jump ${checkIdent(chain, 'chain')}`;
  const texts = [...items].map(text);
  return batched(T, kind, name, texts);
}

function batched(T: string, kind: 'add' | 'delete', name: string, texts: string[]): string[] {
  const out: string[] = [];
  for (let i = 0; i < texts.length; i += 500) {
    out.push(`${kind} element ${T} ${name} { ${texts.slice(i, i + 500).join(', ')} }`);
  }
  return out;
}

const chainHashes = new WeakMap<Chain, string>();
/** A chain's content hash (its comment and rendered rules); cached per chain object. */
export function chainHash(c: Chain): string {
  let h = chainHashes.get(c);
  if (!h) {
    const sha = createHash('sha1').update(safeText(c.comment)).update('\n');
    for (const r of c.rules) sha.update(renderRule(r)).update('\n');
    h = sha.digest('hex');
    chainHashes.set(c, h);
  }
  return h;
}
