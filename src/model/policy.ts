// The policy model the node agent enforces (netplugin.org/v3): NetworkPolicy
// (namespaced), GlobalNetworkPolicy (cluster-wide) and Profile. Kubernetes
// NetworkPolicy reaches the agent converted into this model (knp.default.*),
// namespaces and service accounts as profiles (kns.*, ksa.*).
//
// Evaluation (docs/policy.md): for each direction of an endpoint, the policies
// that select it and have that direction in `types` are walked in `order`
// (lower first, unset last, ties by name); within a policy the first rule that
// matches decides: Allow and Deny are final, Log records and goes on, Pass skips
// the remaining policies to the profiles. An endpoint selected by at least one
// policy for a direction and matched by no rule is denied; an endpoint selected
// by none falls to its profiles (their rules in order; kns.*/ksa.* allow).
import { z } from 'zod';
import { parseSelector, SelectorParseError } from '../selector/index.js';

const RULE_ACTIONS = ['Allow', 'Deny', 'Pass', 'Log'] as const;
export type RuleAction = (typeof RULE_ACTIONS)[number];

const POLICY_TYPES = ['Ingress', 'Egress'] as const;
export type PolicyType = (typeof POLICY_TYPES)[number];

/** Protocol names the model accepts; a number 1-255 is an IP protocol number. */
export const PROTOCOL_NAMES = ['TCP', 'UDP', 'ICMP', 'ICMPv6', 'SCTP', 'UDPLite'] as const;
type ProtocolName = (typeof PROTOCOL_NAMES)[number];
export type Protocol = ProtocolName | number;

/** Protocol numbers for the names (IANA). */
const PROTOCOL_NUMBERS: Record<ProtocolName, number> = {
  TCP: 6,
  UDP: 17,
  ICMP: 1,
  ICMPv6: 58,
  SCTP: 132,
  UDPLite: 136,
};

/**
 * A port: a number, a range "first:last" (inclusive), or the name of a named
 * port (a container port name, resolved per destination endpoint).
 */
export type Port = number | string;

export interface EntityRule {
  /** Endpoints whose labels match (in a namespaced policy: within its namespace unless namespaceSelector is set). */
  selector?: string;
  notSelector?: string;
  /** Namespaces whose labels match (the kns.<namespace> profile's labels). */
  namespaceSelector?: string;
  nets?: string[];
  notNets?: string[];
  ports?: Port[];
  notPorts?: Port[];
}

export interface PolicyRule {
  action: RuleAction;
  protocol?: Protocol;
  notProtocol?: Protocol;
  ipVersion?: 4 | 6;
  source?: EntityRule;
  destination?: EntityRule;
  /** Free text kept with the rule; shown in `nft list` comments and `policy explain`. */
  metadata?: { annotations?: Record<string, string> };
}

export interface NetworkPolicySpec {
  order?: number;
  selector?: string;
  types?: PolicyType[];
  ingress?: PolicyRule[];
  egress?: PolicyRule[];
}

export interface GlobalNetworkPolicySpec extends NetworkPolicySpec {
  /** Restricts `selector` to endpoints in the namespaces it matches. */
  namespaceSelector?: string;
  /** On host endpoints: also for traffic forwarded through the host (to and from pods too). */
  applyOnForward?: boolean;
  /** On host endpoints: ingress before DNAT (needs applyOnForward; ingress only). */
  preDNAT?: boolean;
  /** On host endpoints: before conntrack, untracked (needs applyOnForward). */
  doNotTrack?: boolean;
}

/**
 * The rules on the host endpoint fields of a GlobalNetworkPolicy spec (also
 * CEL rules of its CRD, src/datastore/crds.ts), each naming its field.
 */
function hostPolicyProblems(spec: GlobalNetworkPolicySpec): Array<{ path: string; message: string }> {
  const out: Array<{ path: string; message: string }> = [];
  if (spec.preDNAT && spec.doNotTrack) {
    out.push({ path: 'preDNAT', message: 'preDNAT and doNotTrack cannot both be true; use two policies' });
  }
  if (spec.preDNAT && !spec.applyOnForward) {
    const message = 'must be true with preDNAT: true (pre-DNAT policy also sees forwarded traffic)';
    out.push({ path: 'applyOnForward', message });
  }
  if (spec.doNotTrack && !spec.applyOnForward) {
    const message = 'must be true with doNotTrack: true (untracked policy also sees forwarded traffic)';
    out.push({ path: 'applyOnForward', message });
  }
  if (spec.preDNAT && (spec.egress?.length || spec.types?.includes('Egress'))) {
    const message = 'a preDNAT policy has ingress rules only (DNAT happens on the way in)';
    out.push({ path: spec.egress?.length ? 'egress' : 'types', message });
  }
  return out;
}

/**
 * What a staged policy does to the enforced policy of its name when promoted (and what the
 * pending trace of a flow shows meanwhile): Set creates or replaces it with the staged spec,
 * Delete removes it. Unset means Set.
 */
