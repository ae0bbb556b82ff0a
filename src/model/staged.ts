// Staged policies: StagedNetworkPolicy, StagedGlobalNetworkPolicy and StagedKubernetesNetworkPolicy
// carry the spec of the enforced kind plus `stagedAction` (Set: create or replace the enforced
// policy of the same namespace and name; Delete: remove it). No node enforces them. They answer
// "what would this change do?" before it is made: this file evaluates a connection against the
// policy set as it would be with every staged change applied (the pending trace of a flow, and
// `netpluginctl policy explain --staged`), with the same pure evaluator the enforced set uses
// (./policy-eval.ts), and builds the enforced object a promotion writes.
import { API_VERSION, type Resource } from './resources.js';
import type { Protocol, StagedAction } from './policy.js';
import {
  convertK8sNetworkPolicy,
  K8S_POLICY_PREFIX,
  k8sPolicyName,
  PolicyConversionError,
} from './k8s-networkpolicy.js';
import type { KubeNetworkPolicy } from './k8s-networkpolicy-types.js';
import { DEFAULT_TIER, END_OF_PROFILES_HIT, END_OF_TIER_HIT, type PolicyHit } from './policy-hit.js';
import {
  evaluate,
  policySelects,
  sortPolicies,
  stagedId,
  type Decision,
  type EndpointView,
  type EvalHit,
  type PolicyInput,
  type ProfileInput,
  type StagedRef,
} from './policy-eval.js';

type StagedKind = StagedRef['kind'];
export const STAGED_KINDS: readonly StagedKind[] = [
  'StagedNetworkPolicy',
  'StagedGlobalNetworkPolicy',
  'StagedKubernetesNetworkPolicy',
];

export type StagedPolicy =
  | Resource<'StagedNetworkPolicy'>
  | Resource<'StagedGlobalNetworkPolicy'>
  | Resource<'StagedKubernetesNetworkPolicy'>;

export function isStagedKind(kind: string): kind is StagedKind {
  return (STAGED_KINDS as readonly string[]).includes(kind);
}

/** What a staged object does; unset is Set. */
export function stagedAction(p: StagedPolicy): StagedAction {
  return p.spec.stagedAction ?? 'Set';
}

/** How traces name a staged object. */
export function stagedRef(p: StagedPolicy): StagedRef {
  return p.kind === 'StagedGlobalNetworkPolicy'
    ? { kind: p.kind, name: p.metadata.name }
    : { kind: p.kind, name: p.metadata.name, namespace: p.metadata.namespace ?? 'default' };
}

/** The enforced policy (as the evaluator identifies it) that a staged object sets or deletes. */
export function stagedTarget(p: StagedPolicy): { kind: PolicyInput['kind']; name: string; namespace?: string } {
  const ns = p.metadata.namespace ?? 'default';
  if (p.kind === 'StagedGlobalNetworkPolicy') return { kind: 'GlobalNetworkPolicy', name: p.metadata.name };
  if (p.kind === 'StagedNetworkPolicy') return { kind: 'NetworkPolicy', name: p.metadata.name, namespace: ns };
  return { kind: 'NetworkPolicy', name: k8sPolicyName(p.metadata.name), namespace: ns };
}

/** The spec without `stagedAction`: the enforced kind's spec. */
function enforcedSpec<S extends { stagedAction?: StagedAction }>(spec: S): Omit<S, 'stagedAction'> {
  const { stagedAction: _omit, ...rest } = spec;
  return rest;
}

/**
 * The object a promotion of a staged Set writes: a NetworkPolicy or GlobalNetworkPolicy of the
 * same namespace and name, or a networking.k8s.io/v1 NetworkPolicy for a
 * StagedKubernetesNetworkPolicy. The staged object's labels and annotations go with it.
 */
export function promotedObject(
  p: StagedPolicy,
):
  | { kind: 'NetworkPolicy' | 'GlobalNetworkPolicy'; res: Resource<'NetworkPolicy'> | Resource<'GlobalNetworkPolicy'> }
  | { kind: 'KubernetesNetworkPolicy'; object: KubeNetworkPolicy & { apiVersion: string; kind: string } } {
  const meta = {
    name: p.metadata.name,
    ...(p.metadata.labels ? { labels: { ...p.metadata.labels } } : {}),
    ...(p.metadata.annotations ? { annotations: { ...p.metadata.annotations } } : {}),
  };
  const ns = p.metadata.namespace ?? 'default';
  switch (p.kind) {
    case 'StagedNetworkPolicy':
      return {
        kind: 'NetworkPolicy',
        res: {
          apiVersion: API_VERSION,
          kind: 'NetworkPolicy',
          metadata: { ...meta, namespace: ns },
          spec: enforcedSpec(p.spec),
        },
      };
    case 'StagedGlobalNetworkPolicy':
      return {
        kind: 'GlobalNetworkPolicy',
        res: { apiVersion: API_VERSION, kind: 'GlobalNetworkPolicy', metadata: meta, spec: enforcedSpec(p.spec) },
      };
    case 'StagedKubernetesNetworkPolicy': {
      const spec = enforcedSpec(p.spec);
      return {
        kind: 'KubernetesNetworkPolicy',
        // The API server requires podSelector; {} (every pod of the namespace) is what an unset one means here.
        object: {
          apiVersion: 'networking.k8s.io/v1',
          kind: 'NetworkPolicy',
          metadata: { ...meta, namespace: ns },
          spec: { ...spec, podSelector: spec.podSelector ?? {} },
        },
      };
    }
  }
}

