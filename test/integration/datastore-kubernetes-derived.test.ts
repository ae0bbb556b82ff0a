// The kubernetes datastore's derived kinds: knp.default.* from NetworkPolicies,
// kns.* / ksa.* from Namespaces and ServiceAccounts, read (get, list, watch)
// under the same names and content as the etcd mirrors, and read-only. Also
// netplugin-kube-controllers on this datastore: only the node controller runs.
import { spawn } from 'node:child_process';
import { join, resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startFakeApiServer, writeKubeconfig, type FakeApiServer } from '../support/fake-apiserver.js';
import { freePort } from '../support/etcd.js';
import { openDatastore } from '../../src/datastore/index.js';
import { API_VERSION } from '../../src/model/resources.js';
import type { Datastore, WatchEvent } from '../../src/datastore/types.js';
import { DatastoreError } from '../../src/errors.js';
import { convertK8sNetworkPolicy } from '../../src/model/k8s-networkpolicy.js';

const root = resolve(import.meta.dirname, '../..');
let api: FakeApiServer;
let ds: Datastore;
let kubeconfig: string;

beforeAll(async () => {
  api = await startFakeApiServer();
  kubeconfig = writeKubeconfig(api.dir, api);
  ds = await openDatastore({ datastore_type: 'kubernetes', kubernetes: { kubeconfig }, timeoutMs: 5000 });
});
afterAll(async () => {
  await ds?.close();
  await api?.stop();
});

async function waitFor(what: string, fn: () => boolean | Promise<boolean>, timeoutMs = 20_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await fn())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

const npSpec = {
  podSelector: { matchLabels: { app: 'db' } },
  ingress: [{ from: [{ namespaceSelector: { matchLabels: { team: 'a' } } }], ports: [{ port: 'pg' }] }],
};

