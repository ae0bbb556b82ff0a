// Batched assignment (Ipam `batch: true` with a shared state, as the resident agent's runtime gives it) on the
// in-memory datastore (same CAS semantics as etcd and Kubernetes). Real
// allocator, real store; a thin wrapper counts writes and injects faults.
import { beforeEach, describe, expect, it } from 'vitest';
import { orderedTxn } from '../../src/datastore/txn.js';
import { MemoryDatastore } from '../../src/datastore/memory.js';
import { API_VERSION, type Kind, type Resource } from '../../src/model/resources.js';
import type { Datastore } from '../../src/datastore/types.js';
import { DatastoreError, ErrorCodes } from '../../src/errors.js';
import { IpamError } from '../../src/ipam/errors.js';
import { toCniError } from '../../src/cni/errors.js';
import {
  createIpam,
  createIpamShared,
  type AssignRequest,
  type Assigned,
  type IpamShared,
} from '../../src/ipam/index.js';
import { createPool } from '../support/builders.js';

const pool = createPool;

let seq = 0;
function req(nodeName: string, extra: Partial<AssignRequest> = {}): AssignRequest {
  const id = `b${++seq}`;
  return {
    handleID: `net.${id}`,
    node: nodeName,
    attrs: { namespace: 'ns', pod: `p-${id}` },
    assignIPv4: true,
    assignIPv6: false,
    ...extra,
  };
}

async function all<K extends Kind>(ds: Datastore, kind: K): Promise<Array<Resource<K>>> {
  return (await ds.list(kind)).items;
}

/** Every allocated address has a handle that counts it; returns handle -> addresses held. */
async function checkInvariant(ds: Datastore): Promise<Map<string, string[]>> {
  const handles = new Map((await all(ds, 'IPAMHandle')).map((h) => [h.spec.handleID.toLowerCase(), h.spec.block]));
  const held = new Map<string, string[]>();
  for (const b of await all(ds, 'IPAMBlock')) {
    const per = new Map<string, number>();
    const [base, prefix] = b.spec.cidr.split('/');
    b.spec.allocations.forEach((idx, ord) => {
      if (idx == null) return;
      const h = b.spec.attributes[idx]!.handle_id!.toLowerCase();
      per.set(h, (per.get(h) ?? 0) + 1);
      held.set(h, [...(held.get(h) ?? []), `${b.spec.cidr}#${ord}`]);
      expect(prefix && base).toBeTruthy();
    });
    for (const [h, n] of per) {
      const counted = handles.get(h)?.[b.spec.cidr] ?? 0;
      expect(counted, `handle ${h} counts ${counted} in ${b.spec.cidr} but holds ${n}`).toBeGreaterThanOrEqual(n);
    }
  }
  return held;
}

/** Counts writes per method+kind and can fail (or apply-then-fail) chosen block updates. */
class Counting implements Datastore {
  readonly type = 'memory' as const;
  writes: string[] = [];
  /** Called for each IPAMBlock update with its index; 'fail' throws before, 'lost' applies it and then throws. */
  onBlockUpdate: ((i: number, res: Resource<'IPAMBlock'>) => 'fail' | 'lost' | undefined) | undefined;
  private blockUpdates = 0;
  constructor(readonly inner: Datastore) {}
  blockWrites(): number {
    return this.writes.filter((w) => w.endsWith(' IPAMBlock')).length;
  }
  get: Datastore['get'] = (kind, name, ns, o) => this.inner.get(kind, name, ns, o);
  list: Datastore['list'] = (kind, o) => this.inner.list(kind, o);
  create: Datastore['create'] = async (res, o) => {
    this.writes.push(`create ${res.kind}`);
    return this.inner.create(res, o);
  };
  update: Datastore['update'] = async (res, o) => {
    this.writes.push(`update ${res.kind}`);
    if (res.kind === 'IPAMBlock') {
      const what = this.onBlockUpdate?.(this.blockUpdates++, res as Resource<'IPAMBlock'>);
      if (what === 'fail') throw new DatastoreError('Unavailable', 'injected: block write failed');
      if (what === 'lost') {
        await this.inner.update(res, o);
        throw new DatastoreError('Unavailable', 'injected: block write applied but its answer was lost');
      }
    }
    return this.inner.update(res, o);
  };
  delete: Datastore['delete'] = async (kind, name, o) => {
    this.writes.push(`delete ${kind}`);
    return this.inner.delete(kind, name, o);
  };
  // Ordered writes through the counted methods: the Kubernetes backend's way, the weakest a crash can meet.
  txn: Datastore['txn'] = function (this: Datastore, ops, o) {
    return orderedTxn(this, ops, o);
  };
  watch: Datastore['watch'] = (kind, o, fn) => this.inner.watch(kind, o, fn);
  close = async () => {};
}