/**
 * A staged Set as the evaluator's input, in place of its target; throws PolicyConversionError for a
 * malformed Kubernetes spec.
 */
function stagedPolicyInput(p: StagedPolicy): PolicyInput {
  const staged = stagedRef(p);
  const ns = p.metadata.namespace ?? 'default';
  switch (p.kind) {
    case 'StagedNetworkPolicy':
      return { kind: 'NetworkPolicy', name: p.metadata.name, namespace: ns, spec: enforcedSpec(p.spec), staged };
    case 'StagedGlobalNetworkPolicy':
      return { kind: 'GlobalNetworkPolicy', name: p.metadata.name, spec: enforcedSpec(p.spec), staged };
    case 'StagedKubernetesNetworkPolicy': {
      const np = convertK8sNetworkPolicy({
        metadata: { name: p.metadata.name, namespace: ns },
        spec: enforcedSpec(p.spec),
      });
      return { kind: 'NetworkPolicy', name: np.metadata.name, namespace: ns, spec: np.spec, staged };
    }
  }
}

const targetKey = (t: { kind: string; name: string; namespace?: string | undefined }) =>
  `${t.kind}\u0000${t.namespace ?? ''}\u0000${t.name}`;

export interface PendingPolicies {
  /** The enforced policies with every staged change applied, in evaluation order; staged Sets carry `staged`. */
  policies: PolicyInput[];
  /** Staged objects left out because they cannot be evaluated (a Kubernetes spec that does not convert), with why. */
  skipped: Array<{ ref: StagedRef; reason: string }>;
}

/**
 * The policy set as it would be with the staged changes applied: a staged Set replaces the
 * enforced policy of its kind, namespace and name (or adds one), a staged Delete removes it.
 * Compute it once per change of the policies, then evaluate flows against it (evaluateFlow).
 */
export function pendingPolicies(enforced: readonly PolicyInput[], staged: readonly StagedPolicy[]): PendingPolicies {
  const byTarget = new Map<string, PolicyInput | null>();
  const skipped: PendingPolicies['skipped'] = [];
  // Sorted so that two staged objects with one target (a StagedNetworkPolicy named knp.default.x beside a
  // StagedKubernetesNetworkPolicy x) resolve the same way on every node: the later kind, then name, wins.
  const ordered = [...staged].sort((a, b) => targetKey(stagedRef(a)).localeCompare(targetKey(stagedRef(b))));
  for (const s of ordered) {
    const key = targetKey(stagedTarget(s));
    if (stagedAction(s) === 'Delete') {
      byTarget.set(key, null);
      continue;
    }
    try {
      byTarget.set(key, stagedPolicyInput(s));
    } catch (e) {
      if (!(e instanceof PolicyConversionError)) throw e;
      skipped.push({ ref: stagedRef(s), reason: e.message });
    }
  }
  const policies: PolicyInput[] = [];
  for (const p of enforced) {
    const key = targetKey(p);
    if (!byTarget.has(key)) {
      policies.push(p);
      continue;
    }
    const replacement = byTarget.get(key);
    if (replacement) policies.push(replacement);
    byTarget.delete(key);
  }
  for (const added of byTarget.values()) if (added) policies.push(added);
  // In evaluation order once, so each flow's evaluation sorts a sorted list (linear).
  return { policies: sortPolicies(policies), skipped };
}

/**
 * A policy hit as flow records carry it: the staged object's own name for a staged policy, the
 * Kubernetes policy's for a mirror.
 */
export function hitOfPolicy(p: PolicyInput, action: PolicyHit['action'], ruleIndex: number): PolicyHit {
  if (p.staged) {
    const k8s = p.staged.kind === 'StagedKubernetesNetworkPolicy';
    return {
      kind: p.staged.kind,
      namespace: p.staged.namespace ?? '',
      name: p.staged.name,
      tier: k8s ? '' : DEFAULT_TIER,
      action,
      ruleIndex,
    };
  }
  if (p.kind === 'GlobalNetworkPolicy')
    return { kind: p.kind, namespace: '', name: p.name, tier: DEFAULT_TIER, action, ruleIndex };
  if (p.name.startsWith(K8S_POLICY_PREFIX)) {
    return {
      kind: 'KubernetesNetworkPolicy',
      namespace: p.namespace ?? 'default',
      name: p.name.slice(K8S_POLICY_PREFIX.length),
      tier: '',
      action,
      ruleIndex,
    };
  }
  return {
    kind: 'NetworkPolicy',
    namespace: p.namespace ?? 'default',
    name: p.name,
    tier: DEFAULT_TIER,
    action,
    ruleIndex,
  };
}

