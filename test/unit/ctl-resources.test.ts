// netpluginctl apply/create/replace/get/delete on the in-memory datastore,
// run in-process through runCtl with captured output.
import { beforeEach, describe, expect, it } from 'vitest';
import { parse as parseYaml } from 'yaml';
import { MemoryDatastore } from '../../src/datastore/memory.js';
import { runCtl } from '../../src/ctl/index.js';
import { API_VERSION, type Resource } from '../../src/model/resources.js';

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

function pool(name: string, spec: Record<string, unknown>): string {
  return JSON.stringify({ apiVersion: API_VERSION, kind: 'IPPool', metadata: { name }, spec });
}

async function applyOk(doc: string): Promise<string> {
  const r = await ctl(['apply', '-f', '-'], doc);
  expect(r.err).toBe('');
  expect(r.code).toBe(0);
  return r.out;
}

async function applyErr(doc: string): Promise<string> {
  const r = await ctl(['apply', '-f', '-'], doc);
  expect(r.code).toBe(1);
  expect(r.err).not.toMatch(/\n\s+at /); // no stack trace
  return r.err;
}

describe('apply / get / delete round trip', () => {
  it('creates, shows unchanged on re-apply, updates, and deletes a pool', async () => {
    expect(await applyOk(pool('p1', { cidr: '10.244.0.0/16', natOutgoing: true }))).toBe('ippool/p1 created\n');
    expect(await applyOk(pool('p1', { cidr: '10.244.0.0/16', natOutgoing: true }))).toBe('ippool/p1 unchanged\n');
    expect(await applyOk(pool('p1', { cidr: '10.244.0.0/16', natOutgoing: false }))).toBe('ippool/p1 configured\n');
    const stored = await ds.get('IPPool', 'p1');
    // Defaults are filled in so what `get` shows is what IPAM uses.
    expect(stored.spec).toEqual({
      cidr: '10.244.0.0/16',
      natOutgoing: false,
      blockSize: 26,
      ipipMode: 'Never',
      vxlanMode: 'Never',
      nodeSelector: 'all()',
    });

    const j = await ctl(['get', 'ippool', 'p1', '-o', 'json']);
    expect(j.code).toBe(0);
    expect(JSON.parse(j.out)).toMatchObject({
      apiVersion: API_VERSION,
      kind: 'IPPool',
      metadata: { name: 'p1' },
      spec: { cidr: '10.244.0.0/16' },
    });

    const d = await ctl(['delete', 'ippool', 'p1']);
    expect(d).toMatchObject({ code: 0, out: 'ippool/p1 deleted\n' });
    await expect(ds.get('IPPool', 'p1')).rejects.toThrow(/not found/);
    const again = await ctl(['delete', 'ippool', 'p1']);
    expect(again.code).toBe(1);
    expect(again.err).toBe('error: IPPool "p1" not found\n');
    expect((await ctl(['delete', 'ippool', 'p1', '--ignore-not-found'])).code).toBe(0);
  });

  it('applies multi-document YAML, and get -o yaml output re-applies unchanged', async () => {
    const yaml = `
apiVersion: netplugin.org/v3
kind: IPPool
metadata:
  name: v4
spec:
  cidr: 10.10.0.0/16
  blockSize: 24
---
apiVersion: netplugin.org/v3
kind: IPPool
metadata:
  name: v6
spec:
  cidr: fd00:10::/64
---
apiVersion: netplugin.org/v3
kind: IPAMConfig
metadata:
  name: default
spec:
  strictAffinity: true
  maxBlocksPerHost: 4
---
apiVersion: netplugin.org/v3
kind: NetworkPolicy
metadata:
  name: deny
  namespace: prod
spec:
  selector: all()
  types: [Ingress]
`;
    expect(await applyOk(yaml)).toBe(
      'ippool/v4 created\nippool/v6 created\nipamconfig/default created\nnetworkpolicy/prod/deny created\n',
    );
    expect((await ds.get('IPPool', 'v6')).spec.blockSize).toBe(122);
    expect((await ds.get('NetworkPolicy', 'deny', 'prod')).spec.types).toEqual(['Ingress']);

    const y = await ctl(['get', 'pools', '-o', 'yaml']);
    const list = parseYaml(y.out) as { kind: string; items: Resource[] };
    expect(list.kind).toBe('IPPoolList');
    expect(list.items.map((i) => i.metadata.name)).toEqual(['v4', 'v6']);
    const re = await ctl(['apply', '-f', '-'], y.out);
    expect(re).toMatchObject({ code: 0, out: 'ippool/v4 unchanged\nippool/v6 unchanged\n' });
  });

  it('accepts a JSON array and a kind: List', async () => {
    const arr = JSON.stringify([
      JSON.parse(pool('a', { cidr: '10.1.0.0/24' })),
      JSON.parse(pool('b', { cidr: '10.2.0.0/24' })),
    ]);
    expect(await applyOk(arr)).toBe('ippool/a created\nippool/b created\n');
    const lst = JSON.stringify({
      apiVersion: API_VERSION,
      kind: 'IPPoolList',
      items: [JSON.parse(pool('c', { cidr: '10.3.0.0/24' }))],
    });
    expect(await applyOk(lst)).toBe('ippool/c created\n');
  });

  it('create fails for an existing resource; replace fails for a missing one and honours resourceVersion', async () => {
    await applyOk(pool('p', { cidr: '10.9.0.0/16' }));
    const c = await ctl(['create', '-f', '-'], pool('p', { cidr: '10.9.0.0/16' }));
    expect(c.code).toBe(1);
    expect(c.err).toMatch(/IPPool "p" already exists; use 'netpluginctl apply'/);
    const r = await ctl(['replace', '-f', '-'], pool('q', { cidr: '10.8.0.0/16' }));
    expect(r.code).toBe(1);
    expect(r.err).toMatch(/IPPool "q" does not exist/);

    const got = JSON.parse((await ctl(['get', 'pool', 'p', '-o', 'json'])).out) as Resource<'IPPool'>;
    got.spec.natOutgoing = true;
    expect((await ctl(['replace', '-f', '-'], JSON.stringify(got))).out).toBe('ippool/p replaced\n');
    // The same (now stale) resourceVersion again: someone changed it since.
    got.spec.disabled = true;
    const stale = await ctl(['replace', '-f', '-'], JSON.stringify(got));
    expect(stale.code).toBe(1);
    expect(stale.err).toMatch(/was modified since resourceVersion/);
  });

  it('resolves kinds case-insensitively by singular, plural and short names', async () => {
    await applyOk(pool('p', { cidr: '10.9.0.0/16' }));
    for (const k of ['ippool', 'IPPools', 'pool', 'POOLS', 'IPPool.netplugin.org']) {
      const r = await ctl(['get', k]);
      expect(r.code, k).toBe(0);
      expect(r.out).toMatch(/^NAME\s+CIDR\s+SELECTOR\np\s+10\.9\.0\.0\/16\s+all\(\)\n$/);
    }
    const bad = await ctl(['get', 'ipoool']);
    expect(bad.code).toBe(1);
    expect(bad.err).toMatch(/unknown resource kind "ipoool"; did you mean ippool\? known kinds: IPPool/);
    for (const [alias, kind] of [
      ['hep', 'HostEndpoint'],
      ['kcc', 'KubeControllersConfiguration'],
      ['gnp', 'GlobalNetworkPolicy'],
      ['np', 'NetworkPolicy'],
      ['wep', 'WorkloadEndpoint'],
      ['clusterinfo', 'ClusterInformation'],
      ['nodes', 'Node'],
      ['profiles', 'Profile'],
      ['ipamconfig', 'IPAMConfig'],
    ]) {
      const r = await ctl(['get', alias!, '-o', 'json']);
      expect(r.code, alias).toBe(0);
      expect(JSON.parse(r.out).kind).toBe(`${kind}List`);
    }
  });

  it('lists namespaced kinds per namespace and across namespaces', async () => {
    for (const [ns, name] of [
      ['a', 'x'],
      ['b', 'y'],
    ]) {
      await ds.create({
        apiVersion: API_VERSION,
        kind: 'WorkloadEndpoint',
        metadata: { name: name!, namespace: ns },
        spec: {
          orchestrator: 'k8s',
          node: 'n1',
          containerID: `c-${name}`,
          pod: `pod-${name}`,
          endpoint: 'eth0',
          ipNetworks: ['10.0.0.1/32'],
          interfaceName: 'nph0',
        },
      });
    }
    const one = await ctl(['get', 'wep', '-n', 'a']);
    expect(one.out).toMatch(
      /^NAME\s+WORKLOAD\s+NODE\s+NETWORKS\s+INTERFACE\nx\s+pod-x\s+n1\s+10\.0\.0\.1\/32\s+nph0\n$/,
    );
    const all = await ctl(['get', 'weps', '-A']);
    expect(
      all.out
        .split('\n')
        .filter(Boolean)
        .map((l) => l.split(/\s+/).slice(0, 2).join('/')),
    ).toEqual(['NAMESPACE/NAME', 'a/x', 'b/y']);
    // WorkloadEndpoints are written by the plugin only.
    const del = await ctl(['delete', 'wep', 'x', '-n', 'a']);
    expect(del.code).toBe(1);
    expect(del.err).toMatch(/managed by the plugin/);
  });

  it('reports malformed input with the document and field', async () => {
    expect(await applyErr('apiVersion: v1\nkind: IPPool\nmetadata: {name: p}\nspec: {cidr: 10.0.0.0/8}\n')).toMatch(
      /stdin document 1: apiVersion "v1" is not supported; use "netplugin.org\/v3"/,
    );
    expect(await applyErr(pool('p', { cidr: '10.0.0.0/8', ipipmode: 'Always' }))).toMatch(
      /spec\.ipipmode: unknown field; did you mean ipipMode\?/,
    );
    expect(await applyErr(pool('p', { cidr: '10.0.0.0/8', ipipMode: 'Sometimes' }))).toMatch(
      /spec\.ipipMode: "Sometimes" is not one of Never, Always, CrossSubnet/,
    );
    expect(await applyErr('apiVersion: netplugin.org/v3\nkind: IPPool\nspec: {cidr: 10.0.0.0/8}\n')).toMatch(
      /metadata/,
    );
    expect(await applyErr('kind: [\n')).toMatch(/invalid YAML in document 1 at line/);
    expect(
      await applyErr(
        JSON.stringify({ apiVersion: API_VERSION, kind: 'IPAMConfig', metadata: { name: 'x' }, spec: {} }),
      ),
    ).toMatch(/IPAMConfig is a singleton; set metadata.name to "default"/);
    expect(
      await applyErr(JSON.stringify({ apiVersion: API_VERSION, kind: 'Widget', metadata: { name: 'x' }, spec: {} })),
    ).toMatch(/unknown resource kind "Widget"/);
    const missing = await ctl(['apply', '-f', '/nonexistent/file.yaml']);
    expect(missing).toMatchObject({ code: 1, err: 'error: cannot read -f /nonexistent/file.yaml: no such file\n' });
    const noF = await ctl(['apply']);
    expect(noF.err).toMatch(/apply needs -f FILE/);
  });

  it('keeps going after a bad document and exits 1', async () => {
    const r = await ctl(
      ['apply', '-f', '-'],
      [
        pool('ok1', { cidr: '10.1.0.0/16' }),
        pool('bad', { cidr: '10.1.0.0/24' }),
        pool('ok2', { cidr: '10.2.0.0/16' }),
      ].join('\n---\n'),
    );
    expect(r.code).toBe(1);
    expect(r.out).toBe('ippool/ok1 created\nippool/ok2 created\n');
    expect(r.err).toMatch(/IPPool "bad": spec.cidr 10.1.0.0\/24 lies inside IPPool "ok1"/);
  });
});

