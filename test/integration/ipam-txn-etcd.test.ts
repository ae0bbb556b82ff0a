// The IPAM transaction on a real etcd: an assignment (handle, block
// compare-and-swap, workload endpoint) and a release (block, handle, endpoint)
// each cost one etcd write, counted by etcd itself (/metrics); concurrent
// assignments on three nodes never share an address and leave no handle
// without its address, no address without its handle, no endpoint without
// its addresses.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { etcdStores, startEtcd, type EtcdServer } from '../support/etcd.js';
import { affinityName, blockName, workloadEndpointName } from '../../src/model/names.js';
import { API_VERSION, type Resource } from '../../src/model/resources.js';
import type { Datastore, TxnOp } from '../../src/datastore/types.js';
import { ErrorCodes } from '../../src/errors.js';
import { IpamError } from '../../src/ipam/errors.js';
import { toCniError } from '../../src/cni/errors.js';
import {
  createIpam,
  createIpamShared,
  type AssignRequest,
  type Assigned,
  type Piggyback,
} from '../../src/ipam/index.js';
import { workloadEndpoint } from '../support/builders.js';

let etcd: EtcdServer;
const stores = etcdStores(() => etcd);
const open = () => stores.open();

beforeAll(async () => {
  etcd = await startEtcd();
});
afterAll(async () => {
  await stores.closeAll();
  await etcd?.stop();
});

/** etcd's count of committed write requests (one per Put, Txn or DeleteRange). */
/** Keys written or deleted (etcd's MVCC counters): unlike committed proposals, no internal etcd write counts here. */
async function keyWrites(): Promise<number> {
  const text = await (await fetch(`${etcd.endpoint}/metrics`)).text();
  const n = (name: string) => {
    const m = text.match(new RegExp(`^${name} ([0-9.e+]+)$`, 'm'));
    if (!m) throw new Error(`etcd /metrics has no ${name}`);
    return Number(m[1]);
  };
  return n('etcd_mvcc_put_total') + n('etcd_mvcc_delete_total');
}

async function etcdWrites(): Promise<number> {
  const text = await (await fetch(`${etcd.endpoint}/metrics`)).text();
  const m = text.match(/^etcd_server_proposals_committed_total ([0-9.e+]+)$/m);
  if (!m) throw new Error('etcd /metrics has no etcd_server_proposals_committed_total');
  return Number(m[1]);
}

const NS = 'txn';

function endpointFor(
  node: string,
  pod: string,
  containerID: string,
  assigned: Assigned[],
): Resource<'WorkloadEndpoint'> {
  return workloadEndpoint({
    node,
    namespace: NS,
    pod,
    containerID,
    ips: assigned.map((a) => a.ip),
    interfaceName: `tx${containerID}`.slice(0, 15),
  });
}

/** The plugin's shape of an ADD: the endpoint rides in the IPAM transaction. */
function withEndpoint(req: AssignRequest, pod: string): { req: AssignRequest; committed: () => boolean } {
  let done = false;
  const piggyback: Piggyback = {
    ops: (assigned) => [{ op: 'create', res: endpointFor(req.node, pod, req.handleID, assigned) }],
    committed: () => {
      done = true;
    },
  };
  return { req: { ...req, piggyback }, committed: () => done };
}

async function delOp(ds: Datastore, node: string, pod: string): Promise<TxnOp[]> {
  const name = workloadEndpointName(node, 'k8s', pod, 'eth0');
  try {
    const w = await ds.get('WorkloadEndpoint', name, NS);
    return [{ op: 'delete', kind: 'WorkloadEndpoint', name, namespace: NS, revision: w.metadata.resourceVersion! }];
  } catch {
    return [];
  }
}

let seq = 0;
const request = (node: string): AssignRequest => {
  const id = `c${++seq}x${process.pid}`;
  return { handleID: `net.${id}`, node, attrs: { namespace: NS, pod: `p-${id}` }, assignIPv4: true, assignIPv6: false };
};