/** The flow hits of a decision, in order (Log rules record and go on: they are not hits); the last one decided. */
export function policyHits(hits: readonly EvalHit[]): PolicyHit[] {
  const out: PolicyHit[] = [];
  for (const h of hits) {
    if (h.type === 'endOfPolicies') out.push({ ...END_OF_TIER_HIT });
    else if (h.type === 'endOfProfiles') out.push({ ...END_OF_PROFILES_HIT });
    else if (h.action === 'Log') continue;
    else if (h.type === 'policy') out.push(hitOfPolicy(h.policy, h.action, h.ruleIndex));
    else
      out.push({ kind: 'Profile', namespace: '', name: h.profile, tier: '', action: h.action, ruleIndex: h.ruleIndex });
  }
  return out;
}

/** One side of a flow: its address and, when it is an endpoint the node knows, its view (endpointViews). */
interface FlowSide {
  addr: string;
  endpoint?: EndpointView | undefined;
}

/** A flow as a reporter sees it. */
export interface FlowToEvaluate {
  /** Src: the source endpoint's egress policy decides; Dst: the destination endpoint's ingress policy. */
  reporter: 'Src' | 'Dst';
  source: FlowSide;
  dest: FlowSide;
  protocol: Protocol;
  /** Destination port (ignored for protocols without ports). */
  port?: number | undefined;
  sourcePort?: number | undefined;
}

interface FlowVerdict {
  action: 'Allow' | 'Deny';
  /** The trace, as flow records carry it; the last hit decided. */
  hits: PolicyHit[];
  decision: Decision;
}

/** Per policy set and endpoint view, the policies selecting it: most flows of a flush share their endpoints. */
const selectingCache = new WeakMap<readonly PolicyInput[], WeakMap<EndpointView, PolicyInput[]>>();

function selectingOf(policies: readonly PolicyInput[], ep: EndpointView): PolicyInput[] {
  let byView = selectingCache.get(policies);
  if (!byView) selectingCache.set(policies, (byView = new WeakMap()));
  let sel = byView.get(ep);
  if (!sel) byView.set(ep, (sel = policies.filter((p) => policySelects(p, ep))));
  return sel;
}

/**
 * The verdict of `policies` (the enforced set, or pendingPolicies(...).policies) for one flow,
 * from the reporter's side: the egress of the source endpoint (Src) or the ingress of the
 * destination endpoint (Dst). Undefined when that side is not an endpoint (no policy of ours
 * decides there). Pure: the agent calls it for each flow it reports to fill the pending trace.
 * The policy list and the endpoint views are taken as immutable (new ones on a change, as
 * endpointViews makes them): which policies select a view is remembered per list and view.
 */
export function evaluateFlow(
  policies: readonly PolicyInput[],
  profiles: ReadonlyMap<string, ProfileInput>,
  f: FlowToEvaluate,
): FlowVerdict | undefined {
  const self = f.reporter === 'Src' ? f.source : f.dest;
  const peer = f.reporter === 'Src' ? f.dest : f.source;
  if (!self.endpoint) return undefined;
  const all = peer.endpoint ? [self.endpoint, peer.endpoint] : [self.endpoint];
  const selecting = selectingOf(policies, self.endpoint);
  const decision = evaluate(self.endpoint, all, selecting, profiles as Map<string, ProfileInput>, {
    direction: f.reporter === 'Src' ? 'egress' : 'ingress',
    peerAddr: peer.addr,
    protocol: f.protocol,
    ...(f.port !== undefined ? { port: f.port } : {}),
    ...(f.sourcePort !== undefined ? { sourcePort: f.sourcePort } : {}),
  });
  return { action: decision.verdict === 'allow' ? 'Allow' : 'Deny', hits: policyHits(decision.hits), decision };
}

/**
 * The pending trace of a flow: what the policy set would decide with the staged changes applied
 * (`pending` from pendingPolicies). Empty when the reporter's side is not an endpoint. With no
 * staged policy it equals the enforced trace; the agent may then leave it empty.
 */
export function pendingTrace(
  pending: PendingPolicies,
  profiles: ReadonlyMap<string, ProfileInput>,
  f: FlowToEvaluate,
): PolicyHit[] {
  return evaluateFlow(pending.policies, profiles, f)?.hits ?? [];
}

/** `StagedNetworkPolicy x/p` for messages. */
export function stagedLabel(p: StagedPolicy): string {
  return `${p.kind} ${stagedId(stagedRef(p))}`;
}
