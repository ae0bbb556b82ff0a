// Block affinity: a node's claim on a block. A claim is two-phase (a pending
// BlockAffinity, the block created with the node's affinity, the affinity
// confirmed), so a crash between the steps leaves a pending affinity that the
// next walk over the node's blocks confirms (the block is ours) or removes.
import { DatastoreError } from '../errors.js';
import { API_VERSION, type BlockAffinitySpec } from '../model/resources.js';
import { affinityName, blockName } from '../model/names.js';
import { containsCidr, formatCidr, tryParseCidr, type Cidr, type Family } from '../net/cidr.js';
import { newBlockSpec } from './block.js';
import type { PoolInfo } from './pools.js';
import { getBlock, noteBlock, fullSet } from './reads.js';
import { retry } from './retry.js';
import { hostAffinity, isKind, type IpamCore } from './core.js';
import type { AffRes, BlockRes, Ctx } from './state.js';

async function deleteAffinity(core: IpamCore, aff: AffRes): Promise<void> {
  try {
    await core.ds.delete('BlockAffinity', aff.metadata.name, { revision: aff.metadata.resourceVersion });
  } catch (e) {
    if (isKind(e, 'NotFound') || isKind(e, 'Conflict')) return;
    throw e;
  }
}

async function confirmAffinity(core: IpamCore, aff: AffRes, node: string, cidrText: string): Promise<AffRes> {
  return retry(core, `confirming block affinity ${aff.metadata.name}`, async (attempt) => {
    let cur: AffRes | undefined = aff;
    if (attempt > 0) {
      try {
        cur = await core.ds.get('BlockAffinity', aff.metadata.name);
      } catch (e) {
        if (!isKind(e, 'NotFound')) throw e;
        cur = undefined;
      }
    }
    if (!cur) {
      // Removed by a cleanup that thought the claim was abandoned: the
      // block is ours, so record the affinity again.
      return core.ds.create<'BlockAffinity'>({
        apiVersion: API_VERSION,
        kind: 'BlockAffinity',
        metadata: { name: affinityName(node, cidrText) },
        spec: { state: 'confirmed', node, cidr: cidrText },
      });
    }
    if (cur.spec.state === 'confirmed') return cur;
    try {
      return await core.ds.update({ ...cur, spec: { ...cur.spec, state: 'confirmed' } });
    } catch (e) {
      // Removed meanwhile: read again (and record it again, above).
      if (isKind(e, 'NotFound')) throw goneWhileClaimed(cur.metadata.name, e);
      throw e;
    }
  });
}

/**
 * Correctness rests on compare-and-swap alone (docs/ipam.md), so two claims
 * of one node may meet (the host lock is only an optimisation): an affinity of
 * ours that the other claim removes between our read and our write (it lost
 * its block race) is a conflict to retry, not a failure.
 */
function goneWhileClaimed(name: string, cause: unknown): DatastoreError {
  return new DatastoreError(
    'Conflict',
    `block affinity ${name} was removed by another claim of this node; re-read and retry`,
    { cause },
  );
}

async function createPendingAffinity(core: IpamCore, node: string, cidrText: string): Promise<AffRes> {
  const spec: BlockAffinitySpec = { state: 'pending', node, cidr: cidrText };
  const name = affinityName(node, cidrText);
  return retry(core, `creating block affinity ${name}`, async () => {
    try {
      return await core.ds.create<'BlockAffinity'>({
        apiVersion: API_VERSION,
        kind: 'BlockAffinity',
        metadata: { name },
        spec,
      });
    } catch (e) {
      if (!isKind(e, 'AlreadyExists')) throw e;
    }
    // Our own leftover (the name contains our node): a claim that crashed.
    try {
      return await core.ds.get('BlockAffinity', name);
    } catch (e) {
      if (isKind(e, 'NotFound')) throw goneWhileClaimed(name, e);
      throw e;
    }
  });
}

/**
 * Two-phase claim of a block that does not exist yet: pending affinity,
 * create the block (AlreadyExists: another node won), confirm. Returns the
 * block, or undefined when another node got it.
 */
