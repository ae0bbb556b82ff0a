// Assignment, one request at a time, under the lock: pool choice, the
// node's own blocks first, then a new block, then (strictAffinity off) a free
// address in another node's block; or exactly the requested address.
// Dual-stack is all-or-nothing.
import { blockName } from '../model/names.js';
import { API_VERSION } from '../model/resources.js';
import {
  containsCidr,
  containsIP,
  enclosing,
  formatCidr,
  formatIP,
  ordinalOf,
  splitBlocks,
  tryParseCidr,
  tryParseIP,
  type Family,
  type IP,
} from '../net/cidr.js';
import { newBlockSpec } from './block.js';
import { IpamError } from './errors.js';
import { checkPoolUse, choosePools, describePools, type PoolInfo } from './pools.js';
import type { AssignRequest, Assigned } from './types.js';
import { allocateIn, claimAndAllocate } from './allocate.js';
import { canClaim, claimNewBlock, claimUnaffineBlock, ownBlocks } from './affinity.js';
import { HandleExists, addressesOfHandle, getHandle } from './handle-store.js';
import { getBlock, labelsOf, loadBlocks, loadConfig, loadPools, nodeAffinities } from './reads.js';
import { releaseForHandle, releaseLocked } from './release.js';
import { hostAffinity, isKind, type IpamCore } from './core.js';
import { UNREAD, type BlockRes, type Ctx, type EarlyReads } from './state.js';
import { handleName, legacyHandleName } from './handle.js';

/**
 * A failure of one family after the other family got its address: that
 * address was released again (dual-stack is all-or-nothing), and the error
 * says so. Only the IPAM's own errors are reworded.
 */
export function rolledBack(e: unknown, released: Assigned[]): unknown {
  if (!(e instanceof IpamError)) return e;
  return new IpamError(
    e.kind,
    `${e.message} (the ${released.map((d) => `IPv${d.family} address ${d.ip}`).join(' and ')} assigned in the same ` +
      `request was released: dual-stack assignment is all-or-nothing)`,
  );
}

async function fromOwnBlocks(core: IpamCore, ctx: Ctx, pool: PoolInfo): Promise<Assigned | undefined> {
  for await (const b of ownBlocks(core, ctx, pool)) {
    if (!b.spec.allocations.some((x) => x == null)) continue;
    const got = await allocateIn(core, ctx, b, pool);
    if (got) return got;
  }
  return undefined;
}

async function fromNewBlock(core: IpamCore, ctx: Ctx, pool: PoolInfo): Promise<Assigned | undefined> {
  if (!canClaim(ctx, pool.cidr.family)) return undefined;
  const blocks = await loadBlocks(core, ctx);
  for (const c of splitBlocks(pool.cidr, pool.blockSize)) {
    const name = blockName(formatCidr(c));
    const existing = blocks.get(name);
    let b: BlockRes | undefined;
    if (!existing) {
      // The claim and the address in one write where the store allows it.
      const got = await claimAndAllocate(core, ctx, c, pool);
      if (got !== 'two-phase') return got;
      b = await claimNewBlock(core, ctx, c);
    } else if (
      existing.spec.affinity === null &&
      !existing.spec.deleted &&
      existing.spec.allocations.some((x) => x == null)
    ) {
      b = await claimUnaffineBlock(core, ctx, existing);
    }
    if (!b) continue;
    const got = await allocateIn(core, ctx, b, pool);
    if (got) return got;
    if (!canClaim(ctx, pool.cidr.family)) return undefined;
  }
  return undefined;
}

/** Take a free address from a block that is not ours (strictAffinity off). */
async function borrow(core: IpamCore, ctx: Ctx, pool: PoolInfo): Promise<Assigned | undefined> {
  if (ctx.config.strictAffinity) return undefined;
  const blocks = [...(await loadBlocks(core, ctx)).values()].filter((b) => {
    const c = tryParseCidr(b.spec.cidr);
    return (
      c &&
      containsCidr(pool.cidr, c) &&
      b.spec.affinity !== hostAffinity(ctx.node) &&
      !b.spec.deleted &&
      b.spec.allocations.some((x) => x == null)
    );
  });
  // Start at a random block so borrowers on different nodes spread out
  // instead of all fighting over the first one.
  const start = blocks.length ? Math.floor(Math.random() * blocks.length) : 0;
  for (let i = 0; i < blocks.length; i++) {
    const b = blocks[(start + i) % blocks.length]!;
    const got = await allocateIn(core, ctx, b, pool);
    if (got) {
      core.log.debug("ipam: borrowed an address from another node's block", {
        block: b.spec.cidr,
        owner: b.spec.affinity,
        ip: got.ip,
      });
      return got;
    }
  }
  return undefined;
}

