// The agent's watch-fed read cache (src/datastore/cached.ts) in front of the
// allocator, on a real etcd, with another writer changing things behind its
// back: a block filled, the pool deleted, the block's affinity moved to
// another node, datastoreReady turned off. The cache's watch is held while
// the other writer acts (its events are delivered afterwards), so the cache
// is provably stale at the next ADD: what it costs is a failed compare and a
// retry, never a duplicate address, an address from a deleted pool, an
// address in another node's block, or a write after datastoreReady=false.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { etcdStores, startEtcd, type EtcdServer } from '../support/etcd.js';
import { cachedDatastore } from '../../src/datastore/cached.js';
import { affinityName, blockName } from '../../src/model/names.js';
import { API_VERSION, type Resource } from '../../src/model/resources.js';
import type { Datastore, WatchEvent } from '../../src/datastore/types.js';
import { createIpam, type AssignRequest } from '../../src/ipam/index.js';

let etcd: EtcdServer;
const stores = etcdStores(() => etcd);
const open = () => stores.open();

beforeAll(async () => {
  etcd = await startEtcd();
  const ds = await open();
  await ds.create({
    apiVersion: API_VERSION,
    kind: 'ClusterInformation',
    metadata: { name: 'default' },
    spec: { datastoreReady: true },
  } as Resource<'ClusterInformation'>);
});
afterAll(async () => {
  await stores.closeAll();
  await etcd?.stop();
});

/** The real store, with its watch events held back while `hold()` is on (a slow watch). */
function slowWatch(ds: Datastore): Datastore & { hold(): void; release(): void } {
  let held: Array<() => void> | undefined;
  const watch: Datastore['watch'] = (kind, o, onEvent) =>
    ds.watch(kind, o, (ev: WatchEvent<typeof kind>) => {
      if (held) held.push(() => onEvent(ev));
      else onEvent(ev);
    });
  return new Proxy(ds, {
    get(target, prop, receiver) {
      if (prop === 'watch') return watch;
      if (prop === 'hold') return () => void (held ??= []);
      if (prop === 'release') {
        return () => {
          const h = held ?? [];
          held = undefined;
          for (const f of h) f();
        };
      }
      const v = Reflect.get(target, prop, receiver) as unknown;
      return typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(target) : v;
    },
  }) as Datastore & { hold(): void; release(): void };
}

