// Kubernetes networking.k8s.io/v1 NetworkPolicy -> our NetworkPolicy
// `knp.default.<name>` in the same namespace (src/model/policy.ts). A pure
// function shared by the policy controller (mirrors on etcd) and the
// kubernetes datastore (derived on read), so both show the same object.
//
// Semantics kept from Kubernetes:
// - the policy selects pods of its namespace (podSelector; `{}` = all of them);
// - policyTypes missing: Ingress, plus Egress when egress rules exist (the
//   API server's defaulting, repeated here for objects read from elsewhere);
// - a rule allows traffic matching any of its peers AND any of its ports;
//   no peers = from/to anywhere, no ports = every port and protocol, so the
//   rule becomes the cross product peers x protocols (our rules have one
//   protocol and one peer each);
// - peers: podSelector (same namespace), namespaceSelector (all pods of those
//   namespaces), both (those pods of those namespaces), ipBlock (cidr minus
//   except); ports: number, named port, port..endPort, protocol default TCP;
// - a direction in policyTypes with no rules denies everything in it.
import { z } from 'zod';
import { API_VERSION, type Resource } from './resources.js';
import {
  stagedSpecSchema,
  type EntityRule,
  type NetworkPolicySpec,
  type PolicyRule,
  type PolicyType,
  type Port,
} from './policy.js';
import type {
  KubeLabelSelector,
  KubeNetworkPolicy,
  KubeNetworkPolicyPeer,
  KubeNetworkPolicyPort,
  KubeNetworkPolicySpec,
} from './k8s-networkpolicy-types.js';
export type { KubeNetworkPolicy } from './k8s-networkpolicy-types.js';

export const K8S_POLICY_PREFIX = 'knp.default.';
/** Kubernetes policies sit after explicitly ordered ones of ours (Calico uses the same order). */
const K8S_POLICY_ORDER = 1000;
const ORCHESTRATOR_SELECTOR = "netplugin.org/orchestrator == 'k8s'";

/** Thrown for a policy the API server would have rejected (the message names the field). */
export class PolicyConversionError extends Error {
  override name = 'PolicyConversionError';
}

export function k8sPolicyName(name: string): string {
  return `${K8S_POLICY_PREFIX}${name}`;
}

const quote = (v: string) => `'${v}'`;

/** A Kubernetes LabelSelector in our selector language; empty selects everything: `all()`. */
export function convertLabelSelector(sel: KubeLabelSelector | undefined, field: string): string {
  const terms: string[] = [];
  for (const [k, v] of Object.entries(sel?.matchLabels ?? {}).sort(([a], [b]) => a.localeCompare(b)))
    terms.push(`${k} == ${quote(v)}`);
  for (const [i, e] of (sel?.matchExpressions ?? []).entries()) {
    const values = (e.values ?? []).map(quote).join(', ');
    switch (e.operator) {
      case 'In':
        terms.push(`${e.key} in {${values}}`);
        break;
      case 'NotIn':
        terms.push(`${e.key} not in {${values}}`);
        break;
      case 'Exists':
        terms.push(`has(${e.key})`);
        break;
      case 'DoesNotExist':
        terms.push(`!has(${e.key})`);
        break;
      default:
        throw new PolicyConversionError(
          `${field}.matchExpressions[${i}].operator=${JSON.stringify(e.operator)} is not one of In, NotIn, Exists, ` +
            `DoesNotExist`,
        );
    }
  }
  return terms.length ? terms.join(' && ') : 'all()';
}

/** policyTypes as the API server defaults them. */
export function k8sPolicyTypes(spec: KubeNetworkPolicy['spec']): PolicyType[] {
  const given = (spec?.policyTypes ?? []).filter((t): t is PolicyType => t === 'Ingress' || t === 'Egress');
  if (given.length) return [...new Set(given)];
  return ['Ingress', ...((spec?.egress?.length ?? 0) > 0 ? (['Egress'] as const) : [])];
}

