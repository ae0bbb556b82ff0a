// netplugin-ipam as a runtime runs it: the built dist/netplugin-ipam.mjs
// executed with a CNI environment and the netconf on stdin, several processes
// at once for three simulated nodes (separate nodenames and lock files), on a
// real etcd and on the fake Kubernetes API server.
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startEtcd } from '../support/etcd.js';
import { startFakeApiServer, writeKubeconfig } from '../support/fake-apiserver.js';
import { openDatastore } from '../../src/datastore/index.js';
import { API_VERSION, type Kind, type Resource } from '../../src/model/resources.js';
import type { Datastore } from '../../src/datastore/types.js';
import { ErrorCodes } from '../../src/errors.js';
import { createPool } from '../support/builders.js';

const root = join(dirname(fileURLToPath(import.meta.url)), '../..');
const BIN = join(root, 'dist/netplugin-ipam.mjs');
const NET = 'ipamnet';
const NODES = ['node-a', 'node-b', 'node-c'];
const PARALLEL = 16;

interface Backend {
  name: string;
  start(): Promise<{ conf: Record<string, unknown>; ds: Datastore; stop(): Promise<void> }>;
}

const backends: Backend[] = [
  {
    name: 'etcdv3',
    async start() {
      const etcd = await startEtcd();
      const conf = { datastore_type: 'etcdv3', etcd_endpoints: etcd.endpoint };
      const ds = await openDatastore({ datastore_type: 'etcdv3', etcd_endpoints: etcd.endpoint, timeoutMs: 10_000 });
      return { conf, ds, stop: async () => (await ds.close(), await etcd.stop()) };
    },
  },
  {
    name: 'kubernetes (fake API server)',
    async start() {
      const token = `ipam-test-${process.pid}`;
      const server = await startFakeApiServer({ tls: true, auth: { tokens: [token] } });
      const kubeconfig = writeKubeconfig(server.dir, server, { token });
      const conf = { datastore_type: 'kubernetes', kubernetes: { kubeconfig } };
      const ds = await openDatastore({ datastore_type: 'kubernetes', kubernetes: { kubeconfig }, timeoutMs: 10_000 });
      return { conf, ds, stop: async () => (await ds.close(), await server.stop()) };
    },
  },
];

interface RunResult {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
  /** undefined when stdout was empty or not JSON. */
  json?: { ips?: Array<{ address: string }>; routes?: Array<{ dst: string }>; code?: number; msg?: string } | undefined;
}

/** One plugin invocation, as a runtime does it: env + stdin, NODE_EXTRA_CA_CERTS not inherited. */
interface KillAt {
  /** Kill this long after the process was spawned... */
  afterMs: number;
  /** ...or, when set, this long after stderr first contains this text. */
  afterLine?: string;
}

