// Inspection: pool usage (with the orphan blocks inside no pool), where an
// address stands and who holds it, the handles, and STATUS readiness (the
// same pool choice as an assignment).
import {
  formatCidr,
  cidrSize,
  containsCidr,
  containsIP,
  enclosing,
  formatIP,
  ordinalOf,
  parseCidr,
  tryParseCidr,
  tryParseIP,
  type Cidr,
  type Family,
} from '../net/cidr.js';
import { allocatedCount, handleAt } from './block.js';
import { parseHandleID } from './handle.js';
import { IpamError } from './errors.js';
import { choosePools, type PoolInfo } from './pools.js';
import type { AddressLocation, BlockUsage, HandleInfo, PoolUsage } from './types.js';
import { addressesOfHandle, getHandle } from './handle-store.js';
import { getBlock, loadPools, nodeLabels } from './reads.js';
import type { IpamCore } from './core.js';
import type { BlockRes } from './state.js';

/** The addresses (plain IPs) the handle holds now. */
export async function handleAddresses(core: IpamCore, handleID: string): Promise<string[]> {
  const h = await getHandle(core, handleID);
  return h ? (await addressesOfHandle(core, h)).map((a) => a.ip) : [];
}

export async function usage(core: IpamCore): Promise<PoolUsage[]> {
  return (await usageReport(core)).pools;
}

/**
 * Pool usage (pools in name order, each with the blocks inside its CIDR) and
 * the orphan blocks: blocks inside no pool (their pool was deleted with
 * --force or resized), which keep their addresses until released.
 */
export async function usageReport(core: IpamCore): Promise<{ pools: PoolUsage[]; orphanBlocks: BlockUsage[] }> {
  const [{ pools }, { items: blocks }] = await Promise.all([loadPools(core), core.ds.list('IPAMBlock')]);
  const claimed = new Set<BlockRes>();
  const parsed = blocks.map((b) => ({ b, c: tryParseCidr(b.spec.cidr) }));
  const blockUsage = (b: BlockRes, c: Cidr | undefined): BlockUsage => ({
    cidr: b.spec.cidr,
    affinity: b.spec.affinity,
    size: c ? Number(cidrSize(c)) : b.spec.allocations.length,
    allocated: allocatedCount(b.spec),
  });
  const usage = pools
    .sort((a, b) => a.name.localeCompare(b.name))
    .map((p) => {
      const perBlock: BlockUsage[] = [];
      for (const { b, c } of parsed) {
        if (!c || !containsCidr(p.cidr, c)) continue;
        claimed.add(b);
        perBlock.push(blockUsage(b, c));
      }
      const allocated = perBlock.reduce((n, b) => n + b.allocated, 0);
      const size = cidrSize(p.cidr);
      return {
        name: p.name,
        cidr: p.cidrText,
        family: p.cidr.family,
        blockSize: p.blockSize,
        disabled: p.disabled,
        nodeSelector: p.selector.toString(),
        size,
        blocks: perBlock.length,
        allocated,
        free: size - BigInt(allocated),
        perBlock,
      };
    });
  const orphanBlocks = parsed.filter(({ b }) => !claimed.has(b)).map(({ b, c }) => blockUsage(b, c));
  return { pools: usage, orphanBlocks };
}

/** Who holds `ip`: its handle and attributes, or undefined when it is free or in no block. */
export async function whoHas(
  core: IpamCore,
  ipText: string,
): Promise<{ handle: string | null; attrs: Record<string, string>; block: string } | undefined> {
  const at = await locate(core, ipText);
  return at.holder && at.block ? { handle: at.holder.handle, attrs: at.holder.attrs, block: at.block } : undefined;
}

/**
 * Where `ip` stands: the (valid) pool containing it, the block containing it
 * (when one was claimed), that block's affinity, whether the address is
 * allocated and, when its attribute is recorded, who holds it.
 */
export async function locate(core: IpamCore, ipText: string): Promise<AddressLocation> {
  const ip = tryParseIP(ipText);
  if (!ip) throw new IpamError('invalid-request', `'${ipText}' is not an IPv4 or IPv6 address`);
  const { pools } = await loadPools(core);
  let block: BlockRes | undefined;
  const pool = pools.find((p) => containsIP(p.cidr, ip));
  if (pool) block = await getBlock(core, formatCidr(enclosing(ip, pool.blockSize)));
  if (!block) {
    // Pool deleted or resized since: search the blocks themselves.
    const { items } = await core.ds.list('IPAMBlock');
    block = items.find((b) => {
      const c = tryParseCidr(b.spec.cidr);
      return c && containsIP(c, ip);
    });
  }
  const out: AddressLocation = { ip: formatIP(ip), allocated: false, ...(pool ? { pool: pool.name } : {}) };
  if (!block) return out;
  out.block = block.spec.cidr;
  out.affinity = block.spec.affinity;
  const ord = ordinalOf(parseCidr(block.spec.cidr), ip);
  if (block.spec.allocations[ord] == null) return out;
  out.allocated = true;
  const attr = handleAt(block.spec, ord);
  if (attr) out.holder = { handle: attr.handle_id, attrs: { ...(attr.secondary ?? {}) } };
  return out;
}

/**
 * Every handle, or only those of exactly `network` (see ipam/handle.ts; object names fold case, so this filters on the
 * recorded IDs).
 */
export async function listHandles(core: IpamCore, opts: { network?: string } = {}): Promise<HandleInfo[]> {
  const { items } = await core.ds.list('IPAMHandle');
  return items
    .filter((h) => opts.network === undefined || parseHandleID(h.spec.handleID)?.network === opts.network)
    .map((h) => ({ handleID: h.spec.handleID, blocks: { ...h.spec.block } }));
}

/**
 * Whether an ADD on `node` could get an address of each family now (CNI
 * STATUS): the pools it would choose, and at least one free address among
 * them. Undefined when ready, else what is wrong. Uses the same pool choice
 * as assign().
 */
export async function readiness(
  core: IpamCore,
  q: { node: string; families: Family[]; ipv4Pools?: string[] | undefined; ipv6Pools?: string[] | undefined },
): Promise<string | undefined> {
  const [{ pools, bad }, poolUsage] = await Promise.all([loadPools(core), usage(core)]);
  let labels: Promise<Record<string, string>> | undefined;
  const ctxLabels = () => (labels ??= nodeLabels(core, q.node));
  for (const family of q.families) {
    const explicit = family === 4 ? q.ipv4Pools : q.ipv6Pools;
    let chosen: PoolInfo[];
    try {
      chosen = await choosePools({
        family,
        pools,
        explicit,
        field: family === 4 ? 'ipam.ipv4_pools' : 'ipam.ipv6_pools',
        node: q.node,
        labels: ctxLabels,
        badPools: bad,
      });
    } catch (e) {
      if (e instanceof IpamError) return e.message;
      throw e;
    }
    const names = new Set(chosen.map((p) => p.name));
    const used = poolUsage.filter((u) => names.has(u.name));
    if (used.every((u) => u.free === 0n))
      return `IPv${family} pools ${used.map((u) => `${u.name} (${u.cidr})`).join(', ')} have no free address`;
  }
  return undefined;
}
