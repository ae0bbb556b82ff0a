// Batching, for a resident process (the node agent): assignments that wait
// for the same lock and ask for the same thing are served by one lock
// acquisition and one transaction per block (each request's handle create,
// the block's compare-and-swap, each request's piggybacked writes); releases
// that wait together go in one transaction. Any failure sends each request
// its own way (the one-by-one path, with its retries).
import type { IPAMBlockSpec, IPAMConfigSpec, Resource } from '../model/resources.js';
import { DatastoreError } from '../errors.js';
import { TxnError, type TxnOp } from '../datastore/txn.js';
import { containsIP, tryParseIP, type Family } from '../net/cidr.js';
import { addressOf, allocateNext, checkBlock, ordinalsOf } from './block.js';
import type { PoolInfo } from './pools.js';
import type { AssignRequest, Assigned } from './types.js';
import { ownBlocks } from './affinity.js';
import { assignAuto, assignLocked, rolledBack, selectPools } from './assign.js';
import { allocationAttribute } from './allocate.js';
import { addressesOfHandle, getHandle, handleOp } from './handle-store.js';
import { getBlock, nodeAffinities, noteBlock } from './reads.js';
import { freeOps, noteFreed, releaseForHandle, releaseLocked } from './release.js';
import { asConflict, retry } from './retry.js';
import { exclusive, type IpamCore } from './core.js';
import {
  UNREAD,
  type BlockRes,
  type Ctx,
  type EarlyReads,
  type HandleRes,
  type PendingAssign,
  type PendingRelease,
} from './state.js';

/**
 * etcd refuses a Txn of more than 128 ops (--max-txn-ops): a batch writes per
 * request a handle and the caller's endpoint, plus the block.
 */
const MAX_BATCH_TXN = 60;

/**
 * Queue an assignment for the next lock acquisition. Requests that arrive
 * while a batch waits for the lock join it; only requests asking for the
 * same thing share a queue, so one set of reads and pool choices serves
 * all of them.
 */
export function enqueue(core: IpamCore, req: AssignRequest, early: EarlyReads): Promise<Assigned[]> {
  const key = JSON.stringify([
    core.lock?.id ?? null,
    req.node,
    req.assignIPv4,
    req.assignIPv6,
    req.ipv4Pools ?? [],
    req.ipv6Pools ?? [],
    req.fields ?? {},
  ]);
  return new Promise<Assigned[]>((resolve, reject) => {
    joinBatch(
      core,
      core.shared.of(core.ds).assigns,
      key,
      { req, early, resolve, reject, done: [] },
      req.node,
      (items) => assignBatchLocked(core, items),
    );
  });
}

/**
 * Queue `item` for the next acquisition of the lock: the first of a key
 * waits for the lock, whoever arrives meanwhile joins it, and `serve` gets
 * them all once the lock is held. Later arrivals start the next batch.
 */
function joinBatch<T extends { reject: (e: unknown) => void }>(
  core: IpamCore,
  queues: Map<string, T[]>,
  key: string,
  item: T,
  lockKey: string | undefined,
  serve: (items: T[]) => Promise<void>,
): void {
  const waiting = queues.get(key);
  if (waiting) {
    waiting.push(item);
    return;
  }
  const items = [item];
  queues.set(key, items);
  exclusive(core, lockKey, () => {
    if (queues.get(key) === items) queues.delete(key);
    return serve(items);
  }).catch((e) => {
    if (queues.get(key) === items) queues.delete(key);
    for (const it of items) it.reject(e);
  });
}

