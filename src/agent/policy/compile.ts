// Policy compiler: the policy model plus the endpoints the agent knows (local
// ones with their host veth, remote ones for their labels and addresses) →
// the desired content of the `inet netplugin` nftables table, as values of the
// typed nftables model (src/dataplane/nft/model.ts: chains of typed rules,
// sets with typed elements, the interface entries). It never writes nftables
// syntax: src/dataplane/nft/render.ts does, and src/agent/policy/nft-script.ts
// turns two such states into one incremental transaction, or a whole one for
// a resync. A value the model cannot hold (an interface name outside its
// alphabet, an address that does not parse) is refused here, reported with
// its endpoint, and costs that endpoint only.
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
import {
  effectiveTypes,
  parsePort,
  protocolNumber,
  type EntityRule,
  type PolicyRule,
  type Protocol,
} from '../../model/policy.js';
import { renderRule } from '../../dataplane/nft/render.js';
import { DEFAULT_POLICY_TABLE } from '../../dataplane/nft/programmed.js';
import {
  checkAddr,
  checkMac,
  checkPort,
  checkProto,
  elemKey,
  ifnameProblem,
  NftModelError,
  type Chain,
  type ElemType,
  type ElemValue,
  type Match,
  type NftSet,
  type Owner,
  type Rule,
} from '../../dataplane/nft/model.js';
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

export const TABLE = DEFAULT_POLICY_TABLE;
/** Set by a Pass rule: the endpoint chain goes on to its profiles. */
const MARK_PASS = 0x02000000;
const MARK_CLEAR = ~MARK_PASS >>> 0;

/** A local endpoint's entries in the base table's sets and maps, keyed by its host interface. */
export interface EndpointEntry {
  owner: Owner;
  /** The endpoint's revision: a re-ADD rewrites it, and its entries are added again (the plugin took them out). */
  rev?: string;
  /** Its ingress (`to-wl`) and egress (`from-wl`) chains. */
  to: string;
  from: string;
  /** The source addresses it may send from, and its MAC (when recorded). */
  v4: string[];
  v6: string[];
  mac?: string;
}

/** An object (or part of one) the model refused before rendering. */
interface Refusal {
  owner: Owner;
  reason: string;
}

export interface DesiredState {
  /** Non-base chains by name. */
  chains: Map<string, Chain>;
  sets: Map<string, NftSet>;
  /** Local endpoints by host interface name. */
  endpoints: Map<string, EndpointEntry>;
  /** What was left out, with why (reported by the controller). */
  refused: Refusal[];
}

export interface CompileInput {
  policies: PolicyInput[];
  profiles: Map<string, ProfileInput>;
  endpoints: EndpointInput[];
}

function shortHash(s: string): string {
  return createHash('sha1').update(s).digest('hex').slice(0, 12);
}

function familyOf(addr: string): 4 | 6 {
  return addr.includes(':') ? 6 : 4;
}

/** Drop nets covered by another of the list (nft rejects overlapping intervals in one set). */
function normalizeNets(nets: string[]): string[] {
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
  return JSON.stringify([
    s.scope,
    sel(s.selector).toString(),
    s.namespaceSelector === null ? null : sel(s.namespaceSelector).toString(),
  ]);
}

/** What a set holds, so its elements can be recomputed for one endpoint. */
type SetDef =
  | { kind: 'addr'; sel: Selection; family: 4 | 6 }
  | { kind: 'np'; sel: Selection | null; portName: string; proto: number; family: 4 | 6 };

/** What the last compile left, for the incremental path. */
interface Memo {
  policyKeys: string[];
  policySpecs: unknown[];
  profiles: Map<string, ProfileInput>;
  /**
   * Endpoint (namespace/key: endpoint names repeat across namespaces) → its input as JSON (to find what changed) and
   * its view.
   */
  endpoints: Map<string, { sig: string; view: EndpointView; refused: Refusal[] }>;
  /** Profiles some local endpoint names (their chains are compiled). */
  usedProfiles: string;
  state: DesiredState;
  polChain: Map<PolicyInput, { in?: string; out?: string }>;
  profChain: Map<string, { in: string; out: string }>;
  byNamespace: Map<string | null, PolicyInput[]>;
}

