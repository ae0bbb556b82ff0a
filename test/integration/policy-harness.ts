// Shared set-up of the network-policy suites: a throwaway etcd, the fake
// Kubernetes API server, the built node agent (dist/netplugin-node.mjs with
// --config, policy.type k8s) and pods made by the plugin in their own network
// namespaces, each serving TCP and UDP on ports 80 and 81
// (test/fixtures/policy-pod.py). Reachability is probed with fresh
// connections and compared as a whole matrix with the expected one.
//
// On the etcd datastore the objects kube-controllers writes (profiles kns.*/
// ksa.*, knp.default.* policies, endpoint labels) are written here with the
// same pure conversions it uses (src/model/profiles.ts, k8s-networkpolicy.ts).
import { spawn, execFile, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { expect } from 'vitest';
import type { Resource } from '../../src/datastore/types.js';
import { DatastoreError } from '../../src/errors.js';
import { convertK8sNetworkPolicy, k8sPolicyName, type KubeNetworkPolicy } from '../../src/model/k8s-networkpolicy.js';
import { namespaceToProfile, serviceAccountToProfile } from '../../src/model/profiles.js';
import { ROOT } from '../fixtures/cni.js';
import { createNetns } from '../fixtures/netns.js';
import { putNamespace, putPod, startApi, k8sNetconf, type Api } from './k8s-harness.js';
import { cni, cleanupAttachments, ensureBuilt, expectOk, k8sArgs, startAgent, startCluster, why, type Agent, type Cluster, type PoolDef } from './plugin-harness.js';

const POD_SCRIPT = join(ROOT, 'test/fixtures/policy-pod.py');
export const NAMESPACES = ['x', 'y', 'z'] as const;
export const POD_NAMES = ['a', 'b', 'c'] as const;
export const SERVE_PORTS = [
  { name: 'serve-80-tcp', containerPort: 80, protocol: 'TCP' },
  { name: 'serve-81-tcp', containerPort: 81, protocol: 'TCP' },
  { name: 'serve-80-udp', containerPort: 80, protocol: 'UDP' },
  { name: 'serve-81-udp', containerPort: 81, protocol: 'UDP' },
];

export interface Pod {
  ns: string;
  name: string;
  id: string; // "x/a"
  netns: string;
  netnsPath: string;
  ip: string;
  containerId: string;
  server?: ChildProcess;
  addWaitedMs?: number;
}

export interface PolicyEnv {
  c: Cluster;
  api: Api;
  agent: Agent;
  conf: Record<string, unknown>;
  confPath: string;
  statusDir: string;
  tmp: string;
  pods: Pod[];
  close(): Promise<void>;
}

export async function startPolicyEnv(pool: PoolDef, prefix: string, opts: { timeoutSeconds?: number } = {}): Promise<PolicyEnv> {
  ensureBuilt();
  const c = await startCluster([pool]);
  const api = await startApi();
  const tmp = mkdtempSync(join(tmpdir(), `policy-${prefix}-${process.pid}-`));
  const statusDir = join(tmp, 'status');
  const conf = k8sNetconf(c, api, prefix, { endpoint_status_dir: statusDir, policy_setup_timeout_seconds: opts.timeoutSeconds ?? 20 });
  const confPath = join(tmp, '10-netplugin.conflist');
  writeFileSync(confPath, JSON.stringify({ cniVersion: '1.0.0', name: conf['name'], plugins: [conf] }));
  for (const ns of NAMESPACES) {
    putNamespace(api, ns, {}, { ns });
    await putObject(c, namespaceToProfile({ metadata: { name: ns, labels: { ns } } }));
    await putObject(c, serviceAccountToProfile({ metadata: { name: 'default', namespace: ns } }));
  }
  const agent = await startPolicyAgent(tmp, confPath);
  const env: PolicyEnv = {
    c,
    api,
    agent,
    conf,
    confPath,
    statusDir,
    tmp,
    pods: [],
    async close() {
      await cleanupAttachments();
      for (const p of env.pods) p.server?.kill('SIGKILL');
      await env.agent.stop();
      await api.server.stop();
      await c.close();
      rmSync(tmp, { recursive: true, force: true });
    },
  };
  return env;
}

export function startPolicyAgent(tmp: string, confPath: string): Promise<Agent> {
  return startAgent(join(tmp, `cni-${Date.now()}.sock`), ['--config', confPath, '--log-level', 'DEBUG']);
}

/** Creates (or replaces) a datastore object. */
export async function putObject<K extends Resource['kind']>(c: Cluster, obj: Resource<K>): Promise<void> {
  try {
    const cur = await c.ds.get(obj.kind, obj.metadata.name, obj.metadata.namespace);
    await c.ds.update({ ...obj, metadata: { ...obj.metadata, resourceVersion: cur.metadata.resourceVersion } } as Resource<K>);
  } catch (e) {
    if (!(e instanceof DatastoreError) || e.kind !== 'NotFound') throw e;
    await c.ds.create(obj);
  }
}

/** ADDs one pod through the plugin (its netns, labels, named container ports) and starts its servers. */
export async function addPod(env: PolicyEnv, ns: string, name: string, labels: Record<string, string> = { pod: name }, serve = true): Promise<Pod> {
  putPod(env.api, ns, name, { labels, containers: [{ name: 'main', ports: SERVE_PORTS }] });
  const n = createNetns(`pol${name}`);
  const containerId = `${ns}-${name}-${process.pid}-${Date.now()}`;
  const t0 = Date.now();
  const r = await cni('ADD', env.conf, { containerId, netns: n.path, args: k8sArgs(ns, name) });
  expectOk(r);
  const ip = (JSON.parse(r.stdout).ips[0].address as string).split('/')[0]!;
  const pod: Pod = { ns, name, id: `${ns}/${name}`, netns: n.name, netnsPath: n.path, ip, containerId, addWaitedMs: Date.now() - t0 };
  env.pods.push(pod);
  if (serve) await startServer(pod);
  return pod;
}

export async function delPod(env: PolicyEnv, pod: Pod): Promise<void> {
  pod.server?.kill('SIGKILL');
  const r = await cni('DEL', env.conf, { containerId: pod.containerId, netns: pod.netnsPath, args: k8sArgs(pod.ns, pod.name) });
  expect(r.code, why(r)).toBe(0);
  env.pods.splice(env.pods.indexOf(pod), 1);
}

function startServer(pod: Pod): Promise<void> {
  const proc = spawn('ip', ['netns', 'exec', pod.netns, 'python3', POD_SCRIPT, 'serve', '80', '81'], { stdio: ['ignore', 'pipe', 'inherit'] });
  pod.server = proc;
  return new Promise((resolve, reject) => {
    const rl = createInterface({ input: proc.stdout! });
    rl.once('line', (l) => (l === 'ready' ? resolve() : reject(new Error(`pod server ${pod.id}: ${l}`))));
    proc.once('exit', (code) => reject(new Error(`pod server ${pod.id} exited ${code}`)));
  });
}

export async function addMatrix(env: PolicyEnv): Promise<void> {
  for (const ns of NAMESPACES) for (const p of POD_NAMES) await addPod(env, ns, p);
}

export function pod(env: PolicyEnv, id: string): Pod {
  const p = env.pods.find((x) => x.id === id);
  if (!p) throw new Error(`no pod ${id}`);
  return p;
}

/** One probe per (from, to) with a fresh socket; `timeout` seconds for a dropped one. */
export async function probeFrom(from: Pod, targets: Array<[string, number, 'tcp' | 'udp']>, timeout = 1.5): Promise<boolean[]> {
  const out = await new Promise<string>((resolve, reject) =>
    execFile('ip', ['netns', 'exec', from.netns, 'python3', POD_SCRIPT, 'probe', String(timeout), JSON.stringify(targets)], { timeout: 60_000 }, (err, stdout) => (err ? reject(err) : resolve(stdout))),
  );
  return JSON.parse(out) as boolean[];
}

export type Expect = (from: Pod, to: Pod) => boolean;

/** The matrix as text: one row per source, `.` reachable, `X` blocked. */
export function grid(pods: Pod[], cell: (from: Pod, to: Pod) => boolean): string {
  const lines = [`${'     '}${pods.map((p) => p.id.padEnd(5)).join('')}`];
  for (const f of pods) lines.push(`${f.id.padEnd(5)}${pods.map((t) => (cell(f, t) ? '.' : 'X').padEnd(5)).join('')}`);
  return lines.join('\n');
}

export async function probeMatrix(pods: Pod[], port: number, proto: 'tcp' | 'udp'): Promise<Map<string, boolean>> {
  const res = new Map<string, boolean>();
  await Promise.all(
    pods.map(async (f) => {
      const r = await probeFrom(f, pods.map((t) => [t.ip, port, proto]));
      pods.forEach((t, i) => res.set(`${f.id}>${t.id}`, r[i]!));
    }),
  );
  return res;
}

/**
 * Probes the full matrix until it equals the expected one (the agent applies
 * changes asynchronously) or `deadlineMs` passes; then asserts it. A pod
 * reaching itself never leaves its netns, so it is always reachable.
 */
export async function expectReachability(env: PolicyEnv, port: number, proto: 'tcp' | 'udp', expected: Expect, deadlineMs = 20_000): Promise<void> {
  const pods = env.pods;
  const want = grid(pods, (f, t) => f === t || expected(f, t));
  const end = Date.now() + deadlineMs;
  let got = '';
  for (;;) {
    const m = await probeMatrix(pods, port, proto);
    got = grid(pods, (f, t) => m.get(`${f.id}>${t.id}`)!);
    if (got === want || Date.now() > end) break;
    await new Promise((r) => setTimeout(r, 300));
  }
  expect(`${proto}/${port}\n${got}`).toBe(`${proto}/${port}\n${want}`);
}

// ---- Kubernetes NetworkPolicy, as kube-controllers mirrors it on etcd ----

export async function applyK8sPolicy(env: PolicyEnv, np: KubeNetworkPolicy): Promise<void> {
  await putObject(env.c, convertK8sNetworkPolicy(np));
}

export async function deleteK8sPolicy(env: PolicyEnv, ns: string, name: string): Promise<void> {
  await env.c.ds.delete('NetworkPolicy', k8sPolicyName(name), { namespace: ns });
}

export async function deleteAllPolicies(env: PolicyEnv): Promise<void> {
  for (const p of (await env.c.ds.list('NetworkPolicy')).items) await env.c.ds.delete('NetworkPolicy', p.metadata.name, { namespace: p.metadata.namespace! });
  for (const p of (await env.c.ds.list('GlobalNetworkPolicy')).items) await env.c.ds.delete('GlobalNetworkPolicy', p.metadata.name);
}

/** A pod label change as kube-controllers copies it onto the endpoint (our netplugin.org/* labels kept). */
export async function setPodLabels(env: PolicyEnv, p: Pod, labels: Record<string, string>): Promise<void> {
  const weps = (await env.c.ds.list('WorkloadEndpoint', { namespace: p.ns })).items.filter((w) => w.spec.pod === p.name);
  expect(weps.length).toBe(1);
  const w = weps[0]!;
  const own = Object.fromEntries(Object.entries(w.metadata.labels ?? {}).filter(([k]) => k.startsWith('netplugin.org/')));
  await env.c.ds.update({ ...w, metadata: { ...w.metadata, labels: { ...labels, ...own } } });
}

/** A namespace label change as kube-controllers writes it onto kns.<ns>. */
export async function setNamespaceLabels(env: PolicyEnv, ns: string, labels: Record<string, string>): Promise<void> {
  putNamespace(env.api, ns, {}, labels);
  await putObject(env.c, namespaceToProfile({ metadata: { name: ns, labels } }));
}

export function nftList(): Promise<string> {
  return new Promise((resolve, reject) => execFile('nft', ['list', 'ruleset'], (e, out) => (e ? reject(e) : resolve(out))));
}

/** Probes `targets` from `from` over and over for `seconds`; resolves (once started) to a promise of the indexes ever reached. */
export async function watchProbe(from: Pod, targets: Array<[string, number, 'tcp' | 'udp']>, seconds: number, timeout = 0.5): Promise<Promise<number[]>> {
  const proc = spawn('ip', ['netns', 'exec', from.netns, 'python3', POD_SCRIPT, 'watch', String(seconds), String(timeout), JSON.stringify(targets)], { stdio: ['ignore', 'pipe', 'inherit'] });
  const rl = createInterface({ input: proc.stdout! });
  const lines: string[] = [];
  const done = new Promise<number[]>((resolve, reject) => {
    proc.once('exit', (code) => (code === 0 && lines[1] ? resolve(JSON.parse(lines[1]) as number[]) : reject(new Error(`watch probe exited ${code}: ${lines.join('\n')}`))));
  });
  await new Promise<void>((resolve) => rl.on('line', (l) => (lines.push(l), lines.length === 1 && resolve())));
  return done;
}

/** Starts a pod's servers in a fresh netns before its ADD (so a probe can hit it from the moment its veth exists). */
export async function prepareNetns(name: string): Promise<Pod> {
  const n = createNetns(`pol${name}`);
  const p: Pod = { ns: '', name, id: '', netns: n.name, netnsPath: n.path, ip: '', containerId: '' };
  await startServer(p);
  return p;
}

/** ADDs a pod into a netns prepared by prepareNetns. */
export async function addPreparedPod(env: PolicyEnv, p: Pod, ns: string, labels: Record<string, string>, conf = env.conf): Promise<{ code: number; ms: number }> {
  putPod(env.api, ns, p.name, { labels, containers: [{ name: 'main', ports: SERVE_PORTS }] });
  p.ns = ns;
  p.id = `${ns}/${p.name}`;
  p.containerId = `${ns}-${p.name}-${process.pid}-${Date.now()}`;
  const t0 = Date.now();
  const r = await cni('ADD', conf, { containerId: p.containerId, netns: p.netnsPath, args: k8sArgs(ns, p.name) });
  expect(r.code, why(r)).toBe(0);
  p.ip = (JSON.parse(r.stdout).ips[0].address as string).split('/')[0]!;
  p.addWaitedMs = Date.now() - t0;
  env.pods.push(p);
  return { code: r.code ?? -1, ms: p.addWaitedMs };
}