export async function claimNewBlock(core: IpamCore, ctx: Ctx, cidr: Cidr): Promise<BlockRes | undefined> {
  const text = formatCidr(cidr);
  const aff = await createPendingAffinity(core, ctx.node, text);
  let block: BlockRes;
  try {
    block = await core.ds.create<'IPAMBlock'>({
      apiVersion: API_VERSION,
      kind: 'IPAMBlock',
      metadata: { name: blockName(text) },
      spec: newBlockSpec(cidr, text, hostAffinity(ctx.node)),
    });
  } catch (e) {
    if (!isKind(e, 'AlreadyExists')) throw e;
    const other = await getBlock(core, text);
    if (other && other.spec.affinity === hostAffinity(ctx.node)) {
      block = other; // our own earlier claim that crashed before confirming
    } else {
      core.log.debug('ipam: lost the race for a block', { block: text, winner: other?.spec.affinity });
      await deleteAffinity(core, aff);
      if (other) ctx.blocks?.set(other.metadata.name, other);
      return undefined;
    }
  }
  const confirmed = await confirmAffinity(core, aff, ctx.node, text);
  ctx.affinities.push(confirmed);
  ctx.blocks?.set(block.metadata.name, block);
  core.log.info('ipam: claimed block', { block: text, node: ctx.node });
  return block;
}

/** Claim an existing block that has no affinity (created for an explicit address, or its node went away). */
export async function claimUnaffineBlock(core: IpamCore, ctx: Ctx, block: BlockRes): Promise<BlockRes | undefined> {
  const text = block.spec.cidr;
  const aff = await createPendingAffinity(core, ctx.node, text);
  let cur: BlockRes | undefined = block;
  const got = await retry(core, `claiming block ${text}`, async (attempt) => {
    if (attempt > 0) cur = await getBlock(core, text);
    if (!cur || cur.spec.deleted) return undefined;
    if (cur.spec.affinity === hostAffinity(ctx.node)) return cur;
    if (cur.spec.affinity !== null) return undefined;
    return core.ds.update({ ...cur, spec: { ...cur.spec, affinity: hostAffinity(ctx.node) } });
  });
  if (!got) {
    await deleteAffinity(core, aff);
    return undefined;
  }
  ctx.affinities.push(await confirmAffinity(core, aff, ctx.node, text));
  ctx.blocks?.set(got.metadata.name, got);
  return got;
}

function ownAffinities(ctx: Ctx, family: Family): AffRes[] {
  return ctx.affinities.filter((a) => a.spec.node === ctx.node && a.spec.cidr.includes(':') === (family === 6));
}

/**
 * The node's blocks inside `pool`, in address order. Repairs what a crash
 * can leave behind: a pending affinity (confirm it when the block is ours,
 * drop it otherwise) and an affinity whose block is gone.
 */
export async function* ownBlocks(core: IpamCore, ctx: Ctx, pool: PoolInfo): AsyncGenerator<BlockRes> {
  const mine = ownAffinities(ctx, pool.cidr.family)
    .map((a) => ({ a, c: tryParseCidr(a.spec.cidr) }))
    .filter((x): x is { a: AffRes; c: Cidr } => !!x.c && containsCidr(pool.cidr, x.c))
    .sort((x, y) => (x.c.base < y.c.base ? -1 : x.c.base > y.c.base ? 1 : 0));
  const live = mine.filter((x) => x.a.spec.state !== 'pendingDeletion');
  // The agent reads the blocks it last saw full only when the others have no room.
  const full = core.batch ? fullSet(core) : undefined;
  const isFull = (x: { a: AffRes }) => !!full?.has(blockName(x.a.spec.cidr));
  for (const group of [live.filter((x) => !isFull(x)), live.filter(isFull)]) {
    if (!group.length) continue;
    // Read them in one round trip: a node usually holds one or two per pool.
    const got = await Promise.all(
      group.map(({ a }) => ctx.blocks?.get(blockName(a.spec.cidr)) ?? getBlock(core, a.spec.cidr)),
    );
    for (const [i, { a }] of group.entries()) {
      const b = got[i];
      if (!b || b.spec.affinity !== hostAffinity(ctx.node)) {
        core.log.info('ipam: removing stale block affinity', {
          affinity: a.metadata.name,
          block: b?.spec.affinity ?? 'missing',
        });
        await deleteAffinity(core, a);
        ctx.affinities = ctx.affinities.filter((x) => x !== a);
        continue;
      }
      if (a.spec.state === 'pending') {
        const c = await confirmAffinity(core, a, ctx.node, a.spec.cidr);
        ctx.affinities = ctx.affinities.map((x) => (x === a ? c : x));
      }
      noteBlock(core, b);
      yield b;
    }
  }
}

function heldBlocks(ctx: Ctx, family: Family): number {
  return ownAffinities(ctx, family).filter((a) => a.spec.state !== 'pendingDeletion').length;
}

export function canClaim(ctx: Ctx, family: Family): boolean {
  if (ctx.config.autoAllocateBlocks === false) return false;
  const max = ctx.config.maxBlocksPerHost ?? 0;
  if (max > 0) {
    const held = heldBlocks(ctx, family);
    if (held >= max) {
      ctx.capHit = { family, held, max };
      return false;
    }
  }
  return true;
}