describe('IPAM transaction on etcd', () => {
  it('an ADD that claims a new block is one etcd write (affinity, block, handle, endpoint), and a DEL that gives a block back is one too', async () => {
    const ds = await open();
    await ds.create({
      apiVersion: API_VERSION,
      kind: 'IPPool',
      metadata: { name: 'claim-write' },
      spec: { cidr: '10.93.0.0/24', blockSize: 28 },
    });
    const ipam = createIpam(ds, { lock: 'none' });
    const { req, committed } = withEndpoint(request('c1'), 'pod-claim');
    const before = await etcdWrites();
    const [got] = await ipam.assign(req);
    expect((await etcdWrites()) - before, 'etcd writes for an ADD that claims a block').toBe(1);
    expect(committed()).toBe(true);
    expect((await ds.get('BlockAffinity', affinityName('c1', got!.block))).spec.state).toBe('confirmed');
    // Fill the block (15 more), then one more ADD claims a second block.
    const rest = Array.from({ length: 15 }, () => request('c1'));
    for (const r of rest) await ipam.assign(r);
    const last = request('c1');
    const b0 = await etcdWrites();
    const [second] = await ipam.assign(last);
    expect((await etcdWrites()) - b0, 'etcd writes for the ADD that claims the second block').toBe(1);
    expect(second!.block).not.toBe(got!.block);
    // Releasing the second block's only address gives that block back (the node keeps its first): one write.
    const d0 = await etcdWrites();
    expect(await ipam.releaseByHandle(last.handleID)).toEqual([second!.ip]);
    expect((await etcdWrites()) - d0, 'etcd writes for a DEL that gives a block back').toBe(1);
    await expect(ds.get('IPAMBlock', blockName(second!.block))).rejects.toThrow(/not found/);
    await expect(ds.get('BlockAffinity', affinityName('c1', second!.block))).rejects.toThrow(/not found/);
    for (const r of [req, ...rest]) await ipam.releaseByHandle(r.handleID);
    await ds.delete('WorkloadEndpoint', workloadEndpointName('c1', 'k8s', 'pod-claim', 'eth0'), { namespace: NS });
  });

  it('an ADD (handle, block, endpoint) is one etcd write, and so is a DEL', async () => {
    const ds = await open();
    await ds.create({
      apiVersion: API_VERSION,
      kind: 'IPPool',
      metadata: { name: 'one-write' },
      spec: { cidr: '10.91.0.0/24', blockSize: 28 },
    });
    const ipam = createIpam(ds, { lock: 'none' });
    // The first claims the node's block (affinity and block writes): not the hot path.
    const first = request('w1');
    await ipam.assign(first);

    const r = request('w1');
    const { req, committed } = withEndpoint(r, 'pod-one');
    const before = await etcdWrites();
    const [got] = await ipam.assign(req);
    const afterAdd = await etcdWrites();
    expect(afterAdd - before, 'etcd writes for one ADD').toBe(1);
    expect(committed()).toBe(true);
    expect(
      (await ds.get('WorkloadEndpoint', workloadEndpointName('w1', 'k8s', 'pod-one', 'eth0'), NS)).spec.ipNetworks,
    ).toEqual([`${got!.ip}/32`]);
    expect((await ds.get('IPAMHandle', r.handleID)).spec.block).toEqual({ [got!.block]: 1 });

    const also = await delOp(ds, 'w1', 'pod-one');
    const beforeDel = await etcdWrites();
    expect(await ipam.releaseByHandle(r.handleID, { alsoWrite: also })).toEqual([got!.ip]);
    expect((await etcdWrites()) - beforeDel, 'etcd writes for one DEL').toBe(1);
    await expect(ds.get('IPAMHandle', r.handleID)).rejects.toThrow(/not found/);
    await expect(ds.get('WorkloadEndpoint', workloadEndpointName('w1', 'k8s', 'pod-one', 'eth0'), NS)).rejects.toThrow(
      /not found/,
    );
    expect(await ipam.whoHas(got!.ip)).toBeUndefined();

    // A repeated ADD of the same container writes nothing and gets the same address.
    const again = request('w1');
    const [a1] = await ipam.assign(again);
    const w0 = await keyWrites();
    const [a2] = await ipam.assign(again);
    expect(a2!.ip).toBe(a1!.ip);
    expect((await keyWrites()) - w0, 'keys written by a repeated ADD').toBe(0);
    await ipam.releaseByHandle(again.handleID);
    await ipam.releaseByHandle(first.handleID);
  });

  it('300 concurrent ADDs on 3 nodes (one /24, blockSize 29): no duplicate, every address with its handle and endpoint; 300 DELs free everything', async () => {
    const setup = await open();
    await setup.create({
      apiVersion: API_VERSION,
      kind: 'IPPool',
      metadata: { name: 'three-nodes' },
      spec: { cidr: '10.92.0.0/24', blockSize: 29 },
    });
    const nodes = ['n1', 'n2', 'n3'];
    // One connection and one shared IPAM state per node, as three agents would have.
    const dss = await Promise.all(nodes.map(() => open()));
    const shareds = nodes.map(() => createIpamShared());
    const reqs = Array.from({ length: 300 }, (_, i) => ({ node: nodes[i % 3]!, i }));
    const writes0 = await etcdWrites();
    const results = await Promise.allSettled(
      reqs.map(async ({ node, i }) => {
        const ds = dss[i % 3]!;
        const { req, committed } = withEndpoint({ ...request(node), ipv4Pools: ['three-nodes'] }, `pod-${i}`);
        const got = await createIpam(ds, { lock: 'none', batch: true, shared: shareds[i % 3]! }).assign(req);
        return { req, got, committed: committed() };
      }),
    );
    const writes = (await etcdWrites()) - writes0;
    const ok = results.flatMap((r) => (r.status === 'fulfilled' ? [r.value] : []));
    const failed = results.flatMap((r) => (r.status === 'rejected' ? [r.reason as unknown] : []));
    // 256 addresses for 300 requests: the rest must fail cleanly (exhausted, or try again later).
    expect(ok.length).toBeGreaterThanOrEqual(200);
    expect(ok.length).toBeLessThanOrEqual(256);
    for (const e of failed) {
      expect(e).toBeInstanceOf(IpamError);
      expect([ErrorCodes.IpamFailure, ErrorCodes.TryAgainLater]).toContain(toCniError(e).code);
    }
    const ips = ok.map((o) => o.got[0]!.ip);
    expect(new Set(ips).size, 'duplicate addresses').toBe(ips.length);
    for (const o of ok) expect(o.committed, `endpoint of ${o.req.handleID} went with its address`).toBe(true);
    // For information: block claims (three writes each, 32 blocks), races between the nodes for
    // blocks and borrowed addresses, and the exhausted requests' attempts all count here.
    console.log(`300 ADDs on 3 nodes: ${ok.length} served, ${failed.length} exhausted, ${writes} etcd writes`);

    // The store: every allocated address has its handle, every handle its addresses, every endpoint its addresses.
    const [blocks, handles, weps] = await Promise.all([
      setup.list('IPAMBlock'),
      setup.list('IPAMHandle'),
      setup.list('WorkloadEndpoint', { namespace: NS }),
    ]);
    const held = new Map<string, number>();
    for (const b of blocks.items) {
      for (const idx of b.spec.allocations) {
        if (idx == null) continue;
        const h = b.spec.attributes[idx]!.handle_id!;
        held.set(h, (held.get(h) ?? 0) + 1);
      }
    }
    const handleIDs = new Set(handles.items.map((h) => h.spec.handleID));
    for (const h of held.keys()) expect(handleIDs.has(h), `address of ${h} without its handle`).toBe(true);
    for (const h of handles.items)
      expect(held.get(h.spec.handleID) ?? 0, `handle ${h.spec.handleID} without an address`).toBeGreaterThan(0);
    // An ADD that answered "try again" (code 11) after its transaction had
    // committed still holds its address and endpoint until the runtime's DEL
    // of that container, as the CNI contract has it: at most one per such ADD.
    const tryAgain = failed.filter((e) => toCniError(e).code === ErrorCodes.TryAgainLater).length;
    const heldTotal = [...held.values()].reduce((a, b) => a + b, 0);
    expect(heldTotal).toBeGreaterThanOrEqual(ok.length);
    expect(heldTotal - ok.length).toBeLessThanOrEqual(tryAgain);
    expect(weps.items.length).toBeGreaterThanOrEqual(ok.length);
    expect(weps.items.length - ok.length).toBeLessThanOrEqual(tryAgain);
    for (const w of weps.items)
      expect(held.get(w.spec.containerID), `endpoint ${w.metadata.name} without addresses`).toBe(1);

    // 300 DELs (the runtime DELs every pod, also the failed ones).
    await Promise.all(
      reqs.map(async ({ node, i }, k) => {
        const ds = dss[i % 3]!;
        const handleID =
          (results[k]!.status === 'fulfilled'
            ? (results[k] as PromiseFulfilledResult<(typeof ok)[number]>).value.req.handleID
            : undefined) ?? `net.none${k}`;
        await createIpam(ds, { lock: 'none' }).releaseByHandle(handleID, {
          alsoWrite: await delOp(ds, node, `pod-${i}`),
        });
      }),
    );
    // The runtime's DEL of a "try again" ADD that had committed (its handle is the one left).
    for (const h of (await setup.list('IPAMHandle')).items)
      await createIpam(setup, { lock: 'none' }).releaseByHandle(h.spec.handleID);
    for (const w of (await setup.list('WorkloadEndpoint', { namespace: NS })).items)
      await setup.delete('WorkloadEndpoint', w.metadata.name, { namespace: NS });
    const [b2, h2, w2] = await Promise.all([
      setup.list('IPAMBlock'),
      setup.list('IPAMHandle'),
      setup.list('WorkloadEndpoint', { namespace: NS }),
    ]);
    for (const b of b2.items)
      expect(
        b.spec.allocations.every((a) => a == null),
        `block ${b.spec.cidr} still allocates`,
      ).toBe(true);
    expect(h2.items).toEqual([]);
    expect(w2.items).toEqual([]);
  }, 240_000);

  it('state the agent keeps (blocks seen full) going stale behind its back never yields a duplicate', async () => {
    const ds = await open();
    const other = await open();
    await ds.create({
      apiVersion: API_VERSION,
      kind: 'IPPool',
      metadata: { name: 'stale' },
      spec: { cidr: '10.94.0.0/28', blockSize: 30 },
    });
    const shared = createIpamShared();
    const agent = () => createIpam(ds, { lock: 'none', batch: true, shared });
    const mk = () => ({ ...request('s1'), ipv4Pools: ['stale'] });
    const got: string[] = [];
    for (let i = 0; i < 4; i++) got.push((await agent().assign(mk()))[0]!.ip); // block 10.94.0.0/30 now full, seen full
    // Another writer frees a slot of that block and then takes it for itself, between the agent's ADDs.
    const b = await other.get('IPAMBlock', '10.94.0.0-30');
    const spec = structuredClone(b.spec);
    const victim = spec.attributes[spec.allocations[1]!]!.handle_id!;
    spec.attributes[spec.allocations[1]!] = { handle_id: 'net.intruder' };
    await other.txn([
      { op: 'update', res: { ...b, spec } },
      {
        op: 'create',
        res: {
          apiVersion: API_VERSION,
          kind: 'IPAMHandle',
          metadata: { name: 'net.intruder' },
          spec: { handleID: 'net.intruder', block: { '10.94.0.0/30': 1 } },
        },
      },
    ]);
    // And changes the agent's second block under it (takes its first free slot).
    const next = (await agent().assign(mk()))[0]!;
    const b2 = await other.get('IPAMBlock', blockName(next.block));
    const free = b2.spec.allocations.findIndex((a) => a == null);
    const s2 = structuredClone(b2.spec);
    s2.attributes.push({ handle_id: 'net.intruder2' });
    s2.allocations[free] = s2.attributes.length - 1;
    s2.unallocated = s2.unallocated.filter((o) => o !== free);
    await other.txn([
      { op: 'update', res: { ...b2, spec: s2 } },
      {
        op: 'create',
        res: {
          apiVersion: API_VERSION,
          kind: 'IPAMHandle',
          metadata: { name: 'net.intruder2' },
          spec: { handleID: 'net.intruder2', block: { [next.block]: 1 } },
        },
      },
    ]);
    const after = (await agent().assign(mk()))[0]!;
    const all = [...got, next.ip, after.ip];
    expect(new Set(all).size).toBe(all.length);
    expect(await createIpam(ds, { lock: 'none' }).whoHas(after.ip)).toMatchObject({
      handle: expect.stringMatching(/^net\.c/),
    });
    expect(victim).toMatch(/^net\.c/);
  });
});
