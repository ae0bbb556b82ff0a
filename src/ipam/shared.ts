// What IPAM instances of one process share, as one object its owner creates
// (the plugin's runtime, src/plugins/main/runtime.ts: the agent's is kept
// across requests) and hands to createIpam: the batch queues (batch.ts), so a
// fresh Ipam per request still joins the batch of the others, and the blocks
// last seen full (reads.ts). Nothing of it is module-level: instances given
// different objects share nothing, and an instance given none gets its own.
import type { Datastore } from '../datastore/types.js';
import type { PendingAssign, PendingRelease } from './state.js';

/** The state of one datastore (the runtime may hold several). */
interface IpamStoreState {
  /** Batch key -> assignments queued for the next lock acquisition. */
  readonly assigns: Map<string, PendingAssign[]>;
  /** Lock path -> releases queued for the next lock acquisition. */
  readonly releases: Map<string, PendingRelease[]>;
  /**
   * Names of the blocks last seen full. A batching Ipam (the agent) reads its
   * node's blocks in this set only when no other of its blocks has room, so
   * an ADD on a node with many full blocks reads one block, not all. A wrong
   * entry costs at most a preference (a freed slot in a block thought full is
   * used once the others are full); every write seen here corrects it.
   */
  readonly fullBlocks: Set<string>;
}

export interface IpamShared {
  /** This datastore's state (created on first use; dropped with the datastore). */
  of(ds: Datastore): IpamStoreState;
}

export function createIpamShared(): IpamShared {
  const stores = new WeakMap<Datastore, IpamStoreState>();
  return {
    of(ds) {
      let s = stores.get(ds);
      if (!s) stores.set(ds, (s = { assigns: new Map(), releases: new Map(), fullBlocks: new Set() }));
      return s;
    },
  };
}
