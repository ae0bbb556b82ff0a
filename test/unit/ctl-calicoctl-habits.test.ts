// netpluginctl's calicoctl habits, in-process on the in-memory datastore with
// the real allocator: ipam configure (and the allocator honouring strict
// affinity), ipam show --show-borrowed / --show-configuration / -o yaml,
// ipam split, release --dry-run, and node diags (run for real in the test's
// network namespace).
import { execFileSync, spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { parse as parseYaml } from 'yaml';
import { MemoryDatastore } from '../../src/datastore/memory.js';
import { runCtl } from '../../src/ctl/index.js';
import { createIpam } from '../../src/ipam/index.js';
import { API_VERSION } from '../../src/model/resources.js';

let ds: MemoryDatastore;
let dir: string;
beforeEach(() => {
  ds = new MemoryDatastore();
  dir = mkdtempSync(join(tmpdir(), `ctl-calico-${process.pid}-`));
});
afterEach(() => rmSync(dir, { recursive: true, force: true }));

async function ctl(argv: string[], stdin?: string): Promise<{ code: number; out: string; err: string }> {
  let out = '';
  let err = '';
  const code = await runCtl(argv, {
    env: { ETCD_ENDPOINTS: 'http://127.0.0.1:2379' },
    stdin,
    cwd: dir,
    stdout: (s) => (out += s),
    stderr: (s) => (err += s),
    openDatastore: async () => ds,
  });
  return { code, out, err };
}
const pool = (name: string, cidr: string, blockSize: number, extra = '') =>
  `apiVersion: ${API_VERSION}\nkind: IPPool\nmetadata: {name: ${name}}\nspec: {cidr: ${cidr}, blockSize: ${blockSize}` +
  `${extra}}\n`;
const assign = (node: string, id: string) =>
  createIpam(ds, { lock: 'none' }).assign({
    handleID: `k8s-pod-network.${id}`,
    node,
    attrs: { namespace: 'ns', pod: id },
    assignIPv4: true,
    assignIPv6: false,
  });

describe('ipam configure and strict affinity', () => {
  it('sets IPAMConfig fields, says what changed, and the allocator then stops borrowing', async () => {
    expect((await ctl(['apply', '-f', '-'], pool('one-block', '10.30.0.0/26', 26))).code).toBe(0);
    const [a] = await assign('node-a', 'a1');
    // node-b cannot claim a block (the pool has one): it borrows from node-a's.
    const [b] = await assign('node-b', 'b1');
    expect(b!.ip.startsWith('10.30.0.')).toBe(true);
    const borrowed = await ctl(['ipam', 'show', '--show-borrowed']);
    expect(borrowed.out).toMatch(/^IP\s+BORROWING-NODE\s+BLOCK\s+BLOCK OWNER\s+HANDLE\s+ALLOCATED-TO\n/);
    expect(borrowed.out).toContain(`${b!.ip.split('/')[0]}`);
    expect(borrowed.out).toMatch(/node-b\s+10\.30\.0\.0\/26\s+node-a\s+k8s-pod-network\.b1\s+ns\/b1/);
    expect(borrowed.out).not.toContain(a!.ip.split('/')[0]! + ' ');

    const c = await ctl(['ipam', 'configure', '--strictaffinity=true', '--max-blocks-per-host', '3']);
    expect(c.err).toBe('');
    expect(c.out).toBe('Successfully set StrictAffinity to: true\nSuccessfully set MaxBlocksPerHost to: 3\n');
    expect((await ds.get('IPAMConfig', 'default')).spec).toMatchObject({ strictAffinity: true, maxBlocksPerHost: 3 });
    expect((await ctl(['ipam', 'configure', '--strictaffinity', 'true'])).out).toBe('StrictAffinity is already true\n');
    await expect(assign('node-c', 'c1')).rejects.toThrow(/strictAffinity is on/);
    const conf = await ctl(['ipam', 'show', '--show-configuration']);
    expect(conf.out).toMatch(/StrictAffinity\s+true\nAutoAllocateBlocks\s+true\nMaxBlocksPerHost\s+3\n/);
    const y = parseYaml((await ctl(['ipam', 'show', '--show-configuration', '--show-borrowed', '-o', 'yaml'])).out);
    expect(y.configuration).toEqual({ strictAffinity: true, maxBlocksPerHost: 3, autoAllocateBlocks: true });
    expect(y.borrowed).toEqual([
      expect.objectContaining({ borrowingNode: 'node-b', blockOwner: 'node-a', handle: 'k8s-pod-network.b1' }),
    ]);
    expect(y.pools[0]).toMatchObject({ name: 'one-block', allocated: 2 });
    expect((await ctl(['ipam', 'configure', '--strictaffinity=yes'])).err).toContain('takes true or false');
    expect((await ctl(['ipam', 'configure', '--max-blocks-per-host=-1'])).err).toContain('whole number');
    expect((await ctl(['ipam', 'configure'])).err).toContain('needs --strictaffinity');
    expect((await ctl(['ipam', 'confgure'])).err).toContain('did you mean configure?');
  });

  it('release --dry-run says "would release" and releases nothing', async () => {
    await ctl(['apply', '-f', '-'], pool('p', '10.31.0.0/24', 26));
    const [a] = await assign('node-a', 'x');
    const ip = a!.ip.split('/')[0]!;
    const r = await ctl(['ipam', 'release', '--ip', ip, '--dry-run']);
    expect(r.out).toBe(`would release ${ip} (handle k8s-pod-network.x)\n`);
    expect((await ctl(['ipam', 'show', '--ip', ip])).out).toContain('is allocated');
  });
});

describe('ipam split', () => {
  it('splits a disabled pool into 2^n pools keeping its blocks and allocations', async () => {
    await ctl(['apply', '-f', '-'], pool('big', '10.40.0.0/24', 26, ', natOutgoing: true'));
    const [a] = await assign('node-a', 'kept');
    const busy = await ctl(['ipam', 'split', '4', '--name', 'big']);
    expect(busy.code).toBe(1);
    expect(busy.err).toContain('is in use for new allocations; disable it first');
    await ctl(['patch', 'ippool', 'big', '-p', '{"spec":{"disabled":true}}']);
    expect((await ctl(['ipam', 'split', '3', '--name', 'big'])).err).toContain('must be a power of 2');
    expect((await ctl(['ipam', 'split', '8', '--name', 'big'])).err).toContain(
      'smaller than one block; split it in at most 4',
    );
    expect((await ctl(['ipam', 'split', '2', '--cidr', '10.99.0.0/24'])).err).toContain(
      'no IP pool with CIDR 10.99.0.0/24',
    );
    const dry = await ctl(['ipam', 'split', '2', '--cidr', '10.40.0.0/24', '--dry-run']);
    expect(dry.out).toContain('(dry run)');
    expect((await ds.list('IPPool')).items.map((p) => p.metadata.name)).toEqual(['big']);
    const r = await ctl(['ipam', 'split', '4', '--name', 'big']);
    expect(r.err).toBe('');
    expect(r.out).toBe(
      [
        'ippool/big-0 created: 10.40.0.0/26',
        'ippool/big-1 created: 10.40.0.64/26',
        'ippool/big-2 created: 10.40.0.128/26',
        'ippool/big-3 created: 10.40.0.192/26',
        'ippool/big deleted: split into 4 pools',
        '',
      ].join('\n'),
    );
    const pools = (await ds.list('IPPool')).items;
    expect(pools.map((p) => [p.metadata.name, p.spec.cidr, p.spec.natOutgoing, p.spec.disabled])).toEqual([
      ['big-0', '10.40.0.0/26', true, true],
      ['big-1', '10.40.0.64/26', true, true],
      ['big-2', '10.40.0.128/26', true, true],
      ['big-3', '10.40.0.192/26', true, true],
    ]);
    const who = JSON.parse((await ctl(['ipam', 'show', '--ip', a!.ip.split('/')[0]!, '-o', 'json'])).out);
    expect(who).toMatchObject({ allocated: true, pool: expect.stringMatching(/^big-\d$/), pod: 'kept' });
  });
});

describe('node diags', () => {
  it('writes one archive with the host state, the datastore view of the node, logs and the errors', async () => {
    // This namespace's own state (scripts/in-netns): a link, a route, a neighbour, a netplugin table.
    execFileSync('ip', ['link', 'add', 'diag0', 'type', 'veth', 'peer', 'name', 'diag1']);
    try {
      execFileSync('ip', ['link', 'set', 'diag0', 'up']);
      execFileSync('ip', ['addr', 'add', '10.77.0.1/24', 'dev', 'diag0']);
      execFileSync('ip', ['route', 'add', '10.78.0.0/24', 'via', '10.77.0.2']);
      execFileSync('ip', ['neigh', 'add', '10.77.0.9', 'lladdr', '02:00:00:00:00:09', 'dev', 'diag0']);
      execFileSync('nft', ['add', 'table', 'inet', 'netplugin-diagtest']);
      await ctl(['apply', '-f', '-'], pool('p', '10.32.0.0/24', 26));
      await ds.create({ apiVersion: API_VERSION, kind: 'Node', metadata: { name: 'diag-node' }, spec: {} });
      await assign('diag-node', 'd1');
      await ctl(['datastore', 'init']);
      writeFileSync(join(dir, 'agent.log'), 'agent started\n');
      const r = await ctl([
        'node',
        'diags',
        '--node',
        'diag-node',
        '--log',
        'agent.log',
        '--log',
        'missing.log',
        '--metrics-url',
        'http://127.0.0.1:1/metrics',
        '-d',
        '.',
      ]);
      expect(r.code).toBe(0);
      const archive = /^wrote (\S+\.tar\.gz)\n$/.exec(r.out)![1]!;
      expect(r.err).toContain('could not be collected');
      const files = execFileSync('tar', ['-tzf', archive], { encoding: 'utf8' })
        .split('\n')
        .filter((f) => !f.endsWith('/') && f);
      const base = files[0]!.split('/')[0]!;
      expect(base).toMatch(/^netplugin-diags-diag-node-\d{8}T\d{6}$/);
      expect(files.map((f) => f.slice(base.length + 1)).sort()).toEqual(
        ['affinities.yaml', 'blocks.yaml', 'clusterinformation.yaml', 'node.yaml', 'workloadendpoints.yaml']
          .map((f) => `datastore/${f}`)
          .concat([
            'errors.txt',
            'fdb.txt',
            'links.txt',
            'logs/agent.log',
            'neighbours.txt',
            'nft.txt',
            'routes.txt',
            'versions.txt',
          ])
          .sort(),
      );
      const read = (f: string) => execFileSync('tar', ['-xzOf', archive, `${base}/${f}`], { encoding: 'utf8' });
      expect(read('links.txt')).toContain('diag0');
      expect(read('routes.txt')).toContain('10.78.0.0/24 via 10.77.0.2');
      expect(read('neighbours.txt')).toContain('02:00:00:00:00:09');
      expect(read('nft.txt')).toContain('table inet netplugin-diagtest');
      expect(read('logs/agent.log')).toBe('agent started\n');
      expect(parseYaml(read('datastore/blocks.yaml'))[0].spec.affinity).toBe('host:diag-node');
      expect(parseYaml(read('datastore/affinities.yaml'))[0].spec.node).toBe('diag-node');
      expect(read('versions.txt')).toMatch(/netpluginctl: \S+\ncluster: \S+/);
      const errors = read('errors.txt');
      expect(errors).toContain('log missing.log: no such file');
      expect(errors).toContain('metrics http://127.0.0.1:1/metrics');
    } finally {
      spawnSync('nft', ['delete', 'table', 'inet', 'netplugin-diagtest'], { stdio: 'ignore' });
      execFileSync('ip', ['link', 'del', 'diag0']);
    }
  });
});