const STAGED_ACTIONS = ['Set', 'Delete'] as const;
export type StagedAction = (typeof STAGED_ACTIONS)[number];

/** A StagedNetworkPolicy: the spec of the NetworkPolicy of the same namespace and name it stages. */
export interface StagedNetworkPolicySpec extends NetworkPolicySpec {
  stagedAction?: StagedAction;
}

/** A StagedGlobalNetworkPolicy: the spec of the GlobalNetworkPolicy of the same name it stages. */
export interface StagedGlobalNetworkPolicySpec extends GlobalNetworkPolicySpec {
  stagedAction?: StagedAction;
}

export interface ProfileSpec {
  /** Labels every endpoint naming this profile inherits (its own labels win). */
  labelsToApply?: Record<string, string>;
  ingress?: PolicyRule[];
  egress?: PolicyRule[];
}

// --- validation -------------------------------------------------------------

const selectorText = z.string().superRefine((s, ctx) => {
  try {
    parseSelector(s);
  } catch (e) {
    const msg = e instanceof SelectorParseError ? e.message.split('\n')[0] : (e as Error).message;
    ctx.addIssue({ code: z.ZodIssueCode.custom, message: `invalid selector ${JSON.stringify(s)}: ${msg}` });
  }
});

const CIDR_RE = /^([0-9]{1,3}(\.[0-9]{1,3}){3}|[0-9a-fA-F:]*:[0-9a-fA-F:.]*)(\/\d{1,3})?$/;
const net = z.string().regex(CIDR_RE, 'expected an address or CIDR such as 10.0.0.0/16 or fd00::/64');

const PORT_RANGE_RE = /^(\d{1,5}):(\d{1,5})$/;
const PORT_NAME_RE = /^[a-z0-9]([a-z0-9-]{0,13}[a-z0-9])?$/i;

const portSchema = z.union([
  z.number().int().min(0).max(65535),
  z.string().superRefine((s, ctx) => {
    const r = PORT_RANGE_RE.exec(s);
    if (r) {
      const a = Number(r[1]);
      const b = Number(r[2]);
      if (a > 65535 || b > 65535 || a > b)
        ctx.addIssue({
          code: z.ZodIssueCode.custom,
          message: `port range "${s}" must be "first:last" with 0 <= first <= last <= 65535`,
        });
      return;
    }
    if (/^\d+$/.test(s)) {
      if (Number(s) > 65535) ctx.addIssue({ code: z.ZodIssueCode.custom, message: `port ${s} is above 65535` });
      return;
    }
    if (!PORT_NAME_RE.test(s))
      ctx.addIssue({
        code: z.ZodIssueCode.custom,
        message:
          `port "${s}" is neither a number, a range "first:last" nor a port name (letters, digits, '-', at ` +
          `most 15)`,
      });
  }),
]);

const protocolSchema = z.union([z.enum(PROTOCOL_NAMES), z.number().int().min(1).max(255)]);

const entityRuleSchema = z
  .object({
    selector: selectorText.optional(),
    notSelector: selectorText.optional(),
    namespaceSelector: selectorText.optional(),
    nets: z.array(net).optional(),
    notNets: z.array(net).optional(),
    ports: z.array(portSchema).optional(),
    notPorts: z.array(portSchema).optional(),
  })
  .passthrough();

const policyRuleSchema = z
  .object({
    action: z.enum(RULE_ACTIONS),
    protocol: protocolSchema.optional(),
    notProtocol: protocolSchema.optional(),
    ipVersion: z.union([z.literal(4), z.literal(6)]).optional(),
    source: entityRuleSchema.optional(),
    destination: entityRuleSchema.optional(),
    metadata: z
      .object({ annotations: z.record(z.string()).optional() })
      .passthrough()
      .optional(),
  })
  .passthrough()
  .superRefine((r, ctx) => {
    // Ports only mean something for protocols with ports (Calico's rule too).
    const hasPorts = (e?: z.infer<typeof entityRuleSchema>) => !!(e?.ports?.length || e?.notPorts?.length);
    if (
      (hasPorts(r.source) || hasPorts(r.destination)) &&
      !(r.protocol !== undefined && protocolHasPorts(r.protocol))
    ) {
      ctx.addIssue({
        code: z.ZodIssueCode.custom,
        path: ['protocol'],
        message: 'ports/notPorts need protocol TCP, UDP, SCTP or UDPLite',
      });
    }
  });

export const networkPolicySpecSchema = z
  .object({
    order: z.number().optional(),
    selector: selectorText.optional(),
    types: z.array(z.enum(POLICY_TYPES)).optional(),
    ingress: z.array(policyRuleSchema).optional(),
    egress: z.array(policyRuleSchema).optional(),
  })
  .passthrough();

const globalNetworkPolicySpecObject = networkPolicySpecSchema
  .extend({
    namespaceSelector: selectorText.optional(),
    applyOnForward: z.boolean().optional(),
    preDNAT: z.boolean().optional(),
    doNotTrack: z.boolean().optional(),
  })
  .passthrough();

