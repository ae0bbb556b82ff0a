// The etcd v3 backend against a real etcd: conformance, key layout, corrupt
// data, compaction, and an outage in the middle of a test; all of it over both
// transports (etcd's JSON gateway, the default, and gRPC through etcd3).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { execFileSync } from 'node:child_process';
import { startEtcd, type EtcdServer } from '../support/etcd.js';
import { openDatastore, datastoreConfigFromEnv } from '../../src/datastore/index.js';
import { createPluginRuntime } from '../../src/plugins/main/runtime.js';
import type { EtcdDatastore } from '../../src/datastore/etcd.js';
import { DatastoreError } from '../../src/errors.js';
import { API_VERSION } from '../../src/model/resources.js';
import type { Datastore, WatchEvent } from '../../src/datastore/types.js';
import { affinityName, workloadEndpointName } from '../../src/model/names.js';
import { datastoreConformance } from './datastore-conformance.js';
import { _discoverSrvForTests as discoverSrv } from '../../src/datastore/etcd.js';
import { createSocket } from 'node:dgram';
import { createRequire } from 'node:module';
import { Resolver } from 'node:dns/promises';

/**
 * A minimal authoritative DNS server on UDP 127.0.0.1 answering SRV queries
 * from `records` (name -> [port, target]) and NXDOMAIN otherwise.
 */
async function startSrvServer(records: Record<string, Array<[number, string]>>) {
  const sock = createSocket('udp4');
  const encodeName = (n: string) =>
    Buffer.concat([
      ...n
        .split('.')
        .filter(Boolean)
        .map((l) => Buffer.concat([Buffer.from([l.length]), Buffer.from(l)])),
      Buffer.from([0]),
    ]);
  sock.on('message', (msg, rinfo) => {
    let off = 12;
    const labels: string[] = [];
    while (msg[off]! > 0) {
      labels.push(msg.subarray(off + 1, off + 1 + msg[off]!).toString());
      off += msg[off]! + 1;
    }
    const question = msg.subarray(12, off + 5);
    const answers = records[labels.join('.').toLowerCase()] ?? [];
    const header = Buffer.alloc(12);
    msg.copy(header, 0, 0, 2);
    header.writeUInt16BE(answers.length ? 0x8580 : 0x8583, 2);
    header.writeUInt16BE(1, 4);
    header.writeUInt16BE(answers.length, 6);
    const rrs = answers.map(([port, target], i) => {
      const rdata = Buffer.concat([Buffer.from([0, 10, 0, 100 - i, port >> 8, port & 0xff]), encodeName(target)]);
      const fixed = Buffer.alloc(12);
      fixed.writeUInt16BE(0xc00c, 0);
      fixed.writeUInt16BE(33, 2);
      fixed.writeUInt16BE(1, 4);
      fixed.writeUInt32BE(30, 6);
      fixed.writeUInt16BE(rdata.length, 10);
      return Buffer.concat([fixed, rdata]);
    });
    sock.send(Buffer.concat([header, question, ...rrs]), rinfo.port, rinfo.address);
  });
  await new Promise<void>((r) => sock.bind(0, '127.0.0.1', r));
  const resolver = new Resolver({ timeout: 1000, tries: 1 });
  resolver.setServers([`127.0.0.1:${sock.address().port}`]);
  return { resolve: (name: string) => resolver.resolveSrv(name), close: () => sock.close() };
}

function etcdctl(etcd: EtcdServer, ...args: string[]): string {
  return execFileSync('etcdctl', ['--endpoints', etcd.endpoint, ...args], {
    env: { ...process.env, ETCDCTL_API: '3' },
  }).toString();
}

const etcd3Loaded = () =>
  Object.keys(createRequire(import.meta.url).cache).some((k) => k.includes('/node_modules/etcd3/'));

