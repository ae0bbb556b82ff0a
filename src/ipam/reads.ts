// The IPAM's reads, and what it remembers between them: the request's own
// cache (Ctx: all blocks and the node's labels, read at most once per
// assignment) and, in the instances' shared state (shared.ts), the blocks
// last seen full (so the agent reads a node's full blocks only when its other
// blocks have no room).
import type { IPAMConfigSpec } from '../model/resources.js';
import { blockName } from '../model/names.js';
import { poolInfo, type PoolInfo } from './pools.js';
import { isKind, type IpamCore } from './core.js';
import type { AffRes, BlockRes, Ctx } from './state.js';

export async function loadConfig(core: IpamCore): Promise<IPAMConfigSpec> {
  try {
    return (await core.ds.get('IPAMConfig', 'default')).spec;
  } catch (e) {
    if (isKind(e, 'NotFound')) return {};
    throw e;
  }
}

export async function loadPools(core: IpamCore): Promise<{ pools: PoolInfo[]; bad: string[] }> {
  const { items } = await core.ds.list('IPPool');
  const pools: PoolInfo[] = [];
  const bad: string[] = [];
  for (const r of items) {
    try {
      pools.push(poolInfo(r));
    } catch (e) {
      bad.push((e as Error).message);
      core.log.warn('ipam: ignoring invalid IPPool', { pool: r.metadata.name, error: (e as Error).message });
    }
  }
  return { pools, bad };
}

export async function getBlock(core: IpamCore, cidrText: string): Promise<BlockRes | undefined> {
  try {
    return await core.ds.get('IPAMBlock', blockName(cidrText));
  } catch (e) {
    if (isKind(e, 'NotFound')) return undefined;
    throw e;
  }
}

export async function nodeAffinities(core: IpamCore, node: string): Promise<AffRes[]> {
  const { items } = await core.ds.list('BlockAffinity', { namePrefix: `${node}-ipv` });
  return items.filter((a) => a.spec.node === node);
}

export async function loadBlocks(core: IpamCore, ctx: Ctx): Promise<Map<string, BlockRes>> {
  if (!ctx.blocks) {
    const { items } = await core.ds.list('IPAMBlock');
    ctx.blocks = new Map(items.map((b) => [b.metadata.name, b]));
  }
  return ctx.blocks;
}

/** The node's labels, for pool nodeSelectors; none while its Node resource does not exist. */
export async function nodeLabels(core: IpamCore, node: string): Promise<Record<string, string>> {
  try {
    return (await core.ds.get('Node', node)).metadata.labels ?? {};
  } catch (e) {
    if (!isKind(e, 'NotFound')) throw e;
    core.log.debug('ipam: Node resource not found; matching pool nodeSelectors against no labels', { node });
    return {};
  }
}

/** The request's node's labels, read at most once per assignment. */
export async function labelsOf(core: IpamCore, ctx: Ctx): Promise<Record<string, string>> {
  ctx.nodeLabels ??= await nodeLabels(core, ctx.node);
  return ctx.nodeLabels;
}

export function fullSet(core: IpamCore): Set<string> {
  return core.shared.of(core.ds).fullBlocks;
}

/** Records whether a block just read or written has room (see IpamStoreState.fullBlocks). */
export function noteBlock(core: IpamCore, b: BlockRes): void {
  if (b.spec.allocations.some((x) => x == null) && !b.spec.deleted) fullSet(core).delete(b.metadata.name);
  else fullSet(core).add(b.metadata.name);
}
