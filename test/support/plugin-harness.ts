// Shared set-up for the black-box plugin suites (test/integration/plugin-*.test.ts):
// a throwaway etcd with ClusterInformation and pools, netconfs, CNI calls of the
// binary under test, and readers of what the plugin left in the kernel and the
// datastore. The binary is a parameter (NETPLUGIN_TEST_BIN) so the same suites
// run against the per-exec bundle and, later, the shim + agent path.
//
// All plugin-* files share one throwaway "host" namespace (scripts/in-netns) and
// may run in parallel, so every file uses its own pool CIDRs (10.77.<n>.0/24,
// fd77:<n>::/116) and its own host veth prefix, and its "nothing left"
// assertions are scoped to those.
import { execFileSync, spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { chmodSync, copyFileSync, existsSync, mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { afterAll, afterEach, beforeAll, expect } from 'vitest';
import { DIST, ROOT, assertThrowawayHostNetns, runCni, type CniOutcome } from './cni.js';
import { removeAllNetns } from './netns.js';
import { startEtcd, type EtcdServer } from './etcd.js';
import { openDatastore } from '../../src/datastore/index.js';
import { API_VERSION, type Resource } from '../../src/model/resources.js';
import type { Datastore } from '../../src/datastore/types.js';
import { containsIP, parseCidr, parseIP } from '../../src/net/cidr.js';

export const BIN = process.env.NETPLUGIN_TEST_BIN ?? join(DIST, 'netplugin.mjs');
/**
 * Set (by test/support/agent-setup.ts) when the suites run through the
 * shim and a resident agent: every invocation gets it as NETPLUGIN_AGENT_SOCKET.
 */
export const AGENT_SOCKET = process.env.NETPLUGIN_AGENT_SOCKET;
export const PORTMAP = '/usr/lib/cni/portmap';
export const HOST_LOCAL = '/usr/lib/cni/host-local';
export const NODE = 'node1';
export const NET_NAME = 'k8s-pod-network';
export const HOST_MAC = 'ee:ee:ee:ee:ee:ee';

/** Builds the bundles when they are missing (npm test builds first; a lone vitest run may not have). */
export function ensureBuilt(): void {
  if (process.env.NETPLUGIN_TEST_BIN && !AGENT_SOCKET) return;
  if (['netplugin.mjs', 'netplugin-ipam.mjs', 'netplugin-node.mjs'].every((f) => existsSync(join(DIST, f)))) return;
  const r = spawnSync(process.execPath, [join(ROOT, 'scripts/build.mjs')], { cwd: ROOT, encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`build failed: ${r.stderr}`);
}

export interface PoolDef {
  name: string;
  cidr: string;
  blockSize: number;
}

export interface Cluster {
  etcd: EtcdServer;
  ds: Datastore;
  tmp: string;
  lockFile: string;
  pools: PoolDef[];
  close(): Promise<void>;
}

export function poolResource(p: PoolDef): Resource<'IPPool'> {
  return {
    apiVersion: API_VERSION,
    kind: 'IPPool',
    metadata: { name: p.name },
    spec: { cidr: p.cidr, blockSize: p.blockSize, natOutgoing: true },
  };
}

export function clusterInfo(ready: boolean): Resource<'ClusterInformation'> {
  return {
    apiVersion: API_VERSION,
    kind: 'ClusterInformation',
    metadata: { name: 'default' },
    spec: { datastoreReady: ready, clusterType: 'test' },
  };
}

/** A throwaway etcd holding a ready ClusterInformation and the given pools. */
/**
 * The usual life of a plugin test file: check the throwaway host namespace and
 * the build, start a cluster with these pools, DEL whatever a test left and
 * drop its namespaces after each test, stop everything at the end.
 */
export function useCluster(
  pools: PoolDef[],
  set: (c: Cluster) => void,
  extra: { setup?: (c: Cluster) => Promise<void>; teardown?: () => Promise<void> } = {},
): void {
  let cluster: Cluster | undefined;
  beforeAll(async () => {
    assertThrowawayHostNetns();
    ensureBuilt();
    cluster = await startCluster(pools);
    set(cluster);
    await extra.setup?.(cluster);
  });
  afterEach(async () => {
    await cleanupAttachments();
    removeAllNetns();
  });
  afterAll(async () => {
    removeAllNetns();
    await extra.teardown?.();
    await cluster?.close();
  });
}

export async function startCluster(
  pools: PoolDef[],
  opts: { clusterInfo?: 'ready' | 'not-ready' | 'missing' } = {},
): Promise<Cluster> {
  const etcd = await startEtcd();
  const tmp = mkdtempSync(join(tmpdir(), `plugin-test-${process.pid}-`));
  let ds: Datastore | undefined;
  try {
    ds = await openDatastore({ datastore_type: 'etcdv3', etcd_endpoints: etcd.endpoint });
    const ci = opts.clusterInfo ?? 'ready';
    if (ci !== 'missing') await ds.create(clusterInfo(ci === 'ready'));
    for (const p of pools) await ds.create(poolResource(p));
  } catch (e) {
    await ds?.close().catch(() => undefined);
    await etcd.stop();
    rmSync(tmp, { recursive: true, force: true });
    throw e;
  }
  const store = ds;
  return {
    etcd,
    ds: store,
    tmp,
    lockFile: join(tmp, 'ipam.lock'),
    pools,
    async close() {
      await store.close().catch(() => undefined);
      await etcd.stop();
      rmSync(tmp, { recursive: true, force: true });
    },
  };
}

export function netconf(c: Cluster, cniVersion: string, extra: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    cniVersion,
    name: NET_NAME,
    type: 'netplugin',
    nodename: NODE,
    etcd_endpoints: c.etcd.endpoint,
    ipam: { type: 'netplugin-ipam' },
    ipam_lock_file: c.lockFile,
    log_level: 'debug',
    ...extra,
  };
}

export interface Call {
  containerId: string;
  netns?: string;
  ifname?: string;
  args?: string;
  path?: string;
  env?: Record<string, string>;
}

export function k8sArgs(namespace: string, pod: string): string {
  return `IgnoreUnknown=1;K8S_POD_NAMESPACE=${namespace};K8S_POD_NAME=${pod}`;
}

/** ADDs not yet undone by a DEL, so afterEach can clean up after a failed test. */
const attached = new Map<string, { conf: Record<string, unknown>; call: Partial<Call>; bin: string }>();

export async function cni(
  command: 'ADD' | 'DEL' | 'CHECK' | 'STATUS' | 'GC',
  conf: Record<string, unknown>,
  call: Partial<Call> = {},
  bin = BIN,
): Promise<CniOutcome> {
  const key = JSON.stringify([conf['name'], call.containerId, call.ifname ?? 'eth0']);
  if (command === 'ADD') attached.set(key, { conf, call, bin });
  const r = await runCni({
    bin,
    command,
    conf,
    ...(call.containerId !== undefined ? { containerId: call.containerId } : {}),
    ...(call.netns !== undefined ? { netns: call.netns } : {}),
    ...(call.ifname !== undefined ? { ifname: call.ifname } : {}),
    ...(call.args !== undefined ? { args: call.args } : {}),
    ...(call.path !== undefined ? { path: call.path } : {}),
    ...withAgentEnv(call.env),
  });
  if (command === 'DEL' && r.code === 0) attached.delete(key);
  return r;
}

/** The call's own env plus, on the agent path, the agent's socket (a test's own setting wins). */
function withAgentEnv(env: Record<string, string> | undefined): { env?: Record<string, string> } {
  if (!AGENT_SOCKET) return env ? { env } : {};
  return { env: { NETPLUGIN_AGENT_SOCKET: AGENT_SOCKET, ...(env ?? {}) } };
}

/**
 * DELs every attachment a test ADDed and did not DEL (a failed test), so the
 * next test starts clean. Run it in afterEach before the pod namespaces go.
 */
export async function cleanupAttachments(): Promise<void> {
  const all = [...attached.values()];
  attached.clear();
  for (const a of all) {
    const { prevResult: _drop, ...conf } = a.conf;
    await runCni({
      bin: a.bin,
      command: 'DEL',
      conf,
      ...(a.call.containerId ? { containerId: a.call.containerId } : {}),
      ...(a.call.netns ? { netns: a.call.netns } : {}),
      ifname: a.call.ifname ?? 'eth0',
      ...(a.call.args ? { args: a.call.args } : {}),
      ...(a.call.path ? { path: a.call.path } : {}),
      ...withAgentEnv(a.call.env),
    }).catch(() => undefined);
  }
}

/** Describes a failed call for an assertion message: the error JSON and the plugin's stderr. */
export function why(r: CniOutcome): string {
  return `exit ${r.code}${r.signal ? ` (${r.signal})` : ''}\nstdout: ${r.stdout}\nstderr: ${r.stderr.slice(-4000)}`;
}

export function expectOk(r: CniOutcome): void {
  expect(r.code, why(r)).toBe(0);
}

/** A CNI error: exit code 1, one error JSON on stdout with the code, never a stack trace. */
// eslint-disable-next-line @typescript-eslint/no-explicit-any
export function expectCniError(r: CniOutcome, code?: number): { code: number; msg: string; details?: string } {
  expect(r.code, why(r)).toBe(1);
  expect(r.json, why(r)).toBeTypeOf('object');
  if (code !== undefined) expect(r.json.code, why(r)).toBe(code);
  expect(typeof r.json.msg).toBe('string');
  expect(r.stdout).not.toMatch(/\n\s+at /);
  // Reviewing the wording of every error the suites provoke: PLUGIN_TEST_SHOW_ERRORS=1.
  if (process.env.PLUGIN_TEST_SHOW_ERRORS)
    process.stderr.write(`[cni error ${r.json.code}] ${r.json.msg}${r.json.details ? ` (${r.json.details})` : ''}\n`);
  return r.json;
}

// ---- kernel state (ip -j) ----

// eslint-disable-next-line @typescript-eslint/no-explicit-any
export function ipj(args: string[], netns?: string): any[] {
  const out = execFileSync('ip', [...(netns ? ['-n', netns] : []), '-j', ...args], { encoding: 'utf8' });
  return out.trim() ? JSON.parse(out) : [];
}

export interface LinkInfo {
  ifname: string;
  address: string;
  mtu: number;
  num_rx_queues?: number;
  num_tx_queues?: number;
  operstate: string;
  flags: string[];
  link_netnsid?: number;
  linkinfo?: { info_kind: string };
}

export function links(netns?: string): LinkInfo[] {
  return ipj(['-d', 'link', 'show'], netns) as LinkInfo[];
}

export function link(name: string, netns?: string): LinkInfo | undefined {
  return links(netns).find((l) => l.ifname === name);
}

/**
 * A container-side link after DEL: the agent's DEL frees the host veth's name
 * and every route at once but deletes the pair in a batch a few ms later
 * (src/dataplane/trash.ts), so its container end may outlive DEL briefly.
 * Waits (bounded, 20 s) for it to go; returns it if it is still there.
 */
export async function linkAfterDel(name: string, netns: string): Promise<LinkInfo | undefined> {
  const deadline = Date.now() + 20_000;
  for (;;) {
    const l = link(name, netns);
    if (!l || Date.now() > deadline) return l;
    await new Promise((r) => setTimeout(r, 25));
  }
}

export function hostLinksWithPrefix(prefix: string): string[] {
  return links()
    .map((l) => l.ifname)
    .filter((n) => n.startsWith(prefix));
}

export interface RouteInfo {
  dst: string;
  gateway?: string;
  dev?: string;
  scope?: string;
  protocol?: string;
  flags?: string[];
}

export function routes(family: 4 | 6, netns?: string): RouteInfo[] {
  return ipj([family === 6 ? '-6' : '-4', 'route', 'show'], netns) as RouteInfo[];
}

/** Addresses (without prefix) on one interface. */
export function addrs(
  ifname: string,
  netns?: string,
): Array<{ local: string; prefixlen: number; family: string; scope: string }> {
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  const l = ipj(['addr', 'show', 'dev', ifname], netns)[0] as any;
  return l?.addr_info ?? [];
}

export function sysctl(key: string, netns?: string): string {
  const path = `/proc/sys/${key.replace(/\./g, '/')}`;
  return (
    netns
      ? execFileSync('ip', ['netns', 'exec', netns, 'cat', path], { encoding: 'utf8' })
      : execFileSync('cat', [path], { encoding: 'utf8' })
  ).trim();
}

function inAnyPool(ip: string, pools: PoolDef[]): boolean {
  const parsed = parseIP(ip);
  return pools.some((p) => {
    const c = parseCidr(p.cidr);
    return c.family === parsed.family && containsIP(c, parsed);
  });
}

/** Host routes whose destination lies in one of the pools (the per-pod /32 and /128 routes). */
export function hostPoolRoutes(pools: PoolDef[]): string[] {
  const out: string[] = [];
  for (const f of [4, 6] as const) {
    for (const r of routes(f)) {
      const dst = r.dst.split('/')[0]!;
      if (dst !== 'default' && inAnyPool(dst, pools)) out.push(`${r.dst} dev ${r.dev}`);
    }
  }
  return out;
}

// ---- datastore state ----

export interface IpamState {
  handles: string[];
  /** Allocated addresses: `<block cidr>#<ordinal> <handle>`. */
  allocations: string[];
}

export async function ipamState(ds: Datastore): Promise<IpamState> {
  const handles = (await ds.list('IPAMHandle')).items.map((h) => h.spec.handleID ?? h.metadata.name);
  const allocations: string[] = [];
  for (const b of (await ds.list('IPAMBlock')).items) {
    b.spec.allocations.forEach((a, i) => {
      if (a !== null) allocations.push(`${b.spec.cidr}#${i} ${b.spec.attributes[a]?.handle_id ?? 'null'}`);
    });
  }
  return { handles: handles.sort(), allocations };
}

export async function wepNames(ds: Datastore): Promise<string[]> {
  return (await ds.list('WorkloadEndpoint')).items
    .map((w) => `${w.metadata.namespace ?? ''}/${w.metadata.name}`)
    .sort();
}

/**
 * Asserts the plugin left nothing of this file's pods behind: no host link with
 * the prefix, no host route into the pools, no IPAM handle or allocation, no
 * workload endpoint.
 */
export async function expectNothingLeft(c: Cluster, vethPrefix: string): Promise<void> {
  expect(hostLinksWithPrefix(vethPrefix), 'host veths left behind').toEqual([]);
  expect(hostPoolRoutes(c.pools), 'host routes left behind').toEqual([]);
  const st = await ipamState(c.ds);
  expect(st.handles, 'IPAM handles left behind').toEqual([]);
  expect(st.allocations, 'IPAM allocations left behind').toEqual([]);
  expect(await wepNames(c.ds), 'workload endpoints left behind').toEqual([]);
}

/** Runs fn over items with at most `limit` running at once (2 cores: many node processes at once only thrash). */
export async function mapLimit<T, R>(items: T[], limit: number, fn: (t: T, i: number) => Promise<R>): Promise<R[]> {
  const out: R[] = new Array(items.length);
  let next = 0;
  const worker = async () => {
    for (;;) {
      const i = next++;
      if (i >= items.length) return;
      out[i] = await fn(items[i]!, i);
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
  return out;
}

// ---- the shim + agent path ----

export const SHIM_PREBUILT = join(ROOT, 'prebuilds/linux-x64/netplugin-shim');
export const SHIM_BUILT = join(ROOT, 'build/shim/netplugin-shim');

/**
 * Installs the native shim as `<dir>/<name>` (the plugin name is its basename)
 * with no fallback file beside it: a request the agent does not take fails
 * with code 5 instead of silently running per-exec, so a suite run through the
 * shim really exercises the agent.
 */
export function installShim(dir: string, name = 'netplugin'): string {
  const src = existsSync(SHIM_BUILT) ? SHIM_BUILT : SHIM_PREBUILT;
  if (!existsSync(src))
    throw new Error(`the native shim is missing (${SHIM_BUILT} and ${SHIM_PREBUILT}); run npm run build:shim`);
  mkdirSync(dir, { recursive: true });
  const dst = join(dir, name);
  copyFileSync(src, dst);
  chmodSync(dst, 0o755);
  return dst;
}

export interface Agent {
  socket: string;
  proc: ChildProcess;
  /** Everything the agent wrote to stderr so far (its log). */
  log(): string;
  /** SIGTERM and wait (it finishes accepted requests first). */
  stop(): Promise<void>;
  /** SIGKILL and wait: no cleanup of any kind, as an OOM kill or node crash. */
  kill(): Promise<void>;
}

function waitConnectable(path: string, proc: ChildProcess, log: () => string, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  return new Promise((resolve, reject) => {
    const attempt = () => {
      if (proc.exitCode !== null || proc.signalCode !== null) {
        reject(
          new Error(`the agent exited (${proc.exitCode ?? proc.signalCode}) before listening on ${path}:\n${log()}`),
        );
        return;
      }
      const c = connect(path);
      c.once('connect', () => {
        c.destroy();
        resolve();
      });
      c.once('error', () => {
        c.destroy();
        if (Date.now() > deadline)
          reject(new Error(`the agent did not listen on ${path} within ${timeoutMs} ms:\n${log()}`));
        else setTimeout(attempt, 25);
      });
    };
    attempt();
  });
}

/**
 * Starts dist/netplugin-node.mjs on `socket` in this process's network
 * namespace (the throwaway host one), with a clean environment, and waits
 * until it accepts connections. `prefix` must exec the agent (nsenter does),
 * so that its signals reach the agent.
 */
export async function startAgent(
  socket: string,
  extraArgs: string[] = [],
  /** prefix: a command-line prefix (nsenter ...) that execs the agent. */
  opts: { env?: Record<string, string>; prefix?: string[] } = {},
): Promise<Agent> {
  const agent = [join(DIST, 'netplugin-node.mjs'), '--socket', socket, '--log-level', 'INFO'];
  agent.push('--health-addr', '127.0.0.1:0');
  const argv = [...(opts.prefix ?? []), process.execPath, ...agent, ...extraArgs];
  const proc = spawn(argv[0]!, argv.slice(1), {
    env: { PATH: `${dirname(process.execPath)}:/usr/sbin:/usr/bin:/sbin:/bin`, ...(opts.env ?? {}) },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let stderr = '';
  proc.stderr!.on('data', (d: Buffer) => {
    stderr += d;
    if (stderr.length > 1 << 20) stderr = stderr.slice(-(1 << 19));
  });
  const exited = new Promise<void>((r) => proc.once('exit', () => r()));
  const gone = () => proc.exitCode !== null || proc.signalCode !== null;
  try {
    await waitConnectable(socket, proc, () => stderr, 30_000);
  } catch (e) {
    if (!gone()) proc.kill('SIGKILL');
    throw e;
  }
  return {
    socket,
    proc,
    log: () => stderr,
    async stop() {
      if (gone()) return;
      proc.kill('SIGTERM');
      const t = setTimeout(() => proc.kill('SIGKILL'), 35_000);
      await exited;
      clearTimeout(t);
    },
    async kill() {
      if (gone()) return;
      proc.kill('SIGKILL');
      await exited;
    },
  };
}
