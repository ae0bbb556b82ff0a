import { describe, expect, it } from 'vitest';
import { parseNetconf, schemaKeys, type Netconf } from '../../src/config/netconf.js';
import { NETCONF_FIELDS } from '../../src/config/fields.js';
import { CniError } from '../../src/errors.js';

const BASE = { cniVersion: '1.0.0', name: 'k8s-pod-network', type: 'netplugin', ipam: { type: 'netplugin-ipam' } };

function parse(
  extra: Record<string, unknown>,
  pluginType: 'netplugin' | 'netplugin-ipam' = 'netplugin',
  warn?: (m: string) => void,
): Netconf {
  return parseNetconf({ ...BASE, ...extra }, { pluginType, warn });
}
function failure(extra: Record<string, unknown>, pluginType: 'netplugin' | 'netplugin-ipam' = 'netplugin'): string {
  try {
    parse(extra, pluginType);
  } catch (e) {
    expect(e).toBeInstanceOf(CniError);
    expect((e as CniError).code).toBe(7);
    return (e as CniError).message;
  }
  throw new Error('expected a code-7 error');
}

describe('defaults', () => {
  it('applies every default to the minimal netconf', () => {
    const c = parse({});
    expect(c).toMatchObject({
      name: 'k8s-pod-network',
      nodename_file: '/var/lib/netplugin/nodename',
      datastore_type: 'etcdv3',
      ipam: { type: 'netplugin-ipam', assign_ipv4: 'true', assign_ipv6: 'false' },
      container_settings: { allow_ip_forwarding: false },
      feature_control: { ip_addrs_no_ipam: false, floating_ips: false },
      num_queues: 1,
      log_level: 'INFO',
      log_file_max_size: 100,
      log_file_max_age: 30,
      log_file_max_count: 10,
      etcdEndpointList: ['http://127.0.0.1:2379'],
    });
    for (const k of [
      'nodename',
      'mtu',
      'log_file_path',
      'policy',
      'kubernetes',
      'readiness_gates',
      'policy_setup_timeout_seconds',
      'etcd_endpoints',
    ]) {
      expect(c[k], k).toBeUndefined();
    }
  });
  it('keeps unknown top-level keys (runtimes add their own)', () => {
    expect(parse({ 'cni.dev/valid-attachments': [], someRuntimeKey: { a: 1 } }).someRuntimeKey).toEqual({ a: 1 });
  });
});

const SAME = Symbol('same');
// [field, valid value, what it parses to (SAME: the value itself)]
const VALID: Array<[string, unknown, unknown]> = [
  ['name', 'a', SAME],
  ['name', 'net_1.2-x', SAME],
  ['cniVersions', ['1.0.0', '1.1.0'], SAME],
  ['nodename', 'node-1', SAME],
  ['nodename_file', '/etc/nodename', SAME],
  ['datastore_type', 'kubernetes', SAME],
  ['etcd_endpoints', 'https://10.0.0.1:2379,https://10.0.0.2:2379', SAME],
  ['etcd_discovery_srv', 'example.com', SAME],
  ['etcd_ca_cert_file', '/etc/etcd/ca.pem', SAME],
  ['etcd_authority', '10.0.0.1:2379', SAME],
  ['etcd_scheme', 'https', SAME],
  ['container_settings', { allow_ip_forwarding: true }, SAME],
  ['readiness_gates', ['http://localhost:9099/readiness', 'https://gate.example/ok'], SAME],
  ['kubernetes', { kubeconfig: '/etc/cni/net.d/kubeconfig' }, SAME],
  ['kubernetes', { k8s_api_root: 'https://10.96.0.1:443' }, SAME],
  ['policy', { type: 'k8s' }, SAME],
  ['policy_setup_timeout_seconds', 0, SAME],
  ['policy_setup_timeout_seconds', 10, SAME],
  ['feature_control', { ip_addrs_no_ipam: true }, { ip_addrs_no_ipam: true, floating_ips: false }],
  ['feature_control', { floating_ips: true }, { ip_addrs_no_ipam: false, floating_ips: true }],
  ['num_queues', 1, SAME],
  ['num_queues', 1024, SAME],
  ['mtu', 68, SAME],
  ['mtu', 65535, SAME],
  ['mtu', 1450, SAME],
  ['log_level', 'debug', 'DEBUG'],
  ['log_level', 'Warning', 'WARNING'],
  ['log_level', 'ERROR', SAME],
  ['log_file_path', '/var/log/netplugin/cni/cni.log', SAME],
  ['log_file_path', '', undefined],
  ['log_file_max_size', 1, SAME],
  ['log_file_max_age', 0, SAME],
  ['log_file_max_count', 0, SAME],
  ['capabilities', { portMappings: true }, SAME],
  ['runtimeConfig', { portMappings: [] }, SAME],
  ['args', { cni: { ips: ['10.0.0.1'] } }, SAME],
  ['prevResult', { cniVersion: '1.0.0', ips: [] }, SAME],
];

