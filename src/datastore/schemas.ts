// zod schemas of the v3 resources: objects read from a store are checked with
// them (corrupt data fails as Invalid naming the key instead of crashing deep in
// IPAM), and the CLI validates user input with them. Unknown fields pass
// through so a newer writer's extra fields survive a read-modify-write.
import { z } from 'zod';
import { DatastoreError } from '../errors.js';
import { API_VERSION, type BGPPeerSpec, type Kind, type Resource } from '../model/resources.js';
import {
  globalNetworkPolicySpecSchema,
  networkPolicySpecSchema,
  profileSpecSchema,
  stagedGlobalNetworkPolicySpecSchema,
  stagedNetworkPolicySpecSchema,
} from '../model/policy.js';
import { stagedKubernetesNetworkPolicySpecSchema } from '../model/k8s-networkpolicy.js';
import { bgpPeerProblems, durationSeconds } from '../model/bgp.js';
import { tryParseCidr } from '../net/cidr.js';
import { parseSelector } from '../selector/index.js';

const encap = z.enum(['Never', 'Always', 'CrossSubnet']);
const labels = z.record(z.string());

export const objectMetaSchema = z
  .object({
    name: z.string().min(1),
    namespace: z.string().optional(),
    resourceVersion: z.string().optional(),
    uid: z.string().optional(),
    creationTimestamp: z.string().optional(),
    labels: labels.optional(),
    annotations: labels.optional(),
    ownerReferences: z
      .array(
        z
          .object({
            apiVersion: z.string(),
            kind: z.string(),
            name: z.string(),
            uid: z.string(),
            controller: z.boolean().optional(),
            blockOwnerDeletion: z.boolean().optional(),
          })
          .passthrough(),
      )
      .optional(),
  })
  .passthrough();

const cidr = z.string().regex(/^[0-9a-fA-F.:]+\/\d{1,3}$/, 'expected a CIDR such as 10.0.0.0/16 or fd00::/64');
// An endpoint's addresses go to every node's policy as they are (and on the kubernetes datastore
// come from annotations a tenant can write): each must be an address with a prefix length in range.
const endpointAddress = cidr.refine(
  (v) => tryParseCidr(v, { strict: false }) !== undefined,
  'not an IPv4 or IPv6 address with a prefix length in range',
);

const asNumber = z.number().int().min(1).max(4294967295);
const port = z.number().int().min(1).max(65535);
const strictCidr = cidr.refine(
  (c) => tryParseCidr(c) !== undefined,
  'expected a CIDR without host bits, such as 10.96.0.0/12',
);
const hostCidr = cidr.refine(
  (c) => tryParseCidr(c, { strict: false }) !== undefined,
  'expected an address with prefix, such as 192.0.2.10/24',
);
const dottedQuad = z.string().regex(/^\d{1,3}(\.\d{1,3}){3}$/, 'expected a dotted quad such as 224.0.0.1');
const duration = z.string().refine((d) => durationSeconds(d) !== undefined, 'expected a duration such as 120s or 2m');
const selector = z.string().refine((s) => {
  try {
    parseSelector(s);
    return true;
  } catch {
    return false;
  }
}, 'not a valid selector expression (e.g. "rack == \'a\'" or "all()")');
const hostAddress = z
  .string()
  .refine(
    (a) => !a.includes('/') && tryParseCidr(`${a}/${a.includes(':') ? 128 : 32}`) !== undefined,
    'expected an IP address such as 192.0.2.10',
  );
const hostPort = z
  .object({
    protocol: z.enum(['TCP', 'UDP', 'SCTP']),
    port,
    net: cidr
      .refine((c) => tryParseCidr(c, { strict: false }) !== undefined, 'expected a CIDR such as 10.0.0.0/8')
      .optional(),
  })
  .passthrough();
const serviceRanges = z.array(z.object({ cidr: strictCidr }).passthrough()).optional();

