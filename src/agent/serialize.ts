// Ordering for the agent's concurrent CNI requests: an ADD and the DEL that
// follows it for the same container must never overlap (the runtime may give
// up on a slow ADD and send DEL at once), while different containers proceed
// in parallel, bounded so a burst cannot open unbounded datastore calls.

export { createKeyedQueue } from '../keyed-queue.js';

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
