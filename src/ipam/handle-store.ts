// IPAMHandle objects: reading a handle by its exact ID, the write that makes
// it count an address (in the same transaction as the block write that takes
// the address), lowering its counts after a block freed addresses, and the
// addresses it holds. Identity (the ID format, object names) is handle.ts.
import { API_VERSION } from '../model/resources.js';
import { TxnError, type TxnOp } from '../datastore/txn.js';
import type { CallOptions } from '../datastore/types.js';
import { DatastoreError } from '../errors.js';
import type { Family } from '../net/cidr.js';
import { handleName, legacyHandleName, sameHandle } from './handle.js';
import { addressOf, checkBlock, ordinalsOf } from './block.js';
import { IpamError } from './errors.js';
import { getBlock } from './reads.js';
import { retry } from './retry.js';
import { isKind, type IpamCore } from './core.js';
import type { Ctx, HandleRes } from './state.js';

/**
 * The handle object of exactly `handleID` (byte-exact, see ipam/handle.ts).
 * A handle written before identities became exact lives under its
 * case-folded name: it is used when it records this very ID, so a DEL after
 * an upgrade still releases what the ADD took.
 */
export async function getHandle(core: IpamCore, handleID: string, opts?: CallOptions): Promise<HandleRes | undefined> {
  const read = async (name: string) => {
    try {
      return await core.ds.get('IPAMHandle', name, undefined, opts);
    } catch (e) {
      if (isKind(e, 'NotFound')) return undefined;
      throw e;
    }
  };
  const name = handleName(handleID);
  const h = await read(name);
  if (h && !sameHandle(h.spec.handleID, handleID)) {
    throw new IpamError(
      'handle-mismatch',
      `IPAMHandle ${name} records handle ${JSON.stringify(h.spec.handleID)}, not ${JSON.stringify(handleID)} (a ` +
        `handle written before IDs became case-exact); run \`netpluginctl ipam check --fix\` to migrate it`,
    );
  }
  if (h || legacyHandleName(handleID) === name) return h;
  const old = await read(legacyHandleName(handleID));
  return old && sameHandle(old.spec.handleID, handleID) ? old : undefined;
}

/**
 * The guard of a handle's create failed because the handle exists: this
 * container already holds addresses (a repeated ADD), or a concurrent call for
 * it got there first. An ADD does not read its handle before the transaction
 * (one round trip less per pod); this is how it finds out. Nothing of the
 * failed transaction was written, so the caller reads the handle and returns
 * what it holds instead of adding to it. Internal: never leaves src/ipam/.
 */
export class HandleExists extends Error {
  override name = 'HandleExists';
}

/** Whether `e` (a failed transaction whose op `at` was `op`) says the handle `op` creates already exists. */
export function handleCreateLost(op: TxnOp | undefined, at: number, e: unknown): boolean {
  return (
    op?.op === 'create' &&
    op.res.kind === 'IPAMHandle' &&
    TxnError.opOf(e) === at &&
    DatastoreError.is(e, 'AlreadyExists')
  );
}

/**
 * The write that makes the handle count `atLeast` addresses in `cidr`, for
 * the transaction that takes the address: a create guarded by the handle's
 * absence (a repeated ADD shows up here as AlreadyExists), an update guarded
 * by its revision, or nothing when it already counts them.
 */
export function handleOp(ctx: Ctx, cidr: string, atLeast: number): TxnOp | undefined {
  const id = ctx.req.handleID;
  const h = ctx.handle;
  if (!h)
    return {
      op: 'create',
      res: {
        apiVersion: API_VERSION,
        kind: 'IPAMHandle',
        metadata: { name: handleName(id) },
        spec: { handleID: id, block: { [cidr]: atLeast } },
      },
    };
  if ((h.spec.block[cidr] ?? 0) >= atLeast) return undefined;
  return { op: 'update', res: { ...h, spec: { ...h.spec, block: { ...h.spec.block, [cidr]: atLeast } } } };
}

/**
 * Lower the handle's count for `cidr` to `count` (deleting the entry at 0 and
 * the handle when no entry is left). Only ever called after the block no
 * longer holds more than `count` addresses of the handle.
 */
export async function lowerHandle(
  core: IpamCore,
  handleID: string,
  cidr: string,
  count: number | ((cur: number) => number),
  current?: HandleRes,
): Promise<HandleRes | undefined> {
  let h = current;
  return retry(core, `updating IPAM handle ${handleID}`, async (attempt) => {
    if (attempt > 0 || !h) h = await getHandle(core, handleID);
    if (!h) return undefined;
    const cur = h.spec.block[cidr] ?? 0;
    const next = Math.max(0, typeof count === 'function' ? count(cur) : count);
    // Never raise here, and nothing to do when already there.
    if (next >= cur) return h;
    const block = { ...h.spec.block };
    if (next > 0) block[cidr] = next;
    else delete block[cidr];
    if (Object.keys(block).length === 0) {
      try {
        await core.ds.delete('IPAMHandle', h.metadata.name, { revision: h.metadata.resourceVersion });
      } catch (e) {
        if (!isKind(e, 'NotFound')) throw e;
      }
      return undefined;
    }
    h = await core.ds.update({ ...h, spec: { ...h.spec, block } });
    return h;
  });
}

export async function addressesOfHandle(
  core: IpamCore,
  h: HandleRes,
): Promise<Array<{ ip: string; family: Family; address: string; block: string }>> {
  const out: Array<{ ip: string; family: Family; address: string; block: string }> = [];
  const blocks = await Promise.all(Object.keys(h.spec.block).map((c) => getBlock(core, c)));
  for (const b of blocks) {
    if (!b) continue;
    const c = checkBlock(b.spec);
    for (const ord of ordinalsOf(b.spec, h.spec.handleID)) {
      const ip = addressOf(c, ord);
      out.push({ ip, family: c.family, address: `${ip}/${c.prefix}`, block: b.spec.cidr });
    }
  }
  return out;
}