// http first: its suites end by checking that etcd3 was never loaded.
for (const transport of ['http', 'grpc'] as const) {
  datastoreConformance(
    `etcdv3 (${transport})`,
    async () => {
      const etcd = await startEtcd();
      const ds = await openDatastore({
        etcd_transport: transport,
        datastore_type: 'etcdv3',
        etcd_endpoints: etcd.endpoint,
        timeoutMs: 5000,
      });
      return {
        ds,
        async putMalformed(what) {
          if ('pool' in what) {
            etcdctl(
              etcd,
              'put',
              `/netplugin/resources/v3/netplugin.org/ippools/${what.pool}`,
              '{"apiVersion": "netplugin.org/v3", truncated',
            );
            return what.pool;
          }
          const name = workloadEndpointName(what.node, 'k8s', what.pod, 'eth0');
          const spec = {
            orchestrator: 'k8s',
            node: what.node,
            containerID: 'c',
            pod: what.pod,
            endpoint: 'eth0',
            ipNetworks: ['not-an-address'],
            interfaceName: 'x',
          };
          etcdctl(
            etcd,
            'put',
            `/netplugin/resources/v3/netplugin.org/workloadendpoints/${what.namespace}/${name}`,
            JSON.stringify({
              apiVersion: API_VERSION,
              kind: 'WorkloadEndpoint',
              metadata: { name, namespace: what.namespace },
              spec,
            }),
          );
          return name;
        },
        async makeUnresponsive() {
          await etcd.pause();
          return () => etcd.start();
        },
        async cleanup() {
          await ds.close();
          await etcd.stop();
        },
      };
    },
    { deadlines: true, malformed: true },
  );

  describe(`etcdv3 backend specifics (${transport})`, () => {
    let etcd: EtcdServer;
    let ds: Datastore;
    beforeAll(async () => {
      etcd = await startEtcd();
      ds = await openDatastore({ etcd_transport: transport, etcd_endpoints: etcd.endpoint, timeoutMs: 3000 });
    });
    afterAll(async () => {
      await ds?.close();
      await etcd?.stop();
    });

    it('uses the documented key layout, without resourceVersion in the value', async () => {
      await ds.create({
        apiVersion: API_VERSION,
        kind: 'IPPool',
        metadata: { name: 'layout-pool' },
        spec: { cidr: '10.0.0.0/16' },
      });
      await ds.create({
        apiVersion: API_VERSION,
        kind: 'IPAMBlock',
        metadata: { name: '10.0.0.0-26' },
        spec: { cidr: '10.0.0.0/26', affinity: 'host:n1', allocations: [], unallocated: [], attributes: [] },
      });
      await ds.create({
        apiVersion: API_VERSION,
        kind: 'BlockAffinity',
        metadata: { name: affinityName('n1', '10.0.0.0/26') },
        spec: { state: 'confirmed', node: 'n1', cidr: '10.0.0.0/26' },
      });
      await ds.create({
        apiVersion: API_VERSION,
        kind: 'IPAMHandle',
        metadata: { name: 'net.c1' },
        spec: { handleID: 'net.c1', block: {} },
      });
      await ds.create({
        apiVersion: API_VERSION,
        kind: 'IPAMConfig',
        metadata: { name: 'default' },
        spec: { strictAffinity: true },
      });
      await ds.create({
        apiVersion: API_VERSION,
        kind: 'WorkloadEndpoint',
        metadata: { name: 'n1-k8s-p-eth0', namespace: 'ns1' },
        spec: {
          orchestrator: 'k8s',
          node: 'n1',
          containerID: 'c',
          endpoint: 'eth0',
          ipNetworks: [],
          interfaceName: 'x',
        },
      });
      const keys = etcdctl(etcd, 'get', '/netplugin/', '--prefix', '--keys-only').split('\n').filter(Boolean).sort();
      expect(keys).toEqual([
        '/netplugin/ipam/v2/assignment/ipv4/block/10.0.0.0-26',
        '/netplugin/ipam/v2/config',
        '/netplugin/ipam/v2/handle/net.c1',
        '/netplugin/ipam/v2/host/n1/ipv4/block/10.0.0.0-26',
        '/netplugin/resources/v3/netplugin.org/ippools/layout-pool',
        '/netplugin/resources/v3/netplugin.org/workloadendpoints/ns1/n1-k8s-p-eth0',
      ]);
      const value = JSON.parse(
        etcdctl(etcd, 'get', '/netplugin/resources/v3/netplugin.org/ippools/layout-pool', '--print-value-only'),
      );
      expect(value.metadata.resourceVersion).toBeUndefined();
      expect(value.spec).toEqual({ cidr: '10.0.0.0/16' });
      await expect(ds.get('IPAMConfig', 'other')).rejects.toMatchObject({ kind: 'Invalid' });
    });

    it('reports corrupt data as Invalid naming the key', async () => {
      etcdctl(etcd, 'put', '/netplugin/resources/v3/netplugin.org/ippools/corrupt-json', '{not json');
      etcdctl(
        etcd,
        'put',
        '/netplugin/resources/v3/netplugin.org/ippools/corrupt-spec',
        JSON.stringify({
          apiVersion: API_VERSION,
          kind: 'IPPool',
          metadata: { name: 'corrupt-spec' },
          spec: { cidr: 42 },
        }),
      );
      const e1 = await ds.get('IPPool', 'corrupt-json').catch((e: unknown) => e as DatastoreError);
      expect(e1).toMatchObject({ kind: 'Invalid' });
      expect((e1 as Error).message).toContain('/netplugin/resources/v3/netplugin.org/ippools/corrupt-json');
      const e2 = await ds.get('IPPool', 'corrupt-spec').catch((e: unknown) => e as DatastoreError);
      expect(e2).toMatchObject({ kind: 'Invalid' });
      expect((e2 as Error).message).toMatch(/ippools\/corrupt-spec.*spec\.cidr/);
      etcdctl(etcd, 'del', '/netplugin/resources/v3/netplugin.org/ippools/corrupt-', '--prefix');
    });

    it('a malformed value of any kind is named and skipped: the list of its kind still works', async () => {
      await ds.create({
        apiVersion: API_VERSION,
        kind: 'IPAMBlock',
        metadata: { name: '10.5.0.0-26' },
        spec: { cidr: '10.5.0.0/26', affinity: null, allocations: [], unallocated: [], attributes: [] },
      });
      await ds.create({ apiVersion: API_VERSION, kind: 'Node', metadata: { name: 'fine-node' }, spec: {} });
      const bad: Array<[string, string, string, RegExp]> = [
        ['IPAMBlock', '10.5.1.0-26', '/netplugin/ipam/v2/assignment/ipv4/block/10.5.1.0-26', /not JSON/],
        ['BlockAffinity', 'n9-ipv4-10.5.1.0-26', '/netplugin/ipam/v2/host/n9/ipv4/block/10.5.1.0-26', /spec\.state/],
        ['IPAMHandle', 'net.bad', '/netplugin/ipam/v2/handle/net.bad', /spec\.block/],
        ['Node', 'bad-node', '/netplugin/resources/v3/netplugin.org/nodes/bad-node', /spec\.podCIDRs\.0/],
        [
          'GlobalNetworkPolicy',
          'bad-gnp',
          '/netplugin/resources/v3/netplugin.org/globalnetworkpolicies/bad-gnp',
          /spec/,
        ],
      ];
      etcdctl(etcd, 'put', bad[0]![2], '\u0001 binary');
      etcdctl(
        etcd,
        'put',
        bad[1]![2],
        JSON.stringify({
          apiVersion: API_VERSION,
          kind: 'BlockAffinity',
          metadata: { name: bad[1]![1] },
          spec: { state: 'maybe', node: 'n9', cidr: '10.5.1.0/26' },
        }),
      );
      etcdctl(
        etcd,
        'put',
        bad[2]![2],
        JSON.stringify({
          apiVersion: API_VERSION,
          kind: 'IPAMHandle',
          metadata: { name: 'net.bad' },
          spec: { handleID: 'net.bad', block: 'x' },
        }),
      );
      etcdctl(
        etcd,
        'put',
        bad[3]![2],
        JSON.stringify({
          apiVersion: API_VERSION,
          kind: 'Node',
          metadata: { name: 'bad-node' },
          spec: { podCIDRs: ['not-a-cidr'] },
        }),
      );
      etcdctl(
        etcd,
        'put',
        bad[4]![2],
        JSON.stringify({
          apiVersion: API_VERSION,
          kind: 'GlobalNetworkPolicy',
          metadata: { name: 'bad-gnp' },
          spec: 'deny everything',
        }),
      );
      try {
        for (const [kind, name, key, why] of bad) {
          const l = await ds.list(kind as 'Node');
          expect(l.invalid, kind).toEqual([
            expect.objectContaining({ kind, name, where: `etcd key ${key}`, reason: expect.stringMatching(why) }),
          ]);
          expect(l.items.map((o) => o.metadata.name)).not.toContain(name);
          const e = (await ds.get(kind as 'Node', name).catch((x: unknown) => x)) as DatastoreError;
          expect(e.kind).toBe('Invalid');
          expect(e.message).toContain(key);
        }
        expect((await ds.list('IPAMBlock')).items.map((b) => b.metadata.name)).toContain('10.5.0.0-26');
        expect((await ds.list('Node')).items.map((n) => n.metadata.name)).toContain('fine-node');
        // A watch delivers the next valid change of the kind after a malformed one, without an ERROR.
        const events: Array<WatchEvent<'Node'>> = [];
        const w = ds.watch('Node', {}, (ev) => events.push(ev));
        await new Promise((r) => setTimeout(r, 300));
        etcdctl(etcd, 'put', bad[3]![2], '{broken');
        await ds.create({ apiVersion: API_VERSION, kind: 'Node', metadata: { name: 'after-node' }, spec: {} });
        for (let i = 0; i < 100 && !events.some((e) => e.type === 'ADDED'); i++)
          await new Promise((r) => setTimeout(r, 50));
        w.stop();
        expect(
          events.map((e) =>
            e.type === 'ERROR'
              ? `ERROR ${e.error.message}`
              : `${e.type} ${e.object.metadata.name}${e.type === 'DELETED' && e.invalid ? ' (malformed)' : ''}`,
          ),
        ).toEqual(['DELETED bad-node (malformed)', 'ADDED after-node']);
      } finally {
        for (const [, , key] of bad) etcdctl(etcd, 'del', key);
      }
    });

    it('sends an ERROR event when watching from a compacted revision', async () => {
      const a = await ds.create({
        apiVersion: API_VERSION,
        kind: 'IPPool',
        metadata: { name: 'compact-me' },
        spec: { cidr: '10.1.0.0/16' },
      });
      const b = await ds.update({ ...a, spec: { cidr: '10.2.0.0/16' } });
      etcdctl(etcd, 'compact', b.metadata.resourceVersion!);
      const events: Array<WatchEvent<'IPPool'>> = [];
      const w = ds.watch('IPPool', { revision: String(Number(a.metadata.resourceVersion) - 1) }, (ev) =>
        events.push(ev),
      );
      try {
        for (let i = 0; i < 100 && !events.length; i++) await new Promise((r) => setTimeout(r, 50));
        expect(events[0]?.type).toBe('ERROR');
        expect((events[0] as { error: Error }).error.message).toMatch(/compacted.*re-list/);
      } finally {
        w.stop();
      }
    });

    it('survives an outage: Unavailable within the deadline naming the endpoint, then works after restart', async () => {
      const before = await ds.create({
        apiVersion: API_VERSION,
        kind: 'IPPool',
        metadata: { name: 'outage' },
        spec: { cidr: '10.3.0.0/16' },
      });
      const events: Array<WatchEvent<'IPPool'>> = [];
      const w = ds.watch('IPPool', { revision: before.metadata.resourceVersion }, (ev) => events.push(ev));
      await etcd.pause();
      try {
        const e = (await ds
          .get('IPPool', 'outage', undefined, { timeoutMs: 1500 })
          .catch((x: unknown) => x)) as DatastoreError;
        expect(e).toBeInstanceOf(DatastoreError);
        expect(e.kind).toBe('Unavailable');
        expect(e.message).toContain(`etcd at ${etcd.endpoint} is unreachable: connection refused (ECONNREFUSED)`);
        await expect(
          ds.update({ ...before, spec: { cidr: '10.4.0.0/16' } }, { timeoutMs: 1500 }),
        ).rejects.toMatchObject({ kind: 'Unavailable' });
      } finally {
        await etcd.start();
      }
      const upd = await ds.update({ ...before, spec: { cidr: '10.4.0.0/16' } });
      expect((await ds.get('IPPool', 'outage')).metadata.resourceVersion).toBe(upd.metadata.resourceVersion);
      // The watch resumes on its own after the restart and sees the write.
      for (let i = 0; i < 200 && !events.some((e) => e.type === 'MODIFIED'); i++)
        await new Promise((r) => setTimeout(r, 50));
      w.stop();
      expect(events.filter((e) => e.type !== 'ERROR').map((e) => e.type)).toEqual(['MODIFIED']);
    });

    it('answers Unavailable within the deadline when etcd accepts connections but is frozen', async () => {
      process.kill(etcd.proc.pid!, 'SIGSTOP');
      try {
        // The stop is delivered asynchronously: wait until every thread of etcd
        // is stopped, or a request sent at once can still be answered.
        await waitStopped(etcd.proc.pid!);
        const e = (await ds
          .get('IPPool', 'outage', undefined, { timeoutMs: 800 })
          .catch((x: unknown) => x)) as DatastoreError;
        expect(e).toBeInstanceOf(DatastoreError);
        expect(e.kind).toBe('Unavailable');
        expect(e.message).toContain('get IPPool outage');
        expect(e.message).toMatch(/did not answer within \d+ ms/);
      } finally {
        process.kill(etcd.proc.pid!, 'SIGCONT');
      }
      expect((await ds.get('IPPool', 'outage')).spec.cidr).toBe('10.4.0.0/16');
    });

    it('explains an unreachable endpoint and bad configuration', async () => {
      const { freePort } = await import('../support/etcd.js');
      const port = await freePort();
      const down = await openDatastore({
        etcd_transport: transport,
        etcd_endpoints: `http://127.0.0.1:${port}`,
        timeoutMs: 2000,
      });
      try {
        const e = (await down.get('IPPool', 'x').catch((x: unknown) => x)) as DatastoreError;
        expect(e.kind).toBe('Unavailable');
        expect(e.message).toContain(
          `etcd at http://127.0.0.1:${port} is unreachable: connection refused (ECONNREFUSED); check etcd_endpoints`,
        );
      } finally {
        await down.close();
      }
      await expect(openDatastore({ etcd_transport: transport, etcd_endpoints: 'localhost:2379' })).rejects.toThrow(
        /etcd_endpoints entry "localhost:2379" is not an endpoint URL/,
      );
      await expect(
        openDatastore({ etcd_transport: transport, etcd_endpoints: 'http://a:1', etcd_discovery_srv: 'example.org' }),
      ).rejects.toThrow(/mutually exclusive/);
      await expect(
        openDatastore({
          etcd_transport: transport,
          etcd_endpoints: 'https://a:1',
          etcd_ca_cert_file: '/nonexistent/ca.pem',
        }),
      ).rejects.toThrow(/etcd_ca_cert_file=\/nonexistent\/ca.pem cannot be read \(ENOENT\)/);
      await expect(
        openDatastore({ etcd_transport: transport, etcd_endpoints: 'https://a:1', etcd_cert_file: '/x.pem' }),
      ).rejects.toThrow(/needs both etcd_cert_file and etcd_key_file/);
      await expect(openDatastore({ etcd_transport: transport, datastore_type: 'consul' as never })).rejects.toThrow(
        /datastore_type="consul" is not supported/,
      );
    });

    it('fails over past an endpoint that refuses connections, and names every endpoint when all fail', async () => {
      const { freePort } = await import('../support/etcd.js');
      const dead = `http://127.0.0.1:${await freePort()}`;
      const multi = await openDatastore({
        etcd_transport: transport,
        etcd_endpoints: `${dead},${etcd.endpoint}`,
        timeoutMs: 3000,
      });
      try {
        for (let i = 0; i < 5; i++) expect((await multi.get('IPPool', 'outage')).spec.cidr).toBe('10.4.0.0/16');
        const c = await multi.create({
          apiVersion: API_VERSION,
          kind: 'IPPool',
          metadata: { name: `failover-${transport}` },
          spec: { cidr: '10.5.0.0/16' },
        });
        await multi.delete('IPPool', `failover-${transport}`, { revision: c.metadata.resourceVersion });
      } finally {
        await multi.close();
      }
      const dead2 = `http://127.0.0.1:${await freePort()}`;
      const none = await openDatastore({
        etcd_transport: transport,
        etcd_endpoints: `${dead},${dead2}`,
        timeoutMs: 2000,
      });
      try {
        const e = (await none.get('IPPool', 'x').catch((x: unknown) => x)) as DatastoreError;
        expect(e.kind).toBe('Unavailable');
        expect(e.message).toMatch(
          new RegExp(`etcd at (${dead}|${dead2}) is unreachable: connection refused \\(ECONNREFUSED\\)`),
        );
      } finally {
        await none.close();
      }
    });

    it('discovers endpoints from DNS SRV records, TLS ones first', async () => {
      const dns = await startSrvServer({
        '_etcd-client._tcp.plain.test': [[etcd.clientPort, '127.0.0.1']],
        '_etcd-client-ssl._tcp.both.test': [
          [2379, 'etcd-a.both.test'],
          [2380, 'etcd-b.both.test'],
        ],
        '_etcd-client._tcp.both.test': [[2379, 'etcd-a.both.test']],
      });
      try {
        const eps = await discoverSrv('plain.test', dns.resolve);
        expect(eps).toEqual([`http://127.0.0.1:${etcd.clientPort}`]);
        const viaSrv = await openDatastore({ etcd_transport: transport, etcd_endpoints: eps.join(',') });
        try {
          expect((await viaSrv.list('IPPool')).revision).toMatch(/^\d+$/);
        } finally {
          await viaSrv.close();
        }
        expect(await discoverSrv('both.test', dns.resolve)).toEqual([
          'https://etcd-a.both.test:2379',
          'https://etcd-b.both.test:2380',
        ]);
        await expect(discoverSrv('none.test', dns.resolve)).rejects.toThrow(
          /neither _etcd-client-ssl._tcp.none.test nor _etcd-client._tcp.none.test has SRV records/,
        );
      } finally {
        dns.close();
      }
    });

    it('falls back to the deprecated etcd_authority/etcd_scheme', async () => {
      const authority = etcd.endpoint.replace('http://', '');
      const legacy = await openDatastore({ etcd_transport: transport, etcd_authority: authority, etcd_scheme: 'http' });
      try {
        expect((await legacy.get('IPPool', 'outage')).spec.cidr).toBe('10.4.0.0/16');
      } finally {
        await legacy.close();
      }
    });

    it('reads its configuration from the CLI environment', () => {
      expect(
        datastoreConfigFromEnv({
          DATASTORE_TYPE: 'etcdv3',
          ETCD_ENDPOINTS: 'https://a:2379',
          ETCD_CA_CERT_FILE: '/ca',
          ETCD_CERT_FILE: '/c',
          ETCD_KEY_FILE: '/k',
        }),
      ).toEqual({
        datastore_type: 'etcdv3',
        etcd_endpoints: 'https://a:2379',
        etcd_ca_cert_file: '/ca',
        etcd_cert_file: '/c',
        etcd_key_file: '/k',
      });
      expect(datastoreConfigFromEnv({ DATASTORE_TYPE: 'kubernetes', KUBECONFIG: '/a:/b' })).toEqual({
        datastore_type: 'kubernetes',
        kubernetes: { kubeconfig: '/a' },
      });
      expect(() => datastoreConfigFromEnv({ DATASTORE_TYPE: 'zk' })).toThrow(/DATASTORE_TYPE=zk/);
    });
  });

  if (transport === 'http') {
    it('never loads etcd3 on the http transport', () => {
      expect(etcd3Loaded()).toBe(false);
    });
  }
}

