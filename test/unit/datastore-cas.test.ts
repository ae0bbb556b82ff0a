// The compare-and-swap retry of one object (src/datastore/cas.ts) against the
// in-memory datastore, with a second writer that wins the race between the
// read and the write.
import { describe, expect, it } from 'vitest';
import { MemoryDatastore } from '../../src/datastore/memory.js';
import { casOp, casRetry, getIfExists } from '../../src/datastore/cas.js';
import { DatastoreError } from '../../src/errors.js';
import { API_VERSION, type Resource } from '../../src/model/resources.js';

function node(name: string, podCIDRs: string[]): Resource<'Node'> {
  return { apiVersion: API_VERSION, kind: 'Node', metadata: { name }, spec: { podCIDRs } };
}

/** Counts the writes that reach the store. */
function counted(ds: MemoryDatastore): MemoryDatastore & { writes: string[] } {
  const writes: string[] = [];
  const create = ds.create.bind(ds);
  const update = ds.update.bind(ds);
  return Object.assign(ds, {
    writes,
    create: ((r: Resource) => (writes.push(`create ${r.metadata.name}`), create(r))) as MemoryDatastore['create'],
    update: ((r: Resource) => (
      writes.push(`update ${r.metadata.name}@${r.metadata.resourceVersion}`), update(r)
    )) as MemoryDatastore['update'],
  });
}

const ref = { kind: 'Node' as const, name: 'n1' };

describe('casRetry', () => {
  it('creates an absent object (assumeAbsent: one write, no read first) and reports nothing replaced', async () => {
    const ds = counted(new MemoryDatastore());
    const seen: Array<Resource<'Node'> | undefined> = [];
    const r = await casRetry(ds, ref, (cur) => (seen.push(cur), node('n1', ['10.0.0.0/24'])), { assumeAbsent: true });
    expect(r.prev).toBeUndefined();
    expect(r.stored.spec.podCIDRs).toEqual(['10.0.0.0/24']);
    expect(ds.writes).toEqual(['create n1']);
    expect(seen).toEqual([undefined]);
  });

  it('replaces an existing object guarded by the revision it read, and returns what it replaced', async () => {
    const ds = counted(new MemoryDatastore());
    const first = await ds.create(node('n1', ['10.0.0.0/24']));
    const r = await casRetry(ds, ref, (cur) => node('n1', [...(cur?.spec.podCIDRs ?? []), '10.0.1.0/24']));
    expect(r.prev?.metadata.resourceVersion).toBe(first.metadata.resourceVersion);
    expect(r.stored.spec.podCIDRs).toEqual(['10.0.0.0/24', '10.0.1.0/24']);
    expect(ds.writes).toEqual(['create n1', `update n1@${first.metadata.resourceVersion}`]);
  });

  it('assumeAbsent over an existing object: the create loses, the retry reads and updates', async () => {
    const ds = new MemoryDatastore();
    await ds.create(node('n1', ['10.0.0.0/24']));
    const r = await casRetry(ds, ref, () => node('n1', ['10.0.2.0/24']), { assumeAbsent: true });
    expect(r.prev?.spec.podCIDRs).toEqual(['10.0.0.0/24']);
    expect((await ds.get('Node', 'n1')).spec.podCIDRs).toEqual(['10.0.2.0/24']);
  });

  it('another writer wins between the read and the write: the change is applied again on top of theirs', async () => {
    const ds = new MemoryDatastore();
    await ds.create(node('n1', ['10.0.0.0/24']));
    let calls = 0;
    const r = await casRetry(ds, ref, (cur) => {
      calls++;
      // The other writer, racing us after our read (the memory store writes as soon as it is called).
      if (calls === 1) void ds.update({ ...cur!, spec: { podCIDRs: [...(cur!.spec.podCIDRs ?? []), '10.0.9.0/24'] } });
      return node('n1', [...(cur?.spec.podCIDRs ?? []), '10.0.1.0/24']);
    });
    expect(calls).toBe(2);
    expect(r.stored.spec.podCIDRs).toEqual(['10.0.0.0/24', '10.0.9.0/24', '10.0.1.0/24']);
    expect((await ds.get('Node', 'n1')).spec.podCIDRs).toEqual(['10.0.0.0/24', '10.0.9.0/24', '10.0.1.0/24']);
  });

  it('the object deleted between the read and the write: the retry creates it', async () => {
    const ds = new MemoryDatastore();
    await ds.create(node('n1', ['10.0.0.0/24']));
    let calls = 0;
    const r = await casRetry(ds, ref, () => {
      if (++calls === 1) void ds.delete('Node', 'n1');
      return node('n1', ['10.0.3.0/24']);
    });
    expect(calls).toBe(2);
    expect(r.prev).toBeUndefined();
    expect((await ds.get('Node', 'n1')).spec.podCIDRs).toEqual(['10.0.3.0/24']);
  });

  it('gives up after `attempts` lost races with the last Conflict', async () => {
    const ds = new MemoryDatastore();
    await ds.create(node('n1', []));
    let calls = 0;
    const e = await casRetry(
      ds,
      ref,
      (cur) => {
        calls++;
        void ds.update({ ...cur!, spec: { podCIDRs: [`10.0.${calls}.0/24`] } });
        return node('n1', cur?.spec.podCIDRs ?? []);
      },
      { attempts: 3 },
    ).catch((x: unknown) => x);
    expect(DatastoreError.is(e, 'Conflict')).toBe(true);
    expect(calls).toBe(3);
  });

  it('does not retry a failure that is no lost race', async () => {
    const ds = new MemoryDatastore();
    ds.failWith = new DatastoreError('Unavailable', 'the store is down');
    let calls = 0;
    const e = await casRetry(ds, ref, () => (calls++, node('n1', [])), { assumeAbsent: true }).catch((x: unknown) => x);
    expect(DatastoreError.is(e, 'Unavailable')).toBe(true);
    expect(calls).toBe(1);
  });
});