/**
 * The pools an automatic assignment of `family` may use, in order, and
 * whether the order is automatic (own blocks in any pool come first) or
 * the request's explicit list. Throws when no pool qualifies.
 */
export async function selectPools(
  core: IpamCore,
  ctx: Ctx,
  family: Family,
): Promise<{ pools: PoolInfo[]; ownFirst: boolean }> {
  const fields = ctx.req.fields ?? {};
  const explicit = family === 4 ? ctx.req.ipv4Pools : ctx.req.ipv6Pools;
  const field = (family === 4 ? fields.ipv4Pools : fields.ipv6Pools) ?? (family === 4 ? 'ipv4_pools' : 'ipv6_pools');
  const pools = await choosePools({
    family,
    pools: ctx.pools,
    explicit,
    field,
    node: ctx.node,
    labels: () => labelsOf(core, ctx),
    badPools: ctx.badPools,
    use: ctx.req.use ?? 'Workload',
  });
  return { pools, ownFirst: !explicit?.length };
}

export async function assignAuto(core: IpamCore, ctx: Ctx, family: Family): Promise<Assigned> {
  const { pools, ownFirst } = await selectPools(core, ctx, family);
  if (ownFirst) {
    // Without an explicit order, use blocks the node already holds in any
    // selected pool before claiming a new one anywhere.
    for (const p of pools) {
      const got = await fromOwnBlocks(core, ctx, p);
      if (got) return got;
    }
  }
  for (const p of pools) {
    const got =
      (ownFirst ? undefined : await fromOwnBlocks(core, ctx, p)) ??
      (await fromNewBlock(core, ctx, p)) ??
      (await borrow(core, ctx, p));
    if (got) return got;
  }
  if (ctx.capHit && ctx.capHit.family === family) {
    const { held, max } = ctx.capHit;
    throw new IpamError(
      'exhausted',
      `node '${ctx.node}' already holds ${held} IPv${family} blocks (IPAMConfig maxBlocksPerHost=${max}) and they ` +
        `are full${ctx.config.strictAffinity ? '' : ', and no other block has a free address'}; raise it or free ` +
        `addresses`,
    );
  }
  const strict = ctx.config.strictAffinity
    ? ' (IPAMConfig strictAffinity is on, so blocks of other nodes are not used)'
    : '';
  const noAuto = ctx.config.autoAllocateBlocks === false ? ' (IPAMConfig autoAllocateBlocks is off)' : '';
  throw new IpamError(
    'exhausted',
    `no free IPv${family} address for node '${ctx.node}' in pool${pools.length > 1 ? 's' : ''} ` +
      `${pools.map((p) => `${p.name} (${p.cidrText})`).join(', ')}: exhausted${strict}${noAuto}; add a pool or free ` +
      `addresses`,
  );
}

