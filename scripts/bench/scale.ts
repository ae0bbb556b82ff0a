// The scale harness (npm run bench:scale; scripts/bench-scale.mjs): N simulated
// nodes on one machine, each a network namespace on a test underlay bridge
// with its own netplugin-node agent (--nodename, --node-ip, policy type k8s),
// one datastore for all: etcd on the underlay, or the fake Kubernetes API
// server (the kubernetes datastore). Pods' labels come from the fake API
// server in both runs (as from a real one), reached through a counting proxy
// on the underlay, so the API requests, watches and bytes of each agent are
// counted by its node address.
//
// Measured, per run:
//   route   a new IPAM block on one node -> its route present on every other
//           node: from the start of the ADD that claimed the block to the
//           route's netlink event in each other node (ip monitor), p50/p99
//           over every (block, node) pair. 20 pods per node, /28 blocks: two
//           claims per node, while all nodes fill at once (churn).
//   policy  a NetworkPolicy created -> enforced on every node where it applies
//           (each node has a pod it selects): from the write to the commit of
//           the nft batch naming it in each node (nft monitor), p50/p99 over
//           every (policy, node) pair; traffic-verified on a sample of nodes
//           (a probe that got an answer before gets none after).
//   node    a node deleted (its agent stopped, its Node object deleted) -> its
//           block routes gone on every other node (ip monitor), p50/p99.
//   agents  CPU (% of one core) and RSS per agent at idle (a quiet window
//           after the fill) and during the fill (churn); p50 and max.
//   store   etcd: watchers, watch events and bytes sent per agent per second,
//           etcd CPU; API server: requests, watches and bytes per agent.
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import {
  chmodSync,
  copyFileSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { createConnection, createServer, type Server, type Socket } from 'node:net';
import { cpus, tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { openDatastore } from '../../src/datastore/index.js';
import type { Datastore } from '../../src/datastore/types.js';
import { convertK8sNetworkPolicy, type KubeNetworkPolicy } from '../../src/model/k8s-networkpolicy.js';
import { namespaceToProfile, serviceAccountToProfile } from '../../src/model/profiles.js';
import type { Resource } from '../../src/model/resources.js';
import { startEtcd, type EtcdServer } from '../../test/support/etcd.js';
import { startFakeApiServer, writeKubeconfig, type FakeApiServer } from '../../test/support/fake-apiserver.js';
import { execCni, mapLimit, memoryMiB, processCpuMs, quantile, waitSocket } from './lib.mjs';
import { reached, startProber, type Prober } from './probe.js';
import { killMemoryRun, memoryRun } from './scale-memory.js';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '../..');
const HOST_IP = '10.201.255.250';
const POOL = '10.202.0.0/16';
const BLOCK = 28;
const NS = 'scale';
const PROBE_PORT = 80;

type Mode = 'etcdv3' | 'kubernetes';
interface Opts {
  remote?: number[];
  nodes: number[];
  podsPerNode: number;
  modes: Mode[];
  policies: number;
  idleSeconds: number;
  concurrency: number;
  json?: string;
}

function options(argv: string[]): Opts {
  const { values } = parseArgs({
    args: argv,
    options: {
      nodes: { type: 'string', default: '10' },
      'pods-per-node': { type: 'string', default: '20' },
      datastore: { type: 'string', default: 'etcdv3,kubernetes' },
      policies: { type: 'string', default: '5' },
      'idle-seconds': { type: 'string', default: '20' },
      concurrency: { type: 'string', default: '8' },
      json: { type: 'string' },
      remote: { type: 'string' },
    },
  });
  const int = (name: string, v: string, lo: number, hi: number): number => {
    const n = Number(v);
    if (!Number.isInteger(n) || n < lo || n > hi)
      throw new Error(`--${name} '${v}' is not an integer from ${lo} to ${hi}`);
    return n;
  };
  const modes = values.datastore.split(',') as Mode[];
  for (const m of modes)
    if (m !== 'etcdv3' && m !== 'kubernetes') throw new Error(`--datastore: '${m}' is not etcdv3 or kubernetes`);
  return {
    nodes: values.nodes.split(',').map((n) => int('nodes', n, 2, 200)),
    podsPerNode: int('pods-per-node', values['pods-per-node'], 1, 100),
    modes,
    policies: int('policies', values.policies, 1, 100),
    idleSeconds: int('idle-seconds', values['idle-seconds'], 1, 600),
    concurrency: int('concurrency', values.concurrency, 1, 64),
    ...(values.json ? { json: values.json } : {}),
    ...(values.remote ? { remote: values.remote.split(',').map((n) => int('remote', n, 0, 1_000_000)) } : {}),
  };
}

const load = (): string => readFileSync('/proc/loadavg', 'utf8').split(' ').slice(0, 3).join(' ');
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));
const q = (xs: number[], p: number): number | undefined => (xs.length ? quantile(xs, p) : undefined);
const f1 = (x: number | undefined, unit = ''): string =>
  x === undefined ? '-' : `${x >= 100 ? x.toFixed(0) : x.toFixed(x >= 10 ? 1 : 2)}${unit}`;

