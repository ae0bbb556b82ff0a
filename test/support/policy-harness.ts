// Shared set-up of the network-policy suites: a throwaway etcd, the fake
// Kubernetes API server, the built node agent (dist/netplugin-node.mjs with
// --config, policy.type k8s) and pods made by the plugin in their own network
// namespaces, each serving TCP and UDP on ports 80 and 81
// (test/support/policy-pod.py). Reachability is probed with fresh
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
import type { Resource } from '../../src/model/resources.js';
import { DatastoreError } from '../../src/errors.js';
import { convertK8sNetworkPolicy, k8sPolicyName, type KubeNetworkPolicy } from '../../src/model/k8s-networkpolicy.js';
import { namespaceToProfile, serviceAccountToProfile } from '../../src/model/profiles.js';
import { ROOT } from './cni.js';
import { createNetns } from './netns.js';
import { nftRun } from '../../src/native/nft.js';
import { endpointFromWep, endpointViews, evaluate, type PolicyInput } from '../../src/model/policy-eval.js';
import { putPod, startApi, k8sNetconf, type Api } from './k8s-harness.js';
import { openDatastore } from '../../src/datastore/index.js';
import type { Datastore } from '../../src/datastore/types.js';
import { createKubeClient, type KubeClient } from '../../src/k8s/client.js';
import {
  NET_NAME,
  NODE,
  clusterInfo,
  cni,
  cleanupAttachments,
  ensureBuilt,
  expectOk,
  k8sArgs,
  poolResource,
  startAgent,
  startCluster,
  why,
  type Agent,
  type Cluster,
  type PoolDef,
} from './plugin-harness.js';

const POD_SCRIPT = join(ROOT, 'test/support/policy-pod.py');
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
  /** Its IPv6 address (environments with an IPv6 pool). */
  ip6?: string;
  containerId: string;
  server?: ChildProcess;
  addWaitedMs?: number;
  /** The ADD's stderr (its log). */
  addLog?: string;
}

export type DatastoreMode = 'etcdv3' | 'kubernetes';

export interface PolicyEnv {
  mode: DatastoreMode;
  /** The store the agent reads (etcd, or the API server's custom resources and derived objects). */
  ds: Datastore;
  /** Etcd mode only. */
  c?: Cluster;
  api: Api;
  kube: KubeClient;
  /**
   * This file's agent owns `inet <table>`: vitest runs the suites side by side in
   * one host namespace, as several nodes would never share one, so each agent
   * gets its own table (NETPLUGIN_POLICY_TABLE).
   */
  table: string;
  agent: Agent;
  conf: Record<string, unknown>;
  confPath: string;
  statusDir: string;
  tmp: string;
  pods: Pod[];
  close(): Promise<void>;
}

export async function startPolicyEnv(
  pool: PoolDef,
  prefix: string,
  opts: {
    timeoutSeconds?: number;
    mode?: DatastoreMode;
    pool6?: PoolDef /** More agent flags (flow logs). */;
    agentArgs?: string[];
  } = {},
): Promise<PolicyEnv> {
  ensureBuilt();
  const mode = opts.mode ?? 'etcdv3';
  const api = await startApi();
  const kube = await createKubeClient({ kubeconfig: api.kubeconfig });
  const tmp = mkdtempSync(join(tmpdir(), `policy-${prefix}-${process.pid}-`));
  const statusDir = join(tmp, 'status');
  let c: Cluster | undefined;
  let ds: Datastore;
  let conf: Record<string, unknown>;
  const common = { endpoint_status_dir: statusDir, policy_setup_timeout_seconds: opts.timeoutSeconds ?? 20 };
  if (mode === 'etcdv3') {
    c = await startCluster(opts.pool6 ? [pool, opts.pool6] : [pool]);
    ds = c.ds;
    conf = k8sNetconf(c, api, prefix, {
      ...common,
      ...(opts.pool6 ? { ipam: { type: 'netplugin-ipam', assign_ipv6: 'true' } } : {}),
    });
  } else {
    ds = await openDatastore({ datastore_type: 'kubernetes', kubernetes: { kubeconfig: api.kubeconfig } });
    await ds.create(clusterInfo(true));
    await ds.create(poolResource(pool));
    conf = {
      cniVersion: '1.0.0',
      name: NET_NAME,
      type: 'netplugin',
      nodename: NODE,
      datastore_type: 'kubernetes',
      kubernetes: { kubeconfig: api.kubeconfig },
      ipam: { type: 'netplugin-ipam' },
      ipam_lock_file: join(tmp, 'ipam.lock'),
      host_veth_prefix: prefix,
      policy: { type: 'k8s' },
      log_level: 'debug',
      ...common,
    };
  }
  const confPath = join(tmp, '10-netplugin.conflist');
  writeFileSync(confPath, JSON.stringify({ cniVersion: '1.0.0', name: conf['name'], plugins: [conf] }));
  const env: PolicyEnv = {
    mode,
    ds,
    ...(c ? { c } : {}),
    api,
    kube,
    table: `netplugin-${prefix}`,
    agent: undefined as unknown as Agent,
    conf,
    confPath,
    statusDir,
    tmp,
    pods: [],
    async close() {
      await cleanupAttachments();
      for (const p of env.pods) p.server?.kill('SIGKILL');
      await env.agent?.stop();
      try {
        nftRun(`delete table inet ${env.table}`);
      } catch {
        // not created
      }
      kube.close();
      if (c) await c.close();
      else await ds.close().catch(() => undefined);
      await api.server.stop();
      rmSync(tmp, { recursive: true, force: true });
    },
  };
  for (const ns of NAMESPACES) await setNamespaceLabels(env, ns, { ns });
  if (mode === 'etcdv3')
    for (const ns of NAMESPACES)
      await putObject(env, serviceAccountToProfile({ metadata: { name: 'default', namespace: ns } }));
  env.agent = await startPolicyAgent(env, opts.agentArgs);
  return env;
}

