// The CustomResourceDefinitions in deploy/crds/, generated from the zod spec
// schemas the code validates with (src/datastore/schemas.ts), so the API
// server rejects what netplugin would reject: one source, and
// test/unit/crd-schemas.test.ts fails when a file drifts from it
// (regenerate with `node scripts/gen-crds.mjs`). zod checks without an
// OpenAPI form (refinements, transforms) stay in the code; IPPool's rules that
// depend on two fields are CEL (x-kubernetes-validations).
import type { z } from 'zod';
import { PLURALS } from './keys.js';
import { specSchemas } from './schemas.js';
import { BLOCK_SIZE_RANGE, NAMESPACED_KINDS, type Kind } from '../model/resources.js';

export type OpenApi = Record<string, unknown>;

/** Kinds stored as custom resources (WorkloadEndpoints live in pod annotations). */
export const CRD_KINDS = (Object.keys(specSchemas) as Kind[]).filter((k) => k !== 'WorkloadEndpoint');

interface PrinterColumn {
  name: string;
  type: 'string' | 'integer' | 'boolean' | 'date';
  jsonPath: string;
  priority?: number;
}

/** A column showing `.spec.<field>`; priority 1 shows it only with -o wide. */
function specColumn(name: string, type: PrinterColumn['type'], field: string, priority?: number): PrinterColumn {
  return { name, type, jsonPath: `.spec.${field}`, ...(priority === undefined ? {} : { priority }) };
}

const AGE: PrinterColumn = { name: 'Age', type: 'date', jsonPath: '.metadata.creationTimestamp' };

/** A staged policy's columns: what a promotion would do first, then where it would stand. */
const STAGED_COLUMNS: PrinterColumn[] = [
  specColumn('Action', 'string', 'stagedAction'),
  specColumn('Order', 'integer', 'order'),
  specColumn('Selector', 'string', 'selector'),
  AGE,
];

/** kubectl's short names (`kubectl get ippool`, `kubectl get ipp`) and columns. */
const PRESENTATION: Record<Exclude<Kind, 'WorkloadEndpoint'>, { shortNames: string[]; columns: PrinterColumn[] }> = {
  IPPool: {
    shortNames: ['ipp', 'pool'],
    columns: [
      specColumn('CIDR', 'string', 'cidr'),
      specColumn('BlockSize', 'integer', 'blockSize'),
      specColumn('NAT', 'boolean', 'natOutgoing'),
      specColumn('Disabled', 'boolean', 'disabled'),
      specColumn('Selector', 'string', 'nodeSelector', 1),
      AGE,
    ],
  },
  IPAMBlock: {
    shortNames: ['ipamb'],
    columns: [specColumn('CIDR', 'string', 'cidr'), specColumn('Affinity', 'string', 'affinity'), AGE],
  },
  BlockAffinity: {
    shortNames: ['ba'],
    columns: [
      specColumn('Node', 'string', 'node'),
      specColumn('CIDR', 'string', 'cidr'),
      specColumn('State', 'string', 'state'),
    ],
  },
  IPAMHandle: { shortNames: ['ipamh'], columns: [specColumn('Handle', 'string', 'handleID'), AGE] },
  IPAMConfig: {
    shortNames: ['ipamc'],
    columns: [
      specColumn('StrictAffinity', 'boolean', 'strictAffinity'),
      specColumn('MaxBlocksPerHost', 'integer', 'maxBlocksPerHost'),
    ],
  },
  ClusterInformation: {
    shortNames: ['ci'],
    columns: [
      specColumn('Version', 'string', 'netpluginVersion'),
      specColumn('Ready', 'boolean', 'datastoreReady'),
      specColumn('Type', 'string', 'clusterType'),
    ],
  },
  Node: { shortNames: ['npn'], columns: [specColumn('PodCIDRs', 'string', 'podCIDRs'), AGE] },
  HostEndpoint: {
    shortNames: ['hep'],
    columns: [specColumn('Node', 'string', 'node'), specColumn('Interface', 'string', 'interfaceName')],
  },
  KubeControllersConfiguration: { shortNames: ['kcc'], columns: [AGE] },
  AgentConfiguration: {
    shortNames: ['agentconfig'],
    columns: [specColumn('EndpointToHost', 'string', 'defaultEndpointToHostAction'), AGE],
  },
  Profile: { shortNames: ['pro'], columns: [AGE] },
  NetworkPolicy: {
    shortNames: ['npnp'],
    columns: [specColumn('Order', 'integer', 'order'), specColumn('Selector', 'string', 'selector')],
  },
  GlobalNetworkPolicy: { shortNames: ['gnp'], columns: [AGE] },
  BGPConfiguration: {
    shortNames: ['bgpconfig'],
    columns: [specColumn('AS', 'integer', 'asNumber'), specColumn('Mesh', 'boolean', 'nodeToNodeMeshEnabled'), AGE],
  },
  BGPPeer: {
    shortNames: ['bgpp'],
    columns: [
      specColumn('PeerIP', 'string', 'peerIP'),
      specColumn('AS', 'integer', 'asNumber'),
      specColumn('Node', 'string', 'node'),
      specColumn('PeerSelector', 'string', 'peerSelector', 1),
      AGE,
    ],
  },
  // Staged policies: what a promotion would do (Set or Delete) first.
  StagedNetworkPolicy: {
    shortNames: ['snp'],
    columns: STAGED_COLUMNS,
  },
  StagedGlobalNetworkPolicy: {
    shortNames: ['sgnp'],
    columns: STAGED_COLUMNS,
  },
  StagedKubernetesNetworkPolicy: {
    shortNames: ['sknp'],
    columns: [specColumn('Action', 'string', 'stagedAction'), specColumn('PolicyTypes', 'string', 'policyTypes'), AGE],
  },
};

