// The Kubernetes API backend against the fake API server over real HTTPS:
// conformance, endpoints derived from pods, auth forms and error classes.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { startFakeApiServer, writeKubeconfig, type FakeApiServer } from '../support/fake-apiserver.js';
import { openDatastore } from '../../src/datastore/index.js';
import { createKubeClient } from '../../src/k8s/client.js';
import { ENDPOINT_ANNOTATIONS as WEP_ANNOTATIONS } from '../../src/model/annotations.js';
import { workloadEndpointName } from '../../src/model/names.js';
import type { DatastoreError } from '../../src/errors.js';
import { API_VERSION } from '../../src/model/resources.js';
import type { Datastore, WatchEvent } from '../../src/datastore/types.js';
import { datastoreConformance } from './datastore-conformance.js';
import { freePort } from '../support/etcd.js';

const TOKEN = 'netplugin-test-token';

function addPod(
  server: FakeApiServer,
  ns: string,
  name: string,
  node: string,
  extra: { labels?: Record<string, string>; spec?: Record<string, unknown>; generateName?: string } = {},
) {
  server.put(`/api/v1/namespaces/${ns}`, { metadata: { name: ns } });
  return server.put(`/api/v1/namespaces/${ns}/pods/${name}`, {
    metadata: { name, labels: extra.labels, ...(extra.generateName ? { generateName: extra.generateName } : {}) },
    spec: { nodeName: node, containers: [{ name: 'c', image: 'x' }], ...extra.spec },
  });
}

datastoreConformance(
  'kubernetes (fake API server, HTTPS + token)',
  async () => {
    const server = await startFakeApiServer({ tls: true, auth: { tokens: [TOKEN] } });
    const kubeconfig = writeKubeconfig(server.dir, server, { token: TOKEN });
    const ds = await openDatastore({ datastore_type: 'kubernetes', kubernetes: { kubeconfig }, timeoutMs: 5000 });
    return {
      ds,
      async preparePod(ns, pod, node, labels) {
        addPod(server, ns, pod, node, { labels });
      },
      async putMalformed(what) {
        if ('pool' in what) {
          server.put(`/apis/netplugin.org/v3/ippools/${what.pool}`, {
            apiVersion: API_VERSION,
            kind: 'IPPool',
            metadata: { name: what.pool },
            spec: { cidr: 42 },
          });
          return what.pool;
        }
        server.put(`/api/v1/namespaces/${what.namespace}`, { metadata: { name: what.namespace } });
        server.put(`/api/v1/namespaces/${what.namespace}/pods/${what.pod}`, {
          metadata: {
            name: what.pod,
            annotations: { [WEP_ANNOTATIONS.containerID]: 'c', [WEP_ANNOTATIONS.podIPs]: 'not-an-address' },
          },
          spec: { nodeName: what.node, containers: [{ name: 'c', image: 'x' }] },
        });
        return workloadEndpointName(what.node, 'k8s', what.pod, 'eth0');
      },
      async makeUnresponsive() {
        server.stall(true);
        return async () => server.stall(false);
      },
      async cleanup() {
        await ds.close();
        await server.stop();
      },
    };
  },
  { deadlines: true, malformed: true },
);

