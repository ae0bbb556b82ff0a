// Policy compiler: the policy model plus the endpoints the agent knows (local
// ones with their host veth, remote ones for their labels and addresses) →
// the desired content of the `inet netplugin` nftables table, as data
// (chains with rule lines, sets with elements, the interface verdict maps).
// src/agent/policy/nft-script.ts turns two such states into one incremental
// nft transaction, or a whole one for a resync.
//
// Layout (docs/policy.md has a listing):
//   base chains `forward` (egress), `forward-in` (ingress) and `input` (static):
//   a pod interface (host veth prefix) missing from @wl-known is dropped (fail
//   closed until programmed); established/related passes; then `iifname vmap
//   @from-wl` (the pod's egress) or `oifname vmap @to-wl` (its ingress) jump to
//   per-endpoint chains. Endpoint chains `to-<if>`/`from-<if>` jump to the
//   chains of the policies that select it, in order, then to its profiles. A
//   policy chain accepts on Allow (ending that base chain only), drops on Deny,
//   marks Pass (MARK_PASS) and returns, logs on Log.
//   Peer selections are named sets of addresses (sel4-*/sel6-*); named ports
//   are sets of address . protocol . port (np4-*/np6-*): a label or port change
//   rewrites set elements, not rules.
import { createHash } from 'node:crypto';
import { containsCidr, formatCidr, formatIP, parseCidr, type Cidr } from '../../net/cidr.js';
import { effectiveTypes, parsePort, protocolNumber, type EntityRule, type PolicyRule, type Protocol } from '../../model/policy.js';
import {
  endpointViews,
  entitySelection,
  notSelection,
  policyId,
  sel,
  policySelects,
  portProtocol,
  selectionMatches,
  sortPolicies,
  type EndpointInput,
  type EndpointView,
  type PolicyInput,
  type ProfileInput,
  type Selection,
} from '../../model/policy-eval.js';

export type { EndpointInput, PolicyInput, ProfileInput };

export const TABLE = 'netplugin';
/** Set by a Pass rule: the endpoint chain goes on to its profiles. */
export const MARK_PASS = 0x02000000;
const MARK_CLEAR = (~MARK_PASS >>> 0).toString(16).padStart(8, '0');
const hex = (n: number) => '0x' + n.toString(16).padStart(8, '0');

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

function shortHash(s: string): string {
  return createHash('sha1').update(s).digest('hex').slice(0, 12);
}

