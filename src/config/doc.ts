// Renders docs/netconf.md from the field table (scripts/gen-netconf-doc.mjs
// writes it; test/unit/config-doc.test.ts fails when the file is stale).
import { NETCONF_FIELDS, type FieldDoc } from './fields.js';

const esc = (s: string) => s.replace(/\|/g, '\\|');

function row(f: FieldDoc): string {
  const flags = [
    f.required ? 'required' : '',
    f.deprecated ? 'deprecated' : '',
    f.plugin === 'both' ? 'netplugin-ipam too' : '',
  ]
    .filter(Boolean)
    .join(', ');
  return (
    `| \`${f.path}\` | ${esc(f.type)} | ${f.default !== undefined ? esc(f.default) : '—'} | ` +
    `${f.allowed ? esc(f.allowed) : '—'} | ${flags || '—'} | ${esc(f.meaning)} |`
  );
}

const EXAMPLE = {
  name: 'k8s-pod-network',
  cniVersion: '1.0.0',
  plugins: [
    {
      type: 'netplugin',
      log_level: 'INFO',
      log_file_path: '/var/log/netplugin/cni/cni.log',
      datastore_type: 'kubernetes',
      mtu: 1450,
      ipam: { type: 'netplugin-ipam', assign_ipv4: 'true', assign_ipv6: 'false' },
      policy: { type: 'k8s' },
      kubernetes: { kubeconfig: '/etc/cni/net.d/netplugin-kubeconfig' },
    },
    { type: 'portmap', snat: true, capabilities: { portMappings: true } },
  ],
};

export function renderNetconfDoc(): string {
  const groups: Array<[string, (f: FieldDoc) => boolean]> = [
    [
      'Top level',
      (f) =>
        !f.path.includes('.') &&
        !['capabilities', 'runtimeConfig', 'args', 'prevResult'].includes(f.path) &&
        !f.path.startsWith('etcd_') &&
        !f.path.startsWith('log_'),
    ],
    ['Datastore (etcd) access', (f) => f.path.startsWith('etcd_')],
    ['Logging', (f) => f.path.startsWith('log_')],
    ['IPAM (`ipam`)', (f) => f.path.startsWith('ipam.')],
    [
      'Container settings, Kubernetes, policy, features',
      (f) => /^(container_settings|kubernetes|policy|feature_control)\./.test(f.path),
    ],
    [
      'Set by the runtime (CNI protocol)',
      (f) => ['capabilities', 'runtimeConfig', 'args', 'prevResult'].includes(f.path),
    ],
  ];
  const out: string[] = [
    '# Network configuration (netconf) reference',
    '',
    '<!-- Generated from src/config/fields.ts by `node scripts/gen-netconf-doc.mjs`; do not edit by hand. -->',
    '',
    'The netconf is the JSON object a container runtime passes to `netplugin` (and to `netplugin-ipam`, directly or',
    'as delegated IPAM of another plugin) on standard input. Unknown top-level keys are tolerated (runtimes add their',
    'own); unknown keys inside `ipam` (for `netplugin-ipam`), `container_settings`, `kubernetes`, `policy` and',
    '`feature_control` are rejected with CNI error code 7, which names the field, the value and the fix.',
    '',
    'Logging goes to stderr always; with `log_file_path` also to that file, rotated at `log_file_max_size` MB. Secrets',
    '(tokens, passwords, key data, Authorization headers) are masked in every log line.',
    '',
  ];
  for (const [title, pick] of groups) {
    out.push(`## ${title}`, '', '| Field | Type | Default | Allowed | Notes | Meaning |', '|---|---|---|---|---|---|');
    for (const f of NETCONF_FIELDS.filter(pick)) out.push(row(f));
    out.push('');
  }
  out.push(
    '## Node name',
    '',
    '`nodename` if set; else the trimmed contents of `nodename_file`; else the lower-cased hostname.',
    '',
    '## Example conflist',
    '',
    '```json',
    JSON.stringify(EXAMPLE, null, 2),
    '```',
    '',
  );
  return out.join('\n');
}
