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
import type { HostPortSpec } from '../../model/resources.js';
import type { EndpointToHostAction } from '../../model/agent-config.js';
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
  type Verdict,
  type Icmpv6Type,
} from '../../dataplane/nft/model.js';
import {
  endpointViews,
  entitySelection,
  inTier,
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
  type PolicyTier,
  type ProfileInput,
  type Selection,
} from '../../model/policy-eval.js';
import { hitOfPolicy } from '../../model/staged.js';
import {
  formatFlowTag,
  REF_END_OF_POLICIES,
  REF_END_OF_PROFILES,
  type TagAction,
  type TagDir,
  type TagRef,
} from '../flows/tags.js';

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

/**
 * Flow logs: the deciding rule of each new connection (allowed) and of each denied packet also
 * logs a tag (src/agent/flows/tags.ts) to this NFLOG group, at most `rate` a second (burst
 * `burst`) per pod interface and direction. The rate limit only thins the samples: connections
 * and their counters come from conntrack, and a flow already known keeps its attribution.
 */
export interface FlowLogRules {
  group: number;
  rate: number;
  burst: number;
}

/** The dynamic sets of the flow-log rate limit: ingress (to a pod) keyed by oifname, egress by iifname. */
const FLOW_LIMIT_SETS = { ingress: 'fl-rate-in', egress: 'fl-rate-out' } as const;

export interface CompileInput {
  policies: PolicyInput[];
  profiles: Map<string, ProfileInput>;
  endpoints: EndpointInput[];
  /** Host endpoints and the node's settings for them (absent: none). */
  host?: HostInput;
}

/** A HostEndpoint as the compiler takes it. */
interface HostEndpointInput {
  name: string;
  /** An interface name, or `*` (all but pod interfaces); absent: not enforced. */
  interfaceName?: string;
  labels: Record<string, string>;
  profiles: string[];
  /** expectedIPs: what peer selectors of other rules match for it. */
  addrs: string[];
  ports?: Array<{ name: string; protocol: string; port: number }>;
  /** Whether it is of this node (then enforced here). */
  local: boolean;
}

export interface HostInput {
  endpoints: HostEndpointInput[];
  failsafeInbound: HostPortSpec[];
  failsafeOutbound: HostPortSpec[];
  endpointToHost: EndpointToHostAction;
  /** Host veth prefixes of pods: their interfaces are never a host endpoint's. */
  podPrefixes: string[];
  /** The VXLAN port between nodes: the tunnels of pod traffic never meet host endpoint policy. */
  vxlanPort?: number;
}

/**
 * The regular chains the static base chains of host endpoint policy jump to
 * (src/agent/policy/nft-script.ts creates them empty, the compiler fills them):
 * by hook, what they dispatch to each host endpoint's chains.
 */
export const HOST_DISPATCH = {
  in: { name: 'host-in', comment: 'to the host: failsafe ports, pods to their node, host endpoint ingress' },
  out: { name: 'host-out', comment: 'from the host: failsafe ports, host endpoint egress' },
  fwdIn: { name: 'host-fwd-in', comment: 'forwarded: ingress of the host endpoint it came in on (applyOnForward)' },
  fwdOut: { name: 'host-fwd-out', comment: 'forwarded: egress of the host endpoint it goes out on (applyOnForward)' },
  pre: { name: 'host-pre', comment: 'before DNAT: host endpoint ingress of preDNAT policies' },
  rawIn: { name: 'host-raw-in', comment: 'untracked: host endpoint ingress of doNotTrack policies' },
  rawOut: { name: 'host-raw-out', comment: 'untracked: host endpoint egress of doNotTrack policies' },
} as const;

