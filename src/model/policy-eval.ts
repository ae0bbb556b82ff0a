// The policy model's semantics as a pure evaluator over datastore objects: which
// policies select an endpoint, and which rule decides a given connection. The
// node agent's compiler (src/agent/policy/compile.ts) shares the selection
// helpers, and `netpluginctl policy explain` prints the evaluator's trace; both
// follow the order documented in docs/policy.md.
import { parseSelector, type Selector } from '../selector/index.js';
import type { Resource } from './resources.js';
import { addressOf, containsIP, parseCidr, tryParseIP } from '../net/cidr.js';
import { hostVethKey, hostVethName } from './names.js';
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
  type ProfileSpec,
  type Protocol,
  type RuleAction,
} from './policy.js';

export interface PolicyInput {
  kind: 'NetworkPolicy' | 'GlobalNetworkPolicy';
  name: string;
  namespace?: string;
  spec: GlobalNetworkPolicySpec;
  /**
   * A staged policy evaluated as the enforced policy of this kind and name (./staged.ts): the
   * object traces name. Absent for an enforced policy.
   */
  staged?: StagedRef;
}

/** A staged policy, as traces name it (`name` is the staged object's own, also for a Kubernetes one). */
export interface StagedRef {
  kind: 'StagedNetworkPolicy' | 'StagedGlobalNetworkPolicy' | 'StagedKubernetesNetworkPolicy';
  name: string;
  namespace?: string;
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
  /** The endpoint's identity (its container ID): a new pod behind the same interface name is a new endpoint. */
  id?: string;
  /** The pod interface's MAC address, where recorded (local endpoints: the anti-spoofing check). */
  mac?: string;
  /** The pod's name (local endpoints), for the events reporting an endpoint the agent could not program. */
  pod?: string;
  /** The endpoint's revision (local endpoints): each ADD rewrites it. */
  rev?: string;
}

/** An endpoint with the labels its profiles apply and its namespace's labels. */
export interface EndpointView extends EndpointInput {
  nsLabels: Record<string, string>;
  allLabels: Record<string, string>;
}

/**
 * The host veth a node with host veth prefixes `prefixes` made for endpoint `w`, derived from the
 * endpoint's identity (namespace and pod, or the container ID: hostVethKey), never taken from its
 * recorded `interfaceName`, which the pod's owner can edit on the Kubernetes datastore (an
 * annotation). The recorded name is kept only when it is what one of the prefixes derives (a node
 * whose prefix was changed); otherwise the first prefix's. Undefined when nothing can be derived.
 */
function derivedInterfaceName(w: Resource<'WorkloadEndpoint'>, prefixes: readonly string[]): string | undefined {
  const key = hostVethKey({ ...w.spec, namespace: w.metadata.namespace });
  if (!key || prefixes.length === 0) return undefined;
  try {
    const names = prefixes.map((p) => hostVethName(p, key));
    return names.includes(w.spec.interfaceName) ? w.spec.interfaceName : names[0];
  } catch {
    return undefined; // a prefix hostVethName refuses: the netconf's check reports it
  }
}

/**
 * The evaluator's view of a workload endpoint; `interfaceName` only for endpoints on `nodename`
 * (all when unset): the recorded one, or with `vethPrefixes` (the node agent) the derived one.
 */
export function endpointFromWep(
  w: Resource<'WorkloadEndpoint'>,
  nodename?: string,
  vethPrefixes?: readonly string[],
): EndpointInput {
  const e: EndpointInput = {
    key: w.metadata.name,
    namespace: w.metadata.namespace ?? 'default',
    labels: w.metadata.labels ?? {},
    profiles: w.spec.profiles ?? [],
    addrs: w.spec.ipNetworks.map(addressOf),
    ports: (w.spec.ports ?? []).map((p) => ({ name: p.name, protocol: p.protocol, port: p.port })),
  };
  if (nodename !== undefined && w.spec.node !== nodename) return e;
  const ifname = vethPrefixes ? derivedInterfaceName(w, vethPrefixes) : w.spec.interfaceName;
  if (ifname) {
    e.interfaceName = ifname;
    if (w.spec.containerID) e.id = w.spec.containerID;
    if (w.spec.mac) e.mac = w.spec.mac;
    if (w.spec.pod) e.pod = w.spec.pod;
    if (w.metadata.resourceVersion) e.rev = w.metadata.resourceVersion;
  }
  return e;
}