/** Everything a run made, removed by cleanupSync (also from the exit handler). */
class Resources {
  readonly netns: string[] = [];
  readonly procs: ChildProcess[] = [];
  readonly links: string[] = [];
  readonly dirs: string[] = [];
  readonly servers: Server[] = [];
  readonly sockets = new Set<Socket>();
  probers: Prober[] = [];
  etcd?: EtcdServer;
  api?: FakeApiServer;
  ds?: Datastore;

  cleanupSync(): void {
    for (const p of this.probers) p.stop();
    for (const p of this.procs) if (p.exitCode === null && p.signalCode === null) p.kill('SIGKILL');
    for (const s of this.sockets) s.destroy();
    for (const s of this.servers) s.close();
    if (this.etcd?.proc && this.etcd.proc.exitCode === null) this.etcd.proc.kill('SIGKILL');
    if (this.etcd) rmSync(this.etcd.dataDir, { recursive: true, force: true });
    for (const n of this.netns.splice(0)) {
      try {
        execFileSync('ip', ['netns', 'del', n], { stdio: 'ignore' });
      } catch {
        /* gone */
      }
    }
    for (const l of this.links.splice(0)) {
      try {
        execFileSync('ip', ['link', 'del', l], { stdio: 'ignore' });
      } catch {
        /* went with the underlay */
      }
    }
    for (const d of this.dirs.splice(0)) rmSync(d, { recursive: true, force: true });
  }

  async close(): Promise<void> {
    await this.ds?.close().catch(() => undefined);
    await this.api?.stop().catch(() => undefined);
    await this.etcd?.stop().catch(() => undefined);
    this.cleanupSync();
  }
}

let current: Resources | undefined;

/** Per-agent API traffic, by the agent's node address. */
interface ApiCount {
  requests: number;
  watches: number;
  bytesDown: number;
  bytesUp: number;
}

/**
 * A TCP proxy on the underlay to the fake API server (which listens on
 * loopback only), counting HTTP requests (plain HTTP/1.1: request lines),
 * watch requests and bytes by the client's address.
 */
function startApiProxy(res: Resources, target: number): Promise<{ port: number; counts: Map<string, ApiCount> }> {
  const counts = new Map<string, ApiCount>();
  const server = createServer((c) => {
    const who = (c.remoteAddress ?? '').replace(/^::ffff:/, '');
    const k = counts.get(who) ?? { requests: 0, watches: 0, bytesDown: 0, bytesUp: 0 };
    counts.set(who, k);
    const up = createConnection({ host: '127.0.0.1', port: target });
    res.sockets.add(c);
    res.sockets.add(up);
    c.on('data', (d: Buffer) => {
      k.bytesUp += d.length;
      const s = d.toString('latin1');
      for (const m of s.matchAll(/(?:^|\r\n)(?:GET|POST|PUT|PATCH|DELETE) (\S+) HTTP\/1\.1\r\n/g)) {
        k.requests++;
        if (/[?&]watch=(1|true)/.test(m[1]!)) k.watches++;
      }
    });
    up.on('data', (d: Buffer) => (k.bytesDown += d.length));
    // pipe() passes each side's FIN on (an idle keep-alive connection the server closes is closed, not reset).
    c.pipe(up);
    up.pipe(c);
    const end = (): void => {
      c.destroy();
      up.destroy();
      res.sockets.delete(c);
      res.sockets.delete(up);
    };
    c.on('error', end);
    up.on('error', end);
    c.on('close', () => up.end());
    up.on('close', () => c.end());
  });
  res.servers.push(server);
  return new Promise((resolve) =>
    server.listen(0, HOST_IP, () => resolve({ port: (server.address() as { port: number }).port, counts })),
  );
}

/** etcd's own counters: watchers, watch events and bytes sent to clients. */
async function etcdCounters(endpoint: string): Promise<Record<string, number>> {
  const text = await (await fetch(`${endpoint}/metrics`)).text();
  const pick = (re: string): number => {
    let sum = 0;
    for (const m of text.matchAll(new RegExp(`^${re}(?:\\{[^}]*\\})? ([0-9.e+]+)$`, 'gm'))) sum += Number(m[1]);
    return sum;
  };
  return {
    watchers: pick('etcd_debugging_mvcc_watcher_total'),
    streams: pick('etcd_debugging_mvcc_watch_stream_total'),
    events: pick('etcd_debugging_mvcc_events_total'),
    sentBytes: pick('etcd_network_client_grpc_sent_bytes_total'),
    rangeCalls: pick('grpc_server_handled_total\\{[^}]*grpc_method="Range"[^}]*\\}'),
    txnCalls: pick('grpc_server_handled_total\\{[^}]*grpc_method="Txn"[^}]*\\}'),
  };
}

interface Node {
  i: number;
  name: string;
  ns: string;
  ip: string;
  sock: string;
  agent?: ChildProcess;
  log: string;
  pods: Pod[];
}
interface Pod {
  node: Node;
  name: string;
  netns: string;
  cid: string;
  ip?: string;
  addStart: number;
}
interface Ev {
  t: number;
  line: string;
}