/** Rules on two fields of a spec, in CEL, evaluated by the API server on create and update. */
const VALIDATIONS: Partial<Record<Kind, Array<{ rule: string; message: string }>>> = {
  IPPool: [
    {
      rule:
        `!has(self.blockSize) || (self.cidr.contains(':') ? (self.blockSize >= ${BLOCK_SIZE_RANGE[6][0]} && ` +
        `self.blockSize <= ${BLOCK_SIZE_RANGE[6][1]}) : (self.blockSize >= ${BLOCK_SIZE_RANGE[4][0]} && ` +
        `self.blockSize <= ${BLOCK_SIZE_RANGE[4][1]}))`,
      message:
        `blockSize must be ${BLOCK_SIZE_RANGE[4][0]}-${BLOCK_SIZE_RANGE[4][1]} for an IPv4 cidr and ` +
        `${BLOCK_SIZE_RANGE[6][0]}-${BLOCK_SIZE_RANGE[6][1]} for an IPv6 cidr`,
    },
    {
      rule: `!has(oldSelf.cidr) || self.cidr == oldSelf.cidr`,
      message: 'cidr cannot change once the pool exists; create a new pool and disable this one',
    },
    {
      rule: `!has(oldSelf.blockSize) || !has(self.blockSize) || self.blockSize == oldSelf.blockSize`,
      message: 'blockSize cannot change once the pool exists',
    },
  ],
  // The same rules as hostPolicyProblems (src/model/policy.ts), for writers that bypass netpluginctl.
  GlobalNetworkPolicy: [
    {
      rule: '!(has(self.preDNAT) && self.preDNAT && has(self.doNotTrack) && self.doNotTrack)',
      message: 'spec.preDNAT: preDNAT and doNotTrack cannot both be true; use two policies',
    },
    {
      rule: '!(has(self.preDNAT) && self.preDNAT) || (has(self.applyOnForward) && self.applyOnForward)',
      message: 'spec.applyOnForward: must be true with preDNAT: true',
    },
    {
      rule: '!(has(self.doNotTrack) && self.doNotTrack) || (has(self.applyOnForward) && self.applyOnForward)',
      message: 'spec.applyOnForward: must be true with doNotTrack: true',
    },
    {
      rule:
        '!(has(self.preDNAT) && self.preDNAT) || ((!has(self.egress) || size(self.egress) == 0) && ' +
        "(!has(self.types) || !self.types.exists(t, t == 'Egress')))",
      message: 'spec.egress: a preDNAT policy has ingress rules only',
    },
  ],
  // The same rules as bgpPeerProblems (src/model/bgp.ts), for writers that bypass netpluginctl.
  BGPPeer: [
    {
      rule: '!(has(self.peerIP) && has(self.peerSelector))',
      message: 'spec.peerSelector: peerIP and peerSelector are exclusive; set one of them',
    },
    {
      rule: 'has(self.peerIP) || has(self.peerSelector)',
      message: 'spec.peerIP: a BGPPeer needs peerIP (with asNumber) or peerSelector; set one of them',
    },
    {
      rule: '!has(self.peerIP) || has(self.asNumber)',
      message: "spec.asNumber: is required with peerIP (the peer's AS number)",
    },
    {
      rule: '!(has(self.node) && has(self.nodeSelector))',
      message: 'spec.nodeSelector: node and nodeSelector are exclusive; set one of them (neither: every node)',
    },
  ],
};

