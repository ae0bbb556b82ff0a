// The IPAM service: `Ipam`, the one entry other layers use (built by
// createIpam in service.ts, exported by index.ts). It holds no logic of its
// own; each concept has its module in src/ipam/ (docs/ipam.md lists them).
//
// The crash-safety invariant, which every module here keeps (docs/ipam.md
// has the long form and the tests that check it):
//
//   for every handle H and block B: handle(H).block[B] >= |ordinals of B held by H|
//
// i.e. a handle never under-counts, so an address never exists without its
// handle. ADD raises the handle's count in the same transaction
// (Datastore.txn) as the block compare-and-swap that takes the address
// (allocate.ts, batch.ts); DEL frees the addresses and deletes the handle in
// one transaction (release.ts). On etcd that is all or nothing; on Kubernetes
// the ops run in order (handle before block on ADD; the caller's extra writes,
// then blocks, then handle on DEL), so a process killed between them leaves at
// worst a handle whose count is too high, which the next release by that
// handle clears.
//
// Failures are IpamErrors (errors.ts) with a kind; the CNI edge gives them
// their codes. Datastore failures pass through as DatastoreErrors.
import type { Datastore } from '../datastore/types.js';
import type { Family } from '../net/cidr.js';
import { ipamCore, exclusive, type IpamCore, type IpamOptions } from './core.js';
import { assignLocked, prepareAssign } from './assign.js';
import { enqueue, enqueueRelease } from './batch.js';
import { getHandle } from './handle-store.js';
import { releaseIPs, releaseLocked } from './release.js';
import { handleAddresses, listHandles, locate, readiness, usage, usageReport, whoHas } from './inspect.js';
import type {
  AddressLocation,
  AssignRequest,
  Assigned,
  BlockUsage,
  HandleInfo,
  PoolUsage,
  Released,
  ReleaseOptions,
} from './types.js';

export type { AddressLocation } from './types.js';
export type { IpamOptions } from './core.js';

export class Ipam {
  private readonly core: IpamCore;

  constructor(ds: Datastore, opts: IpamOptions = {}) {
    this.core = ipamCore(ds, opts);
  }

  /**
   * Assign addresses to a handle (assign.ts; batch.ts when batching).
   * Dual-stack is all-or-nothing: when one family fails, what the other got
   * in this call is released again. A retried ADD gets what it holds.
   */
  async assign(req: AssignRequest): Promise<Assigned[]> {
    const { requested, early } = prepareAssign(this.core, req);
    if (this.core.batch && !requested.length) return enqueue(this.core, req, early);
    return exclusive(this.core, req.node, () => assignLocked(this.core, req, requested, early));
  }

  /**
   * Release every address of the handle (release.ts; batch.ts when
   * batching). Idempotent: an unknown handle releases nothing and succeeds.
   * `alsoWrite` goes in the same transaction.
   */
  async releaseByHandle(handleID: string, opts: ReleaseOptions = {}): Promise<string[]> {
    // The handle is only changed by this container's own ADD/DEL: read it
    // (and connect) before waiting for the lock; the agent answers from what
    // its ADD wrote (the handle's delete is guarded by that revision, so a
    // stale answer costs a re-read).
    const early = getHandle(this.core, handleID, { recent: true });
    early.catch(() => undefined);
    if (this.core.batch) return enqueueRelease(this.core, { handleID, early, opts });
    return exclusive(this.core, undefined, () => releaseLocked(this.core, handleID, early, opts));
  }

  /** Release specific addresses whoever holds them (operator repair). Addresses already free are skipped. */
  releaseIPs(ips: string[]): Promise<Released[]> {
    return releaseIPs(this.core, ips);
  }

  /**
   * Whether an ADD on `node` could get an address of each family now (CNI STATUS): undefined when ready, else what is
   * wrong.
   */
  readiness(q: {
    node: string;
    families: Family[];
    ipv4Pools?: string[] | undefined;
    ipv6Pools?: string[] | undefined;
  }): Promise<string | undefined> {
    return readiness(this.core, q);
  }

  /** The addresses (plain IPs) the handle holds now. */
  handleAddresses(handleID: string): Promise<string[]> {
    return handleAddresses(this.core, handleID);
  }

  usage(): Promise<PoolUsage[]> {
    return usage(this.core);
  }

  /** Pool usage and the orphan blocks (inside no pool). */
  usageReport(): Promise<{ pools: PoolUsage[]; orphanBlocks: BlockUsage[] }> {
    return usageReport(this.core);
  }

  /** Who holds `ip`: its handle and attributes, or undefined when it is free or in no block. */
  whoHas(ipText: string): Promise<{ handle: string | null; attrs: Record<string, string>; block: string } | undefined> {
    return whoHas(this.core, ipText);
  }

  /** Where `ip` stands: its pool, block, affinity, whether it is allocated and who holds it. */
  locate(ipText: string): Promise<AddressLocation> {
    return locate(this.core, ipText);
  }

  /** Every handle, or only those of exactly `network` (ipam/handle.ts). */
  listHandles(opts: { network?: string } = {}): Promise<HandleInfo[]> {
    return listHandles(this.core, opts);
  }
}