describe('valid values', () => {
  it.each(VALID)('%s = %j', (field, value, expected) => {
    const c = parse({ [field]: value });
    expect(c[field]).toEqual(expected === SAME ? value : expected);
  });
  it.each([
    [
      { type: 'netplugin-ipam', assign_ipv4: 'false', assign_ipv6: 'true' },
      { assign_ipv4: 'false', assign_ipv6: 'true' },
    ],
    [
      { type: 'netplugin-ipam', assign_ipv4: 'TRUE' },
      { assign_ipv4: 'true', assign_ipv6: 'false' },
    ],
    [
      { type: 'netplugin-ipam', ipv4_pools: ['10.244.0.0/16', 'default-ipv4-ippool'] },
      { ipv4_pools: ['10.244.0.0/16', 'default-ipv4-ippool'] },
    ],
    [
      { type: 'netplugin-ipam', ipv6_pools: ['fd00:10:244::/64', 'v6-pool'] },
      { ipv6_pools: ['fd00:10:244::/64', 'v6-pool'] },
    ],
  ])('ipam %j', (ipam, expected) => {
    expect(parse({ ipam }).ipam).toMatchObject(expected);
  });
  it('passes another IPAM type through untouched', () => {
    const ipam = {
      type: 'host-local',
      ranges: [[{ subnet: 'usePodCidr' }]],
      routes: [{ dst: '0.0.0.0/0' }],
      assign_ipv4: true,
    };
    expect(parse({ ipam }).ipam).toEqual(ipam);
  });
  it('etcd endpoint list from etcd_endpoints', () => {
    expect(parse({ etcd_endpoints: 'https://a:2379, https://b:2379' }).etcdEndpointList).toEqual([
      'https://a:2379',
      'https://b:2379',
    ]);
  });
  it('etcd endpoint list from the deprecated options, with a warning', () => {
    const warnings: string[] = [];
    expect(
      parse({ etcd_authority: '10.1.1.1:4001', etcd_scheme: 'https' }, 'netplugin', (m) => warnings.push(m))
        .etcdEndpointList,
    ).toEqual(['https://10.1.1.1:4001']);
    expect(warnings.join()).toContain('deprecated');
    expect(warnings.join()).toContain('"etcd_endpoints": "https://10.1.1.1:4001"');
  });
  it('etcd_endpoints wins over etcd_authority (warned as ignored)', () => {
    const warnings: string[] = [];
    expect(
      parse({ etcd_endpoints: 'http://e:2379', etcd_authority: 'x:1' }, 'netplugin', (m) => warnings.push(m))
        .etcdEndpointList,
    ).toEqual(['http://e:2379']);
    expect(warnings.join()).toContain('ignored because etcd_endpoints is set');
  });
  it('no endpoints with discovery SRV or the kubernetes datastore', () => {
    expect(parse({ etcd_discovery_srv: 'example.com' }).etcdEndpointList).toEqual([]);
    expect(parse({ datastore_type: 'kubernetes' }).etcdEndpointList).toEqual([]);
  });
  it('mutual TLS with both files', () => {
    expect(parse({ etcd_key_file: '/k.pem', etcd_cert_file: '/c.pem' })).toMatchObject({
      etcd_key_file: '/k.pem',
      etcd_cert_file: '/c.pem',
    });
  });
  it('warns about a likely typo of a top-level field', () => {
    const warnings: string[] = [];
    parse({ log_levle: 'DEBUG' }, 'netplugin', (m) => warnings.push(m));
    expect(warnings).toEqual(['unknown netconf field "log_levle" is ignored; did you mean "log_level"?']);
  });
});

