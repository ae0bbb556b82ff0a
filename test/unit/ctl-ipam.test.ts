// ipam show / check / release and datastore init on the in-memory datastore,
// with addresses allocated by the real allocator (src/ipam).
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { MemoryDatastore } from '../../src/datastore/memory.js';
import { initDatastore, runCtl } from '../../src/ctl/index.js';
import { createIpam, type Ipam } from '../../src/ipam/index.js';
import { API_VERSION } from '../../src/model/resources.js';
import { handleName } from '../../src/ipam/handle.js';
import type { IpamReport } from '../../src/ctl/ipam.js';
import pkg from '../../package.json' with { type: 'json' };

let ds: MemoryDatastore;
let ipam: Ipam;
let dir: string;
beforeEach(() => {
  ds = new MemoryDatastore();
  ipam = createIpam(ds, { lock: 'none' });
  dir = mkdtempSync(join(tmpdir(), `ctl-ipam-${process.pid}-`));
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

async function addPool(name: string, cidr: string, blockSize?: number): Promise<void> {
  await ds.create({
    apiVersion: API_VERSION,
    kind: 'IPPool',
    metadata: { name },
    spec: {
      cidr,
      ...(blockSize !== undefined ? { blockSize } : {}),
      ipipMode: 'Never',
      vxlanMode: 'Never',
      nodeSelector: 'all()',
    },
  });
}

async function addNode(name: string): Promise<void> {
  await ds.create({ apiVersion: API_VERSION, kind: 'Node', metadata: { name }, spec: {} });
}

async function pod(ns: string, name: string, cid: string, node = 'n1', withEndpoint = true): Promise<string> {
  const [a] = await ipam.assign({
    handleID: `k8s-pod-network.${cid}`,
    node,
    attrs: { namespace: ns, pod: name },
    assignIPv4: true,
    assignIPv6: false,
  });
  if (withEndpoint) {
    await ds.create({
      apiVersion: API_VERSION,
      kind: 'WorkloadEndpoint',
      metadata: { name: `${node}-k8s-${name}-eth0`, namespace: ns },
      spec: {
        orchestrator: 'k8s',
        node,
        containerID: cid,
        pod: name,
        endpoint: 'eth0',
        ipNetworks: [`${a!.ip}/32`],
        interfaceName: 'eth0',
      },
    });
  }
  return a!.ip;
}

describe('ipam show', () => {
  it('shows per-pool usage, blocks, and who holds an address', async () => {
    await addPool('p4', '10.50.0.0/24', 26);
    await addNode('n1');
    const ip1 = await pod('default', 'web', 'c1');
    await pod('default', 'db', 'c2');
    const show = await ctl(['ipam', 'show']);
    expect(show.code).toBe(0);
    expect(show.out).toMatch(
      /^POOL\s+CIDR\s+SIZE\s+BLOCKS\s+ALLOCATED\s+FREE\s+USED\np4\s+10\.50\.0\.0\/24\s+256\s+1\s+2\s+254\s+0\.78%\n$/,
    );

    const blocks = await ctl(['ipam', 'show', '--show-blocks']);
    expect(blocks.out).toMatch(
      /BLOCK\s+POOL\s+AFFINITY\s+ALLOCATED\s+FREE\n10\.50\.0\.0\/26\s+p4\s+host:n1\s+2\s+62\n/,
    );

    const j = JSON.parse((await ctl(['ipam', 'show', '-o', 'json'])).out) as {
      pools: Array<{ name: string; allocated: number; size: string }>;
    };
    expect(j.pools).toEqual([expect.objectContaining({ name: 'p4', allocated: 2, size: '256', blocks: 1 })]);

    const who = await ctl(['ipam', 'show', '--ip', ip1]);
    expect(who.out).toMatch(new RegExp(`^${ip1.replace(/\./g, '\\.')} is allocated\n`));
    expect(who.out).toMatch(/handle:\s+k8s-pod-network\.c1\n/);
    expect(who.out).toMatch(/node:\s+n1\n/);
    expect(who.out).toMatch(/pod:\s+default\/web\n/);
    expect(who.out).toMatch(/endpoint:\s+default\/n1-k8s-web-eth0\n/);
    const whoJson = JSON.parse((await ctl(['ipam', 'show', '--ip', ip1, '-o', 'json'])).out);
    expect(whoJson).toMatchObject({
      ip: ip1,
      allocated: true,
      handle: 'k8s-pod-network.c1',
      node: 'n1',
      namespace: 'default',
      pod: 'web',
      pool: 'p4',
    });
    expect((await ctl(['ipam', 'show', '--ip', '10.50.0.200'])).out).toBe(
      '10.50.0.200 is free (pool p4, no block claimed yet)\n',
    );
    expect((await ctl(['ipam', 'show', '--ip', '192.0.2.1'])).out).toBe('192.0.2.1 is not in any IP pool\n');
    const bad = await ctl(['ipam', 'show', '--ip', '10.50.0']);
    expect(bad).toMatchObject({ code: 1, err: 'error: --ip "10.50.0" is not an IPv4 or IPv6 address\n' });
  });

  it('counts blocks left behind by a force-deleted pool', async () => {
    await addPool('gone', '10.60.0.0/24', 26);
    await pod('default', 'a', 'c1');
    await ds.delete('IPPool', 'gone');
    const show = await ctl(['ipam', 'show']);
    expect(show.out).toMatch(/no IP pools configured/);
    expect(show.out).toMatch(/1 block\(s\) outside every pool hold 1 address\(es\)/);
  });
});

describe('ipam check and release', () => {
  it('finds a leaked handle, writes a report, and releases exactly it', async () => {
    await addPool('p', '10.70.0.0/24', 26);
    await addNode('n1');
    const live = await pod('default', 'live', 'c-live');
    const leaked = await pod('default', 'gone', 'c-gone', 'n1', false);
    const check = await ctl(['ipam', 'check', '-o', 'report.json']);
    // Problems found: exit 1 (documented for cron jobs and alerts), also with --json.
    expect(check.code).toBe(1);
    expect((await ctl(['ipam', 'check', '--json'])).code).toBe(1);
    expect(check.out).toMatch(/leaked handles \(1\):\n {2}k8s-pod-network\.c-gone {2}/);
    expect(check.out).toMatch(
      /no workload endpoint for pod default\/gone \(the pod was not looked up: no Kubernetes access/,
    );
    const report = JSON.parse(readFileSync(join(dir, 'report.json'), 'utf8')) as IpamReport;
    expect(report.leakedHandles).toEqual([
      expect.objectContaining({
        handle: 'k8s-pod-network.c-gone',
        ips: [leaked],
        namespace: 'default',
        pod: 'gone',
        node: 'n1',
      }),
    ]);
    expect(report.summary).toMatchObject({ allocated: 2, leakedAddresses: 1, problems: 1 });

    const rel = await ctl(['ipam', 'release', '--from-report', 'report.json']);
    expect(rel.err).toBe('');
    expect(rel.code).toBe(0);
    expect(rel.out).toMatch(/released handle k8s-pod-network\.c-gone/);
    expect(await ipam.whoHas(leaked)).toBeUndefined();
    expect((await ipam.whoHas(live))?.handle).toBe('k8s-pod-network.c-live');
    await expect(ds.get('IPAMHandle', handleName('k8s-pod-network.c-gone'))).rejects.toThrow(/not found/);

    // Running the same report again finds nothing left to do.
    const again = await ctl(['ipam', 'release', '--from-report', 'report.json']);
    expect(again.out).toMatch(/skipped handle k8s-pod-network\.c-gone: no longer leaked/);
    const clean = await ctl(['ipam', 'check']);
    expect(clean.out).toMatch(/no problems found/);
    expect(clean.code).toBe(0);
  });

  it('re-verifies a stale report: a workload that came back is not released', async () => {
    await addPool('p', '10.71.0.0/24', 26);
    const ip = await pod('default', 'slow', 'c-slow', 'n1', false);
    await ctl(['ipam', 'check', '-o', 'r.json']);
    // The plugin finished writing the endpoint after the check ran.
    await ds.create({
      apiVersion: API_VERSION,
      kind: 'WorkloadEndpoint',
      metadata: { name: 'n1-k8s-slow-eth0', namespace: 'default' },
      spec: {
        orchestrator: 'k8s',
        node: 'n1',
        containerID: 'c-slow',
        pod: 'slow',
        endpoint: 'eth0',
        ipNetworks: [`${ip}/32`],
        interfaceName: 'eth0',
      },
    });
    const rel = await ctl(['ipam', 'release', '--from-report', 'r.json']);
    expect(rel.out).toMatch(/skipped handle k8s-pod-network\.c-slow/);
    expect(rel.out).toMatch(/0 item\(s\) released or repaired, 1 skipped, 0 failed/);
    expect((await ipam.whoHas(ip))?.handle).toBe('k8s-pod-network.c-slow');
  });

  it('finds addresses without a handle object, handle objects without block entries, and blocks of deleted nodes', async () => {
    await addPool('p', '10.72.0.0/24', 26);
    await addNode('n1');
    await addNode('n2');
    const orphanIp = await pod('default', 'a', 'c-a', 'n1');
    // Allocation whose handle object vanished.
    await ds.delete('IPAMHandle', handleName('k8s-pod-network.c-a'));
    // Handle object that claims addresses no block holds.
    await ds.create({
      apiVersion: API_VERSION,
      kind: 'IPAMHandle',
      metadata: { name: 'k8s-pod-network.c-ghost' },
      spec: { handleID: 'k8s-pod-network.c-ghost', block: { '10.72.0.0/26': 1 } },
    });
    // A block claimed by n2, which is then removed from the cluster.
    await pod('default', 'b', 'c-b', 'n2');
    await ipam.releaseByHandle('k8s-pod-network.c-b');
    await ds.delete('WorkloadEndpoint', 'n2-k8s-b-eth0', { namespace: 'default' });
    await ds.delete('Node', 'n2');

    const check = await ctl(['ipam', 'check', '--json']);
    const r = JSON.parse(check.out) as IpamReport;
    expect(r.allocationsWithoutHandle).toEqual([
      { ip: orphanIp, handle: 'k8s-pod-network.c-a', block: '10.72.0.0/26' },
    ]);
    expect(r.leakedHandles).toEqual([]);
    expect(r.handlesWithMissingBlockEntries).toEqual([
      { handle: 'k8s-pod-network.c-ghost', missing: { '10.72.0.0/26': 1 }, held: 0 },
    ]);
    expect(r.orphanedAffinities).toEqual([expect.objectContaining({ node: 'n2', allocated: 0 })]);
    const orphanBlock = r.orphanedAffinities[0]!.block;

    writeFileSync(join(dir, 'r.json'), check.out);
    const rel = await ctl(['ipam', 'release', '--from-report', 'r.json']);
    expect(rel.err).toBe('');
    expect(rel.out).toMatch(/released 10\.72\.0\.\d+ \(handle k8s-pod-network\.c-a had no handle object\)/);
    expect(rel.out).toMatch(/repaired handle object k8s-pod-network\.c-ghost/);
    expect(rel.out).toMatch(new RegExp(`released block ${orphanBlock.replace(/[./]/g, '\\$&')} \\(node n2 is gone\\)`));
    expect(await ipam.whoHas(orphanIp)).toBeUndefined();
    await expect(ds.get('IPAMHandle', 'k8s-pod-network.c-ghost')).rejects.toThrow();
    expect((await ds.list('IPAMBlock')).items.map((b) => b.spec.cidr)).not.toContain(orphanBlock);
    expect((await ds.list('BlockAffinity')).items.filter((a) => a.spec.node === 'n2')).toEqual([]);
  });

  it('releases one address by --ip, refusing one in use unless --force', async () => {
    await addPool('p', '10.73.0.0/24', 26);
    const used = await pod('default', 'a', 'c-a');
    const free = await pod('default', 'b', 'c-b', 'n1', false);
    const refused = await ctl(['ipam', 'release', '--ip', used]);
    expect(refused.code).toBe(1);
    expect(refused.err).toMatch(
      new RegExp(
        `${used.replace(/\./g, '\\.')} is in use by workload endpoint default/n1-k8s-a-eth0; delete the workload ` +
          `instead, or pass --force`,
      ),
    );
    const ok = await ctl(['ipam', 'release', '--ip', free]);
    expect(ok).toMatchObject({ code: 0, out: `released ${free} (handle k8s-pod-network.c-b)\n` });
    expect(await ipam.whoHas(free)).toBeUndefined();
    expect((await ctl(['ipam', 'release', '--ip', free])).err).toBe(`error: ${free} is not allocated\n`);
    expect((await ctl(['ipam', 'release', '--ip', used, '--force'])).code).toBe(0);
    expect(await ipam.whoHas(used)).toBeUndefined();
  });

  it('rejects a file that is not a report', async () => {
    writeFileSync(join(dir, 'x.json'), '{"hello": 1}');
    const r = await ctl(['ipam', 'release', '--from-report', 'x.json']);
    expect(r).toMatchObject({
      code: 1,
      err: "error: x.json is not a report from 'netpluginctl ipam check -o FILE' (version 1)\n",
    });
    expect((await ctl(['ipam', 'release'])).err).toMatch(/needs --ip ADDR or --from-report FILE/);
  });
});

describe('datastore init / ready / version', () => {
  it('creates ClusterInformation once and keeps the GUID', async () => {
    const a = await initDatastore(ds, { clusterType: 'k8s,bgp' });
    expect(a.action).toBe('created');
    expect(a.clusterInformation.spec).toMatchObject({
      clusterType: 'k8s,bgp',
      netpluginVersion: pkg.version,
      datastoreReady: true,
    });
    expect(a.clusterInformation.spec.clusterGUID).toMatch(/^[0-9a-f]{32}$/);
    const b = await initDatastore(ds, { clusterType: ['bgp', 'kdd'] });
    expect(b.action).toBe('updated');
    expect(b.clusterInformation.spec.clusterType).toBe('k8s,bgp,kdd');
    expect(b.clusterInformation.spec.clusterGUID).toBe(a.clusterInformation.spec.clusterGUID);
    expect((await initDatastore(ds)).action).toBe('unchanged');
    // An upgrade records the new version.
    expect((await initDatastore(ds, { version: '99.0.0' })).clusterInformation.spec.netpluginVersion).toBe('99.0.0');
    // An agent of an older release restarting mid-upgrade never sets the cluster back.
    expect((await initDatastore(ds, { version: '3.31.2' })).action).toBe('unchanged');
    expect((await ds.get('ClusterInformation', 'default')).spec.netpluginVersion).toBe('99.0.0');
    expect(
      (await initDatastore(ds, { version: '3.31.2', allowDowngrade: true })).clusterInformation.spec.netpluginVersion,
    ).toBe('3.31.2');
  });

  it('keeps an operator-set datastoreReady=false across agent restarts', async () => {
    expect((await ctl(['datastore', 'init'])).out).toMatch(
      new RegExp(
        `^clusterinformation/default created: version ${pkg.version.replaceAll('.', '\\.')}, type \\(none\\), ready ` +
          `true, guid [0-9a-f]{32}\n$`,
      ),
    );
    expect((await ctl(['datastore', 'ready', '--set=false'])).out).toBe(
      'clusterinformation/default datastoreReady=false\n',
    );
    await initDatastore(ds, { clusterType: 'k8s' });
    expect((await ds.get('ClusterInformation', 'default')).spec.datastoreReady).toBe(false);
    expect((await ctl(['datastore', 'ready', '--set', 'true'])).code).toBe(0);
    expect((await ds.get('ClusterInformation', 'default')).spec.datastoreReady).toBe(true);
    expect((await ctl(['datastore', 'ready'])).err).toMatch(/needs --set=true or --set=false/);
  });

  it('fills in a missing GUID on an existing ClusterInformation', async () => {
    await ds.create({
      apiVersion: API_VERSION,
      kind: 'ClusterInformation',
      metadata: { name: 'default' },
      spec: { clusterType: 'k8s' },
    });
    const r = await initDatastore(ds);
    expect(r.action).toBe('updated');
    expect(r.clusterInformation.spec).toMatchObject({
      clusterType: 'k8s',
      datastoreReady: true,
      netpluginVersion: pkg.version,
    });
    expect(r.clusterInformation.spec.clusterGUID).toMatch(/^[0-9a-f]{32}$/);
  });

  it('concurrent inits converge on one object', async () => {
    const rs = await Promise.all([
      initDatastore(ds, { clusterType: 'a' }),
      initDatastore(ds, { clusterType: 'b' }),
      initDatastore(ds, { clusterType: 'c' }),
    ]);
    expect(rs.filter((r) => r.action === 'created')).toHaveLength(1);
    expect((await ds.get('ClusterInformation', 'default')).spec.clusterType!.split(',').sort()).toEqual([
      'a',
      'b',
      'c',
    ]);
  });

  it('version shows client and cluster versions', async () => {
    let out = '';
    await runCtl(['version'], { env: {}, stdout: (s) => (out += s), stderr: () => {} });
    expect(out).toBe(`Client Version:    ${pkg.version}\n`);
    const before = await ctl(['version', '-o', 'json']);
    expect(JSON.parse(before.out)).toMatchObject({
      clientVersion: pkg.version,
      clusterVersion: expect.stringMatching(/^unknown \(datastore not initialised/),
    });
    await initDatastore(ds, { clusterType: 'k8s' });
    const v = await ctl(['version']);
    expect(v.out).toBe(
      `Client Version:    ${pkg.version}\nCluster Version:   ${pkg.version}\nCluster Type:      k8s\n`,
    );
  });
});