/**
 * An endpoint as the model can hold it: addresses, ports, MAC and interface
 * name that do not fit are left out (an endpoint without its interface name
 * stays isolated: its interface never enters @wl-known), with why.
 */
function cleanEndpoint(e: EndpointInput): { e: EndpointInput; refused: Refusal[] } {
  const refused: Refusal[] = [];
  const owner = endpointOwner(e);
  const no = (reason: string) => refused.push({ owner, reason });
  const addrs: string[] = [];
  for (const a of e.addrs) {
    try {
      addrs.push(checkAddr(String(a)));
    } catch (err) {
      no(`address left out: ${(err as Error).message}`);
    }
  }
  const ports = (e.ports ?? []).filter((p) => {
    try {
      checkPort(p.port);
      return true;
    } catch (err) {
      no(`port ${JSON.stringify(p.name)} left out: ${(err as Error).message}`);
      return false;
    }
  });
  const out: EndpointInput = { ...e, addrs, ...(e.ports ? { ports } : {}) };
  if (e.interfaceName !== undefined) {
    const p = ifnameProblem(e.interfaceName);
    if (p) {
      delete out.interfaceName;
      no(`interfaceName ${JSON.stringify(e.interfaceName)} ${p}; the endpoint stays isolated`);
    }
  }
  if (e.mac !== undefined) {
    try {
      out.mac = checkMac(e.mac);
    } catch (err) {
      delete out.mac;
      no(`mac left out: ${(err as Error).message}`);
    }
  }
  return { e: out, refused };
}

function endpointOwner(e: EndpointInput): Owner {
  return {
    kind: 'Endpoint',
    namespace: e.namespace,
    name: e.key,
    ...(e.id ? { id: e.id } : {}),
    ...(e.pod ? { pod: e.pod } : {}),
  };
}

const cleaned = new WeakMap<EndpointInput, { e: EndpointInput; refused: Refusal[] }>();
function clean(e: EndpointInput): { e: EndpointInput; refused: Refusal[] } {
  let c = cleaned.get(e);
  if (!c) cleaned.set(e, (c = cleanEndpoint(e)));
  return c;
}

export class PolicyCompiler {
  private sets = new Map<string, NftSet>();
  private endpoints: EndpointView[] = [];
  private memberCache = new Map<string, EndpointView[]>();
  /** Address families some endpoint has. */
  private families = new Set<4 | 6>();
  private setDefs = new Map<string, SetDef>();
  /** Per set: element key → how many endpoints contribute it (two endpoints may share an address for a moment). */
  private setCounts = new Map<string, Map<string, number>>();
  private memo: Memo | undefined;
  /** Policy and profile rules the model refused (each drops instead), from the last full compile. */
  private ruleRefusals: Refusal[] = [];
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
    this.ruleRefusals = [];
    const cleanInputs = input.endpoints.map(clean);
    this.endpoints = endpointViews(
      cleanInputs.map((c) => c.e),
      input.profiles,
    );
    this.families = new Set(this.endpoints.flatMap((e) => e.addrs.map(familyOf)));
    const chains = new Map<string, Chain>();
    const policies = sortPolicies(input.policies);

    // Policy chains (shared by every endpoint the policy selects).
    const polChain = new Map<PolicyInput, { in?: string; out?: string }>();
    for (const p of policies) {
      const types = effectiveTypes(p.spec);
      const id = policyId(p);
      const names: { in?: string; out?: string } = {};
      const h = shortHash(`${p.kind}/${id}`);
      const owner: Owner = {
        kind: p.kind,
        name: p.name,
        ...(p.namespace !== undefined && p.kind === 'NetworkPolicy' ? { namespace: p.namespace } : {}),
      };
      if (types.includes('Ingress')) {
        names.in = `pol-in-${h}`;
        chains.set(names.in, {
          comment: `${p.kind} ${id} ingress`,
          owner,
          rules: this.compileRules(p.spec.ingress ?? [], p, `${p.kind} ${id} ingress`, owner),
        });
      }
      if (types.includes('Egress')) {
        names.out = `pol-out-${h}`;
        chains.set(names.out, {
          comment: `${p.kind} ${id} egress`,
          owner,
          rules: this.compileRules(p.spec.egress ?? [], p, `${p.kind} ${id} egress`, owner),
        });
      }
      polChain.set(p, names);
    }

