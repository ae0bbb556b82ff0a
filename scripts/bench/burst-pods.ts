// The pod burst (npm run bench:burst, second part; scripts/bench-burst-pods.mjs):
// 110 pods (Kubernetes' default maximum per node) ADDed at once on one node,
// as a kubelet does when a deployment scales out or a node is drained onto
// this one, with 200 Kubernetes NetworkPolicies (namespace and pod selectors)
// in force. Side by side in one run:
//   agent     the native shim -> the resident agent (policy type k8s; each ADD
//             is held until its pod's policy is programmed, policy_setup_timeout_seconds)
//   perexec   the same shim with no agent: its per-exec fallback (no policy
//             controller runs, so nothing holds the ADD: what a node whose agent
//             is down does; its pods stay dropped until the agent programs them)
//   ptp       Debian's ptp + host-local, no policy (the baseline)
// then DEL of all 110 on each path.
//
// Ready with policy: from the first ADD until every pod is reachable by a peer
// its policy allows and unreachable by the peers it denies, by real traffic:
// three prober pods on the node (namespace peers-a role=client: allowed;
// peers-a role=other: denied by the pod selector; peers-d role=client: denied
// by the namespace selector) each send one TCP SYN per pod to a port nothing
// listens on: the pod's kernel answers RST when the SYN got through, nothing
// when policy (or the "not programmed yet" drop) stopped it. The allowed
// prober retries every pod from the moment its ADD returned until it answers;
// the denied ones probe it then, once, and must see no answer.
//
// Etcd datastore (a throwaway local etcd); pods' labels from the fake
// Kubernetes API server; the objects kube-controllers would write (profiles
// kns.* / ksa.*, policies knp.default.*) are written with its conversions.
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
import { cpus, tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { openDatastore } from '../../src/datastore/index.js';
import type { Datastore } from '../../src/datastore/types.js';
import { convertK8sNetworkPolicy, type KubeNetworkPolicy } from '../../src/model/k8s-networkpolicy.js';
import { namespaceToProfile, serviceAccountToProfile } from '../../src/model/profiles.js';
import { freePort, startEtcd, type EtcdServer } from '../../test/support/etcd.js';
import { startFakeApiServer, writeKubeconfig, type FakeApiServer } from '../../test/support/fake-apiserver.js';
import { childrenCpuMs, execCni, mapLimit, processCpuMs, quantile, waitSocket, type CniRun } from './lib.mjs';
import { reached, startProber, type Prober } from './probe.js';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '../..');
const PROBE_PORT = 80;

interface Opts {
  pods: number;
  policies: number;
  namespaces: number;
  paths: string[];
  steps: boolean;
  timeoutMs: number;
  cpuProf: string | undefined;
}

function options(argv: string[]): Opts {
  const { values } = parseArgs({
    args: argv,
    options: {
      pods: { type: 'string', default: '110' },
      policies: { type: 'string', default: '200' },
      namespaces: { type: 'string', default: '10' },
      paths: { type: 'string', default: 'agent,ptp,perexec' },
      steps: { type: 'boolean', default: false },
      'ready-timeout': { type: 'string', default: '60' },
      'cpu-prof': { type: 'string' },
    },
  });
  const int = (name: string, v: string, lo: number, hi: number): number => {
    const n = Number(v);
    if (!Number.isInteger(n) || n < lo || n > hi)
      throw new Error(`--${name} '${v}' is not an integer from ${lo} to ${hi}`);
    return n;
  };
  const paths = values.paths.split(',');
  for (const p of paths)
    if (!['agent', 'perexec', 'ptp'].includes(p)) throw new Error(`--paths: '${p}' is not one of agent,perexec,ptp`);
  return {
    pods: int('pods', values.pods, 1, 500),
    policies: int('policies', values.policies, 0, 5000),
    namespaces: int('namespaces', values.namespaces, 1, 100),
    paths,
    steps: values.steps,
    timeoutMs: int('ready-timeout', values['ready-timeout'], 1, 600) * 1000,
    cpuProf: values['cpu-prof'],
  };
}

