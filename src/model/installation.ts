// The operator's Installation resource (operator.netplugin.org/v1, name
// `default`): its schema with the defaults users of operator-managed installs
// expect, and the pure rendering into what a node needs: the CNI conflist, the
// IPPools it implies and the agent settings. `netpluginctl installation render`
// prints this; `installation apply` writes it (src/ctl/installation.ts).
import { z } from 'zod';
import { API_VERSION, type IPPoolSpec, type Resource } from './resources.js';
import { parseCidr } from '../net/cidr.js';
import { DEFAULT_BIRD_RUN_DIR } from './bgp.js';

export const OPERATOR_GROUP = 'operator.netplugin.org';
export const OPERATOR_API_VERSION = `${OPERATOR_GROUP}/v1`;
/**
 * Operator kinds introduced in 3.30 (flow logs API and flow UI): accepted beside the Installation, each named
 * `default`.
 */
export const FLOW_KINDS = ['FlowLogAggregator', 'FlowUI'] as const;

const ENCAPSULATIONS = ['IPIP', 'IPIPCrossSubnet', 'VXLAN', 'VXLANCrossSubnet', 'None'] as const;
type Encapsulation = (typeof ENCAPSULATIONS)[number];

/** `100Mi`, `1Gi`, `500M`, `1048576`: a Kubernetes quantity, converted to bytes. */
const QUANTITY = /^(\d+(?:\.\d+)?)(Ki|Mi|Gi|Ti|k|M|G|T)?$/;
const FACTOR: Record<string, number> = {
  '': 1,
  Ki: 2 ** 10,
  Mi: 2 ** 20,
  Gi: 2 ** 30,
  Ti: 2 ** 40,
  k: 1e3,
  M: 1e6,
  G: 1e9,
  T: 1e12,
};
function quantityBytes(q: string): number | undefined {
  const m = QUANTITY.exec(q);
  return m ? Number(m[1]) * FACTOR[m[2] ?? '']! : undefined;
}

/** The family of a pool CIDR (host bits zero); callers hold an already validated CIDR. */
function cidrFamily(s: string): 4 | 6 {
  return parseCidr(s).family;
}

const pool = z
  .object({
    name: z
      .string()
      .regex(/^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$/, 'expected a lower-case DNS name such as "pool-a"')
      .optional(),
    cidr: z.string().superRefine((s, ctx) => {
      try {
        parseCidr(s);
      } catch (e) {
        ctx.addIssue({
          code: 'custom',
          message: `${(e as Error).message} (a pool is a CIDR such as 192.168.0.0/16 or fd00:10:244::/64)`,
        });
      }
    }),
    blockSize: z.number().int().optional(),
    encapsulation: z
      .enum(ENCAPSULATIONS, { errorMap: () => ({ message: `expected one of ${ENCAPSULATIONS.join(', ')}` }) })
      .optional(),
    /** Absent: the operator's default per family, Enabled for IPv4 and Disabled for IPv6 (renderPools). */
    natOutgoing: z
      .enum(['Enabled', 'Disabled'], { errorMap: () => ({ message: 'expected Enabled or Disabled' }) })
      .optional(),
    nodeSelector: z.string().min(1).default('all()'),
  })
  .strict();

const enabled = z.enum(['Enabled', 'Disabled'], { errorMap: () => ({ message: 'expected Enabled or Disabled' }) });

const specSchema = z
  .object({
    netpluginNetwork: z
      .object({
        /** Absent: one IPv4 pool 192.168.0.0/16 (the operator's default); [] : no pools. */
        ipPools: z.array(pool).optional(),
        linuxPolicySetupTimeoutSeconds: z.number().int().min(0, 'must be >= 0 (0: do not wait for policy)').optional(),
        hostPorts: enabled.default('Enabled'),
        mtu: z.number().int().min(68, 'must be 68-65535').max(65535, 'must be 68-65535').optional(),
        /** Enabled: the node agent runs BIRD (--bgp on) and routes the pools without encapsulation over BGP. */
        bgp: enabled.default('Disabled'),
      })
      .strict()
      .default({}),
    cni: z
      .object({
        type: z
          .literal('Netplugin', {
            errorMap: () => ({ message: 'expected "Netplugin" (the only CNI this operator installs)' }),
          })
          .default('Netplugin'),
        ipam: z
          .object({
            type: z
              .enum(['Netplugin', 'HostLocal'], { errorMap: () => ({ message: 'expected Netplugin or HostLocal' }) })
              .default('Netplugin'),
          })
          .strict()
          .default({}),
      })
      .strict()
      .default({}),
    logging: z
      .object({
        cni: z
          .object({
            logSeverity: z
              .enum(['Error', 'Warning', 'Info', 'Debug'], {
                errorMap: () => ({ message: 'expected Error, Warning, Info or Debug' }),
              })
              .default('Info'),
            logFileMaxSize: z
              .string()
              .refine(
                (s) => (quantityBytes(s) ?? 0) >= 2 ** 20,
                'expected a quantity of at least 1Mi, such as 100Mi or 1Gi',
              )
              .default('100Mi'),
            logFileMaxAgeDays: z.number().int().min(0, 'must be >= 0 (0: no age limit)').default(30),
            logFileMaxCount: z.number().int().min(0, 'must be >= 0 (0: no count limit)').default(10),
          })
          .strict()
          .default({}),
      })
      .strict()
      .default({}),
    /** Flow logs settings (3.30+): carried through for the flow-log aggregator; nothing on the node depends on them. */
    flowLogs: z.record(z.unknown()).optional(),
  })
  .strict();