describe('derived kinds on the kubernetes datastore', { timeout: 120_000 }, () => {
  it('get and list NetworkPolicies and profiles under the mirror names, same content as the conversion', async () => {
    api.put('/api/v1/namespaces/d1', { metadata: { name: 'd1', labels: { team: 'a' } } });
    api.put('/api/v1/namespaces/d1/serviceaccounts/sa1', { metadata: { name: 'sa1', labels: { x: 'y' } } });
    const stored = api.put('/apis/networking.k8s.io/v1/namespaces/d1/networkpolicies/db', {
      metadata: { name: 'db' },
      spec: npSpec,
    });
    // Our own CRD objects still list beside them.
    await ds.create({
      apiVersion: API_VERSION,
      kind: 'NetworkPolicy',
      metadata: { name: 'own', namespace: 'd1' },
      spec: { selector: 'all()' },
    });

    const np = await ds.get('NetworkPolicy', 'knp.default.db', 'd1');
    const expected = convertK8sNetworkPolicy(stored as never);
    expect(np.spec).toEqual(expected.spec);
    expect(np.metadata.resourceVersion).toBe(stored.metadata.resourceVersion);
    const all = await ds.list('NetworkPolicy', { namespace: 'd1' });
    expect(all.items.map((i) => i.metadata.name).sort()).toEqual(['knp.default.db', 'own']);

    const kns = await ds.get('Profile', 'kns.d1');
    expect(kns.spec.labelsToApply).toMatchObject({ 'pcns.team': 'a', 'netplugin.org/name': 'd1' });
    expect((await ds.get('Profile', 'ksa.d1.sa1')).spec.labelsToApply).toEqual({ 'pcsa.x': 'y' });
    const profiles = (await ds.list('Profile')).items.map((p) => p.metadata.name);
    expect(profiles).toEqual(expect.arrayContaining(['kns.d1', 'kns.default', 'kns.kube-system', 'ksa.d1.sa1']));

    await expect(ds.get('NetworkPolicy', 'knp.default.nope', 'd1')).rejects.toSatisfy((e) =>
      DatastoreError.is(e, 'NotFound'),
    );
    await expect(ds.get('Profile', 'ksa.d1.nope')).rejects.toSatisfy((e) => DatastoreError.is(e, 'NotFound'));
  });

  it('a NetworkPolicy that cannot be converted is named and skipped: a DELETED of what it derived, only its get fails', async () => {
    api.put('/api/v1/namespaces/d3', { metadata: { name: 'd3' } });
    const ok = api.put('/apis/networking.k8s.io/v1/namespaces/d3/networkpolicies/ok', {
      metadata: { name: 'ok' },
      spec: npSpec,
    });
    const prev = api.put('/apis/networking.k8s.io/v1/namespaces/d3/networkpolicies/turns-bad', {
      metadata: { name: 'turns-bad' },
      spec: npSpec,
    });
    const events: Array<WatchEvent<'NetworkPolicy'>> = [];
    const w = ds.watch('NetworkPolicy', { revision: prev.metadata.resourceVersion, namespace: 'd3' }, (ev) =>
      events.push(ev),
    );
    try {
      // What the API server would refuse (a stand-in stores it): an operator outside the four.
      api.put('/apis/networking.k8s.io/v1/namespaces/d3/networkpolicies/turns-bad', {
        metadata: { name: 'turns-bad' },
        spec: { podSelector: { matchExpressions: [{ key: 'app', operator: 'Near', values: ['db'] }] } },
      });
      await waitFor('the DELETED of the policy that became malformed', () =>
        events.some((e) => e.type === 'DELETED' && !!e.invalid),
      );
      expect(events.filter((e) => e.type === 'ERROR')).toEqual([]);
      const d = events.find((e) => e.type === 'DELETED')!;
      expect(d.object.metadata.name).toBe('knp.default.turns-bad');
      const l = await ds.list('NetworkPolicy', { namespace: 'd3' });
      expect(l.items.map((i) => i.metadata.name)).toEqual(['knp.default.ok']);
      expect(l.invalid).toEqual([
        expect.objectContaining({
          kind: 'NetworkPolicy',
          name: 'knp.default.turns-bad',
          namespace: 'd3',
          reason: expect.stringContaining('"Near"'),
        }),
      ]);
      const e = (await ds
        .get('NetworkPolicy', 'knp.default.turns-bad', 'd3')
        .catch((x: unknown) => x)) as DatastoreError;
      expect(e.kind).toBe('Invalid');
      expect(e.message).toContain('/networkpolicies/turns-bad');
      expect((await ds.get('NetworkPolicy', 'knp.default.ok', 'd3')).metadata.resourceVersion).toBe(
        ok.metadata.resourceVersion,
      );
    } finally {
      w.stop();
    }
  });

  it('refuses writes to derived objects, naming the Kubernetes object to change', async () => {
    const kns = await ds.get('Profile', 'kns.d1');
    await expect(ds.update(kns)).rejects.toThrow('derived from the Namespace d1 and is read-only');
    await expect(ds.delete('NetworkPolicy', 'knp.default.db', { namespace: 'd1' })).rejects.toThrow(
      'the Kubernetes NetworkPolicy d1/db',
    );
    await expect(
      ds.create({ apiVersion: API_VERSION, kind: 'Profile', metadata: { name: 'ksa.d1.new' }, spec: {} }),
    ).rejects.toThrow('ServiceAccount d1/new');
    expect(await ds.get('NetworkPolicy', 'knp.default.db', 'd1')).toBeDefined();
  });

  it('watches follow the Kubernetes objects; a too-old revision ends the watch with an error', async () => {
    const { revision } = await ds.list('NetworkPolicy');
    const evs: Array<WatchEvent<'NetworkPolicy'>> = [];
    const w = ds.watch('NetworkPolicy', { revision }, (e) => evs.push(e));
    const pevs: Array<WatchEvent<'Profile'>> = [];
    const pw = ds.watch('Profile', { revision: (await ds.list('Profile')).revision }, (e) => pevs.push(e));
    try {
      api.put('/apis/networking.k8s.io/v1/namespaces/d1/networkpolicies/w', {
        metadata: { name: 'w' },
        spec: { podSelector: {} },
      });
      api.put('/api/v1/namespaces/d1', { metadata: { name: 'd1', labels: { team: 'b' } } });
      await waitFor('ADDED knp.default.w', () =>
        evs.some((e) => e.type === 'ADDED' && e.object.metadata.name === 'knp.default.w'),
      );
      await fetch(`${api.url}/apis/networking.k8s.io/v1/namespaces/d1/networkpolicies/w`, { method: 'DELETE' });
      await waitFor('DELETED knp.default.w', () =>
        evs.some((e) => e.type === 'DELETED' && e.object.metadata.name === 'knp.default.w'),
      );
      await waitFor('MODIFIED kns.d1', () =>
        pevs.some(
          (e) =>
            e.type === 'MODIFIED' &&
            e.object.metadata.name === 'kns.d1' &&
            e.object.spec.labelsToApply?.['pcns.team'] === 'b',
        ),
      );
    } finally {
      w.stop();
      pw.stop();
    }
    api.compact();
    const errs: Array<WatchEvent<'NetworkPolicy'>> = [];
    const old = ds.watch('NetworkPolicy', { revision: '1' }, (e) => errs.push(e));
    await waitFor('410 reported', () => errs.some((e) => e.type === 'ERROR'));
    old.stop();
    expect(
      errs.find((e) => e.type === 'ERROR')!.type === 'ERROR' &&
        (errs.find((e) => e.type === 'ERROR') as { error: Error }).error.message,
    ).toContain('re-list');
  });

  it('netplugin-kube-controllers on this datastore runs only the node controller', async () => {
    api.put('/api/v1/nodes/k1', { metadata: { name: 'k1', labels: { zone: 'z' } } });
    const port = await freePort();
    const p = spawn(
      process.execPath,
      [
        join(root, 'dist/netplugin-kube-controllers.mjs'),
        '--health-addr',
        `127.0.0.1:${port}`,
        '--lease-duration',
        '3s',
      ],
      {
        env: {
          PATH: process.env.PATH ?? '/usr/bin:/bin',
          DATASTORE_TYPE: 'kubernetes',
          KUBECONFIG: kubeconfig,
          POD_NAMESPACE: 'kube-system',
        },
        stdio: ['ignore', 'ignore', 'pipe'],
      },
    );
    let log = '';
    p.stderr!.on('data', (d) => (log += d));
    const exited = new Promise((r) => p.once('exit', r));
    try {
      await waitFor('Node k1 with labels', async () => {
        try {
          return (await ds.get('Node', 'k1')).metadata.labels?.zone === 'z';
        } catch {
          return false;
        }
      });
      expect(log).toContain('policy controller not needed with the kubernetes datastore');
      expect(log).toContain('started the node controller');
      expect((await ds.get('KubeControllersConfiguration', 'default')).spec).toMatchObject({
        controllers: { node: { leakGracePeriod: '15m' } },
      });
    } finally {
      p.kill('SIGTERM');
      await exited;
    }
    expect(p.exitCode).toBe(0);
  });
});