const bgpPeerShape = z
  .object({
    node: z.string().min(1).optional(),
    nodeSelector: selector.optional(),
    peerIP: z
      .string()
      .regex(/^(\[[0-9a-fA-F:.]+\]:\d{1,5}|[0-9a-fA-F:.]+(:\d{1,5})?)$/, 'expected ADDR, ADDR:PORT or [IPv6]:PORT')
      .optional(),
    asNumber: asNumber.optional(),
    peerSelector: selector.optional(),
    password: z
      .object({
        secretKeyRef: z
          .object({ name: z.string().min(1), key: z.string().min(1) })
          .passthrough()
          .optional(),
        file: z
          .string()
          .regex(/^\/[^\0]*$/, 'expected an absolute path')
          .optional(),
      })
      .passthrough()
      .optional(),
    keepOriginalNextHop: z.boolean().optional(),
    sourceAddress: z.enum(['UseNodeIP', 'None']).optional(),
    maxRestartTime: duration.optional(),
    ttlSecurity: z.number().int().min(1).max(255).optional(),
  })
  .passthrough();

export const specSchemas = {
  IPPool: z
    .object({
      cidr,
      blockSize: z.number().int().min(20).max(128).optional(),
      ipipMode: encap.optional(),
      vxlanMode: encap.optional(),
      natOutgoing: z.boolean().optional(),
      disabled: z.boolean().optional(),
      nodeSelector: z.string().optional(),
      allowedUses: z.array(z.enum(['Workload', 'Tunnel'])).optional(),
    })
    .passthrough(),
  IPAMBlock: z
    .object({
      cidr,
      affinity: z.string().nullable(),
      allocations: z.array(z.number().int().nonnegative().nullable()),
      unallocated: z.array(z.number().int().nonnegative()),
      attributes: z.array(z.object({ handle_id: z.string().nullable(), secondary: labels.optional() }).passthrough()),
      deleted: z.boolean().optional(),
      sequenceNumber: z.number().optional(),
    })
    .passthrough(),
  BlockAffinity: z
    .object({
      state: z.enum(['pending', 'confirmed', 'pendingDeletion']),
      node: z.string().min(1),
      cidr,
      deleted: z.boolean().optional(),
    })
    .passthrough(),
  IPAMHandle: z
    .object({ handleID: z.string().min(1), block: z.record(z.number().int()), deleted: z.boolean().optional() })
    .passthrough(),
  IPAMConfig: z
    .object({
      strictAffinity: z.boolean().optional(),
      maxBlocksPerHost: z.number().int().nonnegative().optional(),
      autoAllocateBlocks: z.boolean().optional(),
    })
    .passthrough(),
  WorkloadEndpoint: z
    .object({
      orchestrator: z.string(),
      workload: z.string().optional(),
      node: z.string(),
      containerID: z.string(),
      pod: z.string().optional(),
      endpoint: z.string(),
      serviceAccountName: z.string().optional(),
      ipNetworks: z.array(endpointAddress),
      ipNATs: z.array(z.object({ internalIP: z.string(), externalIP: z.string() })).optional(),
      profiles: z.array(z.string()).optional(),
      interfaceName: z.string(),
      mac: z.string().optional(),
      ports: z
        .array(
          z
            .object({
              name: z.string(),
              protocol: z.string(),
              port: z.number().int(),
              hostPort: z.number().int().optional(),
              hostIP: z.string().optional(),
            })
            .passthrough(),
        )
        .optional(),
      generateName: z.string().optional(),
    })
    .passthrough(),
  ClusterInformation: z
    .object({
      clusterGUID: z.string().optional(),
      clusterType: z.string().optional(),
      netpluginVersion: z.string().optional(),
      datastoreReady: z.boolean().optional(),
    })
    .passthrough(),
  Node: z
    .object({
      addresses: z.array(z.object({ address: z.string(), type: z.string().optional() }).passthrough()).optional(),
      podCIDRs: z.array(cidr).optional(),
      bgp: z
        .object({
          ipv4Address: hostCidr.optional(),
          ipv6Address: hostCidr.optional(),
          asNumber: asNumber.optional(),
          routeReflectorClusterID: dottedQuad.optional(),
        })
        .passthrough()
        .optional(),
      ipv4Address: cidr.optional(),
      ipv6Address: cidr.optional(),
      vxlanTunnelAddress: z.string().optional(),
      vxlanTunnelMACAddr: z.string().optional(),
      vxlanTunnelAddressV6: z.string().optional(),
      vxlanTunnelMACAddrV6: z.string().optional(),
      ipv4IPIPTunnelAddr: z.string().optional(),
    })
    .passthrough(),
  HostEndpoint: z
    .object({
      node: z.string(),
      // The agent matches it in nftables: the kernel's interface name alphabet (as the typed model's), or `*`.
      interfaceName: z
        .string()
        .regex(
          /^(\*|[A-Za-z0-9_.-]{1,15})$/,
          'expected an interface name (1-15 letters, digits, "_", "." or "-") or "*"',
        )
        .optional(),
      expectedIPs: z.array(hostAddress).optional(),
      profiles: z.array(z.string()).optional(),
      ports: z.array(z.object({ name: z.string(), protocol: z.string(), port }).passthrough()).optional(),
    })
    .passthrough(),
  KubeControllersConfiguration: z.object({}).passthrough(),
  AgentConfiguration: z
    .object({
      failsafeInboundHostPorts: z.array(hostPort).optional(),
      failsafeOutboundHostPorts: z.array(hostPort).optional(),
      defaultEndpointToHostAction: z.enum(['Drop', 'Return', 'Accept']).optional(),
      flowLogsAggregator: z
        .string()
        .regex(/^https:\/\/[^\s]+$/, 'expected an https URL such as https://flows.example:7443')
        .optional(),
      flowLogsFlushInterval: duration.optional(),
    })
    .passthrough(),
  Profile: profileSpecSchema,
  NetworkPolicy: networkPolicySpecSchema,
  GlobalNetworkPolicy: globalNetworkPolicySpecSchema,
  BGPConfiguration: z
    .object({
      asNumber: asNumber.optional(),
      nodeToNodeMeshEnabled: z.boolean().optional(),
      listenPort: port.optional(),
      logSeverityScreen: z.enum(['Debug', 'Info', 'Warning', 'Error', 'Fatal']).optional(),
      serviceClusterIPs: serviceRanges,
      serviceExternalIPs: serviceRanges,
      serviceLoadBalancerIPs: serviceRanges,
      ignoredInterfaces: z
        .array(z.string().regex(/^[A-Za-z0-9_.@*-]{1,32}$/, 'expected an interface name, `*` globs allowed'))
        .optional(),
      nodeMeshMaxRestartTime: duration.optional(),
    })
    .passthrough(),
  BGPPeer: bgpPeerShape.superRefine((spec, ctx) => {
    for (const p of bgpPeerProblems(spec as BGPPeerSpec))
      ctx.addIssue({ code: z.ZodIssueCode.custom, path: p.path.split('.'), message: p.message });
  }),
  StagedNetworkPolicy: stagedNetworkPolicySpecSchema,
  StagedGlobalNetworkPolicy: stagedGlobalNetworkPolicySpecSchema,
  StagedKubernetesNetworkPolicy: stagedKubernetesNetworkPolicySpecSchema,
} satisfies Record<Kind, z.ZodTypeAny>;

