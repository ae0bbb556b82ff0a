// The agent's read cache (src/datastore/cached.ts) over the in-memory store, wrapped as the
// agent wraps it (the metrics Proxy): hits, suspend() sending reads to the store, and the
// methods the Proxy does not time (watch, close) running with the Proxy as `this`.
import { describe, expect, it } from 'vitest';
import { createAgentMetrics } from '../../src/agent/metrics.js';
import { cachedDatastore } from '../../src/datastore/cached.js';
import { MemoryDatastore } from '../../src/datastore/memory.js';
import { API_VERSION, type Resource } from '../../src/model/resources.js';

function pool(name: string, cidr: string): Resource<'IPPool'> {
  return { apiVersion: API_VERSION, kind: 'IPPool', metadata: { name }, spec: { cidr } } as Resource<'IPPool'>;
}

async function until(what: string, cond: () => boolean): Promise<void> {
  const deadline = Date.now() + 30_000;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting until ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

describe('cachedDatastore', () => {
  it('answers from memory once synced, reads through while suspended, and works behind the metrics Proxy', async () => {
    const store = new MemoryDatastore();
    await store.create(pool('p1', '10.1.0.0/16'));
    const cache = cachedDatastore(store);
    const ds = createAgentMetrics().wrapDatastore(cache);
    try {
      expect(ds.type).toBe('memory');
      expect(ds.atomicTxn).toBe(true);
      await until('the cache is synced', () => cache.synced?.() === true);
      const stats = cache.stats!;

      const hits = stats.hits;
      expect((await ds.get('IPPool', 'p1')).spec.cidr).toBe('10.1.0.0/16');
      expect(stats.hits).toBe(hits + 1);

      const written = await ds.create(pool('p2', '10.2.0.0/16'));
      expect((await ds.list('IPPool')).items.map((p) => p.metadata.name)).toEqual(['p1', 'p2']);
      expect(stats.hits).toBe(hits + 2);

      cache.suspend!(60_000);
      const misses = stats.misses;
      expect((await ds.get('IPPool', 'p2')).metadata.resourceVersion).toBe(written.metadata.resourceVersion);
      expect(stats.hits).toBe(hits + 2);
      // Suspended, the cache does not answer at all: the read is neither a hit nor a miss of it.
      expect(stats.misses).toBe(misses);

      const events: string[] = [];
      const w = ds.watch('IPPool', { revision: written.metadata.resourceVersion! }, (ev) => events.push(ev.type));
      await store.delete('IPPool', 'p2');
      await until('the watch through the cache saw the delete', () => events.includes('DELETED'));
      w.stop();
    } finally {
      await ds.close();
    }
    expect(cache.synced?.()).toBe(false);
  });
});