export function policyId(p: { kind: string; name: string; namespace?: string }): string {
  return p.kind === 'GlobalNetworkPolicy' ? p.name : `${p.namespace}/${p.name}`;
}

const selectorCache = new Map<string, Selector>();
/** Parsed selector (cached); empty or absent means all(). */
export function sel(expr: string | undefined): Selector {
  const e = expr === undefined || expr.trim() === '' ? 'all()' : expr;
  let s = selectorCache.get(e);
  if (!s) {
    s = parseSelector(e);
    if (selectorCache.size > 10000) selectorCache.clear();
    selectorCache.set(e, s);
  }
  return s;
}

/** Endpoint views: profile labels under the endpoint's own, namespace labels from kns.<ns>. */
export function endpointViews(endpoints: EndpointInput[], profiles: Map<string, ProfileInput>): EndpointView[] {
  const nsLabels = new Map<string, Record<string, string>>();
  const nsLabelsOf = (ns: string) => {
    let l = nsLabels.get(ns);
    if (!l) {
      l = {
        [NAMESPACE_NAME_LABEL]: ns,
        ...namespaceLabelsFromProfile(profiles.get(NAMESPACE_PROFILE_PREFIX + ns)?.spec.labelsToApply),
      };
      nsLabels.set(ns, l);
    }
    return l;
  };
  return endpoints.map((e) => {
    const inherited: Record<string, string> = {};
    for (const p of e.profiles) Object.assign(inherited, profiles.get(p)?.spec.labelsToApply ?? {});
    return { ...e, nsLabels: nsLabelsOf(e.namespace), allLabels: { ...inherited, ...e.labels } };
  });
}

/** Whether policy `p` selects endpoint `ep` (for any direction). */
export function policySelects(p: PolicyInput, ep: Pick<EndpointView, 'namespace' | 'allLabels' | 'nsLabels'>): boolean {
  if (p.kind === 'NetworkPolicy') return ep.namespace === p.namespace && sel(p.spec.selector).matches(ep.allLabels);
  if (p.spec.namespaceSelector !== undefined && !sel(p.spec.namespaceSelector).matches(ep.nsLabels)) return false;
  return sel(p.spec.selector).matches(ep.allLabels);
}

/**
 * Which policies take part where. `normal`: a pod's policy, and a host endpoint's for the host's
 * own traffic (every policy but the preDNAT and doNotTrack ones); `forward`: a host endpoint's
 * for traffic forwarded through the host (applyOnForward ones); `preDNAT` and `doNotTrack`: those.
 */
export type PolicyTier = 'normal' | 'forward' | 'preDNAT' | 'doNotTrack';

export function inTier(p: PolicyInput, tier: PolicyTier): boolean {
  const s = p.spec;
  if (tier === 'preDNAT') return !!s.preDNAT;
  if (tier === 'doNotTrack') return !!s.doNotTrack;
  if (s.preDNAT || s.doNotTrack) return false;
  return tier === 'normal' || !!s.applyOnForward;
}

/** Whether `p` takes part in `tier` and selects `ep` for `dir`. */
export function selectsIn(p: PolicyInput, tier: PolicyTier, dir: PolicyType, ep: EndpointView): boolean {
  return inTier(p, tier) && effectiveTypes(p.spec).includes(dir) && policySelects(p, ep);
}

/** Policies in evaluation order: order ascending (unset last), then name. */
export function sortPolicies(policies: PolicyInput[]): PolicyInput[] {
  return [...policies].sort((a, b) =>
    comparePolicies({ order: a.spec.order, name: policyId(a) }, { order: b.spec.order, name: policyId(b) }),
  );
}

/** How a rule's entity selects endpoints, or null when it does not select by labels. */
export interface Selection {
  /** Namespace the selector is limited to; null: any namespace. */
  scope: string | null;
  selector: string;
  namespaceSelector: string | null;
}

/** A namespaced policy's selector stays in its namespace unless namespaceSelector widens it. */
export function entitySelection(e: EntityRule | undefined, p: PolicyInput | undefined): Selection | null {
  if (!e || (e.selector === undefined && e.namespaceSelector === undefined)) return null;
  const scope = e.namespaceSelector === undefined && p?.kind === 'NetworkPolicy' ? p.namespace! : null;
  return { scope, selector: e.selector ?? 'all()', namespaceSelector: e.namespaceSelector ?? null };
}