function runPlugin(
  command: string,
  conf: Record<string, unknown>,
  containerId: string,
  opts: { cniArgs?: string; kill?: KillAt } = {},
): Promise<RunResult & { lineAt?: number | undefined; ms: number }> {
  const env: Record<string, string> = {
    PATH: `${dirname(process.execPath)}:/usr/sbin:/usr/bin:/sbin:/bin`,
    CNI_COMMAND: command,
    CNI_CONTAINERID: containerId,
    CNI_NETNS: `/var/run/netns/ipamtest-${containerId}`,
    CNI_IFNAME: 'eth0',
    CNI_PATH: '/usr/lib/cni',
  };
  if (opts.cniArgs) env['CNI_ARGS'] = opts.cniArgs;
  return new Promise((resolve, reject) => {
    const t0 = Date.now();
    const child = spawn(BIN, [], { env, stdio: ['pipe', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    let lineAt: number | undefined;
    let timer: NodeJS.Timeout | undefined;
    const kill = opts.kill;
    if (kill && !kill.afterLine) timer = setTimeout(() => child.kill('SIGKILL'), kill.afterMs);
    child.stdout.on('data', (d: Buffer) => (stdout += d));
    child.stderr.on('data', (d: Buffer) => {
      stderr += d;
      if (lineAt === undefined && kill?.afterLine && stderr.includes(kill.afterLine)) {
        lineAt = Date.now() - t0;
        timer = setTimeout(() => child.kill('SIGKILL'), kill.afterMs);
      }
    });
    child.on('error', reject);
    child.on('close', (code, signal) => {
      if (timer) clearTimeout(timer);
      let json: RunResult['json'];
      try {
        json = stdout.trim() ? JSON.parse(stdout) : undefined;
      } catch {
        json = undefined;
      }
      resolve({ code, signal, stdout, stderr, json, lineAt, ms: Date.now() - t0 });
    });
    child.stdin.on('error', () => undefined); // a killed child closes its stdin early
    child.stdin.end(JSON.stringify(conf));
  });
}

/** Invocations that answered code 11 (try again later) and were retried, per backend run. */
let retried: string[] = [];

/**
 * What a runtime does with a result: code 11 means "try again later", so the
 * call is retried (an ADD after tearing down with DEL, as kubelet does).
 */
async function runtimeCall(
  command: string,
  conf: Record<string, unknown>,
  containerId: string,
  opts: { cniArgs?: string } = {},
): Promise<RunResult> {
  for (let attempt = 1; ; attempt++) {
    const r = await runPlugin(command, conf, containerId, opts);
    if (r.json?.code !== ErrorCodes.TryAgainLater || attempt === 5) return r;
    retried.push(`${command} ${containerId}: ${r.json.msg}`);
    if (command === 'ADD') await runtimeCall('DEL', conf, containerId, opts);
    await new Promise((res) => setTimeout(res, 100 * attempt));
  }
}

async function limited<T, R>(items: T[], n: number, fn: (t: T, i: number) => Promise<R>): Promise<R[]> {
  const out: R[] = new Array(items.length);
  let next = 0;
  await Promise.all(
    Array.from({ length: Math.min(n, items.length) }, async () => {
      while (next < items.length) {
        const i = next++;
        out[i] = await fn(items[i]!, i);
      }
    }),
  );
  return out;
}

async function all<K extends Kind>(ds: Datastore, kind: K): Promise<Array<Resource<K>>> {
  return (await ds.list(kind)).items;
}

/**
 * Allocated addresses by IP with their handle and node; fails on an address
 * whose handle does not count it. The two lists are not one snapshot: while
 * other invocations run, check only `only` (a handle nobody else touches).
 * Blocks are read first: a handle is written before its address and removed
 * after it, so an address seen in a block still has its handle afterwards.
 */
async function audit(
  ds: Datastore,
  only?: string,
): Promise<{ byIP: Map<string, { handle: string; node: string }>; handles: Map<string, Record<string, number>> }> {
  const blocks = await all(ds, 'IPAMBlock');
  const handles = new Map((await all(ds, 'IPAMHandle')).map((h) => [h.spec.handleID, h.spec.block]));
  const byIP = new Map<string, { handle: string; node: string }>();
  for (const b of blocks) {
    const base = b.spec.cidr.split('/')[0]!.split('.').map(Number);
    const per = new Map<string, number>();
    b.spec.allocations.forEach((idx, ord) => {
      if (idx == null) return;
      const attr = b.spec.attributes[idx]!;
      const ip = `${base[0]}.${base[1]}.${base[2]}.${base[3]! + ord}`;
      expect(byIP.has(ip), `${ip} allocated twice`).toBe(false);
      byIP.set(ip, { handle: attr.handle_id!, node: attr.secondary?.node ?? '' });
      per.set(attr.handle_id!, (per.get(attr.handle_id!) ?? 0) + 1);
    });
    for (const [h, n] of per) {
      if (only !== undefined && h !== only) continue;
      const counted = handles.get(h)?.[b.spec.cidr] ?? 0;
      expect(
        counted,
        `address(es) in ${b.spec.cidr} held by ${h} without a handle counting them`,
      ).toBeGreaterThanOrEqual(n);
    }
  }
  return { byIP, handles };
}

beforeAll(() => {
  if (!existsSync(BIN)) throw new Error(`${BIN} is missing: run 'npm run build:ts' first`);
  const built = statSync(BIN).mtimeMs;
  for (const src of ['src/ipam/allocator.ts', 'src/plugins/ipam/index.ts', 'src/selector/index.ts']) {
    if (statSync(join(root, src)).mtimeMs > built)
      throw new Error(`${BIN} is older than ${src}: run 'npm run build:ts' first`);
  }
});

for (const backend of backends) {
  describe(`netplugin-ipam executable on ${backend.name}`, () => {
    let env: Awaited<ReturnType<Backend['start']>>;
    let dir: string;
    const netconf = (nodename: string, ipam: Record<string, unknown> = {}, extra: Record<string, unknown> = {}) => ({
      cniVersion: '1.0.0',
      name: NET,
      type: 'bridge',
      nodename,
      log_file_path: '',
      log_level: 'WARNING',
      ipam_lock_file: join(dir, `${nodename}.lock`),
      ...env.conf,
      ipam: { type: 'netplugin-ipam', ...ipam },
      ...extra,
    });

    beforeAll(async () => {
      dir = mkdtempSync(join(tmpdir(), 'netplugin-ipam-it-'));
      env = await backend.start();
      await createPool(env.ds, 'p24', '10.123.0.0/24', { blockSize: 29 });
    });
    afterAll(async () => {
      // Not a failure: a loaded machine makes the datastore briefly unavailable,
      // which is what code 11 is for. Shown so that it stays visible.
      if (retried.length)
        console.log(
          `${backend.name}: ${retried.length} invocation(s) answered 11 and were retried:\n  ` +
            `${retried.slice(0, 10).join('\n  ')}`,
        );
      retried = [];
      await env?.stop();
      if (dir) rmSync(dir, { recursive: true, force: true });
    });

    it('300 concurrent ADDs from 3 nodes on a /24 of /29 blocks: no address twice, every one with its handle; 300 DELs empty the pool', async () => {
      const ids = Array.from({ length: 300 }, (_, i) => ({ cid: `c${i}-${process.pid}`, node: NODES[i % 3]! }));
      const adds = await limited(ids, PARALLEL, ({ cid, node }) => runtimeCall('ADD', netconf(node), cid));

      const ok = adds.filter((r) => r.code === 0);
      const failed = adds.filter((r) => r.code !== 0);
      // 32 blocks of 8: every address is handed out (borrowing is on), the rest fail cleanly.
      expect(ok.length, failed[0]?.stdout).toBe(256);
      for (const f of failed) {
        expect(f.json?.code, f.stdout + f.stderr).toBe(ErrorCodes.IpamFailure);
        expect(f.json?.msg).toMatch(/no free IPv4 address .* exhausted/);
      }
      const given = ok.map((r) => r.json!.ips![0]!.address);
      expect(new Set(given).size).toBe(256);
      for (const r of ok) {
        expect(r.json!.ips!.length).toBe(1);
        expect(r.json!.ips![0]!.address).toMatch(/^10\.123\.0\.\d+\/29$/);
        expect(r.json!.routes).toEqual([{ dst: '0.0.0.0/0' }]);
      }

      const { byIP, handles } = await audit(env.ds);
      expect(byIP.size).toBe(256);
      adds.forEach((r, i) => {
        const handle = `${NET}.${ids[i]!.cid}`;
        if (r.code !== 0) {
          expect(handles.has(handle), `failed ADD left handle ${handle}`).toBe(false);
          return;
        }
        const ip = r.json!.ips![0]!.address.split('/')[0]!;
        expect(byIP.get(ip)).toEqual({ handle, node: ids[i]!.node });
        expect(handles.get(handle)).toBeDefined();
      });
      const affs = await all(env.ds, 'BlockAffinity');
      expect(affs.every((a) => a.spec.state === 'confirmed')).toBe(true);
      expect(new Set(affs.map((a) => a.spec.cidr)).size).toBe(affs.length);

      const dels = await limited(ids, PARALLEL, ({ cid, node }) => runtimeCall('DEL', netconf(node), cid));
      for (const d of dels) expect(d.code, d.stdout + d.stderr).toBe(0);
      const after = await audit(env.ds);
      expect(after.byIP.size).toBe(0);
      expect(after.handles.size).toBe(0);
      // DEL is idempotent
      const again = await runtimeCall('DEL', netconf('node-a'), ids[0]!.cid);
      expect(again.code, again.stdout).toBe(0);
    }, 900_000);

    it('an ADD killed with SIGKILL at random points never leaves an address without its handle, nor a handle after the DEL', async () => {
      // Most of an ADD's life is start-up (loading and connecting the
      // datastore client); the writes happen in the last few ms. So a third of
      // the kill points are spread over the whole run, and the rest over the
      // time after the allocator logs that it has read its state under the
      // host lock (the window where it writes).
      const OPEN = 'ipam: state read under the host lock';
      const debugConf = (node: string) => ({ ...netconf(node), log_level: 'DEBUG' });
      const probe = await runPlugin('ADD', debugConf('node-a'), `probe-${process.pid}`, {
        kill: { afterMs: 60_000, afterLine: OPEN },
      });
      expect(probe.code, probe.stdout + probe.stderr).toBe(0);
      expect(probe.lineAt, probe.stderr).toBeDefined();
      const span = probe.ms;
      const window = probe.ms - probe.lineAt!;
      expect((await runtimeCall('DEL', netconf('node-a'), `probe-${process.pid}`)).code).toBe(0);

      let killed = 0;
      let killedAfterWrites = 0;
      let killedBetweenHandleAndBlock = 0;
      const trials = Array.from({ length: 50 }, (_, i) => ({
        cid: `k${i}-${process.pid}`,
        node: NODES[i % 3]!,
        kill:
          i % 3 === 0
            ? { afterMs: Math.floor(Math.random() * span * 1.2) }
            : { afterMs: Math.random() * window * 2, afterLine: OPEN },
      }));
      await limited(trials, 4, async ({ cid, node, kill }) => {
        const at = `${kill.afterLine ? 'state read + ' : ''}${Math.round(kill.afterMs)}`;
        const r = await runPlugin('ADD', debugConf(node), cid, { kill });
        if (r.signal === 'SIGKILL') killed++;
        else expect(r.code, r.stdout + r.stderr).toBe(0);
        const mid = await audit(env.ds, `${NET}.${cid}`); // no address without its handle, even right after the kill
        if (r.signal === 'SIGKILL' && mid.handles.has(`${NET}.${cid}`)) {
          killedAfterWrites++;
          if ([...mid.byIP.values()].every((v) => v.handle !== `${NET}.${cid}`)) killedBetweenHandleAndBlock++;
        }
        const d = await runtimeCall('DEL', netconf(node), cid);
        expect(d.code, d.stdout + d.stderr).toBe(0);
        const { byIP, handles } = await audit(env.ds, `${NET}.${cid}`);
        expect(handles.has(`${NET}.${cid}`), `handle of ${cid} (killed at ${at} ms) survived its DEL`).toBe(false);
        expect([...byIP.values()].some((v) => v.handle === `${NET}.${cid}`)).toBe(false);
      });
      // Not an assertion on speed: just that the exercise really killed processes.
      expect(killed).toBeGreaterThan(0);
      console.log(
        `${backend.name}: ${killed}/50 ADDs killed (whole run ${span} ms, writing ${window} ms), ${killedAfterWrites}` +
          ` after writing their handle, ${killedBetweenHandleAndBlock} of those before the block write`,
      );
      // The exercise must reach the write window, or it proves nothing.
      expect(killedAfterWrites).toBeGreaterThan(0);
      const { byIP, handles } = await audit(env.ds);
      expect(byIP.size).toBe(0);
      expect(handles.size).toBe(0);
      const affs = await all(env.ds, 'BlockAffinity');
      // Every half-done claim was either finished or cleaned by a later ADD on that node.
      const blocks = new Map((await all(env.ds, 'IPAMBlock')).map((b) => [b.spec.cidr, b.spec.affinity]));
      for (const a of affs.filter((x) => x.spec.state === 'confirmed'))
        expect(blocks.get(a.spec.cidr)).toBe(`host:${a.spec.node}`);
    }, 900_000);

    it('CHECK passes for the addresses the handle holds and fails naming an address it does not hold', async () => {
      const cid = `chk-${process.pid}`;
      const conf = netconf('node-a');
      const add = await runtimeCall('ADD', conf, cid);
      expect(add.code, add.stdout).toBe(0);
      const check = await runtimeCall('CHECK', { ...conf, prevResult: add.json }, cid);
      expect(check.code, check.stdout).toBe(0);
      // An address of the pool that this handle does not hold (after the earlier
      // tests any address may be the one it got, .250 included).
      const mine = String(add.json?.ips?.[0]?.address ?? '').split('/')[0];
      const other = mine === '10.123.0.250' ? '10.123.0.251' : '10.123.0.250';
      const bad = await runtimeCall(
        'CHECK',
        { ...conf, prevResult: { ...add.json, ips: [{ address: `${other}/29` }] } },
        cid,
      );
      expect(bad.json?.code).toBe(ErrorCodes.CheckFailed);
      expect(bad.json?.msg).toContain(`prevResult address ${other}/29 is not allocated to handle`);
      expect((await runtimeCall('DEL', conf, cid)).code).toBe(0);
    }, 120_000);

    it('STATUS is ready with a pool to allocate from, and code 50 when the netconf names only a missing pool', async () => {
      const cid = `sts-${process.pid}`;
      const status = await runtimeCall('STATUS', { ...netconf('node-a'), cniVersion: '1.1.0' }, cid);
      expect(status.code, status.stdout + status.stderr).toBe(0);
      const noPool = await runtimeCall(
        'STATUS',
        { ...netconf('node-a', { ipv4_pools: ['absent'] }), cniVersion: '1.1.0' },
        cid,
      );
      expect(noPool.json?.code).toBe(ErrorCodes.PluginNotAvailable);
    }, 120_000);

    it('GC releases every handle of this network but the valid attachments; CHECK of a collected one then fails', async () => {
      const cid = `gc-${process.pid}`;
      const keep = `keep-${process.pid}`;
      const conf = netconf('node-a');
      const add = await runtimeCall('ADD', conf, cid);
      expect(add.code, add.stdout).toBe(0);
      expect((await runtimeCall('ADD', conf, keep)).code).toBe(0);
      const gc = await runtimeCall(
        'GC',
        { ...conf, cniVersion: '1.1.0', 'cni.dev/valid-attachments': [{ containerID: keep, ifname: 'eth0' }] },
        cid,
      );
      expect(gc.code, gc.stdout + gc.stderr).toBe(0);
      const { handles } = await audit(env.ds);
      expect([...handles.keys()]).toEqual([`${NET}.${keep}`]);
      const afterGc = await runtimeCall('CHECK', { ...conf, prevResult: add.json }, cid);
      expect(afterGc.json?.code).toBe(ErrorCodes.CheckFailed);
      expect((await runtimeCall('DEL', conf, keep)).code).toBe(0);
    }, 120_000);

    it('IP= in CNI_ARGS inside a pool: exactly that address; a second ADD asking for it fails naming the holder', async () => {
      const conf = netconf('node-b');
      const a = await runtimeCall('ADD', conf, `ip1-${process.pid}`, { cniArgs: 'IgnoreUnknown=1;IP=10.123.0.77' });
      expect(a.code, a.stdout).toBe(0);
      expect(a.json?.ips).toEqual([{ address: '10.123.0.77/29' }]);
      const taken = await runtimeCall('ADD', conf, `ip2-${process.pid}`, { cniArgs: 'IP=10.123.0.77' });
      expect(taken.json?.code).toBe(ErrorCodes.IpamFailure);
      expect(taken.json?.msg).toContain(`10.123.0.77 is already assigned (handle ${NET}.ip1-${process.pid}`);
      for (const c of ['ip1', 'ip2']) expect((await runtimeCall('DEL', conf, `${c}-${process.pid}`)).code).toBe(0);
      expect((await audit(env.ds)).handles.size).toBe(0);
    }, 120_000);

    it('IP= in CNI_ARGS outside every pool fails naming the address, and holds nothing', async () => {
      const conf = netconf('node-b');
      const outside = await runtimeCall('ADD', conf, `ip3-${process.pid}`, { cniArgs: 'IP=10.9.9.9' });
      expect(outside.json?.code).toBe(ErrorCodes.IpamFailure);
      expect(outside.json?.msg).toContain('10.9.9.9 is not in a configured pool');
      expect((await runtimeCall('DEL', conf, `ip3-${process.pid}`)).code).toBe(0);
      expect((await audit(env.ds)).handles.size).toBe(0);
    }, 120_000);

    it('pools: nodeSelector excludes a node; by name and by CIDR; a missing pool is an error naming it', async () => {
      // Take the catch-all pool out of the automatic choice (existing addresses would stay).
      const p = await env.ds.get('IPPool', 'p24');
      await env.ds.update({ ...p, spec: { ...p.spec, disabled: true } });
      await createPool(env.ds, 'zone-a', '10.124.0.0/24', { blockSize: 29, nodeSelector: "zone == 'a'" });
      await createPool(env.ds, 'named', '10.125.0.0/24', { blockSize: 29 });
      await env.ds.create({
        apiVersion: API_VERSION,
        kind: 'Node',
        metadata: { name: 'node-za', labels: { zone: 'a' } },
        spec: {},
      });
      await env.ds.create({
        apiVersion: API_VERSION,
        kind: 'Node',
        metadata: { name: 'node-zb', labels: { zone: 'b' } },
        spec: {},
      });
      const cids: Array<[string, Record<string, unknown>]> = [];
      const add = async (name: string, conf: Record<string, unknown>) => {
        const cid = `${name}-${process.pid}`;
        cids.push([cid, conf]);
        return runtimeCall('ADD', conf, cid);
      };

      const za = await add('za', netconf('node-za', { ipv4_pools: ['zone-a'] }));
      expect(za.json?.ips?.[0]?.address).toMatch(/^10\.124\.0\.\d+\/29$/);
      const zb = await add('zb', netconf('node-zb', { ipv4_pools: ['zone-a'] }));
      expect(zb.json?.code).toBe(ErrorCodes.IpamFailure);
      expect(zb.json?.msg).toContain("none of the requested pools selects node 'node-zb'");
      // automatic choice: node-zb gets the open pool, never zone-a
      const zbAuto = await add('zb-auto', netconf('node-zb'));
      expect(zbAuto.json?.ips?.[0]?.address).toMatch(/^10\.125\.0\.\d+\/29$/);

      const byName = await add('byname', netconf('node-c', { ipv4_pools: ['named'] }));
      expect(byName.json?.ips?.[0]?.address).toMatch(/^10\.125\.0\.\d+\/29$/);
      const byCidr = await add('bycidr', netconf('node-za', { ipv4_pools: ['10.124.0.0/24'] }));
      expect(byCidr.json?.ips?.[0]?.address).toMatch(/^10\.124\.0\.\d+\/29$/);

      const missing = await add('missing', netconf('node-c', { ipv4_pools: ['nope'] }));
      expect(missing.code).toBe(1);
      expect(missing.json?.code).toBe(ErrorCodes.InvalidNetworkConfig);
      expect(missing.json?.msg).toContain("pool 'nope' does not exist; existing pools: ");
      expect(missing.json?.msg).toContain('named (10.125.0.0/24)');

      for (const [cid, conf] of cids) expect((await runtimeCall('DEL', conf, cid)).code).toBe(0);
      expect((await audit(env.ds)).byIP.size).toBe(0);
    }, 120_000);
  });
}