/** Rules on the whole object (they need metadata.name), as bgpConfigurationNameProblems in src/model/bgp.ts. */
const ROOT_VALIDATIONS: Partial<Record<Kind, Array<{ rule: string; message: string }>>> = {
  // As agentConfigurationNameProblems in src/model/agent-config.ts.
  AgentConfiguration: [
    {
      rule:
        `self.metadata.name == 'default' || (self.metadata.name.startsWith('node.') && size(self.metadata.name) ` +
        `> 5)`,
      message: 'metadata.name: use "default" or "node.<node name>"',
    },
  ],
  BGPConfiguration: [
    {
      rule: `self.metadata.name == 'default' || self.metadata.name.startsWith('node.')`,
      message: 'metadata.name: use "default" or "node.<node name>"',
    },
    {
      rule: `self.metadata.name == 'default' || !has(self.spec.nodeToNodeMeshEnabled)`,
      message: 'spec.nodeToNodeMeshEnabled: is only valid on the "default" BGPConfiguration; set it there',
    },
  ],
};

/** One zod schema as an OpenAPI v3 structural schema (the subset CRDs accept). */
export function toOpenApi(schema: z.ZodTypeAny): OpenApi {
  // biome-ignore lint/suspicious/noExplicitAny: zod's internal definition differs per schema type
  const def = schema._def as { typeName: string } & Record<string, any>;
  switch (def.typeName) {
    case 'ZodOptional':
      return toOpenApi(def.innerType);
    case 'ZodDefault':
      return { ...toOpenApi(def.innerType), default: def.defaultValue() };
    case 'ZodNullable':
      return { ...toOpenApi(def.innerType), nullable: true };
    case 'ZodEffects':
      // Refinements and transforms run in the code; the shape is the inner schema's.
      return toOpenApi(def.schema);
    case 'ZodString': {
      const out: OpenApi = { type: 'string' };
      for (const c of def.checks as Array<{ kind: string; value?: number; regex?: RegExp }>) {
        if (c.kind === 'min') out.minLength = c.value;
        if (c.kind === 'max') out.maxLength = c.value;
        // Anchored patterns in the syntax JavaScript and the API server (RE2) share; \d spelled out.
        if (c.kind === 'regex' && c.regex && /^\^.*\$$/.test(c.regex.source) && !/\(\?|\\[pPbB]/.test(c.regex.source))
          out.pattern = c.regex.source.replace(/\\d/g, '[0-9]');
      }
      return out;
    }
    case 'ZodNumber': {
      const checks = def.checks as Array<{ kind: string; value?: number; inclusive?: boolean }>;
      const out: OpenApi = { type: checks.some((c) => c.kind === 'int') ? 'integer' : 'number' };
      for (const c of checks) {
        if (c.kind === 'min') Object.assign(out, { minimum: c.value }, c.inclusive ? {} : { exclusiveMinimum: true });
        if (c.kind === 'max') Object.assign(out, { maximum: c.value }, c.inclusive ? {} : { exclusiveMaximum: true });
      }
      return out;
    }
    case 'ZodBoolean':
      return { type: 'boolean' };
    case 'ZodEnum':
      return { type: 'string', enum: [...def.values] };
    case 'ZodLiteral':
      return {
        type: typeof def.value === 'number' ? 'number' : typeof def.value === 'boolean' ? 'boolean' : 'string',
        enum: [def.value],
      };
    case 'ZodArray':
      return { type: 'array', items: toOpenApi(def.type) };
    case 'ZodRecord':
      return { type: 'object', additionalProperties: toOpenApi(def.valueType) };
    case 'ZodObject': {
      const shape = (schema as z.AnyZodObject).shape as Record<string, z.ZodTypeAny>;
      const properties: Record<string, OpenApi> = {};
      const required: string[] = [];
      for (const [k, v] of Object.entries(shape)) {
        properties[k] = toOpenApi(v);
        if (!v.isOptional()) required.push(k);
      }
      const out: OpenApi = { type: 'object' };
      if (Object.keys(properties).length) out.properties = properties;
      if (required.length) out.required = required;
      // passthrough: fields of a newer writer survive (as the code keeps them).
      if (def.unknownKeys === 'passthrough') out['x-kubernetes-preserve-unknown-fields'] = true;
      return out;
    }
    case 'ZodUnion': {
      const options = (def.options as z.ZodTypeAny[]).map(toOpenApi);
      // Literals of one type: an enum.
      if (options.every((o) => Array.isArray(o.enum) && o.type === options[0]!.type)) {
        return { type: options[0]!.type, enum: options.flatMap((o) => o.enum as unknown[]) };
      }
      // A number or a string (ports: 80, "80:90", "http"): the API's int-or-string.
      const types = new Set(options.map((o) => o.type));
      if (types.size === 2 && types.has('string') && (types.has('integer') || types.has('number')))
        return { 'x-kubernetes-int-or-string': true };
      // Anything else the code checks; structurally any value.
      return { 'x-kubernetes-preserve-unknown-fields': true };
    }
    case 'ZodUnknown':
    case 'ZodAny':
      return { 'x-kubernetes-preserve-unknown-fields': true };
    default:
      throw new Error(`crds: no OpenAPI form for ${def.typeName}; extend toOpenApi`);
  }
}

/** ZodUnknown items of an array: any JSON value (rules of a policy). */
function fixUnknownItems(s: OpenApi): OpenApi {
  if (
    s.type === 'array' &&
    s.items &&
    Object.keys(s.items as object).length === 1 &&
    (s.items as OpenApi)['x-kubernetes-preserve-unknown-fields']
  ) {
    return { ...s, items: { type: 'object', 'x-kubernetes-preserve-unknown-fields': true } };
  }
  if (s.properties)
    return {
      ...s,
      properties: Object.fromEntries(
        Object.entries(s.properties as Record<string, OpenApi>).map(([k, v]) => [k, fixUnknownItems(v)]),
      ),
    };
  return s;
}

export function crdFor(kind: Exclude<Kind, 'WorkloadEndpoint'>): Record<string, unknown> {
  const plural = PLURALS[kind];
  const spec = fixUnknownItems(toOpenApi(specSchemas[kind]));
  const rules = VALIDATIONS[kind];
  if (rules) spec['x-kubernetes-validations'] = rules;
  const p = PRESENTATION[kind];
  return {
    apiVersion: 'apiextensions.k8s.io/v1',
    kind: 'CustomResourceDefinition',
    metadata: { name: `${plural}.netplugin.org` },
    spec: {
      group: 'netplugin.org',
      scope: NAMESPACED_KINDS.has(kind) ? 'Namespaced' : 'Cluster',
      names: { kind, listKind: `${kind}List`, plural, singular: kind.toLowerCase(), shortNames: p.shortNames },
      versions: [
        {
          name: 'v3',
          served: true,
          storage: true,
          additionalPrinterColumns: p.columns,
          schema: {
            openAPIV3Schema: {
              type: 'object',
              required: ['spec'],
              properties: {
                apiVersion: { type: 'string' },
                kind: { type: 'string' },
                metadata: { type: 'object' },
                spec,
              },
              ...(ROOT_VALIDATIONS[kind] ? { 'x-kubernetes-validations': ROOT_VALIDATIONS[kind] } : {}),
            },
          },
        },
      ],
    },
  };
}

/** File name -> YAML text of every CRD, as deploy/crds/ holds them. */
export async function renderCrds(): Promise<Record<string, string>> {
  // yaml (tens of ms to load) only for the CRD files netpluginctl writes, not for the datastore's users.
  const { stringify } = await import('yaml');
  const out: Record<string, string> = {};
  for (const kind of CRD_KINDS as Array<Exclude<Kind, 'WorkloadEndpoint'>>) {
    const head = `# netplugin ${kind}: generated from src/datastore/schemas.ts by scripts/gen-crds.mjs; do not edit.\n`;
    out[`netplugin.org_${PLURALS[kind]}.yaml`] = head + stringify(crdFor(kind), { lineWidth: 0 });
  }
  return out;
}