function buildResourceSchema<K extends Kind>(kind: K) {
  return z.object({
    apiVersion: z.literal(API_VERSION),
    kind: z.literal(kind),
    metadata: objectMetaSchema,
    spec: specSchemas[kind],
  });
}
const built = new Map<Kind, z.ZodTypeAny>();

/** The schema of a whole resource of `kind` (built once per kind). */
function resourceSchema<K extends Kind>(kind: K): ReturnType<typeof buildResourceSchema<K>> {
  let s = built.get(kind);
  if (!s) built.set(kind, (s = buildResourceSchema(kind)));
  return s as ReturnType<typeof buildResourceSchema<K>>;
}

/**
 * The first issues of a failed parse, each as `field.path: problem`; `field` may rename a path (annotations for a pod's
 * endpoint).
 */
function describeIssues(
  issues: z.ZodIssue[],
  field: (path: Array<string | number>) => string = (p) => p.join('.') || '(root)',
): string {
  return issues
    .slice(0, 3)
    .map((i) => `${field(i.path)}: ${i.message}`)
    .join('; ');
}

/**
 * Why a decoded object is not a valid `kind` (the fields and their problems),
 * or undefined when it is one. `field` renames paths for objects stored in
 * another shape (a pod's endpoint annotations).
 */
export function resourceProblem(
  kind: Kind,
  obj: unknown,
  field?: (path: Array<string | number>) => string,
): string | undefined {
  if (!Object.hasOwn(specSchemas, kind)) return `unknown kind ${JSON.stringify(kind)}`;
  // A block that passes the hand-written check needs zod for the rest only; any other (or doubtful) one gets zod whole.
  if (kind === 'IPAMBlock' && blockSpecOk((obj as { spec?: unknown } | null)?.spec)) {
    const r = blockEnvelope.safeParse(obj);
    if (r.success) return undefined;
  }
  const r = resourceSchema(kind).safeParse(obj);
  return r.success ? undefined : describeIssues(r.error.issues, field);
}