    // Profile chains, for the profiles some local endpoint names.
    const profChain = new Map<string, { in: string; out: string }>();
    // A NetworkPolicy selects only endpoints of its namespace: index them, so each endpoint is
    // matched against its namespace's policies and the global ones, not every policy.
    const byNamespace = new Map<string | null, PolicyInput[]>();
    for (const p of policies) {
      const k = p.kind === 'NetworkPolicy' ? p.namespace! : null;
      let l = byNamespace.get(k);
      if (!l) byNamespace.set(k, (l = []));
      l.push(p);
    }
    const state: DesiredState = { chains, sets: this.sets, endpoints: new Map(), refused: [] };
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
      memo.endpoints.set(epId(ep), {
        sig: JSON.stringify(input.endpoints[i]),
        view: ep,
        refused: cleanInputs[i]!.refused,
      });
      this.endpointChains(ep, memo, state, input.profiles);
    });
    state.refused = [...this.ruleRefusals, ...[...memo.endpoints.values()].flatMap((x) => x.refused)];
    this.memo = memo;
    return state;
  }

  /** Chains and interface entries of one local endpoint, into `state` (its profile chains too, when new). */
  private endpointChains(ep: EndpointView, memo: Memo, state: DesiredState, profiles: Map<string, ProfileInput>): void {
    if (!ep.interfaceName) return;
    const { polChain, profChain, byNamespace } = memo;
    const { chains } = state;
    const owner = endpointOwner(ep);
    const who = `${ep.namespace}/${ep.key}`;
    const globals = byNamespace.get(null) ?? [];
    const own = byNamespace.get(ep.namespace) ?? [];
    // Both lists are in evaluation order; merge them keeping it.
    const candidates = globals.length === 0 ? own : own.length === 0 ? globals : sortPolicies([...globals, ...own]);
    const selecting = candidates.filter((p) => policySelects(p, ep));
    const entry: EndpointEntry = {
      owner,
      ...(ep.rev !== undefined ? { rev: ep.rev } : {}),
      to: `to-${ep.interfaceName}`,
      from: `from-${ep.interfaceName}`,
      v4: ep.addrs.filter((a) => familyOf(a) === 4),
      v6: ep.addrs.filter((a) => familyOf(a) === 6),
      ...(ep.mac ? { mac: ep.mac } : {}),
    };
    for (const [dir, ifChain] of [
      ['Ingress', entry.to],
      ['Egress', entry.from],
    ] as const) {
      const key = dir === 'Ingress' ? 'in' : 'out';
      const d = dir.toLowerCase();
      const pols = selecting.filter((p) => polChain.get(p)![key]);
      // Allow is `accept` (egress and ingress are separate base chains, so accepting one still
      // leaves the other to decide); only a Pass needs a mark, tested after the policies that have one.
      const passing = pols.some((p) => hasPass(p, dir));
      const rules: Rule[] = passing ? [{ matches: [], stmts: [{ s: 'markSet', op: 'and', value: MARK_CLEAR }] }] : [];
      if (pols.length > 0) {
        const sub = `${ifChain}-pol`;
        const subRules: Rule[] = [];
        for (const p of pols) {
          subRules.push({ matches: [], verdict: { v: 'jump', chain: polChain.get(p)![key]! } });
          if (hasPass(p, dir))
            subRules.push({
              matches: [{ m: 'markAny', mask: MARK_PASS }],
              verdict: { v: 'return' },
              comment: `${p.kind} ${policyId(p)} passed to the profiles`,
            });
        }
        subRules.push({
          matches: [],
          stmts: [{ s: 'counter' }],
          verdict: { v: 'drop' },
          comment: `${who} ${d}: end of policies ${nameList(pols.map(policyId))}`,
        });
        chains.set(sub, { comment: `${who} ${d}: the policies selecting it`, owner, rules: subRules });
        rules.push({ matches: [], verdict: { v: 'jump', chain: sub } });
      }
      for (const prof of ep.profiles) {
        const pr = profiles.get(prof);
        if (!pr) continue;
        let pc = profChain.get(prof);
        if (!pc) {
          const h = shortHash(`Profile/${prof}`);
          pc = { in: `pro-in-${h}`, out: `pro-out-${h}` };
          const po: Owner = { kind: 'Profile', name: prof };
          chains.set(pc.in, {
            comment: `Profile ${prof} ingress`,
            owner: po,
            rules: this.compileRules(pr.spec.ingress ?? [], undefined, `Profile ${prof} ingress`, po),
          });
          chains.set(pc.out, {
            comment: `Profile ${prof} egress`,
            owner: po,
            rules: this.compileRules(pr.spec.egress ?? [], undefined, `Profile ${prof} egress`, po),
          });
          profChain.set(prof, pc);
        }
        rules.push({ matches: [], verdict: { v: 'jump', chain: pc[key] } });
      }
      const profs = ep.profiles.filter((p) => profiles.has(p));
      rules.push({
        matches: [],
        stmts: [{ s: 'counter' }],
        verdict: { v: 'drop' },
        comment:
          `${who} ${d}: ${pols.length ? 'passed to profiles, ' : ''}end of profiles ` +
          `${profs.length ? nameList(profs) : '(none)'}`,
      });
      chains.set(ifChain, { comment: `${who} ${d} (interface ${ep.interfaceName})`, owner, rules });
    }
    state.endpoints.set(ep.interfaceName, entry);
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
      if (input.policies[i]!.spec !== memo.policySpecs[i] || policyKey(input.policies[i]!) !== memo.policyKeys[i])
        return undefined;
    }
    if (usedProfiles(input.endpoints) !== memo.usedProfiles) return undefined;

    // Which endpoints changed (by their input), and their old and new views.
    const next = new Map<string, { sig: string; view: EndpointView; refused: Refusal[] }>();
    const changed: Array<{ old?: EndpointView; now?: EndpointView }> = [];
    const fresh: EndpointInput[] = [];
    const freshSigs: string[] = [];
    const freshRefused: Refusal[][] = [];
    for (const e of input.endpoints) {
      const sig = JSON.stringify(e);
      const was = memo.endpoints.get(epId(e));
      if (was && was.sig === sig) next.set(epId(e), was);
      else {
        const c = clean(e);
        fresh.push(c.e);
        freshSigs.push(sig);
        freshRefused.push(c.refused);
      }
    }
    const freshViews = endpointViews(fresh, input.profiles);
    freshViews.forEach((v, i) => {
      const id = epId(v);
      next.set(id, { sig: freshSigs[i]!, view: v, refused: freshRefused[i]! });
      changed.push({ ...(memo.endpoints.has(id) ? { old: memo.endpoints.get(id)!.view } : {}), now: v });
    });
    for (const [k, was] of memo.endpoints) if (!next.has(k)) changed.push({ old: was.view });
    // The address families in use (of the checked addresses; unchanged endpoints' views are the memo's).
    const families = new Set<4 | 6>();
    for (const x of next.values()) for (const a of x.view.addrs) families.add(familyOf(a));
    if (families.size !== this.families.size || [...families].some((f) => !this.families.has(f))) return undefined;
    if (changed.length === 0) {
      this.lastMode = 'unchanged';
      return memo.state;
    }
    this.lastMode = 'incremental';
    this.endpoints = [...next.values()].map((x) => x.view);
    this.memberCache = new Map();

    const prev = memo.state;
    const state: DesiredState = {
      chains: new Map(prev.chains),
      sets: new Map(prev.sets),
      endpoints: new Map(prev.endpoints),
      refused: [],
    };
    this.sets = state.sets;
    // Set elements: take out the old views' contributions, put in the new ones'.
    for (const [name, def] of this.setDefs) {
      const counts = this.setCounts.get(name)!;
      let elements: Map<string, ElemValue[]> | undefined;
      const bump = (el: ElemValue[], by: number) => {
        const k = elemKey(el);
        const n = (counts.get(k) ?? 0) + by;
        if (n > 0) counts.set(k, n);
        else counts.delete(k);
        const present = n > 0;
        const cur = (elements ?? state.sets.get(name)!.elements).has(k);
        if (present === cur) return;
        if (!elements) {
          elements = new Map(state.sets.get(name)!.elements);
          state.sets.set(name, { ...state.sets.get(name)!, elements });
        }
        if (present) elements.set(k, el);
        else elements.delete(k);
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
      state.endpoints.delete(ifn);
    }
    for (const c of changed) if (c.now) this.endpointChains(c.now, memo, state, input.profiles);
    // An unchanged chain or entry keeps the old object, so the diff skips it by identity.
    for (const [name, ch] of state.chains) {
      const old = prev.chains.get(name);
      if (old && old !== ch && sameChain(old, ch)) state.chains.set(name, old);
    }
    for (const [ifn, en] of state.endpoints) {
      const old = prev.endpoints.get(ifn);
      if (old && old !== en && sameEntry(old, en)) state.endpoints.set(ifn, old);
    }
    state.refused = [...this.ruleRefusals, ...[...next.values()].flatMap((x) => x.refused)];
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
    if (!this.sets.has(name)) this.newSet(name, { kind: 'addr', sel: s, family }, [addrType(family)], this.members(s));
    return name;
  }

  /**
   * A named set of address . protocol . port for the endpoints of `s` (all endpoints when null) with a port of that
   * name.
   */
  private namedPortSet(s: Selection | null, portName: string, proto: Protocol, family: 4 | 6): string {
    const pn = checkProto(protocolNumber(proto)); // out of range: the rule is refused, not the set
    const key = JSON.stringify([s ? selectionKey(s) : null, portName, pn]);
    const name = `np${family}-${shortHash(key)}`;
    if (!this.sets.has(name)) {
      this.newSet(
        name,
        { kind: 'np', sel: s, portName, proto: pn, family },
        [addrType(family), 'inet_proto', 'inet_service'],
        s ? this.members(s) : this.endpoints,
      );
    }
    return name;
  }

  /** A set, its definition and its element counts, from the endpoints that may contribute. */
  private newSet(name: string, def: SetDef, type: ElemType[], from: EndpointView[]): void {
    const counts = new Map<string, number>();
    const elements = new Map<string, ElemValue[]>();
    // `from` is already the selection's members: no second selector match.
    for (const e of from) {
      for (const el of contributions(def, e, true)) {
        const k = elemKey(el);
        counts.set(k, (counts.get(k) ?? 0) + 1);
        elements.set(k, el);
      }
    }
    this.setDefs.set(name, def);
    this.setCounts.set(name, counts);
    const what =
      def.kind === 'addr'
        ? `addresses of ${selectionText(def.sel)}`
        : `port ${def.portName} of ${def.sel ? selectionText(def.sel) : 'all()'}`;
    this.sets.set(name, { type, elements, comment: what, owner: { kind: 'Set', name } });
  }

  /**
   * A policy's or profile's rules. A rule the model cannot hold (a port or
   * protocol out of range in an object the schema did not check) becomes a
   * drop naming it: fail closed, and only that rule's chain is affected.
   */
  compileRules(rules: PolicyRule[], p: PolicyInput | undefined, what: string, owner?: Owner): Rule[] {
    const out: Rule[] = [];
    rules.forEach((r, i) => {
      const w = `${what} rule ${i}`;
      try {
        const compiled = this.compileRule(r, p, w);
        for (const c of compiled) renderRule(c); // refuses here, not in the batch
        out.push(...compiled);
      } catch (e) {
        if (!(e instanceof NftModelError)) throw e;
        out.push({
          matches: [],
          stmts: [{ s: 'counter' }],
          verdict: { v: 'drop' },
          comment: `${w} refused (${e.message})`,
        });
        if (owner)
          this.ruleRefusals.push({ owner, reason: `${w} cannot be programmed (${e.message}); it drops instead` });
      }
    });
    return out;
  }

  private compileRule(r: PolicyRule, p: PolicyInput | undefined, what: string): Rule[] {
    const src = entitySelection(r.source, p);
    const dst = entitySelection(r.destination, p);
    const srcNot = notSelection(r.source, p);
    const dstNot = notSelection(r.destination, p);
    const hasNamed = (e?: EntityRule) =>
      [...(e?.ports ?? []), ...(e?.notPorts ?? [])].some((x) => parsePort(x).kind === 'named');
    const needsFamily = !!(
      src ||
      dst ||
      srcNot ||
      dstNot ||
      r.source?.nets?.length ||
      r.destination?.nets?.length ||
      r.source?.notNets?.length ||
      r.destination?.notNets?.length ||
      hasNamed(r.source) ||
      hasNamed(r.destination)
    );
    let families: Array<0 | 4 | 6> = r.ipVersion ? [r.ipVersion] : needsFamily ? [4, 6] : [0];
    // A rule that needs the peer (or the endpoint) to be in a selection matches nothing in a family
    // no endpoint has: leave it out (an IPv4-only cluster gets no ip6 rules).
    if (src || dst) families = families.filter((f) => f === 0 || this.families.has(f));
    if (r.protocol === 'ICMP') families = families.filter((f) => f !== 6);
    if (r.protocol === 'ICMPv6') families = families.filter((f) => f !== 4);
    for (const nets of [r.source?.nets, r.destination?.nets]) {
      if (nets?.length) families = families.filter((f) => f === 0 || nets.some((n) => familyOf(n) === f));
    }
    const action = actionOf(r, what);
    const out: Rule[] = [];
    for (const f of families) {
      const base: Match[] = [];
      if (r.protocol !== undefined) base.push({ m: 'l4proto', proto: protocolNumber(r.protocol) });
      if (r.notProtocol !== undefined) base.push({ m: 'l4proto', proto: protocolNumber(r.notProtocol), neg: true });
      if (f === 0 && r.protocol === undefined && r.ipVersion) base.push({ m: 'nfproto', family: r.ipVersion });
      // Port alternatives: numeric ports in one clause, each named port as its own rule.
      const portAlts = (e: EntityRule | undefined, dir: 's' | 'd', selection: Selection | null): Match[][] => {
        const ports = e?.ports ?? [];
        const notPorts = e?.notPorts ?? [];
        const common: Match[] = [];
        const nums = ranges(notPorts);
        if (nums.length) common.push({ m: 'ports', dir, ranges: nums, neg: true });
        // A named notPort: not the address . protocol . port of a matching endpoint's port of that name.
        for (const np of notPorts.map(parsePort)) {
          if (np.kind !== 'named' || f === 0) continue;
          common.push({
            m: 'addrProtoPortSet',
            family: f,
            dir,
            set: this.namedPortSet(selection, np.name, r.protocol ?? 'TCP', f),
            neg: true,
          });
        }
        if (ports.length === 0) return [common];
        const alts: Match[][] = [];
        const numeric = ranges(ports);
        if (numeric.length) alts.push([...common, { m: 'ports', dir, ranges: numeric }]);
        for (const np of ports.map(parsePort)) {
          if (np.kind !== 'named' || f === 0) continue;
          const set = this.namedPortSet(selection, np.name, r.protocol ?? 'TCP', f);
          alts.push([...common, { m: 'addrProtoPortSet', family: f, dir, set }]);
        }
        return alts;
      };
      const addr = (
        e: EntityRule | undefined,
        dir: 's' | 'd',
        selection: Selection | null,
        not: Selection | null,
      ): Match[] | null => {
        const c: Match[] = [];
        if (f === 0) return c;
        if (selection) c.push({ m: 'addrSet', family: f, dir, set: this.addrSet(selection, f) });
        if (not) c.push({ m: 'addrSet', family: f, dir, set: this.addrSet(not, f), neg: true });
        const nets = (e?.nets ?? []).filter((n) => familyOf(n) === f);
        if (e?.nets?.length && nets.length === 0) return null;
        const norm = normalizeNets(nets);
        if (nets.length && norm.length === 0) return null; // none parses: the rule matches nothing
        if (norm.length) c.push({ m: 'nets', family: f, dir, nets: norm });
        const notNets = normalizeNets((e?.notNets ?? []).filter((n) => familyOf(n) === f));
        if (notNets.length) c.push({ m: 'nets', family: f, dir, nets: notNets, neg: true });
        return c;
      };
      const sa = addr(r.source, 's', src, srcNot);
      const da = addr(r.destination, 'd', dst, dstNot);
      if (!sa || !da) continue;
      if (f !== 0 && base.length === 0 && sa.length === 0 && da.length === 0) base.push({ m: 'nfproto', family: f });
      for (const sp of portAlts(r.source, 's', src)) {
        for (const dp of portAlts(r.destination, 'd', dst)) {
          out.push({ ...action, matches: [...base, ...sa, ...sp, ...da, ...dp] });
        }
      }
    }
    return out;
  }
}

