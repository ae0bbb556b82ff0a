// One behavioural suite for every Datastore backend (etcd, Kubernetes API,
// memory): the backends must be interchangeable for IPAM and the plugin.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DatastoreError } from '../../src/errors.js';
import { TxnError } from '../../src/datastore/txn.js';
import { affinityName, blockName, workloadEndpointName } from '../../src/model/names.js';
import { API_VERSION, type Kind, type Resource, type SpecOf } from '../../src/model/resources.js';
import type { Datastore, WatchEvent, WatchOptions } from '../../src/datastore/types.js';

export interface ConformanceTarget {
  ds: Datastore;
  /** Kubernetes mode stores endpoints on pods: the pod must exist first. */
  preparePod?(namespace: string, pod: string, node: string, labels: Record<string, string>): Promise<void>;
  /**
   * Stores a malformed object behind the store's back, as another writer could: the IPPool `name`
   * (etcd: a value that is not JSON; Kubernetes: a custom resource whose spec fails the schema),
   * or the endpoint of pod `namespace/pod` on `node` (etcd: a value failing the schema; Kubernetes:
   * the pod with malformed endpoint annotations), whose name it returns. Absent: the store cannot
   * hold one (memory validates every write).
   */
  putMalformed?(what: { pool: string } | { namespace: string; pod: string; node: string }): Promise<string>;
  /** Makes the store unresponsive (deadline tests); returns the undo. Absent: no deadline tests. */
  makeUnresponsive?(): Promise<() => Promise<void>>;
  cleanup(): Promise<void>;
}

const uniq = () => Math.random().toString(36).slice(2, 8);

function res<K extends Kind>(
  kind: K,
  name: string,
  spec: SpecOf<K>,
  meta: { namespace?: string; labels?: Record<string, string> } = {},
): Resource<K> {
  return { apiVersion: API_VERSION, kind, metadata: { name, ...meta }, spec };
}

async function expectKind(p: Promise<unknown>, kind: DatastoreError['kind']): Promise<DatastoreError> {
  const e = await p.then(
    () => undefined,
    (err: unknown) => err,
  );
  expect(e, `expected a ${kind} DatastoreError`).toBeInstanceOf(DatastoreError);
  expect((e as DatastoreError).kind, (e as Error).message).toBe(kind);
  return e as DatastoreError;
}

/** Collects watch events until `pred` holds for the list of events. */
function collect<K extends Kind>(ds: Datastore, kind: K, opts: WatchOptions) {
  const events: Array<WatchEvent<K>> = [];
  let waiter: (() => void) | undefined;
  const w = ds.watch(kind, opts, (ev) => {
    events.push(ev);
    waiter?.();
  });
  return {
    events,
    stop: () => w.stop(),
    async until(pred: (evs: Array<WatchEvent<K>>) => boolean, what: string): Promise<void> {
      const deadline = Date.now() + 15_000;
      while (!pred(events)) {
        if (Date.now() > deadline)
          throw new Error(
            `watch: ${what} did not happen; got ${JSON.stringify(events.map((e) => (e.type === 'ERROR' ? `ERROR ${e.error.message}` : `${e.type} ${e.object.metadata.name}`)))}`,
          );
        await new Promise<void>((r) => {
          waiter = r;
          setTimeout(r, 100);
        });
      }
    },
  };
}

export interface Capabilities {
  /** The target implements makeUnresponsive() (memory has no network to lose). */
  deadlines: boolean;
  /** The target implements putMalformed() (memory validates every write: it cannot hold a malformed object). */
  malformed: boolean;
}