/** An IPAMBlock with its spec left to blockSpecOk. */
const blockEnvelope = z.object({
  apiVersion: z.literal(API_VERSION),
  kind: z.literal('IPAMBlock'),
  metadata: objectMetaSchema,
  spec: z.unknown(),
});

const plainObject = (x: unknown): x is Record<string, unknown> =>
  typeof x === 'object' && x !== null && (Object.getPrototypeOf(x) === Object.prototype || !Object.getPrototypeOf(x));
const slot = (x: unknown): boolean => Number.isInteger(x) && (x as number) >= 0;
const CIDR_TEXT = /^[0-9a-fA-F.:]+\/\d{1,3}$/;

/**
 * specSchemas.IPAMBlock's rules by hand: every ADD and DEL writes its block (64 slots and their
 * attributes for a /26) and checks it first, and zod's pass over the arrays was most of that
 * check's cost. True only when zod would accept it too (plain objects only); false leaves the
 * verdict, and the message, to zod.
 */
function blockSpecOk(s: unknown): boolean {
  if (!plainObject(s)) return false;
  if (typeof s['cidr'] !== 'string' || !CIDR_TEXT.test(s['cidr'])) return false;
  if (s['affinity'] !== null && typeof s['affinity'] !== 'string') return false;
  const { allocations, unallocated, attributes, deleted, sequenceNumber } = s;
  // for..of, not every(): a hole is undefined to zod, and every() would skip it.
  if (!Array.isArray(allocations) || !Array.isArray(unallocated)) return false;
  for (const a of allocations) if (a !== null && !slot(a)) return false;
  for (const u of unallocated) if (!slot(u)) return false;
  if (deleted !== undefined && typeof deleted !== 'boolean') return false;
  if (sequenceNumber !== undefined && (typeof sequenceNumber !== 'number' || Number.isNaN(sequenceNumber)))
    return false;
  if (!Array.isArray(attributes)) return false;
  for (const a of attributes) {
    if (!plainObject(a) || (a['handle_id'] !== null && typeof a['handle_id'] !== 'string')) return false;
    const sec = a['secondary'];
    if (sec === undefined) continue;
    if (!plainObject(sec)) return false;
    for (const k in sec) if (typeof sec[k] !== 'string') return false;
  }
  return true;
}

/**
 * Checks a decoded object from the store. `where` names its location (etcd key
 * or API path) so the operator can find and repair it.
 */
export function validateResource<K extends Kind>(kind: K, obj: unknown, where: string): Resource<K> {
  if (!Object.hasOwn(specSchemas, kind)) {
    throw new DatastoreError('Invalid', `${where}: unknown kind ${JSON.stringify(kind)}`);
  }
  const problem = resourceProblem(kind, obj);
  if (problem !== undefined) {
    throw new DatastoreError(
      'Invalid',
      `corrupt ${kind} at ${where}: ${problem}; fix or delete the object (netpluginctl can show it)`,
    );
  }
  return obj as Resource<K>;
}