function convertPeer(p: KubeNetworkPolicyPeer, field: string): EntityRule {
  if (p.ipBlock) {
    if (p.podSelector || p.namespaceSelector)
      throw new PolicyConversionError(`${field}: ipBlock cannot be combined with podSelector or namespaceSelector`);
    return { nets: [p.ipBlock.cidr], ...(p.ipBlock.except?.length ? { notNets: [...p.ipBlock.except] } : {}) };
  }
  if (p.namespaceSelector) {
    // Every pod (of ours) in the matching namespaces, or those the podSelector picks.
    const pods = p.podSelector ? convertLabelSelector(p.podSelector, `${field}.podSelector`) : ORCHESTRATOR_SELECTOR;
    return {
      selector: pods === 'all()' ? ORCHESTRATOR_SELECTOR : pods,
      namespaceSelector: convertLabelSelector(p.namespaceSelector, `${field}.namespaceSelector`),
    };
  }
  if (p.podSelector) {
    const pods = convertLabelSelector(p.podSelector, `${field}.podSelector`);
    return { selector: pods === 'all()' ? ORCHESTRATOR_SELECTOR : pods };
  }
  throw new PolicyConversionError(`${field}: a peer needs podSelector, namespaceSelector or ipBlock`);
}

type ProtocolPorts = { protocol: 'TCP' | 'UDP' | 'SCTP'; ports?: Port[] };

/** Ports grouped by protocol; a protocol listed without a port allows all its ports. */
function convertPorts(ports: KubeNetworkPolicyPort[] | undefined, field: string): ProtocolPorts[] | undefined {
  if (!ports?.length) return undefined;
  const by = new Map<ProtocolPorts['protocol'], Port[] | 'all'>();
  for (const [i, p] of ports.entries()) {
    const protocol = (p.protocol ?? 'TCP').toUpperCase();
    if (protocol !== 'TCP' && protocol !== 'UDP' && protocol !== 'SCTP')
      throw new PolicyConversionError(
        `${field}[${i}].protocol=${JSON.stringify(p.protocol)} is not one of TCP, UDP, SCTP`,
      );
    let port: Port | undefined;
    if (p.port !== undefined && p.port !== null) {
      if (typeof p.port === 'number' || /^\d+$/.test(p.port)) {
        const n = Number(p.port);
        if (!(n >= 1 && n <= 65535))
          throw new PolicyConversionError(`${field}[${i}].port=${p.port} is not a port from 1 to 65535`);
        if (p.endPort !== undefined && p.endPort !== null) {
          if (!(p.endPort >= n && p.endPort <= 65535))
            throw new PolicyConversionError(`${field}[${i}].endPort=${p.endPort} must be from port (${n}) to 65535`);
          port = p.endPort === n ? n : `${n}:${p.endPort}`;
        } else port = n;
      } else {
        if (p.endPort !== undefined && p.endPort !== null)
          throw new PolicyConversionError(
            `${field}[${i}].endPort needs a numeric port, not the named port ${JSON.stringify(p.port)}`,
          );
        port = p.port;
      }
    }
    const cur = by.get(protocol);
    if (port === undefined || cur === 'all') by.set(protocol, 'all');
    else by.set(protocol, [...(cur ?? []), ...(cur?.includes(port) ? [] : [port])]);
  }
  return [...by].map(([protocol, ps]) => (ps === 'all' ? { protocol } : { protocol, ports: ps }));
}

function convertRules(
  rules: Array<{ peers?: KubeNetworkPolicyPeer[] | undefined; ports?: KubeNetworkPolicyPort[] | undefined }>,
  dir: 'ingress' | 'egress',
): PolicyRule[] {
  const out: PolicyRule[] = [];
  const peerField = dir === 'ingress' ? 'from' : 'to';
  for (const [i, r] of rules.entries()) {
    const peers = r.peers?.length
      ? r.peers.map((p, j) => convertPeer(p, `spec.${dir}[${i}].${peerField}[${j}]`))
      : [undefined];
    const protos = convertPorts(r.ports, `spec.${dir}[${i}].ports`) ?? [undefined];
    for (const proto of protos) {
      for (const peer of peers) {
        const rule: PolicyRule = { action: 'Allow' };
        if (proto) rule.protocol = proto.protocol;
        const dstPorts = proto?.ports ? { ports: proto.ports } : undefined;
        if (dir === 'ingress') {
          if (peer) rule.source = peer;
          if (dstPorts) rule.destination = dstPorts;
        } else if (peer || dstPorts) {
          rule.destination = { ...peer, ...dstPorts };
        }
        out.push(rule);
      }
    }
  }
  return out;
}