const fmt = (x: number | undefined): string =>
  x === undefined ? '-' : x >= 1000 ? `${(x / 1000).toFixed(2)} s` : `${x.toFixed(x < 10 ? 1 : 0)} ms`;
const load = (): string => readFileSync('/proc/loadavg', 'utf8').split(' ').slice(0, 3).join(' ');

export async function main(argv: string[]): Promise<void> {
  const o = options(argv);
  if (process.getuid?.() !== 0 || !process.env['NETPLUGIN_HOST_NETNS'])
    throw new Error('run as root inside scripts/in-netns (npm run bench:burst does)');
  const shim = [
    join(ROOT, 'build/shim/netplugin-shim'),
    join(ROOT, `prebuilds/linux-${process.arch}/netplugin-shim`),
  ].find((p) => existsSync(p));
  if (!shim) throw new Error('the native shim is missing: npm run build:shim');
  for (const f of ['dist/netplugin.cjs', 'dist/netplugin-node.cjs', 'dist/netpluginctl.mjs'])
    if (!existsSync(join(ROOT, f))) throw new Error(`${f} is missing: npm run build:ts`);

  const tmp = mkdtempSync(join(tmpdir(), 'netplugin-burst-pods-'));
  const netnses: string[] = [];
  const probers: Prober[] = [];
  let etcd: EtcdServer | undefined;
  let api: FakeApiServer | undefined;
  let ds: Datastore | undefined;
  let agent: ChildProcess | undefined;
  let cleaned = false;
  const cleanup = (): void => {
    if (cleaned) return;
    cleaned = true;
    for (const p of probers) p.stop();
    if (agent && agent.exitCode === null) agent.kill('SIGKILL');
    for (const n of netnses) {
      try {
        execFileSync('ip', ['netns', 'del', n], { stdio: 'ignore' });
      } catch {
        /* gone */
      }
    }
    void ds?.close().catch(() => undefined);
    void etcd?.stop();
    void api?.stop();
    rmSync(tmp, { recursive: true, force: true });
  };
  process.on('exit', cleanup);
  for (const sig of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) process.on(sig, () => process.exit(130));
  try {
    etcd = await startEtcd();
    api = await startFakeApiServer({});
    const kubeconfig = writeKubeconfig(tmp, api);
    ds = await openDatastore({ datastore_type: 'etcdv3', etcd_endpoints: etcd.endpoint });
    execFileSync(process.execPath, [join(ROOT, 'dist/netpluginctl.mjs'), 'datastore', 'init'], {
      env: { PATH: process.env['PATH'], ETCD_ENDPOINTS: etcd.endpoint },
      stdio: ['ignore', 'ignore', 'inherit'],
    });
    await ds.create({
      apiVersion: 'netplugin.org/v3',
      kind: 'IPPool',
      metadata: { name: 'burst' },
      spec: { cidr: '10.78.0.0/16', blockSize: 26, natOutgoing: false },
    } as never);
    // A node's uplink address (as in npm run bench): the kernel's source-address choice for each pod route.
    execFileSync('ip', ['addr', 'add', '192.0.2.1/32', 'dev', 'lo']);

    // ---- namespaces, policies, pods in the API ----
    const burstNs = Array.from({ length: o.namespaces }, (_, i) => `burst${i}`);
    const nsLabels: Record<string, Record<string, string>> = {
      'peers-a': { team: 'allowed' },
      'peers-d': { team: 'denied' },
    };
    for (const n of burstNs) nsLabels[n] = { team: 'burst' };
    for (const [name, labels] of Object.entries(nsLabels)) {
      api.put(`/api/v1/namespaces/${name}`, { apiVersion: 'v1', kind: 'Namespace', metadata: { name, labels } });
      await ds.create(namespaceToProfile({ metadata: { name, labels } }));
      await ds.create(serviceAccountToProfile({ metadata: { name: 'default', namespace: name } }));
    }
    // Pod i: namespace burst<i % n>, app a<i / n>; policy k of a namespace selects app a<k % apps>
    // and admits TCP 80 and 8000+k from role=client pods of team=allowed namespaces. With
    // 200 policies over 10 namespaces each pod is selected by one or two policies.
    const apps = Math.ceil(o.pods / o.namespaces);
    const perNs = Math.ceil(o.policies / o.namespaces);
    const t0p = performance.now();
    for (let k = 0; k < o.policies; k++) {
      const ns = burstNs[k % o.namespaces]!;
      const j = Math.floor(k / o.namespaces);
      const np: KubeNetworkPolicy = {
        metadata: { name: `allow-clients-${j}`, namespace: ns },
        spec: {
          podSelector: { matchLabels: { app: `a${j % apps}` } },
          policyTypes: ['Ingress'],
          ingress: [
            {
              from: [
                {
                  namespaceSelector: { matchLabels: { team: 'allowed' } },
                  podSelector: { matchLabels: { role: 'client' } },
                },
              ],
              ports: [
                { protocol: 'TCP', port: PROBE_PORT },
                { protocol: 'TCP', port: 8000 + j },
              ],
            },
          ],
        },
      };
      api.put(`/apis/networking.k8s.io/v1/namespaces/${ns}/networkpolicies/${np.metadata.name}`, {
        apiVersion: 'networking.k8s.io/v1',
        kind: 'NetworkPolicy',
        ...np,
      });
      await ds.create(convertK8sNetworkPolicy(np));
    }
    const policiesMs = performance.now() - t0p;
    const podName = (i: number): { ns: string; name: string; labels: Record<string, string> } => ({
      ns: burstNs[i % o.namespaces]!,
      name: `p${i}`,
      labels: { app: `a${Math.floor(i / o.namespaces)}` },
    });
    for (let i = 0; i < o.pods; i++) {
      const p = podName(i);
      api.put(`/api/v1/namespaces/${p.ns}/pods/${p.name}`, {
        apiVersion: 'v1',
        kind: 'Pod',
        metadata: { name: p.name, namespace: p.ns, uid: `uid-${p.ns}-${p.name}`, labels: p.labels },
        spec: { nodeName: 'burst-node', serviceAccountName: 'default', containers: [{ name: 'main' }] },
      });
    }
    const peers = [
      { ns: 'peers-a', name: 'client', labels: { role: 'client' }, allowed: true },
      { ns: 'peers-a', name: 'other', labels: { role: 'other' }, allowed: false },
      { ns: 'peers-d', name: 'client', labels: { role: 'client' }, allowed: false },
    ];
    for (const p of peers)
      api.put(`/api/v1/namespaces/${p.ns}/pods/${p.name}`, {
        apiVersion: 'v1',
        kind: 'Pod',
        metadata: { name: p.name, namespace: p.ns, uid: `uid-${p.ns}-${p.name}`, labels: p.labels },
        spec: { nodeName: 'burst-node', serviceAccountName: 'default', containers: [{ name: 'main' }] },
      });

    // ---- installed binaries, the agent ----
    const bin = join(tmp, 'bin', 'netplugin');
    mkdirSync(dirname(bin), { recursive: true });
    copyFileSync(shim, bin);
    chmodSync(bin, 0o755);
    writeFileSync(join(tmp, 'bin', 'netplugin.fallback'), `${process.execPath}\n${ROOT}\n`);
    const socket = join(tmp, 'run', 'cni.sock');
    const statusDir = join(tmp, 'status');
    const logFile = join(tmp, 'plugin.log');
    const conf = {
      cniVersion: '1.0.0',
      name: 'k8s-pod-network',
      type: 'netplugin',
      nodename: 'burst-node',
      etcd_endpoints: etcd.endpoint,
      kubernetes: { kubeconfig },
      policy: { type: 'k8s' },
      ipam: { type: 'netplugin-ipam' },
      ipam_lock_file: join(tmp, 'ipam.lock'),
      host_veth_prefix: 'npq',
      endpoint_status_dir: statusDir,
      policy_setup_timeout_seconds: 30,
      ...(o.steps ? { log_level: 'debug', log_format: 'json', log_file_path: logFile } : {}),
    };
    const confPath = join(tmp, '10-netplugin.conflist');
    writeFileSync(confPath, JSON.stringify({ cniVersion: '1.0.0', name: conf.name, plugins: [conf] }));
    // The per-exec fallback has no agent to hold its ADD for: no policy wait (see the header).
    const { policy_setup_timeout_seconds: _held, ...perexecConf } = conf;
    let agentLog = '';
    const metricsAddr = `127.0.0.1:${await freePort()}`;
    const startAgent = async (): Promise<void> => {
      agent = spawn(
        process.execPath,
        [
          // --cpu-prof DIR: the agent writes a V8 profile there at exit (scripts/bench/profile.mjs DIR).
          ...(o.cpuProf ? ['--cpu-prof', `--cpu-prof-dir=${o.cpuProf}`] : []),
          join(ROOT, 'dist/netplugin-node.cjs'),
          '--config',
          confPath,
          '--socket',
          socket,
          '--nodename',
          'burst-node',
          '--no-routes',
          '--log-level',
          'WARNING',
          '--metrics-addr',
          metricsAddr,
        ],
        { env: { PATH: process.env['PATH'] }, stdio: ['ignore', 'ignore', 'pipe'] },
      );
      agent.stderr!.on('data', (d: Buffer) => (agentLog = (agentLog + d.toString()).slice(-100_000)));
      await waitSocket(socket, 60_000, () => (agent!.exitCode !== null ? `the agent exited: ${agentLog}` : undefined));
    };
    const stopAgent = async (): Promise<void> => {
      const a = agent!;
      if (a.exitCode !== null) return;
      const gone = new Promise((r) => a.once('exit', r));
      a.kill('SIGTERM');
      await gone;
    };

    const newNetns = (tag: string): string => {
      const n = `bp${process.pid}-${tag}`;
      execFileSync('ip', ['netns', 'add', n]);
      execFileSync('ip', ['-n', n, 'link', 'set', 'lo', 'up']);
      netnses.push(n);
      return n;
    };
    const base = { PATH: process.env['PATH'], CNI_PATH: '/usr/lib/cni', CNI_IFNAME: 'eth0' };
    const k8sArgs = (ns: string, name: string): string =>
      `IgnoreUnknown=1;K8S_POD_NAMESPACE=${ns};K8S_POD_NAME=${name};K8S_POD_INFRA_CONTAINER_ID=x`;
    const ipOf = (r: CniRun): string =>
      (JSON.parse(r.stdout) as { ips: Array<{ address: string }> }).ips[0]!.address.split('/')[0]!;
    const why = (r: CniRun): string => `exit ${r.code ?? r.signal}: ${r.stdout.slice(0, 400)} ${r.stderr.slice(-400)}`;

    await startAgent();
    // The prober pods, through the agent (not timed).
    const proberOf: Array<{ prober: Prober; allowed: boolean; label: string }> = [];
    for (const [k, p] of peers.entries()) {
      const n = newNetns(`peer${k}`);
      const r = await execCni(
        bin,
        {
          ...base,
          NETPLUGIN_AGENT_SOCKET: socket,
          CNI_COMMAND: 'ADD',
          CNI_CONTAINERID: `peer${k}-${process.pid}`,
          CNI_NETNS: `/var/run/netns/${n}`,
          CNI_ARGS: k8sArgs(p.ns, p.name),
        },
        JSON.stringify(conf),
      );
      if (r.code !== 0) throw new Error(`prober pod ${p.ns}/${p.name}: ${why(r)}`);
      const prober = await startProber(n);
      probers.push(prober);
      proberOf.push({ prober, allowed: p.allowed, label: `${p.ns}/${p.name}` });
    }
    const podNs = Array.from({ length: o.pods }, (_, i) => newNetns(`p${i}`));
    console.error(
      `burst: ${o.pods} pods, ${o.policies} policies in ${o.namespaces} namespaces (written in ${fmt(policiesMs)}), ${cpus().length} CPUs, load ${load()}`,
    );

    interface Phase {
      path: string;
      command: string;
      lat: number[];
      wallMs: number;
      failures: string[];
      childCpuMs: number;
      agentWork?: string;
      readyMs?: number;
      readyP50?: number;
      deniedLeaks?: number;
      agentCpuMs?: number;
      load: string;
    }
    const phases: Phase[] = [];
    const run = async (path: string, command: 'ADD' | 'DEL', ids: string[], withProbes: boolean): Promise<void> => {
      const stdin =
        path === 'ptp'
          ? JSON.stringify({
              cniVersion: '1.0.0',
              name: 'burst-ptp',
              type: 'ptp',
              ipMasq: false,
              ipam: { type: 'host-local', ranges: [[{ subnet: '10.79.0.0/16' }]], dataDir: join(tmp, 'host-local') },
            })
          : JSON.stringify(path === 'agent' ? conf : perexecConf);
      const sock = path === 'agent' ? socket : join(tmp, 'run', 'no-agent.sock');
      const bin0 = path === 'ptp' ? '/usr/lib/cni/ptp' : bin;
      const ready: number[] = [];
      let leaks = 0;
      const probing: Array<Promise<void>> = [];
      const a0 = agent && agent.exitCode === null ? processCpuMs(agent.pid!) : undefined;
      const m0 = path === 'agent' ? await agentMetrics(metricsAddr) : undefined;
      const k0 = childrenCpuMs();
      const t0 = performance.now();
      const deadline = t0 + o.timeoutMs;
      const rs = await mapLimit(ids, ids.length, async (id, i) => {
        const p = podName(i);
        const r = await execCni(
          bin0,
          {
            ...base,
            NETPLUGIN_AGENT_SOCKET: sock,
            CNI_COMMAND: command,
            CNI_CONTAINERID: id,
            CNI_NETNS: `/var/run/netns/${podNs[i]}`,
            CNI_ARGS: k8sArgs(p.ns, p.name),
          },
          stdin,
        );
        if (withProbes && r.code === 0) {
          const ip = ipOf(r);
          probing.push(
            (async () => {
              const allow = proberOf.find((x) => x.allowed)!.prober;
              // Retried at once: a drop shows as no answer within 100 ms (the RST of a reachable pod takes < 1 ms).
              for (;;) {
                if (reached(await allow.probe(ip, PROBE_PORT, 100))) break;
                if (performance.now() > deadline) return;
              }
              const at = performance.now() - t0;
              const denied = await Promise.all(
                proberOf.filter((x) => !x.allowed).map((x) => x.prober.probe(ip, PROBE_PORT, 1000)),
              );
              if (denied.some(reached)) leaks++;
              else ready.push(at);
            })(),
          );
        }
        return r;
      });
      const wallMs = performance.now() - t0;
      await Promise.all(probing);
      const ph: Phase = {
        path,
        command,
        wallMs,
        lat: rs.map((r) => r.ms),
        failures: rs.filter((r) => r.code !== 0).map(why),
        load: load(),
        childCpuMs: childrenCpuMs() - k0,
        ...(a0 !== undefined && agent && agent.exitCode === null ? { agentCpuMs: processCpuMs(agent.pid!) - a0 } : {}),
      };
      if (withProbes) {
        ph.deniedLeaks = leaks;
        if (ready.length === ids.length) ph.readyMs = Math.max(...ready);
        if (ready.length) ph.readyP50 = quantile(ready, 0.5);
        if (ready.length < ids.length)
          ph.failures.push(
            `${ids.length - ready.length - leaks} pods never reachable by the allowed peer within ${o.timeoutMs / 1000} s; ${leaks} reachable by a denied one`,
          );
      }
      if (m0) ph.agentWork = diffMetrics(await agentMetrics(metricsAddr), m0);
      phases.push(ph);
      const q = (p: number): string => fmt(quantile(ph.lat, p));
      console.error(
        `  ${path.padEnd(7)} ${command} p50 ${q(0.5)} p99 ${q(0.99)} max ${q(1)} wall ${fmt(wallMs)}${ph.readyMs !== undefined ? ` ready-with-policy ${fmt(ph.readyMs)}` : ''} failures ${ph.failures.length} load ${ph.load}`,
      );
      for (const f of ph.failures.slice(0, 3)) console.error(`    ${f}`);
    };
    const idsOf = (path: string): string[] => Array.from({ length: o.pods }, (_, i) => `${path}-${i}-${process.pid}`);
    for (const path of o.paths) {
      if (path === 'perexec') await stopAgent();
      if (path === 'agent' && agent?.exitCode !== null) await startAgent();
      await run(path, 'ADD', idsOf(path), path === 'agent');
      await run(path, 'DEL', idsOf(path), false);
    }
    // A profile is written at a clean exit only (the cleanup's SIGKILL would lose it).
    if (o.cpuProf && agent) await stopAgent();

    // ---- report ----
    const row = (ph: Phase): string => {
      const q = (p: number): string => fmt(quantile(ph.lat, p));
      const ready =
        ph.readyMs !== undefined
          ? `${fmt(ph.readyMs)} (p50 ${fmt(ph.readyP50)})`
          : ph.deniedLeaks !== undefined
            ? 'NOT READY'
            : '–';
      // The execs' own CPU (shims, per-exec Node, ptp and host-local), plus the agent's on the agent path.
      const cpu = fmt((ph.childCpuMs + (ph.path === 'agent' ? (ph.agentCpuMs ?? 0) : 0)) / o.pods);
      const agentCpu = ph.path === 'agent' && ph.agentCpuMs !== undefined ? fmt(ph.agentCpuMs / o.pods) : '–';
      return `| ${ph.path} | ${ph.command} | ${q(0.5)} | ${q(0.9)} | ${q(0.99)} | ${q(1)} | ${fmt(ph.wallMs)} | ${ready} | ${cpu} | ${agentCpu} | ${ph.failures.length} | ${ph.load} |`;
    };
    console.log(
      `\nPod burst: ${o.pods} pods at once on one node, ${o.policies} NetworkPolicies (${perNs} per namespace, ${o.namespaces} namespaces), etcd, ${cpus().length} CPUs\n`,
    );
    console.log(
      '| path | cmd | p50 | p90 | p99 | max | wall | all ready with policy (traffic) | CPU/pod (all) | of it the agent | failures | load (1/5/15 min) |',
    );
    console.log('|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|');
    for (const ph of phases) console.log(row(ph));
    const get = (path: string, cmd: string): Phase | undefined =>
      phases.find((p) => p.path === path && p.command === cmd);
    const ratio = (a?: Phase, b?: Phase): string =>
      a && b ? (quantile(a.lat, 0.5) / quantile(b.lat, 0.5)).toFixed(2) : '-';
    console.log(
      `\nADD p50 agent/ptp ${ratio(get('agent', 'ADD'), get('ptp', 'ADD'))}, perexec/ptp ${ratio(get('perexec', 'ADD'), get('ptp', 'ADD'))}; DEL p50 agent/ptp ${ratio(get('agent', 'DEL'), get('ptp', 'DEL'))}`,
    );
    const targets: Array<[string, boolean | undefined]> = [
      [
        'agent: all ready with policy <= 1 s',
        (() => {
          const p = get('agent', 'ADD');
          return p ? p.readyMs !== undefined && p.readyMs <= 1000 : undefined;
        })(),
      ],
      [
        'agent: ADD p99 <= 500 ms',
        (() => {
          const p = get('agent', 'ADD');
          return p ? quantile(p.lat, 0.99) <= 500 : undefined;
        })(),
      ],
      [
        'agent: DEL p99 <= 500 ms',
        (() => {
          const p = get('agent', 'DEL');
          return p ? quantile(p.lat, 0.99) <= 500 : undefined;
        })(),
      ],
      [
        'per-exec: no failure, ADD p99 <= 5 s',
        (() => {
          const p = get('perexec', 'ADD');
          return p ? !p.failures.length && quantile(p.lat, 0.99) <= 5000 : undefined;
        })(),
      ],
      [
        'per-exec: no failure, DEL p99 <= 5 s',
        (() => {
          const p = get('perexec', 'DEL');
          return p ? !p.failures.length && quantile(p.lat, 0.99) <= 5000 : undefined;
        })(),
      ],
    ];
    for (const ph of phases)
      if (ph.agentWork) console.log(`\nagent ${ph.command}, what it did (its /metrics): ${ph.agentWork}`);
    for (const [name, ok] of targets) console.log(`  ${ok === undefined ? 'n/a ' : ok ? 'met ' : 'MISS'} ${name}`);
    if (o.steps && existsSync(logFile)) console.log('\n' + stepReport(readFileSync(logFile, 'utf8')));
  } finally {
    cleanup();
  }
}

