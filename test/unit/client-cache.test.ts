// Issue 11, finding 7: clients cached per configuration are bounded (LRU) and
// closed when idle, instead of one open connection per netconf ever seen.
import { describe, expect, it } from 'vitest';
import { createClientCache } from '../../src/client-cache.js';

class Client {
  static open = 0;
  closed = false;
  constructor(readonly key: string) {
    Client.open++;
  }
  close(): void {
    if (!this.closed) Client.open--;
    this.closed = true;
  }
}

async function until(cond: () => boolean, what: string): Promise<void> {
  for (let i = 0; i < 400 && !cond(); i++) await new Promise((r) => setTimeout(r, 25));
  expect(cond(), what).toBe(true);
}

describe('client cache', () => {
  it('200 distinct configurations leave at most `max` clients open', async () => {
    Client.open = 0;
    const cache = createClientCache<Client>({ max: 8, idleMs: 60_000, graceMs: 20, close: (c) => c.close() });
    const got: Client[] = [];
    for (let i = 0; i < 200; i++) got.push(await cache.get(`conf-${i}`, async () => new Client(`conf-${i}`)));
    expect(cache.size).toBe(8);
    await until(() => Client.open === 8, `open clients: ${Client.open}`);
    // The most recent ones are the ones kept, and they are reused, not reopened.
    expect(await cache.get('conf-199', async () => new Client('again'))).toBe(got[199]);
    expect(got[0]!.closed).toBe(true);
    await cache.closeAll();
    expect(Client.open).toBe(0);
  });

  it('use keeps a client; unused ones are closed after idleMs', async () => {
    Client.open = 0;
    const cache = createClientCache<Client>({ max: 2, idleMs: 1000, graceMs: 0, close: (c) => c.close() });
    const a = await cache.get('a', async () => new Client('a'));
    await cache.get('b', async () => new Client('b'));
    await cache.get('a', async () => new Client('a2'));
    await cache.get('c', async () => new Client('c'));
    // b was least recently used.
    await until(() => Client.open === 2, 'b evicted');
    expect(a.closed).toBe(false);
    await until(() => Client.open === 0 && cache.size === 0, 'idle clients closed');
  });

  it('a failed open is not cached', async () => {
    const cache = createClientCache<Client>({ max: 2, idleMs: 60_000, graceMs: 0, close: (c) => c.close() });
    await expect(cache.get('x', async () => Promise.reject(new Error('down')))).rejects.toThrow('down');
    await new Promise((r) => setImmediate(r));
    expect((await cache.get('x', async () => new Client('x'))).key).toBe('x');
    await cache.closeAll();
  });
});
