// A per-key promise chain: calls with the same key run one after another in
// call order, different keys run concurrently. Bottom-level so that the agent
// (one container's ADD and DEL never overlap) and IPAM (one node's writers
// queue in-process before the host lock) share one implementation.

interface KeyedQueue {
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