async function assignBatchLocked(core: IpamCore, items: PendingAssign[]): Promise<void> {
  if (items.length === 1) {
    const it = items[0]!;
    await assignLocked(core, it.req, [], it.early).then(it.resolve, it.reject);
    return;
  }
  const settled = await Promise.allSettled(items.map((it) => it.early));
  const batch: PendingAssign[] = [];
  let shared: [{ pools: PoolInfo[]; bad: string[] }, IPAMConfigSpec] | undefined;
  for (const [i, it] of items.entries()) {
    const r = settled[i]!;
    if (r.status === 'rejected') {
      it.reject(r.reason);
    } else if (r.value[2] && r.value[2] !== UNREAD) {
      // A retried ADD (its handle was read: it may live under its pre-exact name): the one-by-one path returns what it
      // holds.
      await assignLocked(core, it.req, [], it.early).then(it.resolve, it.reject);
    } else {
      shared ??= [r.value[0], r.value[1]];
      batch.push(it);
    }
  }
  if (!batch.length || !shared) return;
  if (batch.length === 1) {
    const it = batch[0]!;
    await assignLocked(core, it.req, [], it.early).then(it.resolve, it.reject);
    return;
  }
  const req = batch[0]!.req;
  const [{ pools, bad }, config] = shared;
  const affinities = await nodeAffinities(core, req.node);
  core.log.debug('ipam: serving a batch of assignments under the host lock', {
    node: req.node,
    size: batch.length,
    affinities: affinities.length,
  });
  const ctx: Ctx = { req, node: req.node, pools, badPools: bad, config, affinities, handle: undefined };
  for (const it of batch) it.ctx = { ...ctx, req: it.req, handle: undefined };
  const families = [req.assignIPv4 ? 4 : 0, req.assignIPv6 ? 6 : 0].filter(Boolean) as Family[];
  for (const family of families) {
    const last = family === families[families.length - 1];
    // A repeated ADD found by an earlier family's create guard goes one by
    // one: it returns what its handle holds instead of taking more.
    for (const it of batch) if (it.held && it.failed === undefined) await assignOneOfBatch(core, ctx, it, family, last);
    let queue = batch.filter((it) => it.failed === undefined && !it.held);
    while (queue.length) {
      let individual: PendingAssign[];
      try {
        ({ rest: queue, individual } = await batchFromOwnBlocks(
          core,
          ctx,
          family,
          queue,
          family === families[families.length - 1],
        ));
      } catch (e) {
        // Pool selection or a block read failed for the whole batch: each
        // request goes its own way (and reports its own error).
        core.log.debug('ipam: batch step failed; assigning one by one', { error: String(e) });
        // Those served before the failure keep their address.
        individual = queue.filter((it) => !it.done.some((d) => d.family === family));
        queue = [];
      }
      for (const it of individual) await assignOneOfBatch(core, ctx, it, family, last);
      // The node's blocks are full: one request the one-by-one way (it
      // claims a new block or borrows), then the rest as a batch again.
      const next = queue.shift();
      if (next) await assignOneOfBatch(core, ctx, next, family, last);
    }
  }
  const failed = batch.filter((it) => it.failed !== undefined);
  for (const it of batch) if (it.failed === undefined) it.resolve(it.done);
  for (const it of failed) {
    // A handle that did not exist before this batch: release all of it, which
    // also drops a count raised for an address not taken. One that did (a
    // repeated ADD): only what this batch gave it.
    const fresh = it.done.filter((d) => !d.held);
    try {
      if (!it.held) await releaseLocked(core, it.req.handleID);
      else if (fresh.length)
        await releaseForHandle(
          core,
          it.req.handleID,
          fresh.map((d) => d.ip),
        );
    } catch (re) {
      core.log.error('ipam: could not roll back a failed assignment', { handle: it.req.handleID, error: String(re) });
    }
    const e = it.failed;
    it.reject(fresh.length ? rolledBack(e, fresh) : e);
  }
}

/** Serve what fits in the node's own blocks, one transaction per block (per MAX_BATCH_TXN requests). */
async function batchFromOwnBlocks(
  core: IpamCore,
  ctx: Ctx,
  family: Family,
  queue: PendingAssign[],
  last: boolean,
): Promise<{ rest: PendingAssign[]; individual: PendingAssign[] }> {
  const { pools, ownFirst } = await selectPools(core, ctx, family);
  // With an explicit list the first pool's new block comes before the next
  // pool's own blocks, which the one-by-one path handles.
  const candidates = ownFirst ? pools : pools.slice(0, 1);
  let rest = queue;
  const individual: PendingAssign[] = [];
  for (const p of candidates) {
    if (!rest.length) break;
    for await (const first of ownBlocks(core, ctx, p)) {
      let b: BlockRes | undefined = first;
      while (b && rest.length) {
        const free = b.spec.allocations.filter((x) => x == null).length;
        if (!free) break;
        const take = rest.slice(0, Math.min(free, MAX_BATCH_TXN));
        const r = await allocateBatchIn(core, ctx, b, p, take, last);
        rest = [...r.unserved, ...rest.slice(take.length)];
        individual.push(...r.failed);
        if (r.served === 0) break;
        b = r.block;
      }
      if (!rest.length) break;
    }
  }
  return { rest, individual };
}

/**
 * One transaction for several requests: every request's handle (created:
 * the handle did not exist before the batch), the block's compare-and-swap
 * that takes all their addresses, and each request's piggybacked writes
 * when this is its last family. Returns the requests the block had no room
 * for and those that must go one by one (their own write's guard failed, or
 * the shared transaction failed).
 */