// [case, netconf overrides, message parts]
const INVALID: Array<[string, Record<string, unknown>, string[]]> = [
  ['name missing', { name: undefined }, ['name: missing; expected a string', 'add "name": "k8s-pod-network"']],
  ['name with space', { name: 'my net' }, ['name: got string "my net"', "letters, digits, '_', '.' or '-'"]],
  ['name starting with -', { name: '-x' }, ['name: got string "-x"']],
  ['name a number', { name: 5 }, ['name: got number 5; expected a string']],
  ['type missing', { type: undefined }, ['type: missing', 'add "type": "netplugin"']],
  ['type wrong', { type: 'calico' }, ['type: got string "calico"; expected "netplugin"']],
  [
    'cniVersions not an array',
    { cniVersions: '1.0.0' },
    ['cniVersions: got string "1.0.0"; expected an array of strings'],
  ],
  ['nodename empty', { nodename: '' }, ['nodename: got string ""']],
  ['nodename_file relative', { nodename_file: 'nodename' }, ['nodename_file: got string "nodename"', 'absolute path']],
  [
    'datastore_type unknown',
    { datastore_type: 'etcdv2' },
    ['datastore_type: got string "etcdv2"', '`etcdv3`, `kubernetes`'],
  ],
  [
    'etcd_endpoints not URLs',
    { etcd_endpoints: '10.0.0.1:2379' },
    ['etcd_endpoints: got string "10.0.0.1:2379"', 'comma-separated http(s) URLs'],
  ],
  ['etcd_endpoints one bad of two', { etcd_endpoints: 'http://a:2379,ftp://b' }, ['etcd_endpoints: got string']],
  [
    'etcd_endpoints + discovery',
    { etcd_endpoints: 'http://a:2379', etcd_discovery_srv: 'example.com' },
    ['etcd_discovery_srv: cannot be combined with etcd_endpoints: remove one'],
  ],
  [
    'etcd_discovery_srv not a domain',
    { etcd_discovery_srv: 'http://x' },
    ['etcd_discovery_srv: got string "http://x"', 'DNS domain'],
  ],
  [
    'etcd_key_file without cert',
    { etcd_key_file: '/k.pem' },
    ['etcd_cert_file: missing while etcd_key_file is set', 'set both or neither'],
  ],
  ['etcd_cert_file without key', { etcd_cert_file: '/c.pem' }, ['etcd_key_file: missing while etcd_cert_file is set']],
  ['etcd_ca_cert_file relative', { etcd_ca_cert_file: 'ca.pem' }, ['etcd_ca_cert_file: got string "ca.pem"']],
  [
    'etcd_authority with scheme',
    { etcd_authority: 'http://x:1' },
    ['etcd_authority: got string "http://x:1"', 'host:port'],
  ],
  ['etcd_scheme unknown', { etcd_scheme: 'grpc' }, ['etcd_scheme: got string "grpc"', '`http`, `https`']],
  [
    'ipam missing',
    { ipam: undefined },
    ['ipam: missing; expected an object', 'add "ipam": {"type": "netplugin-ipam"}'],
  ],
  ['ipam a string', { ipam: 'netplugin-ipam' }, ['ipam: got string "netplugin-ipam"; expected an object']],
  ['ipam.type missing', { ipam: {} }, ['ipam.type: missing']],
  ['other ipam type empty', { ipam: { type: '' } }, ['ipam.type: got string ""']],
  [
    'assign_ipv4 boolean',
    { ipam: { type: 'netplugin-ipam', assign_ipv4: true } },
    ['ipam.assign_ipv4: got boolean true; this field is a string: write "true" (quoted)'],
  ],
  [
    'assign_ipv6 boolean false',
    { ipam: { type: 'netplugin-ipam', assign_ipv6: false } },
    ['ipam.assign_ipv6: got boolean false; this field is a string: write "false" (quoted)'],
  ],
  [
    'assign_ipv4 yes',
    { ipam: { type: 'netplugin-ipam', assign_ipv4: 'yes' } },
    ['ipam.assign_ipv4: got string "yes"; expected "true" or "false"'],
  ],
  [
    'ipv4_pools a string',
    { ipam: { type: 'netplugin-ipam', ipv4_pools: '10.0.0.0/8' } },
    ['ipam.ipv4_pools: got string "10.0.0.0/8"; expected an array of strings'],
  ],
  [
    'ipv4_pools with IPv6 CIDR',
    { ipam: { type: 'netplugin-ipam', ipv4_pools: ['fd00::/64'] } },
    ['ipam.ipv4_pools[0]: got string "fd00::/64"', 'IPv4 CIDR'],
  ],
  [
    'ipv6_pools with IPv4 CIDR',
    { ipam: { type: 'netplugin-ipam', ipv6_pools: ['10.0.0.0/8'] } },
    ['ipam.ipv6_pools[0]: got string "10.0.0.0/8"', 'IPv6 CIDR'],
  ],
  [
    'ipv4_pools bad name',
    { ipam: { type: 'netplugin-ipam', ipv4_pools: ['My_Pool'] } },
    ['ipam.ipv4_pools[0]: got string "My_Pool"', 'pool name'],
  ],
  [
    'ipv4_pools bad prefix',
    { ipam: { type: 'netplugin-ipam', ipv4_pools: ['10.0.0.0/33'] } },
    ['ipam.ipv4_pools[0]: got string "10.0.0.0/33"'],
  ],
  [
    'unknown ipam key',
    { ipam: { type: 'netplugin-ipam', asign_ipv4: 'true' } },
    [
      'ipam.asign_ipv4: unknown field',
      'did you mean ipam.assign_ipv4?',
      'ipam allows only type, assign_ipv4, assign_ipv6, ipv4_pools, ipv6_pools',
    ],
  ],
  [
    'container_settings unknown key',
    { container_settings: { allow_ip_forward: true } },
    ['container_settings.allow_ip_forward: unknown field', 'did you mean container_settings.allow_ip_forwarding?'],
  ],
  [
    'allow_ip_forwarding quoted',
    { container_settings: { allow_ip_forwarding: 'true' } },
    ['container_settings.allow_ip_forwarding: got string "true"; this field is a boolean: write true (no quotes)'],
  ],
  [
    'readiness_gates not URLs',
    { readiness_gates: ['localhost:9099'] },
    ['readiness_gates[0]: got string "localhost:9099"; expected an http:// or https:// URL'],
  ],
  [
    'readiness_gates a string',
    { readiness_gates: 'http://x' },
    ['readiness_gates: got string "http://x"; expected an array of strings'],
  ],
  [
    'kubernetes unknown key',
    { kubernetes: { k8s_auth_token: 'x' } },
    ['kubernetes.k8s_auth_token: unknown field', 'kubernetes allows only kubeconfig, k8s_api_root'],
  ],
  [
    'kubeconfig relative',
    { kubernetes: { kubeconfig: 'kubeconfig' } },
    ['kubernetes.kubeconfig: got string "kubeconfig"', 'absolute path'],
  ],
  [
    'k8s_api_root not a URL',
    { kubernetes: { k8s_api_root: '10.96.0.1' } },
    ['kubernetes.k8s_api_root: got string "10.96.0.1"; expected an http:// or https:// URL'],
  ],
  ['policy type wrong', { policy: { type: 'calico' } }, ['policy.type: got string "calico"; expected "k8s"']],
  ['policy without type', { policy: {} }, ['policy.type: missing', 'add "type": "k8s"']],
  ['policy unknown key', { policy: { type: 'k8s', k8s_api_root: 'x' } }, ['policy.k8s_api_root: unknown field']],
  [
    'policy_setup_timeout_seconds negative',
    { policy_setup_timeout_seconds: -1 },
    ['policy_setup_timeout_seconds: got number -1; expected an integer (>= 0)'],
  ],
  [
    'policy_setup_timeout_seconds fractional',
    { policy_setup_timeout_seconds: 1.5 },
    ['policy_setup_timeout_seconds: got number 1.5; expected an integer'],
  ],
  [
    'feature_control unknown key',
    { feature_control: { floatingIPs: true } },
    ['feature_control.floatingIPs: unknown field', 'did you mean feature_control.floating_ips?'],
  ],
  [
    'feature_control quoted',
    { feature_control: { floating_ips: 'false' } },
    ['feature_control.floating_ips: got string "false"; this field is a boolean: write false (no quotes)'],
  ],
  ['num_queues 0', { num_queues: 0 }, ['num_queues: got number 0; expected an integer (1..1024)']],
  ['num_queues too many', { num_queues: 5000 }, ['num_queues: got number 5000; expected an integer (1..1024)']],
  [
    'num_queues quoted',
    { num_queues: '4' },
    ['num_queues: got string "4"; this field is a number: write 4 (no quotes)'],
  ],
  ['mtu too small', { mtu: 67 }, ['mtu: got number 67; expected an integer (68..65535)']],
  ['mtu too big', { mtu: 65536 }, ['mtu: got number 65536']],
  ['mtu quoted', { mtu: '1500' }, ['mtu: got string "1500"; this field is a number: write 1500 (no quotes)']],
  [
    'log_level unknown',
    { log_level: 'TRACE' },
    ['log_level: got string "TRACE"', '`ERROR`, `WARNING`, `INFO`, `DEBUG`'],
  ],
  ['log_file_path relative', { log_file_path: 'cni.log' }, ['log_file_path: got string "cni.log"', 'absolute path']],
  [
    'log_file_max_size 0',
    { log_file_max_size: 0 },
    ['log_file_max_size: got number 0; expected an integer (MB) (>= 1)'],
  ],
  ['log_file_max_age negative', { log_file_max_age: -1 }, ['log_file_max_age: got number -1']],
  [
    'log_file_max_count quoted',
    { log_file_max_count: '10' },
    ['log_file_max_count: got string "10"; this field is a number'],
  ],
  ['capabilities not an object', { capabilities: ['portMappings'] }, ['capabilities: got an array']],
];

