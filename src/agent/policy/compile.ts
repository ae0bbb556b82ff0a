// Policy compiler: the policy model plus the endpoints the agent knows (local
// ones with their host veth, remote ones for their labels and addresses) →
// the desired content of the `inet netplugin` nftables table, as data
// (chains with rule lines, sets with elements, the interface verdict maps).
// src/agent/policy/nft-script.ts turns two such states into one incremental
// nft transaction, or a whole one for a resync.
//
// Layout (docs/policy.md has a listing):
//   base chains `forward` and `input` (static): a pod interface (host veth
//   prefix) missing from @wl-known is dropped (fail closed until programmed);
//   established/related passes; then `iifname vmap @from-wl` (the pod's egress)
//   and `oifname vmap @to-wl` (its ingress) jump to per-endpoint chains.
//   Endpoint chains `to-<if>`/`from-<if>` jump to the chains of the policies
//   that select it, in order, then to its profiles. A policy chain marks Allow
//   (MARK_ALLOW) or Pass (MARK_PASS) and returns, drops on Deny, logs on Log.
//   Peer selections are named sets of addresses (sel4-*/sel6-*); named ports
//   are sets of address . protocol . port (np4-*/np6-*): a label or port change
//   rewrites set elements, not rules.
import { createHash } from 'node:crypto';
import { parseSelector, type Selector } from '../../selector/index.js';
import { containsCidr, formatCidr, formatIP, parseCidr, type Cidr } from '../../ipam/cidr.js';
import {
  comparePolicies,
  effectiveTypes,
  NAMESPACE_NAME_LABEL,
  NAMESPACE_PROFILE_PREFIX,
  namespaceLabelsFromProfile,
  parsePort,
  protocolNumber,
  type EntityRule,
  type GlobalNetworkPolicySpec,
  type PolicyRule,
  type PolicyType,
  type Port,
  type ProfileSpec,
  type Protocol,
} from '../../model/policy.js';

export const TABLE = 'netplugin';
export const MARK_ALLOW = 0x01000000;
export const MARK_PASS = 0x02000000;
const MARK_CLEAR = (~(MARK_ALLOW | MARK_PASS) >>> 0).toString(16).padStart(8, '0');
const hex = (n: number) => '0x' + n.toString(16).padStart(8, '0');

export interface PolicyInput {
  kind: 'NetworkPolicy' | 'GlobalNetworkPolicy';
  name: string;
  namespace?: string;
  spec: GlobalNetworkPolicySpec;
}

export interface ProfileInput {
  name: string;
  spec: ProfileSpec;
}

export interface EndpointInput {
  /** The workload endpoint's name (the status file key). */
  key: string;
  namespace: string;
  labels: Record<string, string>;
  profiles: string[];
  /** Addresses without prefix length. */
  addrs: string[];
  ports?: Array<{ name: string; protocol: string; port: number }>;
  /** Host veth name; set only for endpoints on this node. */
  interfaceName?: string;
}

export interface SetState {
  type: string;
  flags?: string;
  elements: Set<string>;
}

export interface DesiredState {
  /** Non-base chains: name → rule lines (nft syntax after `add rule inet netplugin <chain>`). */
  chains: Map<string, string[]>;
  sets: Map<string, SetState>;
  /** ifname → verdict, for the two interface maps. */
  toWl: Map<string, string>;
  fromWl: Map<string, string>;
}

export interface CompileInput {
  policies: PolicyInput[];
  profiles: Map<string, ProfileInput>;
  endpoints: EndpointInput[];
}

export function policyId(p: { kind: string; name: string; namespace?: string }): string {
  return p.kind === 'GlobalNetworkPolicy' ? p.name : `${p.namespace}/${p.name}`;
}

function shortHash(s: string): string {
  return createHash('sha1').update(s).digest('hex').slice(0, 12);
}

