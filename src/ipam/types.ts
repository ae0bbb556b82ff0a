// The IPAM service's public types: what a caller asks (AssignRequest,
// ReleaseOptions, Piggyback) and what it gets back (Assigned, Released, the
// inspection reports). src/ipam/index.ts exports them.
import type { Resource } from '../model/resources.js';
import type { TxnOp } from '../datastore/txn.js';
import type { Family } from '../net/cidr.js';
import type { PoolUse } from './pools.js';

export interface AssignRequest {
  handleID: string;
  node: string;
  /** Stored with each address (namespace, pod, containerID...). `node` and `timestamp` are added. */
  attrs: Record<string, string>;
  assignIPv4: boolean;
  assignIPv6: boolean;
  /** Explicit pools (names or CIDRs), tried in order. */
  ipv4Pools?: string[] | undefined;
  ipv6Pools?: string[] | undefined;
  /**
   * Specific addresses (from `IP=` or annotations): at most one per family. When given, exactly these are assigned and
   * assignIPv4/6 are ignored.
   */
  requestedIPs?: string[];
  /** What the addresses are for (default Workload); pools whose spec.allowedUses leaves it out are never used. */
  use?: PoolUse;
  /** How to name the pool lists and requested addresses in errors (default ipv4_pools / ipv6_pools / IP). */
  fields?: { ipv4Pools?: string; ipv6Pools?: string; requestedIPs?: string };
  /** Writes that commit in the same transaction as the request's last address (the workload endpoint). */
  piggyback?: Piggyback;
}

/**
 * Writes of the caller that go in the transaction that takes the request's
 * last address, so that an ADD costs one datastore write. `ops` is called per
 * attempt with every address the request holds then (`again`: the previous
 * attempt failed on one of these ops, so re-read what they guard); `committed`
 * gets what they stored. Not called at all when the request writes nothing
 * (a retried ADD that already holds its addresses): the caller writes alone.
 */
export interface Piggyback {
  ops(assigned: Assigned[], again: boolean): TxnOp[] | Promise<TxnOp[]>;
  committed(stored: Array<Resource | undefined>): void;
}

/** Extra writes that go in the transaction that frees a handle (the workload endpoint's delete). */
export interface ReleaseOptions {
  /** Guards that fail (the object changed or is gone) drop the op: these writes are best effort. */
  alsoWrite?: TxnOp[];
  /**
   * An alsoWrite op whose guard failed: the op to write instead (its object
   * read again), or undefined to drop it. Without it, the op is dropped.
   */
  reread?: (failed: TxnOp) => Promise<TxnOp | undefined>;
}

export interface Assigned {
  /** `10.0.0.5/26`: the address with the BLOCK prefix length. */
  address: string;
  ip: string;
  family: Family;
  pool: string;
  block: string;
  /** The handle held this address before the request (a repeated ADD): nothing was written for it. */
  held?: true;
}

export interface BlockUsage {
  cidr: string;
  affinity: string | null;
  size: number;
  allocated: number;
}

export interface PoolUsage {
  name: string;
  cidr: string;
  family: Family;
  blockSize: number;
  disabled: boolean;
  nodeSelector: string;
  /** Addresses in the pool. */
  size: bigint;
  /** Blocks carved out of the pool so far. */
  blocks: number;
  allocated: number;
  /** size - allocated (unclaimed blocks count as free). */
  free: bigint;
  perBlock: BlockUsage[];
}

/** Where an address stands (Ipam.locate). */
export interface AddressLocation {
  /** The address as formatted canonically. */
  ip: string;
  pool?: string;
  block?: string;
  /** The block's affinity ("host:NODE"), when a block holds the address. */
  affinity?: string | null;
  allocated: boolean;
  /** Who holds it, when its attribute is recorded (handle null: a reserved address). */
  holder?: { handle: string | null; attrs: Record<string, string> };
}

export interface HandleInfo {
  handleID: string;
  blocks: Record<string, number>;
}

export interface Released {
  ip: string;
  handle: string | null;
}

/**
 * What makes a node's IPAM steps exclusive across its processes. IPAM does not
 * make one: the plugins pass theirs (src/hostlock ipamHostLock: the node's
 * flock, which also tells the agent when a per-exec plugin held it since).
 */
export interface IpamHostLock {
  /** Names the lock: the in-process queue and the batches are keyed by it. */
  readonly id: string;
  /** Runs `fn` holding the lock. */
  run<T>(fn: () => Promise<T>): Promise<T>;
}