export interface RunResult {
  nodes: number;
  mode: Mode;
  pods: number;
  routeMs: number[];
  routeFromAddMs: number[];
  policyMs: number[];
  policyCpuMs: number[];
  nodeDelMs: number[];
  policyVerified: string;
  startMs: number;
  fillMs: number;
  fillFailures: number;
  idle: { cpuPct: number[]; rssMiB: number[] };
  churn: { cpuPct: number[]; rssMiB: number[] };
  etcd?: {
    startBytesPerAgent: number;
    watchersPerAgent: number;
    idle: Rates;
    churn: Rates;
    cpuPctIdle: number;
    cpuPctChurn: number;
  };
  api: {
    startBytesPerAgent: number;
    requestsPerAgentStart: number;
    requestsPerAgentFill: number;
    requestsPerAgentIdle: number;
    watchesPerAgent: number;
    bytesPerAgentPerSecIdle: number;
    bytesPerAgentPerSecChurn: number;
  };
  load: string[];
}
interface Rates {
  eventsPerAgentPerSec: number;
  bytesPerAgentPerSec: number;
}

async function run(o: Opts, N: number, mode: Mode): Promise<RunResult> {
  const res = new Resources();
  current = res;
  const loads: string[] = [];
  const tag = `sc${process.pid % 100000}`;
  const tmp = mkdtempSync(join(tmpdir(), `netplugin-scale-${N}-`));
  res.dirs.push(tmp);
  const log = (s: string): void => void process.stderr.write(`scale[${N} ${mode}] ${s} (load ${load()})\n`);
  try {
    // ---- underlay ----
    const ul = `${tag}-ul`;
    const mkns = (name: string): string => {
      execFileSync('ip', ['netns', 'add', name]);
      res.netns.push(name);
      execFileSync('ip', ['-n', name, 'link', 'set', 'lo', 'up']);
      return name;
    };
    mkns(ul);
    execFileSync('ip', ['-n', ul, 'link', 'add', 'br0', 'type', 'bridge']);
    execFileSync('ip', ['-n', ul, 'link', 'set', 'br0', 'up']);
    const hostLink = `${tag}h`;
    execFileSync('ip', [
      '-n',
      ul,
      'link',
      'add',
      'ph',
      'type',
      'veth',
      'peer',
      'name',
      hostLink,
      'netns',
      process.env['NETPLUGIN_HOST_NETNS']!,
    ]);
    res.links.push(hostLink);
    execFileSync('ip', ['-n', ul, 'link', 'set', 'ph', 'master', 'br0', 'up']);
    execFileSync('ip', ['link', 'set', hostLink, 'up']);
    execFileSync('ip', ['addr', 'add', `${HOST_IP}/16`, 'dev', hostLink]);

    // ---- datastore, API server ----
    res.api = await startFakeApiServer({ historySize: 100_000 });
    const api = res.api;
    const proxy = await startApiProxy(res, Number(new URL(api.url).port));
    const kubeconfig = writeKubeconfig(tmp, { url: `http://${HOST_IP}:${proxy.port}`, caFile: api.caFile });
    const localKubeconfig = writeKubeconfig(api.dir, api);
    let dsConf: Record<string, unknown>;
    if (mode === 'etcdv3') {
      res.etcd = await startEtcd({ host: HOST_IP });
      dsConf = { datastore_type: 'etcdv3', etcd_endpoints: res.etcd.endpoint };
      res.ds = await openDatastore({ datastore_type: 'etcdv3', etcd_endpoints: res.etcd.endpoint });
    } else {
      dsConf = { datastore_type: 'kubernetes', kubernetes: { kubeconfig } };
      res.ds = await openDatastore({ datastore_type: 'kubernetes', kubernetes: { kubeconfig: localKubeconfig } });
    }
    const ds = res.ds;
    await ds.create({
      apiVersion: 'netplugin.org/v3',
      kind: 'ClusterInformation',
      metadata: { name: 'default' },
      spec: { datastoreReady: true, clusterType: 'k8s,bench' },
    } as Resource<'ClusterInformation'>);
    await ds.create({
      apiVersion: 'netplugin.org/v3',
      kind: 'IPPool',
      metadata: { name: 'scale' },
      spec: { cidr: POOL, blockSize: BLOCK, natOutgoing: false },
    } as Resource<'IPPool'>);
    const nsLabels = { team: 'scale' };
    api.put(`/api/v1/namespaces/${NS}`, {
      apiVersion: 'v1',
      kind: 'Namespace',
      metadata: { name: NS, labels: nsLabels },
    });
    if (mode === 'etcdv3') {
      // What kube-controllers would mirror from the API server.
      await ds.create(namespaceToProfile({ metadata: { name: NS, labels: nsLabels } }));
      await ds.create(serviceAccountToProfile({ metadata: { name: 'default', namespace: NS } }));
    } else {
      api.put(`/api/v1/namespaces/${NS}/serviceaccounts/default`, {
        apiVersion: 'v1',
        kind: 'ServiceAccount',
        metadata: { name: 'default', namespace: NS },
      });
    }

    // ---- nodes and agents ----
    const shim = [
      join(ROOT, 'build/shim/netplugin-shim'),
      join(ROOT, `prebuilds/linux-${process.arch}/netplugin-shim`),
    ].find((p) => existsSync(p))!;
    const bin = join(tmp, 'bin', 'netplugin');
    mkdirSync(dirname(bin), { recursive: true });
    copyFileSync(shim, bin);
    chmodSync(bin, 0o755);
    writeFileSync(join(tmp, 'bin', 'netplugin.fallback'), `${process.execPath}\n${ROOT}\n`);
    const nodes: Node[] = [];
    for (let i = 1; i <= N; i++) {
      const ns = mkns(`${tag}-n${i}`);
      const ip = `10.201.${i >> 8}.${i & 255}`;
      execFileSync('ip', ['-n', ul, 'link', 'add', `p${i}`, 'type', 'veth', 'peer', 'name', 'eth0', 'netns', ns]);
      execFileSync('ip', ['-n', ul, 'link', 'set', `p${i}`, 'master', 'br0', 'up']);
      execFileSync('ip', ['-n', ns, 'link', 'set', 'eth0', 'up']);
      execFileSync('ip', ['-n', ns, 'addr', 'add', `${ip}/16`, 'dev', 'eth0']);
      execFileSync('ip', [
        'netns',
        'exec',
        ns,
        'sysctl',
        '-qw',
        'net.ipv4.ip_forward=1',
        'net.ipv4.conf.all.rp_filter=0',
        'net.ipv4.conf.default.rp_filter=0',
      ]);
      const name = `node-${i}`;
      api.put(`/api/v1/nodes/${name}`, {
        apiVersion: 'v1',
        kind: 'Node',
        metadata: { name, labels: { 'kubernetes.io/hostname': name } },
        spec: {},
        status: { addresses: [{ type: 'InternalIP', address: ip }] },
      });
      nodes.push({ i, name, ns, ip, sock: join(tmp, `n${i}.sock`), log: '', pods: [] });
    }
    const confOf = (n: Node): Record<string, unknown> => ({
      cniVersion: '1.0.0',
      name: 'k8s-pod-network',
      type: 'netplugin',
      nodename: n.name,
      ...dsConf,
      kubernetes: { kubeconfig },
      policy: { type: 'k8s' },
      ipam: { type: 'netplugin-ipam' },
      ipam_lock_file: join(tmp, `n${n.i}.lock`),
      endpoint_status_dir: join(tmp, `n${n.i}.status`),
      mtu_file: join(tmp, `n${n.i}.mtu`),
    });
    for (const n of nodes)
      writeFileSync(
        join(tmp, `n${n.i}.conflist`),
        JSON.stringify({ cniVersion: '1.0.0', name: 'k8s-pod-network', plugins: [confOf(n)] }),
      );

    // Route and nft events of every node, timestamped on arrival.
    const routeEv = new Map<string, Ev[]>();
    const nftEv = new Map<string, Ev[]>();
    for (const n of nodes) {
      // nsenter --net, not `ip netns exec`/`ip -n`: those give each process a mount namespace of
      // its own, and /run/netns is a shared mount, so every pod namespace created later is
      // mounted again in each of them; at 50 nodes (1,000 pod namespaces x ~100 monitors and
      // agents) that passes fs.mount-max (100,000) and namespaces' mounts go missing.
      const enter = ['--net=/var/run/netns/' + n.ns];
      for (const [what, args, into] of [
        ['route', [...enter, 'ip', 'monitor', 'route'], routeEv],
        ['nft', [...enter, 'nft', 'monitor'], nftEv],
      ] as const) {
        const p = spawn('nsenter', [...args], { stdio: ['ignore', 'pipe', 'ignore'] });
        res.procs.push(p);
        const list: Ev[] = [];
        into.set(n.name, list);
        createInterface({ input: p.stdout! }).on('line', (line) => {
          if (what === 'nft' && !line.includes('knp.default.')) return;
          list.push({ t: performance.now(), line });
        });
      }
    }

    // Each block's write as an observer sees it (a datastore client like the agents): the start of route convergence.
    const blockSeen = new Map<string, number>();
    const blockWatch = ds.watch('IPAMBlock', {}, (ev) => {
      if (ev.type === 'ADDED' && !blockSeen.has(ev.object.spec.cidr))
        blockSeen.set(ev.object.spec.cidr, performance.now());
    });
    const api0 = snapshotApi(proxy.counts);
    const e0 = res.etcd ? await etcdCounters(res.etcd.endpoint) : undefined;
    const tStart = performance.now();
    await mapLimit(nodes, 4, async (n) => {
      const args = [
        'netns',
        'exec',
        n.ns,
        process.execPath,
        // Node/V8 flags for the agents only, to try a setting (docs/scale.md: the semispace run).
        ...(process.env['SCALE_AGENT_NODE_FLAGS']?.split(' ').filter(Boolean) ?? []),
        join(ROOT, 'dist/netplugin-node.cjs'),
        '--config',
        join(tmp, `n${n.i}.conflist`),
        '--nodename',
        n.name,
        '--node-ip',
        `${n.ip}/16`,
        '--socket',
        n.sock,
        '--mtu-file',
        join(tmp, `n${n.i}.mtu`),
        '--log-level',
        'WARNING',
      ];
      const p = spawn('ip', args, { stdio: ['ignore', 'ignore', 'pipe'], env: { PATH: process.env['PATH'] } });
      res.procs.push(p);
      n.agent = p;
      p.stderr!.on('data', (d: Buffer) => (n.log = (n.log + d.toString()).slice(-20_000)));
      await waitSocket(n.sock, 120_000, () => (p.exitCode !== null ? `agent ${n.name} exited: ${n.log}` : undefined));
    });
    const startMs = performance.now() - tStart;
    const apiStart = snapshotApi(proxy.counts);
    log(`${N} agents up in ${(startMs / 1000).toFixed(1)} s`);

    // ---- fill: podsPerNode pods per node, all nodes at once (churn) ----
    const pods: Pod[] = [];
    for (const n of nodes) {
      for (let j = 0; j < o.podsPerNode; j++) {
        const name = `w${j}-n${n.i}`;
        api.put(`/api/v1/namespaces/${NS}/pods/${name}`, {
          apiVersion: 'v1',
          kind: 'Pod',
          metadata: { name, namespace: NS, uid: `uid-${name}`, labels: { app: `w${j}` } },
          spec: { nodeName: n.name, serviceAccountName: 'default', containers: [{ name: 'main' }] },
        });
        const p: Pod = {
          node: n,
          name,
          netns: mkns(`${tag}-n${n.i}p${j}`),
          cid: `${name}-${process.pid}`,
          addStart: 0,
        };
        n.pods.push(p);
      }
    }
    // Interleaved across nodes (pod 0 of every node, then pod 1, ...): every node claims its blocks while the others churn.
    for (let j = 0; j < o.podsPerNode; j++) for (const n of nodes) pods.push(n.pods[j]!);
    const cpuOf = (): number[] => nodes.map((n) => processCpuMs(n.agent!.pid!));
    const etcdCpu = (): number => (res.etcd?.proc ? processCpuMs(res.etcd.proc.pid!) : 0);
    const c0 = cpuOf();
    const ec0 = etcdCpu();
    const ef0 = res.etcd ? await etcdCounters(res.etcd.endpoint) : undefined;
    const af0 = snapshotApi(proxy.counts);
    const tFill = performance.now();
    let fillFailures = 0;
    await mapLimit(pods, o.concurrency, async (p) => {
      p.addStart = performance.now();
      const r = await execCni(
        bin,
        {
          PATH: process.env['PATH'],
          CNI_PATH: '/usr/lib/cni',
          CNI_IFNAME: 'eth0',
          NETPLUGIN_AGENT_SOCKET: p.node.sock,
          CNI_COMMAND: 'ADD',
          CNI_CONTAINERID: p.cid,
          CNI_NETNS: `/var/run/netns/${p.netns}`,
          CNI_ARGS: `IgnoreUnknown=1;K8S_POD_NAMESPACE=${NS};K8S_POD_NAME=${p.name}`,
        },
        JSON.stringify(confOf(p.node)),
      );
      if (r.code !== 0) {
        if (fillFailures++ < 3) log(`ADD ${p.name} failed: ${r.stdout.slice(0, 300)} ${r.stderr.slice(-300)}`);
        return;
      }
      p.ip = (JSON.parse(r.stdout) as { ips: Array<{ address: string }> }).ips[0]!.address.split('/')[0]!;
    });
    const fillMs = performance.now() - tFill;
    // Routes of the last claims may still be arriving: wait until every node has a route to every other node's blocks (or 30 s).
    const blocksOf = (n: Node): Set<string> => new Set(n.pods.filter((p) => p.ip).map((p) => blockOf(p.ip!)));
    const expectRoutes = nodes.reduce((s, n) => s + blocksOf(n).size, 0);
    const settleBy = performance.now() + 30_000;
    for (;;) {
      const have = nodes.map(
        (n) =>
          new Set(
            routeEv
              .get(n.name)!
              .filter((e) => !e.line.startsWith('Deleted') && / via /.test(e.line))
              .map((e) => e.line.split(' ')[0]),
          ).size,
      );
      if (have.every((h, k) => h >= expectRoutes - blocksOf(nodes[k]!).size) || performance.now() > settleBy) break;
      await sleep(200);
    }
    const churnWall = performance.now() - tFill;
    const c1 = cpuOf();
    const ec1 = etcdCpu();
    const ef1 = res.etcd ? await etcdCounters(res.etcd.endpoint) : undefined;
    const af1 = snapshotApi(proxy.counts);
    const churn = {
      cpuPct: nodes.map((_, k) => ((c1[k]! - c0[k]!) / churnWall) * 100),
      rssMiB: nodes.map((n) => memoryMiB(n.agent!.pid!).hwm),
    };
    loads.push(`fill ${load()}`);
    log(`fill: ${pods.length} pods in ${(fillMs / 1000).toFixed(1)} s, ${fillFailures} failures`);

    // Route convergence: claim time of each block (first ADD into it), route event on each other node.
    const claim = new Map<string, { t: number; owner: Node }>();
    for (const p of pods) {
      if (!p.ip) continue;
      const b = blockOf(p.ip);
      const c = claim.get(b);
      if (!c || p.addStart < c.t) claim.set(b, { t: p.addStart, owner: p.node });
    }
    blockWatch.stop();
    const routeMs: number[] = [];
    const routeFromAddMs: number[] = [];
    let missingRoutes = 0;
    for (const [b, c] of claim) {
      const written = blockSeen.get(b);
      for (const n of nodes) {
        if (n === c.owner) continue;
        const ev = routeEv
          .get(n.name)!
          .find((e) => e.line.startsWith(`${b} `) && e.line.includes(` via ${c.owner.ip} `));
        if (!ev) {
          missingRoutes++;
          continue;
        }
        routeFromAddMs.push(ev.t - c.t);
        if (written !== undefined) routeMs.push(Math.max(0, ev.t - written));
      }
    }
    if (missingRoutes) log(`${missingRoutes} (block, node) routes never appeared`);

    // ---- idle ----
    await sleep(3000);
    const i0 = cpuOf();
    const eci0 = etcdCpu();
    const ei0 = res.etcd ? await etcdCounters(res.etcd.endpoint) : undefined;
    const ai0 = snapshotApi(proxy.counts);
    const tIdle = performance.now();
    await sleep(o.idleSeconds * 1000);
    const idleWall = performance.now() - tIdle;
    const i1 = cpuOf();
    const eci1 = etcdCpu();
    const ei1 = res.etcd ? await etcdCounters(res.etcd.endpoint) : undefined;
    const ai1 = snapshotApi(proxy.counts);
    const idle = {
      cpuPct: nodes.map((_, k) => ((i1[k]! - i0[k]!) / idleWall) * 100),
      rssMiB: nodes.map((n) => memoryMiB(n.agent!.pid!).rss),
    };
    loads.push(`idle ${load()}`);
    log(
      `idle: agent CPU p50 ${f1(q(idle.cpuPct, 0.5))}% max ${f1(Math.max(...idle.cpuPct))}%, RSS max ${f1(Math.max(...idle.rssMiB))} MiB`,
    );

    // ---- policy convergence ----
    const proberPod = nodes[0]!.pods[o.podsPerNode - 1]!;
    const prober = await startProber(proberPod.netns);
    res.probers.push(prober);
    const policyMs: number[] = [];
    const verified: string[] = [];
    const pc0 = cpuOf();
    let policiesMade = 0;
    let missingPolicies = 0;
    for (let k = 0; k < Math.min(o.policies, o.podsPerNode - 1); k++) {
      const name = `conv-${k}`;
      // The sample: pod w<k> on three nodes other than the prober's.
      const sample = [nodes[1 % N]!, nodes[Math.floor(N / 2)]!, nodes[N - 1]!]
        .filter((n) => n !== proberPod.node)
        .map((n) => n.pods[k]!)
        .filter((p) => p.ip);
      const before = await Promise.all(sample.map((p) => prober.probe(p.ip!, PROBE_PORT, 2000)));
      const np: KubeNetworkPolicy = {
        metadata: { name, namespace: NS },
        spec: {
          podSelector: { matchLabels: { app: `w${k}` } },
          policyTypes: ['Ingress'],
          ingress: [{ from: [{ podSelector: { matchLabels: { role: 'nobody' } } }] }],
        },
      };
      const t0 = performance.now();
      api.put(`/apis/networking.k8s.io/v1/namespaces/${NS}/networkpolicies/${name}`, {
        apiVersion: 'networking.k8s.io/v1',
        kind: 'NetworkPolicy',
        ...np,
      });
      if (mode === 'etcdv3') await ds.create(convertK8sNetworkPolicy(np));
      policiesMade++;
      const needle = `${NS}/knp.default.${name}`;
      const by = t0 + 60_000;
      const seen = new Map<string, number>();
      while (seen.size < N && performance.now() < by) {
        for (const n of nodes) {
          if (seen.has(n.name)) continue;
          const ev = nftEv.get(n.name)!.find((e) => e.t >= t0 && e.line.includes(needle));
          if (ev) seen.set(n.name, ev.t - t0);
        }
        await sleep(50);
      }
      policyMs.push(...seen.values());
      missingPolicies += N - seen.size;
      const after = await Promise.all(sample.map((p) => prober.probe(p.ip!, PROBE_PORT, 1000)));
      const ok = before.every(reached) && after.every((r) => !reached(r));
      verified.push(
        `${name}: ${sample.length} sampled pods ${ok ? 'reachable before, unreachable after' : `NOT VERIFIED (before ${before.join(',')}, after ${after.join(',')})`}`,
      );
    }
    const pc1 = cpuOf();
    // Each agent's CPU per policy (what one node pays; the convergence here shares 2 cores among all N agents).
    const policyCpuMs = nodes.map((_, k) => (pc1[k]! - pc0[k]!) / Math.max(1, policiesMade));
    if (missingPolicies) log(`${missingPolicies} (policy, node) pairs never enforced within 60 s`);
    loads.push(`policy ${load()}`);

    // ---- node deletion ----
    const victim = nodes[N - 1]!;
    const victimBlocks = [...claim].filter(([, c]) => c.owner === victim).map(([b]) => b);
    await new Promise<void>((r) => {
      victim.agent!.once('exit', () => r());
      victim.agent!.kill('SIGTERM');
    });
    const tDel = performance.now();
    // What kube-controllers does when the Kubernetes Node goes (not part of what is timed here).
    await ds.delete('Node', victim.name);
    const nodeDelMs: number[] = [];
    const delBy = tDel + 60_000;
    const others = nodes.filter((n) => n !== victim);
    for (;;) {
      nodeDelMs.length = 0;
      let gone = 0;
      for (const n of others) {
        const evs = routeEv
          .get(n.name)!
          .filter(
            (e) =>
              e.t >= tDel &&
              e.line.startsWith('Deleted') &&
              victimBlocks.some((b) => e.line.startsWith(`Deleted ${b} `)),
          );
        if (evs.length >= victimBlocks.length) {
          gone++;
          nodeDelMs.push(Math.max(...evs.map((e) => e.t - tDel)));
        }
      }
      if (gone === others.length || performance.now() > delBy) break;
      await sleep(100);
    }
    if (nodeDelMs.length < others.length)
      log(`node deletion: routes gone on ${nodeDelMs.length} of ${others.length} nodes within 60 s`);
    loads.push(`end ${load()}`);

    const agentsN = N;
    const apiIdle = diffApi(ai1, ai0);
    const apiChurn = diffApi(af1, af0);
    const result: RunResult = {
      nodes: N,
      mode,
      pods: pods.length,
      routeMs,
      routeFromAddMs,
      policyMs,
      policyCpuMs,
      nodeDelMs,
      policyVerified: verified.join('; '),
      startMs,
      fillMs,
      fillFailures,
      idle,
      churn,
      api: {
        startBytesPerAgent: diffApi(af0, api0).bytes / agentsN,
        requestsPerAgentStart: diffApi(apiStart, api0).requests / agentsN,
        requestsPerAgentFill: apiChurn.requests / agentsN,
        requestsPerAgentIdle: apiIdle.requests / agentsN,
        watchesPerAgent: diffApi(ai1, api0).watches / agentsN,
        bytesPerAgentPerSecIdle: apiIdle.bytes / agentsN / (idleWall / 1000),
        bytesPerAgentPerSecChurn: apiChurn.bytes / agentsN / (churnWall / 1000),
      },
      load: loads,
    };
    if (e0 && ef0 && ef1 && ei0 && ei1) {
      const rate = (a: Record<string, number>, b: Record<string, number>, ms: number): Rates => ({
        eventsPerAgentPerSec: (a['events']! - b['events']!) / agentsN / (ms / 1000),
        bytesPerAgentPerSec: (a['sentBytes']! - b['sentBytes']!) / agentsN / (ms / 1000),
      });
      result.etcd = {
        startBytesPerAgent: (ef0['sentBytes']! - e0['sentBytes']!) / agentsN,
        watchersPerAgent: (ei1['watchers']! - e0['watchers']!) / agentsN,
        idle: rate(ei1, ei0, idleWall),
        churn: rate(ef1, ef0, churnWall),
        cpuPctIdle: ((eci1 - eci0) / idleWall) * 100,
        cpuPctChurn: ((ec1 - ec0) / churnWall) * 100,
      };
    }
    return result;
  } finally {
    await res.close();
    current = undefined;
  }
}

