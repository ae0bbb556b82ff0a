// etcd -> Kubernetes datastore migration through the built netpluginctl: a real
// etcd seeded with pools, addresses held by pods, mirrored objects and user
// resources; the fake API server as the target. After lock/export/import/unlock
// every pod's address is held by the same handle, and a new assignment on the
// Kubernetes datastore never hands out a migrated address.
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startEtcd, type EtcdServer } from '../support/etcd.js';
import { startFakeApiServer, writeKubeconfig, type FakeApiServer } from '../support/fake-apiserver.js';
import { openDatastore } from '../../src/datastore/index.js';
import { API_VERSION } from '../../src/model/resources.js';
import type { Datastore } from '../../src/datastore/types.js';
import { createIpam } from '../../src/ipam/index.js';
import { requireBuiltCtl, runBuiltCtl } from '../support/ctl.js';
const TOKEN = 'migrate-test-token';

let etcd: EtcdServer;
let server: FakeApiServer;
let kubeconfig: string;
let src: Datastore;
let dst: Datastore;
let tmp: string;
const held: Record<string, string> = {};

const ctl = (args: string[], target: 'etcd' | 'k8s') =>
  runBuiltCtl(args, {
    env:
      target === 'etcd' ? { ETCD_ENDPOINTS: etcd.endpoint } : { DATASTORE_TYPE: 'kubernetes', KUBECONFIG: kubeconfig },
    cwd: tmp,
  });

beforeAll(async () => {
  requireBuiltCtl();
  tmp = mkdtempSync(join(tmpdir(), 'ctl-migrate-'));
  etcd = await startEtcd();
  server = await startFakeApiServer({ tls: true, auth: { tokens: [TOKEN] } });
  kubeconfig = writeKubeconfig(server.dir, server, { token: TOKEN });
  src = await openDatastore({ datastore_type: 'etcdv3', etcd_endpoints: etcd.endpoint, timeoutMs: 5000 });
  dst = await openDatastore({ datastore_type: 'kubernetes', kubernetes: { kubeconfig }, timeoutMs: 5000 });

  const mk = (kind: string, name: string, spec: Record<string, unknown>, extra: Record<string, unknown> = {}) =>
    src.create({ apiVersion: API_VERSION, kind, metadata: { name, ...extra }, spec } as never);
  await mk('ClusterInformation', 'default', {
    clusterGUID: 'etcd-cluster-guid',
    clusterType: 'k8s',
    netpluginVersion: '3.32.0',
    datastoreReady: true,
  });
  await mk('IPPool', 'pool-v4', {
    cidr: '10.70.0.0/24',
    blockSize: 29,
    ipipMode: 'Always',
    natOutgoing: true,
    nodeSelector: 'all()',
  });
  await mk('IPAMConfig', 'default', { strictAffinity: false, autoAllocateBlocks: true });
  await mk('Node', 'node-a', { addresses: [{ address: '192.0.2.10', type: 'InternalIP' }] }, { labels: { zone: 'a' } });
  await mk('Profile', 'team-profile', { labelsToApply: { team: 'x' } });
  await mk('Profile', 'kns.shop', { labelsToApply: { 'pcns.example.org/stale': 'shop' } });
  await mk('Profile', 'ksa.shop.default', {});
  await mk('GlobalNetworkPolicy', 'deny-egress', { selector: 'all()', types: ['Egress'] });
  await mk('NetworkPolicy', 'user-np', { selector: 'all()' }, { namespace: 'shop' });
  await mk('NetworkPolicy', 'knp.default.mirrored', { selector: 'all()' }, { namespace: 'shop' });
  await mk('HostEndpoint', 'node-a-eth0', { node: 'node-a', interfaceName: 'eth0' });
  await mk('KubeControllersConfiguration', 'default', {
    controllers: { node: { hostEndpoint: { autoCreate: 'Disabled' } } },
  });
  const ipam = createIpam(src, { lock: 'none' });
  for (const pod of ['web-1', 'web-2', 'db-1']) {
    const [a] = await ipam.assign({
      handleID: `k8s-pod-network.cid-${pod}`,
      node: 'node-a',
      attrs: { namespace: 'shop', pod },
      assignIPv4: true,
      assignIPv6: false,
    });
    held[pod] = a!.ip;
  }
  await mk(
    'WorkloadEndpoint',
    'node--a-k8s-web--1-eth0',
    {
      orchestrator: 'k8s',
      node: 'node-a',
      containerID: 'cid-web-1',
      pod: 'web-1',
      endpoint: 'eth0',
      ipNetworks: [`${held['web-1']}/32`],
      interfaceName: 'npiabc',
    },
    { namespace: 'shop' },
  );
});

