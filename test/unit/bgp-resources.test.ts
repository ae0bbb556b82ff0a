// The BGP resources through netpluginctl on the in-memory datastore: kinds and
// short names, get/apply/delete/describe, and the invalid combinations refused
// with the field named; the generated CRDs carry the same rules.
import { readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { beforeEach, describe, expect, it } from 'vitest';
import { parse as parseYaml } from 'yaml';
import { MemoryDatastore } from '../../src/datastore/memory.js';
import { validateResource } from '../../src/datastore/schemas.js';
import { runCtl } from '../../src/ctl/index.js';
import { parsePeerIP, passwordProblem } from '../../src/model/bgp.js';
import { API_VERSION } from '../../src/model/resources.js';

let ds: MemoryDatastore;
beforeEach(() => {
  ds = new MemoryDatastore();
});

async function ctl(argv: string[], stdin?: string): Promise<{ code: number; out: string; err: string }> {
  let out = '';
  let err = '';
  const code = await runCtl(argv, {
    env: { ETCD_ENDPOINTS: 'http://127.0.0.1:2379' },
    stdin,
    stdout: (s) => (out += s),
    stderr: (s) => (err += s),
    openDatastore: async () => ds,
  });
  return { code, out, err };
}

const doc = (kind: string, name: string, spec: Record<string, unknown>) =>
  JSON.stringify({ apiVersion: API_VERSION, kind, metadata: { name }, spec });

describe('BGP kinds in netpluginctl', () => {
  it('applies, gets by every name, describes and deletes BGPConfiguration and BGPPeer', async () => {
    const a = await ctl(
      ['apply', '-f', '-'],
      doc('BGPConfiguration', 'default', { asNumber: 64512, nodeToNodeMeshEnabled: false }),
    );
    expect(a).toMatchObject({ code: 0, err: '', out: 'bgpconfiguration/default created\n' });
    const p = await ctl(
      ['apply', '-f', '-'],
      doc('BGPPeer', 'tor', { peerIP: '192.0.2.1:1179', asNumber: 65000, nodeSelector: "rack == 'a'" }),
    );
    expect(p).toMatchObject({ code: 0, err: '', out: 'bgppeer/tor created\n' });
    for (const name of ['bgpconfig', 'bgpconfigs', 'bgpconfiguration', 'bgpconfigurations', 'BGPConfiguration']) {
      const g = await ctl(['get', name, 'default', '-o', 'yaml']);
      expect(g.code).toBe(0);
      expect(parseYaml(g.out)).toMatchObject({
        kind: 'BGPConfiguration',
        spec: { asNumber: 64512, nodeToNodeMeshEnabled: false },
      });
    }
    for (const name of ['bgppeer', 'bgppeers', 'bgpp']) {
      const g = await ctl(['get', name]);
      expect(g.code).toBe(0);
      expect(g.out.split('\n')[0]!.split(/\s+/)).toEqual(['NAME', 'PEERIP', 'ASN', 'NODE', 'PEERSELECTOR']);
      expect(g.out).toMatch(/^tor\s+192\.0\.2\.1:1179\s+65000\s+selector: rack == 'a'/m);
    }
    const d = await ctl(['describe', 'bgppeer', 'tor']);
    expect(d.code).toBe(0);
    expect(d.out).toContain('192.0.2.1:1179');
    expect(await ctl(['delete', 'bgppeers', 'tor'])).toMatchObject({ code: 0, out: 'bgppeer/tor deleted\n' });
    await expect(ds.get('BGPPeer', 'tor')).rejects.toThrow(/not found/);
  });

  const bad: Array<[string, string, string, Record<string, unknown>, RegExp]> = [
    [
      'a peer with neither peerIP nor peerSelector',
      'BGPPeer',
      'p',
      { asNumber: 65000 },
      /spec\.peerIP: a BGPPeer needs peerIP \(with asNumber\) or peerSelector/,
    ],
    [
      'a peer with both peerIP and peerSelector',
      'BGPPeer',
      'p',
      { peerIP: '192.0.2.1', asNumber: 1, peerSelector: 'all()' },
      /spec\.peerSelector: peerIP and peerSelector are exclusive/,
    ],
    ['a peerIP without asNumber', 'BGPPeer', 'p', { peerIP: '192.0.2.1' }, /spec\.asNumber: is required with peerIP/],
    [
      'a malformed peerIP',
      'BGPPeer',
      'p',
      { peerIP: '192.0.2.300', asNumber: 1 },
      /spec\.peerIP: "192\.0\.2\.300" is not ADDR/,
    ],
    ['an IPv6 peerIP with a bare port', 'BGPPeer', 'p', { peerIP: 'fd00::1:179x', asNumber: 1 }, /spec\.peerIP/],
    [
      'node and nodeSelector together',
      'BGPPeer',
      'p',
      { node: 'a', nodeSelector: 'all()', peerIP: '192.0.2.1', asNumber: 1 },
      /spec\.nodeSelector: node and nodeSelector are exclusive/,
    ],
    ['a bad selector', 'BGPPeer', 'p', { peerSelector: 'rack ==' }, /spec\.peerSelector: not a valid selector/],
    [
      'both password sources',
      'BGPPeer',
      'p',
      { peerIP: '192.0.2.1', asNumber: 1, password: { file: '/x', secretKeyRef: { name: 'a', key: 'b' } } },
      /spec\.password: set exactly one/,
    ],
    [
      'a relative password file',
      'BGPPeer',
      'p',
      { peerIP: '192.0.2.1', asNumber: 1, password: { file: 'pw' } },
      /spec\.password\.file: .*expected an absolute path/,
    ],
    ['a ttlSecurity of 0', 'BGPPeer', 'p', { peerIP: '192.0.2.1', asNumber: 1, ttlSecurity: 0 }, /spec\.ttlSecurity/],
    [
      'a bad maxRestartTime',
      'BGPPeer',
      'p',
      { peerIP: '192.0.2.1', asNumber: 1, maxRestartTime: 'soon' },
      /spec\.maxRestartTime: expected a duration/,
    ],
    [
      'nodeToNodeMeshEnabled on a node configuration',
      'BGPConfiguration',
      'node.a',
      { nodeToNodeMeshEnabled: true },
      /spec\.nodeToNodeMeshEnabled: is only valid on the "default" BGPConfiguration/,
    ],
    [
      'a configuration named neither default nor node.<name>',
      'BGPConfiguration',
      'rack1',
      {},
      /metadata\.name: BGPConfiguration name "rack1" is invalid: use "default" or "node.<node name>"/,
    ],
    ['an AS number of 0', 'BGPConfiguration', 'default', { asNumber: 0 }, /spec\.asNumber/],
    [
      'a service range with host bits',
      'BGPConfiguration',
      'default',
      { serviceClusterIPs: [{ cidr: '10.96.0.1/12' }] },
      /spec\.serviceClusterIPs(\.0|\[0\])\.cidr: .*expected a CIDR without host bits/,
    ],
    [
      'an interface name with a quote',
      'BGPConfiguration',
      'default',
      { ignoredInterfaces: ['eth"0'] },
      /spec\.ignoredInterfaces(\.0|\[0\]): .*expected an interface name/,
    ],
    ['a listen port of 70000', 'BGPConfiguration', 'default', { listenPort: 70000 }, /spec\.listenPort/],
    [
      'a bad route reflector cluster ID',
      'Node',
      'n',
      { bgp: { routeReflectorClusterID: '1.2.3' } },
      /spec\.bgp\.routeReflectorClusterID: .*expected a dotted quad/,
    ],
  ];
  for (const [what, kind, name, spec, msg] of bad) {
    it(`refuses ${what}, naming the field`, async () => {
      for (const cmd of [
        ['apply', '-f', '-'],
        ['validate', '-f', '-'],
      ]) {
        const r = await ctl(cmd, doc(kind, name, spec));
        expect(r.code).toBe(1);
        expect(r.err).toMatch(msg);
        expect(r.err).not.toMatch(/\n\s+at /);
      }
      expect((await ds.list(kind as 'BGPPeer')).items).toEqual([]);
    });
  }

  it('accepts a global peer, a route reflector peer and a node configuration', async () => {
    const ok = [
      doc('BGPPeer', 'global', {
        peerIP: '[fd00::1]:1179',
        asNumber: 65000,
        password: { file: '/etc/netplugin/tor.pw' },
        ttlSecurity: 1,
      }),
      doc('BGPPeer', 'to-rr', { nodeSelector: '!has(rr)', peerSelector: 'has(rr)' }),
      doc('BGPConfiguration', 'node.a', { asNumber: 64513, listenPort: 1179 }),
      doc('Node', 'a', {
        bgp: { ipv4Address: '192.0.2.10/24', asNumber: 64513, routeReflectorClusterID: '224.0.0.1' },
      }),
    ];
    for (const d of ok) expect(await ctl(['apply', '-f', '-'], d)).toMatchObject({ code: 0, err: '' });
  });

  it('a stored peer breaking the rules fails as Invalid when read, naming where it is', () => {
    const obj = { apiVersion: API_VERSION, kind: 'BGPPeer', metadata: { name: 'x' }, spec: { peerIP: '192.0.2.1' } };
    expect(() => validateResource('BGPPeer', obj, '/key/x')).toThrow(
      /corrupt BGPPeer at \/key\/x: spec\.asNumber: is required with peerIP/,
    );
  });
});

describe('BGP CRDs', () => {
  const crd = (plural: string) =>
    parseYaml(
      readFileSync(join(resolve(import.meta.dirname, '../..'), `deploy/crds/netplugin.org_${plural}.yaml`), 'utf8'),
    );
  it('carries the kinds, short names and cross-field rules', () => {
    const peer = crd('bgppeers');
    expect(peer.spec.names).toMatchObject({ kind: 'BGPPeer', plural: 'bgppeers', shortNames: ['bgpp'] });
    const rules = peer.spec.versions[0].schema.openAPIV3Schema.properties.spec['x-kubernetes-validations'].map(
      (r: { message: string }) => r.message,
    );
    expect(rules.join('\n')).toMatch(/spec\.peerSelector: peerIP and peerSelector are exclusive/);
    const conf = crd('bgpconfigurations');
    expect(conf.spec.names.shortNames).toEqual(['bgpconfig']);
    expect(JSON.stringify(conf.spec.versions[0].schema.openAPIV3Schema['x-kubernetes-validations'])).toContain(
      'nodeToNodeMeshEnabled',
    );
  });
});

describe('peer addresses and passwords', () => {
  it('parses ADDR, ADDR:PORT and [V6]:PORT and refuses the rest', () => {
    expect(parsePeerIP('192.0.2.1')).toEqual({ ip: { family: 4, value: 0xc0000201n } });
    expect(parsePeerIP('192.0.2.1:1179')?.port).toBe(1179);
    expect(parsePeerIP('[fd00::1]:179')?.port).toBe(179);
    expect(parsePeerIP('fd00::1')?.ip.family).toBe(6);
    for (const s of ['192.0.2.1:0', '192.0.2.1:65536', '[192.0.2.1]:179', 'fd00::1:x', 'a.b.c.d', '192.0.2.1 ', ''])
      expect(parsePeerIP(s)).toBeUndefined();
  });
  it('refuses passwords BIRD cannot quote or the kernel cannot hold', () => {
    expect(passwordProblem('s3cret-pass word!')).toBeUndefined();
    for (const pw of ['a"b', 'a\\b', 'a\nb', '', 'x'.repeat(81), 'pässword']) expect(passwordProblem(pw)).toBeDefined();
  });
});