/** The built agent with this file's config; --no-routes: the node-network controller (routes, NAT) is not under test and must not fight the other files' agents over this shared namespace's routes. */
export function startPolicyAgent(
  env: { tmp: string; confPath: string; table: string },
  extraArgs: string[] = [],
): Promise<Agent> {
  const args = ['--config', env.confPath, '--log-level', 'DEBUG', '--no-routes', ...extraArgs];
  return startAgent(join(env.tmp, `cni-${Date.now()}.sock`), args, { env: { NETPLUGIN_POLICY_TABLE: env.table } });
}

export function listTable(env: { table: string }): string {
  return nftRun(`list table inet ${env.table}`);
}

/** Creates (or replaces) a datastore object. */
export async function putObject<K extends Resource['kind']>(env: { ds: Datastore }, obj: Resource<K>): Promise<void> {
  const c = env;
  try {
    const cur = await c.ds.get(obj.kind, obj.metadata.name, obj.metadata.namespace);
    await c.ds.update({
      ...obj,
      metadata: { ...obj.metadata, resourceVersion: cur.metadata.resourceVersion },
    } as Resource<K>);
  } catch (e) {
    if (!(e instanceof DatastoreError) || e.kind !== 'NotFound') throw e;
    await c.ds.create(obj);
  }
}

/** ADDs one pod through the plugin (its netns, labels, named container ports) and starts its servers. */
export async function addPod(
  env: PolicyEnv,
  ns: string,
  name: string,
  labels: Record<string, string> = { pod: name },
  serve = true,
  annotations?: Record<string, string>,
): Promise<Pod> {
  putPod(env.api, ns, name, {
    labels,
    containers: [{ name: 'main', ports: SERVE_PORTS }],
    ...(annotations ? { annotations } : {}),
  });
  const n = createNetns(`pol${name}`);
  const containerId = `${ns}-${name}-${process.pid}-${Date.now()}`;
  const t0 = Date.now();
  const r = await cni('ADD', env.conf, { containerId, netns: n.path, args: k8sArgs(ns, name) });
  expectOk(r);
  const ips = (JSON.parse(r.stdout).ips as Array<{ address: string }>).map((x) => x.address.split('/')[0]!);
  const ip = ips.find((a) => !a.includes(':'))!;
  const ip6 = ips.find((a) => a.includes(':'));
  const pod: Pod = {
    ns,
    name,
    id: `${ns}/${name}`,
    netns: n.name,
    netnsPath: n.path,
    ip,
    ...(ip6 ? { ip6 } : {}),
    containerId,
    addWaitedMs: Date.now() - t0,
    addLog: r.stderr,
  };
  env.pods.push(pod);
  if (serve) await startServer(pod);
  return pod;
}

export async function delPod(env: PolicyEnv, pod: Pod): Promise<void> {
  pod.server?.kill('SIGKILL');
  const r = await cni('DEL', env.conf, {
    containerId: pod.containerId,
    netns: pod.netnsPath,
    args: k8sArgs(pod.ns, pod.name),
  });
  expect(r.code, why(r)).toBe(0);
  env.pods.splice(env.pods.indexOf(pod), 1);
}

