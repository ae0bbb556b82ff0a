// Which pools an assignment may use: explicitly requested ones (netconf
// ipv4_pools/ipv6_pools or annotations, by name or CIDR), or every enabled pool
// whose nodeSelector selects the node.
import { IpamError } from './errors.js';
import { BLOCK_SIZE_RANGE, DEFAULT_BLOCK_SIZE, type Resource } from '../model/resources.js';
import { parseSelector, type Selector } from '../selector/index.js';
import { cidrEquals, formatCidr, parseCidr, tryParseCidr, type Cidr, type Family } from '../net/cidr.js';

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
  const where = address
    ? `${address} is in pool '${pool.name}' (${pool.cidrText}), whose allowedUses is ${uses}`
    : `pool '${pool.name}' (${pool.cidrText}) has allowedUses ${uses}`;
  throw new IpamError(
    'pool-use-not-allowed',
    `${field}: ${where}: it gives no ${use} addresses; use another pool or add ${use} to its spec.allowedUses`,
  );
}

/** Validate a stored IPPool; throws an IpamError ('invalid-pool') naming the pool and field. */
export function poolInfo(res: Resource<'IPPool'>): PoolInfo {
  const name = res.metadata.name;
  const bad = (field: string, why: string) =>
    new IpamError(
      'invalid-pool',
      `IPPool '${name}': spec.${field} ${why}; fix the pool (kubectl/netpluginctl edit) or delete it`,
    );
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
    throw bad(
      'blockSize',
      `is ${blockSize} but the pool ${formatCidr(cidr)} is smaller than one /${blockSize} block: use blockSize ` +
        `${cidr.prefix} or more`,
    );
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
function resolveExplicitPools(family: Family, wanted: string[], pools: PoolInfo[], field: string): PoolInfo[] {
  const out: PoolInfo[] = [];
  for (const item of wanted) {
    const asCidr = tryParseCidr(item);
    const p = asCidr ? pools.find((x) => cidrEquals(x.cidr, asCidr)) : pools.find((x) => x.name === item);
    if (!p) {
      const hint = !asCidr && item.includes('/') ? ` ('${item}' is not a valid CIDR either)` : '';
      throw new IpamError(
        'pool-not-found',
        `${field}: pool '${item}' does not exist${hint}; existing pools: ${describePools(pools)}. Create it or ` +
          `remove it from ${field}`,
      );
    }
    if (p.cidr.family !== family) {
      throw new IpamError(
        'pool-wrong-family',
        `${field}: pool '${item}' (${p.cidrText}) is IPv${p.cidr.family}, not IPv${family}; list it under ` +
          `ipv${p.cidr.family}_pools`,
      );
    }
    if (p.disabled) {
      throw new IpamError(
        'pool-disabled',
        `${field}: pool '${item}' (${p.cidrText}) is disabled; enable it or remove it from ${field}`,
      );
    }
    if (!out.includes(p)) out.push(p);
  }
  return out;
}

export { describePools };

interface ChoosePoolsRequest {
  family: Family;
  /** Every valid pool in the datastore. */
  pools: PoolInfo[];
  /** Pools named by the request (netconf ipvN_pools, annotations), in order; empty = automatic. */
  explicit?: string[] | undefined;
  /** The field the explicit list came from, for errors. */
  field: string;
  node: string;
  /** The node's labels, read only when a pool's nodeSelector needs them. */
  labels: () => Promise<Record<string, string>>;
  /** Messages of pools that failed validation (shown when nothing qualifies). */
  badPools?: string[];
  /** What the addresses are for (default Workload): pools whose allowedUses leave it out are never chosen. */
  use?: PoolUse;
}

/**
 * The one rule of which pools an automatic assignment on `node` may use, in
 * the order to try them. Used by the allocator (ADD) and by both plugins'
 * STATUS, so STATUS answers "ready" exactly when an ADD could find a pool.
 * docs/ipam.md: a node takes addresses only from pools whose nodeSelector selects it,
 * also when a pool is requested by name; explicit lists are tried in order,
 * automatic ones by name. Throws an IpamError naming the pools and the fix.
 */
export async function choosePools(r: ChoosePoolsRequest): Promise<PoolInfo[]> {
  const { family, node, field } = r;
  const use = r.use ?? 'Workload';
  if (r.explicit?.length) {
    const named = resolveExplicitPools(family, r.explicit, r.pools, field);
    for (const p of named) checkPoolUse(p, use, field);
    const labels = named.some((p) => !p.selectsAll) ? await r.labels() : {};
    const pools = named.filter((p) => p.selector.matches(labels));
    if (!pools.length) {
      throw new IpamError(
        'no-pool-for-node',
        `${field}: none of the requested pools selects node '${node}': ` +
          `${named.map((p) => `${p.name} (${p.cidrText}, nodeSelector ${p.selector.toString()})`).join(', ')}; label ` +
          `the node or change the pools' nodeSelector`,
      );
    }
    return pools;
  }
  const enabled = r.pools
    .filter((p) => p.cidr.family === family && !p.disabled && p.allowedUses.includes(use))
    .sort((a, b) => a.name.localeCompare(b.name));
  const labels = enabled.some((p) => !p.selectsAll) ? await r.labels() : {};
  const pools = enabled.filter((p) => p.selector.matches(labels));
  if (!pools.length) {
    const all = r.pools.filter((p) => p.cidr.family === family);
    const detail = all.length
      ? all
          .map(
            (p) =>
              `${p.name} (${p.cidrText}${p.disabled ? ', disabled' : ''}` +
              `${p.allowedUses.includes(use) ? '' : `, allowedUses [${p.allowedUses.join(', ')}]`}` +
              `${p.selectsAll ? '' : `, nodeSelector ${p.selector.toString()}`})`,
          )
          .join(', ')
      : 'none exist';
    const bad = r.badPools?.length ? `; invalid pools ignored: ${r.badPools.join('; ')}` : '';
    const why = use === 'Workload' ? '' : ` (${use} addresses come only from pools whose allowedUses includes ${use})`;
    throw new IpamError(
      'no-pool-for-node',
      `no enabled IPv${family} pool selects node '${node}' (pools: ${detail}${bad}); create an IPPool or adjust its ` +
        `nodeSelector${why}`,
    );
  }
  return pools;
}
