// The BIRD renderer against golden files (test/unit/golden/bgp/*.conf), one
// per mode, each checked by the real `bird -p` (parse only). Regenerate after
// an intended change with UPDATE_GOLDEN=1 and review the diff.
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { renderBirdConfig, type BirdInput } from '../../src/agent/bgp/render.js';
import { parseCidr } from '../../src/net/cidr.js';
import type { BGPConfigurationSpec, BGPPeerSpec, NodeSpec } from '../../src/model/resources.js';

const GOLDEN = resolve(import.meta.dirname, 'golden/bgp');
const BIRD = '/usr/sbin/bird';
const RUN_DIR = '/var/run/netplugin/bird';
const tmp = mkdtempSync(join(tmpdir(), 'bgp-render-'));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

const node = (name: string, ip: string, bgp: NodeSpec['bgp'] = {}, labels: Record<string, string> = {}) => ({
  metadata: { name, labels },
  spec: { ipv4Address: ip, bgp },
});
const conf = (name: string, spec: BGPConfigurationSpec) => ({ metadata: { name }, spec });
const peer = (name: string, spec: BGPPeerSpec) => ({ metadata: { name }, spec });

function base(over: Partial<BirdInput> = {}): BirdInput {
  return {
    me: 'a',
    nodes: [node('a', '192.0.2.10/24'), node('b', '192.0.2.11/24'), node('c', '198.51.100.12/24')],
    configs: [],
    peers: [],
    pools: [
      { name: 'bgp', spec: { cidr: '10.244.0.0/16', blockSize: 26, vxlanMode: 'Never', ipipMode: 'Never' } },
      { name: 'overlay', spec: { cidr: '10.250.0.0/16', blockSize: 26, vxlanMode: 'Always' } },
    ],
    blocks: ['10.244.1.0/26', '10.250.3.0/26'],
    borrowed: ['10.244.7.5'],
    extraAddresses: [],
    subnets: [parseCidr('192.0.2.0/24')],
    passwords: new Map(),
    runDir: RUN_DIR,
    ...over,
  };
}

/** bird -p on the rendered text, with the password files in place of the run dir's. */
function birdParse(name: string, config: string, secrets: Map<string, string>): { ok: boolean; err: string } {
  const dir = join(tmp, name);
  mkdirSync(dir, { recursive: true });
  for (const [f, t] of secrets) writeFileSync(join(dir, f), t, { mode: 0o600 });
  const file = join(dir, 'bird.conf');
  writeFileSync(file, config.split(`"${RUN_DIR}/`).join(`"${dir}/`));
  const r = spawnSync(BIRD, ['-p', '-c', file], { encoding: 'utf8' });
  return { ok: r.status === 0, err: `${r.stdout}${r.stderr}` };
}

function golden(name: string, input: BirdInput) {
  const out = renderBirdConfig(input);
  const file = join(GOLDEN, `${name}.conf`);
  if (process.env.UPDATE_GOLDEN === '1' || !existsSync(file)) {
    mkdirSync(GOLDEN, { recursive: true });
    writeFileSync(file, out.config);
  }
  expect(out.config).toBe(readFileSync(file, 'utf8'));
  const p = birdParse(name, out.config, out.secrets);
  expect(p.err).toBe('');
  expect(p.ok).toBe(true);
  return out;
}

