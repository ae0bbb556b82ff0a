// What every IPAM step works with: the service's settings (IpamCore, built
// once per Ipam from IpamOptions), how a step runs exclusively (the host lock,
// or an in-process queue), and one assignment's state (Ctx).
import { DatastoreError } from '../errors.js';
import type { Logger } from '../log/types.js';
import type { Datastore } from '../datastore/types.js';
import { createKeyedQueue } from '../keyed-queue.js';
import { createIpamShared, type IpamShared } from './shared.js';
import { mark } from '../observe/timeline.js';
import type { IpamHostLock } from './types.js';

export interface IpamOptions {
  /**
   * The node's host lock, given by its owner (the plugins: src/hostlock);
   * absent or null: no host lock (steps queue in-process per node).
   */
  lock?: IpamHostLock | null;
  /** CAS attempts per object before giving up (default 10). */
  maxRetries?: number;
  log?: Logger;
  /**
   * Batch concurrent assignments: requests that wait for the same lock and
   * ask for the same thing (node, families, pool lists; no requested IPs) are
   * served by one lock acquisition and one block write per block. Instances
   * with this option, the same `shared` object, datastore and lock path share
   * their queues, so a per-request Ipam (with its own logger) still joins the
   * batch. For a resident process (the node agent); a per-exec process never
   * has more than one request to batch.
   */
  batch?: boolean;
  /**
   * What this instance shares with the other instances of its owner (the
   * plugin's runtime): the batch queues and the blocks last seen full
   * (shared.ts createIpamShared). Absent: a fresh one, so the instance batches
   * only its own concurrent calls.
   */
  shared?: IpamShared;
}

export interface IpamCore {
  readonly ds: Datastore;
  /** The node's host lock (IpamOptions.lock); null: none (steps queue in-process per node). */
  readonly lock: IpamHostLock | null;
  /** CAS attempts per object before giving up. */
  readonly maxRetries: number;
  readonly log: Logger;
  /** Batch concurrent assignments and releases (IpamOptions.batch). */
  readonly batch: boolean;
  /** Batch queues and blocks seen full, shared with the other instances of its owner (IpamOptions.shared). */
  readonly shared: IpamShared;
}

const noopLog: Logger = { error() {}, warn() {}, info() {}, debug() {} };

export function ipamCore(ds: Datastore, opts: IpamOptions = {}): IpamCore {
  return {
    ds,
    lock: opts.lock ?? null,
    maxRetries: Math.max(1, opts.maxRetries ?? 10),
    log: opts.log ?? noopLog,
    batch: opts.batch === true,
    shared: opts.shared ?? createIpamShared(),
  };
}

const queue = createKeyedQueue();

/**
 * In-process serialisation: calls with the same key run one after another, in
 * call order; different keys run concurrently. (A resident agent's steps queue
 * here in front of the host lock, so it holds the lock once at a time and its
 * own requests meet in batches.)
 */
export function serialize<T>(key: string, fn: () => Promise<T>): Promise<T> {
  return queue.run(key, fn);
}

/**
 * Run `fn` alone: under the host lock (queued in-process first, so one
 * process holds it once at a time), or without one behind the other steps
 * for the same key (a node).
 */
export function exclusive<T>(core: IpamCore, key: string | undefined, fn: () => Promise<T>): Promise<T> {
  const lock = core.lock;
  if (lock) {
    return serialize(`ipam-lock:${lock.id}`, () =>
      lock.run(() => {
        mark('ipam lock held');
        return fn();
      }),
    );
  }
  return key ? serialize(`ipam-node:${key}`, fn) : fn();
}

export const hostAffinity = (node: string) => `host:${node}`;

export function isKind(e: unknown, kind: 'NotFound' | 'AlreadyExists' | 'Conflict'): boolean {
  return DatastoreError.is(e, kind);
}