describe('IP pool validation', () => {
  const cases: Array<[string, Record<string, unknown>, RegExp]> = [
    ['host bits', { cidr: '10.0.0.1/16' }, /spec\.cidr "10\.0\.0\.1\/16" has host bits set; use "10\.0\.0\.0\/16"/],
    ['host bits v6', { cidr: 'fd00::1/64' }, /has host bits set; use "fd00::\/64"/],
    ['not a cidr', { cidr: '10.0.0.0/33' }, /spec\.cidr "10\.0\.0\.0\/33" is not a valid CIDR/],
    ['link-local v4', { cidr: '169.254.0.0/20' }, /overlaps the link-local range 169\.254\.0\.0\/16/],
    ['contains link-local', { cidr: '169.0.0.0/8' }, /overlaps the link-local range 169\.254\.0\.0\/16/],
    ['link-local v6', { cidr: 'fe80::/64' }, /overlaps the link-local range fe80::\/10/],
    [
      'block size low v4',
      { cidr: '10.0.0.0/8', blockSize: 19 },
      /spec\.blockSize 19 is out of range for an IPv4 pool; use 20-32 \(default 26\)/,
    ],
    ['block size high v4', { cidr: '10.0.0.0/8', blockSize: 33 }, /spec\.blockSize/],
    [
      'block size v6',
      { cidr: 'fd00::/48', blockSize: 64 },
      /spec\.blockSize 64 is out of range for an IPv6 pool; use 116-128 \(default 122\)/,
    ],
    [
      'block larger than pool',
      { cidr: '10.0.0.0/28' },
      /spec\.blockSize 26 makes blocks larger than the pool 10\.0\.0\.0\/28; use a block size of at least 28/,
    ],
    [
      'ipip on v6',
      { cidr: 'fd00::/64', ipipMode: 'CrossSubnet' },
      /ipipMode "CrossSubnet" is not supported for IPv6 pools/,
    ],
    [
      'ipip and vxlan',
      { cidr: '10.0.0.0/16', ipipMode: 'Always', vxlanMode: 'CrossSubnet' },
      /spec\.ipipMode "Always" and spec\.vxlanMode "CrossSubnet" are both enabled; set one of them to "Never"/,
    ],
    [
      'bad selector',
      { cidr: '10.0.0.0/16', nodeSelector: "zone == 'a' &&& x" },
      /spec\.nodeSelector "zone == 'a' &&& x" is invalid: .* at 14/,
    ],
  ];
  for (const [what, spec, re] of cases) {
    it(`rejects ${what}`, async () => {
      const err = await applyErr(pool('p', spec));
      expect(err).toMatch(/^error: IPPool "p": /);
      expect(err).toMatch(re);
      expect((await ds.list('IPPool')).items).toEqual([]);
    });
  }

  it('accepts edge block sizes and both encapsulations off', async () => {
    await applyOk(pool('a', { cidr: '10.0.0.0/20', blockSize: 20 }));
    await applyOk(pool('b', { cidr: '10.1.0.0/24', blockSize: 32, ipipMode: 'Always', vxlanMode: 'Never' }));
    await applyOk(pool('c', { cidr: 'fd00:1::/116', blockSize: 128, vxlanMode: 'Always' }));
    await applyOk(pool('d', { cidr: '10.2.0.0/16', nodeSelector: "zone == 'a' && !has(edge)" }));
  });

  it('rejects overlap with another pool, naming it', async () => {
    await applyOk(pool('big', { cidr: '10.0.0.0/8' }));
    expect(await applyErr(pool('inner', { cidr: '10.20.0.0/16' }))).toMatch(
      /spec\.cidr 10\.20\.0\.0\/16 lies inside IPPool "big" \(10\.0\.0\.0\/8\); pools must not overlap/,
    );
    expect(await applyErr(pool('outer', { cidr: '0.0.0.0/4' }))).toMatch(/contains IPPool "big"/);
    // An update of the pool itself is not an overlap with itself.
    expect(await applyOk(pool('big', { cidr: '10.0.0.0/8', disabled: true }))).toBe('ippool/big configured\n');
  });

  it('keeps cidr and blockSize immutable', async () => {
    await applyOk(pool('p', { cidr: '10.0.0.0/16' }));
    expect(await applyErr(pool('p', { cidr: '10.1.0.0/16' }))).toMatch(
      /spec\.cidr cannot change \(stored 10\.0\.0\.0\/16, given 10\.1\.0\.0\/16\)/,
    );
    expect(await applyErr(pool('p', { cidr: '10.0.0.0/16', blockSize: 28 }))).toMatch(
      /spec\.blockSize cannot change \(stored 26, given 28\)/,
    );
    // Omitting blockSize means the default, which is what is stored.
    expect(await applyOk(pool('p', { cidr: '10.0.0.0/16', blockSize: 26, natOutgoing: true }))).toBe(
      'ippool/p configured\n',
    );
    expect((await ds.get('IPPool', 'p')).spec.cidr).toBe('10.0.0.0/16');
  });

  it('refuses to delete a pool with allocations unless --force', async () => {
    await applyOk(pool('p', { cidr: '10.0.0.0/16' }));
    await applyOk(pool('other', { cidr: '10.1.0.0/16' }));
    const alloc = new Array<number | null>(64).fill(null);
    alloc[3] = 0;
    await ds.create({
      apiVersion: API_VERSION,
      kind: 'IPAMBlock',
      metadata: { name: '10.0.0.0-26' },
      spec: {
        cidr: '10.0.0.0/26',
        affinity: 'host:n1',
        allocations: alloc,
        unallocated: [],
        attributes: [{ handle_id: 'net.c1' }],
      },
    });
    const r = await ctl(['delete', 'pool', 'p']);
    expect(r.code).toBe(1);
    expect(r.err).toMatch(
      /IPPool "p" \(10\.0\.0\.0\/16\) still has 1 allocated address in 1 block; .* or pass --force/,
    );
    expect((await ds.get('IPPool', 'p')).metadata.name).toBe('p');
    // A pool whose CIDR holds no allocated block deletes fine.
    expect((await ctl(['delete', 'pool', 'other'])).code).toBe(0);
    const f = await ctl(['delete', 'pool', 'p', '--force']);
    expect(f.code).toBe(0);
    expect(f.out).toBe('ippool/p deleted\n');
    expect(f.err).toMatch(/warning: .* had allocations/);
    await expect(ds.get('IPPool', 'p')).rejects.toThrow();
  });

  it('deletes by file', async () => {
    const doc = [pool('a', { cidr: '10.1.0.0/16' }), pool('b', { cidr: '10.2.0.0/16' })].join('\n---\n');
    await applyOk(doc);
    const r = await ctl(['delete', '-f', '-'], doc);
    expect(r).toMatchObject({ code: 0, out: 'ippool/a deleted\nippool/b deleted\n' });
  });
});

