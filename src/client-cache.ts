// A bounded cache of open clients (datastore connections, API clients) keyed
// by the settings that make them: the agent keeps them warm across requests,
// but a stream of distinct configurations must not pile up sockets for ever.
// Least recently used entries beyond `max` are evicted, and entries unused
// for `idleMs` are closed by a sweep. An evicted client may still serve a
// request that fetched it a moment ago, so it is closed only after `graceMs`.
// Bottom-level (no imports) so every layer's caches share it.

interface ClientCacheOptions<T> {
  max: number;
  idleMs: number;
  graceMs: number;
  close: (client: T) => Promise<void> | void;
}

interface ClientCache<T> {
  /** The cached client for `key`, or a new one from `open` (a failed open is not cached). */
  get(key: string, open: () => Promise<T>): Promise<T>;
  delete(key: string): void;
  /** Closes every client now (shutdown, tests). */
  closeAll(): Promise<void>;
  readonly size: number;
}

export function createClientCache<T>(opts: ClientCacheOptions<T>): ClientCache<T> {
  // Map iteration order is insertion order: re-inserting on use keeps the least recently used first.
  const entries = new Map<string, { p: Promise<T>; used: number }>();
  let sweeper: NodeJS.Timeout | undefined;

  const closeLater = (p: Promise<T>, delay: number) => {
    const t = setTimeout(() => void p.then((c) => opts.close(c)).catch(() => undefined), delay);
    t.unref();
  };
  const sweep = () => {
    const now = Date.now();
    for (const [k, e] of entries) {
      if (now - e.used >= opts.idleMs) {
        entries.delete(k);
        closeLater(e.p, 0);
      }
    }
    if (!entries.size && sweeper) {
      clearInterval(sweeper);
      sweeper = undefined;
    }
  };

  return {
    get(key, open) {
      let e = entries.get(key);
      if (e) entries.delete(key);
      else {
        const p = open();
        p.catch(() => {
          if (entries.get(key)?.p === p) entries.delete(key);
        });
        e = { p, used: 0 };
      }
      e.used = Date.now();
      entries.set(key, e);
      while (entries.size > opts.max) {
        const [oldest, old] = entries.entries().next().value as [string, { p: Promise<T> }];
        entries.delete(oldest);
        closeLater(old.p, opts.graceMs);
      }
      if (!sweeper) {
        sweeper = setInterval(sweep, Math.max(1000, Math.floor(opts.idleMs / 2)));
        sweeper.unref();
      }
      return e.p;
    },
    delete(key) {
      entries.delete(key);
    },
    async closeAll() {
      const all = [...entries.values()];
      entries.clear();
      if (sweeper) clearInterval(sweeper);
      sweeper = undefined;
      await Promise.allSettled(all.map(async (e) => opts.close(await e.p)));
    },
    get size() {
      return entries.size;
    },
  };
}
