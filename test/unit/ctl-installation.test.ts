// The Installation resource: each field and default rendered into the conflist
// and pools, every validation error, and `installation apply` run twice against
// temporary CNI dirs and an in-memory datastore (the second run changes nothing).
import {
  cpSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import { parseAllDocuments } from 'yaml';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { MemoryDatastore } from '../../src/datastore/memory.js';
import { API_VERSION } from '../../src/model/resources.js';
import { runCtl } from '../../src/ctl/index.js';
import { parseNetconf } from '../../src/config/index.js';
import { parseInstallation, renderInstallation, InstallationError } from '../../src/model/installation.js';
import pkg from '../../package.json' with { type: 'json' };

const K8S = {
  datastore_type: 'kubernetes' as const,
  kubernetes: { kubeconfig: '/etc/cni/net.d/netplugin-kubeconfig' },
};

function inst(spec: Record<string, unknown>, name = 'default'): Record<string, unknown> {
  return { apiVersion: 'operator.netplugin.org/v1', kind: 'Installation', metadata: { name }, spec };
}
function render(spec: Record<string, unknown>, datastore: Parameters<typeof renderInstallation>[1]['datastore'] = K8S) {
  return renderInstallation(parseInstallation(inst(spec)), { datastore });
}
function entry(spec: Record<string, unknown>): Record<string, any> {
  return (render(spec).conflist.plugins as Array<Record<string, any>>)[0]!;
}

describe('render: fields and defaults', () => {
  it('an empty spec: one IPv4 pool 192.168.0.0/16 with IP-in-IP, NAT, all nodes; portmap; Info logs of 100 MB, 30 days, 10 files', () => {
    const r = render({});
    expect(r.pools).toEqual([
      {
        apiVersion: API_VERSION,
        kind: 'IPPool',
        metadata: { name: 'default-ipv4-ippool' },
        spec: {
          cidr: '192.168.0.0/16',
          blockSize: 26,
          ipipMode: 'Always',
          vxlanMode: 'Never',
          natOutgoing: true,
          nodeSelector: 'all()',
        },
      },
    ]);
    const plugins = r.conflist.plugins as Array<Record<string, unknown>>;
    expect(plugins[1]).toEqual({ type: 'portmap', snat: true, capabilities: { portMappings: true } });
    expect(plugins[0]).toMatchObject({
      type: 'netplugin',
      log_level: 'INFO',
      log_file_max_size: 100,
      log_file_max_age: 30,
      log_file_max_count: 10,
      ipam: { type: 'netplugin-ipam', assign_ipv4: 'true', assign_ipv6: 'false' },
    });
    expect(plugins[0]).not.toHaveProperty('mtu');
    expect(plugins[0]).not.toHaveProperty('policy_setup_timeout_seconds');
  });

  it('ipPools: [] creates no pools', () => {
    expect(render({ netpluginNetwork: { ipPools: [] } }).pools).toEqual([]);
  });

  it.each([
    ['IPIP', 'Always', 'Never'],
    ['IPIPCrossSubnet', 'CrossSubnet', 'Never'],
    ['VXLAN', 'Never', 'Always'],
    ['VXLANCrossSubnet', 'Never', 'CrossSubnet'],
    ['None', 'Never', 'Never'],
  ])('encapsulation %s -> ipipMode %s, vxlanMode %s', (encapsulation, ipipMode, vxlanMode) => {
    const [p] = render({ netpluginNetwork: { ipPools: [{ cidr: '10.10.0.0/16', encapsulation }] } }).pools;
    expect(p!.spec).toMatchObject({ ipipMode, vxlanMode });
  });

  it('an IPv6 pool defaults to no encapsulation, no NAT and block size 122, and is named default-ipv6-ippool', () => {
    const r = render({ netpluginNetwork: { ipPools: [{ cidr: '10.0.0.0/16' }, { cidr: 'fd00:1::/64' }] } });
    expect(
      r.pools.map((p) => [p.metadata.name, p.spec.ipipMode, p.spec.vxlanMode, p.spec.blockSize, p.spec.natOutgoing]),
    ).toEqual([
      ['default-ipv4-ippool', 'Always', 'Never', 26, true],
      ['default-ipv6-ippool', 'Never', 'Never', 122, false],
    ]);
    expect(entry({ netpluginNetwork: { ipPools: [{ cidr: '10.0.0.0/16' }, { cidr: 'fd00:1::/64' }] } }).ipam).toEqual({
      type: 'netplugin-ipam',
      assign_ipv4: 'true',
      assign_ipv6: 'true',
    });
  });

  it('an IPv6-only install assigns no IPv4', () => {
    expect(entry({ netpluginNetwork: { ipPools: [{ cidr: 'fd00:1::/64' }] } }).ipam).toMatchObject({
      assign_ipv4: 'false',
      assign_ipv6: 'true',
    });
  });

  it('natOutgoing given explicitly wins over the family default, both ways', () => {
    const r = render({
      netpluginNetwork: {
        ipPools: [
          { cidr: '10.0.0.0/16', natOutgoing: 'Disabled' },
          { cidr: 'fd00:1::/64', natOutgoing: 'Enabled' },
        ],
      },
    });
    expect(r.pools.map((p) => p.spec.natOutgoing)).toEqual([false, true]);
  });

  it('pool name, blockSize, natOutgoing and nodeSelector are carried over', () => {
    const [p] = render({
      netpluginNetwork: {
        ipPools: [
          { name: 'zone-a', cidr: '10.20.0.0/16', blockSize: 28, natOutgoing: 'Disabled', nodeSelector: "zone == 'a'" },
        ],
      },
    }).pools;
    expect(p).toMatchObject({
      metadata: { name: 'zone-a' },
      spec: { cidr: '10.20.0.0/16', blockSize: 28, natOutgoing: false, nodeSelector: "zone == 'a'" },
    });
  });

  it('mtu, linuxPolicySetupTimeoutSeconds and hostPorts Disabled', () => {
    const r = render({ netpluginNetwork: { mtu: 1400, linuxPolicySetupTimeoutSeconds: 7, hostPorts: 'Disabled' } });
    const plugins = r.conflist.plugins as Array<Record<string, unknown>>;
    expect(plugins).toHaveLength(1);
    expect(plugins[0]).toMatchObject({ mtu: 1400, policy_setup_timeout_seconds: 7 });
    expect(r.agent).toMatchObject({ mtu: 1400, hostPorts: false, policySetupTimeoutSeconds: 7 });
  });

  it.each([
    ['100Mi', 100],
    ['1Gi', 1024],
    ['1500Ki', 2],
    ['5M', 5],
  ])('logFileMaxSize %s is rendered as %i MB', (logFileMaxSize, mb) => {
    expect(entry({ logging: { cni: { logFileMaxSize } } }).log_file_max_size).toBe(mb);
  });

  it('log severity, age and count', () => {
    expect(
      entry({ logging: { cni: { logSeverity: 'Debug', logFileMaxAgeDays: 3, logFileMaxCount: 0 } } }),
    ).toMatchObject({ log_level: 'DEBUG', log_file_max_age: 3, log_file_max_count: 0 });
  });

  it('HostLocal, single stack: usePodCidr only; dual stack: usePodCidr and usePodCidrIPv6; the plugin accepts both', () => {
    const single = entry({
      cni: { ipam: { type: 'HostLocal' } },
      netpluginNetwork: { ipPools: [{ cidr: '10.0.0.0/16' }] },
    });
    expect(single.ipam).toEqual({ type: 'host-local', ranges: [[{ subnet: 'usePodCidr' }]] });
    const dual = render({
      cni: { ipam: { type: 'HostLocal' } },
      netpluginNetwork: { ipPools: [{ cidr: '10.0.0.0/16' }, { cidr: 'fd00:1::/64' }] },
    });
    expect((dual.conflist.plugins as Array<Record<string, any>>)[0]!.ipam).toEqual({
      type: 'host-local',
      ranges: [[{ subnet: 'usePodCidr' }], [{ subnet: 'usePodCidrIPv6' }]],
    });
    expect(dual.agent.ipam).toBe('host-local');
    const conf = dual.conflist as { name: string; cniVersion: string; plugins: Array<Record<string, unknown>> };
    expect(() =>
      parseNetconf(
        { name: conf.name, cniVersion: conf.cniVersion, ...conf.plugins[0] },
        { pluginType: 'netplugin', warn: () => {} },
      ),
    ).not.toThrow();
  });

  it('the conflist names the datastore netpluginctl uses (etcd endpoints and TLS files)', () => {
    const e = (
      render(
        {},
        { datastore_type: 'etcdv3', etcd_endpoints: 'https://10.0.0.1:2379', etcd_ca_cert_file: '/etc/ca.pem' },
      ).conflist.plugins as Array<Record<string, unknown>>
    )[0]!;
    expect(e).toMatchObject({
      datastore_type: 'etcdv3',
      etcd_endpoints: 'https://10.0.0.1:2379',
      etcd_ca_cert_file: '/etc/ca.pem',
    });
    expect(e).not.toHaveProperty('policy');
  });
});

describe('validation errors name the field and the fix', () => {
  it.each([
    ['a name other than default', inst({}, 'main'), /metadata\.name: must be "default".*\(got "main"\)/],
    [
      'an unknown encapsulation',
      inst({ netpluginNetwork: { ipPools: [{ cidr: '10.0.0.0/16', encapsulation: 'GRE' }] } }),
      /spec\.netpluginNetwork\.ipPools\[0\]\.encapsulation: expected one of IPIP, IPIPCrossSubnet, VXLAN, VXLANCrossSubnet, None \(got "GRE"\)/,
    ],
    [
      'a bad CIDR',
      inst({ netpluginNetwork: { ipPools: [{ cidr: '10.0.0.0/33' }] } }),
      /ipPools\[0\]\.cidr: '10\.0\.0\.0\/33' is not a CIDR: prefix length '33' must be an integer from 0 to 32 .*\(got "10\.0\.0\.0\/33"\)/,
    ],
    [
      'a CIDR with host bits',
      inst({ netpluginNetwork: { ipPools: [{ cidr: '10.0.0.1/16' }] } }),
      /ipPools\[0\]\.cidr: '10\.0\.0\.1\/16' has host bits set: the network is 10\.0\.0\.0\/16/,
    ],
    [
      'a negative policy timeout',
      inst({ netpluginNetwork: { linuxPolicySetupTimeoutSeconds: -1 } }),
      /linuxPolicySetupTimeoutSeconds: must be >= 0/,
    ],
    [
      'hostPorts Maybe',
      inst({ netpluginNetwork: { hostPorts: 'Maybe' } }),
      /hostPorts: expected Enabled or Disabled \(got "Maybe"\)/,
    ],
    [
      'natOutgoing true',
      inst({ netpluginNetwork: { ipPools: [{ cidr: '10.0.0.0/16', natOutgoing: true }] } }),
      /natOutgoing: expected Enabled or Disabled \(got true\)/,
    ],
    ['an MTU of 10', inst({ netpluginNetwork: { mtu: 10 } }), /mtu: must be 68-65535 \(got 10\)/],
    ['cni.type Calico', inst({ cni: { type: 'Calico' } }), /spec\.cni\.type: expected "Netplugin"/],
    [
      'ipam AmazonVPC',
      inst({ cni: { ipam: { type: 'AmazonVPC' } } }),
      /spec\.cni\.ipam\.type: expected Netplugin or HostLocal/,
    ],
    [
      'a log size quantity that is not one',
      inst({ logging: { cni: { logFileMaxSize: 'lots' } } }),
      /logFileMaxSize: expected a quantity.*100Mi/,
    ],
    [
      'a misspelt field',
      inst({ netpluginNetwork: { ipPool: [] } }),
      /spec\.netpluginNetwork: unknown field\(s\) ipPool/,
    ],
    [
      'an IPv4 block size of 16',
      inst({ netpluginNetwork: { ipPools: [{ cidr: '10.0.0.0/8', blockSize: 16 }] } }),
      /ipPools\[0\]\.blockSize: 16 is out of range for IPv4; use 20-32/,
    ],
    [
      'IP-in-IP on IPv6',
      inst({ netpluginNetwork: { ipPools: [{ cidr: 'fd00::/64', encapsulation: 'IPIP' }] } }),
      /ipPools\[0\]\.encapsulation: IPIP carries IPv4 only/,
    ],
    [
      'two pools with one name',
      inst({ netpluginNetwork: { ipPools: [{ cidr: '10.0.0.0/16' }, { cidr: '10.1.0.0/16' }] } }),
      /ipPools\[1\]\.name: "default-ipv4-ippool" is used by two pools/,
    ],
    [
      'HostLocal with two IPv4 pools',
      inst({
        cni: { ipam: { type: 'HostLocal' } },
        netpluginNetwork: {
          ipPools: [
            { name: 'a', cidr: '10.0.0.0/16' },
            { name: 'b', cidr: '10.1.0.0/16' },
          ],
        },
      }),
      /HostLocal IPAM .* at most one IPv4 pool/,
    ],
    [
      'HostLocal with VXLAN',
      inst({
        cni: { ipam: { type: 'HostLocal' } },
        netpluginNetwork: { ipPools: [{ cidr: '10.0.0.0/16', encapsulation: 'VXLAN' }] },
      }),
      /ipPools\[0\]\.encapsulation: VXLAN is not supported with HostLocal IPAM/,
    ],
    [
      'HostLocal with no pools',
      inst({ cni: { ipam: { type: 'HostLocal' } }, netpluginNetwork: { ipPools: [] } }),
      /HostLocal IPAM needs an IPv4 and\/or IPv6 pool/,
    ],
  ])('%s', (_name, doc, msg) => {
    expect(() => parseInstallation(doc)).toThrow(InstallationError);
    expect(() => parseInstallation(doc)).toThrow(msg);
  });
});

let root: string;
let pkgDir: string;
let bin: string;
let conf: string;
let ds: MemoryDatastore;

beforeEach(() => {
  root = mkdtempSync(join(tmpdir(), `ctl-installation-${process.pid}-`));
  pkgDir = join(root, 'pkg');
  bin = join(root, 'opt/cni/bin');
  conf = join(root, 'etc/cni/net.d');
  mkdirSync(join(pkgDir, 'dist'), { recursive: true });
  for (const p of ['netplugin', 'netplugin-ipam']) writeFileSync(join(pkgDir, 'dist', `${p}.mjs`), '// stand-in\n');
  ds = new MemoryDatastore();
});
afterEach(() => rmSync(root, { recursive: true, force: true }));

async function ctl(
  args: string[],
  input = '',
  env: Record<string, string> = {},
): Promise<{ code: number; out: string; err: string }> {
  let out = '';
  let err = '';
  const code = await runCtl(args, {
    env: { ETCD_ENDPOINTS: 'http://127.0.0.1:2379', ...env },
    stdin: input,
    stdout: (s) => (out += s),
    stderr: (s) => (err += s),
    packageDir: pkgDir,
    nodePath: process.execPath,
    cwd: root,
    openDatastore: async () => ds,
  });
  return { code, out, err };
}
const apply = (yaml: string, extra: string[] = [], env: Record<string, string> = {}) =>
  ctl(['installation', 'apply', '-f', '-', '--cni-bin-dir', bin, '--cni-conf-dir', conf, ...extra], yaml, env);

const DUAL = `apiVersion: operator.netplugin.org/v1
kind: Installation
metadata: {name: default}
spec:
  netpluginNetwork:
    ipPools:
      - {cidr: 10.244.0.0/16, encapsulation: VXLAN}
      - {cidr: "fd00:10:244::/56"}
`;

describe('netpluginctl installation render', () => {
  it('writes the conflist, pools and agent settings to -o DIR', async () => {
    const r = await ctl(['installation', 'render', '-f', '-', '-o', 'out'], DUAL);
    expect(r.err).toBe('');
    expect(r.code).toBe(0);
    const c = JSON.parse(readFileSync(join(root, 'out/10-netplugin.conflist'), 'utf8'));
    expect(c.plugins[0]).toMatchObject({
      datastore_type: 'etcdv3',
      etcd_endpoints: 'http://127.0.0.1:2379',
      ipam: { assign_ipv4: 'true', assign_ipv6: 'true' },
    });
    expect(
      JSON.parse(readFileSync(join(root, 'out/ippools.json'), 'utf8')).items.map(
        (p: { spec: { cidr: string } }) => p.spec.cidr,
      ),
    ).toEqual(['10.244.0.0/16', 'fd00:10:244::/56']);
    expect(JSON.parse(readFileSync(join(root, 'out/agent.json'), 'utf8'))).toMatchObject({
      ipam: 'netplugin-ipam',
      hostPorts: true,
    });
  });

  it('renders the flow-log aggregator with a FlowLogAggregator, and its UI with a FlowUI', async () => {
    const agg = `${DUAL}---\napiVersion: operator.netplugin.org/v1\nkind: FlowLogAggregator\nmetadata: {name: default}\n`;
    const ui = `${agg}---\napiVersion: operator.netplugin.org/v1\nkind: FlowUI\nmetadata: {name: default}\n`;
    expect(JSON.parse((await ctl(['installation', 'render', '-f', '-'], DUAL)).out).flowsManifest).toBeUndefined();
    const apiOnly = JSON.parse((await ctl(['installation', 'render', '-f', '-'], agg)).out).flowsManifest as string;
    expect(apiOnly).toMatch(/- --ui=false\n/);
    expect(apiOnly).toMatch(new RegExp(`image: netplugin/node:${pkg.version.replace(/\./g, '\\.')}\n`));
    const { parseAllDocuments } = await import('yaml');
    expect(parseAllDocuments(apiOnly).map((d) => d.toJS().kind)).toEqual([
      'ServiceAccount',
      'Secret',
      'Service',
      'Deployment',
    ]);
    const r = await ctl(['installation', 'render', '-f', '-', '-o', 'out'], ui);
    expect(r.out).toMatch(/out\/netplugin-flows\.yaml written/);
    expect(readFileSync(join(root, 'out/netplugin-flows.yaml'), 'utf8')).toMatch(/- --ui=true\n/);
    const alone = await ctl(
      ['installation', 'render', '-f', '-'],
      `${DUAL}---\napiVersion: operator.netplugin.org/v1\nkind: FlowUI\nmetadata: {name: default}\n`,
    );
    expect(alone).toMatchObject({ code: 1 });
    expect(alone.err).toMatch(/FlowUI "default" needs a FlowLogAggregator "default"/);
  });

  it('--registry REG writes every manifest of deploy/ with the one image REG/netplugin/node:<version>, nothing else changed', async () => {
    const deploy = join(__dirname, '../../deploy');
    cpSync(deploy, join(pkgDir, 'deploy'), { recursive: true });
    const r = await ctl(
      ['installation', 'render', '-f', '-', '-o', 'out', '--registry', 'registry.example.com:5000/infra/'],
      DUAL,
    );
    expect(r.err).toBe('');
    expect(r.code).toBe(0);
    const shipped = readdirSync(deploy)
      .filter((f) => /\.ya?ml$/.test(f))
      .sort();
    expect(readdirSync(join(root, 'out/manifests')).sort()).toEqual(shipped);
    const want = `registry.example.com:5000/infra/netplugin/node:${pkg.version}`;
    let images = 0;
    for (const f of shipped) {
      const text = readFileSync(join(root, 'out/manifests', f), 'utf8');
      for (const d of parseAllDocuments(text)) {
        const o = d.toJS() as any;
        const spec = o?.spec?.template?.spec;
        for (const c of [...(spec?.initContainers ?? []), ...(spec?.containers ?? [])]) {
          expect(c.image, `${f} ${c.name}`).toBe(want);
          images++;
        }
      }
      // Only the image lines differ from the shipped file.
      const strip = (t: string) => t.split('\n').filter((l) => !/^\s*(-\s+)?image:/.test(l));
      expect(strip(text)).toEqual(strip(readFileSync(join(deploy, f), 'utf8')));
    }
    expect(images).toBeGreaterThanOrEqual(4);
  });

  it("netpluginNetwork.bgp: Enabled renders the node DaemonSet with --bgp=on and BIRD's run dir; Disabled leaves it off", async () => {
    const deploy = join(__dirname, '../../deploy');
    cpSync(deploy, join(pkgDir, 'deploy'), { recursive: true });
    const agentArgs = (dir: string) => {
      const docs = parseAllDocuments(
        readFileSync(join(root, dir, 'manifests/netplugin-node-daemonset.yaml'), 'utf8'),
      ).map((d) => d.toJS() as any);
      const ds = docs.find((o) => o?.kind === 'DaemonSet');
      return (ds.spec.template.spec.containers as Array<{ name: string; args: string[] }>).find(
        (c) => c.name === 'netplugin-node',
      )!.args;
    };
    const on = DUAL.replace('  netpluginNetwork:\n', '  netpluginNetwork:\n    bgp: Enabled\n');
    expect(await ctl(['installation', 'render', '-f', '-', '-o', 'on', '--registry', 'reg.example'], on)).toMatchObject(
      { code: 0, err: '' },
    );
    const args = agentArgs('on');
    expect(args).toEqual(expect.arrayContaining(['--bgp=on', '--bird-run-dir=/var/run/netplugin/bird']));
    expect(args).not.toContain('--bgp=off');
    // The run dir lies on the agent's /var/run/netplugin host mount (where netpluginctl node status looks).
    const text = readFileSync(join(root, 'on/manifests/netplugin-node-daemonset.yaml'), 'utf8');
    expect(text).toMatch(/mountPath: \/var\/run\/netplugin \}/);
    // Only the two flag lines (and the images) differ from the shipped DaemonSet.
    const shipped = readFileSync(join(deploy, 'netplugin-node-daemonset.yaml'), 'utf8').split('\n');
    const changed = text.split('\n').filter((l, i) => l !== shipped[i] && !/image:/.test(l));
    expect(changed.map((l) => l.trim())).toEqual(['- --bgp=on', '- --bird-run-dir=/var/run/netplugin/bird']);
    expect(JSON.parse(readFileSync(join(root, 'on/agent.json'), 'utf8'))).toMatchObject({
      bgp: true,
      agentArgs: ['--bgp=on', '--bird-run-dir=/var/run/netplugin/bird'],
    });
    expect(
      await ctl(['installation', 'render', '-f', '-', '-o', 'off', '--registry', 'reg.example'], DUAL),
    ).toMatchObject({ code: 0 });
    expect(agentArgs('off')).toContain('--bgp=off');
    expect(agentArgs('off').filter((a) => a.startsWith('--bird-run-dir'))).toEqual([]);
    const bad = await ctl(
      ['installation', 'render', '-f', '-'],
      DUAL.replace('  netpluginNetwork:\n', '  netpluginNetwork:\n    bgp: on\n'),
    );
    expect(bad.err).toMatch(/spec\.netpluginNetwork\.bgp: expected Enabled or Disabled \(got "on"\)/);
    // apply names the flags it cannot set itself (they are the DaemonSet's).
    expect((await apply(on)).out).toMatch(
      /netpluginNetwork\.bgp accepted \(Enabled: the node agent runs with --bgp=on --bird-run-dir=\/var\/run\/netplugin\/bird/,
    );
  });

  it('--registry: a bad registry and a missing -o are refused with the fix', async () => {
    expect(
      (await ctl(['installation', 'render', '-f', '-', '-o', 'out', '--registry', 'https://reg/x'], DUAL)).err,
    ).toMatch(/--registry: "https:\/\/reg\/x" is not a registry; expected a host/);
    expect((await ctl(['installation', 'render', '-f', '-', '--registry', 'reg.example'], DUAL)).err).toMatch(
      /give -o DIR too/,
    );
    expect(existsSync(join(root, 'out/manifests'))).toBe(false);
  });

  it('fails with exit 1 and the document, field and fix on stderr', async () => {
    const r = await ctl(['installation', 'render', '-f', '-'], DUAL.replace('VXLAN', 'Tunnel'));
    expect(r.code).toBe(1);
    expect(r.out).toBe('');
    expect(r.err).toMatch(
      /^error: stdin document 1: invalid Installation: spec\.netpluginNetwork\.ipPools\[0\]\.encapsulation: expected one of .* \(got "Tunnel"\)\n$/,
    );
  });

  it('refuses a file without an Installation and other kinds', async () => {
    expect(
      (
        await ctl(
          ['installation', 'render', '-f', '-'],
          'apiVersion: operator.netplugin.org/v1\nkind: FlowUI\nmetadata: {name: default}\n',
        )
      ).err,
    ).toMatch(/no Installation found/);
    expect(
      (
        await ctl(
          ['installation', 'render', '-f', '-'],
          'apiVersion: netplugin.org/v3\nkind: IPPool\nmetadata: {name: p}\nspec: {cidr: 10.0.0.0/16}\n',
        )
      ).err,
    ).toMatch(/kind "IPPool" is not an operator resource/);
    expect(
      (
        await ctl(
          ['installation', 'render', '-f', '-'],
          DUAL + '---\napiVersion: operator.netplugin.org/v1\nkind: FlowUI\nmetadata: {name: ui}\n',
        )
      ).err,
    ).toMatch(/FlowUI: metadata\.name must be "default" \(got "ui"\)/);
  });
});

describe('netpluginctl installation apply', () => {
  it('writes files, creates pools and ClusterInformation; a second run changes nothing and says so', async () => {
    const a = await apply(DUAL);
    expect(a.err).toBe('');
    expect(a.code).toBe(0);
    expect(a.out).toMatch(new RegExp(`${conf}/10-netplugin.conflist written`));
    expect(a.out).toMatch(/ippool\/default-ipv4-ippool created \(10\.244\.0\.0\/16\)/);
    expect(a.out).toMatch(/ippool\/default-ipv6-ippool created \(fd00:10:244::\/56\)/);
    expect(a.out).toMatch(/clusterinformation\/default created/);
    expect(a.out).toMatch(/change\(s\) made\n$/);
    expect(existsSync(join(bin, 'netplugin'))).toBe(true);
    const pools = (await ds.list('IPPool')).items;
    expect(pools.map((p) => [p.metadata.name, p.spec.vxlanMode])).toEqual([
      ['default-ipv4-ippool', 'Always'],
      ['default-ipv6-ippool', 'Never'],
    ]);
    const ci = await ds.get('ClusterInformation', 'default');
    expect(ci.spec).toMatchObject({ netpluginVersion: pkg.version, clusterType: 'k8s,operator', datastoreReady: true });
    const mtime = statSync(join(conf, '10-netplugin.conflist')).mtimeMs;

    const b = await apply(DUAL);
    expect(b.code).toBe(0);
    expect(b.out).not.toMatch(/written|created|updated/);
    expect(b.out).toMatch(
      /ippools unchanged \(2 exist: default-ipv4-ippool, default-ipv6-ippool; existing pools are never changed by apply\)/,
    );
    expect(b.out).toMatch(/no changes: the node and the datastore already match the Installation\n$/);
    expect(statSync(join(conf, '10-netplugin.conflist')).mtimeMs).toBe(mtime);
  });

  it('--dry-run reports what would change and writes nothing', async () => {
    const d = await apply(DUAL, ['--dry-run']);
    expect(d.code).toBe(0);
    expect(d.out).toMatch(/10-netplugin\.conflist would write/);
    expect(d.out).toMatch(/ippool\/default-ipv4-ippool would create/);
    expect(d.out).toMatch(/clusterinformation\/default would create/);
    expect(d.out).toMatch(/dry run: nothing written/);
    expect(existsSync(conf)).toBe(false);
    expect(existsSync(bin)).toBe(false);
    expect((await ds.list('IPPool')).items).toEqual([]);
    await expect(ds.get('ClusterInformation', 'default')).rejects.toThrow();
  });

  it('never changes existing pools (running pods keep their addresses)', async () => {
    await ds.create({
      apiVersion: API_VERSION,
      kind: 'IPPool',
      metadata: { name: 'legacy' },
      spec: { cidr: '10.99.0.0/16', blockSize: 26, ipipMode: 'Always', natOutgoing: true },
    });
    const a = await apply(DUAL);
    expect(a.code).toBe(0);
    expect(a.out).toMatch(/ippools unchanged \(1 exist: legacy;/);
    expect((await ds.list('IPPool')).items.map((p) => p.metadata.name)).toEqual(['legacy']);
  });

  it('a changed Installation rewrites the conflist only', async () => {
    await apply(DUAL);
    const b = await apply(DUAL + '    mtu: 1400\n');
    expect(b.out).toMatch(/10-netplugin\.conflist written/);
    expect(b.out).toMatch(/1 change\(s\) made/);
    expect(JSON.parse(readFileSync(join(conf, '10-netplugin.conflist'), 'utf8')).plugins[0].mtu).toBe(1400);
  });

  it('HostLocal: the conflist uses the node pod CIDRs of both families', async () => {
    const a = await apply(
      DUAL.replace('encapsulation: VXLAN', 'encapsulation: IPIP').replace(
        'spec:\n',
        'spec:\n  cni: {ipam: {type: HostLocal}}\n',
      ),
    );
    expect(a.err).toBe('');
    expect(JSON.parse(readFileSync(join(conf, '10-netplugin.conflist'), 'utf8')).plugins[0].ipam).toEqual({
      type: 'host-local',
      ranges: [[{ subnet: 'usePodCidr' }], [{ subnet: 'usePodCidrIPv6' }]],
    });
  });

  it('in a cluster, writes the plugin kubeconfig from the service account and points the conflist at it', async () => {
    const sa = join(root, 'sa');
    mkdirSync(sa);
    writeFileSync(join(sa, 'token'), 'sa-token-123\n');
    writeFileSync(join(sa, 'ca.crt'), 'CA-PEM');
    const env = { DATASTORE_TYPE: 'kubernetes', KUBERNETES_SERVICE_HOST: '10.96.0.1', KUBERNETES_SERVICE_PORT: '443' };
    const a = await apply(DUAL, ['--service-account-dir', sa], env);
    expect(a.err).toBe('');
    const kc = JSON.parse(readFileSync(join(conf, 'netplugin-kubeconfig'), 'utf8'));
    expect(kc.clusters[0].cluster).toEqual({
      server: 'https://10.96.0.1:443',
      'certificate-authority-data': Buffer.from('CA-PEM').toString('base64'),
    });
    expect(kc.users[0].user).toEqual({ token: 'sa-token-123' });
    expect(statSync(join(conf, 'netplugin-kubeconfig')).mode & 0o777).toBe(0o600);
    expect(JSON.parse(readFileSync(join(conf, '10-netplugin.conflist'), 'utf8')).plugins[0].kubernetes).toEqual({
      kubeconfig: join(conf, 'netplugin-kubeconfig'),
    });
    expect((await apply(DUAL, ['--service-account-dir', sa], env)).out).toMatch(/no changes/);
  });
});

describe('version and older clients', () => {
  it('a client older than the cluster refuses writes naming both versions; reads and version still work', async () => {
    await ds.create({
      apiVersion: API_VERSION,
      kind: 'ClusterInformation',
      metadata: { name: 'default' },
      spec: { clusterGUID: 'g', netpluginVersion: 'v9.1.0', clusterType: 'k8s', datastoreReady: true },
    });
    const a = await apply(DUAL);
    expect(a.code).toBe(1);
    expect(a.err).toBe(
      `error: this netpluginctl is ${pkg.version} but the cluster runs v9.1.0: an older client must not write to an upgraded cluster; install netpluginctl v9.1.0 (reads such as get and version still work)\n`,
    );
    expect((await ds.list('IPPool')).items).toEqual([]);
    const w = await ctl(
      ['apply', '-f', '-'],
      'apiVersion: netplugin.org/v3\nkind: IPPool\nmetadata: {name: p}\nspec: {cidr: 10.0.0.0/16}\n',
    );
    expect(w.code).toBe(1);
    expect(w.err).toMatch(/cluster runs v9\.1\.0/);
    expect((await ctl(['delete', 'ippool', 'x'])).err).toMatch(/cluster runs v9\.1\.0/);
    expect((await ctl(['datastore', 'init'])).err).toMatch(/cluster runs v9\.1\.0/);
    const g = await ctl(['get', 'ippools']);
    expect(g.code).toBe(0);
    const v = await ctl(['version', '-o', 'json']);
    expect(v.code).toBe(0);
    expect(JSON.parse(v.out)).toEqual({
      clientVersion: pkg.version,
      clusterVersion: 'v9.1.0',
      clusterType: 'k8s',
      datastoreType: 'etcdv3',
      clientOlderThanCluster: true,
    });
    expect(v.err).toMatch(/older than the cluster/);
  });

  it('the same or an older cluster version allows writes; version prints client, cluster and type', async () => {
    await ds.create({
      apiVersion: API_VERSION,
      kind: 'ClusterInformation',
      metadata: { name: 'default' },
      spec: { clusterGUID: 'g', netpluginVersion: 'v3.15.2', clusterType: 'k8s,bgp', datastoreReady: true },
    });
    expect((await apply(DUAL)).code).toBe(0);
    const v = await ctl(['version']);
    expect(v.out).toBe(
      `Client Version:    ${pkg.version}\nCluster Version:   ${pkg.version}\nCluster Type:      k8s,bgp,operator\n`,
    );
    expect(v.err).toBe('');
  });

  it('package.json is on the v3.32 release line', () => {
    expect(pkg.version).toMatch(/^3\.32\.\d+$/);
  });
});

describe('shipped files', () => {
  const repo = join(import.meta.dirname, '../..');
  it('deploy/installation-example.yaml is a valid dual-stack Installation with the flow resources', async () => {
    const r = await ctl(['installation', 'render', '-f', join(repo, 'deploy/installation-example.yaml')]);
    expect(r.err).toBe('');
    const out = JSON.parse(r.out);
    expect(out.ippools.map((p: { metadata: { name: string } }) => p.metadata.name)).toEqual([
      'default-ipv4-ippool',
      'default-ipv6-ippool',
    ]);
    expect(out.flowResources).toEqual(['flowlogaggregator/default', 'flowui/default']);
    // deploy/netplugin-flows.yaml is what this example renders.
    expect(readFileSync(join(repo, 'deploy/netplugin-flows.yaml'), 'utf8')).toBe(out.flowsManifest);
  });

  it('the CRD offers the same enumerations as the schema', async () => {
    const { parse } = await import('yaml');
    const crd = parse(readFileSync(join(repo, 'deploy/crds/operator.netplugin.org_installations.yaml'), 'utf8'));
    const spec = crd.spec.versions[0].schema.openAPIV3Schema.properties.spec.properties;
    const pool = spec.netpluginNetwork.properties.ipPools.items.properties;
    const accepted = (field: string, v: unknown) =>
      parseInstallation(inst({ netpluginNetwork: { ipPools: [{ cidr: '10.0.0.0/16', [field]: v }] } }));
    for (const e of pool.encapsulation.enum) expect(() => accepted('encapsulation', e)).not.toThrow();
    for (const e of pool.natOutgoing.enum) expect(() => accepted('natOutgoing', e)).not.toThrow();
    for (const e of spec.cni.properties.ipam.properties.type.enum)
      expect(() => parseInstallation(inst({ cni: { ipam: { type: e } } }))).not.toThrow();
    for (const e of spec.logging.properties.cni.properties.logSeverity.enum)
      expect(() => parseInstallation(inst({ logging: { cni: { logSeverity: e } } }))).not.toThrow();
    expect(pool.encapsulation.enum).toEqual(['IPIP', 'IPIPCrossSubnet', 'VXLAN', 'VXLANCrossSubnet', 'None']);
    // A field the CRD lacks would be pruned by the API server: bgp must be there with the schema's values.
    expect(spec.netpluginNetwork.properties.bgp.enum).toEqual(['Enabled', 'Disabled']);
    for (const e of spec.netpluginNetwork.properties.bgp.enum)
      expect(parseInstallation(inst({ netpluginNetwork: { bgp: e } })).spec.netpluginNetwork.bgp).toBe(e);
  });
});
