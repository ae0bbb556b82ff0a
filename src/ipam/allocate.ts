// Taking one address in one block: the transaction that raises the handle's
// count and takes the slot together (see the invariant in allocator.ts).
import type { AllocationAttribute, IPAMBlockSpec, Resource } from '../model/resources.js';
import { TxnError, type TxnOp } from '../datastore/txn.js';
import { addressOf, allocateNext, allocateOrdinal, checkBlock, handleAt, ordinalsOf } from './block.js';
import { sameHandle } from './handle.js';
import { IpamError } from './errors.js';
import type { PoolInfo } from './pools.js';
import type { Assigned } from './types.js';
import { HandleExists, getHandle, handleCreateLost, handleOp, lowerHandle } from './handle-store.js';
import { getBlock, noteBlock } from './reads.js';
import { asConflict, retry } from './retry.js';
import type { BlockRes, Ctx, HandleRes, IpamCore } from './core.js';

/**
 * Allocate one address in `block` for the request: one transaction that
 * raises the handle and takes the slot (compare-and-swap on both, plus the
 * caller's piggybacked writes when this is the request's last address).
 * `ordinal` asks for a specific address. Returns undefined when the block
 * turned out full, deleted or gone (the caller moves on).
 */
export async function allocateIn(core: IpamCore, ctx: Ctx, block: BlockRes, pool: PoolInfo, ordinal?: number): Promise<Assigned | undefined> {
  const handleID = ctx.req.handleID;
  const attr: AllocationAttribute = {
    handle_id: handleID,
    secondary: { ...ctx.req.attrs, node: ctx.node, timestamp: new Date().toISOString(), handle: handleID },
  };
  let cur: BlockRes | undefined = block;
  // Slots the handle held before this call: a new one found on a retry was
  // taken by an earlier attempt whose later ops failed (ordered writes).
  const before = new Set(ordinalsOf(block.spec, handleID));
  let tried = false;
  let extraFailed = false;
  let held = 0;
  const result = await retry(core, `allocating in IPAM block ${block.spec.cidr}`, async (attempt) => {
    if (attempt > 0) [cur, ctx.handle] = await Promise.all([getBlock(core, block.spec.cidr), getHandle(core, handleID)]);
    // A block that changed hands between attempts (its affinity moved to
    // another node) is no longer the one the caller chose: move on.
    if (!cur || cur.spec.deleted || cur.spec.affinity !== block.spec.affinity) return undefined;
    const cidr = checkBlock(cur.spec);
    const mine = ordinalsOf(cur.spec, handleID);
    held = mine.length;
    let ord: number | undefined = mine.find((o) => !before.has(o) && (ordinal === undefined || o === ordinal));
    let spec: IPAMBlockSpec | undefined;
    if (ord === undefined && ordinal !== undefined) {
      const owner = handleAt(cur.spec, ordinal);
      if (cur.spec.allocations[ordinal] != null) {
        const ip = addressOf(cidr, ordinal);
        if (owner && sameHandle(owner.handle_id, handleID)) {
          // Same container asking again (a retried ADD): the address is already its own.
          return { ip, ord: ordinal, cidr };
        }
        const who = owner?.handle_id ? `handle ${owner.handle_id}` : 'reserved, no handle';
        const pod = owner?.secondary?.namespace && owner.secondary.pod ? `, pod ${owner.secondary.namespace}/${owner.secondary.pod}` : '';
        throw new IpamError('address-taken', `${ip} is already assigned (${who}${pod}); choose a free address or release it first`);
      }
      spec = structuredClone(cur.spec);
      allocateOrdinal(spec, ordinal, attr);
      ord = ordinal;
    } else if (ord === undefined) {
      spec = structuredClone(cur.spec);
      ord = allocateNext(spec, attr);
      if (ord === undefined) return undefined;
    }
    const ip = addressOf(cidr, ord);
    // The handle counts the address in the very write that takes it: there
    // is no moment at which the address exists without its handle.
    const hop = handleOp(ctx, cur.spec.cidr, spec ? held + 1 : held);
    const ops: TxnOp[] = [...(hop ? [hop] : []), ...(spec ? [{ op: 'update' as const, res: { ...cur, spec } }] : [])];
    const piggy = ctx.piggy;
    const got: Assigned = { address: `${ip}/${cidr.prefix}`, ip, family: cidr.family, pool: pool.name, block: cur.spec.cidr };
    const extra = piggy ? await piggy.p.ops([...piggy.before, got], extraFailed) : [];
    ops.push(...extra);
    if (!ops.length) return { ip, ord, cidr };
    tried = true;
    let out: Array<Resource | undefined>;
    try {
      out = await core.ds.txn(ops);
    } catch (e) {
      // The handle existed after all: the caller returns what it holds.
      if (hop && handleCreateLost(hop, 0, e)) throw new HandleExists(`IPAM handle ${handleID} exists`);
      const i = TxnError.opOf(e);
      if (i !== undefined && i >= ops.length - extra.length) extraFailed = true;
      asConflict(e);
    }
    if (hop) ctx.handle = out[0] as HandleRes;
    if (spec) {
      const stored = out[hop ? 1 : 0] as BlockRes;
      ctx.blocks?.set(cur.metadata.name, stored);
      noteBlock(core, stored);
    }
    if (piggy && extra.length) piggy.p.committed(out.slice(ops.length - extra.length));
    return { ip, ord, cidr };
  });
  if (!result) {
    // Ordered writes (Kubernetes) may have raised the handle before a block
    // write that lost: put the count back to what the block really holds
    // (harmless if skipped: the next release by this handle fixes it).
    if (tried) ctx.handle = await lowerHandle(core, handleID, block.spec.cidr, held, ctx.handle);
    return undefined;
  }
  return {
    address: `${result.ip}/${result.cidr.prefix}`,
    ip: result.ip,
    family: result.cidr.family,
    pool: pool.name,
    block: block.spec.cidr,
  };
}