/** hostPolicyProblems as schema issues, each on its field. */
function hostPolicyIssues(spec: object, ctx: z.RefinementCtx): void {
  for (const p of hostPolicyProblems(spec as GlobalNetworkPolicySpec)) {
    ctx.addIssue({ code: z.ZodIssueCode.custom, path: [p.path], message: p.message });
  }
}

export const globalNetworkPolicySpecSchema = globalNetworkPolicySpecObject.superRefine(hostPolicyIssues);

/**
 * The spec of a staged kind: the enforced kind's spec plus `stagedAction`. A staged Delete names
 * the policy to remove and nothing else: a rule or selector beside it would be silently ignored
 * on promotion, so it is refused.
 */
export function stagedSpecSchema<T extends z.AnyZodObject>(enforced: T) {
  return enforced
    .extend({ stagedAction: z.enum(STAGED_ACTIONS).optional() })
    .passthrough()
    .superRefine((spec, ctx) => {
      if (spec.stagedAction !== 'Delete') return;
      for (const k of Object.keys(spec)) {
        if (k === 'stagedAction' || spec[k] === undefined) continue;
        ctx.addIssue({
          code: z.ZodIssueCode.custom,
          path: [k],
          message:
            'a staged Delete removes the enforced policy of its name and takes no other field; ' +
            'remove it (or use stagedAction: Set)',
        });
      }
    });
}

export const stagedNetworkPolicySpecSchema = stagedSpecSchema(networkPolicySpecSchema);
export const stagedGlobalNetworkPolicySpecSchema =
  stagedSpecSchema(globalNetworkPolicySpecObject).superRefine(hostPolicyIssues);

export const profileSpecSchema = z
  .object({
    labelsToApply: z.record(z.string()).optional(),
    ingress: z.array(policyRuleSchema).optional(),
    egress: z.array(policyRuleSchema).optional(),
  })
  .passthrough();

// --- helpers shared by the compiler, explain and the conversions ------------------

function protocolHasPorts(p: Protocol): boolean {
  const n = typeof p === 'number' ? p : PROTOCOL_NUMBERS[p];
  return n === 6 || n === 17 || n === 132 || n === 136;
}

export function protocolNumber(p: Protocol): number {
  return typeof p === 'number' ? p : PROTOCOL_NUMBERS[p];
}

/**
 * The directions a policy applies to. Unset `types` (Calico's defaulting):
 * Ingress, plus Egress when the policy has egress rules; Egress alone when it
 * has only egress rules.
 */
export function effectiveTypes(spec: NetworkPolicySpec): PolicyType[] {
  if (spec.types && spec.types.length > 0) return [...new Set(spec.types)];
  const hasEgress = (spec.egress?.length ?? 0) > 0;
  const hasIngress = (spec.ingress?.length ?? 0) > 0;
  if (hasEgress && !hasIngress) return ['Egress'];
  return hasEgress ? ['Ingress', 'Egress'] : ['Ingress'];
}

type ParsedPort = { kind: 'range'; first: number; last: number } | { kind: 'named'; name: string };

export function parsePort(p: Port): ParsedPort {
  if (typeof p === 'number') return { kind: 'range', first: p, last: p };
  const r = PORT_RANGE_RE.exec(p);
  if (r) return { kind: 'range', first: Number(r[1]), last: Number(r[2]) };
  if (/^\d+$/.test(p)) return { kind: 'range', first: Number(p), last: Number(p) };
  return { kind: 'named', name: p };
}

/** Namespace labels as seen by namespaceSelector: the kns.<ns> profile's labelsToApply without the `pcns.` prefix. */
export const NAMESPACE_LABEL_PREFIX = 'pcns.';
export const SERVICEACCOUNT_LABEL_PREFIX = 'pcsa.';
export const NAMESPACE_NAME_LABEL = 'netplugin.org/name';
export const NAMESPACE_PROFILE_PREFIX = 'kns.';
export const SERVICEACCOUNT_PROFILE_PREFIX = 'ksa.';

export function namespaceLabelsFromProfile(labelsToApply: Record<string, string> | undefined): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(labelsToApply ?? {})) {
    if (k.startsWith(NAMESPACE_LABEL_PREFIX)) out[k.slice(NAMESPACE_LABEL_PREFIX.length)] = v;
    else if (k === NAMESPACE_NAME_LABEL) out[k] = v;
  }
  return out;
}

/** Sort key: order ascending, unset last, then name (Calico's tie-break). */
export function comparePolicies(
  a: { order?: number | undefined; name: string },
  b: { order?: number | undefined; name: string },
): number {
  const ao = a.order ?? Infinity;
  const bo = b.order ?? Infinity;
  if (ao !== bo) return ao < bo ? -1 : 1;
  return a.name < b.name ? -1 : a.name > b.name ? 1 : 0;
}