export function notSelection(e: EntityRule | undefined, p: PolicyInput | undefined): Selection | null {
  if (e?.notSelector === undefined) return null;
  return { scope: p?.kind === 'NetworkPolicy' ? p.namespace! : null, selector: e.notSelector, namespaceSelector: null };
}

export function selectionMatches(s: Selection, e: Pick<EndpointView, 'namespace' | 'allLabels' | 'nsLabels'>): boolean {
  return (
    (s.scope === null || e.namespace === s.scope) &&
    (s.namespaceSelector === null || sel(s.namespaceSelector).matches(e.nsLabels)) &&
    sel(s.selector).matches(e.allLabels)
  );
}

const PROTO_ALIASES: Record<string, Protocol> = {
  TCP: 'TCP',
  UDP: 'UDP',
  SCTP: 'SCTP',
  UDPLITE: 'UDPLite',
  ICMP: 'ICMP',
  ICMPV6: 'ICMPv6',
};
/** A container port's protocol string as a model protocol. */
export function portProtocol(p: string): Protocol | undefined {
  return PROTO_ALIASES[p.toUpperCase()];
}

// ---- evaluation of one connection ----

interface Connection {
  /** ingress: traffic to `endpoint` from `peer`; egress: from `endpoint` to `peer`. */
  direction: 'ingress' | 'egress';
  peerAddr: string;
  protocol: Protocol;
  /** Destination port (ignored for protocols without ports). */
  port?: number;
  /** Source port; without it a rule with source ports or notPorts does not match. */
  sourcePort?: number;
}

export interface Decision {
  verdict: 'allow' | 'deny';
  /** What decided, e.g. `NetworkPolicy x/knp.default.p ingress rule 0 (Allow)`. */
  by: string;
  /** Every step, in order. */
  trace: string[];
  /**
   * The rules that matched, in order (Log ones too), and the default deny that decided, if one
   * did: the last one decided.
   */
  hits: EvalHit[];
}

/** One step of a decision that a flow's policy trace records (./staged.ts turns them into flow hits). */
export type EvalHit =
  | { type: 'policy'; policy: PolicyInput; ruleIndex: number; action: RuleAction }
  | { type: 'profile'; profile: string; ruleIndex: number; action: RuleAction }
  /** Selected by policies for the direction, none of whose rules matched: denied. */
  | { type: 'endOfPolicies' }
  /** Passed to or left to the profiles, none of which allowed it: denied. */
  | { type: 'endOfProfiles' };

/** How traces name a policy: `NetworkPolicy x/p`, `GlobalNetworkPolicy g`, `StagedNetworkPolicy x/p`. */
function policyLabel(p: PolicyInput): string {
  return p.staged ? `${p.staged.kind} ${stagedId(p.staged)}` : `${p.kind} ${policyId(p)}`;
}

/** `ns/name` of a namespaced staged policy, `name` of a global one. */
export function stagedId(s: StagedRef): string {
  return s.namespace !== undefined ? `${s.namespace}/${s.name}` : s.name;
}

function inNets(addr: string, nets: string[]): boolean {
  const ip = tryParseIP(addr);
  if (!ip) return false;
  return nets.some((n) => {
    try {
      const c = parseCidr(n.includes('/') ? n : `${n}/${n.includes(':') ? 128 : 32}`, { strict: false });
      return c.family === ip.family && containsIP(c, ip);
    } catch {
      return false;
    }
  });
}

/** A port, range or named port of `owner` (the destination endpoint, with the connection's protocol). */
function portMatches(x: number | string, port: number, owner: EndpointView | undefined, proto: Protocol): boolean {
  const pp = parsePort(x);
  if (pp.kind === 'range') return port >= pp.first && port <= pp.last;
  return !!owner?.ports?.some(
    (cp) =>
      cp.name === pp.name &&
      cp.port === port &&
      portProtocol(cp.protocol) !== undefined &&
      protocolNumber(portProtocol(cp.protocol)!) === protocolNumber(proto),
  );
}

