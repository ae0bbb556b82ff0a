// The upgrade commands through the built netpluginctl against the Kubernetes
// datastore (the fake API server), seeded as an older release (v3.27) left it:
// objects owned by netplugin.org/v3 objects, a leftover allow-all-upgrade
// policy, all-interfaces host endpoints beside a managed one.
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startFakeApiServer, writeKubeconfig, type FakeApiServer } from '../support/fake-apiserver.js';
import { openDatastore } from '../../src/datastore/index.js';
import { API_VERSION } from '../../src/model/resources.js';
import type { Datastore } from '../../src/datastore/types.js';
import { requireBuiltCtl, runBuiltCtl } from '../support/ctl.js';
import pkg from '../../package.json' with { type: 'json' };
const TOKEN = 'upgrade-test-token';

let server: FakeApiServer;
let kubeconfig: string;
let ds: Datastore;
let tmp: string;

const ctl = (args: string[]) =>
  runBuiltCtl(args, { env: { DATASTORE_TYPE: 'kubernetes', KUBECONFIG: kubeconfig }, cwd: tmp });

async function kget(path: string): Promise<any> {
  const { createKubeClient } = await import('../../src/k8s/client.js');
  const c = await createKubeClient({ kubeconfig, timeoutMs: 5000 });
  try {
    return await c.request('GET', path);
  } finally {
    c.close();
  }
}

const ref = (kind: string, name: string, uid: string) => ({
  apiVersion: API_VERSION,
  kind,
  name,
  uid,
  blockOwnerDeletion: true,
});
const OTHER_REF = { apiVersion: 'v1', kind: 'ConfigMap', name: 'settings', uid: 'cm-uid-1' };

beforeAll(async () => {
  requireBuiltCtl();
  tmp = mkdtempSync(join(tmpdir(), 'ctl-upgrade-'));
  server = await startFakeApiServer({ tls: true, auth: { tokens: [TOKEN] } });
  kubeconfig = writeKubeconfig(server.dir, server, { token: TOKEN });
  ds = await openDatastore({ datastore_type: 'kubernetes', kubernetes: { kubeconfig }, timeoutMs: 5000 });

  await ds.create({
    apiVersion: API_VERSION,
    kind: 'ClusterInformation',
    metadata: { name: 'default' },
    spec: { clusterGUID: 'guid-1', clusterType: 'k8s,kdd', netpluginVersion: 'v3.27.2', datastoreReady: true },
  });
  const pool = await ds.create({
    apiVersion: API_VERSION,
    kind: 'IPPool',
    metadata: { name: 'pool-a' },
    spec: { cidr: '10.50.0.0/16', blockSize: 26 },
  });
  const gnp = await ds.create({
    apiVersion: API_VERSION,
    kind: 'GlobalNetworkPolicy',
    metadata: { name: 'gnp-x' },
    spec: { selector: 'all()' },
  });
  await ds.create({
    apiVersion: API_VERSION,
    kind: 'GlobalNetworkPolicy',
    metadata: { name: 'allow-all-upgrade' },
    spec: { selector: "role == 'edge'", order: 0 },
  });
  server.put('/apis/apps/v1/namespaces/default/deployments/web', {
    metadata: { name: 'web', ownerReferences: [OTHER_REF, ref('IPPool', 'pool-a', pool.metadata.uid!)] },
    spec: { replicas: 1 },
  });
  server.put('/api/v1/namespaces/default/pods/owned-pod', {
    metadata: { name: 'owned-pod', ownerReferences: [ref('GlobalNetworkPolicy', 'gnp-x', gnp.metadata.uid!)] },
    spec: { nodeName: 'node-a', containers: [{ name: 'c', image: 'x' }] },
  });
  // A cluster-scoped object with an owner of ours.
  server.put('/api/v1/namespaces/team-a', {
    metadata: { name: 'team-a', ownerReferences: [ref('IPPool', 'pool-a', pool.metadata.uid!)] },
  });
  server.put('/apis/apps/v1/namespaces/default/deployments/unrelated', {
    metadata: { name: 'unrelated', ownerReferences: [OTHER_REF] },
    spec: {},
  });
  for (const n of ['node-a', 'node-b'])
    server.put(`/api/v1/nodes/${n}`, { metadata: { name: n, labels: { 'kubernetes.io/hostname': n } } });
  await ds.create({
    apiVersion: API_VERSION,
    kind: 'HostEndpoint',
    metadata: { name: 'node-a-all', labels: { role: 'edge', zone: 'z1' } },
    spec: { node: 'node-a', interfaceName: '*' },
  });
  await ds.create({
    apiVersion: API_VERSION,
    kind: 'HostEndpoint',
    metadata: { name: 'node-b-eth0', labels: { role: 'edge' } },
    spec: { node: 'node-b', interfaceName: 'eth0' },
  });
  await ds.create({
    apiVersion: API_VERSION,
    kind: 'HostEndpoint',
    metadata: { name: 'node-b-auto-hep', labels: { 'netplugin.org/created-by': 'netplugin-kube-controllers' } },
    spec: { node: 'node-b', interfaceName: '*' },
  });
  await ds.create({
    apiVersion: API_VERSION,
    kind: 'HostEndpoint',
    metadata: { name: 'node-b-managed', labels: { 'netplugin.org/created-by': 'netplugin-kube-controllers' } },
    spec: { node: 'node-b', interfaceName: '*' },
  });
});

