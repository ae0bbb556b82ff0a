// The state an IPAM step works with, as types only: the resources it reads,
// one assignment's state (Ctx) and the requests waiting in a batch queue. They
// sit below every step and below shared.ts (which holds the batch queues), so
// the folder has no import cycle.
import type { IPAMConfigSpec, Resource } from '../model/resources.js';
import type { Family } from '../net/cidr.js';
import type { PoolInfo } from './pools.js';
import type { AssignRequest, Assigned, Piggyback, ReleaseOptions } from './types.js';

export type BlockRes = Resource<'IPAMBlock'>;
export type AffRes = Resource<'BlockAffinity'>;
export type HandleRes = Resource<'IPAMHandle'>;

/** The handle was not read before the assignment: its create's guard is the check (assign.ts). */
export const UNREAD = 'unread' as const;

/**
 * The reads an assignment starts before waiting for the lock: pools (valid ones and the errors of the rest),
 * IPAMConfig, the request's handle (or UNREAD).
 */
export type EarlyReads = Promise<
  readonly [{ pools: PoolInfo[]; bad: string[] }, IPAMConfigSpec, HandleRes | undefined | typeof UNREAD]
>;

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

/** One assignment waiting in a batch queue. */
export interface PendingAssign {
  req: AssignRequest;
  early: EarlyReads;
  resolve: (v: Assigned[]) => void;
  reject: (e: unknown) => void;
  /** What this request got so far in the batch (per family). */
  done: Assigned[];
  failed?: unknown;
  /** Per-request state (its handle as last written, for handleOp). */
  ctx?: Ctx;
  /** Its handle existed before the batch (a repeated ADD): a failure releases only what the batch gave it. */
  held?: boolean;
}

/** One release waiting in a batch queue. */
export interface PendingRelease {
  handleID: string;
  early: Promise<HandleRes | undefined>;
  opts: ReleaseOptions;
  resolve: (v: string[]) => void;
  reject: (e: unknown) => void;
}
