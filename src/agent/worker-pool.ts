// Runs exported functions of one module in worker threads, so netlink calls
// that sleep in the kernel (a veth deletion waits ~20 ms for an RCU grace
// period) never stall the agent's event loop and with it every other request.
//
// The module is plain ESM loaded by each worker: in the bundle that is
// dist/netplugin-worker.mjs (src/bin/netplugin-worker.ts); tests pass their
// own. Functions are looked up in its `workerFunctions` export when it has one
// (src/agent/worker-registry.ts), else among its named exports.
import { Worker } from 'node:worker_threads';

export interface WorkerPoolOptions {
  /** file: URL or absolute path of the module whose functions run in the workers. */
  module: URL | string;
  /** Number of threads (>= 1). */
  size: number;
  /**
   * Rebuilds a thrown error from its cloned fields (e.g. into the addon's
   * NetlinkError class). Default: an Error (TypeError/RangeError kept) with
   * name, message, stack and the fields code, errno, op, subject, ... copied.
   */
  reviveError?: (fields: SerializedError) => Error;
  /**
   * V8 heap limits per thread. A dataplane worker holds a few small objects,
   * so small limits keep each thread's resident memory low (the agent runs
   * several threads that mostly sleep in the kernel).
   */
  resourceLimits?: { maxYoungGenerationSizeMb?: number; maxOldGenerationSizeMb?: number; codeRangeSizeMb?: number; stackSizeMb?: number };
}

export interface WorkerPool {
  call<T = unknown>(fn: string, ...args: unknown[]): Promise<T>;
  /** Threads in the pool. */
  readonly size: number;
  /** Terminates the threads; pending calls reject. */
  close(): Promise<void>;
}

/** An error as it crosses the thread boundary: own enumerable cloneable fields plus name/message/stack. */
export interface SerializedError {
  name: string;
  message: string;
  stack?: string;
  [field: string]: unknown;
}

interface Pending {
  resolve(v: unknown): void;
  reject(e: Error): void;
}

interface Slot {
  worker: Worker;
  pending: Map<number, Pending>;
}

// Evaluated in each thread as CommonJS; import() loads the ESM module.
const HOST = `
const { parentPort, workerData } = require('node:worker_threads');
const ser = (e) => {
  if (!(e instanceof Error)) return { name: 'Error', message: 'non-Error thrown: ' + String(e) };
  const out = { name: e.name, message: e.message, stack: e.stack };
  for (const k of Object.keys(e)) {
    const v = e[k];
    if (v === null || ['string', 'number', 'boolean', 'bigint', 'undefined'].includes(typeof v)) out[k] = v;
    else { try { out[k] = structuredClone(v); } catch {} }
  }
  return out;
};
const loaded = import(workerData.module).then((m) => (m.workerFunctions && typeof m.workerFunctions === 'object' ? m.workerFunctions : m));
parentPort.on('message', async ({ id, fn, args }) => {
  try {
    const table = await loaded;
    const f = Object.prototype.hasOwnProperty.call(table, fn) ? table[fn] : undefined;
    if (typeof f !== 'function') throw new TypeError('worker module ' + workerData.module + ' exports no function ' + JSON.stringify(fn));
    parentPort.postMessage({ id, ok: true, value: await f(...args) });
  } catch (e) {
    let msg;
    try { msg = { id, ok: false, error: ser(e) }; parentPort.postMessage(msg); }
    catch (e2) { parentPort.postMessage({ id, ok: false, error: { name: 'Error', message: 'worker result could not be cloned: ' + e2.message } }); }
  }
});
`;

export function defaultReviveError(fields: SerializedError): Error {
  const Ctor = fields.name === 'TypeError' ? TypeError : fields.name === 'RangeError' ? RangeError : Error;
  const e = new Ctor(fields.message);
  for (const [k, v] of Object.entries(fields)) {
    if (k !== 'message') (e as unknown as Record<string, unknown>)[k] = v;
  }
  return e;
}

export function createWorkerPool(opts: WorkerPoolOptions): WorkerPool {
  if (!Number.isInteger(opts.size) || opts.size < 1) {
    throw new RangeError(`worker pool size must be a positive integer, got ${String(opts.size)}`);
  }
  const moduleUrl = opts.module instanceof URL ? opts.module.href : opts.module.startsWith('/') ? `file://${opts.module}` : opts.module;
  const revive = opts.reviveError ?? defaultReviveError;
  const slots: Slot[] = [];
  let nextId = 1;
  let closed = false;

  const spawn = (i: number): Slot => {
    const worker = new Worker(HOST, { eval: true, workerData: { module: moduleUrl }, ...(opts.resourceLimits ? { resourceLimits: opts.resourceLimits } : {}) });
    const slot: Slot = { worker, pending: new Map() };
    worker.on('message', (m: { id: number; ok: boolean; value?: unknown; error?: SerializedError }) => {
      const p = slot.pending.get(m.id);
      if (!p) return;
      slot.pending.delete(m.id);
      if (slot.pending.size === 0) worker.unref();
      if (m.ok) p.resolve(m.value);
      else p.reject(revive(m.error!));
    });
    const fail = (why: string) => {
      for (const p of slot.pending.values()) p.reject(new Error(why));
      slot.pending.clear();
      // Respawn so one crashing call does not shrink the pool for good.
      if (!closed && slots[i] === slot) slots[i] = spawn(i);
    };
    worker.on('error', (e) => fail(`worker thread failed: ${e.message}`));
    worker.on('exit', (code) => fail(`worker thread exited with code ${code}`));
    // An idle pool must not keep a finished agent (or test) alive on its own;
    // a thread with calls in flight does (ref'd in call()).
    worker.unref();
    return slot;
  };
  for (let i = 0; i < opts.size; i++) slots.push(spawn(i));

  return {
    size: opts.size,
    call<T>(fn: string, ...args: unknown[]): Promise<T> {
      if (closed) return Promise.reject(new Error('worker pool is closed'));
      // Least busy: a slow call (veth deletion) does not hold up the next one.
      let slot = slots[0]!;
      for (const s of slots) if (s.pending.size < slot.pending.size) slot = s;
      const id = nextId++;
      return new Promise<T>((resolve, reject) => {
        slot.pending.set(id, { resolve: resolve as (v: unknown) => void, reject });
        if (slot.pending.size === 1) slot.worker.ref();
        try {
          slot.worker.postMessage({ id, fn, args });
        } catch (e) {
          slot.pending.delete(id);
          if (slot.pending.size === 0) slot.worker.unref();
          reject(e as Error);
        }
      });
    },
    async close() {
      if (closed) return;
      closed = true;
      await Promise.all(slots.map((s) => s.worker.terminate()));
      for (const s of slots) {
        for (const p of s.pending.values()) p.reject(new Error('worker pool is closed'));
        s.pending.clear();
      }
    },
  };
}