export function datastoreConformance(
  name: string,
  factory: () => Promise<ConformanceTarget>,
  caps: Capabilities,
): void {
  describe(`Datastore conformance: ${name}`, () => {
    let t: ConformanceTarget;
    let ds: Datastore;
    beforeAll(async () => {
      t = await factory();
      ds = t.ds;
    });
    afterAll(async () => {
      await t?.cleanup();
    });

    // A sample of each kind IPAM and the plugin write.
    const samples = (): Array<{ res: Resource; mutate: (r: Resource) => void }> => {
      const s = uniq();
      const node = `node-${s}`;
      const cidr = `10.${(s.charCodeAt(0) % 200) + 1}.${s.charCodeAt(1) % 250}.0/26`;
      return [
        {
          res: res(
            'IPPool',
            `pool-${s}`,
            { cidr: '10.244.0.0/16', blockSize: 26, ipipMode: 'Always', natOutgoing: true, nodeSelector: 'all()' },
            { labels: { team: 'net' } },
          ),
          mutate: (r) => ((r.spec as SpecOf<'IPPool'>).disabled = true),
        },
        {
          res: res('IPAMBlock', blockName(cidr), {
            cidr,
            affinity: `host:${node}`,
            allocations: [0, null, null],
            unallocated: [1, 2],
            attributes: [{ handle_id: 'net.abc', secondary: { node, pod: 'p' } }],
          }),
          mutate: (r) => {
            const b = r.spec as SpecOf<'IPAMBlock'>;
            b.allocations[1] = 0;
            b.unallocated = [2];
          },
        },
        {
          res: res('IPAMBlock', blockName(`fd00:${s.charCodeAt(0)}::/122`), {
            cidr: `fd00:${s.charCodeAt(0)}::/122`,
            affinity: null,
            allocations: [null],
            unallocated: [0],
            attributes: [],
          }),
          mutate: (r) => ((r.spec as SpecOf<'IPAMBlock'>).affinity = `host:${node}`),
        },
        {
          res: res('BlockAffinity', affinityName(node, cidr), { state: 'pending', node, cidr }),
          mutate: (r) => ((r.spec as SpecOf<'BlockAffinity'>).state = 'confirmed'),
        },
        {
          res: res('IPAMHandle', `k8s-pod-network.${s}abc`, {
            handleID: `k8s-pod-network.${s}abc`,
            block: { [cidr]: 1 },
          }),
          mutate: (r) => ((r.spec as SpecOf<'IPAMHandle'>).block[cidr] = 2),
        },
        {
          res: res('ClusterInformation', `default-${s}`, { clusterGUID: s, datastoreReady: true }),
          mutate: (r) => ((r.spec as SpecOf<'ClusterInformation'>).datastoreReady = false),
        },
        {
          res: res(
            'Node',
            node,
            { addresses: [{ address: '192.0.2.1', type: 'InternalIP' }], podCIDRs: ['10.0.0.0/24'] },
            { labels: { zone: 'a' } },
          ),
          mutate: (r) => ((r.spec as SpecOf<'Node'>).podCIDRs = ['10.0.1.0/24']),
        },
      ];
    };

    it('creates, reads, updates (CAS) and deletes every kind', async () => {
      for (const { res: r, mutate } of samples()) {
        const what = `${r.kind} ${r.metadata.name}`;
        const created = await ds.create(r);
        expect(created.metadata.resourceVersion, what).toMatch(/^\d+$/);
        expect(created.spec, what).toEqual(r.spec);
        const got = await ds.get(r.kind, r.metadata.name);
        expect(got.spec, what).toEqual(r.spec);
        expect(got.metadata.resourceVersion, what).toBe(created.metadata.resourceVersion);
        expect(got.metadata.labels ?? {}, what).toEqual(r.metadata.labels ?? {});
        expect(got.metadata.uid, what).toBeTruthy();
        await expectKind(ds.create(r), 'AlreadyExists');

        const changed = structuredClone(got);
        mutate(changed);
        const updated = await ds.update(changed);
        expect(updated.metadata.resourceVersion, what).not.toBe(got.metadata.resourceVersion);
        expect((await ds.get(r.kind, r.metadata.name)).spec, what).toEqual(changed.spec);
        // The stale copy loses: compare-and-swap.
        const stale = await expectKind(ds.update(got), 'Conflict');
        expect(stale.message).toContain(r.metadata.name);
        await expectKind(ds.delete(r.kind, r.metadata.name, { revision: got.metadata.resourceVersion }), 'Conflict');
        await ds.delete(r.kind, r.metadata.name, { revision: updated.metadata.resourceVersion });
        await expectKind(ds.get(r.kind, r.metadata.name), 'NotFound');
        await expectKind(ds.delete(r.kind, r.metadata.name), 'NotFound');
        await expectKind(ds.update(updated), 'NotFound');
      }
    });

    it('keeps the IPAMConfig singleton and deletes without a revision', async () => {
      const cfg = res('IPAMConfig', 'default', {
        strictAffinity: false,
        autoAllocateBlocks: true,
        maxBlocksPerHost: 4,
      });
      await ds.delete('IPAMConfig', 'default').catch((e: unknown) => {
        if (!DatastoreError.is(e, 'NotFound')) throw e;
      });
      const c = await ds.create(cfg);
      expect((await ds.get('IPAMConfig', 'default')).spec).toEqual(cfg.spec);
      await ds.update({ ...c, spec: { ...c.spec, strictAffinity: true } });
      await ds.delete('IPAMConfig', 'default');
      await expectKind(ds.get('IPAMConfig', 'default'), 'NotFound');
    });

    it('stores WorkloadEndpoints per namespace', async () => {
      const s = uniq();
      const ns = `ns-${s}`;
      const node = `node-${s}`;
      const pod = `web-${s}-0`;
      const podLabels = { app: 'web', tier: 'front' };
      // What the plugin writes (workload/workload.ts) and the kubernetes backend derives.
      const labels = {
        ...podLabels,
        'netplugin.org/namespace': ns,
        'netplugin.org/orchestrator': 'k8s',
        'netplugin.org/serviceaccount': 'default',
      };
      await t.preparePod?.(ns, pod, node, podLabels);
      const spec: SpecOf<'WorkloadEndpoint'> = {
        orchestrator: 'k8s',
        node,
        containerID: `cid${s}`,
        pod,
        endpoint: 'eth0',
        serviceAccountName: 'default',
        ipNetworks: ['10.1.0.5/32', 'fd00::5/128'],
        profiles: [`kns.${ns}`, `ksa.${ns}.default`],
        interfaceName: `np${s}`,
        mac: '02:00:00:00:00:01',
      };
      const name = workloadEndpointName(node, 'k8s', pod, 'eth0');
      const created = await ds.create(res('WorkloadEndpoint', name, spec, { namespace: ns, labels }));
      expect(created.metadata.namespace).toBe(ns);
      const got = await ds.get('WorkloadEndpoint', name, ns);
      expect(got.spec).toEqual(spec);
      expect(got.metadata.labels).toEqual(labels);
      await expectKind(ds.get('WorkloadEndpoint', name, `${ns}-other`), 'NotFound');
      await expectKind(ds.create(res('WorkloadEndpoint', name, spec, { namespace: ns, labels })), 'AlreadyExists');
      const list = await ds.list('WorkloadEndpoint', { namespace: ns });
      expect(list.items.map((w) => w.metadata.name)).toEqual([name]);
      const upd = await ds.update({ ...got, spec: { ...got.spec, ipNetworks: ['10.1.0.6/32'] } });
      expect((await ds.get('WorkloadEndpoint', name, ns)).spec.ipNetworks).toEqual(['10.1.0.6/32']);
      await expectKind(ds.update(got), 'Conflict');
      await expectKind(
        ds.delete('WorkloadEndpoint', name, { namespace: ns, revision: got.metadata.resourceVersion }),
        'Conflict',
      );
      await ds.delete('WorkloadEndpoint', name, { namespace: ns, revision: upd.metadata.resourceVersion });
      await expectKind(ds.get('WorkloadEndpoint', name, ns), 'NotFound');
      expect((await ds.list('WorkloadEndpoint', { namespace: ns })).items).toEqual([]);
    });

    it("lists one node's WorkloadEndpoints (list option node), also when another node's name extends it", async () => {
      const s = uniq();
      const ns = `nodes-${s}`;
      // node-x-b's endpoint names start with node-x's prefix ("node--x-" vs "node--x--b-"): the filter is by node, not
      // by name.
      const near = `node-${s}`;
      const far = `node-${s}-b`;
      const names: string[] = [];
      for (const [node, pod] of [
        [near, `a-${s}`],
        [far, `b-${s}`],
        [near, `c-${s}`],
      ] as const) {
        await t.preparePod?.(ns, pod, node, {});
        const name = workloadEndpointName(node, 'k8s', pod, 'eth0');
        names.push(name);
        await ds.create(
          res(
            'WorkloadEndpoint',
            name,
            {
              orchestrator: 'k8s',
              node,
              containerID: `c${pod}`,
              pod,
              endpoint: 'eth0',
              ipNetworks: ['10.1.0.9/32'],
              interfaceName: `np${s}`,
            },
            { namespace: ns },
          ),
        );
      }
      const listed = async (node: string) =>
        (await ds.list('WorkloadEndpoint', { node })).items
          .filter((w) => w.metadata.namespace === ns)
          .map((w) => w.metadata.name);
      expect(await listed(near)).toEqual([names[0], names[2]]);
      expect(await listed(far)).toEqual([names[1]]);
      expect(await listed(`node-${s}-none`)).toEqual([]);
      // With a namespace too, and refused for kinds that have no node.
      expect(
        (await ds.list('WorkloadEndpoint', { namespace: ns, node: far })).items.map((w) => w.metadata.name),
      ).toEqual([names[1]]);
      await expectKind(ds.list('IPPool', { node: near }), 'Invalid');
      for (const name of names) await ds.delete('WorkloadEndpoint', name, { namespace: ns });
    });

    it('lists by label selector and name prefix', async () => {
      const s = uniq();
      const mk = (n: string, labels: Record<string, string>) =>
        ds.create(res('IPPool', `${s}-${n}`, { cidr: '10.9.0.0/16' }, { labels }));
      await mk('a1', { color: 'red', size: 'big' });
      await mk('a2', { color: 'blue' });
      await mk('b1', { color: 'red' });
      const names = async (opts: { labelSelector?: string; namePrefix?: string }) =>
        (await ds.list('IPPool', opts)).items.map((p) => p.metadata.name).filter((n) => n.startsWith(s));
      expect(await names({ namePrefix: `${s}-a` })).toEqual([`${s}-a1`, `${s}-a2`]);
      expect(await names({ labelSelector: "color == 'red'" })).toEqual([`${s}-a1`, `${s}-b1`]);
      expect(await names({ labelSelector: "color == 'red' && !has(size)" })).toEqual([`${s}-b1`]);
      expect(await names({ labelSelector: "color in {'blue'}", namePrefix: `${s}-a` })).toEqual([`${s}-a2`]);
      expect(await names({ labelSelector: 'all()', namePrefix: `${s}-b` })).toEqual([`${s}-b1`]);
      const l = await ds.list('IPPool', { namePrefix: `${s}-` });
      expect(l.revision).toMatch(/^\d+$/);
    });

    it('lists block affinities of one node by name prefix', async () => {
      const s = uniq();
      const n1 = `n${s}`;
      const n2 = `n${s}-2`;
      for (const [node, cidr] of [
        [n1, '10.20.0.0/26'],
        [n1, '10.20.0.64/26'],
        [n2, '10.20.0.128/26'],
      ] as const) {
        await ds.create(res('BlockAffinity', affinityName(node, cidr), { state: 'confirmed', node, cidr }));
      }
      const of = async (prefix: string) =>
        (await ds.list('BlockAffinity', { namePrefix: prefix })).items.map((a) => a.spec.cidr);
      expect(await of(`${n1}-ipv4-`)).toEqual(['10.20.0.0/26', '10.20.0.64/26']);
      expect(await of(`${n2}-ipv4-`)).toEqual(['10.20.0.128/26']);
      expect(await of(`${n1}-ipv6-`)).toEqual([]);
    });

    it('watches from a revision: ADDED, MODIFIED, DELETED in order, with the deleted object', async () => {
      const s = uniq();
      const start = (await ds.list('IPPool', { namePrefix: 'none-' })).revision;
      const w = collect(ds, 'IPPool', { revision: start });
      try {
        const a = await ds.create(res('IPPool', `w-${s}`, { cidr: '10.30.0.0/16' }));
        const b = await ds.update({ ...a, spec: { ...a.spec, natOutgoing: true } });
        await ds.delete('IPPool', `w-${s}`);
        const mine = () => w.events.filter((e) => e.type === 'ERROR' || e.object.metadata.name === `w-${s}`);
        await w.until(() => mine().length >= 3, 'three events');
        const evs = mine();
        expect(evs.map((e) => e.type)).toEqual(['ADDED', 'MODIFIED', 'DELETED']);
        const [e1, e2, e3] = evs as Array<Extract<WatchEvent<'IPPool'>, { object: unknown }>>;
        expect(e1!.object.metadata.resourceVersion).toBe(a.metadata.resourceVersion);
        expect(e2!.object.spec.natOutgoing).toBe(true);
        expect(e2!.object.metadata.resourceVersion).toBe(b.metadata.resourceVersion);
        expect(e3!.object.spec).toEqual(b.spec);
      } finally {
        w.stop();
      }
      // A watch started later from the same revision replays the same history.
      const replay = collect(ds, 'IPPool', { revision: start });
      try {
        await replay.until(
          (evs) => evs.filter((e) => e.type !== 'ERROR' && e.object.metadata.name === `w-${s}`).length >= 3,
          'replay of three events',
        );
      } finally {
        replay.stop();
      }
    });

    it('watches without a revision from now on, per kind', async () => {
      const s = uniq();
      await ds.create(res('IPPool', `before-${s}`, { cidr: '10.31.0.0/16' }));
      const w = collect(ds, 'IPPool', {});
      const other = collect(ds, 'IPAMHandle', {});
      try {
        // Give the watch time to be established on the server before writing.
        await new Promise((r) => setTimeout(r, 300));
        await ds.create(res('IPPool', `after-${s}`, { cidr: '10.32.0.0/16' }));
        await w.until(
          (evs) => evs.some((e) => e.type === 'ADDED' && e.object.metadata.name === `after-${s}`),
          'ADDED after',
        );
        expect(w.events.some((e) => e.type !== 'ERROR' && e.object.metadata.name === `before-${s}`)).toBe(false);
        expect(other.events.filter((e) => e.type !== 'ERROR' && e.object.metadata.name.includes(s))).toEqual([]);
      } finally {
        w.stop();
        other.stop();
      }
    });

    it('rejects an update without a resourceVersion as Invalid', async () => {
      const s = uniq();
      const c = await ds.create(res('IPPool', `inv-${s}`, { cidr: '10.33.0.0/16' }));
      await expectKind(ds.update({ ...c, metadata: { ...c.metadata, resourceVersion: undefined } }), 'Invalid');
    });

    it('ends with exactly 50 increments from 50 concurrent CAS writers', async () => {
      const name = `counter-${uniq()}`;
      await ds.create(res('ClusterInformation', name, { clusterGUID: '0' }));
      let conflicts = 0;
      const writer = async () => {
        for (;;) {
          const cur = await ds.get('ClusterInformation', name);
          const next = { ...cur, spec: { ...cur.spec, clusterGUID: String(Number(cur.spec.clusterGUID) + 1) } };
          try {
            await ds.update(next);
            return;
          } catch (e) {
            if (!DatastoreError.is(e, 'Conflict')) throw e;
            conflicts++;
          }
        }
      };
      await Promise.all(Array.from({ length: 50 }, writer));
      expect((await ds.get('ClusterInformation', name)).spec.clusterGUID).toBe('50');
      // With 50 racing writers, some must have lost a CAS (else nothing was tested).
      expect(conflicts).toBeGreaterThan(0);
    });

    // etcd and memory commit a transaction all or nothing; the Kubernetes API
    // has no multi-object transaction and writes the ops in order.
    const atomic = () => ds.type !== 'kubernetes';

    it('commits a multi-object transaction: handle create, block CAS, endpoint create, delete', async () => {
      const s = uniq();
      const ns = `ns-${s}`;
      const node = `node-${s}`;
      const pod = `tx-${s}-0`;
      await t.preparePod?.(ns, pod, node, { app: 'tx' });
      const cidr = `10.77.${s.charCodeAt(0) % 250}.0/29`;
      const block = await ds.create(
        res('IPAMBlock', blockName(cidr), {
          cidr,
          affinity: `host:${node}`,
          allocations: [null, null],
          unallocated: [0, 1],
          attributes: [],
        }),
      );
      const gone = await ds.create(res('IPPool', `gone-${s}`, { cidr: '10.78.0.0/16' }));
      const handleID = `net.${s}tx`;
      const wepName = workloadEndpointName(node, 'k8s', pod, 'eth0');
      const wep = res(
        'WorkloadEndpoint',
        wepName,
        {
          orchestrator: 'k8s',
          node,
          containerID: `c${s}`,
          pod,
          endpoint: 'eth0',
          ipNetworks: [`${cidr.replace(/\/29$/, '/32')}`],
          interfaceName: `tx${s}`,
          mac: '02:00:00:00:00:02',
        },
        { namespace: ns, labels: { app: 'tx', 'netplugin.org/namespace': ns, 'netplugin.org/orchestrator': 'k8s' } },
      );
      const out = await ds.txn([
        { op: 'create', res: res('IPAMHandle', handleID, { handleID, block: { [cidr]: 1 } }) },
        {
          op: 'update',
          res: {
            ...block,
            spec: { ...block.spec, allocations: [0, null], unallocated: [1], attributes: [{ handle_id: handleID }] },
          },
        },
        { op: 'create', res: wep },
        { op: 'delete', kind: 'IPPool', name: gone.metadata.name, revision: gone.metadata.resourceVersion! },
      ]);
      expect(out).toHaveLength(4);
      expect(out[3]).toBeUndefined();
      for (const o of out.slice(0, 3)) expect(o?.metadata.resourceVersion).toMatch(/^\d+$/);
      // One revision for the whole transaction where it is one.
      if (atomic()) expect(new Set(out.slice(0, 3).map((o) => o!.metadata.resourceVersion)).size).toBe(1);
      expect((await ds.get('IPAMHandle', handleID)).spec.block).toEqual({ [cidr]: 1 });
      const b2 = await ds.get('IPAMBlock', blockName(cidr));
      expect(b2.spec.allocations).toEqual([0, null]);
      expect(b2.metadata.resourceVersion).toBe(out[1]!.metadata.resourceVersion);
      expect((await ds.get('WorkloadEndpoint', wepName, ns)).spec.containerID).toBe(`c${s}`);
      await expectKind(ds.get('IPPool', gone.metadata.name), 'NotFound');

      // DEL's shape: free the block (CAS), delete the handle and the endpoint (by revision).
      const h = await ds.get('IPAMHandle', handleID);
      const w = await ds.get('WorkloadEndpoint', wepName, ns);
      await ds.txn([
        {
          op: 'update',
          res: { ...b2, spec: { ...b2.spec, allocations: [null, null], unallocated: [1, 0], attributes: [] } },
        },
        { op: 'delete', kind: 'WorkloadEndpoint', name: wepName, namespace: ns, revision: w.metadata.resourceVersion! },
        { op: 'delete', kind: 'IPAMHandle', name: handleID, revision: h.metadata.resourceVersion! },
      ]);
      await expectKind(ds.get('IPAMHandle', handleID), 'NotFound');
      await expectKind(ds.get('WorkloadEndpoint', wepName, ns), 'NotFound');
      expect((await ds.get('IPAMBlock', blockName(cidr))).spec.allocations).toEqual([null, null]);
    });

    it('fails a transaction on the guard of one op, names it, and (where atomic) writes nothing', async () => {
      const s = uniq();
      const a = await ds.create(res('IPPool', `ta-${s}`, { cidr: '10.79.0.0/16' }));
      const b = await ds.create(res('IPPool', `tb-${s}`, { cidr: '10.80.0.0/16' }));
      const bMoved = await ds.update({ ...b, spec: { ...b.spec, disabled: true } });
      const handleID = `net.${s}guard`;
      const stale = await expectKind(
        ds.txn([
          { op: 'create', res: res('IPAMHandle', handleID, { handleID, block: {} }) },
          { op: 'update', res: { ...b, spec: { ...b.spec, natOutgoing: true } } },
        ]),
        'Conflict',
      );
      expect(TxnError.opOf(stale)).toBe(1);
      expect(stale.message).toContain(`tb-${s}`);
      if (atomic()) await expectKind(ds.get('IPAMHandle', handleID), 'NotFound');
      else await ds.delete('IPAMHandle', handleID); // ordered: the op before the failed one was written
      expect((await ds.get('IPPool', `tb-${s}`)).metadata.resourceVersion).toBe(bMoved.metadata.resourceVersion);

      // A create of an existing object: AlreadyExists on that op; the update before it is not applied (atomic).
      const exists = await expectKind(
        ds.txn([
          { op: 'update', res: { ...a, spec: { ...a.spec, disabled: true } } },
          { op: 'create', res: res('IPPool', `tb-${s}`, { cidr: '10.80.0.0/16' }) },
        ]),
        'AlreadyExists',
      );
      expect(TxnError.opOf(exists)).toBe(1);
      if (atomic()) expect((await ds.get('IPPool', `ta-${s}`)).spec.disabled).toBeFalsy();

      // A delete of a missing object, and a delete at a stale revision.
      expect(
        TxnError.opOf(await expectKind(ds.txn([{ op: 'delete', kind: 'IPPool', name: `none-${s}` }]), 'NotFound')),
      ).toBe(0);
      expect(
        TxnError.opOf(
          await expectKind(
            ds.txn([{ op: 'delete', kind: 'IPPool', name: `tb-${s}`, revision: b.metadata.resourceVersion! }]),
            'Conflict',
          ),
        ),
      ).toBe(0);
      // The same object twice is refused before anything is sent.
      await expectKind(
        ds.txn([
          { op: 'delete', kind: 'IPPool', name: `tb-${s}` },
          { op: 'delete', kind: 'IPPool', name: `tb-${s}` },
        ]),
        'Invalid',
      );
      expect(await ds.txn([])).toEqual([]);
    });

    it('a compare-only op (check) writes nothing, passes at the revision, fails on a changed or deleted object', async () => {
      const s = uniq();
      const pool = await ds.create(res('IPPool', `tc-${s}`, { cidr: '10.81.0.0/16' }));
      const handleID = `net.${s}check`;
      const ok = await ds.txn([
        { op: 'create', res: res('IPAMHandle', handleID, { handleID, block: {} }) },
        { op: 'check', kind: 'IPPool', name: pool.metadata.name, revision: pool.metadata.resourceVersion! },
      ]);
      expect(ok).toHaveLength(2);
      expect(ok[1]).toBeUndefined();
      // Checked, not written: the pool is at the same revision.
      expect((await ds.get('IPPool', pool.metadata.name)).metadata.resourceVersion).toBe(pool.metadata.resourceVersion);
      await ds.delete('IPAMHandle', handleID);

      const moved = await ds.update({ ...pool, spec: { ...pool.spec, disabled: true } });
      const stale = await expectKind(
        ds.txn([
          { op: 'check', kind: 'IPPool', name: pool.metadata.name, revision: pool.metadata.resourceVersion! },
          { op: 'create', res: res('IPAMHandle', handleID, { handleID, block: {} }) },
        ]),
        'Conflict',
      );
      expect(TxnError.opOf(stale)).toBe(0);
      await expectKind(ds.get('IPAMHandle', handleID), 'NotFound');

      await ds.delete('IPPool', pool.metadata.name);
      const gone = await expectKind(
        ds.txn([
          { op: 'create', res: res('IPAMHandle', handleID, { handleID, block: {} }) },
          { op: 'check', kind: 'IPPool', name: pool.metadata.name, revision: moved.metadata.resourceVersion! },
        ]),
        'NotFound',
      );
      expect(TxnError.opOf(gone)).toBe(1);
      if (atomic()) await expectKind(ds.get('IPAMHandle', handleID), 'NotFound');
      else await ds.delete('IPAMHandle', handleID); // ordered: the op before the failed one was written
    });

    if (caps.malformed)
      it('a malformed object costs itself only: named and skipped by lists, a DELETED in watches, only its own get fails', async () => {
        const putMalformed = t.putMalformed!;
        const s = uniq();
        const cidr = (n: number) => `10.${200 + n}.${s.charCodeAt(0) % 250}.0/24`;
        const good = await ds.create(res('IPPool', `good-${s}`, { cidr: cidr(1) }));
        const victim = await ds.create(res('IPPool', `victim-${s}`, { cidr: cidr(2) }));
        const w = collect(ds, 'IPPool', { revision: victim.metadata.resourceVersion });
        try {
          await putMalformed({ pool: `victim-${s}` });
          // A valid object that became malformed: consumers drop it (no stale copy is kept).
          await w.until(
            (evs) =>
              evs.some(
                (e) =>
                  e.type === 'DELETED' && e.object.metadata.name === `victim-${s}` && e.invalid?.name === `victim-${s}`,
              ),
            'the malformed pool as a DELETED',
          );
          expect(w.events.filter((e) => e.type === 'ERROR')).toEqual([]);
          const l = await ds.list('IPPool');
          expect(l.items.map((p) => p.metadata.name)).toContain(good.metadata.name);
          expect(l.items.map((p) => p.metadata.name)).not.toContain(`victim-${s}`);
          expect(l.invalid?.find((o) => o.name === `victim-${s}`)).toMatchObject({
            kind: 'IPPool',
            name: `victim-${s}`,
          });
          const e = await expectKind(ds.get('IPPool', `victim-${s}`), 'Invalid');
          expect(e.message).toContain(`IPPool victim-${s}`);
          // Every other object reads as before.
          expect((await ds.get('IPPool', `good-${s}`)).spec.cidr).toBe(cidr(1));
          // Deleting it is the repair: lists stop naming it.
          await ds.delete('IPPool', `victim-${s}`);
          expect((await ds.list('IPPool')).invalid?.find((o) => o.name === `victim-${s}`)).toBeUndefined();
        } finally {
          w.stop();
          await ds.delete('IPPool', `good-${s}`);
        }
        // A malformed endpoint: the other endpoints of its namespace and node still list, and so does the node's list.
        const ns = `bad-${s}`;
        const node = `node-${s}`;
        await t.preparePod?.(ns, `ok-${s}`, node, { app: 'ok' });
        const ok = workloadEndpointName(node, 'k8s', `ok-${s}`, 'eth0');
        await ds.create(
          res(
            'WorkloadEndpoint',
            ok,
            {
              orchestrator: 'k8s',
              node,
              containerID: `c-${s}`,
              pod: `ok-${s}`,
              endpoint: 'eth0',
              ipNetworks: ['10.9.8.7/32'],
              interfaceName: `np${s}`,
            },
            { namespace: ns },
          ),
        );
        const bad = await putMalformed({ namespace: ns, pod: `evil-${s}`, node });
        for (const l of [
          await ds.list('WorkloadEndpoint'),
          await ds.list('WorkloadEndpoint', { namespace: ns }),
          await ds.list('WorkloadEndpoint', { node }),
        ]) {
          expect(l.items.map((x) => x.metadata.name)).toContain(ok);
          expect(l.items.map((x) => x.metadata.name)).not.toContain(bad);
          expect(l.invalid?.map((o) => `${o.kind} ${o.namespace}/${o.name}`)).toContain(
            `WorkloadEndpoint ${ns}/${bad}`,
          );
        }
        const e = await expectKind(ds.get('WorkloadEndpoint', bad, ns), 'Invalid');
        expect(e.message).toMatch(/ipNetworks|podIPs/);
      });

    if (caps.deadlines)
      it('gives Unavailable within the per-call deadline when the store does not answer', async () => {
        const undo = await t.makeUnresponsive!();
        try {
          const e = await expectKind(ds.get('IPPool', 'anything', undefined, { timeoutMs: 500 }), 'Unavailable');
          expect(e.message).not.toBe('');
          await expectKind(ds.list('IPPool', { timeoutMs: 500 }), 'Unavailable');
        } finally {
          await undo();
        }
        // And the store works again afterwards.
        const s = uniq();
        await ds.create(res('IPPool', `back-${s}`, { cidr: '10.34.0.0/16' }), { timeoutMs: 10_000 });
      });
  });
}