function startServer(pod: Pod): Promise<void> {
  const proc = spawn('ip', ['netns', 'exec', pod.netns, 'python3', POD_SCRIPT, 'serve', '80', '81'], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
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
export async function probeFrom(
  from: Pod,
  targets: Array<[string, number, 'tcp' | 'udp']>,
  timeout = 1.5,
): Promise<boolean[]> {
  const out = await new Promise<string>((resolve, reject) =>
    execFile(
      'ip',
      ['netns', 'exec', from.netns, 'python3', POD_SCRIPT, 'probe', String(timeout), JSON.stringify(targets)],
      { timeout: 60_000 },
      (err, stdout) => (err ? reject(err) : resolve(stdout)),
    ),
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

export async function probeMatrix(
  pods: Pod[],
  port: number,
  proto: 'tcp' | 'udp',
  timeout?: number,
): Promise<Map<string, boolean>> {
  const res = new Map<string, boolean>();
  await Promise.all(
    pods.map(async (f) => {
      const r = await probeFrom(
        f,
        pods.map((t) => [t.ip, port, proto]),
        timeout,
      );
      pods.forEach((t, i) => res.set(`${f.id}>${t.id}`, r[i]!));
    }),
  );
  return res;
}

/**
 * How long a matrix probe waits before it calls a silent drop "blocked". Every
 * round with a blocked cell costs this much, and the truth tables run ~25
 * rounds per file. A short wait cannot turn a wrong verdict into a pass in
 * practice: an allowed connection on these veths answers in milliseconds, a
 * slow one only makes the round differ and the loop probes again (until the
 * deadline), and a policy that wrongly allows would have to be slower than
 * this in every cell of the same round to look right.
 */
const MATRIX_DROP_SECONDS = 0.75;

/**
 * Probes the full matrix until it equals the expected one (the agent applies
 * changes asynchronously) or `deadlineMs` passes; then asserts it. A pod
 * reaching itself never leaves its netns, so it is always reachable.
 */
export async function expectReachability(
  env: PolicyEnv,
  port: number,
  proto: 'tcp' | 'udp',
  expected: Expect,
  deadlineMs = 20_000,
): Promise<void> {
  const pods = env.pods;
  const want = grid(pods, (f, t) => f === t || expected(f, t));
  const end = Date.now() + deadlineMs;
  let got = '';
  for (;;) {
    const m = await probeMatrix(pods, port, proto, MATRIX_DROP_SECONDS);
    got = grid(pods, (f, t) => m.get(`${f.id}>${t.id}`)!);
    if (got === want || Date.now() > end) break;
    await new Promise((r) => setTimeout(r, 300));
  }
  if (got !== want && process.env.POLICY_TEST_DEBUG)
    process.stderr.write(`${listTable(env)}\n${env.agent.log().slice(-6000)}\n`);
  expect(`${proto}/${port}\n${got}`).toBe(`${proto}/${port}\n${want}`);
  // `netpluginctl policy explain` evaluates the same objects: it must agree with the dataplane.
  const model = await modelMatrix(env, port, proto);
  expect(`model ${proto}/${port}\n${grid(pods, (f, t) => f === t || model.get(`${f.id}>${t.id}`)!)}`).toBe(
    `model ${proto}/${port}\n${want}`,
  );
}

/**
 * What the policy model's evaluator reads, from the datastore as the agent sees it: the enforced
 * policies, the profiles and this node's endpoint views.
 */
export async function modelInputs(env: PolicyEnv): Promise<{
  policies: PolicyInput[];
  profiles: Map<string, { name: string; spec: Resource<'Profile'>['spec'] }>;
  views: ReturnType<typeof endpointViews>;
}> {
  const [weps, nps, gnps, profs] = await Promise.all([
    env.ds.list('WorkloadEndpoint'),
    env.ds.list('NetworkPolicy'),
    env.ds.list('GlobalNetworkPolicy'),
    env.ds.list('Profile'),
  ]);
  const profiles = new Map(profs.items.map((p) => [p.metadata.name, { name: p.metadata.name, spec: p.spec }]));
  const policies: PolicyInput[] = [
    ...nps.items.map(
      (p): PolicyInput => ({
        kind: 'NetworkPolicy',
        name: p.metadata.name,
        namespace: p.metadata.namespace!,
        spec: p.spec,
      }),
    ),
    ...gnps.items.map((p): PolicyInput => ({ kind: 'GlobalNetworkPolicy', name: p.metadata.name, spec: p.spec })),
  ];
  const views = endpointViews(
    weps.items.map((w) => endpointFromWep(w, NODE)),
    profiles,
  );
  return { policies, profiles, views };
}

/** The verdicts of the policy model's evaluator (src/model/policy-eval.ts) for every pair: the peer's egress and the target's ingress. */
async function modelMatrix(env: PolicyEnv, port: number, proto: 'tcp' | 'udp'): Promise<Map<string, boolean>> {
  const { policies, profiles, views } = await modelInputs(env);
  const protocol = proto === 'tcp' ? 'TCP' : 'UDP';
  const out = new Map<string, boolean>();
  for (const f of env.pods) {
    for (const t of env.pods) {
      const fv = views.find((v) => v.addrs.includes(f.ip))!;
      const tv = views.find((v) => v.addrs.includes(t.ip))!;
      const ingress = evaluate(tv, views, policies, profiles, { direction: 'ingress', peerAddr: f.ip, protocol, port });
      const egress = evaluate(fv, views, policies, profiles, { direction: 'egress', peerAddr: t.ip, protocol, port });
      out.set(`${f.id}>${t.id}`, ingress.verdict === 'allow' && egress.verdict === 'allow');
    }
  }
  return out;
}

// ---- Kubernetes NetworkPolicy: in the API server; on etcd also as kube-controllers mirrors it ----

const npPath = (ns: string, name?: string) =>
  `/apis/networking.k8s.io/v1/namespaces/${ns}/networkpolicies${name ? `/${name}` : ''}`;

export async function applyK8sPolicy(env: PolicyEnv, np: KubeNetworkPolicy): Promise<void> {
  const ns = np.metadata.namespace!;
  const body = { apiVersion: 'networking.k8s.io/v1', kind: 'NetworkPolicy', ...np };
  try {
    const cur = await env.kube.request<{ metadata: { resourceVersion: string } }>('GET', npPath(ns, np.metadata.name));
    await env.kube.request('PUT', npPath(ns, np.metadata.name), {
      ...body,
      metadata: { ...np.metadata, resourceVersion: cur.metadata.resourceVersion },
    });
  } catch (e) {
    if (!(e instanceof DatastoreError) || e.kind !== 'NotFound') throw e;
    await env.kube.request('POST', npPath(ns), body);
  }
  if (env.mode === 'etcdv3') await putObject(env, convertK8sNetworkPolicy(np));
}

export async function deleteK8sPolicy(env: PolicyEnv, ns: string, name: string): Promise<void> {
  await env.kube.request('DELETE', npPath(ns, name));
  if (env.mode === 'etcdv3') await env.ds.delete('NetworkPolicy', k8sPolicyName(name), { namespace: ns });
}

export async function deleteAllPolicies(env: PolicyEnv): Promise<void> {
  for (const ns of NAMESPACES) {
    const l = await env.kube.request<{ items: Array<{ metadata: { name: string } }> }>('GET', npPath(ns));
    for (const np of l.items) await env.kube.request('DELETE', npPath(ns, np.metadata.name));
  }
  if (env.mode !== 'etcdv3') return;
  for (const p of (await env.ds.list('NetworkPolicy')).items)
    await env.ds.delete('NetworkPolicy', p.metadata.name, { namespace: p.metadata.namespace! });
  for (const p of (await env.ds.list('GlobalNetworkPolicy')).items)
    await env.ds.delete('GlobalNetworkPolicy', p.metadata.name);
}

/** A pod label change: on the Pod; on etcd also as kube-controllers copies it onto the endpoint (our netplugin.org/* labels kept). */
export async function setPodLabels(env: PolicyEnv, p: Pod, labels: Record<string, string>): Promise<void> {
  const cur = await env.kube.getPod(p.ns, p.name);
  const remove = Object.fromEntries(
    Object.keys(cur.metadata.labels ?? {})
      .filter((k) => !(k in labels))
      .map((k) => [k, null]),
  );
  await env.kube.patchPod(p.ns, p.name, { metadata: { labels: { ...remove, ...labels } } }, 'merge');
  if (env.mode !== 'etcdv3') return;
  const weps = (await env.ds.list('WorkloadEndpoint', { namespace: p.ns })).items.filter((w) => w.spec.pod === p.name);
  expect(weps.length).toBe(1);
  const w = weps[0]!;
  const own = Object.fromEntries(
    Object.entries(w.metadata.labels ?? {}).filter(([k]) => k.startsWith('netplugin.org/')),
  );
  await env.ds.update({ ...w, metadata: { ...w.metadata, labels: { ...labels, ...own } } });
}

/** A namespace label change: on the Namespace; on etcd also as kube-controllers writes it onto kns.<ns>. */
export async function setNamespaceLabels(env: PolicyEnv, ns: string, labels: Record<string, string>): Promise<void> {
  const path = `/api/v1/namespaces/${ns}`;
  try {
    const cur = await env.kube.request<{ metadata: Record<string, unknown> }>('GET', path);
    await env.kube.request('PUT', path, { apiVersion: 'v1', kind: 'Namespace', metadata: { ...cur.metadata, labels } });
  } catch (e) {
    if (!(e instanceof DatastoreError) || e.kind !== 'NotFound') throw e;
    await env.kube.request('POST', '/api/v1/namespaces', {
      apiVersion: 'v1',
      kind: 'Namespace',
      metadata: { name: ns, labels },
    });
  }
  if (env.mode === 'etcdv3') await putObject(env, namespaceToProfile({ metadata: { name: ns, labels } }));
}

export function nftList(): Promise<string> {
  return new Promise((resolve, reject) =>
    execFile('nft', ['list', 'ruleset'], (e, out) => (e ? reject(e) : resolve(out))),
  );
}

/** Probes `targets` from `from` over and over for `seconds`; resolves (once started) to a promise of the indexes ever reached. */
export async function watchProbe(
  from: Pod,
  targets: Array<[string, number, 'tcp' | 'udp']>,
  seconds: number,
  timeout = 0.5,
): Promise<Promise<number[]>> {
  const proc = spawn(
    'ip',
    [
      'netns',
      'exec',
      from.netns,
      'python3',
      POD_SCRIPT,
      'watch',
      String(seconds),
      String(timeout),
      JSON.stringify(targets),
    ],
    { stdio: ['ignore', 'pipe', 'inherit'] },
  );
  const rl = createInterface({ input: proc.stdout! });
  const lines: string[] = [];
  const done = new Promise<number[]>((resolve, reject) => {
    proc.once('exit', (code) =>
      code === 0 && lines[1]
        ? resolve(JSON.parse(lines[1]) as number[])
        : reject(new Error(`watch probe exited ${code}: ${lines.join('\n')}`)),
    );
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
export async function addPreparedPod(
  env: PolicyEnv,
  p: Pod,
  ns: string,
  labels: Record<string, string>,
  conf = env.conf,
): Promise<{ code: number; ms: number }> {
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

/**
 * Counts the UDP datagrams reaching `p` on `port` for `seconds`; resolves once listening, to `done`, a promise
 * of their sources (wrapped: an async function returning a bare promise would wait for it).
 */
export async function receiveOn(p: Pod, port: number, seconds: number): Promise<{ done: Promise<string[]> }> {
  const proc = spawn('ip', ['netns', 'exec', p.netns, 'python3', POD_SCRIPT, 'recv', String(port), String(seconds)], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const rl = createInterface({ input: proc.stdout! });
  const lines: string[] = [];
  const done = new Promise<string[]>((resolve, reject) => {
    proc.once('exit', (code) =>
      code === 0 && lines[1]
        ? resolve(JSON.parse(lines[1]) as string[])
        : reject(new Error(`recv exited ${code}: ${lines.join('\n')}`)),
    );
  });
  await new Promise<void>((resolve) => rl.on('line', (l) => (lines.push(l), lines.length === 1 && resolve())));
  return { done };
}

/**
 * Sends hand-made frames from `p`'s eth0 (a packet socket: any source address or MAC, any destination,
 * loopback too); for proto "syn", the sources of the SYN-ACKs that came back within `wait` seconds.
 */
export function forgeFrom(
  p: Pod,
  o: { src: string; dst: string; dport: number; proto: 'udp' | 'syn'; count?: number; srcMac?: string; wait?: number },
): Promise<string[]> {
  return new Promise((resolve, reject) =>
    execFile(
      'ip',
      ['netns', 'exec', p.netns, 'python3', POD_SCRIPT, 'forge', JSON.stringify(o)],
      { timeout: 30_000 },
      (err, stdout, stderr) =>
        err ? reject(new Error(`${err.message}: ${stderr}`)) : resolve(JSON.parse(stdout) as string[]),
    ),
  );
}