/** Set with `notrack` by an Allow of a doNotTrack policy: the filter chains accept the packet without conntrack. */
const MARK_UNTRACKED = 0x04000000;
const NO_HOST: HostInput = {
  endpoints: [],
  failsafeInbound: [],
  failsafeOutbound: [],
  endpointToHost: 'Accept',
  podPrefixes: [],
};
const HOST_DISPATCH_OWNER: Owner = { kind: 'HostDispatch', name: 'host endpoint dispatch' };

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
  policies: PolicyInput[];
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
  /** The host endpoint input as JSON: any change recompiles the whole table. */
  hostSig: string;
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
  /** Host endpoints as peers and as enforced endpoints (of the last full compile). */
  private hostViews: HostView[] = [];
  private hostRefusals: Refusal[] = [];
  /** How the last compile went (for the benchmark and the logs). */
  lastMode: 'full' | 'incremental' | 'unchanged' = 'full';
  /** Flow-log tags' refs → what they name; refs of earlier compiles stay (samples may still be in flight). */
  readonly flowRefs = new Map<string, TagRef>();

  constructor(private readonly flowLog?: FlowLogRules) {}

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
    if (this.flowLog) {
      for (const [dir, name] of Object.entries(FLOW_LIMIT_SETS)) {
        this.sets.set(name, {
          type: ['ifname'],
          dynamic: { timeoutSeconds: 60, size: 65535 },
          comment: `flow-log samples per pod interface (${dir})`,
          elements: new Map(),
          owner: { kind: 'Set', name },
        });
      }
    }
    this.hostRefusals = [];
    const cleanInputs = input.endpoints.map(clean);
    const wepViews = endpointViews(
      cleanInputs.map((c) => c.e),
      input.profiles,
    );
    // Host endpoints are peers of rules like pods (their expectedIPs in selection sets).
    this.hostViews = hostViews(input.host, input.profiles);
    this.endpoints = [...wepViews, ...this.hostViews];
    this.families = new Set(this.endpoints.flatMap((e) => e.addrs.map(familyOf)));
    const chains = new Map<string, Chain>();
    const policies = sortPolicies(input.policies);

    // Policy chains (shared by every endpoint the policy selects).
    const polChain = new Map<PolicyInput, { in?: string; out?: string }>();
    for (const p of policies) polChain.set(p, this.policyChains(p, chains));

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
      policies: input.policies,
      policySpecs: input.policies.map((p) => p.spec),
      profiles: input.profiles,
      endpoints: new Map(),
      usedProfiles: usedProfiles(input.endpoints),
      state,
      polChain,
      profChain,
      byNamespace,
      hostSig: JSON.stringify(input.host ?? null),
    };
    wepViews.forEach((ep, i) => {
      // endpointViews keeps the inputs' order.
      memo.endpoints.set(epId(ep), {
        sig: JSON.stringify(input.endpoints[i]),
        view: ep,
        refused: cleanInputs[i]!.refused,
      });
      this.endpointChains(ep, memo, state, input.profiles);
    });
    // The dispatch chains always exist (the base chains jump to them), empty of host endpoints without any.
    this.hostChains(input.host ?? NO_HOST, memo, state, input.profiles);
    const epRefused = [...memo.endpoints.values()].flatMap((x) => x.refused);
    state.refused = [...this.ruleRefusals, ...this.hostRefusals, ...epRefused];
    this.memo = memo;
    return state;
  }

  /** A policy's chains (one per direction it has), shared by every endpoint it selects. */
  private policyChains(p: PolicyInput, chains: Map<string, Chain>): { in?: string; out?: string } {
    const types = effectiveTypes(p.spec);
    const id = policyId(p);
    const names: { in?: string; out?: string } = {};
    const h = shortHash(`${p.kind}/${id}`);
    const owner: Owner = {
      kind: p.kind,
      name: p.name,
      ...(p.namespace !== undefined && p.kind === 'NetworkPolicy' ? { namespace: p.namespace } : {}),
    };
    if (this.flowLog) {
      const { action: _a, ruleIndex: _r, ...ref } = hitOfPolicy(p, 'Allow', 0);
      this.flowRefs.set(h, ref);
    }
    for (const [type, dir, side] of [
      ['Ingress', 'ingress', 'in'],
      ['Egress', 'egress', 'out'],
    ] as const) {
      if (!types.includes(type)) continue;
      const name = (names[side] = `pol-${side}-${h}`);
      const what = `${p.kind} ${id} ${dir}`;
      const rules = this.compileRules(p.spec[dir] ?? [], p, what, owner, { ref: h, dir });
      chains.set(name, { comment: what, owner, rules });
    }
    return names;
  }

  /** Chains and interface entries of one local endpoint, into `state` (its profile chains too, when new). */
  private endpointChains(ep: EndpointView, memo: Memo, state: DesiredState, profiles: Map<string, ProfileInput>): void {
    if (!ep.interfaceName) return;
    const { polChain, byNamespace } = memo;
    const { chains } = state;
    const owner = endpointOwner(ep);
    const who = `${ep.namespace}/${ep.key}`;
    const globals = byNamespace.get(null) ?? [];
    const own = byNamespace.get(ep.namespace) ?? [];
    // Both lists are in evaluation order; merge them keeping it.
    const candidates = globals.length === 0 ? own : own.length === 0 ? globals : sortPolicies([...globals, ...own]);
    // preDNAT and doNotTrack policies apply to host endpoints only.
    const selecting = candidates.filter((p) => inTier(p, 'normal') && policySelects(p, ep));
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
      this.directionChain(chains, memo, profiles, {
        name: ifChain,
        comment: `${who} ${dir.toLowerCase()} (interface ${ep.interfaceName})`,
        who,
        owner,
        dir,
        pols: selecting,
        polChain,
        profiles: ep.profiles,
        end: 'drop',
      });
    }
    state.endpoints.set(ep.interfaceName, entry);
  }

  /**
   * One direction of an endpoint: a chain that jumps to the policies selecting it (in a `-pol`
   * sub-chain ending in `polEnd`: a drop, or a return for untracked policy), then to its profiles
   * (a profile chain is made the first time one is used), then `end`.
   */
  private directionChain(
    chains: Map<string, Chain>,
    memo: Memo,
    profiles: Map<string, ProfileInput>,
    o: {
      name: string;
      comment: string;
      who: string;
      owner: Owner;
      dir: 'Ingress' | 'Egress';
      pols: PolicyInput[];
      polChain: Map<PolicyInput, { in?: string; out?: string }>;
      profiles: string[];
      end: 'drop' | 'accept' | 'return';
      polEnd?: 'drop' | 'return';
    },
  ): void {
    const { profChain } = memo;
    const key = o.dir === 'Ingress' ? 'in' : 'out';
    const d = o.dir.toLowerCase();
    const pols = o.pols.filter((p) => o.polChain.get(p)?.[key]);
    // Allow is `accept` (egress and ingress are separate base chains, so accepting one still
    // leaves the other to decide); only a Pass needs a mark, tested after the policies that have one.
    const passing = pols.some((p) => hasPass(p, o.dir));
    const rules: Rule[] = passing ? [{ matches: [], stmts: [{ s: 'markSet', op: 'and', value: MARK_CLEAR }] }] : [];
    if (pols.length > 0) {
      const sub = `${o.name}-pol`;
      const subRules: Rule[] = [];
      for (const p of pols) {
        subRules.push({ matches: [], verdict: { v: 'jump', chain: o.polChain.get(p)![key]! } });
        if (hasPass(p, o.dir))
          subRules.push({
            matches: [{ m: 'markAny', mask: MARK_PASS }],
            verdict: { v: 'return' },
            comment: `${p.kind} ${policyId(p)} passed to the profiles`,
          });
      }
      const eop: Rule = {
        matches: [],
        ...(o.polEnd === 'return' ? {} : { stmts: [{ s: 'counter' as const }] }),
        verdict: { v: o.polEnd ?? 'drop' },
        comment: `${o.who} ${d}: end of policies ${nameList(pols.map(policyId))}`,
      };
      if (o.polEnd === 'return') subRules.push(eop);
      else subRules.push(...this.logged([eop], 'Deny', { ref: REF_END_OF_POLICIES, dir: d as TagDir }, -1));
      chains.set(sub, { comment: `${o.who} ${d}: the policies selecting it`, owner: o.owner, rules: subRules });
      rules.push({ matches: [], verdict: { v: 'jump', chain: sub } });
    }
    for (const prof of o.profiles) {
      const pr = profiles.get(prof);
      if (!pr) continue;
      let pc = profChain.get(prof);
      if (!pc) {
        const h = shortHash(`Profile/${prof}`);
        pc = { in: `pro-in-${h}`, out: `pro-out-${h}` };
        const po: Owner = { kind: 'Profile', name: prof };
        if (this.flowLog) this.flowRefs.set(h, { kind: 'Profile', namespace: '', name: prof, tier: '' });
        const inRules = this.compileRules(pr.spec.ingress ?? [], undefined, `Profile ${prof} ingress`, po, {
          ref: h,
          dir: 'ingress',
        });
        const outRules = this.compileRules(pr.spec.egress ?? [], undefined, `Profile ${prof} egress`, po, {
          ref: h,
          dir: 'egress',
        });
        chains.set(pc.in, { comment: `Profile ${prof} ingress`, owner: po, rules: inRules });
        chains.set(pc.out, { comment: `Profile ${prof} egress`, owner: po, rules: outRules });
        profChain.set(prof, pc);
      }
      rules.push({ matches: [], verdict: { v: 'jump', chain: pc[key] } });
    }
    const profs = o.profiles.filter((p) => profiles.has(p));
    const what =
      o.end === 'drop'
        ? `${pols.length ? 'passed to profiles, ' : ''}end of profiles ${profs.length ? nameList(profs) : '(none)'}`
        : `no policy decided: ${o.end}`;
    const last: Rule = {
      matches: [],
      ...(o.end === 'drop' ? { stmts: [{ s: 'counter' as const }] } : {}),
      verdict: { v: o.end },
      comment: `${o.who} ${d}: ${what}`,
    };
    if (o.end === 'drop')
      rules.push(...this.logged([last], 'Deny', { ref: REF_END_OF_PROFILES, dir: d as TagDir }, -1));
    else rules.push(last);
    chains.set(o.name, { comment: o.comment, owner: o.owner, rules });
  }

  /**
   * Host endpoint policy of this node's host endpoints: per host endpoint, its chains for the
   * host's own traffic (input/output: the policies selecting it but the preDNAT and doNotTrack
   * ones, then its profiles, then a drop), for forwarded traffic (applyOnForward policies; none:
   * accepted), before DNAT (preDNAT policies) and untracked (doNotTrack policies); and the
   * dispatch chains the base chains jump to: failsafe ports first, pod interfaces never go to a
   * host endpoint (pods to their own node: endpointToHost), named interfaces before `*`.
   */
  private hostChains(host: HostInput, memo: Memo, state: DesiredState, profiles: Map<string, ProfileInput>): void {
    const { chains } = state;
    const globals = (memo.byNamespace.get(null) ?? []).filter((p) => p.kind === 'GlobalNetworkPolicy');
    const byIf = this.enforcedHostEndpoints(host);
    // Untracked policy: its Allow skips conntrack and is accepted by the filter chains (by a mark).
    const rawChain = new Map<PolicyInput, { in?: string; out?: string }>();
    const rawOf = (p: PolicyInput) => {
      if (rawChain.has(p)) return;
      const c: { in?: string; out?: string } = {};
      const id = policyId(p);
      const h = shortHash(`raw/${p.kind}/${id}`);
      const owner: Owner = { kind: 'GlobalNetworkPolicy', name: p.name };
      for (const [dir, k] of [
        ['Ingress', 'in'],
        ['Egress', 'out'],
      ] as const) {
        if (!effectiveTypes(p.spec).includes(dir)) continue;
        const what = `${p.kind} ${id} ${dir.toLowerCase()} (untracked)`;
        const spec = (dir === 'Ingress' ? p.spec.ingress : p.spec.egress) ?? [];
        c[k] = `raw-${k}-${h}`;
        chains.set(c[k], { comment: what, owner, rules: this.compileRules(spec, p, what, owner).map(untracked) });
      }
      rawChain.set(p, c);
    };
    type Hooks = { in: string; out: string; fin: string; fout: string; pre?: string; rawIn?: string; rawOut?: string };
    const made = new Map<string, Hooks>();
    for (const [ifn, h] of byIf) {
      const who = `HostEndpoint ${h.key}`;
      const selecting = (tier: PolicyTier) => globals.filter((p) => inTier(p, tier) && policySelects(p, h));
      const base = `hep-${shortHash(`HostEndpoint/${h.key}`)}`;
      const hooks: Hooks = { in: `${base}-in`, out: `${base}-out`, fin: `${base}-fin`, fout: `${base}-fout` };
      const iface = `interface ${ifn === '*' ? 'all' : ifn}`;
      const chain = (name: string, what: string, dir: 'Ingress' | 'Egress', pols: PolicyInput[], o: ChainEnd) =>
        this.directionChain(chains, memo, profiles, {
          who,
          owner: hostOwner(h),
          polChain: o.polChain ?? memo.polChain,
          name,
          comment: `${who} ${what} (${iface})`,
          dir,
          pols,
          profiles: o.profiles ?? [],
          end: o.end,
          ...(o.polEnd ? { polEnd: o.polEnd } : {}),
        });
      const normal = selecting('normal');
      chain(hooks.in, 'ingress', 'Ingress', normal, { end: 'drop', profiles: h.profiles });
      chain(hooks.out, 'egress', 'Egress', normal, { end: 'drop', profiles: h.profiles });
      const fwd = selecting('forward');
      chain(hooks.fin, 'forwarded ingress', 'Ingress', fwd, { end: 'accept' });
      chain(hooks.fout, 'forwarded egress', 'Egress', fwd, { end: 'accept' });
      const pre = selecting('preDNAT').filter((p) => effectiveTypes(p.spec).includes('Ingress'));
      if (pre.length) chain((hooks.pre = `${base}-pre`), 'ingress before DNAT', 'Ingress', pre, { end: 'return' });
      const raw = selecting('doNotTrack');
      for (const [dir, k, name] of [
        ['Ingress', 'rawIn', 'raw-in'],
        ['Egress', 'rawOut', 'raw-out'],
      ] as const) {
        const pols = raw.filter((p) => effectiveTypes(p.spec).includes(dir));
        if (!pols.length) continue;
        pols.forEach(rawOf);
        const what = `untracked ${dir.toLowerCase()}`;
        chain((hooks[k] = `${base}-${name}`), what, dir, pols, { end: 'return', polEnd: 'return', polChain: rawChain });
      }
      made.set(ifn, hooks);
    }
    // The dispatch chains: named interfaces first, then the `*` host endpoint; never pod interfaces.
    const star = made.get('*');
    const named = [...made].filter(([i]) => i !== '*');
    const pod = (dir: 'in' | 'out') =>
      host.podPrefixes.map((p): Match => ({ m: 'ifname', dir, name: p, prefix: true }));
    const to = (dir: 'in' | 'out', pick: (h: Hooks) => string | undefined, podVerdict?: Verdict): Rule[] => {
      if (made.size === 0) return [];
      const rules: Rule[] = [];
      for (const m of podVerdict ? pod(dir) : []) {
        rules.push({ matches: [m], verdict: podVerdict!, comment: 'pod interface: no host endpoint' });
      }
      for (const [ifn, h] of named) {
        const c = pick(h);
        const verdict: Verdict = c ? { v: 'goto', chain: c } : { v: 'return' };
        rules.push({ matches: [{ m: 'ifname', dir, name: ifn }], verdict });
      }
      const sc = star && pick(star);
      if (sc) rules.push({ matches: [], verdict: { v: 'goto', chain: sc } });
      return rules;
    };
    const any = made.size > 0;
    const accept = (matches: Match[], comment: string): Rule => ({ matches, verdict: { v: 'accept' }, comment });
    const failsafe = (ports: HostPortSpec[], direction: 'in' | 'out'): Rule[] =>
      any ? failsafeRules(ports, direction) : [];
    const untrackedOk = any ? [accept([{ m: 'markAny', mask: MARK_UNTRACKED }], 'allowed by untracked policy')] : [];
    // Pod traffic between nodes travels in tunnels that start and end on the host: not the host's own.
    const vxlan: Match[] = host.vxlanPort
      ? [
          { m: 'l4proto', proto: 17 },
          { m: 'ports', dir: 'd', ranges: [[host.vxlanPort, host.vxlanPort]] },
        ]
      : [];
    const tunnels: Rule[] = !any
      ? []
      : [
          ...(vxlan.length ? [accept(vxlan, 'VXLAN between nodes (pod traffic)')] : []),
          accept([{ m: 'l4proto', proto: 4 }], 'IPIP between nodes (pod traffic)'),
        ];
    const ndTypes: Icmpv6Type[] = [
      'nd-neighbor-solicit',
      'nd-neighbor-advert',
      'nd-router-solicit',
      'nd-router-advert',
    ];
    const nd = any ? [accept([{ m: 'icmpv6Type', types: ndTypes }], 'IPv6 neighbour and router discovery')] : [];
    // Pods to their own node, after their egress policy (the base `input` chain): endpointToHost.
    const toHost = host.endpointToHost;
    const podIn: Rule[] = pod('in').map((m): Rule => {
      const comment = `pod to its node: defaultEndpointToHostAction ${toHost}`;
      if (toHost === 'Drop') return { matches: [m], stmts: [{ s: 'counter' }], verdict: { v: 'drop' }, comment };
      if (toHost === 'Return' && star) {
        return { matches: [m], verdict: { v: 'goto', chain: star.in }, comment: `${comment} (host endpoint policy)` };
      }
      return accept([m], comment);
    });
    const dispatch = (k: keyof typeof HOST_DISPATCH, rules: Rule[]) =>
      chains.set(HOST_DISPATCH[k].name, { comment: HOST_DISPATCH[k].comment, owner: HOST_DISPATCH_OWNER, rules });
    const inbound = failsafe(host.failsafeInbound, 'in');
    const outbound = failsafe(host.failsafeOutbound, 'out');
    const ret: Verdict = { v: 'return' };
    dispatch('in', [...podIn, ...untrackedOk, ...inbound, ...tunnels, ...nd, ...to('in', (h) => h.in)]);
    dispatch('out', [...untrackedOk, ...outbound, ...tunnels, ...nd, ...to('out', (h) => h.out, { v: 'accept' })]);
    dispatch('fwdIn', [...untrackedOk, ...to('in', (h) => h.fin, ret)]);
    dispatch('fwdOut', [...untrackedOk, ...to('out', (h) => h.fout, ret)]);
    const pres = [...made.values()].some((h) => h.pre);
    dispatch('pre', pres ? [...inbound, ...to('in', (h) => h.pre, ret)] : []);
    const raws = [...made.values()].some((h) => h.rawIn || h.rawOut);
    dispatch('rawIn', raws ? [...inbound, ...to('in', (h) => h.rawIn, ret)] : []);
    dispatch('rawOut', raws ? [...outbound, ...to('out', (h) => h.rawOut, ret)] : []);
  }

  /** This node's host endpoints by interface, one per interface (the first by name); others and bad names refused. */
  private enforcedHostEndpoints(host: HostInput): Map<string, HostView> {
    const byIf = new Map<string, HostView>();
    const byName = [...this.hostViews].sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0));
    for (const h of byName) {
      const ifn = h.hostInterface;
      if (!h.local || ifn === undefined) continue;
      const no = (reason: string) => this.hostRefusals.push({ owner: hostOwner(h), reason: `${reason}; not enforced` });
      const problem = ifn === '*' ? undefined : ifnameProblem(ifn);
      if (problem) no(`interfaceName ${JSON.stringify(ifn)} ${problem}`);
      else if (host.podPrefixes.some((p) => ifn.startsWith(p))) no(`interfaceName ${ifn} is a pod interface`);
      else if (byIf.has(ifn)) no(`interface ${ifn} is HostEndpoint ${byIf.get(ifn)!.key}'s`);
      else byIf.set(ifn, h);
    }
    return byIf;
  }

  /**
   * Only endpoints changed: a new state sharing every unchanged chain and set
   * with the last one (nft-script's diff skips shared objects), or undefined
   * when the change needs the full path.
   */
  private incremental(memo: Memo, input: CompileInput): DesiredState | undefined {
    if (input.profiles !== memo.profiles && !sameProfiles(input.profiles, memo.profiles)) return undefined;
    if (input.policies.length !== memo.policyKeys.length) return undefined;
    const polChanged: number[] = [];
    for (let i = 0; i < input.policies.length; i++) {
      if (policyKey(input.policies[i]!) !== memo.policyKeys[i]) return undefined;
      if (input.policies[i]!.spec !== memo.policySpecs[i]) polChanged.push(i);
    }
    if (usedProfiles(input.endpoints) !== memo.usedProfiles) return undefined;
    if (JSON.stringify(input.host ?? null) !== memo.hostSig) return undefined;

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
    for (const h of this.hostViews) for (const a of h.addrs) families.add(familyOf(a));
    if (families.size !== this.families.size || [...families].some((f) => !this.families.has(f))) return undefined;
    if (polChanged.length > 0) {
      // Only host endpoint policies changed (and nothing else): their chains and the host chains.
      if (changed.length > 0 || !this.hostOnly(memo, input, polChanged)) return undefined;
      return this.hostPolicyChange(memo, input, polChanged);
    }
    if (changed.length === 0) {
      this.lastMode = 'unchanged';
      return memo.state;
    }
    this.lastMode = 'incremental';
    this.endpoints = [...next.values()].map((x) => x.view).concat(this.hostViews);
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
    state.refused = [...this.ruleRefusals, ...this.hostRefusals, ...[...next.values()].flatMap((x) => x.refused)];
    this.memo = { ...memo, profiles: input.profiles, endpoints: next, state };
    return state;
  }

  /**
   * Whether the changed policies are GlobalNetworkPolicies that select no local pod endpoint, in
   * their old and new versions, with the same order: then no pod chain changes.
   */
  private hostOnly(memo: Memo, input: CompileInput, idx: number[]): boolean {
    const local = [...memo.endpoints.values()].map((x) => x.view).filter((v) => v.interfaceName);
    return idx.every((i) => {
      const old = memo.policies[i]!;
      const now = input.policies[i]!;
      if (now.kind !== 'GlobalNetworkPolicy' || old.spec.order !== now.spec.order) return false;
      return !local.some((v) => policySelects(old, v) || policySelects(now, v));
    });
  }

  /**
   * Host endpoint policies changed: their policy chains compiled again (same names), the host
   * endpoint and dispatch chains recomputed; every other chain is the last state's. Sets a new
   * version adds are made; sets only an old version used stay until the next full compile.
   */
  private hostPolicyChange(memo: Memo, input: CompileInput, idx: number[]): DesiredState {
    this.lastMode = 'incremental';
    const prev = memo.state;
    const state: DesiredState = {
      chains: new Map(prev.chains),
      sets: new Map(prev.sets),
      endpoints: prev.endpoints,
      refused: [],
    };
    this.sets = state.sets;
    const globals = [...(memo.byNamespace.get(null) ?? [])];
    for (const i of idx) {
      const old = memo.policies[i]!;
      const now = input.policies[i]!;
      memo.polChain.delete(old);
      memo.polChain.set(now, this.policyChains(now, state.chains));
      globals[globals.indexOf(old)] = now;
    }
    memo.byNamespace.set(null, globals);
    for (const [name, c] of state.chains) {
      if (c.owner.kind === 'HostEndpoint' || c.owner.kind === 'HostDispatch' || name.startsWith('raw-'))
        state.chains.delete(name);
    }
    this.hostRefusals = [];
    this.hostChains(input.host ?? NO_HOST, memo, state, input.profiles);
    for (const [name, ch] of state.chains) {
      const old = prev.chains.get(name);
      if (old && old !== ch && sameChain(old, ch)) state.chains.set(name, old);
    }
    state.refused = [
      ...this.ruleRefusals,
      ...this.hostRefusals,
      ...[...memo.endpoints.values()].flatMap((x) => x.refused),
    ];
    this.memo = { ...memo, policies: input.policies, policySpecs: input.policies.map((p) => p.spec), state };
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
  compileRules(
    rules: PolicyRule[],
    p: PolicyInput | undefined,
    what: string,
    owner?: Owner,
    tag?: { ref: string; dir: TagDir },
  ): Rule[] {
    const out: Rule[] = [];
    rules.forEach((r, i) => {
      const w = `${what} rule ${i}`;
      try {
        const compiled = this.compileRule(r, p, w);
        for (const c of compiled) renderRule(c); // refuses here, not in the batch
        const action = r.action === 'Allow' || r.action === 'Deny' ? r.action : undefined;
        out.push(...(tag && action ? this.logged(compiled, action, tag, i) : compiled));
      } catch (e) {
        if (!(e instanceof NftModelError)) throw e;
        const drop: Rule = {
          matches: [],
          stmts: [{ s: 'counter' }],
          verdict: { v: 'drop' },
          comment: `${w} refused (${e.message})`,
        };
        out.push(...(tag ? this.logged([drop], 'Deny', tag, i) : [drop]));
        if (owner)
          this.ruleRefusals.push({ owner, reason: `${w} cannot be programmed (${e.message}); it drops instead` });
      }
    });
    return out;
  }

  /**
   * With flow logs on, each deciding rule is preceded by its twin that logs the tag (same matches,
   * the per-interface rate limit, the NFLOG statement, no verdict): a limit that is over stops
   * only the twin, never the verdict. Only new connections reach these chains (established
   * traffic is accepted before them), so an allow logs once per connection.
   */
  private logged(rules: Rule[], action: TagAction, tag: { ref: string; dir: TagDir }, ruleIndex: number): Rule[] {
    const fl = this.flowLog;
    if (!fl) return rules;
    const prefix = formatFlowTag({ action, dir: tag.dir, ruleIndex, ref: tag.ref });
    const limit =
      tag.dir === 'ingress'
        ? { set: FLOW_LIMIT_SETS.ingress, key: 'oifname' as const }
        : { set: FLOW_LIMIT_SETS.egress, key: 'iifname' as const };
    return rules.flatMap((r): Rule[] => [
      {
        matches: r.matches,
        stmts: [
          { s: 'limitPerIf', ...limit, rate: fl.rate, burst: fl.burst },
          { s: 'log', prefix, group: fl.group },
        ],
      },
      r,
    ]);
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

/** How a host endpoint's chain ends, and which policy chains it jumps to. */
interface ChainEnd {
  end: 'drop' | 'accept' | 'return';
  polEnd?: 'drop' | 'return';
  profiles?: string[];
  polChain?: Map<PolicyInput, { in?: string; out?: string }>;
}

/** A host endpoint as a peer (no interface: never a pod's chains) and for enforcement here. */
interface HostView extends EndpointView {
  local: boolean;
  /** Kept apart from `interfaceName`, which marks a pod endpoint programmed on this node. */
  hostInterface?: string;
}

function hostViews(host: HostInput | undefined, profiles: Map<string, ProfileInput>): HostView[] {
  if (!host) return [];
  const inputs = host.endpoints.map((h) => {
    const addrs: string[] = [];
    for (const a of h.addrs) {
      try {
        addrs.push(checkAddr(a));
      } catch {
        // The schema checked expectedIPs; a value the model still refuses is no peer address.
      }
    }
    const ports = (h.ports ?? []).filter((p) => Number.isInteger(p.port) && p.port >= 1 && p.port <= 65535);
    // Host endpoints have no namespace: namespaced policies never select them.
    return { key: h.name, namespace: '', labels: h.labels, profiles: h.profiles, addrs, ports };
  });
  return endpointViews(inputs, profiles).map((v, i) => {
    const h = host.endpoints[i]!;
    // No namespace labels either: a namespaceSelector never selects a host endpoint.
    const hostInterface = h.interfaceName !== undefined ? { hostInterface: h.interfaceName } : {};
    return { ...v, nsLabels: {}, local: h.local, ...hostInterface };
  });
}

function hostOwner(h: HostView): Owner {
  return { kind: 'HostEndpoint', name: h.key };
}

/**
 * Accepts of the failsafe ports: the destination port, and a net for the peer (inbound: the
 * source; outbound: the destination).
 */
export function failsafeRules(ports: HostPortSpec[], direction: 'in' | 'out'): Rule[] {
  const groups = new Map<string, { proto: number; net?: string; ports: number[] }>();
  for (const p of ports) {
    const proto = protocolNumber(p.protocol);
    const k = `${proto}/${p.net ?? ''}`;
    let g = groups.get(k);
    if (!g) groups.set(k, (g = { proto, ...(p.net ? { net: p.net } : {}), ports: [] }));
    g.ports.push(p.port);
  }
  const peer = direction === 'in' ? 's' : 'd';
  const out: Rule[] = [];
  for (const g of groups.values()) {
    const nets = g.net ? normalizeNets([g.net]) : [];
    const m: Match[] = [{ m: 'l4proto', proto: g.proto }];
    if (nets.length) m.push({ m: 'nets', family: familyOf(nets[0]!), dir: peer, nets });
    m.push({ m: 'ports', dir: 'd', ranges: g.ports.map((n): [number, number] => [n, n]) });
    out.push({ matches: m, verdict: { v: 'accept' }, comment: 'failsafe port' });
  }
  return out;
}

/** A rule of an untracked policy: an Allow also skips conntrack and marks the packet for the filter chains. */
function untracked(r: Rule): Rule {
  if (r.verdict?.v !== 'accept') return r;
  return { ...r, stmts: [...(r.stmts ?? []), { s: 'notrack' }, { s: 'markSet', op: 'or', value: MARK_UNTRACKED }] };
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