async function assignSpecific(core: IpamCore, ctx: Ctx, ip: IP, text: string): Promise<Assigned> {
  const field = ctx.req.fields?.requestedIPs ?? 'IP';
  const canonical = formatIP(ip);
  const containing = ctx.pools.filter((p) => containsIP(p.cidr, ip));
  const pool = containing.find((p) => !p.disabled);
  if (!pool) {
    if (containing.length) {
      throw new IpamError(
        'address-not-in-pool',
        `${field}: ${canonical} is in pool ${containing[0]!.name} (${containing[0]!.cidrText}), which is disabled; ` +
          `disabled pools give out no new addresses`,
      );
    }
    throw new IpamError(
      'address-not-in-pool',
      `${field}: ${text} is not in a configured pool (pools: ${describePools(ctx.pools)}); request an address inside ` +
        `an IPPool`,
    );
  }
  checkPoolUse(pool, ctx.req.use ?? 'Workload', field, canonical);
  const blockCidr = enclosing(ip, pool.blockSize);
  const blockText = formatCidr(blockCidr);
  const ord = ordinalOf(blockCidr, ip);
  for (let round = 0; round < core.maxRetries; round++) {
    let b = await getBlock(core, blockText);
    if (!b) {
      // Claim the block for this node when allowed (the pod lives here, so
      // the block's routes point the right way); otherwise create it
      // unaffine: an explicit address is always allowed, even at the cap.
      if (canClaim(ctx, ip.family)) b = await claimNewBlock(core, ctx, blockCidr);
      else {
        try {
          b = await core.ds.create<'IPAMBlock'>({
            apiVersion: API_VERSION,
            kind: 'IPAMBlock',
            metadata: { name: blockName(blockText) },
            spec: newBlockSpec(blockCidr, blockText, null),
          });
        } catch (e) {
          if (!isKind(e, 'AlreadyExists')) throw e;
        }
      }
      b ??= await getBlock(core, blockText);
      if (!b) continue;
    }
    const got = await allocateIn(core, ctx, b, pool, ord);
    if (got) return got;
    // The block was deleted under us (an empty block being released): go round.
  }
  throw new IpamError(
    'conflict-retries-exhausted',
    `${field}: could not allocate ${canonical}: its block ${blockText} kept changing; try again`,
  );
}

/** A request's specific addresses, parsed (at most one per family). */
type Requested = Array<{ ip: IP; text: string }>;

/**
 * Check a request before it waits for anything, and start the reads that need
 * no lock. Throws 'missing-handle' or 'invalid-request'.
 */
export function prepareAssign(core: IpamCore, req: AssignRequest): { requested: Requested; early: EarlyReads } {
  if (!req.handleID)
    throw new IpamError('missing-handle', 'IPAM handle ID is empty (network name and CNI_CONTAINERID are both needed)');
  if (!req.node) throw new IpamError('invalid-request', "node name is empty: set 'nodename' in the netconf");
  const field = req.fields?.requestedIPs ?? 'IP';
  const requested: Requested = [];
  for (const raw of req.requestedIPs ?? []) {
    const text = raw.trim();
    if (!text) continue;
    const ip = tryParseIP(text);
    if (!ip) throw new IpamError('invalid-request', `${field}: '${text}' is not an IPv4 or IPv6 address`);
    if (requested.some((r) => r.ip.family === ip.family)) {
      throw new IpamError(
        'invalid-request',
        `${field}: more than one IPv${ip.family} address requested ` +
          `(${requested.find((r) => r.ip.family === ip.family)!.text}, ${text}); give at most one IPv4 and one IPv6 ` +
          `address`,
      );
    }
    requested.push({ ip, text });
  }
  if (!requested.length && !req.assignIPv4 && !req.assignIPv6) {
    throw new IpamError(
      'invalid-request',
      'ipam: assign_ipv4 and assign_ipv6 are both "false": nothing to assign; set one to "true"',
    );
  }
  // Reads that need no lock start before waiting for it: pools and config
  // change only by operator action. This also opens the datastore connection
  // outside the lock, so holders keep it for less time. The handle is not
  // read (its create's guard finds a repeated ADD, see assignLocked), unless
  // it may still live under its pre-exact name, which that guard cannot see.
  const legacy = legacyHandleName(req.handleID) !== handleName(req.handleID);
  const early = Promise.all([
    loadPools(core),
    loadConfig(core),
    legacy ? getHandle(core, req.handleID) : UNREAD,
  ] as const);
  early.catch(() => undefined); // awaited later; do not let a failure go unhandled while we wait
  return { requested, early };
}

/**
 * Assign under the lock, one request. Dual-stack is all-or-nothing: when one
 * family fails, what the other got in this call is released again.
 *
 * The handle is not read first (unless it may live under its pre-exact name):
 * the first transaction creates it, guarded by its absence. A repeated ADD
 * (the handle exists) fails that guard, writes nothing, and is answered with
 * what the handle holds, read then.
 */