/** The agent's counters: sums of the histograms and counters the burst explains itself with, by series. */
async function agentMetrics(addr: string): Promise<Map<string, number>> {
  const text = await (await fetch(`http://${addr}/metrics`)).text();
  const out = new Map<string, number>();
  const keep =
    /^(netplugin_policy_program_duration_seconds_(?:sum|count)|netplugin_policy_nft_commands_total|netplugin_datastore_request_duration_seconds_(?:sum|count)|netplugin_cni_request_duration_seconds_sum)(\{[^}]*\})? ([0-9.e+-]+)$/;
  for (const line of text.split('\n')) {
    const m = keep.exec(line);
    if (!m) continue;
    // Datastore calls by operation and kind; the rest by mode/command.
    const labels = [...(m[2] ?? '').matchAll(/(op|operation|kind|mode|command)="([^"]*)"/g)].map((x) => x[2]).join(' ');
    const k = `${m[1]}${labels ? ` ${labels}` : ''}`;
    out.set(k, (out.get(k) ?? 0) + Number(m[3]));
  }
  return out;
}

function diffMetrics(a: Map<string, number>, b: Map<string, number>): string {
  const d = (k: string): number => (a.get(k) ?? 0) - (b.get(k) ?? 0);
  const parts: string[] = [];
  for (const mode of ['full', 'incremental']) {
    const n = d(`netplugin_policy_program_duration_seconds_count ${mode}`);
    if (n)
      parts.push(
        `${n} ${mode} policy batches, ${fmt(d(`netplugin_policy_program_duration_seconds_sum ${mode}`) * 1000)} compiling + applying them, ${d(`netplugin_policy_nft_commands_total ${mode}`)} nft commands`,
      );
  }
  const ds = [...a.keys()].filter(
    (k) => k.startsWith('netplugin_datastore_request_duration_seconds_count') && d(k) > 0,
  );
  if (ds.length) {
    parts.push(
      'datastore calls ' +
        ds
          .map((k) => {
            const what = k.slice('netplugin_datastore_request_duration_seconds_count '.length);
            return `${what} ${d(k)} (${fmt(d(`netplugin_datastore_request_duration_seconds_sum ${what}`) * 1000)})`;
          })
          .join(', '),
    );
  }
  return parts.join('; ');
}

