// Issue 8, resident agent: pods of this node and all namespaces come from
// watch-fed caches (src/k8s/cache.ts). Checked against the fake API server
// with a request-counting wrapper around the real client: a cache hit sends
// no GET; a miss (pod created a moment ago, pod recreated with another uid,
// pod being deleted) reads through; watch changes, 410 Gone and an API server
// restart (a TCP proxy that goes away and comes back on the same port) end in
// a fresh, synced cache.
import { createServer, connect, type Server, type Socket } from 'node:net';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { startFakeApiServer, type FakeApiServer } from '../support/fake-apiserver.js';
import { createKubeClient, type KubeClient, type KubePod } from '../../src/k8s/client.js';
import { CachingPodSource } from '../../src/k8s/cache.js';
import { createPluginRuntime } from '../../src/plugins/main/runtime.js';

const NODE = `cache-node-${process.pid}`;
let server: FakeApiServer;
let proxy: Proxy;
let base: KubeClient;
const caches: CachingPodSource[] = [];

/**
 * A TCP forwarder in front of the API server: close() is the server going away, open() it coming back on the same port.
 */
interface Proxy {
  url: string;
  close(): Promise<void>;
  open(): Promise<void>;
}
async function startProxy(target: URL): Promise<Proxy> {
  const sockets = new Set<Socket>();
  let srv: Server;
  let port = 0;
  const open = async () => {
    srv = createServer((c) => {
      const up = connect(Number(target.port), target.hostname);
      sockets.add(c).add(up);
      const drop = () => {
        c.destroy();
        up.destroy();
        sockets.delete(c);
        sockets.delete(up);
      };
      c.on('error', drop).on('close', drop);
      up.on('error', drop).on('close', drop);
      c.pipe(up).pipe(c);
    });
    await new Promise<void>((resolve) => srv.listen(port, '127.0.0.1', resolve));
    port = (srv.address() as { port: number }).port;
  };
  await open();
  return {
    url: `http://127.0.0.1:${port}`,
    open,
    close: async () => {
      const closed = new Promise<void>((resolve) => srv.close(() => resolve()));
      for (const s of sockets) s.destroy();
      sockets.clear();
      await closed;
    },
  };
}

interface Counts {
  getPod: number;
  getNamespace: number;
  podLists: number;
  nsLists: number;
}
/** The real client, counting the calls that reach the API server; `onWatch` runs before a watch is opened. */
function counted(inner: KubeClient, onWatch?: (path: string) => void): { client: KubeClient; n: Counts } {
  const n: Counts = { getPod: 0, getNamespace: 0, podLists: 0, nsLists: 0 };
  const client: KubeClient = {
    ...inner,
    server: inner.server,
    getPod: (ns, name, o) => (n.getPod++, inner.getPod(ns, name, o)),
    getNamespace: (name, o) => (n.getNamespace++, inner.getNamespace(name, o)),
    request: (m, p, b, o) => {
      if (m === 'GET' && p === '/api/v1/pods') n.podLists++;
      if (m === 'GET' && p === '/api/v1/namespaces') n.nsLists++;
      return inner.request(m, p, b, o);
    },
    watch: (p, q, ev, end) => {
      onWatch?.(p);
      return inner.watch(p, q, ev, end);
    },
  };
  return { client, n };
}

function cacheOver(client: KubeClient): CachingPodSource {
  const c = new CachingPodSource(client, { nodeName: NODE, backoffMs: 50, maxBackoffMs: 400 });
  caches.push(c);
  return c.start();
}

