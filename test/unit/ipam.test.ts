// The block allocator on the in-memory datastore (same CAS semantics as etcd
// and Kubernetes). Real allocator, real store; faults are injected by a thin
// wrapper that counts or fails calls.
import { beforeEach, describe, expect, it } from 'vitest';
import { orderedTxn } from '../../src/datastore/txn.js';
import { MemoryDatastore } from '../../src/datastore/memory.js';
import { API_VERSION, type IPAMConfigSpec, type Kind, type Resource } from '../../src/model/resources.js';
import type { Datastore } from '../../src/datastore/types.js';
import { type CniError, DatastoreError, ErrorCodes } from '../../src/errors.js';
import { IpamError } from '../../src/ipam/errors.js';
import { toCniError } from '../../src/cni/errors.js';
import { createIpam, type AssignRequest } from '../../src/ipam/index.js';
import { createPool } from '../support/builders.js';
import { blockName } from '../../src/model/names.js';

const pool = createPool;
async function ipamConfig(ds: Datastore, spec: IPAMConfigSpec): Promise<void> {
  await ds.create({ apiVersion: API_VERSION, kind: 'IPAMConfig', metadata: { name: 'default' }, spec });
}
async function node(ds: Datastore, name: string, labels: Record<string, string>): Promise<void> {
  await ds.create({ apiVersion: API_VERSION, kind: 'Node', metadata: { name, labels }, spec: {} });
}

let seq = 0;
function req(nodeName: string, extra: Partial<AssignRequest> = {}): AssignRequest {
  const id = `c${++seq}`;
  return {
    handleID: `net.${id}`,
    node: nodeName,
    attrs: { namespace: 'ns', pod: `p-${id}` },
    assignIPv4: true,
    assignIPv6: false,
    ...extra,
  };
}

async function errorOf(p: Promise<unknown>): Promise<CniError> {
  try {
    await p;
  } catch (e) {
    // The domain throws IpamErrors; the code is what the CNI edge makes of it.
    expect(e).toBeInstanceOf(IpamError);
    return toCniError(e);
  }
  throw new Error('expected the call to fail');
}

async function all<K extends Kind>(ds: Datastore, kind: K): Promise<Array<Resource<K>>> {
  return (await ds.list(kind)).items;
}

/** Every allocated address has a handle that counts it; every handle counts at least what it holds. */
async function checkInvariant(ds: Datastore): Promise<{ allocated: number; handles: number }> {
  const handles = new Map((await all(ds, 'IPAMHandle')).map((h) => [h.spec.handleID, h.spec.block]));
  let allocated = 0;
  for (const b of await all(ds, 'IPAMBlock')) {
    const per = new Map<string, number>();
    b.spec.allocations.forEach((idx) => {
      if (idx == null) return;
      allocated++;
      const h = b.spec.attributes[idx]!.handle_id!;
      per.set(h, (per.get(h) ?? 0) + 1);
    });
    for (const [h, n] of per) {
      const counted = handles.get(h)?.[b.spec.cidr] ?? 0;
      expect(counted, `handle ${h} counts ${counted} in ${b.spec.cidr} but holds ${n}`).toBeGreaterThanOrEqual(n);
    }
  }
  return { allocated, handles: handles.size };
}

/** Wraps a store: counts calls per method+kind and can fail chosen calls. */
class Faulty implements Datastore {
  readonly type = 'memory' as const;
  calls: string[] = [];
  writes = 0;
  failAfterWrites: number | undefined;
  failIf: ((op: string, kind: Kind) => DatastoreError | undefined) | undefined;
  constructor(readonly inner: Datastore) {}
  private gate(op: string, kind: Kind): void {
    this.calls.push(`${op} ${kind}`);
    const f = this.failIf?.(op, kind);
    if (f) throw f;
    if (op !== 'get' && op !== 'list') {
      if (this.failAfterWrites !== undefined && this.writes >= this.failAfterWrites)
        throw new DatastoreError('Unavailable', 'injected outage');
      this.writes++;
    }
  }
  get: Datastore['get'] = async (kind, name, ns, o) => (this.gate('get', kind), this.inner.get(kind, name, ns, o));
  list: Datastore['list'] = async (kind, o) => (this.gate('list', kind), this.inner.list(kind, o));
  create: Datastore['create'] = async (res, o) => (this.gate('create', res.kind), this.inner.create(res, o));
  update: Datastore['update'] = async (res, o) => (this.gate('update', res.kind), this.inner.update(res, o));
  delete: Datastore['delete'] = async (kind, name, o) => (this.gate('delete', kind), this.inner.delete(kind, name, o));
  // Ordered writes through the counted methods: the Kubernetes backend's way, the weakest a crash can meet.
  txn: Datastore['txn'] = function (this: Datastore, ops, o) {
    return orderedTxn(this, ops, o);
  };
  watch: Datastore['watch'] = (kind, o, fn) => this.inner.watch(kind, o, fn);
  close = async () => {};
}

let ds: MemoryDatastore;
beforeEach(() => {
  ds = new MemoryDatastore();
});
const ipam = (store: Datastore = ds, maxRetries?: number) =>
  createIpam(store, { lock: 'none', ...(maxRetries !== undefined ? { maxRetries } : {}) });

