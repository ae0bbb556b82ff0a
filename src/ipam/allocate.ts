// Taking one address in one block: the transaction that raises the handle's
// count and takes the slot together (see the invariant in allocator.ts); and
// the same for a block claimed in that very transaction.
import { API_VERSION, type AllocationAttribute, type IPAMBlockSpec, type Resource } from '../model/resources.js';
import { affinityName, blockName } from '../model/names.js';
import { DatastoreError } from '../errors.js';
import { TxnError, type TxnOp } from '../datastore/txn.js';
import { formatCidr, type Cidr } from '../net/cidr.js';
import { addressOf, allocateNext, allocateOrdinal, checkBlock, handleAt, newBlockSpec, ordinalsOf } from './block.js';
import { sameHandle } from './handle.js';
import { IpamError } from './errors.js';
import type { PoolInfo } from './pools.js';
import type { AssignRequest, Assigned } from './types.js';
import { HandleExists, getHandle, handleCreateLost, handleOp, lowerHandle } from './handle-store.js';
import { getBlock, noteBlock } from './reads.js';
import { asConflict, retry } from './retry.js';
import { hostAffinity, type IpamCore } from './core.js';
import type { AffRes, BlockRes, Ctx, HandleRes } from './state.js';

/** What a block records with an address it gives `req` on `node` (its handle and the request's attributes). */
export function allocationAttribute(
  req: AssignRequest,
  node: string,
  timestamp = new Date().toISOString(),
): AllocationAttribute {
  return { handle_id: req.handleID, secondary: { ...req.attrs, node, timestamp, handle: req.handleID } };
}

/**
 * Allocate one address in `block` for the request: one transaction that
 * raises the handle and takes the slot (compare-and-swap on both, plus the
 * caller's piggybacked writes when this is the request's last address).
 * `ordinal` asks for a specific address. Returns undefined when the block
 * turned out full, deleted or gone (the caller moves on).
 */
export async function allocateIn(
  core: IpamCore,
  ctx: Ctx,
  block: BlockRes,
  pool: PoolInfo,
  ordinal?: number,
): Promise<Assigned | undefined> {
  const handleID = ctx.req.handleID;
  const attr = allocationAttribute(ctx.req, ctx.node);
  let cur: BlockRes | undefined = block;
  // Slots the handle held before this call: a new one found on a retry was
  // taken by an earlier attempt whose later ops failed (ordered writes).
  const before = new Set(ordinalsOf(block.spec, handleID));
  let tried = false;
  let extraFailed = false;
  let held = 0;
  const result = await retry(core, `allocating in IPAM block ${block.spec.cidr}`, async (attempt) => {
    if (attempt > 0)
      [cur, ctx.handle] = await Promise.all([getBlock(core, block.spec.cidr), getHandle(core, handleID)]);
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
        const pod =
          owner?.secondary?.namespace && owner.secondary.pod
            ? `, pod ${owner.secondary.namespace}/${owner.secondary.pod}`
            : '';
        throw new IpamError(
          'address-taken',
          `${ip} is already assigned (${who}${pod}); choose a free address or release it first`,
        );
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
    const got: Assigned = {
      address: `${ip}/${cidr.prefix}`,
      ip,
      family: cidr.family,
      pool: pool.name,
      block: cur.spec.cidr,
    };
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

/**
 * Claim a block that does not exist yet and take its first address in one
 * transaction: the node's affinity (confirmed), the block (holding the
 * address), the handle and the caller's piggybacked writes. Only on a store
 * whose transactions are all or nothing (etcd, memory): a claim then never
 * exists half made, and an ADD that claims a block is still one write.
 * Returns 'two-phase' when a guard failed (the block or its affinity exists:
 * another node won the block, or a claim of ours crashed half way; or a
 * piggybacked write's guard): the caller takes the two-phase claim
 * (affinity.ts), which sorts each of those out. A store without atomic
 * transactions (Kubernetes: ordered writes that could stop between them)
 * always takes the two-phase claim.
 */
export async function claimAndAllocate(
  core: IpamCore,
  ctx: Ctx,
  cidr: Cidr,
  pool: PoolInfo,
): Promise<Assigned | 'two-phase'> {
  if (!core.ds.atomicTxn) return 'two-phase';
  const handleID = ctx.req.handleID;
  const text = formatCidr(cidr);
  const spec = newBlockSpec(cidr, text, hostAffinity(ctx.node));
  const ord = allocateNext(spec, allocationAttribute(ctx.req, ctx.node));
  if (ord === undefined) return 'two-phase';
  const ip = addressOf(cidr, ord);
  const got: Assigned = { address: `${ip}/${cidr.prefix}`, ip, family: cidr.family, pool: pool.name, block: text };
  const hop = handleOp(ctx, text, 1);
  const aff: AffRes = {
    apiVersion: API_VERSION,
    kind: 'BlockAffinity',
    metadata: { name: affinityName(ctx.node, text) },
    spec: { state: 'confirmed', node: ctx.node, cidr: text },
  };
  const block: BlockRes = { apiVersion: API_VERSION, kind: 'IPAMBlock', metadata: { name: blockName(text) }, spec };
  const piggy = ctx.piggy;
  const extra = piggy ? await piggy.p.ops([...piggy.before, got], false) : [];
  const ops: TxnOp[] = [...(hop ? [hop] : []), { op: 'create', res: aff }, { op: 'create', res: block }, ...extra];
  let out: Array<Resource | undefined>;
  try {
    out = await core.ds.txn(ops);
  } catch (e) {
    if (hop && handleCreateLost(hop, 0, e)) throw new HandleExists(`IPAM handle ${handleID} exists`);
    if (
      TxnError.opOf(e) === undefined ||
      !DatastoreError.is(e) ||
      !['AlreadyExists', 'Conflict', 'NotFound'].includes(e.kind)
    )
      throw e;
    core.log.debug('ipam: one-transaction block claim refused; claiming in two phases', {
      block: text,
      error: String(e),
    });
    return 'two-phase';
  }
  let i = 0;
  if (hop) ctx.handle = out[i++] as HandleRes;
  ctx.affinities.push(out[i++] as AffRes);
  const stored = out[i++] as BlockRes;
  ctx.blocks?.set(stored.metadata.name, stored);
  noteBlock(core, stored);
  if (piggy && extra.length) piggy.p.committed(out.slice(ops.length - extra.length));
  core.log.info('ipam: claimed block', { block: text, node: ctx.node });
  return got;
}