afterAll(async () => {
  await ds?.close();
  await server?.stop();
  if (tmp) rmSync(tmp, { recursive: true, force: true });
});

describe('netpluginctl upgrade (seeded as v3.27)', () => {
  it('check lists every finding and blocks on owner references', async () => {
    const r = await ctl(['upgrade', 'check', '--to', 'v3.32.x', '-o', 'json']);
    expect(r.err).toBe('');
    expect(r.code).toBe(1);
    const j = JSON.parse(r.out);
    expect(j).toMatchObject({
      clientVersion: pkg.version,
      clusterVersion: 'v3.27.2',
      datastoreType: 'kubernetes',
      blocked: true,
    });
    const items = (j.findings as Array<{ procedure: string; item: string; blocking: boolean }>).map(
      (f) => `${f.blocking ? '!' : ''}${f.procedure}: ${f.item}`,
    );
    expect(items).toContainEqual(
      expect.stringMatching(
        /^!owner references: 3 object\(s\) have owner references to netplugin\.org\/v3 objects.*pod\/default\/owned-pod -> GlobalNetworkPolicy\/gnp-x; namespace\/team-a -> IPPool\/pool-a; deployment\/default\/web -> IPPool\/pool-a\./,
      ),
    );
    expect(items).toContainEqual(
      expect.stringMatching(/^temporary policy: leftover GlobalNetworkPolicy allow-all-upgrade/),
    );
    expect(items).toContainEqual(
      expect.stringMatching(
        /^automatic host endpoints: 1 all-interfaces host endpoint\(s\) .*: node-a-all \(node node-a\);/,
      ),
    );
    expect(items).toContainEqual(
      expect.stringMatching(/^manifest install with the Kubernetes datastore: datastore: Kubernetes API/),
    );
    expect(items).toContainEqual(expect.stringMatching(/^general: cluster version v3\.27\.2, client /));
    expect(items.filter((i) => i.startsWith('!'))).toHaveLength(1);

    const text = await ctl(['upgrade', 'check']);
    expect(text.code).toBe(1);
    expect(text.out).toMatch(/owner references:\n {2}BLOCKING 3 object/);
    expect(text.out).toMatch(/upgrade blocked: fix the BLOCKING items first\n$/);
    expect((await ctl(['upgrade', 'check', '--to', 'v3.33.0'])).out).toMatch(
      /BLOCKING this netpluginctl .* upgrades to v3\.32\.x, not v3\.33\.0/,
    );
  });

  it("owner references: save, strip (dry run first), then restore with the owners' new UIDs; a vanished owner is reported", async () => {
    const save = await ctl(['upgrade', 'owner-refs', 'save', '-o', 'refs.json']);
    expect(save.err).toBe('');
    expect(save.code).toBe(0);
    expect(save.out).toMatch(/saved 3 object\(s\)/);
    const saved = JSON.parse(readFileSync(join(tmp, 'refs.json'), 'utf8'));
    expect(saved.objects.map((o: { path: string }) => o.path).sort()).toEqual([
      '/api/v1/namespaces/default/pods/owned-pod',
      '/api/v1/namespaces/team-a',
      '/apis/apps/v1/namespaces/default/deployments/web',
    ]);

    const dry = await ctl(['upgrade', 'owner-refs', 'strip', '--dry-run']);
    expect(dry.out).toMatch(/deployment\/default\/web: would strip IPPool\/pool-a/);
    expect((await kget('/apis/apps/v1/namespaces/default/deployments/web')).metadata.ownerReferences).toHaveLength(2);

    const strip = await ctl(['upgrade', 'owner-refs', 'strip']);
    expect(strip.code).toBe(0);
    expect(strip.out).toMatch(/3 object\(s\) changed/);
    expect((await kget('/api/v1/namespaces/team-a')).metadata.ownerReferences).toBeUndefined();
    expect((await kget('/apis/apps/v1/namespaces/default/deployments/web')).metadata.ownerReferences).toEqual([
      OTHER_REF,
    ]);
    expect((await kget('/api/v1/namespaces/default/pods/owned-pod')).metadata.ownerReferences).toBeUndefined();
    expect((await kget('/apis/apps/v1/namespaces/default/deployments/unrelated')).metadata.ownerReferences).toEqual([
      OTHER_REF,
    ]);
    // Nothing left to strip: check no longer blocks.
    const check = await ctl(['upgrade', 'check']);
    expect(check.code).toBe(0);
    expect(check.out).toMatch(/no owner references to netplugin\.org\/v3 objects: nothing to do/);

    // The upgrade: the pool comes back with a new UID; the policy is gone.
    const oldUid = (await ds.get('IPPool', 'pool-a')).metadata.uid;
    await ds.delete('IPPool', 'pool-a');
    const pool = await ds.create({
      apiVersion: API_VERSION,
      kind: 'IPPool',
      metadata: { name: 'pool-a' },
      spec: { cidr: '10.50.0.0/16', blockSize: 26 },
    });
    expect(pool.metadata.uid).not.toBe(oldUid);
    await ds.delete('GlobalNetworkPolicy', 'gnp-x');

    const rdry = await ctl(['upgrade', 'owner-refs', 'restore', '-f', 'refs.json', '--dry-run']);
    expect(rdry.out).toMatch(
      new RegExp(`deployment/default/web: would restore IPPool/pool-a \\(uid ${pool.metadata.uid}\\)`),
    );
    expect((await kget('/apis/apps/v1/namespaces/default/deployments/web')).metadata.ownerReferences).toEqual([
      OTHER_REF,
    ]);

    const restore = await ctl(['upgrade', 'owner-refs', 'restore', '-f', 'refs.json']);
    expect(restore.code).toBe(1);
    expect(restore.err).toMatch(
      /pod\/default\/owned-pod: owner GlobalNetworkPolicy\/gnp-x no longer exists; its reference is not restored/,
    );
    expect(restore.out).toMatch(/2 object\(s\) changed; 1 owner\(s\) not found\n$/);
    expect((await kget('/api/v1/namespaces/team-a')).metadata.ownerReferences).toEqual([
      ref('IPPool', 'pool-a', pool.metadata.uid!),
    ]);
    expect((await kget('/apis/apps/v1/namespaces/default/deployments/web')).metadata.ownerReferences).toEqual([
      OTHER_REF,
      { ...ref('IPPool', 'pool-a', pool.metadata.uid!) },
    ]);
    expect((await kget('/api/v1/namespaces/default/pods/owned-pod')).metadata.ownerReferences).toBeUndefined();
    // Restoring again changes nothing.
    expect((await ctl(['upgrade', 'owner-refs', 'restore', '-f', 'refs.json'])).out).toMatch(
      /deployment\/default\/web: unchanged/,
    );
  });

  it('auto-hep: dry run, a timeout naming the node, then the migration with a stand-in controller', async () => {
    const dry = await ctl(['upgrade', 'auto-hep', '--dry-run']);
    expect(dry.err).toBe('');
    expect(dry.out).toMatch(/node\/node-a: would add labels role=edge, zone=z1 \(from hostendpoint\/node-a-all\)/);
    expect(dry.out).toMatch(/hostendpoint\/node-b-auto-hep: managed \(kept\)/);
    expect(dry.out).toMatch(/hostendpoint\/node-b-managed: managed \(kept\)/);
    expect(dry.out).toMatch(/hostendpoint\/node-a-all: would be deleted once node-a-auto-hep exists/);
    expect((await kget('/api/v1/nodes/node-a')).metadata.labels.role).toBeUndefined();

    const t = await ctl(['upgrade', 'auto-hep', '--timeout', '1']);
    expect(t.code).toBe(1);
    expect(t.err).toMatch(
      /no automatic host endpoint exists for node\(s\) node-a \(expected node-a-auto-hep\); the old endpoints are kept/,
    );
    expect((await ds.get('HostEndpoint', 'node-a-all')).spec.interfaceName).toBe('*');
    expect(
      (await ds.get('KubeControllersConfiguration', 'default')).spec.controllers?.node?.hostEndpoint?.autoCreate,
    ).toBe('Enabled');

    // A stand-in for netplugin-kube-controllers: once autoCreate is on, create <node>-auto-hep for every node.
    let stop = false;
    const loop = (async () => {
      while (!stop) {
        const kcc = await ds.get('KubeControllersConfiguration', 'default').catch(() => undefined);
        if (kcc?.spec.controllers?.node?.hostEndpoint?.autoCreate === 'Enabled') {
          const labels = (await kget('/api/v1/nodes/node-a')).metadata.labels;
          await ds
            .create({
              apiVersion: API_VERSION,
              kind: 'HostEndpoint',
              metadata: {
                name: 'node-a-auto-hep',
                labels: { ...labels, 'netplugin.org/created-by': 'netplugin-kube-controllers' },
              },
              spec: { node: 'node-a', interfaceName: '*', profiles: ['projectcalico-default-allow'] },
            })
            .catch(() => undefined);
          return;
        }
        await new Promise((r) => setTimeout(r, 200));
      }
    })();
    const m = await ctl(['upgrade', 'auto-hep', '--timeout', '60']);
    stop = true;
    await loop;
    expect(m.err).toBe('');
    expect(m.code).toBe(0);
    expect(m.out).toMatch(/hostendpoint\/node-a-all: deleted \(replaced by node-a-auto-hep\)/);
    expect((await kget('/api/v1/nodes/node-a')).metadata.labels).toMatchObject({
      role: 'edge',
      zone: 'z1',
      'kubernetes.io/hostname': 'node-a',
    });
    expect((await ds.list('HostEndpoint')).items.map((h) => h.metadata.name).sort()).toEqual([
      'node-a-auto-hep',
      'node-b-auto-hep',
      'node-b-eth0',
      'node-b-managed',
    ]);
    expect((await ds.get('HostEndpoint', 'node-a-auto-hep')).metadata.labels).toMatchObject({
      role: 'edge',
      zone: 'z1',
    });
  });

  it('auto-hep refuses a label that conflicts with the node and changes nothing', async () => {
    await ds.create({
      apiVersion: API_VERSION,
      kind: 'HostEndpoint',
      metadata: { name: 'node-b-all', labels: { 'kubernetes.io/hostname': 'other' } },
      spec: { node: 'node-b', interfaceName: '*' },
    });
    const r = await ctl(['upgrade', 'auto-hep']);
    expect(r.code).toBe(1);
    expect(r.err).toMatch(
      /hostendpoint\/node-b-all: label kubernetes\.io\/hostname=other conflicts with kubernetes\.io\/hostname=node-b on node node-b/,
    );
    await ds.delete('HostEndpoint', 'node-b-all');
  });

  it('finish shows what allow-all-upgrade matched, deletes it and records the new cluster version', async () => {
    const dry = await ctl(['upgrade', 'finish', '--dry-run']);
    expect(dry.code).toBe(0);
    expect(dry.out).toMatch(
      /globalnetworkpolicy\/allow-all-upgrade: selector role == 'edge'; host endpoints it lets all traffic through: node-a-auto-hep \(node node-a\), node-b-eth0 \(node node-b\)/,
    );
    expect(dry.out).toMatch(/would be deleted/);
    expect(dry.out).toMatch(new RegExp(`cluster version v3\\.27\\.2 would be set to ${pkg.version}`));
    expect((await ds.get('GlobalNetworkPolicy', 'allow-all-upgrade')).metadata.name).toBe('allow-all-upgrade');

    const f = await ctl(['upgrade', 'finish', '--yes']);
    expect(f.err).toBe('');
    expect(f.code).toBe(0);
    expect(f.out).toMatch(/globalnetworkpolicy\/allow-all-upgrade deleted/);
    await expect(ds.get('GlobalNetworkPolicy', 'allow-all-upgrade')).rejects.toThrow(/not found/);
    expect((await ds.get('ClusterInformation', 'default')).spec).toMatchObject({
      netpluginVersion: pkg.version,
      clusterGUID: 'guid-1',
    });
    const v = JSON.parse((await ctl(['version', '-o', 'json'])).out);
    expect(v).toMatchObject({ clientVersion: pkg.version, clusterVersion: pkg.version, clusterType: 'k8s,kdd' });
    const again = await ctl(['upgrade', 'finish', '--yes']);
    expect(again.out).toBe(`no allow-all-upgrade policy\ncluster version ${pkg.version} unchanged\n`);
    const check = await ctl(['upgrade', 'check']);
    expect(check.code).toBe(0);
    expect(check.out).toMatch(/already upgraded/);
  });
});