async function until(what: string, cond: () => boolean | Promise<boolean>): Promise<void> {
  const deadline = Date.now() + 15_000;
  while (!(await cond())) {
    if (Date.now() > deadline) throw new Error(`gave up waiting for: ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** True when this read was answered without a GET. */
async function servedFromCache(n: Counts, read: () => Promise<unknown>): Promise<boolean> {
  const before = n.getPod + n.getNamespace;
  await read();
  return n.getPod + n.getNamespace === before;
}

let seq = 0;
function uniq(prefix: string): string {
  return `${prefix}-${process.pid}-${++seq}`;
}
function putNs(name: string, annotations: Record<string, string> = {}): void {
  server.put(`/api/v1/namespaces/${name}`, { apiVersion: 'v1', kind: 'Namespace', metadata: { name, annotations } });
}
function putPod(
  ns: string,
  name: string,
  o: { uid?: string; node?: string; annotations?: Record<string, string>; deletionTimestamp?: string } = {},
): void {
  server.put(`/api/v1/namespaces/${ns}/pods/${name}`, {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: {
      name,
      namespace: ns,
      uid: o.uid ?? `uid-${name}`,
      annotations: o.annotations ?? {},
      ...(o.deletionTimestamp ? { deletionTimestamp: o.deletionTimestamp } : {}),
    },
    spec: { nodeName: o.node ?? NODE, containers: [{ name: 'main' }] },
  });
}

beforeAll(async () => {
  server = await startFakeApiServer();
  proxy = await startProxy(new URL(server.url));
  base = await createKubeClient({ k8s_api_root: proxy.url, timeoutMs: 3000 });
});
/** Runtimes a test built: closed after it (their pod caches' watches stop). */
const runtimes: Array<{ close(): Promise<void> }> = [];
afterEach(async () => {
  for (const c of caches.splice(0)) c.stop();
  await Promise.all(runtimes.splice(0).map((r) => r.close()));
});
afterAll(async () => {
  base?.close();
  await proxy?.close().catch(() => undefined);
  await server?.stop();
});

describe('CachingPodSource', () => {
  it('serves a synced pod and namespace without a GET; pods of other nodes read through', async () => {
    const ns = uniq('shop');
    putNs(ns, { 'cni.netplugin.org/ipv4pools': '["p1"]' });
    putPod(ns, 'web', { annotations: { 'cni.netplugin.org/ipAddrs': '["10.1.2.3"]' } });
    putPod(ns, 'elsewhere', { node: 'other-node' });
    const { client, n } = counted(base);
    const cache = cacheOver(client);
    await cache.whenSynced();

    const pod = await cache.getPod(ns, 'web');
    expect(pod.metadata.annotations).toEqual({ 'cni.netplugin.org/ipAddrs': '["10.1.2.3"]' });
    expect(pod.metadata.uid).toBe('uid-web');
    expect((await cache.forPod('uid-web').getPod(ns, 'web')).metadata.name).toBe('web');
    expect((await cache.getNamespace(ns)).metadata.annotations).toEqual({ 'cni.netplugin.org/ipv4pools': '["p1"]' });
    expect(n).toMatchObject({ getPod: 0, getNamespace: 0 });

    // Not watched (another node): read from the API, and not kept.
    expect((await cache.getPod(ns, 'elsewhere')).spec?.nodeName).toBe('other-node');
    await cache.getPod(ns, 'elsewhere');
    expect(n.getPod).toBe(2);
  });

  it('a pod created after sync is found at once (read-through), then served from the watch', async () => {
    const ns = uniq('fresh');
    putNs(ns);
    const { client, n } = counted(base);
    const cache = cacheOver(client);
    await cache.whenSynced();

    const name = uniq('just-created');
    // No I/O between the write and the read: the watch cannot have delivered it yet.
    putPod(ns, name, { annotations: { a: '1' } });
    const pod = await cache.getPod(ns, name);
    expect(pod.metadata.annotations).toEqual({ a: '1' });
    expect(n.getPod).toBe(1);

    const written = server.revision();
    await until('the watch delivers the pod', () => Number(cache.revisions.pods) >= written);
    expect(await servedFromCache(n, () => cache.getPod(ns, name))).toBe(true);

    // Deleted: once the watch says so, the cache no longer answers for it.
    await client.request('DELETE', `/api/v1/namespaces/${ns}/pods/${name}`);
    await until('the deletion arrives', () =>
      cache.getPod(ns, name).then(
        () => false,
        (e: { kind?: string }) => e.kind === 'NotFound',
      ),
    );
  });

  it('a pod recreated with another uid (K8S_POD_UID) is read through; so is a pod being deleted', async () => {
    const ns = uniq('sts');
    putNs(ns);
    putPod(ns, 'db-0', { uid: 'uid-old', annotations: { 'cni.netplugin.org/ipAddrs': '["10.0.0.1"]' } });
    const { client, n } = counted(base);
    const cache = cacheOver(client);
    await cache.whenSynced();
    expect((await cache.forPod('uid-old').getPod(ns, 'db-0')).metadata.uid).toBe('uid-old');
    expect(n.getPod).toBe(0);

    // Deleted and recreated: the cache still holds the old instance when ADD for the new one asks.
    putPod(ns, 'db-0', { uid: 'uid-new', annotations: { 'cni.netplugin.org/ipAddrs': '["10.0.0.2"]' } });
    const pod = await cache.forPod('uid-new').getPod(ns, 'db-0');
    expect(pod.metadata.uid).toBe('uid-new');
    expect(pod.metadata.annotations).toEqual({ 'cni.netplugin.org/ipAddrs': '["10.0.0.2"]' });
    expect(n.getPod).toBe(1);
    // The read-through result was newer than the watch's view, so it is kept: no second GET.
    expect((await cache.forPod('uid-new').getPod(ns, 'db-0')).metadata.uid).toBe('uid-new');
    expect(n.getPod).toBe(1);

    // A terminating pod is the instance about to be replaced: never served from the cache.
    const name = uniq('term');
    putPod(ns, name, { deletionTimestamp: new Date().toISOString() });
    const written = server.revision();
    await until('the watch delivers the terminating pod', () => Number(cache.revisions.pods) >= written);
    expect(await servedFromCache(n, () => cache.getPod(ns, name))).toBe(false);
    expect(((await cache.forPod(`uid-${name}`).getPod(ns, name)) as KubePod).metadata.deletionTimestamp).toBeTruthy();
  });

  it('a read-through answer older than the watch (a lagging API server) does not resurrect a deleted pod', async () => {
    const ns = uniq('ghost');
    putNs(ns);
    putPod(ns, 'ghost');
    const stale = await base.getPod(ns, 'ghost');
    const { client, n } = counted(base);
    // What a replica that has not seen the deletion yet would answer.
    const lagging: KubeClient = {
      ...client,
      getPod: async (pns, name, o) =>
        pns === ns && name === 'ghost' ? (n.getPod++, structuredClone(stale)) : client.getPod(pns, name, o),
    };
    const cache = cacheOver(lagging);
    await cache.whenSynced();
    await client.request('DELETE', `/api/v1/namespaces/${ns}/pods/ghost`);
    const written = server.revision();
    await until('the watch applies the deletion', () => Number(cache.revisions.pods) >= written);

    expect(await servedFromCache(n, () => cache.getPod(ns, 'ghost'))).toBe(false);
    expect(await servedFromCache(n, () => cache.getPod(ns, 'ghost'))).toBe(false);
  });

  it('a namespace annotation change is served after its watch event, without a GET', async () => {
    const ns = uniq('anno');
    putNs(ns, { 'cni.netplugin.org/ipv4pools': '["before"]' });
    const { client, n } = counted(base);
    const cache = cacheOver(client);
    await cache.whenSynced();
    expect((await cache.getNamespace(ns)).metadata.annotations).toEqual({
      'cni.netplugin.org/ipv4pools': '["before"]',
    });

    putNs(ns, { 'cni.netplugin.org/ipv4pools': '["after"]' });
    await until(
      'the namespace change arrives',
      async () => (await cache.getNamespace(ns)).metadata.annotations?.['cni.netplugin.org/ipv4pools'] === '["after"]',
    );
    expect(n.getNamespace).toBe(0);
    expect(n.nsLists).toBe(1);
  });

  it('410 Gone on the watch: re-lists and serves what changed meanwhile', async () => {
    const ns = uniq('gone');
    putNs(ns);
    const late = uniq('late');
    let armed = true;
    // Between the LIST and its WATCH the history is compacted past the list's
    // resourceVersion, with a pod written in that gap: the watch gets 410.
    const { client, n } = counted(base, (path) => {
      if (path !== '/api/v1/pods' || !armed) return;
      armed = false;
      putPod(ns, late);
      server.compact();
    });
    const cache = cacheOver(client);
    await until('the pods cache re-listed and synced', () => n.podLists >= 2 && cache.synced);
    const pod = await cache.getPod(ns, late);
    expect(pod.metadata.name).toBe(late);
    expect(n.getPod).toBe(0);
  });

  it('API server restart: reads go to the API while it is away, then the cache re-lists and catches up', async () => {
    const ns = uniq('restart');
    putNs(ns, { v: '1' });
    putPod(ns, 'app', { annotations: { v: '1' } });
    const { client, n } = counted(base);
    const cache = cacheOver(client);
    await cache.whenSynced();
    expect((await cache.getPod(ns, 'app')).metadata.annotations).toEqual({ v: '1' });
    expect(n.getPod).toBe(0);

    await proxy.close();
    try {
      await until('the cache notices the server is gone', () => !cache.synced);
      // Unsynced: no stale answer; the direct read fails like the API does.
      await expect(cache.getPod(ns, 'app')).rejects.toMatchObject({ kind: 'Unavailable' });
      putPod(ns, 'app', { annotations: { v: '2' } });
      putNs(ns, { v: '2' });
      putPod(ns, 'born-while-away');
    } finally {
      await proxy.open();
    }
    await cache.whenSynced();
    const gets = n.getPod;
    expect((await cache.getPod(ns, 'app')).metadata.annotations).toEqual({ v: '2' });
    expect((await cache.getPod(ns, 'born-while-away')).metadata.name).toBe('born-while-away');
    expect((await cache.getNamespace(ns)).metadata.annotations).toEqual({ v: '2' });
    expect(n.getPod).toBe(gets);
    expect(n.podLists).toBeGreaterThanOrEqual(2);
  });
});

describe("the runtime's podSource (the plugin seam)", () => {
  const conf = () => ({ kubernetes: { k8s_api_root: proxy.url } });

  it("is the API client itself in the plain runtime; in a runtime with podCache (the agent's), a cache bound to the pod uid", async () => {
    const ns = uniq('seam');
    putNs(ns);
    putPod(ns, 'p');
    const { client, n } = counted(base);
    expect(await createPluginRuntime().podSource(conf(), client, NODE, 'uid-p')).toBe(client);

    const agent = createPluginRuntime({
      podCache: async (kube, node) => new CachingPodSource(kube, { nodeName: node }).start(),
    });
    runtimes.push(agent);
    const src = await agent.podSource(conf(), client, NODE, 'uid-p');
    expect(src).not.toBe(client);
    await until('the agent cache syncs', () => servedFromCache(n, () => src.getPod(ns, 'p')));
    const before = n.getPod;
    expect(((await src.getPod(ns, 'p')) as KubePod).metadata.uid).toBe('uid-p');
    expect(n.getPod).toBe(before);
    // Same pod name, the runtime says another uid: read through.
    await (await agent.podSource(conf(), client, NODE, 'uid-other')).getPod(ns, 'p');
    expect(n.getPod).toBe(before + 1);
  });
});
