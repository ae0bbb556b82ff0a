// Release: by handle (DEL: every address of the handle and the handle in one
// transaction), specific addresses (operator repair), the rollback of a
// partial assignment, and the empty-block policy.
import type { IPAMBlockSpec, Resource } from '../model/resources.js';
import { DatastoreError } from '../errors.js';
import { TxnError, type TxnOp } from '../datastore/txn.js';
import { containsCidr, containsIP, ordinalOf, parseCidr, tryParseCidr, tryParseIP } from '../net/cidr.js';
import { addressOf, checkBlock, freeOrdinals, handleAt, isEmpty, ordinalsOf } from './block.js';
import { IpamError } from './errors.js';
import type { Released, ReleaseOptions } from './types.js';
import { getHandle, lowerHandle } from './handle-store.js';
import { fullSet, getBlock, loadPools, nodeAffinities, noteBlock } from './reads.js';
import { asConflict, retry } from './retry.js';
import { exclusive, type IpamCore } from './core.js';
import type { AffRes, BlockRes, HandleRes } from './state.js';

/**
 * Free ordinals chosen by `pick` in one block (one write, retried), the
 * empty-block policy included (freeOps). Returns what was freed with the
 * handle each belonged to.
 */
async function freeInBlock(
  core: IpamCore,
  cidrText: string,
  pick: (spec: IPAMBlockSpec) => number[],
): Promise<Released[]> {
  return retry(core, `releasing addresses in IPAM block ${cidrText}`, async () => {
    const b = await getBlock(core, cidrText);
    if (!b) return [];
    const c = checkBlock(b.spec);
    const ords = pick(b.spec);
    if (!ords.length) return [];
    const owners = ords.map((o) => handleAt(b.spec, o)?.handle_id ?? null);
    const f = await freeOps(core, b, ords);
    let out: Array<Resource | undefined>;
    try {
      out = await core.ds.txn(f.ops);
    } catch (e) {
      asConflict(e);
    }
    noteFreed(core, b, f, out[0]);
    return ords.map((o, i) => ({ ip: addressOf(c, o), handle: owners[i] ?? null }));
  });
}

/**
 * Empty-block policy: whether an empty block goes back to the pool, with its
 * node's affinity to delete with it; undefined: it stays. It stays when it is
 * its node's last block in that (enabled) pool: a node keeps one per pool, so
 * a pod churning on a quiet node does not claim and release a block every
 * time. Unaffine empty blocks always go.
 */
async function releasable(
  core: IpamCore,
  b: BlockRes,
): Promise<{ aff: AffRes | undefined; node: string | undefined } | undefined> {
  const blockCidr = tryParseCidr(b.spec.cidr);
  if (!blockCidr) return undefined;
  let aff: AffRes | undefined;
  const node = b.spec.affinity?.startsWith('host:') ? b.spec.affinity.slice(5) : undefined;
  if (node) {
    const [{ pools }, affs] = await Promise.all([loadPools(core), nodeAffinities(core, node)]);
    const pool = pools.find((p) => containsCidr(p.cidr, blockCidr));
    aff = affs.find((a) => a.spec.cidr === b.spec.cidr);
    if (pool && !pool.disabled) {
      const others = affs.filter((a) => {
        const c = tryParseCidr(a.spec.cidr);
        return a.spec.state === 'confirmed' && a.spec.cidr !== b.spec.cidr && !!c && containsCidr(pool.cidr, c);
      });
      if (!others.length) return undefined;
    }
  }
  return { aff, node };
}

/**
 * The writes that free `ords` of block `b` in a release's transaction: the
 * block's compare-and-swap; or, when that empties a block the policy gives
 * back to the pool, its delete (guarded by the same revision: an allocation
 * meanwhile fails it) and its affinity's, so a DEL that empties a block is
 * still one write. `released` says which (for what the caller does after).
 */
export async function freeOps(
  core: IpamCore,
  b: BlockRes,
  ords: number[],
): Promise<{ ops: TxnOp[]; released: boolean }> {
  const spec = structuredClone(b.spec);
  freeOrdinals(spec, ords);
  const goes = isEmpty(spec) ? await releasable(core, b) : undefined;
  if (!goes) return { ops: [{ op: 'update', res: { ...b, spec } }], released: false };
  const ops: TxnOp[] = [
    { op: 'delete', kind: 'IPAMBlock', name: b.metadata.name, revision: b.metadata.resourceVersion! },
  ];
  if (goes.aff)
    ops.push({
      op: 'delete',
      kind: 'BlockAffinity',
      name: goes.aff.metadata.name,
      revision: goes.aff.metadata.resourceVersion!,
    });
  return { ops, released: true };
}

