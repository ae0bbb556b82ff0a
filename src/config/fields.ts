// The netconf reference: one row per field. docs/netconf.md is generated from
// this table (scripts/gen-netconf-doc.mjs), error messages take the expected
// type and allowed values from it, and a unit test keeps the table, the
// schema's keys and the document in step.

export interface FieldDoc {
  /** JSON path; `[]` marks array items. */
  path: string;
  type: string;
  /** Shown as-is; undefined means no default (absent unless set). */
  default?: string;
  /** Allowed values or range, in words. */
  allowed?: string;
  required?: boolean;
  /** Which executable reads it ('both' when netplugin-ipam reads it too). */
  plugin?: 'netplugin' | 'both';
  deprecated?: boolean;
  meaning: string;
  /** A value to show in "add ..." hints for required fields. */
  example?: string;
}

export const DEFAULT_NODENAME_FILE = '/var/lib/netplugin/nodename';
/** The node agent writes the pod MTU here (underlay MTU minus the largest encapsulation overhead in use). */
export const DEFAULT_MTU_FILE = '/var/lib/netplugin/mtu';
export const NUM_QUEUES_MAX = 1024;

export const NETCONF_FIELDS: readonly FieldDoc[] = [
  {
    path: 'name',
    type: 'string',
    required: true,
    plugin: 'both',
    allowed: "letters, digits, '_', '.', '-'; starts with a letter or digit",
    meaning:
      'Network name. Part of every IPAM handle (`<name>.<containerID>`), so changing it orphans existing allocations.',
    example: '"k8s-pod-network"',
  },
  {
    path: 'cniVersion',
    type: 'string',
    plugin: 'both',
    allowed: '0.3.0, 0.3.1, 0.4.0, 1.0.0, 1.1.0',
    meaning:
      'CNI spec version results are printed in. Required unless `cniVersions` lists a supported version. CHECK needs ' +
      '0.4.0+, STATUS and GC need 1.1.0.',
    example: '"1.0.0"',
  },
  {
    path: 'cniVersions',
    type: 'array of strings',
    plugin: 'both',
    meaning: 'CNI 1.1 form: versions this configuration conforms to; the highest one netplugin supports is used.',
  },
  {
    path: 'type',
    type: 'string',
    required: true,
    allowed: '`netplugin`',
    meaning:
      "Plugin executable. When netplugin-ipam is used as delegated IPAM of another plugin, this is that plugin's type.",
    example: '"netplugin"',
  },
  {
    path: 'nodename',
    type: 'string',
    default: 'contents of `nodename_file`, else the lower-cased hostname',
    plugin: 'both',
    meaning: 'Node name the node agent registered with; set it when that differs from the hostname.',
  },
  {
    path: 'nodename_file',
    type: 'string (file path)',
    default: DEFAULT_NODENAME_FILE,
    plugin: 'both',
    meaning: 'File the node agent writes its node name to; read when `nodename` is not set.',
  },
  {
    path: 'mtu_file',
    type: 'string (file path)',
    default: DEFAULT_MTU_FILE,
    plugin: 'netplugin',
    meaning:
      'File the node agent writes the pod MTU to (underlay MTU minus the largest encapsulation overhead of the pools ' +
      'in use); read when `mtu` is not set.',
  },
  {
    path: 'datastore_type',
    type: 'string',
    default: 'etcdv3',
    allowed: '`etcdv3`, `kubernetes`',
    plugin: 'both',
    meaning: 'Where pools, blocks and endpoints are stored.',
  },
  {
    path: 'etcd_endpoints',
    type: 'string',
    plugin: 'both',
    allowed: 'comma-separated http(s) URLs',
    meaning:
      'etcd endpoints, e.g. `https://10.0.0.1:2379,https://10.0.0.2:2379`. Used when `datastore_type` is `etcdv3`.',
  },
  {
    path: 'etcd_discovery_srv',
    type: 'string',
    plugin: 'both',
    allowed: 'a DNS domain',
    meaning: 'Domain whose SRV records list the etcd endpoints. Mutually exclusive with `etcd_endpoints`.',
  },
  {
    path: 'etcd_key_file',
    type: 'string (file path)',
    plugin: 'both',
    meaning: 'Private key of the client certificate (mutual TLS). Set together with `etcd_cert_file`.',
  },
  {
    path: 'etcd_cert_file',
    type: 'string (file path)',
    plugin: 'both',
    meaning: 'Client certificate (mutual TLS). Set together with `etcd_key_file`.',
  },
  {
    path: 'etcd_ca_cert_file',
    type: 'string (file path)',
    plugin: 'both',
    meaning: 'CA bundle that signed the etcd server certificate; every CA in the file is trusted.',
  },
  {
    path: 'etcd_authority',
    type: 'string',
    default: '127.0.0.1:2379',
    deprecated: true,
    plugin: 'both',
    allowed: 'host:port',
    meaning: 'Deprecated: use `etcd_endpoints`. Used only when `etcd_endpoints` and `etcd_discovery_srv` are absent.',
  },
  {
    path: 'etcd_scheme',
    type: 'string',
    default: 'http',
    deprecated: true,
    plugin: 'both',
    allowed: '`http`, `https`',
    meaning: 'Deprecated: use `etcd_endpoints`. Scheme combined with `etcd_authority`.',
  },
  {
    path: 'ipam',
    type: 'object',
    required: true,
    plugin: 'both',
    meaning:
      'IPAM settings. For `netplugin-ipam` only the fields below are allowed; for any other IPAM type (e.g. ' +
      '`host-local`) every field is passed to that plugin untouched.',
    example: '{"type": "netplugin-ipam"}',
  },
  {
    path: 'ipam.type',
    type: 'string',
    required: true,
    plugin: 'both',
    allowed: '`netplugin-ipam`, or another IPAM plugin in CNI_PATH (e.g. `host-local`)',
    meaning: 'IPAM plugin. netplugin-ipam runs in-process; others are executed from CNI_PATH.',
    example: '"netplugin-ipam"',
  },
  {
    path: 'ipam.assign_ipv4',
    type: 'string (not boolean)',
    default: '"true"',
    allowed: '"true", "false"',
    plugin: 'both',
    meaning: 'Assign an IPv4 address.',
  },
  {
    path: 'ipam.assign_ipv6',
    type: 'string (not boolean)',
    default: '"false"',
    allowed: '"true", "false"',
    plugin: 'both',
    meaning: 'Assign an IPv6 address.',
  },
  {
    path: 'ipam.ipv4_pools',
    type: 'array of strings',
    default: 'all pools that select this node',
    allowed: 'IPv4 CIDRs or pool names',
    plugin: 'both',
    meaning: 'Pools to assign IPv4 addresses from. A pool that does not exist is an error at ADD.',
  },
  {
    path: 'ipam.ipv6_pools',
    type: 'array of strings',
    default: 'all pools that select this node',
    allowed: 'IPv6 CIDRs or pool names',
    plugin: 'both',
    meaning: 'Pools to assign IPv6 addresses from; used only when `assign_ipv6` is "true".',
  },
  { path: 'container_settings', type: 'object', meaning: 'Settings applied inside the container.' },
  {
    path: 'container_settings.allow_ip_forwarding',
    type: 'boolean',
    default: 'false',
    meaning: 'Enable IP forwarding inside the container.',
  },
  {
    path: 'readiness_gates',
    type: 'array of strings',
    allowed: 'http or https URLs',
    meaning: 'URLs polled before pod networking proceeds; all must be ready.',
  },
  {
    path: 'readiness_gate_timeout_seconds',
    type: 'integer (seconds)',
    default: '30',
    allowed: '1..3600',
    meaning:
      'How long ADD waits for all `readiness_gates` to answer 2xx before failing with code 11 (try again later). ' +
      "Keep it below the runtime's CNI timeout.",
  },
  { path: 'kubernetes', type: 'object', plugin: 'both', meaning: 'Access to the Kubernetes API server.' },
  {
    path: 'kubernetes.kubeconfig',
    type: 'string (file path)',
    plugin: 'both',
    allowed: 'absolute path',
    meaning: 'Kubeconfig file (recommended).',
  },
  {
    path: 'kubernetes.k8s_api_root',
    type: 'string (URL)',
    plugin: 'both',
    allowed: 'http or https URL',
    meaning: 'API server location, as an alternative to a kubeconfig.',
  },
  { path: 'policy', type: 'object', meaning: 'Network policy.' },
  {
    path: 'policy.type',
    type: 'string',
    required: true,
    allowed: '`k8s`',
    meaning: 'Enforce Kubernetes NetworkPolicy (needs read access to Pods in all namespaces).',
    example: '"k8s"',
  },
  {
    path: 'policy_setup_timeout_seconds',
    type: 'integer',
    allowed: '>= 0',
    meaning: 'Hold the pod until its policy is programmed or this many seconds pass; 0 or absent: do not wait.',
  },
  { path: 'feature_control', type: 'object', plugin: 'both', meaning: 'Opt-in features.' },
  {
    path: 'feature_control.ip_addrs_no_ipam',
    type: 'boolean',
    default: 'false',
    plugin: 'both',
    meaning:
      'Honour the `cni.netplugin.org/ipAddrsNoIpam` annotation (bypasses IPAM; allows spoofing, guard it with ' +
      'admission control).',
  },
  {
    path: 'feature_control.floating_ips',
    type: 'boolean',
    default: 'false',
    plugin: 'both',
    meaning: 'Honour the `cni.netplugin.org/floatingIPs` annotation.',
  },
  {
    path: 'num_queues',
    type: 'integer',
    default: '1',
    allowed: `1..${NUM_QUEUES_MAX}`,
    meaning:
      `Number of RX and TX queues of both veth ends. Capped at ${NUM_QUEUES_MAX}: each queue costs kernel ` +
      `memory per veth and the kernel rejects more than 4096, so larger values are mistakes.`,
  },
  {
    path: 'host_veth_prefix',
    type: 'string',
    default: 'npi',
    allowed: '1-4 lower-case letters or digits, starting with a letter',
    meaning:
      'Prefix of host-side veth names (prefix + first 11 hex characters of sha1 of `<namespace>.<pod>`, or of the ' +
      'container ID outside Kubernetes).',
  },
  {
    path: 'ipam_lock_file',
    type: 'string (file path)',
    default: '/var/run/netplugin/ipam.lock',
    plugin: 'both',
    allowed: 'absolute path',
    meaning: "Host-wide lock that serialises this node's IPAM work across plugin processes.",
  },
  {
    path: 'endpoint_status_dir',
    type: 'string (file path)',
    default: '/var/run/netplugin/endpoint-status',
    allowed: 'absolute path',
    meaning: 'Where the node agent reports endpoints whose policy is programmed (read by the policy-setup wait).',
  },
  {
    path: 'mtu',
    type: 'integer',
    default: 'the host default',
    allowed: '68..65535',
    meaning: 'MTU of both veth ends (68 is the IPv4 minimum; 65535 the largest an IP packet can be).',
  },
  {
    path: 'log_level',
    type: 'string',
    default: 'INFO',
    allowed: '`ERROR`, `WARNING`, `INFO`, `DEBUG` (any case)',
    plugin: 'both',
    meaning: 'Least severe level written.',
  },
  {
    path: 'log_format',
    type: 'string',
    default: 'text',
    allowed: '`text`, `json`',
    plugin: 'both',
    meaning:
      'Log line format: `text` (`time LEVEL [pid] message key=value`) or `json` (one object per line with `time`, ' +
      '`level`, `pid`, `msg` and the fields, for log collectors).',
  },
  {
    path: 'log_file_path',
    type: 'string (file path)',
    default: 'none: stderr only (the installed conflist sets `/var/log/netplugin/cni/cni.log`)',
    allowed: 'absolute path, or "" to disable',
    plugin: 'both',
    meaning: 'Also append logs to this file. Removing the option (or "") disables file logging.',
  },
  {
    path: 'log_file_max_size',
    type: 'integer (MB)',
    default: '100',
    allowed: '>= 1',
    plugin: 'both',
    meaning: 'Rotate the log file when it reaches this size.',
  },
  {
    path: 'log_file_max_age',
    type: 'integer (days)',
    default: '30',
    allowed: '>= 0 (0: no age limit)',
    plugin: 'both',
    meaning: 'Remove rotated files older than this.',
  },
  {
    path: 'log_file_max_count',
    type: 'integer',
    default: '10',
    allowed: '>= 0 (0: no count limit)',
    plugin: 'both',
    meaning: 'Keep at most this many rotated files.',
  },
  {
    path: 'capabilities',
    type: 'object',
    plugin: 'both',
    meaning: 'CNI: capabilities this plugin entry accepts (set by the administrator; netplugin uses none).',
  },
  {
    path: 'runtimeConfig',
    type: 'object',
    plugin: 'both',
    meaning: 'CNI: per-invocation values a runtime fills in for declared capabilities.',
  },
  {
    path: 'args',
    type: 'object',
    plugin: 'both',
    meaning: 'CNI: per-invocation arguments from the runtime (conventions: `args.cni`).',
  },
  {
    path: 'prevResult',
    type: 'object',
    plugin: 'both',
    meaning: 'CNI: result of the previous plugin in the chain (CHECK, DEL, chained ADD); any supported version.',
  },
];

const byPath = new Map<string, FieldDoc>();
for (const f of NETCONF_FIELDS) byPath.set(f.path, f);

/** The row for a concrete path such as `readiness_gates.2` or `ipam.ipv4_pools.0`. */
export function fieldDoc(path: readonly (string | number)[]): FieldDoc | undefined {
  const parts = path.map((p) => (typeof p === 'number' ? '[]' : p));
  // Array items are described by their array's row.
  while (parts.length) {
    const key = parts.join('.').replace(/\.\[\]/g, '[]');
    const hit = byPath.get(key);
    if (hit) return hit;
    parts.pop();
  }
  return undefined;
}

export function sectionKeys(section: string): string[] {
  return NETCONF_FIELDS.filter(
    (f) => f.path.startsWith(section + '.') && !f.path.slice(section.length + 1).includes('.'),
  ).map((f) => f.path.slice(section.length + 1));
}
