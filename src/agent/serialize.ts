// Ordering for the agent's concurrent CNI requests: an ADD and the DEL that
// follows it for the same container must never overlap (the runtime may give
// up on a slow ADD and send DEL at once), while different containers proceed
// in parallel, bounded so a burst cannot open unbounded datastore calls.

export interface KeyedQueue {
  /** Runs fn after every earlier fn with the same key has settled. */
  run<T>(key: string, fn: () => Promise<T> | T): Promise<T>;
  /** Keys with queued or running work. */
  readonly size: number;
}

export function createKeyedQueue(): KeyedQueue {
  // The tail of each key's chain; removed when the last queued fn settles, so
  // the map does not grow with every container the node ever saw.
  const tails = new Map<string, Promise<unknown>>();
  return {
    run<T>(key: string, fn: () => Promise<T> | T): Promise<T> {
      const prev = tails.get(key) ?? Promise.resolve();
      const result = prev.then(
        () => fn(),
        () => fn(),
      );
      const tail = result.then(
        () => undefined,
        () => undefined,
      );
      tails.set(key, tail);
      void tail.then(() => {
        if (tails.get(key) === tail) tails.delete(key);
      });
      return result;
    },
    get size() {
      return tails.size;
    },
  };
}

export interface Limiter {
  /** Runs fn once fewer than `max` fns run. */
  run<T>(fn: () => Promise<T> | T): Promise<T>;
  readonly active: number;
  readonly waiting: number;
}

export function createLimiter(max: number): Limiter {
  if (!Number.isInteger(max) || max < 1) {
    throw new RangeError(`maxConcurrent must be a positive integer, got ${String(max)}`);
  }
  let active = 0;
  const waiters: Array<() => void> = [];
  const release = () => {
    active--;
    const next = waiters.shift();
    if (next) {
      active++;
      next();
    }
  };
  return {
    async run<T>(fn: () => Promise<T> | T): Promise<T> {
      if (active < max) active++;
      else await new Promise<void>((resolve) => waiters.push(resolve));
      try {
        return await fn();
      } finally {
        release();
      }
    },
    get active() {
      return active;
    },
    get waiting() {
      return waiters.length;
    },
  };
}