/** The /28 block of an IPv4 address. */
function blockOf(ip: string): string {
  const n = ip.split('.').reduce((a, x) => a * 256 + Number(x), 0);
  const b = n - (n % (1 << (32 - BLOCK)));
  return `${[24, 16, 8, 0].map((s) => Math.floor(b / 2 ** s) % 256).join('.')}/${BLOCK}`;
}

function snapshotApi(counts: Map<string, ApiCount>): { requests: number; watches: number; bytes: number } {
  let requests = 0;
  let watches = 0;
  let bytes = 0;
  for (const [who, c] of counts) {
    if (who === HOST_IP) continue;
    requests += c.requests;
    watches += c.watches;
    bytes += c.bytesDown + c.bytesUp;
  }
  return { requests, watches, bytes };
}
function diffApi(a: ReturnType<typeof snapshotApi>, b: ReturnType<typeof snapshotApi>): ReturnType<typeof snapshotApi> {
  return { requests: a.requests - b.requests, watches: a.watches - b.watches, bytes: a.bytes - b.bytes };
}

export async function main(argv: string[]): Promise<void> {
  const o = options(argv);
  if (process.getuid?.() !== 0 || !process.env['NETPLUGIN_HOST_NETNS'])
    throw new Error('run as root inside scripts/in-netns (npm run bench:scale does)');
  for (const f of ['dist/netplugin.cjs', 'dist/netplugin-node.cjs'])
    if (!existsSync(join(ROOT, f))) throw new Error(`${f} is missing: npm run build:ts`);
  process.on('exit', () => {
    current?.cleanupSync();
    killMemoryRun();
  });
  for (const sig of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) {
    process.on(sig, () => {
      process.stderr.write(`\nbench-scale: ${sig}: cleaning up\n`);
      process.exit(130);
    });
  }
  if (o.remote) {
    console.log(
      '| remote endpoints in the datastore | agent RSS MiB | agent CPU to start (ms) | start (s) | agent CPU per remote endpoint change (ms) | load |',
    );
    console.log('|---:|---:|---:|---:|---:|---|');
    for (const n of o.remote) {
      const r = await memoryRun(n);
      console.log(
        `| ${r.remote} | ${f1(r.rssMiB)} | ${f1(r.startCpuMs)} | ${f1(r.startMs / 1000)} | ${f1(r.cpuPerEventMs)} | ${r.load} |`,
      );
    }
    return;
  }
  const results: RunResult[] = [];
  for (const N of o.nodes) for (const mode of o.modes) results.push(await run(o, N, mode));
  const ms = (xs: number[], p: number): string => f1(q(xs, p));
  console.log(
    `\nScale: ${o.podsPerNode} pods per node through the agents, /${BLOCK} blocks, ${o.policies} policies, ${cpus().length} CPUs\n`,
  );
  console.log(
    'Route: from the block write (seen by an observer watching the datastore) to the route in each other node; (ADD: from the start of the ADD that claimed it).\n',
  );
  console.log(
    '| nodes | datastore | route p50 / p99 ms | policy p50 / p99 ms | node deleted p50 / p99 ms | agent idle CPU % p50 / max | idle RSS MiB p50 / max | churn CPU % p50 / max | churn peak RSS max | load (fill; idle; end) |',
  );
  console.log('|---:|---|---:|---:|---:|---:|---:|---:|---:|---|');
  for (const r of results) {
    console.log(
      `| ${r.nodes} | ${r.mode} | ${ms(r.routeMs, 0.5)} / ${ms(r.routeMs, 0.99)} (ADD: ${ms(r.routeFromAddMs, 0.5)} / ${ms(r.routeFromAddMs, 0.99)}; n=${r.routeMs.length}) | ${ms(r.policyMs, 0.5)} / ${ms(r.policyMs, 0.99)} (n=${r.policyMs.length}) | ${ms(r.nodeDelMs, 0.5)} / ${ms(r.nodeDelMs, 0.99)} (n=${r.nodeDelMs.length}) | ${ms(r.idle.cpuPct, 0.5)} / ${f1(Math.max(...r.idle.cpuPct))} | ${ms(r.idle.rssMiB, 0.5)} / ${f1(Math.max(...r.idle.rssMiB))} | ${ms(r.churn.cpuPct, 0.5)} / ${f1(Math.max(...r.churn.cpuPct))} | ${f1(Math.max(...r.churn.rssMiB))} | ${r.load
        .filter((l) => !l.startsWith('policy'))
        .map((l) => l.split(' ').slice(1, 2)[0])
        .join('; ')} |`,
    );
  }
  console.log(
    '\n| nodes | datastore | etcd watchers / agent | etcd events/s/agent idle; churn | etcd bytes/s/agent idle; churn | etcd CPU % idle; churn | API req/agent start; fill; idle | API watches / agent | API bytes/s/agent idle; churn | start bytes/agent etcd; API | agents up (s) | fill (s) |',
  );
  console.log('|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|');
  for (const r of results) {
    const e = r.etcd;
    console.log(
      `| ${r.nodes} | ${r.mode} | ${e ? f1(e.watchersPerAgent) : '–'} | ${e ? `${f1(e.idle.eventsPerAgentPerSec)}; ${f1(e.churn.eventsPerAgentPerSec)}` : '–'} | ${e ? `${f1(e.idle.bytesPerAgentPerSec)}; ${f1(e.churn.bytesPerAgentPerSec)}` : '–'} | ${e ? `${f1(e.cpuPctIdle)}; ${f1(e.cpuPctChurn)}` : '–'} | ${f1(r.api.requestsPerAgentStart)}; ${f1(r.api.requestsPerAgentFill)}; ${f1(r.api.requestsPerAgentIdle)} | ${f1(r.api.watchesPerAgent)} | ${f1(r.api.bytesPerAgentPerSecIdle)}; ${f1(r.api.bytesPerAgentPerSecChurn)} | ${e ? f1(e.startBytesPerAgent) : '–'}; ${f1(r.api.startBytesPerAgent)} | ${f1(r.startMs / 1000)} | ${f1(r.fillMs / 1000)} |`,
    );
  }
  for (const r of results)
    console.log(
      `\n${r.nodes} ${r.mode}: agent CPU per policy p50 ${f1(q(r.policyCpuMs, 0.5))} ms, max ${f1(Math.max(...r.policyCpuMs))} ms`,
    );
  for (const r of results)
    console.log(
      `\n${r.nodes} ${r.mode}: policy traffic check: ${r.policyVerified}; fill failures ${r.fillFailures}; load ${r.load.join(', ')}`,
    );
  if (o.json) writeFileSync(o.json, JSON.stringify(results, null, 2) + '\n');
  const targets: Array<[string, boolean]> = [];
  for (const r of results) {
    targets.push([`${r.nodes} ${r.mode}: route p99 <= 1 s`, (q(r.routeMs, 0.99) ?? Infinity) <= 1000]);
    targets.push([`${r.nodes} ${r.mode}: policy p99 <= 1 s`, (q(r.policyMs, 0.99) ?? Infinity) <= 1000]);
    targets.push([`${r.nodes} ${r.mode}: agent idle CPU <= 1 % (max)`, Math.max(...r.idle.cpuPct) <= 1]);
    targets.push([`${r.nodes} ${r.mode}: agent RSS <= 120 MiB (max)`, Math.max(...r.churn.rssMiB) <= 120]);
  }
  for (const [name, ok] of targets) console.log(`  ${ok ? 'met ' : 'MISS'} ${name}`);
}