it('loads etcd3 once the grpc transport has been used (so the check above can fail)', () => {
  expect(etcd3Loaded()).toBe(true);
});

it("uses the runtime's etcd transport unless the configuration names one", async () => {
  const open = async (rt: ReturnType<typeof createPluginRuntime>, conf: { etcd_transport?: 'grpc' | 'http' }) => {
    const ds = (await rt.datastore({ etcd_endpoints: 'http://127.0.0.1:1', ...conf })) as EtcdDatastore;
    await rt.close();
    return ds.transport;
  };
  expect(await open(createPluginRuntime(), {})).toBe('http');
  expect(await open(createPluginRuntime({ etcdTransport: 'grpc' }), {})).toBe('grpc');
  expect(await open(createPluginRuntime({ etcdTransport: 'grpc' }), { etcd_transport: 'http' })).toBe('http');
  // Another runtime in the same process is not affected (no process-wide default).
  expect(await open(createPluginRuntime(), {})).toBe('http');
  await expect(openDatastore({ etcd_endpoints: 'http://127.0.0.1:1', etcd_transport: 'h2' as never })).rejects.toThrow(
    /etcd_transport="h2" is not supported; use "http" or "grpc"/,
  );
});

/** Resolves once every thread of `pid` is in the stopped state (T) in /proc. */
async function waitStopped(pid: number): Promise<void> {
  const { readdirSync, readFileSync } = await import('node:fs');
  for (let i = 0; i < 200; i++) {
    const states = readdirSync(`/proc/${pid}/task`).map((t) => {
      const stat = readFileSync(`/proc/${pid}/task/${t}/stat`, 'utf8');
      return stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3);
    });
    if (states.every((st) => st === 'T' || st === 't')) return;
    await new Promise((r) => setTimeout(r, 10));
  }
  throw new Error(`etcd (pid ${pid}) did not stop after SIGSTOP`);
}