async function allocateBatchIn(
  core: IpamCore,
  ctx: Ctx,
  block: BlockRes,
  pool: PoolInfo,
  take: PendingAssign[],
  last: boolean,
): Promise<{ unserved: PendingAssign[]; failed: PendingAssign[]; served: number; block: BlockRes | undefined }> {
  const cidrText = block.spec.cidr;
  const c = checkBlock(block.spec);
  const timestamp = new Date().toISOString();
  let ready = [...take];
  const failed: PendingAssign[] = [];
  let cur: BlockRes | undefined = block;
  let got: Array<{ it: PendingAssign; ord: number }>;
  try {
    got = await retry(core, `allocating in IPAM block ${cidrText}`, async (attempt) => {
      if (attempt > 0) cur = await getBlock(core, cidrText);
      if (!cur || cur.spec.deleted) return [];
      checkBlock(cur.spec);
      const spec: IPAMBlockSpec = structuredClone(cur.spec);
      const out: Array<{ it: PendingAssign; ord: number }> = [];
      for (const it of ready) {
        const ord = allocateNext(spec, allocationAttribute(it.req, ctx.node, timestamp));
        if (ord === undefined) break;
        out.push({ it, ord });
      }
      if (!out.length) return [];
      // Who each op belongs to (undefined: the shared block write).
      const owner: Array<PendingAssign | undefined> = [];
      const ops: TxnOp[] = [];
      for (const { it } of out) {
        const hop = handleOp(it.ctx!, cidrText, ordinalsOf(cur.spec, it.req.handleID).length + 1);
        if (hop) {
          ops.push(hop);
          owner.push(it);
        }
      }
      const blockOp = ops.length;
      ops.push({ op: 'update', res: { ...cur, spec } });
      owner.push(undefined);
      const extraFrom = ops.length;
      for (const { it, ord } of out) {
        if (!last || !it.req.piggyback) continue;
        const ip = addressOf(c, ord);
        const x = await it.req.piggyback.ops(
          [...it.done, { address: `${ip}/${c.prefix}`, ip, family: c.family, pool: pool.name, block: cidrText }],
          false,
        );
        ops.push(...x);
        owner.push(...x.map(() => it));
      }
      let res: Array<Resource | undefined>;
      try {
        res = await core.ds.txn(ops);
      } catch (e) {
        const i = TxnError.opOf(e);
        const who = i === undefined ? undefined : owner[i];
        if (who && i! < blockOp) {
          // That request's own handle write failed (it exists after all, or
          // the write did not go through): it goes alone; the rest try again.
          core.log.debug('ipam: handle write failed in a batch; assigning that request alone', {
            handle: who.req.handleID,
            error: String(e),
          });
          ready = ready.filter((x) => x !== who);
          failed.push(who);
          throw new DatastoreError('Conflict', (e as Error).message, { cause: e });
        }
        // The block moved: re-read and try again. Anything else (a
        // piggybacked write's guard, an outage) sends the batch one by one.
        if (i === blockOp) asConflict(e);
        throw e;
      }
      for (const [i, o] of owner.entries()) if (o && i < blockOp) o.ctx!.handle = res[i] as HandleRes;
      cur = res[blockOp] as BlockRes;
      ctx.blocks?.set(cur.metadata.name, cur);
      noteBlock(core, cur);
      for (const { it } of out) {
        const idx = owner.flatMap((o, i) => (o === it && i >= extraFrom ? [i] : []));
        if (idx.length) it.req.piggyback!.committed(idx.map((i) => res[i]));
      }
      return out;
    });
  } catch (e) {
    // The shared write failed (or may have been applied without an answer):
    // each request is tried again on its own, which first looks for an
    // address its handle already holds.
    core.log.warn('ipam: batched block write failed; assigning its requests one by one', {
      block: cidrText,
      size: ready.length,
      error: String(e),
    });
    return { unserved: [], failed: [...failed, ...ready], served: 0, block: undefined };
  }
  for (const { it, ord } of got) {
    const ip = addressOf(c, ord);
    it.done.push({ address: `${ip}/${c.prefix}`, ip, family: c.family, pool: pool.name, block: cidrText });
  }
  const served = new Set(got.map((g) => g.it));
  // Nothing was written for these (the block filled up meanwhile): they move on.
  const unserved = ready.filter((it) => !served.has(it));
  return { unserved, failed, served: got.length, block: cur };
}

