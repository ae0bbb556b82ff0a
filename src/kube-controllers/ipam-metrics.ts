// Cluster-wide IPAM state for Prometheus, exported by the node controller (the
// leader's; one replica, one view): addresses in use and capacity per IPPool,
// blocks per node, and the addresses its garbage collection finds leaked. Read
// from watch-fed caches: each block is summarised once per change (its
// allocations counted then), so a scrape only adds up one summary per block.
import type { Resource } from '../model/resources.js';
import { cidrSize, containsCidr, containsIP, tryParseCidr, tryParseIP, type Cidr } from '../net/cidr.js';
import { Informer } from '../watch/informer.js';
import { datastoreSource } from '../datastore/list-watch.js';
import type { ControllerContext } from './framework.js';

interface BlockSummary {
  cidr: Cidr | undefined;
  /** The node of its affinity (`host:<node>`), '' when unaffined. */
  node: string;
  inUse: number;
}

interface LeakedAddress {
  ip: string;
  /** Milliseconds it has looked leaked. */
  ageMs: number;
}

interface IpamStateMetrics {
  readonly informers: Array<Informer<unknown>>;
  /** After every GC scan: the addresses that still look leaked (released ones are gone from it). */
  scanned(leaked: LeakedAddress[], graceMs: number): void;
  stop(): void;
}

function summarize(b: Resource<'IPAMBlock'>): BlockSummary {
  const aff = b.spec.affinity ?? '';
  let inUse = 0;
  for (const a of b.spec.allocations ?? []) if (a !== null && a !== undefined) inUse++;
  return { cidr: tryParseCidr(b.spec.cidr), node: aff.startsWith('host:') ? aff.slice(5) : '', inUse };
}

export function ipamStateMetrics(
  ctx: ControllerContext,
  onError: (err: Error, source: string) => void,
): IpamStateMetrics {
  const r = ctx.registry;
  const inUse = r.gauge(
    'netplugin_ipam_pool_addresses_in_use',
    'Addresses allocated from an IPPool (workloads and reserved ones), by pool.',
    ['pool'],
  );
  const capacity = r.gauge(
    'netplugin_ipam_pool_capacity_addresses',
    'Addresses an IPPool holds (its CIDR size), by pool.',
    ['pool'],
  );
  const blocks = r.gauge(
    'netplugin_ipam_blocks',
    'IPAM blocks by the node they are affine to (node="" unaffined) and pool (pool="" for blocks outside every pool).',
    ['node', 'pool'],
  );
  const candidates = r.gauge(
    'netplugin_ipam_gc_candidate_addresses',
    'Addresses the last IPAM GC scan found leaked and did not release, by pool and state: in_grace (younger than ' +
      'leakGracePeriod) or past_grace (older, yet kept: the pod read said otherwise or the release failed).',
    ['pool', 'state'],
  );
  const lastScan = r.gauge(
    'netplugin_ipam_gc_last_scan_timestamp_seconds',
    'When the last IPAM GC scan completed (unix seconds).',
  );

  const summaries = new Map<string, BlockSummary>();
  const poolSource = datastoreSource<'IPPool'>(ctx.ds, 'IPPool');
  const poolInformer = new Informer<Resource<'IPPool'>>(poolSource, { onChange: () => undefined }, { onError });
  const blockInformer = new Informer<Resource<'IPAMBlock'>>(
    datastoreSource(ctx.ds, 'IPAMBlock'),
    {
      onChange: (key, obj) => {
        if (obj) summaries.set(key, summarize(obj));
        else summaries.delete(key);
      },
    },
    { onError },
  );
  let leaked: LeakedAddress[] = [];
  let grace = 0;
  let active = true;

  const poolCidrs = (): Array<{ name: string; cidr: Cidr }> => {
    const out: Array<{ name: string; cidr: Cidr }> = [];
    for (const p of poolInformer.list()) {
      const c = tryParseCidr(p.spec.cidr);
      if (c) out.push({ name: p.metadata.name, cidr: c });
    }
    return out;
  };

  r.onCollect(() => {
    // Recomputed from scratch: a pool or node that is gone loses its series.
    inUse.reset();
    capacity.reset();
    blocks.reset();
    candidates.reset();
    if (!active) return;
    const pools = poolCidrs();
    for (const p of pools) {
      capacity.set({ pool: p.name }, Number(cidrSize(p.cidr)));
      inUse.set({ pool: p.name }, 0);
    }
    for (const b of summaries.values()) {
      const pool = b.cidr ? (pools.find((p) => containsCidr(p.cidr, b.cidr!))?.name ?? '') : '';
      if (pool) inUse.inc({ pool }, b.inUse);
      blocks.inc({ node: b.node, pool });
    }
    for (const p of pools) for (const state of ['in_grace', 'past_grace']) candidates.set({ pool: p.name, state }, 0);
    for (const l of leaked) {
      const ip = tryParseIP(l.ip);
      const pool = (ip && pools.find((p) => containsIP(p.cidr, ip))?.name) ?? '';
      candidates.inc({ pool, state: l.ageMs >= grace ? 'past_grace' : 'in_grace' });
    }
  });

  return {
    informers: [poolInformer, blockInformer] as Array<Informer<unknown>>,
    scanned(now, graceMs) {
      leaked = now;
      grace = graceMs;
      lastScan.set(undefined, Math.round(Date.now() / 1000));
    },
    stop() {
      active = false;
      summaries.clear();
      leaked = [];
    },
  };
}
