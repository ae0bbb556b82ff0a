// createIpam (src/ipam/service.ts): the one way other layers build IPAM, with
// the host lock its owner passes in (or none); the in-process queue.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { MemoryDatastore } from '../../src/datastore/memory.js';
import { API_VERSION } from '../../src/model/resources.js';
import { createIpam, serialize, type AssignRequest } from '../../src/ipam/index.js';
import { acquireHostLock, ipamHostLock } from '../../src/hostlock/index.js';

const dir = mkdtempSync(join(tmpdir(), `ipam-service-${process.pid}-`));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

async function store(): Promise<MemoryDatastore> {
  const ds = new MemoryDatastore();
  await ds.create({
    apiVersion: API_VERSION,
    kind: 'IPPool',
    metadata: { name: 'p' },
    spec: { cidr: '10.71.0.0/24', blockSize: 26 },
  });
  return ds;
}
const req = (): AssignRequest => ({
  handleID: `net.${Math.random().toString(16).slice(2)}`,
  node: 'n1',
  attrs: {},
  assignIPv4: true,
  assignIPv6: false,
});

describe('createIpam', () => {
  it("with this node's lock: an assignment waits for the lock it was given (held here, so it times out naming it)", async () => {
    const path = join(dir, 'node.lock');
    const release = await acquireHostLock(path);
    try {
      const ipam = createIpam(await store(), { lock: ipamHostLock(path, { timeoutMs: 300 }) });
      await expect(ipam.assign(req())).rejects.toThrow(`waiting for the host lock ${path}`);
      // Another lock, or none: not blocked.
      const other = createIpam(await store(), { lock: ipamHostLock(join(dir, 'other.lock'), { timeoutMs: 300 }) });
      expect(await other.assign(req())).toHaveLength(1);
      expect(await createIpam(await store(), { lock: 'none' }).assign(req())).toHaveLength(1);
    } finally {
      await release();
    }
  });
});

describe('serialize', () => {
  it('runs same-key calls in call order, one at a time, and a failure does not stop the queue', async () => {
    const log: string[] = [];
    let running = 0;
    const job =
      (name: string, fail = false) =>
      async () => {
        running++;
        expect(running).toBe(1);
        await new Promise((r) => setTimeout(r, 5));
        log.push(name);
        running--;
        if (fail) throw new Error(name);
        return name;
      };
    const results = await Promise.allSettled([
      serialize('k', job('a')),
      serialize('k', job('b', true)),
      serialize('k', job('c')),
    ]);
    expect(log).toEqual(['a', 'b', 'c']);
    expect(results.map((r) => r.status)).toEqual(['fulfilled', 'rejected', 'fulfilled']);
  });

  it('different keys run concurrently', async () => {
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const first = serialize('k1', () => gate);
    const second = await serialize('k2', async () => 'ran');
    expect(second).toBe('ran');
    release();
    await first;
  });
});