/**
 * Where an ADD's time went, from the plugins' debug log (--steps): for each
 * logged step, the time from the previous line of the same container.
 */
function stepReport(log: string): string {
  const byCid = new Map<string, Array<{ t: number; msg: string }>>();
  for (const line of log.split('\n')) {
    let e: Record<string, unknown>;
    try {
      e = JSON.parse(line) as Record<string, unknown>;
    } catch {
      continue;
    }
    const cid = String(e['containerId'] ?? e['cid'] ?? '');
    const t = Date.parse(String(e['time'] ?? e['ts'] ?? ''));
    if (!cid || Number.isNaN(t)) continue;
    const list = byCid.get(cid) ?? [];
    list.push({ t, msg: String(e['msg'] ?? e['message'] ?? '') });
    byCid.set(cid, list);
  }
  const gaps = new Map<string, number[]>();
  for (const list of byCid.values()) {
    for (let i = 1; i < list.length; i++) {
      const k = list[i]!.msg.slice(0, 60);
      gaps.set(k, [...(gaps.get(k) ?? []), list[i]!.t - list[i - 1]!.t]);
    }
  }
  const rows = [...gaps.entries()].sort((a, b) => quantile(b[1], 0.5) - quantile(a[1], 0.5)).slice(0, 15);
  return [
    '| step (log line, time since the previous line of the same pod) | n | p50 | p99 |',
    '|---|---:|---:|---:|',
    ...rows.map(([k, xs]) => `| ${k} | ${xs.length} | ${fmt(quantile(xs, 0.5))} | ${fmt(quantile(xs, 0.99))} |`),
  ].join('\n');
}