/** `port`: this side's port of the connection (the destination's, or the source's). */
function entityMatches(
  e: EntityRule | undefined,
  p: PolicyInput | undefined,
  addr: string,
  owner: EndpointView | undefined,
  proto: Protocol,
  port: number | undefined,
  isDst: boolean,
): boolean {
  if (!e) return true;
  const s = entitySelection(e, p);
  if (s && !(owner && selectionMatches(s, owner))) return false;
  const ns = notSelection(e, p);
  if (ns && owner && selectionMatches(ns, owner)) return false;
  if (e.nets?.length && !inNets(addr, e.nets)) return false;
  if (e.notNets?.length && inNets(addr, e.notNets)) return false;
  // Without a source port, a rule with source ports (or notPorts) does not match.
  if (!isDst && port === undefined && (e.ports?.length || e.notPorts?.length)) return false;
  if (e.ports?.length) {
    if (port === undefined) return false;
    if (!e.ports.some((x) => portMatches(x, port, owner, proto))) return false;
  }
  if (e.notPorts?.length && port !== undefined) {
    if (e.notPorts.some((x) => portMatches(x, port, owner, proto))) return false;
  }
  return true;
}

function ruleMatches(
  r: PolicyRule,
  p: PolicyInput | undefined,
  src: { addr: string; ep?: EndpointView },
  dst: { addr: string; ep?: EndpointView },
  proto: Protocol,
  port: number | undefined,
  sourcePort?: number,
): boolean {
  const fam = src.addr.includes(':') ? 6 : 4;
  if (r.ipVersion && r.ipVersion !== fam) return false;
  if (r.protocol !== undefined && protocolNumber(r.protocol) !== protocolNumber(proto)) return false;
  if (r.notProtocol !== undefined && protocolNumber(r.notProtocol) === protocolNumber(proto)) return false;
  return (
    entityMatches(r.source, p, src.addr, src.ep, proto, sourcePort, false) &&
    entityMatches(r.destination, p, dst.addr, dst.ep, proto, port, true)
  );
}

/** The decision of `endpoint`'s policy for one connection, with its trace. */
export function evaluate(
  endpoint: EndpointView,
  all: EndpointView[],
  policies: PolicyInput[],
  profiles: Map<string, ProfileInput>,
  c: Connection,
  tier: PolicyTier = 'normal',
): Decision {
  const dir: PolicyType = c.direction === 'ingress' ? 'Ingress' : 'Egress';
  const peer = all.find((e) => e.addrs.includes(c.peerAddr));
  const self = {
    addr: endpoint.addrs.find((a) => a.includes(':') === c.peerAddr.includes(':')) ?? endpoint.addrs[0] ?? '',
    ep: endpoint,
  };
  const other = { addr: c.peerAddr, ...(peer ? { ep: peer } : {}) };
  const [src, dst] = c.direction === 'ingress' ? [other, self] : [self, other];
  const trace: string[] = [];
  const hits: EvalHit[] = [];
  const key = c.direction;
  const selecting = sortPolicies(policies).filter((p) => selectsIn(p, tier, dir, endpoint));
  let passed = false;
  for (const p of selecting) {
    const name = policyLabel(p);
    const rules = (key === 'ingress' ? p.spec.ingress : p.spec.egress) ?? [];
    let decided: Decision | undefined;
    for (const [i, r] of rules.entries()) {
      if (!ruleMatches(r, p, src, dst, c.protocol, c.port, c.sourcePort)) continue;
      const by = `${name} ${key} rule ${i} (${r.action})`;
      trace.push(`${by} matches`);
      hits.push({ type: 'policy', policy: p, ruleIndex: i, action: r.action });
      if (r.action === 'Log') continue;
      if (r.action === 'Pass') {
        passed = true;
        break;
      }
      decided = { verdict: r.action === 'Allow' ? 'allow' : 'deny', by, trace, hits };
      break;
    }
    if (decided) return decided;
    if (passed) break;
    trace.push(`${name}: no ${key} rule matches`);
  }
  if (selecting.length > 0 && !passed) {
    hits.push({ type: 'endOfPolicies' });
    const by = `selected by ${selecting.length} ${key} polic${selecting.length === 1 ? 'y' : 'ies'}, no rule matched`;
    return { verdict: 'deny', by, trace, hits };
  }
  trace.push(selecting.length ? 'passed to the profiles' : `no policy selects it for ${key}: its profiles decide`);
  for (const name of endpoint.profiles) {
    const pr = profiles.get(name);
    if (!pr) {
      trace.push(`profile ${name} does not exist`);
      continue;
    }
    const rules = (key === 'ingress' ? pr.spec.ingress : pr.spec.egress) ?? [];
    for (const [i, r] of rules.entries()) {
      if (!ruleMatches(r, undefined, src, dst, c.protocol, c.port, c.sourcePort)) continue;
      const by = `Profile ${name} ${key} rule ${i} (${r.action})`;
      trace.push(`${by} matches`);
      hits.push({ type: 'profile', profile: name, ruleIndex: i, action: r.action });
      if (r.action === 'Pass') break; // on to the next profile, as the dataplane does
      if (r.action === 'Allow' || r.action === 'Deny') {
        return { verdict: r.action === 'Allow' ? 'allow' : 'deny', by, trace, hits };
      }
    }
  }
  hits.push({ type: 'endOfProfiles' });
  return { verdict: 'deny', by: 'no profile allows it', trace, hits };
}