describe('BIRD configuration', () => {
  it('bird 2 is installed (scripts/setup)', () => {
    expect(
      execFileSync(BIRD, ['--version'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] }) + '',
    ).toBeDefined();
  });

  it('mesh: a session per other node, direct on the same subnet, multihop across the router', () => {
    const out = golden('mesh', base());
    expect(out.peers.map((p) => [p.protocol, p.type])).toEqual([
      ['Mesh_192_0_2_11', 'node-to-node mesh'],
      ['Mesh_198_51_100_12', 'node-to-node mesh'],
    ]);
    // Only the BGP pool's own block and the borrowed address; never the VXLAN pool's block.
    expect(out.advertised[4]).toEqual(['10.244.1.0/26', '10.244.7.5/32']);
    expect(out.config).toMatch(/protocol bgp Mesh_192_0_2_11 \{[^}]*\n {2}direct;/);
    expect(out.config).toMatch(/protocol bgp Mesh_198_51_100_12 \{[^}]*\n {2}multihop;/);
  });

  it('route reflector: C reflects to A and B as clients, mesh off', () => {
    const nodes = [
      node('a', '192.0.2.10/24'),
      node('b', '192.0.2.11/24'),
      node('c', '198.51.100.12/24', { routeReflectorClusterID: '224.0.0.1' }, { rr: 'true' }),
    ];
    const input = base({
      me: 'c',
      nodes,
      subnets: [parseCidr('198.51.100.0/24')],
      blocks: ['10.244.2.0/26'],
      borrowed: [],
      configs: [conf('default', { nodeToNodeMeshEnabled: false })],
      peers: [
        peer('to-rr', { nodeSelector: '!has(rr)', peerSelector: 'has(rr)' }),
        peer('from-rr', { nodeSelector: 'has(rr)', peerSelector: '!has(rr)' }),
      ],
    });
    const out = golden('route-reflector', input);
    expect(out.peers.map((p) => p.protocol)).toEqual(['Node_192_0_2_10', 'Node_192_0_2_11']);
    expect(out.config).toContain('rr client;');
    expect(out.config).toContain('rr cluster id 224.0.0.1;');
    expect(out.config).toContain('export filter netplugin_export_reflect4;');
    // The client side: A peers with C only.
    const a = renderBirdConfig({ ...input, me: 'a', subnets: [parseCidr('192.0.2.0/24')] });
    expect(a.peers.map((p) => p.protocol)).toEqual(['Node_198_51_100_12']);
    expect(a.config).not.toContain('rr client');
  });

  it('external peers: global and node specific, port, multihop when not connected, keepOriginalNextHop', () => {
    const out = golden(
      'external',
      base({
        configs: [conf('default', { asNumber: 64512, nodeToNodeMeshEnabled: false, listenPort: 1179 })],
        peers: [
          peer('tor', { peerIP: '192.0.2.1', asNumber: 65000 }),
          peer('far', {
            peerIP: '203.0.113.9:2179',
            asNumber: 65001,
            node: 'a',
            keepOriginalNextHop: true,
            maxRestartTime: '5m',
          }),
          peer('other-node', { peerIP: '203.0.113.10', asNumber: 65001, node: 'b' }),
          peer('no-source', { peerIP: '192.0.2.2', asNumber: 65002, nodeSelector: 'all()', sourceAddress: 'None' }),
        ],
      }),
    );
    expect(out.peers.map((p) => [p.protocol, p.type])).toEqual([
      ['Node_203_0_113_9_port_2179', 'node specific'],
      ['Node_192_0_2_2', 'node specific'],
      ['Global_192_0_2_1', 'global'],
    ]);
    expect(out.config).toContain('local port 1179 as 64512;');
    expect(out.config).toContain('neighbor 203.0.113.9 port 2179 as 65001;');
    expect(out.config).toContain('graceful restart time 300;');
  });

  it('password: written to its own file and included; a password BIRD cannot quote is refused with a warning', () => {
    const input = base({
      peers: [
        peer('tor', { peerIP: '192.0.2.1', asNumber: 65000, password: { file: '/etc/netplugin/tor.pw' } }),
        peer('bad', { peerIP: '192.0.2.2', asNumber: 65000, password: { file: '/etc/x' } }),
      ],
      passwords: new Map([
        ['tor', 'correct horse!'],
        ['bad', 'a";} protocol static x {'],
      ]),
    });
    const out = golden('password', input);
    expect(out.config).not.toContain('correct horse');
    expect(out.config).toContain(`include "${RUN_DIR}/Global_192_0_2_1.password.conf";`);
    expect(out.secrets).toEqual(new Map([['Global_192_0_2_1.password.conf', 'password "correct horse!";\n']]));
    expect(out.peers.map((p) => p.protocol)).not.toContain('Global_192_0_2_2');
    expect(out.warnings.join('\n')).toMatch(
      /BGPPeer bad: the password may only contain printable ASCII characters other than "/,
    );
  });

  it('ttl security: GTSM on, direct for one hop on the subnet, multihop N otherwise', () => {
    const out = golden(
      'ttl-security',
      base({
        peers: [
          peer('near', { peerIP: '192.0.2.1', asNumber: 65000, ttlSecurity: 1 }),
          peer('far', { peerIP: '203.0.113.9', asNumber: 65000, ttlSecurity: 3 }),
        ],
      }),
    );
    expect(out.config).toMatch(/Global_192_0_2_1 \{[^}]*ttl security on;\n {2}direct;/);
    expect(out.config).toMatch(/Global_203_0_113_9 \{[^}]*ttl security on;\n {2}multihop 3;/);
  });

  it('service advertisement, floating IPs and ipAddrsNoIpam only inside BGP pools, disabled pools withdrawn, IPIP left to the route controller', () => {
    const out = golden(
      'services',
      base({
        configs: [
          conf('default', {
            serviceClusterIPs: [{ cidr: '10.96.0.0/12' }],
            serviceExternalIPs: [{ cidr: '203.0.113.0/28' }],
            serviceLoadBalancerIPs: [{ cidr: 'fd00:10::/120' }],
            ignoredInterfaces: ['eth9', 'docker*'],
          }),
        ],
        pools: [
          { name: 'bgp', spec: { cidr: '10.244.0.0/16', vxlanMode: 'Never', ipipMode: 'Never' } },
          { name: 'ipip', spec: { cidr: '10.245.0.0/16', vxlanMode: 'Never', ipipMode: 'Always' } },
          { name: 'off', spec: { cidr: '10.246.0.0/16', vxlanMode: 'Never', disabled: true } },
        ],
        blocks: ['10.244.1.0/26', '10.245.0.0/26', '10.246.0.0/26'],
        extraAddresses: ['10.244.200.1', '172.16.5.5', '10.244.201.2/32'],
      }),
    );
    expect(out.advertised[4]).toEqual([
      '10.244.1.0/26',
      '10.244.200.1/32',
      '10.244.201.2/32',
      '10.244.7.5/32',
      '10.245.0.0/26',
      '10.96.0.0/12',
      '203.0.113.0/28',
    ]);
    expect(out.advertised[6]).toEqual(['fd00:10::/120']);
    expect(out.config).toContain('if net ~ [ 10.245.0.0/16+ ] then reject;');
    expect(out.config).toContain('interface -"npi*", -"*.netplugin", -"eth9", -"docker*", "*";');
  });

  it('isolates a bad peer and never splices raw values', () => {
    const out = renderBirdConfig(
      base({
        peers: [
          peer('evil', { peerIP: '192.0.2.1;} protocol x {', asNumber: 65000 }),
          peer('sel', { peerSelector: 'a ==', nodeSelector: 'all()' }),
          peer('ok', { peerIP: '0192.0.2.5', asNumber: 65000 }),
        ],
      }),
    );
    expect(out.warnings.join('\n')).toMatch(/BGPPeer evil: spec\.peerIP/);
    expect(out.warnings.join('\n')).toMatch(/BGPPeer sel:/);
    expect(out.config).not.toContain('protocol x');
    expect(birdParse('isolated', out.config, out.secrets).ok).toBe(true);
  });

  it('refuses a run dir BIRD could not include from', () => {
    expect(() => renderBirdConfig(base({ runDir: '/tmp/a"b' }))).toThrow(/--bird-run-dir/);
  });
});