/**
 * A fresh Ipam per request, as the agent's ADD handler makes one, all given
 * the test's one shared state (as the agent's runtime gives its own):
 * batching must still see them all.
 */
const batching = (store: Datastore) => createIpam(store, { lock: 'none', batch: true, shared });

function allocatedOrds(spec: Resource<'IPAMBlock'>['spec']): number {
  return spec.allocations.filter((a) => a != null).length;
}

let ds: MemoryDatastore;
let store: Counting;
let shared: IpamShared;
beforeEach(() => {
  ds = new MemoryDatastore();
  store = new Counting(ds);
  shared = createIpamShared();
});

describe('batched assignment', () => {
  it('100 concurrent assigns: unique addresses, each with its handle, far fewer block writes than requests', async () => {
    await pool(ds, 'p', '10.0.0.0/24', { blockSize: 26 });
    const reqs = Array.from({ length: 100 }, () => req('n1'));
    const got = await Promise.all(reqs.map((r) => batching(store).assign(r)));
    const ips = got.map((g) => g[0]!.ip);
    expect(new Set(ips).size).toBe(100);
    for (const [i, r] of reqs.entries()) {
      expect(got[i]).toHaveLength(1);
      expect(await createIpam(ds, { lock: 'none' }).handleAddresses(r.handleID)).toEqual([ips[i]]);
      expect(got[i]![0]!.address).toBe(`${ips[i]}/26`);
    }
    const held = await checkInvariant(ds);
    expect(held.size).toBe(100);
    expect((await all(ds, 'IPAMHandle')).length).toBe(100);
    // One-by-one would write the block 100 times (plus the claims).
    expect(store.blockWrites()).toBeLessThan(20);
    expect(store.writes.filter((w) => w === 'create IPAMHandle')).toHaveLength(100);
  });

  it('without batch the same load writes the block once per request (the baseline the batch improves on)', async () => {
    await pool(ds, 'p', '10.0.0.0/24', { blockSize: 26 });
    await Promise.all(Array.from({ length: 30 }, () => createIpam(store, { lock: 'none' }).assign(req('n1'))));
    expect(store.writes.filter((w) => w === 'update IPAMBlock').length).toBeGreaterThanOrEqual(30);
  });

  it('batching instances given different shared states do not batch together (one block write per request)', async () => {
    await pool(ds, 'p', '10.0.0.0/24', { blockSize: 26 });
    const got = await Promise.all(
      Array.from({ length: 30 }, () =>
        createIpam(store, { lock: 'none', batch: true, shared: createIpamShared() }).assign(req('n1')),
      ),
    );
    expect(new Set(got.map((g) => g[0]!.ip)).size).toBe(30);
    expect(store.writes.filter((w) => w === 'update IPAMBlock').length).toBeGreaterThanOrEqual(30);
  });

  it('a request with requestedIPs in the same burst gets exactly its address; the others are batched around it', async () => {
    await pool(ds, 'p', '10.0.0.0/24', { blockSize: 26 });
    const reqs = Array.from({ length: 20 }, (_, i) => req('n1', i === 7 ? { requestedIPs: ['10.0.0.50'] } : {}));
    const got = await Promise.all(reqs.map((r) => batching(store).assign(r)));
    expect(got[7]!.map((a) => a.ip)).toEqual(['10.0.0.50']);
    const ips = got.map((g) => g[0]!.ip);
    expect(new Set(ips).size).toBe(20);
    const held = await checkInvariant(ds);
    expect(held.size).toBe(20);
    expect(store.blockWrites()).toBeLessThan(10);
  });

  it('a block that fills up mid-batch spills to a newly claimed block', async () => {
    await pool(ds, 'p', '10.0.0.0/24', { blockSize: 29 });
    // 5 of the first block's 8 addresses are taken one by one first.
    for (let i = 0; i < 5; i++) await createIpam(ds, { lock: 'none' }).assign(req('n1'));
    const reqs = Array.from({ length: 20 }, () => req('n1'));
    const got = await Promise.all(reqs.map((r) => batching(store).assign(r)));
    const ips = got.map((g) => g[0]!.ip);
    expect(new Set(ips).size).toBe(20);
    const blocks = await all(ds, 'IPAMBlock');
    // 25 addresses in /29 blocks: 4 blocks, all this node's, all confirmed.
    expect(blocks.map((b) => b.spec.cidr).sort()).toEqual([
      '10.0.0.0/29',
      '10.0.0.16/29',
      '10.0.0.24/29',
      '10.0.0.8/29',
    ]);
    expect(blocks.every((b) => b.spec.affinity === 'host:n1')).toBe(true);
    expect(blocks.reduce((n, b) => n + allocatedOrds(b.spec), 0)).toBe(25);
    expect((await all(ds, 'BlockAffinity')).every((a) => a.spec.state === 'confirmed')).toBe(true);
    // Each handle counts exactly its one address in its own block (no count left over from a spill).
    for (const [i, r] of reqs.entries()) {
      const h = await ds.get('IPAMHandle', r.handleID);
      expect(h.spec.block).toEqual({ [got[i]![0]!.block]: 1 });
    }
    await checkInvariant(ds);
    expect(store.blockWrites()).toBeLessThan(20);
  });

  it('a failing shared block write is retried request by request', async () => {
    await pool(ds, 'p', '10.0.0.0/24', { blockSize: 26 });
    await createIpam(ds, { lock: 'none' }).assign(req('n1')); // the node holds a block: the batch goes straight to it
    let failedSize = 0;
    store.onBlockUpdate = (i, res) => {
      if (i !== 0) return undefined;
      failedSize = allocatedOrds(res.spec) - 1;
      return 'fail';
    };
    const reqs = Array.from({ length: 12 }, () => req('n1'));
    const got = await Promise.all(reqs.map((r) => batching(store).assign(r)));
    expect(failedSize).toBe(12); // the write that failed carried the whole batch
    expect(new Set(got.map((g) => g[0]!.ip)).size).toBe(12);
    const held = await checkInvariant(ds);
    for (const r of reqs) expect(held.get(r.handleID.toLowerCase())).toHaveLength(1);
    // then one block write per request
    expect(store.writes.filter((w) => w === 'update IPAMBlock')).toHaveLength(13);
  });

  it('a shared write that was applied but reported failed gives each request its address once', async () => {
    await pool(ds, 'p', '10.0.0.0/24', { blockSize: 26 });
    await createIpam(ds, { lock: 'none' }).assign(req('n1'));
    store.onBlockUpdate = (i) => (i === 0 ? 'lost' : undefined);
    const reqs = Array.from({ length: 10 }, () => req('n1'));
    const got = await Promise.all(reqs.map((r) => batching(store).assign(r)));
    const held = await checkInvariant(ds);
    for (const [i, r] of reqs.entries()) {
      expect(held.get(r.handleID.toLowerCase())).toHaveLength(1);
      expect(await createIpam(ds, { lock: 'none' }).handleAddresses(r.handleID)).toEqual([got[i]![0]!.ip]);
    }
    // 1 (earlier) + 10 taken by the lost write; no second address for anyone
    const [block] = await all(ds, 'IPAMBlock');
    expect(allocatedOrds(block!.spec)).toBe(11);
    expect(store.writes.filter((w) => w === 'update IPAMBlock')).toHaveLength(1);
  });

  it('one request whose handle write fails does not fail the rest of its batch', async () => {
    await pool(ds, 'p', '10.0.0.0/24', { blockSize: 26 });
    await createIpam(ds, { lock: 'none' }).assign(req('n1'));
    const reqs = Array.from({ length: 8 }, () => req('n1'));
    const victim = reqs[3]!.handleID;
    let failures = 0;
    const flaky: Datastore = Object.assign(Object.create(store) as Counting, {
      create: (async (res, o) => {
        if (res.kind === 'IPAMHandle' && res.metadata.name === victim && failures++ < 2)
          throw new DatastoreError('Unavailable', 'injected: handle write failed');
        return store.create(res, o);
      }) as Datastore['create'],
    });
    const results = await Promise.allSettled(reqs.map((r) => batching(flaky).assign(r)));
    // The victim failed twice (batched, then alone); everybody else got an address.
    expect(results.map((r) => r.status)).toEqual([
      'fulfilled',
      'fulfilled',
      'fulfilled',
      'rejected',
      'fulfilled',
      'fulfilled',
      'fulfilled',
      'fulfilled',
    ]);
    expect((results[3] as PromiseRejectedResult).reason).toBeInstanceOf(DatastoreError);
    const held = await checkInvariant(ds);
    expect(held.has(victim.toLowerCase())).toBe(false);
    expect(held.size).toBe(8); // 7 + the earlier one
    await expect(ds.get('IPAMHandle', victim)).rejects.toThrow();
  });

  it('a batch step that fails after serving one block keeps what it served and fails only the rest', async () => {
    await pool(ds, 'p', '10.0.0.0/24', { blockSize: 29 });
    const one = createIpam(ds, { lock: 'none' });
    const early = [];
    for (let i = 0; i < 9; i++) early.push(req('n1'));
    for (const r of early) await one.assign(r); // 10.0.0.0/29 full, 10.0.0.8/29 holds one
    await one.releaseByHandle(early[0]!.handleID);
    await one.releaseByHandle(early[1]!.handleID); // two free in the first block
    const second = await ds.get('IPAMBlock', '10.0.0.8-29');
    await ds.update({ ...second, spec: { ...second.spec, allocations: second.spec.allocations.slice(0, 7) } }); // hand-broken
    const reqs = Array.from({ length: 6 }, () => req('n1'));
    const results = await Promise.allSettled(reqs.map((r) => batching(store).assign(r)));
    expect(results.map((r) => r.status)).toEqual([
      'fulfilled',
      'fulfilled',
      'rejected',
      'rejected',
      'rejected',
      'rejected',
    ]);
    expect(results.slice(0, 2).map((r) => (r as PromiseFulfilledResult<Assigned[]>).value[0]!.block)).toEqual([
      '10.0.0.0/29',
      '10.0.0.0/29',
    ]);
    for (const r of results.slice(2))
      expect(String((r as PromiseRejectedResult).reason)).toMatch(/IPAMBlock 10\.0\.0\.8\/29 is malformed/);
    const held = await checkInvariant(ds);
    for (const r of reqs.slice(0, 2)) expect(held.get(r.handleID.toLowerCase())).toHaveLength(1);
    for (const r of reqs.slice(2)) await expect(ds.get('IPAMHandle', r.handleID)).rejects.toThrow();
  });

  it('releases interleaved with batched assigns: nothing shared, nothing lost', async () => {
    await pool(ds, 'p', '10.0.0.0/24', { blockSize: 27 });
    const first = Array.from({ length: 30 }, () => req('n1'));
    await Promise.all(first.map((r) => batching(store).assign(r)));
    const second = Array.from({ length: 30 }, () => req('n1'));
    const ops: Array<Promise<unknown>> = [];
    for (let i = 0; i < 30; i++) {
      ops.push(batching(store).assign(second[i]!));
      if (i % 2 === 0) ops.push(createIpam(store, { lock: 'none' }).releaseByHandle(first[i]!.handleID));
    }
    await Promise.all(ops);
    const held = await checkInvariant(ds);
    const live = [...first.filter((_, i) => i % 2 !== 0), ...second];
    expect([...held.keys()].sort()).toEqual(live.map((r) => r.handleID.toLowerCase()).sort());
    for (const r of live) expect(held.get(r.handleID.toLowerCase())).toHaveLength(1);
    const allAddrs = [...held.values()].flat();
    expect(new Set(allAddrs).size).toBe(allAddrs.length);
    expect((await all(ds, 'IPAMHandle')).length).toBe(live.length);
  });

  it('dual stack in a batch is all-or-nothing per request', async () => {
    await pool(ds, 'v4', '10.0.0.0/24', { blockSize: 26 });
    // Four IPv6 addresses in all (one /126 block) and no borrowing elsewhere.
    await pool(ds, 'v6', 'fd00::/126', { blockSize: 126 });
    const reqs = Array.from({ length: 7 }, () => req('n1', { assignIPv6: true }));
    const results = await Promise.allSettled(reqs.map((r) => batching(store).assign(r)));
    const ok = results.filter((r): r is PromiseFulfilledResult<Assigned[]> => r.status === 'fulfilled');
    const bad = results.filter((r): r is PromiseRejectedResult => r.status === 'rejected');
    expect(ok).toHaveLength(4);
    for (const r of ok) expect(r.value.map((a) => a.family)).toEqual([4, 6]);
    expect(new Set(ok.flatMap((r) => r.value.map((a) => a.ip))).size).toBe(8);
    expect(bad).toHaveLength(3);
    for (const r of bad) {
      expect(r.reason).toBeInstanceOf(IpamError);
      expect((r.reason as IpamError).kind).toBe('exhausted');
      expect(toCniError(r.reason).code).toBe(ErrorCodes.IpamFailure);
      expect((r.reason as IpamError).message).toMatch(
        /no free IPv6 address .* \(the IPv4 address 10\.0\.0\.\d+ assigned in the same request was released: dual-stack assignment is all-or-nothing\)/,
      );
    }
    const held = await checkInvariant(ds);
    expect(held.size).toBe(4);
    for (const r of held.values()) expect(r).toHaveLength(2);
    expect((await all(ds, 'IPAMHandle')).length).toBe(4);
  });

  it('a retried ADD in a batch gets back what its handle holds', async () => {
    await pool(ds, 'p', '10.0.0.0/24', { blockSize: 26 });
    const again = req('n1');
    const [before] = await createIpam(ds, { lock: 'none' }).assign(again);
    const got = await Promise.all([req('n1'), again, req('n1'), req('n1')].map((r) => batching(store).assign(r)));
    expect(got[1]!.map((a) => a.ip)).toEqual([before!.ip]);
    expect(new Set(got.map((g) => g[0]!.ip)).size).toBe(4);
    expect(got[1]![0]!.held).toBe(true);
    const held = await checkInvariant(ds);
    expect(held.get(again.handleID.toLowerCase())).toHaveLength(1);
  });

  it('a retried dual-stack ADD in a batch gets both addresses it holds, and a failure of the batch for it never frees them', async () => {
    await pool(ds, 'v4', '10.0.0.0/24', { blockSize: 26 });
    await pool(ds, 'v6', 'fd00::/122', { blockSize: 122 });
    const again = req('n1', { assignIPv6: true });
    const before = await createIpam(ds, { lock: 'none' }).assign(again);
    const got = await Promise.all(
      [req('n1', { assignIPv6: true }), again, req('n1', { assignIPv6: true })].map((r) => batching(store).assign(r)),
    );
    expect(got[1]!.map((a) => a.ip)).toEqual(before.map((a) => a.ip));
    const held = await checkInvariant(ds);
    expect(held.get(again.handleID.toLowerCase())).toHaveLength(2);
    expect(new Set(got.flatMap((g) => g.map((a) => a.ip))).size).toBe(6);
    // The IPv6 pool is one /122 block of 64, three taken: fill it, then retry in a batch that runs out of IPv6
    // addresses.
    for (let i = 0; i < 61; i++)
      await createIpam(ds, { lock: 'none' }).assign(req('n1', { assignIPv4: false, assignIPv6: true }));
    const second = await Promise.allSettled(
      [req('n1', { assignIPv6: true }), again].map((r) => batching(store).assign(r)),
    );
    expect(second[0]!.status).toBe('rejected');
    expect(second[1]).toMatchObject({
      status: 'fulfilled',
      value: before.map((a) => expect.objectContaining({ ip: a.ip, held: true })),
    });
    expect((await checkInvariant(ds)).get(again.handleID.toLowerCase())).toHaveLength(2);
    // A container that holds only an IPv4 address asks again for both (its netconf changed): no IPv6 is left,
    // so it fails, and the failure leaves its IPv4 address (the earlier ADD's) held.
    const v4only = req('n1');
    const [mine] = await createIpam(ds, { lock: 'none' }).assign(v4only);
    const third = await Promise.allSettled(
      [req('n1', { assignIPv6: true }), { ...v4only, assignIPv6: true }].map((r) => batching(store).assign(r)),
    );
    expect(third.map((r) => r.status)).toEqual(['rejected', 'rejected']);
    expect(await createIpam(ds, { lock: 'none' }).handleAddresses(v4only.handleID)).toEqual([mine!.ip]);
  });

  it('requests for different pools are not mixed into one batch', async () => {
    await pool(ds, 'a', '10.0.0.0/24', { blockSize: 26 });
    await pool(ds, 'b', '10.1.0.0/24', { blockSize: 26 });
    const reqs = Array.from({ length: 10 }, (_, i) => req('n1', { ipv4Pools: [i % 2 ? 'b' : 'a'] }));
    const got = await Promise.all(reqs.map((r) => batching(store).assign(r)));
    for (const [i, g] of got.entries()) {
      expect(g[0]!.pool).toBe(i % 2 ? 'b' : 'a');
      expect(g[0]!.ip.startsWith(i % 2 ? '10.1.0.' : '10.0.0.')).toBe(true);
    }
    await checkInvariant(ds);
  });

  it('concurrent releases share one transaction: every address freed, every handle and extra write gone', async () => {
    await pool(ds, 'p', '10.0.0.0/24', { blockSize: 26 });
    const reqs = Array.from({ length: 40 }, () => req('n1'));
    await Promise.all(reqs.map((r) => batching(ds).assign(r)));
    // An extra write per release, as DEL deletes the endpoint in the same transaction.
    for (const r of reqs)
      await ds.create({
        apiVersion: API_VERSION,
        kind: 'ClusterInformation',
        metadata: { name: `x-${r.handleID}` },
        spec: {},
      });
    const before = store.blockWrites();
    const freed = await Promise.all(
      reqs.map((r) =>
        batching(store).releaseByHandle(r.handleID, {
          alsoWrite: [{ op: 'delete', kind: 'ClusterInformation', name: `x-${r.handleID}` }],
        }),
      ),
    );
    for (const f of freed) expect(f).toHaveLength(1);
    expect(new Set(freed.flat()).size).toBe(40);
    // The first release runs alone, the rest wait for it and go together (the block is the node's last, so it stays).
    expect(store.blockWrites() - before).toBeLessThanOrEqual(3);
    expect(await all(ds, 'IPAMHandle')).toEqual([]);
    expect(await all(ds, 'ClusterInformation')).toEqual([]);
    const [block] = await all(ds, 'IPAMBlock');
    expect(allocatedOrds(block!.spec)).toBe(0);
  });

  it('the agent reads the blocks it saw full only when its other blocks have no room', async () => {
    await pool(ds, 'p', '10.0.0.0/24', { blockSize: 29 });
    let blockReads = 0;
    const counted: Datastore = Object.assign(Object.create(store) as Counting, {
      get: ((kind, name, ns, o) => {
        if (kind === 'IPAMBlock') blockReads++;
        return store.get(kind, name, ns, o);
      }) as Datastore['get'],
    });
    const first = Array.from({ length: 37 }, () => req('n1'));
    for (const r of first) await batching(counted).assign(r); // 4 full blocks of 8, the fifth holds 5
    blockReads = 0;
    const [a] = await batching(counted).assign(req('n1'));
    expect(a!.block).toBe('10.0.0.32/29');
    expect(blockReads, 'block reads for one ADD with four full blocks').toBe(1);
    // A slot this store freed is known free at once: the lowest block is used again.
    const freed = await batching(counted).releaseByHandle(first[2]!.handleID);
    expect(freed).toEqual(['10.0.0.2']);
    blockReads = 0;
    const [b] = await batching(counted).assign(req('n1'));
    expect(b!.ip).toBe('10.0.0.2');
    expect(blockReads).toBe(2); // the freed block and the one with room, in one round trip
    await checkInvariant(ds);
  });
});