/**
 * A host endpoint's decision in one tier, as its chains take it: the host's own traffic
 * (`normal`) is `evaluate`'s (no policy and no profile: denied); in the other tiers a host
 * endpoint no policy of the tier selects is not affected (forwarded traffic, before DNAT), and
 * untracked policy that matches no rule leaves the packet to tracked policy.
 */
export function evaluateHost(
  endpoint: EndpointView,
  all: EndpointView[],
  policies: PolicyInput[],
  profiles: Map<string, ProfileInput>,
  c: Connection,
  tier: PolicyTier,
): Decision {
  if (tier === 'normal') return evaluate(endpoint, all, policies, profiles, c, tier);
  const dir: PolicyType = c.direction === 'ingress' ? 'Ingress' : 'Egress';
  const any = policies.some((p) => selectsIn(p, tier, dir, endpoint));
  if (!any || (tier === 'preDNAT' && c.direction === 'egress')) {
    return {
      verdict: 'allow',
      by: `no ${tier} policy selects it for ${c.direction}: not affected`,
      trace: [],
      hits: [],
    };
  }
  // Profiles take part in the host's own traffic only: a Pass here is not affected.
  const d = evaluate({ ...endpoint, profiles: [] }, all, policies, profiles, c, tier);
  const allow = (by: string): Decision => ({ verdict: 'allow', by, trace: d.trace, hits: d.hits });
  if (d.by === 'no profile allows it') return allow(`passed: not affected by ${tier} policy`);
  if (tier === 'doNotTrack' && d.by.startsWith('selected by'))
    return allow('no untracked rule matches: tracked policy decides');
  return d;
}

/** One packet's flow as the dataplane sees it: source and (after DNAT) destination. */
interface Flow {
  src: string;
  dst: string;
  protocol: Protocol;
  /** Destination port (ignored for protocols without ports). */
  port?: number;
  sourcePort?: number;
}

/**
 * Both decisions a flow needs, as the dataplane takes them: the egress of the endpoint with the
 * source address and the ingress of the endpoint with the destination address, each only for an
 * endpoint `enforced` admits (a node enforces its own endpoints' policy only); a side without
 * such an endpoint is absent. The flow is allowed when every present side allows it.
 */
export function flowDecisions(
  all: EndpointView[],
  policies: PolicyInput[],
  profiles: Map<string, ProfileInput>,
  f: Flow,
  enforced: (ep: EndpointView) => boolean = () => true,
): { egress?: Decision; ingress?: Decision } {
  const ports = {
    ...(f.port !== undefined ? { port: f.port } : {}),
    ...(f.sourcePort !== undefined ? { sourcePort: f.sourcePort } : {}),
  };
  const from = all.find((e) => e.addrs.includes(f.src));
  const to = all.find((e) => e.addrs.includes(f.dst));
  const decide = (ep: EndpointView, direction: 'egress' | 'ingress', peerAddr: string) =>
    evaluate(ep, all, policies, profiles, { direction, peerAddr, protocol: f.protocol, ...ports });
  const out: { egress?: Decision; ingress?: Decision } = {};
  if (from && enforced(from)) out.egress = decide(from, 'egress', f.dst);
  if (to && enforced(to)) out.ingress = decide(to, 'ingress', f.src);
  return out;
}