/** The one-by-one path for a member of a batch; records the outcome on it. */
async function assignOneOfBatch(
  core: IpamCore,
  ctx: Ctx,
  it: PendingAssign,
  family: Family,
  last: boolean,
): Promise<void> {
  const own: Ctx = {
    ...ctx,
    req: it.req,
    handle: undefined,
    capHit: undefined,
    ...(last && it.req.piggyback ? { piggy: { p: it.req.piggyback, before: it.done } } : {}),
  };
  try {
    own.handle = await getHandle(core, it.req.handleID);
    // A handle this batch did not write for the request existed before it:
    // a repeated ADD (the batch's create guard found it).
    if (own.handle && !it.ctx?.handle) it.held = true;
    // A failed shared write may have been applied after all: an address of
    // this family that the handle holds is this request's.
    const have = own.handle
      ? (await addressesOfHandle(core, own.handle)).find(
          (a) => a.family === family && !it.done.some((d) => d.ip === a.ip),
        )
      : undefined;
    if (have) {
      it.done.push({
        ...have,
        pool: ctx.pools.find((p) => containsIP(p.cidr, tryParseIP(have.ip)!))?.name ?? '',
        ...(it.held ? { held: true as const } : {}),
      });
      return;
    }
    it.done.push(await assignAuto(core, own, family));
  } catch (e) {
    it.failed = e;
  } finally {
    // Claims and repairs it made are the node's state for the rest of the batch.
    ctx.affinities = own.affinities;
    if (own.blocks) ctx.blocks = own.blocks;
    if (it.ctx) it.ctx.handle = own.handle;
  }
}

/**
 * Queue a release for the next lock acquisition (batching, as for
 * assignments): the releases that waited together are served by one
 * transaction per MAX_BATCH_TXN of them.
 */
export function enqueueRelease(core: IpamCore, item: Omit<PendingRelease, 'resolve' | 'reject'>): Promise<string[]> {
  return new Promise<string[]>((resolve, reject) => {
    // Without a host lock, batched releases still queue behind each other (per store) to meet in one batch.
    joinBatch(
      core,
      core.shared.of(core.ds).releases,
      String(core.lock?.id ?? null),
      { ...item, resolve, reject },
      core.lock ? undefined : 'releases',
      async (items) => {
        for (let i = 0; i < items.length; i += MAX_BATCH_TXN)
          await releaseBatchLocked(core, items.slice(i, i + MAX_BATCH_TXN));
      },
    );
  });
}

/**
 * Several releases in one transaction: every block they hold addresses in
 * (one compare-and-swap each, all their slots freed), their handles'
 * deletes and their extra writes. Any failure sends each release its own
 * way (releaseLocked, with its retries), which is idempotent.
 */
async function releaseBatchLocked(core: IpamCore, items: PendingRelease[]): Promise<void> {
  const one = async (it: PendingRelease) =>
    releaseLocked(core, it.handleID, it.early, it.opts).then(it.resolve, it.reject);
  if (items.length === 1) return one(items[0]!);
  try {
    const handles = await Promise.all(items.map((it) => it.early));
    const cidrs = [...new Set(handles.flatMap((h) => (h ? Object.keys(h.spec.block) : [])))];
    const blocks = (await Promise.all(cidrs.map((c) => getBlock(core, c)))).filter((b): b is BlockRes => !!b);
    const ops: TxnOp[] = items.flatMap((it) => it.opts.alsoWrite ?? []);
    const released = new Map<PendingRelease, string[]>(items.map((it) => [it, []]));
    const freed: Array<{ at: number; b: BlockRes; released: boolean }> = [];
    for (const b of blocks) {
      const c = checkBlock(b.spec);
      const ords: number[] = [];
      for (const [i, it] of items.entries()) {
        if (!handles[i]) continue;
        const mine = ordinalsOf(b.spec, it.handleID);
        ords.push(...mine);
        released.get(it)!.push(...mine.map((o) => addressOf(c, o)));
      }
      if (!ords.length) continue;
      const f = await freeOps(core, b, ords);
      freed.push({ at: ops.length, b, released: f.released });
      ops.push(...f.ops);
    }
    for (const h of handles)
      if (h)
        ops.push({ op: 'delete', kind: 'IPAMHandle', name: h.metadata.name, revision: h.metadata.resourceVersion! });
    const out = ops.length ? await core.ds.txn(ops) : [];
    for (const f of freed) noteFreed(core, f.b, f, out[f.at]);
    for (const it of items) it.resolve(released.get(it)!);
  } catch (e) {
    core.log.debug('ipam: batched release failed; releasing one by one', { size: items.length, error: String(e) });
    for (const it of items) await one(it);
  }
}