const installationSchema = z.object({
  apiVersion: z.literal(OPERATOR_API_VERSION, { errorMap: () => ({ message: `expected "${OPERATOR_API_VERSION}"` }) }),
  kind: z.literal('Installation'),
  metadata: z
    .object({
      name: z.literal('default', {
        errorMap: () => ({ message: 'must be "default": the operator reads only the Installation named default' }),
      }),
    })
    .passthrough(),
  spec: specSchema.default({}),
});

export type Installation = z.infer<typeof installationSchema>;
type InstallationPool = z.infer<typeof pool>;

export class InstallationError extends Error {
  override name = 'InstallationError';
}

/** One line per issue: the field path, what was found and what to write instead. */
function issueLines(issues: z.ZodIssue[], raw: unknown): string {
  return issues
    .map((i) => {
      let v: unknown = raw;
      for (const p of i.path) v = v && typeof v === 'object' ? (v as Record<string | number, unknown>)[p] : undefined;
      const path =
        i.path
          .map((p) => (typeof p === 'number' ? `[${p}]` : `.${p}`))
          .join('')
          .replace(/^\./, '') || '(root)';
      const got = i.code === 'unrecognized_keys' ? '' : v === undefined ? ' (missing)' : ` (got ${JSON.stringify(v)})`;
      const msg =
        i.code === 'unrecognized_keys'
          ? `unknown field(s) ${i.keys.join(', ')}: remove them or check the spelling`
          : i.message;
      return `${path}: ${msg}${got}`;
    })
    .join('; ');
}

/** Parses and checks an Installation; throws InstallationError naming each bad field. */
export function parseInstallation(raw: unknown): Installation {
  const r = installationSchema.safeParse(raw);
  if (!r.success) throw new InstallationError(`invalid Installation: ${issueLines(r.error.issues, raw)}`);
  const inst = r.data;
  const pools = effectivePools(inst);
  const problems: string[] = [];
  const seen = { 4: 0, 6: 0 };
  const names = new Set<string>();
  pools.forEach((p, i) => {
    const where = `spec.netpluginNetwork.ipPools[${i}]`;
    const fam = cidrFamily(p.cidr);
    seen[fam]++;
    const [lo, hi, def] = fam === 4 ? [20, 32, 26] : [116, 128, 122];
    const bs = p.blockSize ?? def;
    if (bs < lo || bs > hi)
      problems.push(`${where}.blockSize: ${bs} is out of range for IPv${fam}; use ${lo}-${hi} (default ${def})`);
    else if (bs < Number(p.cidr.split('/')[1]))
      problems.push(
        `${where}.blockSize: ${bs} is larger than the pool ${p.cidr}; use a block size of at least /` +
          `${p.cidr.split('/')[1]}`,
      );
    if (fam === 6 && p.encapsulation && p.encapsulation !== 'None' && p.encapsulation.startsWith('IPIP')) {
      problems.push(
        `${where}.encapsulation: ${p.encapsulation} carries IPv4 only; use None or VXLAN for the IPv6 pool ${p.cidr}`,
      );
    }
    const name = poolName(p, fam);
    if (names.has(name))
      problems.push(`${where}.name: ${JSON.stringify(name)} is used by two pools; give each pool its own name`);
    names.add(name);
  });
  if (inst.spec.cni.ipam.type === 'HostLocal') {
    for (const fam of [4, 6] as const) {
      if (seen[fam] > 1)
        problems.push(
          `spec.netpluginNetwork.ipPools: HostLocal IPAM takes addresses from the node's single IPv${fam} pod CIDR, ` +
            `so at most one IPv${fam} pool can be listed (found ${seen[fam]}); remove the others or use ` +
            `cni.ipam.type Netplugin`,
        );
    }
    pools.forEach((p, i) => {
      if (p.encapsulation?.startsWith('VXLAN'))
        problems.push(
          `spec.netpluginNetwork.ipPools[${i}].encapsulation: ${p.encapsulation} is not supported with HostLocal ` +
            `IPAM; use IPIP, IPIPCrossSubnet or None, or cni.ipam.type Netplugin`,
        );
    });
    if (seen[4] + seen[6] === 0)
      problems.push(
        'spec.netpluginNetwork.ipPools: HostLocal IPAM needs an IPv4 and/or IPv6 pool to know which pod CIDRs to use',
      );
  }
  if (problems.length) throw new InstallationError(`invalid Installation: ${problems.join('; ')}`);
  return inst;
}

