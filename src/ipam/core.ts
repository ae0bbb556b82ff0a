// What every IPAM step works with: the service's settings (IpamCore, built
// once per Ipam from IpamOptions), how a step runs exclusively (the host lock,
// or an in-process queue), and one assignment's state (Ctx).
import { DatastoreError } from '../errors.js';
import type { Logger } from '../log/types.js';
import type { IPAMConfigSpec, Resource } from '../model/resources.js';
import type { Datastore } from '../datastore/types.js';
import type { Family } from '../net/cidr.js';
import { createKeyedQueue } from '../keyed-queue.js';
import type { PoolInfo } from './pools.js';
import { createIpamShared, type IpamShared } from './shared.js';
import type { AssignRequest, Assigned, IpamHostLock, IpamOptions, Piggyback } from './types.js';

export type BlockRes = Resource<'IPAMBlock'>;
export type AffRes = Resource<'BlockAffinity'>;
export type HandleRes = Resource<'IPAMHandle'>;

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
  if (lock) return serialize(`ipam-lock:${lock.id}`, () => lock.run(fn));
  return key ? serialize(`ipam-node:${key}`, fn) : fn();
}

export const hostAffinity = (node: string) => `host:${node}`;

export function isKind(e: unknown, kind: 'NotFound' | 'AlreadyExists' | 'Conflict'): boolean {
  return DatastoreError.is(e, kind);
}

/** The handle was not read before the assignment: its create's guard is the check (assign.ts). */
export const UNREAD = 'unread' as const;

/** The reads an assignment starts before waiting for the lock: pools (valid ones and the errors of the rest), IPAMConfig, the request's handle (or UNREAD). */
export type EarlyReads = Promise<readonly [{ pools: PoolInfo[]; bad: string[] }, IPAMConfigSpec, HandleRes | undefined | typeof UNREAD]>;

/** Per-assign state: everything read once and reused for the rest of the call. */
export interface Ctx {
  req: AssignRequest;
  node: string;
  pools: PoolInfo[];
  badPools: string[];
  config: IPAMConfigSpec;
  affinities: AffRes[];
  handle: HandleRes | undefined;
  /** All blocks, listed lazily the first time a claim or borrow needs them. */
  blocks?: Map<string, BlockRes>;
  nodeLabels?: Record<string, string>;
  /** Set when maxBlocksPerHost stopped a claim (for the final error). */
  capHit?: { family: Family; held: number; max: number } | undefined;
  /** Set while assigning the request's last family: the caller's writes and what the request got before. */
  piggy?: { p: Piggyback; before: Assigned[] };
}
