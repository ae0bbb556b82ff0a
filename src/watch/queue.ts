// A keyed work queue for reconcilers: a key is queued at most once (adding it
// again while it waits is a no-op, while it runs marks it to run once more),
// so the queue is bounded by the number of objects, however many events come.
// A failed key is retried with per-key exponential backoff; the handler never
// crashes the process.

interface WorkQueueOptions {
  /** Reconciles one key. A throw schedules a retry. */
  handle: (key: string) => Promise<void>;
  /** Keys handled at once (default 4). */
  concurrency?: number;
  /** First retry delay (default 250 ms), doubled per failure up to maxDelayMs (default 30 s). */
  baseDelayMs?: number;
  maxDelayMs?: number;
  /** Told about every failure (log it, count it). */
  onError?: (key: string, err: unknown, failures: number) => void;
}

export interface WorkQueue {
  add(key: string): void;
  /** Keys waiting or running (not those waiting for a retry). */
  readonly depth: number;
  /** Keys waiting for a retry after a failure. */
  readonly retrying: number;
  /** Resolves when nothing waits, runs or waits for a retry. */
  idle(): Promise<void>;
  /** Stops starting work and cancels retries; resolves when running handlers finish. */
  stop(): Promise<void>;
}

export function createWorkQueue(opts: WorkQueueOptions): WorkQueue {
  const concurrency = opts.concurrency ?? 4;
  const base = opts.baseDelayMs ?? 250;
  const max = opts.maxDelayMs ?? 30_000;
  const waiting = new Set<string>(); // insertion order = FIFO
  const running = new Set<string>();
  const dirty = new Set<string>(); // added again while running
  const failures = new Map<string, number>();
  const retryTimers = new Map<string, NodeJS.Timeout>();
  let stopped = false;
  let idleWaiters: Array<() => void> = [];
  let runningDone: Array<() => void> = [];

  const checkIdle = () => {
    if (running.size === 0) {
      const r = runningDone;
      runningDone = [];
      r.forEach((f) => f());
    }
    if (waiting.size === 0 && running.size === 0 && retryTimers.size === 0) {
      const w = idleWaiters;
      idleWaiters = [];
      w.forEach((f) => f());
    }
  };

  const pump = () => {
    while (!stopped && running.size < concurrency && waiting.size > 0) {
      const key = waiting.values().next().value as string;
      waiting.delete(key);
      running.add(key);
      void run(key);
    }
    checkIdle();
  };

  const run = async (key: string) => {
    try {
      await opts.handle(key);
      failures.delete(key);
    } catch (err) {
      const n = (failures.get(key) ?? 0) + 1;
      failures.set(key, n);
      try {
        opts.onError?.(key, err, n);
      } catch {
        // a broken reporter must not stop the queue
      }
      if (!stopped && !dirty.has(key)) {
        const delay = Math.min(max, base * 2 ** Math.min(n - 1, 20));
        clearTimeout(retryTimers.get(key));
        retryTimers.set(
          key,
          setTimeout(() => {
            retryTimers.delete(key);
            add(key);
          }, delay),
        );
      }
    } finally {
      running.delete(key);
      if (dirty.delete(key)) waiting.add(key);
      pump();
    }
  };

  const add = (key: string) => {
    if (stopped) return;
    if (running.has(key)) {
      dirty.add(key);
      return;
    }
    // A fresh event supersedes a pending retry: handle it now.
    const t = retryTimers.get(key);
    if (t) {
      clearTimeout(t);
      retryTimers.delete(key);
    }
    waiting.add(key);
    pump();
  };

  return {
    add,
    get depth() {
      return waiting.size + running.size;
    },
    get retrying() {
      return retryTimers.size;
    },
    idle() {
      return new Promise<void>((resolve) => {
        idleWaiters.push(resolve);
        checkIdle();
      });
    },
    async stop() {
      stopped = true;
      for (const t of retryTimers.values()) clearTimeout(t);
      retryTimers.clear();
      waiting.clear();
      dirty.clear();
      await new Promise<void>((resolve) => {
        runningDone.push(resolve);
        checkIdle();
      });
    },
  };
}

/**
 * A controller's reconcile of its whole state under one key: one run at a time, once more when
 * asked meanwhile, retried after a failure with doubling delays up to 10 s; each failure is told.
 */
export function createReconcileQueue(
  handle: () => Promise<void>,
  o: { baseDelayMs: number; onError: (err: Error, failures: number) => void },
): WorkQueue {
  const onError = (_k: string, err: unknown, n: number) => o.onError(err as Error, n);
  return createWorkQueue({ handle, concurrency: 1, baseDelayMs: o.baseDelayMs, maxDelayMs: 10_000, onError });
}