/** A flow-log aggregator or flow UI resource (3.30+): accepted when it is named default. */
export function checkFlowResource(raw: { apiVersion?: unknown; kind?: unknown; metadata?: { name?: unknown } }): void {
  if (raw.apiVersion !== OPERATOR_API_VERSION)
    throw new InstallationError(
      `${String(raw.kind)}: apiVersion must be "${OPERATOR_API_VERSION}" (got ${JSON.stringify(raw.apiVersion)})`,
    );
  if (raw.metadata?.name !== 'default')
    throw new InstallationError(
      `${String(raw.kind)}: metadata.name must be "default" (got ${JSON.stringify(raw.metadata?.name)})`,
    );
}

const DEFAULT_IPV4_POOL = '192.168.0.0/16';

function effectivePools(inst: Installation): InstallationPool[] {
  return (
    inst.spec.netpluginNetwork.ipPools ?? [{ cidr: DEFAULT_IPV4_POOL, natOutgoing: 'Enabled', nodeSelector: 'all()' }]
  );
}

function poolName(p: InstallationPool, fam: 4 | 6): string {
  return p.name ?? `default-ipv${fam}-ippool`;
}

/** The IPPool resources the Installation implies (created only when the datastore has no pool). */
function renderPools(inst: Installation): Array<Resource<'IPPool'>> {
  return effectivePools(inst).map((p) => {
    const fam = cidrFamily(p.cidr);
    // The operator's defaults: IP-in-IP and NAT to outside the pools for IPv4; for IPv6, whose pod
    // addresses are routable as they are, no encapsulation and no NAT.
    const encap: Encapsulation = p.encapsulation ?? (fam === 4 ? 'IPIP' : 'None');
    const nat = p.natOutgoing ?? (fam === 4 ? 'Enabled' : 'Disabled');
    const spec: IPPoolSpec = {
      cidr: p.cidr,
      blockSize: p.blockSize ?? (fam === 4 ? 26 : 122),
      ipipMode: encap === 'IPIP' ? 'Always' : encap === 'IPIPCrossSubnet' ? 'CrossSubnet' : 'Never',
      vxlanMode: encap === 'VXLAN' ? 'Always' : encap === 'VXLANCrossSubnet' ? 'CrossSubnet' : 'Never',
      natOutgoing: nat === 'Enabled',
      nodeSelector: p.nodeSelector,
    };
    return { apiVersion: API_VERSION, kind: 'IPPool', metadata: { name: poolName(p, fam) }, spec };
  });
}

/**
 * Where the plugin finds its datastore: the netconf's datastore fields
 * (datastore/settings.ts DatastoreSettings, docs/netconf.md), written as they are.
 */
export interface RenderDatastore {
  datastore_type: 'etcdv3' | 'kubernetes';
  etcd_endpoints?: string | undefined;
  etcd_discovery_srv?: string | undefined;
  etcd_key_file?: string | undefined;
  etcd_cert_file?: string | undefined;
  etcd_ca_cert_file?: string | undefined;
  kubernetes?: { kubeconfig?: string | undefined; k8s_api_root?: string | undefined } | undefined;
}

interface RenderOptions {
  datastore: RenderDatastore;
  networkName?: string;
  cniVersion?: string;
  logFilePath?: string;
}

interface AgentSettings {
  datastoreType: string;
  ipam: 'netplugin-ipam' | 'host-local';
  mtu?: number;
  hostPorts: boolean;
  policySetupTimeoutSeconds?: number;
  logSeverity: string;
  pools: string[];
  /** BGP through BIRD (spec.netpluginNetwork.bgp Enabled). */
  bgp: boolean;
  /** The node agent's flags the Installation implies (the DaemonSet's and the systemd unit's). */
  agentArgs: string[];
  flowLogs?: Record<string, unknown>;
}