describe('block claim and allocation', () => {
  it('claims a block by affinity and records the handle and attributes', async () => {
    await pool(ds, 'p', '10.0.0.0/24', { blockSize: 29 });
    const r = req('n1');
    const [a] = await ipam().assign(r);
    expect(a).toEqual({ address: '10.0.0.0/29', ip: '10.0.0.0', family: 4, pool: 'p', block: '10.0.0.0/29' });
    const affs = await all(ds, 'BlockAffinity');
    expect(affs.map((x) => [x.metadata.name, x.spec.state, x.spec.node, x.spec.cidr])).toEqual([
      ['n1-ipv4-10.0.0.0-29', 'confirmed', 'n1', '10.0.0.0/29'],
    ]);
    const block = await ds.get('IPAMBlock', '10.0.0.0-29');
    expect(block.spec.affinity).toBe('host:n1');
    const attr = block.spec.attributes[block.spec.allocations[0]!]!;
    expect(attr.handle_id).toBe(r.handleID);
    expect(attr.secondary).toMatchObject({ namespace: 'ns', pod: r.attrs.pod, node: 'n1', handle: r.handleID });
    expect(Date.parse(attr.secondary!.timestamp!)).not.toBeNaN();
    const h = await ds.get('IPAMHandle', r.handleID);
    expect(h.spec).toEqual({ handleID: r.handleID, block: { '10.0.0.0/29': 1 } });
    expect(await ipam().whoHas('10.0.0.0')).toMatchObject({
      handle: r.handleID,
      attrs: { pod: r.attrs.pod, node: 'n1' },
    });
    expect(await ipam().handleAddresses(r.handleID)).toEqual(['10.0.0.0']);
  });

  it('an affine block with room costs one parallel read round, one block read, one handle write and one block CAS (the handle is not read)', async () => {
    await pool(ds, 'p', '10.0.0.0/24', { blockSize: 29 });
    await ipam().assign(req('n1'));
    const f = new Faulty(ds);
    await ipam(f).assign(req('n1'));
    expect(f.calls.sort()).toEqual(
      [
        'create IPAMHandle',
        'get IPAMBlock',
        'get IPAMConfig',
        'list BlockAffinity',
        'list IPPool',
        'update IPAMBlock',
      ].sort(),
    );
  });

  it('on a store with atomic transactions, an ADD that claims a new block is one write: the confirmed affinity, the block holding the address and the handle together', async () => {
    await pool(ds, 'p', '10.0.0.0/24', { blockSize: 29 });
    const writes: string[] = [];
    const counted = new Proxy(ds, {
      get(target, prop, receiver) {
        const v = Reflect.get(target, prop, receiver) as unknown;
        if (typeof v !== 'function') return v;
        if (prop === 'txn')
          return (ops: Parameters<Datastore['txn']>[0]) => (
            writes.push(`txn ${ops.map((x) => `${x.op} ${'res' in x ? x.res.kind : x.kind}`).join(', ')}`),
            target.txn(ops)
          );
        if (prop === 'create' || prop === 'update' || prop === 'delete')
          return (...a: unknown[]) => (writes.push(String(prop)), (v as (...x: unknown[]) => unknown).apply(target, a));
        return (v as (...x: unknown[]) => unknown).bind(target);
      },
    }) as Datastore;
    expect(counted.atomicTxn).toBe(true);
    const [a] = await createIpam(counted, { lock: 'none' }).assign(req('n1'));
    expect(writes).toEqual(['txn create IPAMHandle, create BlockAffinity, create IPAMBlock']);
    expect((await all(ds, 'BlockAffinity')).map((x) => x.spec)).toEqual([
      { state: 'confirmed', node: 'n1', cidr: a!.block },
    ]);
    expect((await ds.get('IPAMBlock', blockName(a!.block))).spec.affinity).toBe('host:n1');
    expect(await checkInvariant(ds)).toEqual({ allocated: 1, handles: 1 });
  });

  it('on a store with atomic transactions, a block another node claimed meanwhile: the one-write claim is refused and the two-phase claim moves on to the next block', async () => {
    await pool(ds, 'p', '10.0.0.0/24', { blockSize: 29 });
    const i1 = createIpam(ds, { lock: 'none' });
    // n2's claim of the first block lands while n1 decides (n1's block list is read before n2 writes).
    const racing = new Proxy(ds, {
      get(target, prop, receiver) {
        const v = Reflect.get(target, prop, receiver) as unknown;
        if (prop === 'txn') {
          return async (ops: Parameters<Datastore['txn']>[0]) => {
            if (ops.some((x) => 'res' in x && x.res.kind === 'BlockAffinity') && !(await all(ds, 'IPAMBlock')).length)
              await i1.assign(req('n2'));
            return target.txn(ops);
          };
        }
        return typeof v === 'function' ? (v as (...x: unknown[]) => unknown).bind(target) : v;
      },
    }) as Datastore;
    const [a] = await createIpam(racing, { lock: 'none' }).assign(req('n1'));
    const blocks = await all(ds, 'IPAMBlock');
    expect(blocks.map((b) => [b.spec.cidr, b.spec.affinity]).sort()).toEqual([
      ['10.0.0.0/29', 'host:n2'],
      ['10.0.0.8/29', 'host:n1'],
    ]);
    expect(a!.block).toBe('10.0.0.8/29');
    expect((await all(ds, 'BlockAffinity')).map((x) => [x.spec.node, x.spec.cidr, x.spec.state]).sort()).toEqual([
      ['n1', '10.0.0.8/29', 'confirmed'],
      ['n2', '10.0.0.0/29', 'confirmed'],
    ]);
    expect(await checkInvariant(ds)).toEqual({ allocated: 2, handles: 2 });
  });

  it('a handle ID that may live under its pre-exact (case-folded) name is read first: its create guard could not see the old object', async () => {
    await pool(ds, 'p', '10.0.0.0/24', { blockSize: 29 });
    const f = new Faulty(ds);
    await ipam(f).assign(req('n1', { handleID: 'net.CAFE01' }));
    expect(f.calls).toContain('get IPAMHandle');
  });

  it('claims the next block when its own is full, and fails clearly when the pool is exhausted', async () => {
    await pool(ds, 'p', '10.0.0.0/28', { blockSize: 29 });
    const got: string[] = [];
    for (let i = 0; i < 16; i++) got.push((await ipam().assign(req('n1')))[0]!.ip);
    expect(new Set(got).size).toBe(16);
    expect((await all(ds, 'BlockAffinity')).map((a) => a.spec.cidr).sort()).toEqual(['10.0.0.0/29', '10.0.0.8/29']);
    const r = req('n1');
    const e = await errorOf(ipam().assign(r));
    expect(e.code).toBe(ErrorCodes.IpamFailure);
    expect(e.message).toMatch(/no free IPv4 address for node 'n1' in pool p \(10\.0\.0\.0\/28\): exhausted/);
    // a failed assignment leaves no handle behind
    expect(await ipam().handleAddresses(r.handleID)).toEqual([]);
    expect((await all(ds, 'IPAMHandle')).some((h) => h.spec.handleID === r.handleID)).toBe(false);
    expect(await checkInvariant(ds)).toEqual({ allocated: 16, handles: 16 });
  });

  it("borrows from another node's block when the pool has no free block", async () => {
    await pool(ds, 'p', '10.0.0.0/28', { blockSize: 29 });
    for (let i = 0; i < 8; i++) await ipam().assign(req('n1'));
    const [n2] = await ipam().assign(req('n2'));
    expect(n2!.block).toBe('10.0.0.8/29');
    const [b] = await ipam().assign(req('n1'));
    expect(b!.block).toBe('10.0.0.8/29');
    expect((await ipam().whoHas(b!.ip))!.attrs.node).toBe('n1');
    // the block stays n2's
    expect((await ds.get('IPAMBlock', '10.0.0.8-29')).spec.affinity).toBe('host:n2');
  });

  it('strictAffinity: no borrowing', async () => {
    await pool(ds, 'p', '10.0.0.0/28', { blockSize: 29 });
    await ipamConfig(ds, { strictAffinity: true });
    for (let i = 0; i < 8; i++) await ipam().assign(req('n1'));
    await ipam().assign(req('n2'));
    const e = await errorOf(ipam().assign(req('n1')));
    expect(e.code).toBe(ErrorCodes.IpamFailure);
    expect(e.message).toMatch(/exhausted \(IPAMConfig strictAffinity is on/);
  });

  it('maxBlocksPerHost caps claims with a clear error', async () => {
    await pool(ds, 'p', '10.0.0.0/27', { blockSize: 29 });
    await ipamConfig(ds, { maxBlocksPerHost: 1, strictAffinity: true });
    for (let i = 0; i < 8; i++) await ipam().assign(req('n1'));
    const e = await errorOf(ipam().assign(req('n1')));
    expect(e.code).toBe(ErrorCodes.IpamFailure);
    expect(e.message).toContain("node 'n1' already holds 1 IPv4 blocks (IPAMConfig maxBlocksPerHost=1)");
    expect(e.message).toContain('raise it or free addresses');
    expect((await all(ds, 'BlockAffinity')).length).toBe(1);
  });

  it('maxBlocksPerHost without strictAffinity still borrows', async () => {
    await pool(ds, 'p', '10.0.0.0/28', { blockSize: 29 });
    await ipamConfig(ds, { maxBlocksPerHost: 1 });
    await ipam().assign(req('n2'));
    for (let i = 0; i < 8; i++) await ipam().assign(req('n1'));
    const [a] = await ipam().assign(req('n1'));
    expect(a!.block).toBe('10.0.0.0/29'); // n2's block
  });

  it('autoAllocateBlocks=false: only existing blocks', async () => {
    await pool(ds, 'p', '10.0.0.0/28', { blockSize: 29 });
    await ipamConfig(ds, { autoAllocateBlocks: false });
    const e = await errorOf(ipam().assign(req('n1')));
    expect(e.message).toMatch(/autoAllocateBlocks is off/);
  });

  it('IPv6 pools use /122 blocks by default', async () => {
    await pool(ds, 'v6', 'fd00:10:244::/64');
    const [a] = await ipam().assign(req('n1', { assignIPv4: false, assignIPv6: true }));
    expect(a).toEqual({
      address: 'fd00:10:244::/122',
      ip: 'fd00:10:244::',
      family: 6,
      pool: 'v6',
      block: 'fd00:10:244::/122',
    });
    expect((await all(ds, 'IPAMBlock'))[0]!.spec.allocations.length).toBe(64);
    expect((await all(ds, 'BlockAffinity'))[0]!.metadata.name).toBe('n1-ipv6-fd00-10-244---122');
  });

  it('a retried ADD of the same handle gets the same address, found by the failed guard of its handle create, and writes nothing', async () => {
    await pool(ds, 'p', '10.0.0.0/24', { blockSize: 29 });
    const r = req('n1');
    const first = await ipam().assign(r);
    const f = new Faulty(ds);
    const before = [await ds.get('IPAMHandle', r.handleID), await ds.get('IPAMBlock', '10.0.0.0-29')].map(
      (o) => o.metadata.resourceVersion,
    );
    const again = await ipam(f).assign(r);
    expect(again).toEqual(first.map((a) => ({ ...a, held: true })));
    // The handle was not read before the transaction: the create's guard refused, then it was read.
    expect(f.calls.indexOf('create IPAMHandle')).toBeGreaterThanOrEqual(0);
    expect(f.calls.indexOf('get IPAMHandle')).toBeGreaterThan(f.calls.indexOf('create IPAMHandle'));
    expect(f.calls).not.toContain('update IPAMBlock');
    const after = [await ds.get('IPAMHandle', r.handleID), await ds.get('IPAMBlock', '10.0.0.0-29')].map(
      (o) => o.metadata.resourceVersion,
    );
    expect(after).toEqual(before);
    expect(await checkInvariant(ds)).toEqual({ allocated: 1, handles: 1 });
  });

  it('a retried ADD on an exhausted pool gets what it holds, and keeps it', async () => {
    await pool(ds, 'p', '10.0.0.0/29', { blockSize: 29 });
    const r = req('n1');
    const [first] = await ipam().assign(r);
    for (let i = 0; i < 7; i++) await ipam().assign(req('n1'));
    await expect(ipam().assign(req('n1'))).rejects.toMatchObject({ kind: 'exhausted' });
    const again = await ipam().assign(r);
    expect(again.map((a) => a.ip)).toEqual([first!.ip]);
    expect(await ipam().handleAddresses(r.handleID)).toEqual([first!.ip]);
    expect(await checkInvariant(ds)).toEqual({ allocated: 8, handles: 8 });
  });

  it('a retried dual-stack ADD gets both addresses it holds and takes no third', async () => {
    await pool(ds, 'p', '10.0.0.0/24', { blockSize: 29 });
    await pool(ds, 'v6', 'fd00:10:244::/120', { blockSize: 122 });
    const r = req('n1', { assignIPv6: true });
    const first = await ipam().assign(r);
    const again = await ipam().assign(r);
    expect(again.map((a) => a.ip)).toEqual(first.map((a) => a.ip));
    expect(again.every((a) => a.held)).toBe(true);
    expect(await checkInvariant(ds)).toEqual({ allocated: 2, handles: 1 });
  });
});

describe('specific addresses', () => {
  beforeEach(async () => {
    await pool(ds, 'p', '10.0.0.0/24', { blockSize: 29 });
  });

  it('inside a pool: allocated in its block, which this node claims', async () => {
    const [a] = await ipam().assign(req('n1', { requestedIPs: ['10.0.0.77'] }));
    expect(a).toMatchObject({ address: '10.0.0.77/29', ip: '10.0.0.77', block: '10.0.0.72/29', pool: 'p' });
    expect((await ds.get('IPAMBlock', '10.0.0.72-29')).spec.affinity).toBe('host:n1');
    // the next automatic address comes from the same (now affine) block
    const [b] = await ipam().assign(req('n1'));
    expect(b!.block).toBe('10.0.0.72/29');
    expect(b!.ip).not.toBe('10.0.0.77');
  });

  it("in another node's block: borrowed", async () => {
    await ipam().assign(req('n2'));
    const [a] = await ipam().assign(req('n1', { requestedIPs: ['10.0.0.5'] }));
    expect(a!.block).toBe('10.0.0.0/29');
    expect((await ds.get('IPAMBlock', '10.0.0.0-29')).spec.affinity).toBe('host:n2');
  });

  it('outside every pool: error', async () => {
    const e = await errorOf(ipam().assign(req('n1', { requestedIPs: ['10.9.9.9'] })));
    expect(e.code).toBe(ErrorCodes.IpamFailure);
    expect(e.message).toContain('10.9.9.9 is not in a configured pool (pools: p (10.0.0.0/24))');
  });

  it('already taken: error naming the holder', async () => {
    await ipam().assign({
      handleID: 'net.abc',
      node: 'n1',
      attrs: { namespace: 'ns', pod: 'p' },
      assignIPv4: true,
      assignIPv6: false,
      requestedIPs: ['10.0.0.5'],
    });
    const e = await errorOf(ipam().assign(req('n2', { requestedIPs: ['10.0.0.5'] })));
    expect(e.code).toBe(ErrorCodes.IpamFailure);
    expect(e.message).toContain('10.0.0.5 is already assigned (handle net.abc, pod ns/p)');
    expect(await checkInvariant(ds)).toEqual({ allocated: 1, handles: 1 });
  });

  it('malformed or two of a family: config error', async () => {
    expect((await errorOf(ipam().assign(req('n1', { requestedIPs: ['10.0.0.x'] })))).code).toBe(
      ErrorCodes.InvalidNetworkConfig,
    );
    const e = await errorOf(ipam().assign(req('n1', { requestedIPs: ['10.0.0.1', '10.0.0.2'] })));
    expect(e.message).toMatch(/more than one IPv4 address requested/);
  });

  it('in a disabled pool: error', async () => {
    await pool(ds, 'off', '10.5.0.0/24', { disabled: true });
    const e = await errorOf(ipam().assign(req('n1', { requestedIPs: ['10.5.0.1'] })));
    expect(e.message).toMatch(/in pool off \(10\.5\.0\.0\/24\), which is disabled/);
  });
});

describe('release', () => {
  it('frees every address of the handle, and is idempotent', async () => {
    await pool(ds, 'p', '10.0.0.0/24', { blockSize: 29 });
    await pool(ds, 'v6', 'fd00::/120', { blockSize: 122 });
    const r = req('n1', { assignIPv6: true });
    const got = await ipam().assign(r);
    expect(got.map((a) => a.family)).toEqual([4, 6]);
    expect((await ipam().releaseByHandle(r.handleID)).sort()).toEqual(got.map((a) => a.ip).sort());
    expect(await ipam().releaseByHandle(r.handleID)).toEqual([]);
    expect(await ipam().releaseByHandle('net.never-existed')).toEqual([]);
    expect(await checkInvariant(ds)).toEqual({ allocated: 0, handles: 0 });
    expect(await ipam().whoHas(got[0]!.ip)).toBeUndefined();
  });

  it('releaseIPs frees chosen addresses and fixes their handles; already-free ones are skipped', async () => {
    await pool(ds, 'p', '10.0.0.0/24', { blockSize: 29 });
    const r = req('n1');
    const [a] = await ipam().assign(r);
    expect(await ipam().releaseIPs([a!.ip, '10.0.0.200'])).toEqual([{ ip: a!.ip, handle: r.handleID }]);
    expect(await all(ds, 'IPAMHandle')).toEqual([]);
    expect(await ipam().releaseIPs([a!.ip])).toEqual([]);
  });

  it("empty blocks go back to the pool, except the node's last one per pool", async () => {
    await pool(ds, 'p', '10.0.0.0/24', { blockSize: 29 });
    const rs = Array.from({ length: 12 }, () => req('n1'));
    for (const r of rs) await ipam().assign(r);
    expect((await all(ds, 'IPAMBlock')).length).toBe(2);
    for (const r of rs) await ipam().releaseByHandle(r.handleID);
    const blocks = await all(ds, 'IPAMBlock');
    const affs = await all(ds, 'BlockAffinity');
    expect(blocks.length).toBe(1);
    expect(affs.map((a) => a.spec.cidr)).toEqual(blocks.map((b) => b.spec.cidr));
    expect(await checkInvariant(ds)).toEqual({ allocated: 0, handles: 0 });
  });

  it('a DEL that empties a block given back to the pool is one write: the block, its affinity and the handle deleted together', async () => {
    await pool(ds, 'p', '10.0.0.0/24', { blockSize: 29 });
    const rs = Array.from({ length: 9 }, () => req('n1'));
    for (const r of rs) await ipam().assign(r);
    const ninth = rs[8]!;
    const writes: string[] = [];
    const counted = new Proxy(ds, {
      get(target, prop, receiver) {
        const v = Reflect.get(target, prop, receiver) as unknown;
        if (typeof v !== 'function') return v;
        if (prop === 'txn')
          return (ops: Parameters<Datastore['txn']>[0]) => (
            writes.push(ops.map((x) => `${x.op} ${'res' in x ? x.res.kind : x.kind}`).join(', ')), target.txn(ops)
          );
        if (prop === 'create' || prop === 'update' || prop === 'delete')
          return (...a: unknown[]) => (writes.push(String(prop)), (v as (...x: unknown[]) => unknown).apply(target, a));
        return (v as (...x: unknown[]) => unknown).bind(target);
      },
    }) as Datastore;
    // The ninth address is alone in the node's second block.
    expect(await createIpam(counted, { lock: 'none' }).releaseByHandle(ninth.handleID)).toHaveLength(1);
    expect(writes).toEqual(['delete IPAMBlock, delete BlockAffinity, delete IPAMHandle']);
    expect((await all(ds, 'IPAMBlock')).map((b) => b.spec.cidr)).toEqual(['10.0.0.0/29']);
    expect((await all(ds, 'BlockAffinity')).map((a) => a.spec.cidr)).toEqual(['10.0.0.0/29']);
    expect(await checkInvariant(ds)).toEqual({ allocated: 8, handles: 8 });
  });

  it('a handle that over-counts (ADD killed between its two writes) is cleaned by release', async () => {
    await pool(ds, 'p', '10.0.0.0/24', { blockSize: 29 });
    const r = req('n1');
    await ipam().assign(r);
    const h = await ds.get('IPAMHandle', r.handleID);
    await ds.update({ ...h, spec: { ...h.spec, block: { '10.0.0.0/29': 3, '10.0.0.64/29': 1 } } });
    expect(await ipam().releaseByHandle(r.handleID)).toEqual(['10.0.0.0']);
    expect(await checkInvariant(ds)).toEqual({ allocated: 0, handles: 0 });
  });
});

describe('pool choice', () => {
  it('explicit list is tried in order: a full first pool falls through to the next', async () => {
    await pool(ds, 'a', '10.1.0.0/29', { blockSize: 29 });
    await pool(ds, 'b', '10.2.0.0/24', { blockSize: 29 });
    const pools = ['a', 'b'];
    const got = [];
    for (let i = 0; i < 10; i++) got.push((await ipam().assign(req('n1', { ipv4Pools: pools })))[0]!.pool);
    expect(got).toEqual(['a', 'a', 'a', 'a', 'a', 'a', 'a', 'a', 'b', 'b']);
  });

  it('pools by name and by CIDR', async () => {
    await pool(ds, 'a', '10.1.0.0/24', { blockSize: 29 });
    await pool(ds, 'b', '10.2.0.0/24', { blockSize: 29 });
    expect((await ipam().assign(req('n1', { ipv4Pools: ['b'] })))[0]!.pool).toBe('b');
    expect((await ipam().assign(req('n1', { ipv4Pools: ['10.1.0.0/24'] })))[0]!.pool).toBe('a');
  });

  it('a pool that does not exist is an error naming it and the existing ones', async () => {
    await pool(ds, 'a', '10.0.0.0/16');
    const e = await errorOf(ipam().assign(req('n1', { ipv4Pools: ['foo'] })));
    expect(e.code).toBe(ErrorCodes.InvalidNetworkConfig);
    expect(e.message).toContain("ipv4_pools: pool 'foo' does not exist; existing pools: a (10.0.0.0/16)");
    const e2 = await errorOf(ipam().assign(req('n1', { ipv4Pools: ['10.9.0.0/16'] })));
    expect(e2.message).toContain("pool '10.9.0.0/16' does not exist");
    const e3 = await errorOf(
      ipam().assign(req('n1', { ipv4Pools: ['foo'], fields: { ipv4Pools: 'cni.netplugin.org/ipv4pools' } })),
    );
    expect(e3.message).toMatch(/^cni\.netplugin\.org\/ipv4pools: pool 'foo'/);
  });

  it('pools of the other family are ignored, and naming one is an error', async () => {
    await pool(ds, 'v6', 'fd00::/64');
    const e = await errorOf(ipam().assign(req('n1')));
    expect(e.message).toMatch(/no enabled IPv4 pool selects node 'n1' \(pools: none exist\)/);
    const e2 = await errorOf(ipam().assign(req('n1', { ipv4Pools: ['v6'] })));
    expect(e2.message).toContain("pool 'v6' (fd00::/64) is IPv6, not IPv4");
  });

  it('disabled pools give no new addresses and existing ones stay', async () => {
    await pool(ds, 'a', '10.0.0.0/24', { blockSize: 29 });
    const r = req('n1');
    const [held] = await ipam().assign(r);
    const p = await ds.get('IPPool', 'a');
    await ds.update({ ...p, spec: { ...p.spec, disabled: true } });
    const e = await errorOf(ipam().assign(req('n1')));
    expect(e.message).toContain('no enabled IPv4 pool selects node');
    expect(e.message).toContain('a (10.0.0.0/24, disabled)');
    const e2 = await errorOf(ipam().assign(req('n1', { ipv4Pools: ['a'] })));
    expect(e2.message).toContain("pool 'a' (10.0.0.0/24) is disabled");
    // the running workload keeps its address
    expect(await ipam().handleAddresses(r.handleID)).toEqual([held!.ip]);
    // a retried ADD of that workload still returns it
    expect((await ipam().assign(r))[0]!.ip).toBe(held!.ip);
  });

  it('nodeSelector: only selected nodes get addresses; a missing Node has no labels', async () => {
    await pool(ds, 'zone-a', '10.0.0.0/24', { blockSize: 29, nodeSelector: "zone == 'a'" });
    await pool(ds, 'anyone', '10.7.0.0/24', { blockSize: 29, disabled: true });
    await node(ds, 'n1', { zone: 'a' });
    await node(ds, 'n2', { zone: 'b' });
    expect((await ipam().assign(req('n1')))[0]!.pool).toBe('zone-a');
    const e = await errorOf(ipam().assign(req('n2')));
    expect(e.message).toContain("no enabled IPv4 pool selects node 'n2'");
    expect(e.message).toContain("zone-a (10.0.0.0/24, nodeSelector zone == 'a')");
    await errorOf(ipam().assign(req('n3-missing')));
    expect((await all(ds, 'BlockAffinity')).every((a) => a.spec.node === 'n1')).toBe(true);
  });

  it('requested pools must select the node too: skipped, else an error', async () => {
    await pool(ds, 'zone-a', '10.0.0.0/24', { blockSize: 29, nodeSelector: "zone == 'a'" });
    await pool(ds, 'open', '10.1.0.0/24', { blockSize: 29 });
    await node(ds, 'n2', { zone: 'b' });
    expect((await ipam().assign(req('n2', { ipv4Pools: ['zone-a', 'open'] })))[0]!.pool).toBe('open');
    const e = await errorOf(ipam().assign(req('n2', { ipv4Pools: ['zone-a'] })));
    expect(e.code).toBe(ErrorCodes.IpamFailure);
    expect(e.message).toContain(
      "ipv4_pools: none of the requested pools selects node 'n2': zone-a (10.0.0.0/24, nodeSelector zone == 'a')",
    );
  });

  it('without a list, uses a block it already holds in any selected pool before claiming a new one', async () => {
    await pool(ds, 'a', '10.1.0.0/24', { blockSize: 29 });
    await ipam().assign(req('n1'));
    await pool(ds, 'b', '10.2.0.0/24', { blockSize: 29 });
    await ipam().assign(req('n1', { ipv4Pools: ['b'] }));
    const before = (await all(ds, 'IPAMBlock')).length;
    for (let i = 0; i < 5; i++) await ipam().assign(req('n1'));
    expect((await all(ds, 'IPAMBlock')).length).toBe(before);
  });
});

describe('dual stack', () => {
  it('is all-or-nothing: a failing IPv6 releases the IPv4 address', async () => {
    await pool(ds, 'v4', '10.0.0.0/24', { blockSize: 29 });
    await pool(ds, 'v6', 'fd00::/122', { blockSize: 122 });
    for (let i = 0; i < 64; i++) await ipam().assign(req('n2', { assignIPv4: false, assignIPv6: true }));
    const r = req('n1', { assignIPv6: true });
    const e = await errorOf(ipam().assign(r));
    expect(e.code).toBe(ErrorCodes.IpamFailure);
    expect(e.message).toMatch(/no free IPv6 address .*exhausted/);
    expect(e.message).toMatch(
      /the IPv4 address 10\.0\.0\.\d+ assigned in the same request was released: dual-stack assignment is all-or-nothing/,
    );
    expect(await ipam().handleAddresses(r.handleID)).toEqual([]);
    expect((await all(ds, 'IPAMHandle')).some((h) => h.spec.handleID === r.handleID)).toBe(false);
    const inv = await checkInvariant(ds);
    expect(inv.allocated).toBe(64);
  });

  it('assigns one address per family', async () => {
    await pool(ds, 'v4', '10.0.0.0/24', { blockSize: 29 });
    await pool(ds, 'v6', 'fd00::/120');
    const got = await ipam().assign(req('n1', { assignIPv6: true }));
    expect(got.map((a) => a.address)).toEqual(['10.0.0.0/29', 'fd00::/122']);
  });
});

describe('concurrency', () => {
  it('two nodes racing for the same free block both succeed with distinct blocks', async () => {
    await pool(ds, 'p', '10.0.0.0/24', { blockSize: 29 });
    const f = new Faulty(ds);
    const lost: string[] = [];
    f.failIf = () => undefined;
    const orig = f.create.bind(f);
    f.create = async (res, o) => {
      try {
        return await orig(res, o);
      } catch (e) {
        if (DatastoreError.is(e, 'AlreadyExists') && res.kind === 'IPAMBlock') lost.push(res.metadata.name);
        throw e;
      }
    };
    const [a, b] = await Promise.all([
      createIpam(f, { lock: 'none' }).assign(req('n1')),
      createIpam(f, { lock: 'none' }).assign(req('n2')),
    ]);
    expect(lost).toEqual(['10.0.0.0-29']); // the race really happened
    expect(a![0]!.block).not.toBe(b![0]!.block);
    expect(a![0]!.ip).not.toBe(b![0]!.ip);
    const affs = await all(ds, 'BlockAffinity');
    expect(affs.every((x) => x.spec.state === 'confirmed')).toBe(true);
    expect(affs.map((x) => `${x.spec.node}:${x.spec.cidr}`).sort()).toEqual(
      [`n1:${a![0]!.block}`, `n2:${b![0]!.block}`].sort(),
    );
  });

  // Two claims of one node meet when the host lock does not keep them apart;
  // compare-and-swap alone must keep them correct, and neither may fail.
  it('a claim whose pending affinity another claim of the node created and then removed creates it again', async () => {
    await pool(ds, 'p', '10.0.0.0/24', { blockSize: 29 });
    const f = new Faulty(ds);
    const create = f.create.bind(f);
    const get = f.get.bind(f);
    let step = 0;
    f.create = async (res, o) => {
      if (res.kind === 'BlockAffinity' && step === 0) {
        step = 1;
        await ds.create(structuredClone(res)); // the other claim got there first...
      }
      return create(res, o);
    };
    f.get = (async (kind: Kind, name: string, ns?: string, o?: object) => {
      if (kind === 'BlockAffinity' && step === 1) {
        step = 2;
        await ds.delete('BlockAffinity', name); // ...and let go before we read it
      }
      return get(kind, name, ns, o);
    }) as Datastore['get'];
    const r = req('n1');
    const [a] = await ipam(f).assign(r);
    expect(step).toBe(2); // the race really happened
    expect(a!.ip).toBe('10.0.0.0');
    const affs = await all(ds, 'BlockAffinity');
    expect(affs.map((x) => [x.metadata.name, x.spec.state])).toEqual([['n1-ipv4-10.0.0.0-29', 'confirmed']]);
    expect(await checkInvariant(ds)).toEqual({ allocated: 1, handles: 1 });
  });

  it('a claim whose pending affinity is removed before it confirms it records the affinity again', async () => {
    await pool(ds, 'p', '10.0.0.0/24', { blockSize: 29 });
    const f = new Faulty(ds);
    const update = f.update.bind(f);
    let removed = false;
    f.update = async (res, o) => {
      if (res.kind === 'BlockAffinity' && !removed) {
        removed = true;
        await ds.delete('BlockAffinity', res.metadata.name); // another claim of the node let go of it
      }
      return update(res, o);
    };
    const [a] = await ipam(f).assign(req('n1'));
    expect(removed).toBe(true);
    expect(a!.block).toBe('10.0.0.0/29');
    const affs = await all(ds, 'BlockAffinity');
    expect(affs.map((x) => [x.metadata.name, x.spec.state, x.spec.node])).toEqual([
      ['n1-ipv4-10.0.0.0-29', 'confirmed', 'n1'],
    ]);
    expect(await checkInvariant(ds)).toEqual({ allocated: 1, handles: 1 });
  });

  it('200 concurrent assigns across 3 nodes: all unique, then all released', async () => {
    await pool(ds, 'p', '10.0.0.0/24', { blockSize: 29 });
    const nodes = ['n1', 'n2', 'n3'];
    const instances = nodes.map(() => createIpam(ds, { lock: 'none', maxRetries: 30 }));
    const reqs = Array.from({ length: 200 }, (_, i) => ({ r: req(nodes[i % 3]!), i: i % 3 }));
    const got = await Promise.all(reqs.map(({ r, i }) => instances[i]!.assign(r)));
    const ips = got.map((g) => g[0]!.ip);
    expect(new Set(ips).size).toBe(200);
    expect(await checkInvariant(ds)).toEqual({ allocated: 200, handles: 200 });
    for (const [k, { r }] of reqs.entries()) expect(await ipam().handleAddresses(r.handleID)).toEqual([ips[k]]);
    await Promise.all(reqs.map(({ r, i }) => instances[i]!.releaseByHandle(r.handleID)));
    expect(await checkInvariant(ds)).toEqual({ allocated: 0, handles: 0 });
    expect((await all(ds, 'BlockAffinity')).every((a) => a.spec.state === 'confirmed')).toBe(true);
  });

  it('gives up after maxRetries conflicting writes with code 11', async () => {
    await pool(ds, 'p', '10.0.0.0/24', { blockSize: 29 });
    await ipam().assign(req('n1'));
    const f = new Faulty(ds);
    f.failIf = (op, kind) =>
      op === 'update' && kind === 'IPAMBlock' ? new DatastoreError('Conflict', 'injected') : undefined;
    const e = await errorOf(ipam(f, 3).assign(req('n1')));
    expect(e.code).toBe(ErrorCodes.TryAgainLater);
    expect(e.message).toMatch(
      /allocating in IPAM block 10\.0\.0\.0\/29: gave up after 3 conflicting concurrent writes/,
    );
  });

  it('a datastore outage propagates as DatastoreError Unavailable', async () => {
    await pool(ds, 'p', '10.0.0.0/24', { blockSize: 29 });
    ds.failWith = new DatastoreError('Unavailable', 'etcd down');
    await expect(ipam().assign(req('n1'))).rejects.toSatisfy((e: unknown) => DatastoreError.is(e, 'Unavailable'));
  });
});

describe('crash safety', () => {
  // An ADD dies after every possible number of writes; the matching DEL then
  // runs on a healthy store. Never an address without a handle, never a handle
  // left after the DEL.
  for (const scenario of ['claim', 'affine', 'explicit'] as const) {
    it(`ADD interrupted at every write (${scenario})`, async () => {
      for (let cut = 0; cut < 12; cut++) {
        const store = new MemoryDatastore();
        await pool(store, 'p', '10.0.0.0/24', { blockSize: 29 });
        if (scenario === 'affine') await createIpam(store, { lock: 'none' }).assign(req('n1'));
        const f = new Faulty(store);
        f.failAfterWrites = cut;
        const r = req('n1', scenario === 'explicit' ? { requestedIPs: ['10.0.0.99'] } : {});
        let ok = true;
        try {
          await createIpam(f, { lock: 'none' }).assign(r);
        } catch (e) {
          ok = false;
          expect(DatastoreError.is(e, 'Unavailable')).toBe(true);
        }
        await checkInvariant(store);
        await createIpam(store, { lock: 'none' }).releaseByHandle(r.handleID);
        const left = await checkInvariant(store);
        expect(left.handles).toBe(scenario === 'affine' ? 1 : 0);
        expect(left.allocated).toBe(scenario === 'affine' ? 1 : 0);
        // a new ADD on the node works and cleans up a half-claimed block
        await createIpam(store, { lock: 'none' }).assign(req('n1'));
        expect((await all(store, 'BlockAffinity')).every((a) => a.spec.state === 'confirmed')).toBe(true);
        if (ok) break;
      }
    });
  }

  it('a pending affinity for a block another node owns is removed; one for its own block is confirmed', async () => {
    await pool(ds, 'p', '10.0.0.0/24', { blockSize: 29 });
    await ipam().assign(req('n2')); // n2 owns 10.0.0.0/29
    await ipam().assign(req('n1')); // n1 owns 10.0.0.8/29
    const mk = (name: string, cidr: string) =>
      ds.create({
        apiVersion: API_VERSION,
        kind: 'BlockAffinity',
        metadata: { name },
        spec: { state: 'pending' as const, node: 'n1', cidr },
      });
    await mk('n1-ipv4-10.0.0.0-29', '10.0.0.0/29');
    const own = await ds.get('BlockAffinity', 'n1-ipv4-10.0.0.8-29');
    await ds.update({ ...own, spec: { ...own.spec, state: 'pending' } });
    await ipam().assign(req('n1'));
    const affs = await all(ds, 'BlockAffinity');
    expect(affs.map((a) => `${a.spec.node}:${a.spec.cidr}:${a.spec.state}`).sort()).toEqual([
      'n1:10.0.0.8/29:confirmed',
      'n2:10.0.0.0/29:confirmed',
    ]);
  });
});