describe('kubernetes backend specifics', () => {
  let server: FakeApiServer;
  let ds: Datastore;
  let kubeconfig: string;
  beforeAll(async () => {
    server = await startFakeApiServer({
      tls: true,
      auth: { tokens: [TOKEN], clientCerts: true },
      forbiddenTokens: ['limited'],
      historySize: 50,
    });
    kubeconfig = writeKubeconfig(server.dir, server, { token: TOKEN });
    ds = await openDatastore({ datastore_type: 'kubernetes', kubernetes: { kubeconfig }, timeoutMs: 3000 });
  });
  afterAll(async () => {
    await ds?.close();
    await server?.stop();
  });

  it('derives a WorkloadEndpoint from the pod and stores it as pod annotations', async () => {
    addPod(server, 'shop', 'cart-7d9f-x2', 'worker-1', {
      labels: { app: 'cart' },
      generateName: 'cart-7d9f-',
      spec: {
        serviceAccountName: 'cart-sa',
        containers: [
          {
            name: 'c',
            ports: [
              { name: 'http', containerPort: 8080, protocol: 'TCP' },
              { containerPort: 53, protocol: 'UDP', hostPort: 5353 },
            ],
          },
        ],
      },
    });
    const name = workloadEndpointName('worker-1', 'k8s', 'cart-7d9f-x2', 'eth0');
    expect(name).toBe('worker--1-k8s-cart--7d9f--x2-eth0');
    await ds.create({
      apiVersion: API_VERSION,
      kind: 'WorkloadEndpoint',
      metadata: { name, namespace: 'shop' },
      spec: {
        orchestrator: 'k8s',
        node: 'worker-1',
        containerID: 'abc123',
        pod: 'cart-7d9f-x2',
        endpoint: 'eth0',
        ipNetworks: ['10.0.0.7/32', 'fd00::7/128'],
        interfaceName: 'np0123456789a',
        mac: 'ee:ee:ee:ee:ee:ee',
        ipNATs: [{ internalIP: '10.0.0.7', externalIP: '192.0.2.7' }],
      },
    });
    const client = await createKubeClient({ kubeconfig });
    try {
      const pod = await client.getPod('shop', 'cart-7d9f-x2');
      expect(pod.metadata.annotations).toMatchObject({
        [WEP_ANNOTATIONS.containerID]: 'abc123',
        [WEP_ANNOTATIONS.podIP]: '10.0.0.7/32',
        [WEP_ANNOTATIONS.podIPs]: '10.0.0.7/32,fd00::7/128',
        [WEP_ANNOTATIONS.interfaceName]: 'np0123456789a',
        [WEP_ANNOTATIONS.mac]: 'ee:ee:ee:ee:ee:ee',
      });
      const wep = await ds.get('WorkloadEndpoint', name, 'shop');
      expect(wep.metadata.labels).toEqual({
        app: 'cart',
        'netplugin.org/namespace': 'shop',
        'netplugin.org/orchestrator': 'k8s',
        'netplugin.org/serviceaccount': 'cart-sa',
      });
      expect(wep.metadata.resourceVersion).toBe(pod.metadata.resourceVersion);
      expect(wep.spec).toEqual({
        orchestrator: 'k8s',
        node: 'worker-1',
        containerID: 'abc123',
        pod: 'cart-7d9f-x2',
        endpoint: 'eth0',
        serviceAccountName: 'cart-sa',
        ipNetworks: ['10.0.0.7/32', 'fd00::7/128'],
        profiles: ['kns.shop', 'ksa.shop.cart-sa'],
        interfaceName: 'np0123456789a',
        mac: 'ee:ee:ee:ee:ee:ee',
        ipNATs: [{ internalIP: '10.0.0.7', externalIP: '192.0.2.7' }],
        // Only named ports: policy refers to ports by name.
        ports: [{ name: 'http', protocol: 'TCP', port: 8080 }],
        generateName: 'cart-7d9f-',
      });
      // A label selector filters on the pod's labels.
      expect(
        (await ds.list('WorkloadEndpoint', { labelSelector: "app == 'cart'" })).items.map((w) => w.metadata.name),
      ).toEqual([name]);
      expect((await ds.list('WorkloadEndpoint', { labelSelector: "app == 'other'" })).items).toEqual([]);
      // Deleting the endpoint removes only our annotations; the pod stays.
      await ds.delete('WorkloadEndpoint', name, { namespace: 'shop' });
      const after = await client.getPod('shop', 'cart-7d9f-x2');
      expect(Object.keys(after.metadata.annotations ?? {}).filter((k) => k.startsWith('cni.netplugin.org/'))).toEqual(
        [],
      );
    } finally {
      client.close();
    }
  });

  it('refuses endpoints whose pod is missing or elsewhere', async () => {
    const spec = {
      orchestrator: 'k8s',
      node: 'n1',
      containerID: 'c',
      endpoint: 'eth0',
      ipNetworks: [],
      interfaceName: 'x',
    };
    const e = (await ds
      .create({
        apiVersion: API_VERSION,
        kind: 'WorkloadEndpoint',
        metadata: { name: workloadEndpointName('n1', 'k8s', 'ghost', 'eth0'), namespace: 'default' },
        spec,
      })
      .catch((x: unknown) => x)) as DatastoreError;
    expect(e.kind).toBe('NotFound');
    expect(e.message).toContain('pod default/ghost not found');
    addPod(server, 'default', 'elsewhere', 'n2');
    const e2 = (await ds
      .create({
        apiVersion: API_VERSION,
        kind: 'WorkloadEndpoint',
        metadata: { name: workloadEndpointName('n1', 'k8s', 'elsewhere', 'eth0'), namespace: 'default' },
        spec,
      })
      .catch((x: unknown) => x)) as DatastoreError;
    expect(e2.kind).toBe('Invalid');
    expect(e2.message).toContain('on node "n2"');
    await expect(ds.get('WorkloadEndpoint', 'not-a-wep-name', 'default')).rejects.toMatchObject({ kind: 'Invalid' });
  });

  it('watches endpoints as pods gain and lose their annotations', async () => {
    addPod(server, 'default', 'watched', 'n1');
    const start = (await ds.list('WorkloadEndpoint', {})).revision;
    const events: Array<WatchEvent<'WorkloadEndpoint'>> = [];
    const w = ds.watch('WorkloadEndpoint', { revision: start }, (ev) => events.push(ev));
    try {
      const name = workloadEndpointName('n1', 'k8s', 'watched', 'eth0');
      const c = await ds.create({
        apiVersion: API_VERSION,
        kind: 'WorkloadEndpoint',
        metadata: { name, namespace: 'default' },
        spec: {
          orchestrator: 'k8s',
          node: 'n1',
          containerID: 'w1',
          endpoint: 'eth0',
          ipNetworks: ['10.0.0.9/32'],
          interfaceName: 'x',
        },
      });
      const u = await ds.update({ ...c, spec: { ...c.spec, ipNetworks: ['10.0.0.10/32'] } });
      await ds.delete('WorkloadEndpoint', name, { namespace: 'default', revision: u.metadata.resourceVersion });
      for (let i = 0; i < 100 && events.length < 3; i++) await new Promise((r) => setTimeout(r, 50));
      expect(events.map((e) => e.type)).toEqual(['ADDED', 'MODIFIED', 'DELETED']);
      expect((events[2] as { object: { spec: { ipNetworks: string[] } } }).object.spec.ipNetworks).toEqual([
        '10.0.0.10/32',
      ]);
    } finally {
      w.stop();
    }
  });

  it('sends an ERROR event when the watch revision is too old (410)', async () => {
    const a = await ds.create({
      apiVersion: API_VERSION,
      kind: 'IPPool',
      metadata: { name: 'old-watch' },
      spec: { cidr: '10.0.0.0/16' },
    });
    server.compact();
    const events: Array<WatchEvent<'IPPool'>> = [];
    const w = ds.watch('IPPool', { revision: String(Number(a.metadata.resourceVersion) - 1) }, (ev) => events.push(ev));
    for (let i = 0; i < 100 && !events.length; i++) await new Promise((r) => setTimeout(r, 50));
    w.stop();
    expect(events[0]?.type).toBe('ERROR');
    expect((events[0] as { error: Error }).error.message).toMatch(/too old \(410 Gone\); re-list/);
  });

  it('reports corrupt custom resources as Invalid naming the API path', async () => {
    server.put('/apis/netplugin.org/v3/ipamblocks/10.9.9.0-26', {
      apiVersion: 'netplugin.org/v3',
      kind: 'IPAMBlock',
      metadata: { name: '10.9.9.0-26' },
      spec: { cidr: '10.9.9.0/26', allocations: 'oops' },
    });
    const e = (await ds.get('IPAMBlock', '10.9.9.0-26').catch((x: unknown) => x)) as DatastoreError;
    expect(e.kind).toBe('Invalid');
    expect(e.message).toContain('/apis/netplugin.org/v3/ipamblocks/10.9.9.0-26');
    expect(e.message).toContain('spec.allocations');
  });

  it('classifies throttling, server errors, missing and refused credentials', async () => {
    server.failNext(1, 429);
    const t = (await ds.get('IPPool', 'x').catch((x: unknown) => x)) as DatastoreError;
    expect(t.kind).toBe('Unavailable');
    expect(t.message).toMatch(/429 TooManyRequests.*throttling/);
    server.failNext(1, 503);
    await expect(ds.list('IPPool')).rejects.toMatchObject({ kind: 'Unavailable' });

    const anon = await openDatastore({
      datastore_type: 'kubernetes',
      kubernetes: { kubeconfig: writeKubeconfig(server.dir, server, {}) },
    });
    const u = (await anon.get('IPPool', 'x').catch((x: unknown) => x)) as DatastoreError;
    await anon.close();
    expect(u.kind).toBe('Unauthorized');
    expect(u.message).toContain('401 Unauthorized');

    const limited = await openDatastore({
      datastore_type: 'kubernetes',
      kubernetes: { kubeconfig: writeKubeconfig(server.dir, server, { token: 'limited' }) },
    });
    const f = (await limited
      .list('WorkloadEndpoint', { namespace: 'default' })
      .catch((x: unknown) => x)) as DatastoreError;
    await limited.close();
    expect(f.kind).toBe('Unauthorized');
    expect(f.message).toContain('cannot list resource "pods" in API group "" in the namespace "default"');
  });

  it('supports client certificates (inline and files), tokenFile and insecure-skip-tls-verify', async () => {
    const forms = [
      writeKubeconfig(server.dir, server, { clientCert: server.clientCert!, inline: true }),
      writeKubeconfig(server.dir, server, { clientCert: server.clientCert! }),
      (() => {
        const tf = join(server.dir, 'token');
        writeFileSync(tf, `${TOKEN}\n`);
        return writeKubeconfig(server.dir, server, { tokenFile: tf });
      })(),
      writeKubeconfig(server.dir, server, { token: TOKEN, insecure: true }),
    ];
    for (const kc of forms) {
      const c = await createKubeClient({ kubeconfig: kc });
      try {
        expect((await c.getNamespace('default')).metadata.labels).toEqual({ 'kubernetes.io/metadata.name': 'default' });
      } finally {
        c.close();
      }
    }
    const stranger = await createKubeClient({
      kubeconfig: writeKubeconfig(server.dir, server, { clientCert: server.untrustedClientCert! }),
    });
    await expect(stranger.getNode('n1')).rejects.toMatchObject({ kind: 'Unauthorized' });
    stranger.close();
  });

  it('explains a wrong CA, an unreachable server and unsupported kubeconfigs', async () => {
    const other = await startFakeApiServer({ tls: true });
    try {
      const wrongCa = await createKubeClient({
        kubeconfig: writeKubeconfig(server.dir, server, { token: TOKEN, caFile: other.caFile }),
      });
      const e = (await wrongCa.getPod('default', 'x').catch((x: unknown) => x)) as DatastoreError;
      wrongCa.close();
      expect(e.kind).toBe('Unauthorized');
      expect(e.message).toContain(
        `certificate-authority=${other.caFile} does not hold the CA that issued the server certificate`,
      );
    } finally {
      await other.stop();
    }
    const port = await freePort();
    const down = await createKubeClient({ k8s_api_root: `http://127.0.0.1:${port}` });
    const d = (await down.getPod('default', 'x').catch((x: unknown) => x)) as DatastoreError;
    down.close();
    expect(d.kind).toBe('Unavailable');
    expect(d.message).toContain(
      `Kubernetes API at http://127.0.0.1:${port} is unreachable: connection refused (ECONNREFUSED); check ` +
        `kubernetes.k8s_api_root`,
    );
    const execKc = join(server.dir, 'exec-kubeconfig');
    writeFileSync(
      execKc,
      `apiVersion: v1\nkind: Config\ncurrent-context: c\ncontexts:\n- name: c\n  context: {cluster: k, user: ` +
        `u}\nclusters:\n- name: k\n  cluster: {server: ${server.url}}\nusers:\n- name: u\n  user:\n    exec: ` +
        `{command: aws}\n`,
    );
    await expect(createKubeClient({ kubeconfig: execKc })).rejects.toThrow(
      /authenticates with exec, which the CNI plugin does not run/,
    );
    await expect(createKubeClient({ kubeconfig: '/nonexistent/kubeconfig' })).rejects.toThrow(
      /kubernetes.kubeconfig=\/nonexistent\/kubeconfig cannot be read/,
    );
    await expect(openDatastore({ datastore_type: 'kubernetes', kubernetes: {} })).rejects.toThrow(
      /set kubernetes.kubeconfig \(recommended\) or kubernetes.k8s_api_root/,
    );
  });

  it("lists one node's endpoints through a field selector: another node's pods never reach the client", async () => {
    const plain = await startFakeApiServer();
    const kds = await openDatastore({
      datastore_type: 'kubernetes',
      kubernetes: { k8s_api_root: plain.url },
      timeoutMs: 3000,
    });
    try {
      addPod(plain, 'default', 'mine', 'near');
      const name = workloadEndpointName('near', 'k8s', 'mine', 'eth0');
      await kds.create({
        apiVersion: API_VERSION,
        kind: 'WorkloadEndpoint',
        metadata: { name, namespace: 'default' },
        spec: {
          orchestrator: 'k8s',
          node: 'near',
          containerID: 'c1',
          pod: 'mine',
          endpoint: 'eth0',
          ipNetworks: ['10.0.0.8/32'],
          interfaceName: 'np1',
        },
      });
      // A pod of another node whose endpoint annotations do not parse: a
      // list that receives it names it, so a node's list that does not name
      // it was filtered by the API server.
      addPod(plain, 'default', 'theirs', 'far');
      plain.put('/api/v1/namespaces/default/pods/theirs', {
        metadata: {
          name: 'theirs',
          annotations: { [WEP_ANNOTATIONS.containerID]: 'c2', [WEP_ANNOTATIONS.podIPs]: 'not-an-address' },
        },
        spec: { nodeName: 'far', containers: [{ name: 'c', image: 'x' }] },
      });
      const all = await kds.list('WorkloadEndpoint');
      expect(all.items.map((w) => w.metadata.name)).toEqual([name]);
      expect(all.invalid?.map((o) => o.where)).toEqual(['pod default/theirs (annotations cni.netplugin.org/*)']);
      const near = await kds.list('WorkloadEndpoint', { node: 'near' });
      expect(near.items.map((w) => w.metadata.name)).toEqual([name]);
      expect(near.invalid).toBeUndefined();
    } finally {
      await kds.close();
      await plain.stop();
    }
  });

  it('reaches an API server through k8s_api_root without credentials', async () => {
    const plain = await startFakeApiServer();
    try {
      addPod(plain, 'default', 'p1', 'n1', { labels: { a: 'b' } });
      const c = await createKubeClient({ k8s_api_root: `${plain.url}/` });
      try {
        expect((await c.getPod('default', 'p1')).spec?.nodeName).toBe('n1');
        const patched = await c.patchPod('default', 'p1', { metadata: { labels: { c: 'd' } } }, 'strategic');
        expect(patched.metadata.labels).toEqual({ a: 'b', c: 'd' });
        const jp = await c.patchPod('default', 'p1', [{ op: 'remove', path: '/metadata/labels/a' }], 'json');
        expect(jp.metadata.labels).toEqual({ c: 'd' });
        await expect(c.getPod('default', 'nope')).rejects.toMatchObject({ kind: 'NotFound' });
      } finally {
        c.close();
      }
    } finally {
      await plain.stop();
    }
  });
});