async function until(what: string, fn: () => boolean | Promise<boolean>, ms = 30_000): Promise<void> {
  const end = Date.now() + ms;
  while (!(await fn())) {
    if (Date.now() > end) throw new Error(`${what}: not within ${ms} ms`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** An agent's view: the cache over a store whose watch we can slow down. */
async function agentStore(): Promise<{
  cache: Datastore & { synced?(): boolean; stats?: { hits: number; recentHits: number } };
  slow: ReturnType<typeof slowWatch>;
}> {
  const slow = slowWatch(await open());
  const cache = cachedDatastore(slow);
  stores.track(cache);
  await until('the cache is synced', () => cache.synced?.() === true);
  return { cache, slow };
}

/** A cached agent store, another writer, and a pool (blockSize 29) the cache has seen. */
async function withPool(
  name: string,
  cidr: string,
): Promise<Awaited<ReturnType<typeof agentStore>> & { other: Datastore }> {
  const store = await agentStore();
  const other = await open();
  await other.create({ apiVersion: API_VERSION, kind: 'IPPool', metadata: { name }, spec: { cidr, blockSize: 29 } });
  await until('the pool is seen', async () =>
    (await store.cache.list('IPPool')).items.some((p) => p.metadata.name === name),
  );
  return { ...store, other };
}

let seq = 0;
const request = (node: string, pool: string): AssignRequest => {
  const id = `k${++seq}x${process.pid}`;
  return {
    handleID: `net.${id}`,
    node,
    attrs: { pod: `p-${id}` },
    assignIPv4: true,
    assignIPv6: false,
    ipv4Pools: [pool],
  };
};

/** Every ordinal of every block of the store held at most once, and by a handle that exists and counts it. */
async function consistent(ds: Datastore): Promise<void> {
  const handles = new Map((await ds.list('IPAMHandle')).items.map((h) => [h.spec.handleID, h.spec.block]));
  for (const b of (await ds.list('IPAMBlock')).items) {
    const per = new Map<string, number>();
    for (const a of b.spec.allocations) {
      if (a == null) continue;
      const h = b.spec.attributes[a]!.handle_id!;
      per.set(h, (per.get(h) ?? 0) + 1);
    }
    for (const [h, n] of per) expect(handles.get(h)?.[b.spec.cidr], `handle ${h} in ${b.spec.cidr}`).toBe(n);
  }
}

/** Another writer takes every free slot of a block, with its handle (a consistent foreign allocation). */
async function fillBehind(other: Datastore, cidr: string, handleID: string): Promise<string[]> {
  const b = await other.get('IPAMBlock', blockName(cidr));
  const spec = structuredClone(b.spec);
  spec.attributes.push({ handle_id: handleID });
  const free = spec.allocations.flatMap((a, i) => (a == null ? [i] : []));
  for (const i of free) spec.allocations[i] = spec.attributes.length - 1;
  spec.unallocated = [];
  await other.txn([
    { op: 'update', res: { ...b, spec } },
    {
      op: 'create',
      res: {
        apiVersion: API_VERSION,
        kind: 'IPAMHandle',
        metadata: { name: handleID },
        spec: { handleID, block: { [cidr]: free.length } },
      },
    },
  ]);
  const base = BigInt(
    `0x${cidr
      .split('/')[0]!
      .split('.')
      .map((x) => Number(x).toString(16).padStart(2, '0'))
      .join('')}`,
  );
  return free.map((i) => {
    const v = base + BigInt(i);
    return [24n, 16n, 8n, 0n].map((s) => String((v >> s) & 255n)).join('.');
  });
}

describe('IPAM through the agent read cache (etcd)', () => {
  it('serves reads from memory once synced, and writes through its own transaction', async () => {
    const { cache, other } = await withPool('cache-hit', '10.97.0.0/26');
    const ipam = createIpam(cache, { lock: 'none', batch: true });
    const [a] = await ipam.assign(request('ch1', 'cache-hit'));
    // Our own write is readable at once, at the revision etcd gave it (no wait for the watch).
    const fromStore = await other.get('IPAMBlock', blockName(a!.block));
    const hits = cache.stats!.hits;
    expect((await cache.get('IPAMBlock', blockName(a!.block))).metadata.resourceVersion).toBe(
      fromStore.metadata.resourceVersion,
    );
    expect(cache.stats!.hits).toBe(hits + 1);
  });

  it('remembers its own handle writes for a DEL that asks (recent), and a stale one costs a failed guard and a re-read, never a wrong release', async () => {
    const { cache, other } = await withPool('cache-recent', '10.94.0.0/26');
    const ipam = createIpam(cache, { lock: 'none', batch: true });
    const r = request('cr1', 'cache-recent');
    const [a] = await ipam.assign(r);
    const h = await other.get('IPAMHandle', r.handleID);
    const before = cache.stats!.recentHits;
    // Asked with recent: answered from the ADD's own write, at the revision etcd gave it.
    expect((await cache.get('IPAMHandle', r.handleID, undefined, { recent: true })).metadata.resourceVersion).toBe(
      h.metadata.resourceVersion,
    );
    expect(cache.stats!.recentHits).toBe(before + 1);
    // Asked without: the store.
    await cache.get('IPAMHandle', r.handleID);
    expect(cache.stats!.recentHits).toBe(before + 1);
    // Another writer rewrites the handle: the memory is stale now; the release still frees the address and deletes the
    // handle.
    await other.update(h);
    expect(await ipam.releaseByHandle(r.handleID)).toEqual([a!.ip]);
    await expect(other.get('IPAMHandle', r.handleID)).rejects.toMatchObject({ kind: 'NotFound' });
    // Our delete went through: nothing is remembered any more.
    await expect(cache.get('IPAMHandle', r.handleID, undefined, { recent: true })).rejects.toMatchObject({
      kind: 'NotFound',
    });
    await consistent(other);
  });

  it('a block filled behind its back: a failed compare and a retry, never a duplicate', async () => {
    const { cache, slow, other } = await withPool('cache-blk', '10.95.0.0/26');
    const ipam = createIpam(cache, { lock: 'none', batch: true });
    const [a1] = await ipam.assign(request('cb1', 'cache-blk'));
    slow.hold();
    try {
      const taken = await fillBehind(other, a1!.block, 'net.foreign-blk');
      // The cache still shows free slots in that block: it is stale.
      expect((await cache.get('IPAMBlock', blockName(a1!.block))).spec.unallocated.length).toBeGreaterThan(0);
      const [a2] = await ipam.assign(request('cb1', 'cache-blk'));
      expect(taken).not.toContain(a2!.ip);
      expect(a2!.ip).not.toBe(a1!.ip);
      expect(a2!.block).not.toBe(a1!.block);
    } finally {
      slow.release();
    }
    await consistent(other);
  });

  it('a pool deleted behind its back gives no address', async () => {
    const { cache, slow, other } = await withPool('cache-del', '10.96.0.0/26');
    const ipam = createIpam(cache, { lock: 'none', batch: true, maxRetries: 3 });
    const [a1] = await ipam.assign(request('cd1', 'cache-del'));
    slow.hold();
    const r = request('cd1', 'cache-del');
    try {
      await other.delete('IPPool', 'cache-del');
      // Still listed by the cache, and the node's block (with room) is still there.
      expect((await cache.list('IPPool')).items.map((p) => p.metadata.name)).toContain('cache-del');
      await expect(ipam.assign(r)).rejects.toThrow();
    } finally {
      slow.release();
    }
    const block = await other.get('IPAMBlock', blockName(a1!.block));
    expect(block.spec.allocations.filter((a) => a != null)).toHaveLength(1);
    await expect(other.get('IPAMHandle', r.handleID)).rejects.toThrow(/not found/);
    // Once the watch catches up the pool is gone from the cache too, and an ADD still gets nothing from it.
    await until(
      'the delete is seen',
      async () => !(await cache.list('IPPool')).items.some((p) => p.metadata.name === 'cache-del'),
    );
    await expect(ipam.assign(request('cd1', 'cache-del'))).rejects.toThrow();
    await consistent(other);
  });

  it('an affinity moved to another node behind its back: no address in that block for this node', async () => {
    const { cache, slow, other } = await withPool('cache-aff', '10.98.0.0/26');
    const ipam = createIpam(cache, { lock: 'none', batch: true });
    const [a1] = await ipam.assign(request('ca1', 'cache-aff'));
    slow.hold();
    try {
      // The block and its affinity now belong to node ca2 (as a node release and a claim would leave them).
      const b = await other.get('IPAMBlock', blockName(a1!.block));
      const aff = await other.get('BlockAffinity', affinityName('ca1', a1!.block));
      await other.txn([
        { op: 'update', res: { ...b, spec: { ...b.spec, affinity: 'host:ca2' } } },
        { op: 'delete', kind: 'BlockAffinity', name: aff.metadata.name, revision: aff.metadata.resourceVersion! },
        {
          op: 'create',
          res: {
            apiVersion: API_VERSION,
            kind: 'BlockAffinity',
            metadata: { name: affinityName('ca2', a1!.block) },
            spec: { state: 'confirmed', node: 'ca2', cidr: a1!.block },
          },
        },
      ]);
      expect((await cache.list('BlockAffinity', { namePrefix: 'ca1-' })).items).toHaveLength(1);
      const [a2] = await ipam.assign(request('ca1', 'cache-aff'));
      expect(a2!.block).not.toBe(a1!.block);
      expect(a2!.ip).not.toBe(a1!.ip);
    } finally {
      slow.release();
    }
    const moved = await other.get('IPAMBlock', blockName(a1!.block));
    expect(moved.spec.affinity).toBe('host:ca2');
    expect(moved.spec.allocations.filter((a) => a != null)).toHaveLength(1);
    await consistent(other);
  });

  it('a fresh read (readiness) goes to the store while the cache still holds the old object', async () => {
    const { cache, slow, other } = await withPool('cache-fresh', '10.100.0.0/26');
    slow.hold();
    const ci = await other.get('ClusterInformation', 'default');
    try {
      const changed = await other.update({
        ...ci,
        metadata: { ...ci.metadata, labels: { ...ci.metadata.labels, fresh: 'yes' } },
      });
      expect((await cache.get('ClusterInformation', 'default')).metadata.resourceVersion).toBe(
        ci.metadata.resourceVersion,
      );
      expect(
        (await cache.get('ClusterInformation', 'default', undefined, { fresh: true })).metadata.resourceVersion,
      ).toBe(changed.metadata.resourceVersion);
      expect((await cache.list('IPPool', { fresh: true })).revision).not.toBe('');
    } finally {
      slow.release();
    }
  });

  it('datastoreReady turned off behind its back: the next assignment writes nothing', async () => {
    const { cache, slow, other } = await withPool('cache-rdy', '10.99.0.0/26');
    const ipam = createIpam(cache, { lock: 'none', batch: true });
    await ipam.assign(request('cr1', 'cache-rdy'));
    slow.hold();
    const ci = await other.get('ClusterInformation', 'default');
    const r = request('cr1', 'cache-rdy');
    try {
      await other.update({ ...ci, spec: { ...ci.spec, datastoreReady: false } });
      expect((await cache.get('ClusterInformation', 'default')).spec.datastoreReady).toBe(true);
      await expect(ipam.assign(r)).rejects.toThrow(/datastoreReady/);
    } finally {
      slow.release();
      const now = await other.get('ClusterInformation', 'default');
      await other.update({ ...now, spec: { ...now.spec, datastoreReady: true } });
    }
    await expect(other.get('IPAMHandle', r.handleID)).rejects.toThrow(/not found/);
    await consistent(other);
  });
});