/** nft comments hold at most 128 bytes; strings are double-quoted, so quotes are dropped. */
export function nftComment(s: string): string {
  let t = s.replace(/["\\\n]/g, '');
  while (Buffer.byteLength(t) > 120) t = t.slice(0, -1);
  return `comment "${t}"`;
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

function selectionKey(s: Selection): string {
  return JSON.stringify([s.scope, sel(s.selector).toString(), s.namespaceSelector === null ? null : sel(s.namespaceSelector).toString()]);
}

const L4: Record<string, string> = { TCP: 'tcp', UDP: 'udp', SCTP: 'sctp', UDPLite: 'udplite', ICMP: 'icmp', ICMPv6: 'ipv6-icmp' };
function protoText(p: Protocol): string {
  return typeof p === 'number' ? String(p) : (L4[p] ?? String(protocolNumber(p)));
}

/** What a set holds, so its elements can be recomputed for one endpoint. */
type SetDef = { kind: 'addr'; sel: Selection; family: 4 | 6 } | { kind: 'np'; sel: Selection | null; portName: string; proto: string; family: 4 | 6 };

/** What the last compile left, for the incremental path. */
interface Memo {
  policyKeys: string[];
  policySpecs: unknown[];
  profiles: Map<string, ProfileInput>;
  /** Endpoint (namespace/key: endpoint names repeat across namespaces) → its input as JSON (to find what changed) and its view. */
  endpoints: Map<string, { sig: string; view: EndpointView }>;
  /** Profiles some local endpoint names (their chains are compiled). */
  usedProfiles: string;
  state: DesiredState;
  polChain: Map<PolicyInput, { in?: string; out?: string }>;
  profChain: Map<string, { in: string; out: string }>;
  byNamespace: Map<string | null, PolicyInput[]>;
}

export class PolicyCompiler {
  private sets = new Map<string, SetState>();
  private endpoints: EndpointView[] = [];
  private memberCache = new Map<string, EndpointView[]>();
  /** Address families some endpoint has. */
  private families = new Set<4 | 6>();
  private setDefs = new Map<string, SetDef>();
  /** Per set: element → how many endpoints contribute it (two endpoints may share an address for a moment). */
  private setCounts = new Map<string, Map<string, number>>();
  private memo: Memo | undefined;
  /** How the last compile went (for the benchmark and the logs). */
  lastMode: 'full' | 'incremental' | 'unchanged' = 'full';

  /** Forget the memo: the next compile recomputes everything (after a refused batch). */
  reset(): void {
    this.memo = undefined;
  }

  /**
   * The desired table for `input`. When only endpoints changed since the last
   * call (same policies and profiles, same address families, same profiles in
   * use), only the changed endpoints' chains, map entries and set elements are
   * recomputed; anything else recomputes the whole table.
   */
  compile(input: CompileInput): DesiredState {
    const inc = this.memo && this.incremental(this.memo, input);
    if (inc) return inc;
    return this.full(input);
  }

  private full(input: CompileInput): DesiredState {
    this.lastMode = 'full';
    this.sets = new Map();
    this.setDefs = new Map();
    this.setCounts = new Map();
    this.memberCache = new Map();
    this.endpoints = endpointViews(input.endpoints, input.profiles);
    this.families = new Set(this.endpoints.flatMap((e) => e.addrs.map(familyOf)));
    const chains = new Map<string, string[]>();
    const policies = sortPolicies(input.policies);

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
    // A NetworkPolicy selects only endpoints of its namespace: index them, so each endpoint is
    // matched against its namespace's policies and the global ones, not every policy.
    const byNamespace = new Map<string | null, PolicyInput[]>();
    for (const p of policies) {
      const k = p.kind === 'NetworkPolicy' ? p.namespace! : null;
      let l = byNamespace.get(k);
      if (!l) byNamespace.set(k, (l = []));
      l.push(p);
    }
    const state: DesiredState = { chains, sets: this.sets, toWl, fromWl };
    const memo: Memo = {
      policyKeys: input.policies.map(policyKey),
      policySpecs: input.policies.map((p) => p.spec),
      profiles: input.profiles,
      endpoints: new Map(),
      usedProfiles: usedProfiles(input.endpoints),
      state,
      polChain,
      profChain,
      byNamespace,
    };
    this.endpoints.forEach((ep, i) => {
      // endpointViews keeps the inputs' order.
      memo.endpoints.set(epId(ep), { sig: JSON.stringify(input.endpoints[i]), view: ep });
      this.endpointChains(ep, memo, state, input.profiles);
    });
    this.memo = memo;
    return state;
  }

  /** Chains and map entries of one local endpoint, into `state` (its profile chains too, when new). */
  private endpointChains(ep: EndpointView, memo: Memo, state: DesiredState, profiles: Map<string, ProfileInput>): void {
    if (!ep.interfaceName) return;
    const { polChain, profChain, byNamespace } = memo;
    const { chains } = state;
    const globals = byNamespace.get(null) ?? [];
    const own = byNamespace.get(ep.namespace) ?? [];
    // Both lists are in evaluation order; merge them keeping it.
    const candidates = globals.length === 0 ? own : own.length === 0 ? globals : sortPolicies([...globals, ...own]);
    const selecting = candidates.filter((p) => policySelects(p, ep));
    for (const [dir, ifChain] of [['Ingress', `to-${ep.interfaceName}`], ['Egress', `from-${ep.interfaceName}`]] as const) {
      const key = dir === 'Ingress' ? 'in' : 'out';
      const pols = selecting.filter((p) => polChain.get(p)![key]);
      // Allow is `accept` (egress and ingress are separate base chains, so accepting one still
      // leaves the other to decide); only a Pass needs a mark, tested after the policies that have one.
      const passing = pols.some((p) => hasPass(p, dir));
      const rules: string[] = passing ? [`meta mark set meta mark and 0x${MARK_CLEAR}`] : [];
      if (pols.length > 0) {
        const sub = `${ifChain}-pol`;
        const subRules: string[] = [];
        for (const p of pols) {
          subRules.push(`jump ${polChain.get(p)![key]!}`);
          if (hasPass(p, dir)) subRules.push(`meta mark and ${hex(MARK_PASS)} != 0 return ${nftComment('passed to the profiles')}`);
        }
        subRules.push(`counter drop ${nftComment(`${ep.key}: selected by policy, no rule matched`)}`);
        chains.set(sub, subRules);
        rules.push(`jump ${sub}`);
      }
      for (const prof of ep.profiles) {
        const pr = profiles.get(prof);
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
      }
      rules.push(`counter drop ${nftComment(`${ep.key}: ${pols.length ? 'passed to profiles, none allowed' : 'no profile allowed'}`)}`);
      chains.set(ifChain, rules);
      (dir === 'Ingress' ? state.toWl : state.fromWl).set(ep.interfaceName, `jump ${ifChain}`);
    }
  }

  /**
   * Only endpoints changed: a new state sharing every unchanged chain and set
   * with the last one (nft-script's diff skips shared objects), or undefined
   * when the change needs the full path.
   */
  private incremental(memo: Memo, input: CompileInput): DesiredState | undefined {
    if (input.profiles !== memo.profiles && !sameProfiles(input.profiles, memo.profiles)) return undefined;
    if (input.policies.length !== memo.policyKeys.length) return undefined;
    for (let i = 0; i < input.policies.length; i++) {
      if (input.policies[i]!.spec !== memo.policySpecs[i] || policyKey(input.policies[i]!) !== memo.policyKeys[i]) return undefined;
    }
    if (usedProfiles(input.endpoints) !== memo.usedProfiles) return undefined;
    const families = new Set(input.endpoints.flatMap((e) => e.addrs.map(familyOf)));
    if (families.size !== this.families.size || [...families].some((f) => !this.families.has(f))) return undefined;

    // Which endpoints changed (by their input), and their old and new views.
    const next = new Map<string, { sig: string; view: EndpointView }>();
    const changed: Array<{ old?: EndpointView; now?: EndpointView }> = [];
    const fresh: EndpointInput[] = [];
    const freshSigs: string[] = [];
    for (const e of input.endpoints) {
      const sig = JSON.stringify(e);
      const was = memo.endpoints.get(epId(e));
      if (was && was.sig === sig) next.set(epId(e), was);
      else {
        fresh.push(e);
        freshSigs.push(sig);
      }
    }
    const freshViews = endpointViews(fresh, input.profiles);
    freshViews.forEach((v, i) => {
      const id = epId(v);
      next.set(id, { sig: freshSigs[i]!, view: v });
      changed.push({ ...(memo.endpoints.has(id) ? { old: memo.endpoints.get(id)!.view } : {}), now: v });
    });
    for (const [k, was] of memo.endpoints) if (!next.has(k)) changed.push({ old: was.view });
    if (changed.length === 0) {
      this.lastMode = 'unchanged';
      return memo.state;
    }
    this.lastMode = 'incremental';
    this.endpoints = [...next.values()].map((x) => x.view);
    this.memberCache = new Map();

    const prev = memo.state;
    const state: DesiredState = { chains: new Map(prev.chains), sets: new Map(prev.sets), toWl: new Map(prev.toWl), fromWl: new Map(prev.fromWl) };
    this.sets = state.sets;
    // Set elements: take out the old views' contributions, put in the new ones'.
    for (const [name, def] of this.setDefs) {
      const counts = this.setCounts.get(name)!;
      let elements: Set<string> | undefined;
      const bump = (el: string, by: number) => {
        const n = (counts.get(el) ?? 0) + by;
        if (n > 0) counts.set(el, n);
        else counts.delete(el);
        const present = n > 0;
        const cur = (elements ?? state.sets.get(name)!.elements).has(el);
        if (present === cur) return;
        if (!elements) {
          elements = new Set(state.sets.get(name)!.elements);
          state.sets.set(name, { ...state.sets.get(name)!, elements });
        }
        if (present) elements.add(el);
        else elements.delete(el);
      };
      for (const c of changed) {
        if (c.old) for (const el of contributions(def, c.old)) bump(el, -1);
        if (c.now) for (const el of contributions(def, c.now)) bump(el, +1);
      }
    }
    // Endpoint chains: the old ones go, the new ones are computed.
    for (const c of changed) {
      const ifn = c.old?.interfaceName;
      if (!ifn) continue;
      for (const ch of [`to-${ifn}`, `from-${ifn}`, `to-${ifn}-pol`, `from-${ifn}-pol`]) state.chains.delete(ch);
      state.toWl.delete(ifn);
      state.fromWl.delete(ifn);
    }
    for (const c of changed) if (c.now) this.endpointChains(c.now, memo, state, input.profiles);
    // An unchanged chain keeps the old array, so the diff skips it by identity.
    for (const [name, rules] of state.chains) {
      const old = prev.chains.get(name);
      if (old && old !== rules && sameRules(old, rules)) state.chains.set(name, old);
    }
    this.memo = { ...memo, profiles: input.profiles, endpoints: next, state };
    return state;
  }

  private members(s: Selection): EndpointView[] {
    const key = selectionKey(s);
    let m = this.memberCache.get(key);
    if (!m) {
      m = this.endpoints.filter((e) => selectionMatches(s, e));
      this.memberCache.set(key, m);
    }
    return m;
  }

  /** A named set of the addresses of an entity's selection, of one family. */
  private addrSet(s: Selection, family: 4 | 6): string {
    const name = `sel${family}-${shortHash(selectionKey(s))}`;
    if (!this.sets.has(name)) this.newSet(name, { kind: 'addr', sel: s, family }, family === 4 ? 'ipv4_addr' : 'ipv6_addr', this.members(s));
    return name;
  }

  /** A named set of address . protocol . port for the endpoints of `s` (all endpoints when null) with a port of that name. */
  private namedPortSet(s: Selection | null, portName: string, proto: Protocol, family: 4 | 6): string {
    const key = JSON.stringify([s ? selectionKey(s) : null, portName, protoText(proto)]);
    const name = `np${family}-${shortHash(key)}`;
    if (!this.sets.has(name)) {
      this.newSet(name, { kind: 'np', sel: s, portName, proto: protoText(proto), family }, `${family === 4 ? 'ipv4_addr' : 'ipv6_addr'} . inet_proto . inet_service`, s ? this.members(s) : this.endpoints);
    }
    return name;
  }

  /** A set, its definition and its element counts, from the endpoints that may contribute. */
  private newSet(name: string, def: SetDef, type: string, from: EndpointView[]): void {
    const counts = new Map<string, number>();
    // `from` is already the selection's members: no second selector match.
    for (const e of from) for (const el of contributions(def, e, true)) counts.set(el, (counts.get(el) ?? 0) + 1);
    this.setDefs.set(name, def);
    this.setCounts.set(name, counts);
    this.sets.set(name, { type, elements: new Set(counts.keys()) });
  }

  compileRules(rules: PolicyRule[], p: PolicyInput | undefined, what: string): string[] {
    const out: string[] = [];
    rules.forEach((r, i) => out.push(...this.compileRule(r, p, `${what} rule ${i}`)));
    return out;
  }

  private compileRule(r: PolicyRule, p: PolicyInput | undefined, what: string): string[] {
    const src = entitySelection(r.source, p);
    const dst = entitySelection(r.destination, p);
    const srcNot = notSelection(r.source, p);
    const dstNot = notSelection(r.destination, p);
    const hasNamed = (e?: EntityRule) => [...(e?.ports ?? []), ...(e?.notPorts ?? [])].some((x) => parsePort(x).kind === 'named');
    const needsFamily = !!(src || dst || srcNot || dstNot || r.source?.nets?.length || r.destination?.nets?.length || r.source?.notNets?.length || r.destination?.notNets?.length || hasNamed(r.source) || hasNamed(r.destination));
    let families: Array<0 | 4 | 6> = r.ipVersion ? [r.ipVersion] : needsFamily ? [4, 6] : [0];
    // A rule that needs the peer (or the endpoint) to be in a selection matches nothing in a family
    // no endpoint has: leave it out (an IPv4-only cluster gets no ip6 rules).
    if (src || dst) families = families.filter((f) => f === 0 || this.families.has(f));
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
        // A named notPort: not the address . protocol . port of a matching endpoint's port of that name.
        for (const np of notPorts.map(parsePort)) {
          if (np.kind !== 'named' || f === 0) continue;
          common.push(`${ipk} ${dir}addr . meta l4proto . th ${dir}port != @${this.namedPortSet(selection, np.name, r.protocol ?? 'TCP', f)}`);
        }
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

/** The elements endpoint `e` puts in a set. */
function contributions(def: SetDef, e: EndpointView, member = false): string[] {
  if (!member && def.sel && !selectionMatches(def.sel, e)) return [];
  const addrs = e.addrs.filter((a) => familyOf(a) === def.family);
  if (def.kind === 'addr') return addrs;
  const out: string[] = [];
  for (const p of e.ports ?? []) {
    const pp = portProtocol(p.protocol);
    if (p.name !== def.portName || !pp || protoText(pp) !== def.proto) continue;
    for (const a of addrs) out.push(`${a} . ${def.proto} . ${p.port}`);
  }
  return out;
}

/** An endpoint's identity: its name is unique only within its namespace. */
function epId(e: EndpointInput): string {
  return `${e.namespace}/${e.key}`;
}

function policyKey(p: PolicyInput): string {
  return `${p.kind}/${policyId(p)}`;
}

function sameProfiles(a: Map<string, ProfileInput>, b: Map<string, ProfileInput>): boolean {
  if (a.size !== b.size) return false;
  for (const [k, v] of a) if (b.get(k)?.spec !== v.spec) return false;
  return true;
}

/** The profiles local endpoints name, as one comparable string. */
function usedProfiles(endpoints: EndpointInput[]): string {
  const s = new Set<string>();
  for (const e of endpoints) if (e.interfaceName) for (const p of e.profiles) s.add(p);
  return [...s].sort().join(',');
}

/** Same rule lines in the same order. */
export function sameRules(a: string[], b: string[]): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}

function portSet(ps: Array<{ kind: 'range'; first: number; last: number } | { kind: 'named'; name: string }>): string {
  const items = ps.filter((x): x is { kind: 'range'; first: number; last: number } => x.kind === 'range').map((x) => (x.first === x.last ? `${x.first}` : `${x.first}-${x.last}`));
  return `{ ${[...new Set(items)].join(', ')} }`;
}

function hasPass(p: PolicyInput, dir: 'Ingress' | 'Egress'): boolean {
  return ((dir === 'Ingress' ? p.spec.ingress : p.spec.egress) ?? []).some((r) => r.action === 'Pass');
}

function kindShort(k: PolicyInput['kind']): string {
  return k === 'GlobalNetworkPolicy' ? 'gnp' : 'np';
}

function actionText(r: PolicyRule, what: string): string {
  switch (r.action) {
    case 'Allow':
      return `accept ${nftComment(what)}`;
    case 'Pass':
      // In a profile chain the mark is not tested: the next profile decides, as the evaluator says.
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