export async function assignLocked(
  core: IpamCore,
  req: AssignRequest,
  requested: Requested,
  early: EarlyReads,
): Promise<Assigned[]> {
  // Affinities are what the node's own writers change: read them under the lock.
  const [[{ pools, bad }, config, handle], affinities] = await Promise.all([early, nodeAffinities(core, req.node)]);
  core.log.debug('ipam: state read under the host lock', { handle: req.handleID, affinities: affinities.length });
  const unread = handle === UNREAD;
  const ctx: Ctx = {
    req,
    node: req.node,
    pools,
    badPools: bad,
    config,
    affinities,
    handle: unread ? undefined : handle,
  };
  try {
    return await assignFor(core, ctx, requested, !unread);
  } catch (e) {
    if (!unread) throw e;
    // The handle was assumed new. A lost create guard says it exists; any
    // other failure before this call wrote a handle may be a repeated ADD too
    // (a full pool, say): what the handle holds answers it, as if it had been
    // read first.
    const h = await getHandle(core, req.handleID);
    const held = h ? await addressesOfHandle(core, h) : [];
    if (h && (held.length || e instanceof HandleExists)) {
      core.log.debug('ipam: the handle exists (a repeated ADD): returning what it holds', {
        handle: req.handleID,
        held: held.map((a) => a.ip),
      });
      ctx.handle = h;
      return assignFor(core, ctx, requested, true);
    }
    if (e instanceof HandleExists) {
      // Created and deleted again between the guard and the read: only a concurrent call for the same container does
      // that.
      throw new IpamError(
        'conflict-retries-exhausted',
        `IPAM handle ${req.handleID} is being created and deleted concurrently (two ADD/DEL of one container at ` +
          `once?); try again`,
      );
    }
    // A handle without addresses: left by this call's ordered writes (Kubernetes) or a crash; it goes.
    if (h) await releaseLocked(core, req.handleID).catch(() => undefined);
    throw e;
  }
}

/** assignLocked's work for the handle as `ctx.handle` has it (undefined: assumed new, its create guards that). */
async function assignFor(core: IpamCore, ctx: Ctx, requested: Requested, cleanup: boolean): Promise<Assigned[]> {
  const { req, pools } = ctx;
  const families: Family[] = requested.length
    ? requested.map((r) => r.ip.family)
    : ([req.assignIPv4 ? 4 : 0, req.assignIPv6 ? 6 : 0].filter(Boolean) as Family[]);
  // A retried ADD for the same container gets what it already holds.
  const existing = ctx.handle ? await addressesOfHandle(core, ctx.handle) : [];
  const done: Assigned[] = [];
  try {
    for (const family of families) {
      const want = requested.find((r) => r.ip.family === family);
      const have = existing.find((a) => a.family === family && (!want || a.ip === formatIP(want.ip)));
      if (have) {
        done.push({
          ...have,
          pool: pools.find((p) => containsIP(p.cidr, { family, value: tryParseIP(have.ip)!.value }))?.name ?? '',
          held: true,
        });
        continue;
      }
      // The caller's writes go with the request's last address.
      if (req.piggyback && family === families[families.length - 1])
        ctx.piggy = { p: req.piggyback, before: [...done] };
      done.push(want ? await assignSpecific(core, ctx, want.ip, want.text) : await assignAuto(core, ctx, family));
    }
    return done;
  } catch (e) {
    // The handle's create lost its guard: this call wrote nothing (the create
    // is its first transaction), and what the handle holds is not ours to undo.
    if (e instanceof HandleExists) throw e;
    const fresh = done.filter((d) => !existing.some((x) => x.ip === d.ip));
    if (fresh.length) {
      try {
        await releaseForHandle(
          core,
          req.handleID,
          fresh.map((d) => d.ip),
        );
      } catch (re) {
        core.log.error('ipam: could not roll back a partial dual-stack assignment', {
          handle: req.handleID,
          error: String(re),
        });
      }
      throw rolledBack(e, fresh);
    } else if (!existing.length && cleanup) {
      // Nothing assigned: do not leave a handle behind that allocateIn raised.
      await releaseLocked(core, req.handleID).catch(() => undefined);
    }
    throw e;
  }
}
