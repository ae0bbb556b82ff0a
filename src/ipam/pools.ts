// Which pools an assignment may use: explicitly requested ones (netconf
// ipv4_pools/ipv6_pools or annotations, by name or CIDR), or every enabled pool
// whose nodeSelector selects the node.
import { CniError, ErrorCodes } from '../errors.js';
import type { Resource } from '../datastore/types.js';
import { parseSelector, type Selector } from '../selector/index.js';
import { cidrEquals, formatCidr, parseCidr, tryParseCidr, type Cidr, type Family } from './cidr.js';

export interface PoolInfo {
  name: string;
  cidr: Cidr;
  /** Canonical CIDR text. */
  cidrText: string;
  blockSize: number;
  disabled: boolean;
  /** Selector text as stored ('' means all()). */
  selectorText: string;
  selector: Selector;
  selectsAll: boolean;
  /** spec.allowedUses, defaulted to both uses. */
  allowedUses: PoolUse[];
}

/** What an address is for: a pod (`Workload`) or a node's tunnel device (`Tunnel`). */
export type PoolUse = 'Workload' | 'Tunnel';
const ALL_USES: PoolUse[] = ['Workload', 'Tunnel'];

/**
 * Refuses a pool whose allowedUses leaves out `use`: the error names the pool,
 * its allowedUses and the field that led to it (a `[Tunnel]`-only pool never
 * gives a workload address, however it is asked for).
 */
export function checkPoolUse(pool: PoolInfo, use: PoolUse, field: string, address?: string): void {
  if (pool.allowedUses.includes(use)) return;
  const uses = `[${pool.allowedUses.join(', ')}]`;
  const where = address ? `${address} is in pool '${pool.name}' (${pool.cidrText}), whose allowedUses is ${uses}` : `pool '${pool.name}' (${pool.cidrText}) has allowedUses ${uses}`;
  throw new CniError(ErrorCodes.IpamFailure, `${field}: ${where}: it gives no ${use} addresses; use another pool or add ${use} to its spec.allowedUses`);
}

export const DEFAULT_BLOCK_SIZE: Record<Family, number> = { 4: 26, 6: 122 };
export const BLOCK_SIZE_RANGE: Record<Family, [number, number]> = { 4: [20, 32], 6: [116, 128] };

/** Validate a stored IPPool; throws CniError(7) naming the pool and field. */
export function poolInfo(res: Resource<'IPPool'>): PoolInfo {
  const name = res.metadata.name;
  const bad = (field: string, why: string) =>
    new CniError(ErrorCodes.InvalidNetworkConfig, `IPPool '${name}': spec.${field} ${why}; fix the pool (kubectl/netpluginctl edit) or delete it`);
  let cidr: Cidr;
  try {
    cidr = parseCidr(String(res.spec.cidr ?? ''));
  } catch (e) {
    throw bad('cidr', (e as Error).message.replace(/^'/, "is invalid: '"));
  }
  const blockSize = res.spec.blockSize ?? DEFAULT_BLOCK_SIZE[cidr.family];
  const [lo, hi] = BLOCK_SIZE_RANGE[cidr.family];
  if (!Number.isInteger(blockSize) || blockSize < lo || blockSize > hi) {
    throw bad('blockSize', `is ${blockSize}: IPv${cidr.family} block sizes must be ${lo}-${hi}`);
  }
  if (blockSize < cidr.prefix) {
    throw bad('blockSize', `is ${blockSize} but the pool ${formatCidr(cidr)} is smaller than one /${blockSize} block: use blockSize ${cidr.prefix} or more`);
  }
  const selectorText = res.spec.nodeSelector ?? '';
  let selector: Selector;
  try {
    selector = parseSelector(selectorText);
  } catch (e) {
    throw bad('nodeSelector', `'${selectorText}' does not parse: ${(e as Error).message}`);
  }
  return {
    name,
    cidr,
    cidrText: formatCidr(cidr),
    blockSize,
    disabled: res.spec.disabled === true,
    selectorText,
    selector,
    selectsAll: selector.toString() === 'all()',
    allowedUses: res.spec.allowedUses?.length ? [...res.spec.allowedUses] : [...ALL_USES],
  };
}

function describePools(pools: PoolInfo[]): string {
  if (!pools.length) return 'none';
  return pools.map((p) => `${p.name} (${p.cidrText}${p.disabled ? ', disabled' : ''})`).join(', ');
}

/**
 * Resolve an explicit pool list, in the order given. Every entry must name an
 * existing, enabled pool of the right family.
 */
export function resolveExplicitPools(family: Family, wanted: string[], pools: PoolInfo[], field: string): PoolInfo[] {
  const out: PoolInfo[] = [];
  for (const item of wanted) {
    const asCidr = tryParseCidr(item);
    const p = asCidr ? pools.find((x) => cidrEquals(x.cidr, asCidr)) : pools.find((x) => x.name === item);
    if (!p) {
      const hint = !asCidr && item.includes('/') ? ` ('${item}' is not a valid CIDR either)` : '';
      throw new CniError(
        ErrorCodes.InvalidNetworkConfig,
        `${field}: pool '${item}' does not exist${hint}; existing pools: ${describePools(pools)}. Create it or remove it from ${field}`,
      );
    }
    if (p.cidr.family !== family) {
      throw new CniError(ErrorCodes.InvalidNetworkConfig, `${field}: pool '${item}' (${p.cidrText}) is IPv${p.cidr.family}, not IPv${family}; list it under ipv${p.cidr.family}_pools`);
    }
    if (p.disabled) {
      throw new CniError(ErrorCodes.InvalidNetworkConfig, `${field}: pool '${item}' (${p.cidrText}) is disabled; enable it or remove it from ${field}`);
    }
    if (!out.includes(p)) out.push(p);
  }
  return out;
}

export { describePools };