afterAll(async () => {
  await src?.close();
  await dst?.close();
  await etcd?.stop();
  await server?.stop();
  if (tmp) rmSync(tmp, { recursive: true, force: true });
});

describe('datastore migrate: etcd -> Kubernetes', () => {
  it('export refuses an unlocked datastore', async () => {
    const r = await ctl(['datastore', 'migrate', 'export', '-o', 'x.json'], 'etcd');
    expect(r.code).toBe(1);
    expect(r.err).toMatch(/the datastore is not locked .* run 'netpluginctl datastore migrate lock' first/);
    expect(existsSync(join(tmp, 'x.json'))).toBe(false);
  });

  it('lock, export (no derived objects), import into an empty target only, unlock; IPAM preserved', async () => {
    const check = await ctl(['upgrade', 'check'], 'etcd');
    expect(check.code).toBe(0);
    expect(check.out).toMatch(/manifest install with the etcd datastore:\n {2}datastore: etcd\./);
    expect(check.out).toMatch(/recommended: move to the Kubernetes datastore \(netpluginctl datastore migrate/);
    expect((await ctl(['datastore', 'migrate', 'lock', '--dry-run'], 'etcd')).out).toMatch(
      /datastoreReady=false would be set \(now true\)/,
    );
    expect((await src.get('ClusterInformation', 'default')).spec.datastoreReady).toBe(true);
    const lock = await ctl(['datastore', 'migrate', 'lock'], 'etcd');
    expect(lock.err).toBe('');
    expect(lock.code).toBe(0);
    expect((await src.get('ClusterInformation', 'default')).spec.datastoreReady).toBe(false);

    const exp = await ctl(['datastore', 'migrate', 'export', '-o', 'dump.json'], 'etcd');
    expect(exp.err).toBe('');
    expect(exp.code).toBe(0);
    expect(exp.out).toMatch(/left out 2 Profile \(mirrors a Kubernetes namespace or service account\)/);
    expect(exp.out).toMatch(/left out 1 WorkloadEndpoint \(derived from its pod\)/);
    expect(exp.out).toMatch(/left out 1 NetworkPolicy \(mirrors a Kubernetes NetworkPolicy\)/);
    const dump = JSON.parse(readFileSync(join(tmp, 'dump.json'), 'utf8'));
    const names = (dump.items as Array<{ kind: string; metadata: { name: string; resourceVersion?: string } }>).map(
      (r) => `${r.kind}/${r.metadata.name}`,
    );
    expect(names).not.toContainEqual(
      expect.stringMatching(/^WorkloadEndpoint\/|\/knp\.default\.|^Profile\/k(ns|sa)\./),
    );
    expect(names).toContain('Profile/team-profile');
    expect(names).toContain('NetworkPolicy/user-np');
    // Dependency order: pools before blocks, blocks before affinities and handles.
    const idx = (k: string) => names.findIndex((n) => n.startsWith(`${k}/`));
    expect(idx('ClusterInformation')).toBe(0);
    expect(idx('IPPool')).toBeLessThan(idx('IPAMBlock'));
    expect(idx('IPAMBlock')).toBeLessThan(idx('BlockAffinity'));
    expect(idx('IPAMBlock')).toBeLessThan(idx('IPAMHandle'));
    expect(names.filter((n) => n.startsWith('IPAMHandle/'))).toHaveLength(3);
    expect(
      dump.items.every((r: { metadata: { resourceVersion?: string } }) => r.metadata.resourceVersion === undefined),
    ).toBe(true);

    // A target that is already in use is refused.
    const stray = await dst.create({
      apiVersion: API_VERSION,
      kind: 'IPPool',
      metadata: { name: 'stray' },
      spec: { cidr: '10.99.0.0/16' },
    });
    const refused = await ctl(['datastore', 'migrate', 'import', '-f', 'dump.json'], 'k8s');
    expect(refused.code).toBe(1);
    expect(refused.err).toMatch(/the target datastore is not empty \(1 IPPool\)/);
    await dst.delete('IPPool', stray.metadata.name);
    // Export refuses the Kubernetes datastore, import refuses etcd.
    expect((await ctl(['datastore', 'migrate', 'export', '-o', 'y.json'], 'k8s')).err).toMatch(
      /reads the etcd datastore, but this one is kubernetes/,
    );
    expect((await ctl(['datastore', 'migrate', 'import', '-f', 'dump.json'], 'etcd')).err).toMatch(
      /writes the Kubernetes datastore, but this one is etcdv3/,
    );

    // Namespaced objects need their namespace; nothing is written when one is missing.
    const nons = await ctl(['datastore', 'migrate', 'import', '-f', 'dump.json'], 'k8s');
    expect(nons.code).toBe(1);
    expect(nons.err).toMatch(/namespace\(s\) shop do not exist in the cluster/);
    expect((await dst.list('IPPool')).items).toEqual([]);
    server.put('/api/v1/namespaces/shop', { metadata: { name: 'shop' } });

    const dryImp = await ctl(['datastore', 'migrate', 'import', '-f', 'dump.json', '--dry-run'], 'k8s');
    expect(dryImp.out).toBe(
      `would import ${dump.items.length} object(s) from dump.json (dry run: the target is empty and every namespace ` +
        `exists)\n`,
    );
    expect((await dst.list('IPPool')).items).toEqual([]);
    const imp = await ctl(['datastore', 'migrate', 'import', '-f', 'dump.json'], 'k8s');
    expect(imp.err).toBe('');
    expect(imp.code).toBe(0);
    expect(imp.out).toMatch(
      new RegExp(`imported ${dump.items.length} object\\(s\\) from dump.json; cluster GUID etcd-cluster-guid kept`),
    );
    expect(imp.out).toMatch(/is locked \(datastoreReady=false\)/);
    expect((await dst.get('ClusterInformation', 'default')).spec).toMatchObject({
      clusterGUID: 'etcd-cluster-guid',
      datastoreReady: false,
    });
    expect((await dst.get('NetworkPolicy', 'user-np', 'shop')).spec.selector).toBe('all()');
    expect((await dst.get('Node', 'node-a')).metadata.labels).toEqual({ zone: 'a' });
    // Not imported: on the Kubernetes datastore kns.* profiles are derived from the namespaces.
    const derived = await dst.get('Profile', 'kns.shop');
    expect(derived.spec.labelsToApply).toMatchObject({ 'netplugin.org/name': 'shop' });
    expect(derived.spec.labelsToApply).not.toHaveProperty('pcns.example.org/stale');

    // IPAM: each pod's address is still held by the same handle; blocks and affinities came along.
    const ipam = createIpam(dst, { lock: 'none' });
    for (const [pod, ip] of Object.entries(held)) {
      expect(await ipam.handleAddresses(`k8s-pod-network.cid-${pod}`)).toEqual([ip]);
      expect((await ipam.whoHas(ip))?.handle).toBe(`k8s-pod-network.cid-${pod}`);
    }
    expect((await dst.list('BlockAffinity')).items.map((a) => a.spec.node)).toEqual(['node-a']);
    // New assignments on the Kubernetes datastore never hand out a migrated address.
    const fresh: string[] = [];
    for (let i = 0; i < 10; i++) {
      const [a] = await ipam.assign({
        handleID: `k8s-pod-network.cid-new-${i}`,
        node: 'node-a',
        attrs: { namespace: 'shop', pod: `new-${i}` },
        assignIPv4: true,
        assignIPv6: false,
      });
      fresh.push(a!.ip);
    }
    for (const ip of Object.values(held)) expect(fresh).not.toContain(ip);

    // A second import is refused: the target is no longer empty.
    expect((await ctl(['datastore', 'migrate', 'import', '-f', 'dump.json'], 'k8s')).err).toMatch(/not empty/);

    const unlock = await ctl(['datastore', 'migrate', 'unlock'], 'k8s');
    expect(unlock.code).toBe(0);
    expect((await dst.get('ClusterInformation', 'default')).spec).toMatchObject({
      clusterGUID: 'etcd-cluster-guid',
      datastoreReady: true,
    });
  });
});