/**
 * The agent flags for spec.netpluginNetwork.bgp. BIRD's files and control socket stay in the
 * agent's default run dir, under the DaemonSet's /var/run/netplugin host mount, where
 * `netpluginctl node status` looks.
 */
function bgpAgentArgs(enabled: boolean): string[] {
  return enabled ? ['--bgp=on', `--bird-run-dir=${DEFAULT_BIRD_RUN_DIR}`] : ['--bgp=off'];
}

export interface Rendered {
  conflist: Record<string, unknown>;
  pools: Array<Resource<'IPPool'>>;
  agent: AgentSettings;
}

/** Everything `installation apply` would write, computed without I/O. */
export function renderInstallation(inst: Installation, o: RenderOptions): Rendered {
  const s = inst.spec;
  const pools = renderPools(inst);
  const fams = new Set(pools.map((p) => cidrFamily(p.spec.cidr)));
  const log = s.logging.cni;
  const entry: Record<string, unknown> = {
    type: 'netplugin',
    log_level: log.logSeverity.toUpperCase(),
    log_file_path: o.logFilePath ?? '/var/log/netplugin/cni/cni.log',
    // The conflist takes whole megabytes; round up so a small quantity never means "no limit".
    log_file_max_size: Math.max(1, Math.ceil(quantityBytes(log.logFileMaxSize)! / 2 ** 20)),
    log_file_max_age: log.logFileMaxAgeDays,
    log_file_max_count: log.logFileMaxCount,
    datastore_type: o.datastore.datastore_type,
  };
  const d = o.datastore;
  if (d.datastore_type === 'etcdv3') {
    for (const k of [
      'etcd_endpoints',
      'etcd_discovery_srv',
      'etcd_key_file',
      'etcd_cert_file',
      'etcd_ca_cert_file',
    ] as const)
      if (d[k]) entry[k] = d[k];
  }
  if (s.netpluginNetwork.mtu !== undefined) entry.mtu = s.netpluginNetwork.mtu;
  if (s.cni.ipam.type === 'HostLocal') {
    // docs/upgrade.md: an IPv4 address from the node's IPv4 pod CIDR when an IPv4 pool is configured, likewise IPv6.
    const ranges: unknown[] = [];
    if (fams.has(4)) ranges.push([{ subnet: 'usePodCidr' }]);
    if (fams.has(6)) ranges.push([{ subnet: 'usePodCidrIPv6' }]);
    entry.ipam = { type: 'host-local', ranges };
  } else {
    entry.ipam = { type: 'netplugin-ipam', assign_ipv4: String(fams.has(4)), assign_ipv6: String(fams.has(6)) };
  }
  if (s.netpluginNetwork.linuxPolicySetupTimeoutSeconds !== undefined)
    entry.policy_setup_timeout_seconds = s.netpluginNetwork.linuxPolicySetupTimeoutSeconds;
  if (d.kubernetes && (d.kubernetes.kubeconfig || d.kubernetes.k8s_api_root)) {
    entry.kubernetes = { ...d.kubernetes };
    if (d.kubernetes.kubeconfig) entry.policy = { type: 'k8s' };
  }
  const plugins: unknown[] = [entry];
  if (s.netpluginNetwork.hostPorts === 'Enabled')
    plugins.push({ type: 'portmap', snat: true, capabilities: { portMappings: true } });
  const conflist = { name: o.networkName ?? 'k8s-pod-network', cniVersion: o.cniVersion ?? '1.0.0', plugins };
  const agent: AgentSettings = {
    datastoreType: d.datastore_type,
    ipam: s.cni.ipam.type === 'HostLocal' ? 'host-local' : 'netplugin-ipam',
    ...(s.netpluginNetwork.mtu !== undefined ? { mtu: s.netpluginNetwork.mtu } : {}),
    hostPorts: s.netpluginNetwork.hostPorts === 'Enabled',
    ...(s.netpluginNetwork.linuxPolicySetupTimeoutSeconds !== undefined
      ? { policySetupTimeoutSeconds: s.netpluginNetwork.linuxPolicySetupTimeoutSeconds }
      : {}),
    logSeverity: log.logSeverity,
    pools: pools.map((p) => p.metadata.name),
    bgp: s.netpluginNetwork.bgp === 'Enabled',
    agentArgs: bgpAgentArgs(s.netpluginNetwork.bgp === 'Enabled'),
    ...(s.flowLogs ? { flowLogs: s.flowLogs } : {}),
  };
  return { conflist, pools, agent };
}