describe('casRetry with nothing to write', () => {
  it('next returning undefined writes nothing and returns the object as read (or undefined when absent)', async () => {
    const ds = counted(new MemoryDatastore());
    const none = await casRetry(ds, ref, () => undefined);
    expect(none).toEqual({ unchanged: true, stored: undefined });
    const first = await ds.create(node('n1', ['10.0.0.0/24']));
    const same = await casRetry(ds, ref, async (cur) =>
      cur?.spec.podCIDRs?.includes('10.0.0.0/24') ? undefined : node('n1', ['10.0.0.0/24']),
    );
    expect(same).toEqual({ unchanged: true, stored: first });
    expect(ds.writes).toEqual(['create n1']);
  });

  it('a lost race re-runs an async next, which may then find nothing to write', async () => {
    const ds = new MemoryDatastore();
    await ds.create(node('n1', []));
    let calls = 0;
    const r = await casRetry(ds, ref, async (cur) => {
      calls++;
      if (cur?.spec.podCIDRs?.includes('10.0.3.0/24')) return undefined;
      // The other writer adds the same CIDR between our read and our write.
      if (calls === 1) await ds.update({ ...cur!, spec: { podCIDRs: ['10.0.3.0/24'] } });
      return { ...cur!, spec: { podCIDRs: ['10.0.3.0/24'] } };
    });
    expect(calls).toBe(2);
    expect('unchanged' in r && r.unchanged).toBe(true);
    expect((await ds.get('Node', 'n1')).spec.podCIDRs).toEqual(['10.0.3.0/24']);
  });
});

describe('casOp and getIfExists', () => {
  it('casOp: a create without a read object, an update guarded by its revision with one', async () => {
    const ds = new MemoryDatastore();
    expect(casOp(node('n1', []), undefined)).toEqual({ op: 'create', res: node('n1', []) });
    const cur = await ds.create(node('n1', []));
    const op = casOp(node('n1', ['10.0.0.0/24']), cur);
    expect(op.op).toBe('update');
    expect(op.res.metadata.resourceVersion).toBe(cur.metadata.resourceVersion);
    await ds.txn([op]);
    // The same op again is stale: the guard holds.
    await expect(ds.txn([op])).rejects.toMatchObject({ kind: 'Conflict' });
  });

  it('getIfExists: undefined for an absent object, other failures thrown', async () => {
    const ds = new MemoryDatastore();
    expect(await getIfExists(ds, 'Node', 'n1')).toBeUndefined();
    await ds.create(node('n1', []));
    expect((await getIfExists(ds, 'Node', 'n1'))?.metadata.name).toBe('n1');
    ds.failWith = new DatastoreError('Unavailable', 'the store is down');
    await expect(getIfExists(ds, 'Node', 'n1')).rejects.toMatchObject({ kind: 'Unavailable' });
  });
});