/** After a release's transaction: what its block ops stored (the full-block memory, the log). */
export function noteFreed(core: IpamCore, b: BlockRes, f: { released: boolean }, stored: Resource | undefined): void {
  if (f.released) {
    fullSet(core).delete(b.metadata.name);
    core.log.info('ipam: released empty block', { block: b.spec.cidr, affinity: b.spec.affinity });
  } else noteBlock(core, stored as BlockRes);
}

/** Release the given addresses of one handle (rollback of a partial assignment). */
export async function releaseForHandle(core: IpamCore, handleID: string, ips: string[]): Promise<void> {
  const h = await getHandle(core, handleID);
  if (!h) return;
  const wanted = new Set(ips);
  for (const cidrText of Object.keys(h.spec.block)) {
    const c = tryParseCidr(cidrText);
    if (!c) continue;
    const freed = await freeInBlock(core, cidrText, (spec) =>
      ordinalsOf(spec, handleID).filter((o) => wanted.has(addressOf(c, o))),
    );
    if (freed.length) await lowerHandle(core, handleID, cidrText, (cur) => cur - freed.length);
  }
}

/**
 * Free every slot of the handle and delete the handle (with the caller's
 * extra writes) in one transaction: each block's compare-and-swap, the
 * handle's delete at the revision read. On Kubernetes the ops run in order,
 * the extra writes first (the endpoint goes before its addresses), then the
 * blocks, then the handle, so a crash leaves at worst a handle that
 * over-counts (docs/ipam.md).
 */
export async function releaseLocked(
  core: IpamCore,
  handleID: string,
  early?: Promise<HandleRes | undefined>,
  opts: ReleaseOptions = {},
): Promise<string[]> {
  let extra = [...(opts.alsoWrite ?? [])];
  // Conflicts (a concurrent assignment moved the block) are retried with the
  // allocator's jittered backoff, reading the handle and blocks again.
  return retry(core, `releasing IPAM handle ${handleID}`, async (attempt) => {
    const h = attempt === 0 && early ? await early : await getHandle(core, handleID);
    const blocks = h ? await Promise.all(Object.keys(h.spec.block).map((c) => getBlock(core, c))) : [];
    const ops: TxnOp[] = [...extra];
    const released: string[] = [];
    const freed: Array<{ at: number; b: BlockRes; released: boolean }> = [];
    for (const b of blocks) {
      if (!b) continue;
      const ords = ordinalsOf(b.spec, handleID);
      if (!ords.length) continue;
      const c = checkBlock(b.spec);
      const f = await freeOps(core, b, ords);
      freed.push({ at: ops.length, b, released: f.released });
      ops.push(...f.ops);
      released.push(...ords.map((o) => addressOf(c, o)));
    }
    // The handle's counts may be higher than what the blocks held (an ADD
    // killed between ordered writes): that is expected and disappears here.
    if (h) ops.push({ op: 'delete', kind: 'IPAMHandle', name: h.metadata.name, revision: h.metadata.resourceVersion! });
    if (!ops.length) return released;
    let out: Array<Resource | undefined>;
    try {
      out = await core.ds.txn(ops);
    } catch (e) {
      // An extra write whose object changed or went is written again as the
      // caller says after reading it (opts.reread), or dropped (best effort);
      // a block or the handle that moved is read again.
      const i = TxnError.opOf(e);
      if (i !== undefined && i < extra.length && DatastoreError.is(e) && e.kind !== 'Unavailable') {
        const instead = opts.reread ? await opts.reread(extra[i]!) : undefined;
        extra = extra.flatMap((op, j) => (j !== i ? [op] : instead ? [instead] : []));
      }
      asConflict(e);
    }
    for (const f of freed) noteFreed(core, f.b, f, out[f.at]);
    return released;
  });
}

/** Release specific addresses whoever holds them (operator repair). Addresses already free are skipped. */
export async function releaseIPs(core: IpamCore, ips: string[]): Promise<Released[]> {
  const parsed = ips.map((s) => {
    const ip = tryParseIP(s);
    if (!ip) throw new IpamError('invalid-request', `'${s}' is not an IPv4 or IPv6 address`);
    return ip;
  });
  return exclusive(core, undefined, async () => {
    const { items } = await core.ds.list('IPAMBlock');
    const out: Released[] = [];
    for (const ip of parsed) {
      const b = items.find((x) => {
        const c = tryParseCidr(x.spec.cidr);
        return c && containsIP(c, ip);
      });
      if (!b) continue;
      const c = parseCidr(b.spec.cidr);
      const ord = ordinalOf(c, ip);
      const freed = await freeInBlock(core, b.spec.cidr, (spec) => (spec.allocations[ord] != null ? [ord] : []));
      for (const f of freed) {
        if (f.handle) await lowerHandle(core, f.handle, b.spec.cidr, (cur) => cur - 1);
        out.push(f);
      }
    }
    return out;
  });
}