describe('output formats and CLI behaviour', () => {
  it('prints wide tables with aligned columns', async () => {
    await applyOk(pool('short', { cidr: '10.1.0.0/16' }));
    await applyOk(pool('a-much-longer-name', { cidr: 'fd00:1::/64', vxlanMode: 'Always' }));
    const r = await ctl(['get', 'pools', '-o', 'wide']);
    const lines = r.out.trimEnd().split('\n');
    expect(lines[0]).toMatch(/^NAME\s+CIDR\s+BLOCKSIZE\s+IPIP\s+VXLAN\s+NAT\s+DISABLED\s+SELECTOR$/);
    const col = lines[0]!.indexOf('CIDR');
    for (const l of lines.slice(1)) expect(l[col - 1]).toBe(' ');
    expect(lines.slice(1).map((l) => l.slice(col).split(/\s+/)[0])).toEqual(['fd00:1::/64', '10.1.0.0/16']);
  });

  it('rejects unknown output formats and flags with one line', async () => {
    const r = await ctl(['get', 'pools', '-o', 'xml']);
    expect(r).toMatchObject({
      code: 1,
      err:
        'error: -o "xml" is not supported; use yaml, json, wide, name, jsonpath=TEMPLATE or ' +
        'custom-columns=HEADER:PATH,...\n',
    });
    const f = await ctl(['get', 'pools', '--colour']);
    expect(f.err).toBe(
      "error: unknown flag --colour for 'get'; run 'netpluginctl get --help' for the accepted flags\n",
    );
    const c = await ctl(['frobnicate']);
    expect(c.err).toMatch(/unknown command "frobnicate"/);
  });

  it('prints help for every command without touching the datastore', async () => {
    ds.failWith = new (await import('../../src/errors.js')).DatastoreError('Unavailable', 'down');
    for (const cmd of [
      [],
      ['apply'],
      ['get'],
      ['delete'],
      ['ipam'],
      ['ipam', 'show'],
      ['ipam', 'check'],
      ['ipam', 'release'],
      ['datastore', 'init'],
      ['datastore', 'ready'],
      ['version'],
      ['install-cni'],
      ['uninstall-cni'],
    ]) {
      const r = await ctl([...cmd, '--help']);
      expect(r.code, cmd.join(' ')).toBe(0);
      expect(r.out).toMatch(/Usage: netpluginctl/);
    }
  });

  it('explains a datastore outage in one line and shows the stack only with NETPLUGIN_DEBUG=1', async () => {
    const { DatastoreError } = await import('../../src/errors.js');
    ds.failWith = new DatastoreError('Unavailable', 'etcd at http://127.0.0.1:2379 is unreachable');
    const r = await ctl(['get', 'pools']);
    expect(r.code).toBe(1);
    expect(r.err).toBe(
      'error: cannot reach the datastore: etcd at http://127.0.0.1:2379 is unreachable (check ETCD_ENDPOINTS / ' +
        'KUBECONFIG or --config)\n',
    );
    let err = '';
    await runCtl(['get', 'pools'], {
      env: { ETCD_ENDPOINTS: 'http://x:1', NETPLUGIN_DEBUG: '1' },
      stdout: () => {},
      stderr: (s) => (err += s),
      openDatastore: async () => ds,
    });
    expect(err).toMatch(/\n\s+at /);
  });

  it('asks for a datastore when none is configured', async () => {
    let err = '';
    const code = await runCtl(['get', 'pools'], {
      env: {},
      stdout: () => {},
      stderr: (s) => (err += s),
      openDatastore: async () => ds,
    });
    expect(code).toBe(1);
    expect(err).toMatch(/^error: no datastore configured: pass --config/);
  });
});

