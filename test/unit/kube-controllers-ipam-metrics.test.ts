// The IPAM state gauges of kube-controllers (src/kube-controllers/ipam-metrics.ts) over the in-memory
// datastore with real IPAM assignments: per-pool use and capacity, blocks per node, and the GC's
// leaked addresses split by pool and by whether they outlived the grace period.
import { describe, expect, it } from 'vitest';
import { MemoryDatastore } from '../../src/datastore/memory.js';
import { createIpam } from '../../src/ipam/index.js';
import { ipamStateMetrics } from '../../src/kube-controllers/ipam-metrics.js';
import type { ControllerContext } from '../../src/kube-controllers/framework.js';
import { Registry } from '../../src/observe/metrics.js';
import { createPool } from '../support/builders.js';

function value(body: string, series: string): number | undefined {
  const line = body.split('\n').find((l) => l.startsWith(series + ' '));
  return line === undefined ? undefined : Number(line.slice(series.length + 1));
}

describe('kube-controllers IPAM state gauges', () => {
  it('adds up blocks per pool and node from the caches, and splits GC candidates by pool and grace', async () => {
    const ds = new MemoryDatastore();
    await createPool(ds, 'a', '10.50.0.0/24', { blockSize: 28 });
    await createPool(ds, 'b', 'fd00:50::/120', { blockSize: 124 });
    const ipam = createIpam(ds, { lock: 'none' });
    const take = async (node: string, n: number, v6 = false) => {
      for (let i = 0; i < n; i++) {
        await ipam.assign({ handleID: `h-${node}-${v6}-${i}`, node, attrs: {}, assignIPv4: !v6, assignIPv6: v6 });
      }
    };
    await take('n1', 20); // two /28 blocks on n1
    await take('n2', 3);
    await take('n2', 2, true);
    const registry = new Registry();
    const ctx = { ds, registry } as unknown as ControllerContext;
    const m = ipamStateMetrics(ctx, (e) => {
      throw e;
    });
    for (const i of m.informers) i.start();
    await Promise.all(m.informers.map((i) => i.whenSynced()));
    m.scanned(
      [
        { ip: '10.50.0.3', ageMs: 1_000 },
        { ip: '10.50.0.4', ageMs: 900_000 },
        { ip: 'fd00:50::2', ageMs: 900_000 },
      ],
      600_000,
    );
    const body = registry.render();
    for (const i of m.informers) i.stop();
    expect(value(body, 'netplugin_ipam_pool_addresses_in_use{pool="a"}')).toBe(23);
    expect(value(body, 'netplugin_ipam_pool_addresses_in_use{pool="b"}')).toBe(2);
    expect(value(body, 'netplugin_ipam_pool_capacity_addresses{pool="a"}')).toBe(256);
    expect(value(body, 'netplugin_ipam_pool_capacity_addresses{pool="b"}')).toBe(256);
    expect(value(body, 'netplugin_ipam_blocks{node="n1",pool="a"}')).toBe(2);
    expect(value(body, 'netplugin_ipam_blocks{node="n2",pool="a"}')).toBe(1);
    expect(value(body, 'netplugin_ipam_blocks{node="n2",pool="b"}')).toBe(1);
    expect(value(body, 'netplugin_ipam_gc_candidate_addresses{pool="a",state="in_grace"}')).toBe(1);
    expect(value(body, 'netplugin_ipam_gc_candidate_addresses{pool="a",state="past_grace"}')).toBe(1);
    expect(value(body, 'netplugin_ipam_gc_candidate_addresses{pool="b",state="past_grace"}')).toBe(1);
    expect(value(body, 'netplugin_ipam_gc_candidate_addresses{pool="b",state="in_grace"}')).toBe(0);
    expect(value(body, 'netplugin_ipam_gc_last_scan_timestamp_seconds')).toBeGreaterThan(0);
    // A stopped controller (leadership lost) exports no stale state.
    m.stop();
    expect(registry.render()).not.toMatch(/^netplugin_ipam_pool_addresses_in_use\{/m);
  });
});