function addrType(f: 4 | 6): ElemType {
  return f === 4 ? 'ipv4_addr' : 'ipv6_addr';
}

/** The numeric ports and ranges of a port list (named ones are matched through sets). */
function ranges(ports: Array<number | string>): Array<[number, number]> {
  const out: Array<[number, number]> = [];
  for (const x of ports.map(parsePort)) if (x.kind === 'range') out.push([x.first, x.last]);
  return out;
}

/** Names for a comment: as many as fit, then how many more. */
function nameList(names: string[]): string {
  let s = '';
  for (let i = 0; i < names.length; i++) {
    const next = s ? `${s}, ${names[i]}` : names[i]!;
    if (next.length > 70) return `${s || names[i]!.slice(0, 60)} +${names.length - (s ? i : i + 1)} more`;
    s = next;
  }
  return s;
}

function selectionText(s: Selection): string {
  return (
    `${sel(s.selector).toString()}` +
    `${s.namespaceSelector === null ? '' : ` in ${sel(s.namespaceSelector).toString()}`}`
  );
}

/** The elements endpoint `e` puts in a set. */
function contributions(def: SetDef, e: EndpointView, member = false): ElemValue[][] {
  if (!member && def.sel && !selectionMatches(def.sel, e)) return [];
  const addrs = e.addrs.filter((a) => familyOf(a) === def.family);
  if (def.kind === 'addr') return addrs.map((a) => [a]);
  const out: ElemValue[][] = [];
  for (const p of e.ports ?? []) {
    const pp = portProtocol(p.protocol);
    if (p.name !== def.portName || pp === undefined || protocolNumber(pp) !== def.proto) continue;
    for (const a of addrs) out.push([a, def.proto, p.port]);
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

/** Same comment, owner and rules (the rules compared as values). */
function sameChain(a: Chain, b: Chain): boolean {
  return (
    a.comment === b.comment &&
    JSON.stringify(a.owner) === JSON.stringify(b.owner) &&
    JSON.stringify(a.rules) === JSON.stringify(b.rules)
  );
}

function sameEntry(a: EndpointEntry, b: EndpointEntry): boolean {
  return JSON.stringify(a) === JSON.stringify(b);
}

function hasPass(p: PolicyInput, dir: 'Ingress' | 'Egress'): boolean {
  return ((dir === 'Ingress' ? p.spec.ingress : p.spec.egress) ?? []).some((r) => r.action === 'Pass');
}

/** A rule's statements, verdict and comment for its action. */
function actionOf(r: PolicyRule, what: string): Omit<Rule, 'matches'> {
  switch (r.action) {
    case 'Allow':
      return { verdict: { v: 'accept' }, comment: what };
    case 'Pass':
      // In a profile chain the mark is not tested: the next profile decides, as the evaluator says.
      return { stmts: [{ s: 'markSet', op: 'or', value: MARK_PASS }], verdict: { v: 'return' }, comment: what };
    case 'Deny':
      return { stmts: [{ s: 'counter' }], verdict: { v: 'drop' }, comment: what };
    case 'Log':
      return { stmts: [{ s: 'counter' }, { s: 'log', prefix: `netplugin ${what}: ` }], comment: what };
  }
}