describe('invalid values (code 7 naming field, value and fix)', () => {
  it.each(INVALID)('%s', (_n, extra, parts) => {
    const msg = failure(extra);
    for (const p of parts) expect(msg).toContain(p);
  });
  it('reports every bad field at once', () => {
    const msg = failure({ num_queues: 0, mtu: 1, log_level: 'x' });
    for (const f of ['num_queues:', 'mtu:', 'log_level:']) expect(msg).toContain(f);
  });
  it('rejects a non-object netconf', () => {
    expect(() => parseNetconf([], { pluginType: 'netplugin' })).toThrow(/expected a JSON object/);
  });
});

describe('netplugin-ipam', () => {
  it('does not require type netplugin (delegated from bridge)', () => {
    const c = parse({ type: 'bridge', bridge: 'cni0' }, 'netplugin-ipam');
    expect(c.type).toBe('bridge');
    expect(c['bridge']).toBe('cni0');
  });
  it('requires ipam.type netplugin-ipam', () => {
    const msg = failure({ ipam: { type: 'host-local' } }, 'netplugin-ipam');
    expect(msg).toContain('ipam.type: got string "host-local"');
    expect(msg).toContain('"ipam": {"type": "netplugin-ipam"}');
  });
  it('validates its ipam section strictly', () => {
    expect(
      failure({ type: 'bridge', ipam: { type: 'netplugin-ipam', subnet: '10.0.0.0/8' } }, 'netplugin-ipam'),
    ).toContain('ipam.subnet: unknown field');
  });
});

describe('field table and schema agree', () => {
  it('every schema key has a documented row and every row is in the schema', () => {
    const keys = schemaKeys('netplugin').sort();
    const rows = NETCONF_FIELDS.map((f) => f.path).sort();
    expect(keys).toEqual(rows);
  });
});