/** The policy's selector: its pods, and only pods (endpoints of the k8s orchestrator). */
function policySelector(podSelector: KubeLabelSelector | undefined): string {
  const pods = convertLabelSelector(podSelector, 'spec.podSelector');
  return pods === 'all()' ? ORCHESTRATOR_SELECTOR : `${ORCHESTRATOR_SELECTOR} && ${pods}`;
}

/** Converts one Kubernetes NetworkPolicy; throws PolicyConversionError naming the bad field. */
export function convertK8sNetworkPolicy(np: KubeNetworkPolicy): Resource<'NetworkPolicy'> {
  const spec = np.spec ?? {};
  const types = k8sPolicyTypes(spec);
  const out: NetworkPolicySpec = { order: K8S_POLICY_ORDER, selector: policySelector(spec.podSelector), types };
  if (types.includes('Ingress'))
    out.ingress = convertRules(
      (spec.ingress ?? []).map((r) => ({ peers: r.from, ports: r.ports })),
      'ingress',
    );
  if (types.includes('Egress'))
    out.egress = convertRules(
      (spec.egress ?? []).map((r) => ({ peers: r.to, ports: r.ports })),
      'egress',
    );
  return {
    apiVersion: API_VERSION,
    kind: 'NetworkPolicy',
    metadata: { name: k8sPolicyName(np.metadata.name), namespace: np.metadata.namespace || 'default' },
    spec: out,
  };
}

// --- the spec as a schema (StagedKubernetesNetworkPolicy carries it) ----------------------

const labelSelectorSchema = z
  .object({
    matchLabels: z.record(z.string()).optional(),
    matchExpressions: z
      .array(
        z
          .object({
            key: z.string().min(1),
            operator: z.enum(['In', 'NotIn', 'Exists', 'DoesNotExist']),
            values: z.array(z.string()).optional(),
          })
          .passthrough(),
      )
      .optional(),
  })
  .passthrough();

const peerSchema = z
  .object({
    podSelector: labelSelectorSchema.optional(),
    namespaceSelector: labelSelectorSchema.optional(),
    ipBlock: z
      .object({ cidr: z.string().min(1), except: z.array(z.string()).optional() })
      .passthrough()
      .optional(),
  })
  .passthrough();

const k8sPortSchema = z
  .object({
    protocol: z.enum(['TCP', 'UDP', 'SCTP']).optional(),
    port: z.union([z.number().int().min(1).max(65535), z.string().min(1)]).optional(),
    endPort: z.number().int().min(1).max(65535).optional(),
  })
  .passthrough();

const peersSchema = z.array(peerSchema).optional();
const portsSchema = z.array(k8sPortSchema).optional();

/**
 * A networking.k8s.io/v1 NetworkPolicy spec, with the checks of the API server that the
 * conversion to our model relies on (the same messages as convertK8sNetworkPolicy's).
 */
const k8sNetworkPolicySpecSchema = z
  .object({
    podSelector: labelSelectorSchema.optional(),
    policyTypes: z.array(z.enum(['Ingress', 'Egress'])).optional(),
    ingress: z.array(z.object({ from: peersSchema, ports: portsSchema }).passthrough()).optional(),
    egress: z.array(z.object({ to: peersSchema, ports: portsSchema }).passthrough()).optional(),
  })
  .passthrough();

const stagedK8sShape = stagedSpecSchema(k8sNetworkPolicySpecSchema);
export const stagedKubernetesNetworkPolicySpecSchema = stagedK8sShape.superRefine((spec, ctx) => {
  if (spec.stagedAction === 'Delete') return;
  try {
    convertK8sNetworkPolicy({ metadata: { name: 'staged' }, spec: spec as KubeNetworkPolicySpec });
  } catch (e) {
    if (!(e instanceof PolicyConversionError)) throw e;
    // The message starts with the field (`spec.ingress[0].from[1]: ...`, `spec.egress[0].ports[0].port=0 is ...`).
    const m = /^spec\.([\w.[\]]+?)(?:: |=)([\s\S]*)$/.exec(e.message);
    const path = m
      ? m[1]!
          .split(/[.[\]]+/)
          .filter(Boolean)
          .map((p) => (/^\d+$/.test(p) ? Number(p) : p))
      : [];
    ctx.addIssue({ code: z.ZodIssueCode.custom, path, message: m ? m[2]! : e.message });
  }
});