describe('describe', () => {
  it('shows a user resource with its labels and spec, and a mirrored one with its Kubernetes source', async () => {
    await applyOk(pool('blue', { cidr: '10.90.0.0/24', nodeSelector: 'all()' }));
    const r = await ctl(['describe', 'ippool', 'blue']);
    expect(r.code).toBe(0);
    expect(r.out).toMatch(/^Name: +blue\nKind: +IPPool \(netplugin\.org\/v3\)\nLabels: +<none>/);
    expect(r.out).toMatch(/Spec:\n {2}cidr: 10\.90\.0\.0\/24/);
    expect(r.out).not.toContain('Source:');

    await ds.create({
      apiVersion: API_VERSION,
      kind: 'Profile',
      metadata: { name: 'kns.shop', labels: { a: 'b' } },
      spec: { labelsToApply: { 'netplugin.org/name': 'shop' } },
    } as Resource);
    await ds.create({
      apiVersion: API_VERSION,
      kind: 'NetworkPolicy',
      metadata: { name: 'knp.default.allow-web', namespace: 'shop' },
      spec: { selector: 'all()' },
    } as Resource);
    const prof = await ctl(['describe', 'profile/kns.shop']);
    expect(prof.out).toMatch(/Labels: +a=b/);
    expect(prof.out).toMatch(/Source: +Kubernetes Namespace shop; read-only here/);
    const np = await ctl(['describe', 'networkpolicy', '-A']);
    expect(np.out).toMatch(/Namespace: +shop/);
    expect(np.out).toMatch(/Source: +Kubernetes NetworkPolicy shop\/allow-web \(networking\.k8s\.io\/v1\)/);
  });

  it('names what it did not find and exits 1', async () => {
    const r = await ctl(['describe', 'ippool', 'nope']);
    expect(r.code).toBe(1);
    expect(r.err).toMatch(/not found/);
  });
});