/** nft comments hold at most 128 bytes; strings are double-quoted, so quotes are dropped. */
export function nftComment(s: string): string {
  let t = s.replace(/["\\\n]/g, '');
  while (Buffer.byteLength(t) > 120) t = t.slice(0, -1);
  return `comment "${t}"`;
}

const selectorCache = new Map<string, Selector>();
function sel(expr: string | undefined): Selector {
  const e = expr === undefined || expr.trim() === '' ? 'all()' : expr;
  let s = selectorCache.get(e);
  if (!s) {
    s = parseSelector(e);
    if (selectorCache.size > 10000) selectorCache.clear();
    selectorCache.set(e, s);
  }
  return s;
}

function familyOf(addr: string): 4 | 6 {
  return addr.includes(':') ? 6 : 4;
}

/** Drop nets covered by another of the list (nft rejects overlapping intervals in one set). */
export function normalizeNets(nets: string[]): string[] {
  const parsed: Cidr[] = [];
  for (const n of nets) {
    const text = n.includes('/') ? n : `${n}/${n.includes(':') ? 128 : 32}`;
    try {
      parsed.push(parseCidr(text, { strict: false }));
    } catch {
      // The model's schema checked the form; a value the parser still refuses is left out.
    }
  }
  const out = new Set<string>();
  parsed.forEach((a, i) => {
    const covered = parsed.some((b, j) => j !== i && containsCidr(b, a) && (!containsCidr(a, b) || j < i));
    if (!covered) out.add(a.prefix === (a.family === 6 ? 128 : 32) ? formatIP(a.family, a.base) : formatCidr(a));
  });
  return [...out].sort();
}

/** How a rule's entity selects endpoints (in which namespace scope), or null when it does not. */
interface Selection {
  /** Namespace the selector is limited to; null: any namespace. */
  scope: string | null;
  selector: string;
  namespaceSelector: string | null;
}

function selectionKey(s: Selection): string {
  return JSON.stringify([s.scope, sel(s.selector).toString(), s.namespaceSelector === null ? null : sel(s.namespaceSelector).toString()]);
}

interface EndpointView extends EndpointInput {
  nsLabels: Record<string, string>;
  allLabels: Record<string, string>;
}

const L4: Record<string, string> = { TCP: 'tcp', UDP: 'udp', SCTP: 'sctp', UDPLite: 'udplite', ICMP: 'icmp', ICMPv6: 'ipv6-icmp' };
function protoText(p: Protocol): string {
  return typeof p === 'number' ? String(p) : (L4[p] ?? String(protocolNumber(p)));
}

export class PolicyCompiler {
  private sets = new Map<string, SetState>();
  private endpoints: EndpointView[] = [];
  private memberCache = new Map<string, EndpointView[]>();

  compile(input: CompileInput): DesiredState {
    this.sets = new Map();
    this.memberCache = new Map();
    const nsLabels = new Map<string, Record<string, string>>();
    const nsLabelsOf = (ns: string) => {
      let l = nsLabels.get(ns);
      if (!l) {
        l = { [NAMESPACE_NAME_LABEL]: ns, ...namespaceLabelsFromProfile(input.profiles.get(NAMESPACE_PROFILE_PREFIX + ns)?.spec.labelsToApply) };
        nsLabels.set(ns, l);
      }
      return l;
    };
    this.endpoints = input.endpoints.map((e) => {
      const inherited: Record<string, string> = {};
      for (const p of e.profiles) Object.assign(inherited, input.profiles.get(p)?.spec.labelsToApply ?? {});
      return { ...e, nsLabels: nsLabelsOf(e.namespace), allLabels: { ...inherited, ...e.labels } };
    });
    const chains = new Map<string, string[]>();
    const policies = [...input.policies].sort((a, b) => comparePolicies({ order: a.spec.order, name: policyId(a) }, { order: b.spec.order, name: policyId(b) }));

    // Policy chains (shared by every endpoint the policy selects).
    const polChain = new Map<PolicyInput, { in?: string; out?: string }>();
    for (const p of policies) {
      const types = effectiveTypes(p.spec);
      const id = policyId(p);
      const names: { in?: string; out?: string } = {};
      const h = shortHash(`${p.kind}/${id}`);
      if (types.includes('Ingress')) {
        names.in = `pol-in-${h}`;
        chains.set(names.in, this.compileRules(p.spec.ingress ?? [], p, `${kindShort(p.kind)} ${id} ingress`));
      }
      if (types.includes('Egress')) {
        names.out = `pol-out-${h}`;
        chains.set(names.out, this.compileRules(p.spec.egress ?? [], p, `${kindShort(p.kind)} ${id} egress`));
      }
      polChain.set(p, names);
    }

    // Profile chains, for the profiles some local endpoint names.
    const profChain = new Map<string, { in: string; out: string }>();
    const toWl = new Map<string, string>();
    const fromWl = new Map<string, string>();
    for (const ep of this.endpoints) {
      if (!ep.interfaceName) continue;
      const selecting = policies.filter((p) => this.selects(p, ep));
      for (const [dir, ifChain] of [['Ingress', `to-${ep.interfaceName}`], ['Egress', `from-${ep.interfaceName}`]] as const) {
        const key = dir === 'Ingress' ? 'in' : 'out';
        const rules: string[] = [`meta mark set meta mark and 0x${MARK_CLEAR}`];
        const pols = selecting.filter((p) => polChain.get(p)![key]);
        if (pols.length > 0) {
          const sub = `${ifChain}-pol`;
          const subRules: string[] = [];
          for (const p of pols) {
            subRules.push(`jump ${polChain.get(p)![key]!}`);
            subRules.push(`meta mark and ${hex(MARK_ALLOW | MARK_PASS)} != 0 return`);
          }
          subRules.push(`counter drop ${nftComment(`${ep.key}: selected by policy, no rule matched`)}`);
          chains.set(sub, subRules);
          rules.push(`jump ${sub}`);
          rules.push(`meta mark and ${hex(MARK_ALLOW)} != 0 return ${nftComment('allowed by policy')}`);
        }
        for (const prof of ep.profiles) {
          const pr = input.profiles.get(prof);
          if (!pr) continue;
          let pc = profChain.get(prof);
          if (!pc) {
            const h = shortHash(`Profile/${prof}`);
            pc = { in: `pro-in-${h}`, out: `pro-out-${h}` };
            chains.set(pc.in, this.compileRules(pr.spec.ingress ?? [], undefined, `profile ${prof} ingress`));
            chains.set(pc.out, this.compileRules(pr.spec.egress ?? [], undefined, `profile ${prof} egress`));
            profChain.set(prof, pc);
          }
          rules.push(`jump ${pc[key]}`);
          rules.push(`meta mark and ${hex(MARK_ALLOW)} != 0 return ${nftComment(`allowed by profile ${prof}`)}`);
        }
        rules.push(`counter drop ${nftComment(`${ep.key}: ${pols.length ? 'passed to profiles, none allowed' : 'no profile allowed'}`)}`);
        chains.set(ifChain, rules);
        (dir === 'Ingress' ? toWl : fromWl).set(ep.interfaceName, `jump ${ifChain}`);
      }
    }
    return { chains, sets: this.sets, toWl, fromWl };
  }

  /** Whether policy `p` selects endpoint `ep` (for any direction). */
  selects(p: PolicyInput, ep: { namespace: string; allLabels: Record<string, string>; nsLabels: Record<string, string> }): boolean {
    if (p.kind === 'NetworkPolicy') return ep.namespace === p.namespace && sel(p.spec.selector).matches(ep.allLabels);
    if (p.spec.namespaceSelector !== undefined && !sel(p.spec.namespaceSelector).matches(ep.nsLabels)) return false;
    return sel(p.spec.selector).matches(ep.allLabels);
  }

  private members(s: Selection): EndpointView[] {
    const key = selectionKey(s);
    let m = this.memberCache.get(key);
    if (!m) {
      const ps = sel(s.selector);
      const ns = s.namespaceSelector === null ? undefined : sel(s.namespaceSelector);
      m = this.endpoints.filter((e) => (s.scope === null || e.namespace === s.scope) && (!ns || ns.matches(e.nsLabels)) && ps.matches(e.allLabels));
      this.memberCache.set(key, m);
    }
    return m;
  }

  /** A named set of the addresses of an entity's selection, of one family. */
  private addrSet(s: Selection, family: 4 | 6): string {
    const name = `sel${family}-${shortHash(selectionKey(s))}`;
    if (!this.sets.has(name)) {
      const elements = new Set<string>();
      for (const e of this.members(s)) for (const a of e.addrs) if (familyOf(a) === family) elements.add(a);
      this.sets.set(name, { type: family === 4 ? 'ipv4_addr' : 'ipv6_addr', elements });
    }
    return name;
  }

  /** A named set of address . protocol . port for the endpoints of `s` (all endpoints when null) with a port of that name. */
  private namedPortSet(s: Selection | null, portName: string, proto: Protocol, family: 4 | 6): string {
    const key = JSON.stringify([s ? selectionKey(s) : null, portName, protoText(proto)]);
    const name = `np${family}-${shortHash(key)}`;
    if (!this.sets.has(name)) {
      const elements = new Set<string>();
      const wantProto = protoText(proto);
      for (const e of s ? this.members(s) : this.endpoints) {
        for (const p of e.ports ?? []) {
          if (p.name !== portName || protoText((p.protocol.toUpperCase() === 'UDPLITE' ? 'UDPLite' : p.protocol.toUpperCase()) as Protocol) !== wantProto) continue;
          for (const a of e.addrs) if (familyOf(a) === family) elements.add(`${a} . ${wantProto} . ${p.port}`);
        }
      }
      this.sets.set(name, { type: `${family === 4 ? 'ipv4_addr' : 'ipv6_addr'} . inet_proto . inet_service`, elements });
    }
    return name;
  }

  private entitySelection(e: EntityRule | undefined, p: PolicyInput | undefined): Selection | null {
    if (!e || (e.selector === undefined && e.namespaceSelector === undefined)) return null;
    // A namespaced policy's selector stays in its namespace unless namespaceSelector widens it.
    const scope = e.namespaceSelector === undefined && p?.kind === 'NetworkPolicy' ? p.namespace! : null;
    return { scope, selector: e.selector ?? 'all()', namespaceSelector: e.namespaceSelector ?? null };
  }

  compileRules(rules: PolicyRule[], p: PolicyInput | undefined, what: string): string[] {
    const out: string[] = [];
    rules.forEach((r, i) => out.push(...this.compileRule(r, p, `${what} rule ${i}`)));
    return out;
  }

  private compileRule(r: PolicyRule, p: PolicyInput | undefined, what: string): string[] {
    const src = this.entitySelection(r.source, p);
    const dst = this.entitySelection(r.destination, p);
    const srcNot = r.source?.notSelector !== undefined ? { scope: p?.kind === 'NetworkPolicy' ? p.namespace! : null, selector: r.source.notSelector, namespaceSelector: null } : null;
    const dstNot = r.destination?.notSelector !== undefined ? { scope: p?.kind === 'NetworkPolicy' ? p.namespace! : null, selector: r.destination.notSelector, namespaceSelector: null } : null;
    const hasNamed = (e?: EntityRule) => (e?.ports ?? []).some((x) => parsePort(x).kind === 'named');
    const needsFamily = !!(src || dst || srcNot || dstNot || r.source?.nets?.length || r.destination?.nets?.length || r.source?.notNets?.length || r.destination?.notNets?.length || hasNamed(r.source) || hasNamed(r.destination));
    let families: Array<0 | 4 | 6> = r.ipVersion ? [r.ipVersion] : needsFamily ? [4, 6] : [0];
    if (r.protocol === 'ICMP') families = families.filter((f) => f !== 6);
    if (r.protocol === 'ICMPv6') families = families.filter((f) => f !== 4);
    for (const nets of [r.source?.nets, r.destination?.nets]) {
      if (nets?.length) families = families.filter((f) => f === 0 || nets.some((n) => familyOf(n) === f));
    }
    const action = actionText(r, what);
    const lines: string[] = [];
    for (const f of families) {
      const ipk = f === 6 ? 'ip6' : 'ip';
      const base: string[] = [];
      if (r.protocol !== undefined) base.push(`meta l4proto ${protoText(r.protocol)}`);
      if (r.notProtocol !== undefined) base.push(`meta l4proto != ${protoText(r.notProtocol)}`);
      if (f === 0 && r.protocol === undefined && r.ipVersion) base.push(`meta nfproto ipv${r.ipVersion}`);
      // Port alternatives: numeric ports in one clause, each named port as its own rule.
      const portAlts = (e: EntityRule | undefined, dir: 's' | 'd', selection: Selection | null): string[][] => {
        const ports = e?.ports ?? [];
        const notPorts = e?.notPorts ?? [];
        const common: string[] = [];
        const nums = notPorts.map(parsePort).filter((x) => x.kind === 'range');
        if (nums.length) common.push(`th ${dir}port != ${portSet(nums)}`);
        if (ports.length === 0) return [common];
        const alts: string[][] = [];
        const numeric = ports.map(parsePort).filter((x) => x.kind === 'range');
        if (numeric.length) alts.push([...common, `th ${dir}port ${portSet(numeric)}`]);
        for (const np of ports.map(parsePort)) {
          if (np.kind !== 'named' || f === 0) continue;
          const set = this.namedPortSet(selection, np.name, r.protocol ?? 'TCP', f);
          alts.push([...common, `${ipk} ${dir}addr . meta l4proto . th ${dir}port @${set}`]);
        }
        return alts;
      };
      const addr = (e: EntityRule | undefined, dir: 's' | 'd', selection: Selection | null, not: Selection | null): string[] | null => {
        const c: string[] = [];
        if (f === 0) return c;
        if (selection) c.push(`${ipk} ${dir}addr @${this.addrSet(selection, f)}`);
        if (not) c.push(`${ipk} ${dir}addr != @${this.addrSet(not, f)}`);
        const nets = (e?.nets ?? []).filter((n) => familyOf(n) === f);
        if (e?.nets?.length && nets.length === 0) return null;
        if (nets.length) c.push(`${ipk} ${dir}addr { ${normalizeNets(nets).join(', ')} }`);
        const notNets = (e?.notNets ?? []).filter((n) => familyOf(n) === f);
        if (notNets.length) c.push(`${ipk} ${dir}addr != { ${normalizeNets(notNets).join(', ')} }`);
        return c;
      };
      const sa = addr(r.source, 's', src, srcNot);
      const da = addr(r.destination, 'd', dst, dstNot);
      if (!sa || !da) continue;
      if (f !== 0 && base.length === 0 && sa.length === 0 && da.length === 0) base.push(`meta nfproto ipv${f}`);
      for (const sp of portAlts(r.source, 's', src)) {
        for (const dp of portAlts(r.destination, 'd', dst)) {
          lines.push([...base, ...sa, ...sp, ...da, ...dp, action].join(' '));
        }
      }
    }
    return lines;
  }
}

function portSet(ps: Array<{ kind: 'range'; first: number; last: number } | { kind: 'named'; name: string }>): string {
  const items = ps.filter((x): x is { kind: 'range'; first: number; last: number } => x.kind === 'range').map((x) => (x.first === x.last ? `${x.first}` : `${x.first}-${x.last}`));
  return `{ ${[...new Set(items)].join(', ')} }`;
}

function kindShort(k: PolicyInput['kind']): string {
  return k === 'GlobalNetworkPolicy' ? 'gnp' : 'np';
}

function actionText(r: PolicyRule, what: string): string {
  switch (r.action) {
    case 'Allow':
      return `meta mark set meta mark or ${hex(MARK_ALLOW)} return ${nftComment(what)}`;
    case 'Pass':
      return `meta mark set meta mark or ${hex(MARK_PASS)} return ${nftComment(what)}`;
    case 'Deny':
      return `counter drop ${nftComment(what)}`;
    case 'Log': {
      let prefix = `netplugin ${what}: `.replace(/["\\]/g, '');
      while (Buffer.byteLength(prefix) > 120) prefix = prefix.slice(0, -3) + ': ';
      return `counter log prefix "${prefix}" ${nftComment(what)}`;
    }
  }
}

export type { PolicyType, Port };
