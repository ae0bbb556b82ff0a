#!/usr/bin/env node
// The CNI hot-path benchmark (npm run bench). In one run, side by side:
//   ptp        Debian's /usr/lib/cni/ptp with host-local IPAM (a /16): the baseline
//   agent      netplugin through the installed native shim and a resident agent
//   perexec    netplugin through the same shim with no agent: its per-exec
//              fallback (shim -> exec node dist/netplugin.mjs), as on a node
//              whose agent is down
// For each concurrency c, each path ADDs every pod and then DELs every pod,
// c plugin execs at a time, exec'd as a runtime does (env + netconf on stdin,
// a clean environment: no NODE_EXTRA_CA_CERTS). The paths take turns within
// each concurrency, in rotating order, so drift on a shared machine hits all.
// Ours uses a throwaway local etcd. Also measured: the harness's exec floor
// (/bin/true) and the pure dataplane (setupWorkload/teardownWorkload in-process).
//
// Must run inside a throwaway "host" namespace (npm run bench does:
// bash scripts/in-netns node scripts/bench.mjs), so the real root namespace is
// never touched. Pod namespaces are created before, and removed after, the
// timed region; everything is removed on exit, also on Ctrl-C.
//
//   node scripts/bench.mjs [--quick] [--pods N] [--concurrency 1,4,16] [--cpu-prof] [--out DIR]
//   --quick     50 pods, c = 1 and 4 (about two minutes)
//   --cpu-prof  profile the agent (node --cpu-prof) and print its top self-time functions;
//               each per-exec plugin run writes a profile too (kept, not summarised)
// --agent-args=F  extra netplugin-node flags, space-separated (comparing agent options: '--agent-args=--max-concurrent
// 8')
//   --paths L   only these of ptp,agent,perexec (profiling, quick checks; not for the published table)
//   --out DIR   where latest.{json,md,svg} go (default bench/results)
//   --scale N   the scale cell: agent ADD p50 of one more pod with N pods on the node,
//               against the first pod's (default 1000, 0 skips it; --quick skips it)
//   --scale-samples K  ADD+DEL pairs timed on the empty and on the full node (default 15; more for A/B runs)
import { execFileSync, spawn } from 'node:child_process';
import {
  chmodSync,
  copyFileSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { cpus, release, tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import {
  childrenCpuMs,
  etcdWriteCounters,
  execCni,
  mapLimit,
  memoryMiB,
  perPod,
  processCpuMs,
  startEtcd,
  summary,
  threadCpuMs,
  waitSocket,
} from './bench/lib.mjs';
import { markdown, svg } from './bench/report.mjs';
import { formatProfile, profileFiles, summariseProfiles } from './bench/profile.mjs';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');

function usage(msg) {
  console.error(
    `bench: ${msg}\nusage: node scripts/bench.mjs [--quick] [--pods N] [--concurrency 1,4,16] [--paths ` +
      `ptp,agent,perexec] [--scale N] [--scale-samples K] [--agent-args 'FLAGS'] [--cpu-prof] [--out DIR]`,
  );
  process.exit(2);
}

let opts;
try {
  ({ values: opts } = parseArgs({
    options: {
      quick: { type: 'boolean' },
      pods: { type: 'string' },
      concurrency: { type: 'string' },
      'cpu-prof': { type: 'boolean' },
      paths: { type: 'string' },
      out: { type: 'string' },
      scale: { type: 'string' },
      'scale-samples': { type: 'string' },
      'agent-args': { type: 'string' },
    },
  }));
} catch (e) {
  usage(e.message);
}
const PODS = opts.pods !== undefined ? Number(opts.pods) : opts.quick ? 50 : 200;
if (!Number.isInteger(PODS) || PODS < 1 || PODS > 4000) usage(`--pods '${opts.pods}' is not an integer from 1 to 4000`);
const CONC = (opts.concurrency ?? (opts.quick ? '1,4' : '1,4,16')).split(',').map(Number);
if (CONC.some((c) => !Number.isInteger(c) || c < 1 || c > 256))
  usage(`--concurrency '${opts.concurrency}' must be a comma-separated list of integers from 1 to 256`);
const OUT = opts.out ?? join(root, 'bench/results');
const SCALE = opts.scale !== undefined ? Number(opts.scale) : opts.quick ? 0 : 1000;
if (!Number.isInteger(SCALE) || SCALE < 0 || SCALE > 4000)
  usage(`--scale '${opts.scale}' is not an integer from 0 to 4000`);
const SCALE_SAMPLES = opts['scale-samples'] !== undefined ? Number(opts['scale-samples']) : 15;
if (!Number.isInteger(SCALE_SAMPLES) || SCALE_SAMPLES < 1 || SCALE_SAMPLES > 1000)
  usage(`--scale-samples '${opts['scale-samples']}' is not an integer from 1 to 1000`);
const ALL_PATHS = ['ptp', 'agent', 'perexec'];
const ONLY = (opts.paths ?? ALL_PATHS.join(',')).split(',');
if (ONLY.some((p) => !ALL_PATHS.includes(p))) usage(`--paths '${opts.paths}': choose from ${ALL_PATHS.join(',')}`);

// ---- preconditions ----
if (process.getuid?.() !== 0) usage('needs root (network namespaces, veths)');
const hostNs = process.env.NETPLUGIN_HOST_NETNS;
let inThrowaway = false;
if (hostNs && existsSync(`/var/run/netns/${hostNs}`)) {
  const a = statSync(`/var/run/netns/${hostNs}`);
  const b = statSync('/proc/self/ns/net');
  inThrowaway = a.ino === b.ino && a.dev === b.dev;
}
if (!inThrowaway)
  usage('run it inside a throwaway host namespace: bash scripts/in-netns node scripts/bench.mjs (npm run bench does)');
const SHIM = [join(root, 'build/shim/netplugin-shim'), join(root, 'prebuilds/linux-x64/netplugin-shim')].find((p) =>
  existsSync(p),
);
const need = [
  [SHIM, 'the native shim: npm run build:shim'],
  [join(root, 'dist/netplugin.mjs'), 'dist/: npm run build:ts'],
  [join(root, 'dist/netplugin-node.cjs'), 'dist/: npm run build:ts'],
  [join(root, 'dist/netpluginctl.mjs'), 'dist/: npm run build:ts'],
  ['/usr/lib/cni/ptp', 'Debian containernetworking-plugins'],
  ['/usr/lib/cni/host-local', 'Debian containernetworking-plugins'],
];
for (const [p, fix] of need) if (!p || !existsSync(p)) usage(`${p ?? 'netplugin-shim'} is missing (${fix})`);

// ---- state to clean up ----
const tag = `b${process.pid}`;
const tmp = mkdtempSync(join(tmpdir(), 'netplugin-bench-'));
const namespaces = [];
let etcd;
let agent;
let cleaned = false;
function cleanup() {
  if (cleaned) return;
  cleaned = true;
  if (agent && agent.exitCode === null && agent.signalCode === null) agent.kill('SIGKILL');
  etcd?.stop();
  // Deleting a pod namespace also deletes its veth pair (both ends).
  for (const n of namespaces.splice(0)) {
    try {
      execFileSync('ip', ['netns', 'del', n], { stdio: 'ignore' });
    } catch {
      /* already gone */
    }
  }
  rmSync(tmp, { recursive: true, force: true });
}
for (const sig of ['SIGINT', 'SIGTERM', 'SIGHUP']) {
  process.on(sig, () => {
    console.error(`\nbench: ${sig}: cleaning up`);
    cleanup();
    process.exit(130);
  });
}
process.on('exit', cleanup);

const log = (s) => process.stderr.write(s + '\n');

async function main() {
  const started = Date.now();
  log(`bench: ${PODS} pods, concurrency ${CONC.join(',')}, ${cpus().length} CPUs; setting up`);
  // ---- a private copy of the package ----
  // The bundles and the addon are copied, as an install would: a rebuild in
  // the working tree during the run (node-gyp removes build/ first) must not
  // break or skew it.
  const pkg = snapshotPackage(join(tmp, 'pkg'));

  // ---- datastore ----
  etcd = await startEtcd();
  const ctlEnv = { PATH: process.env.PATH, ETCD_ENDPOINTS: etcd.endpoint };
  execFileSync(process.execPath, [join(pkg, 'dist/netpluginctl.mjs'), 'datastore', 'init'], {
    env: ctlEnv,
    stdio: ['ignore', 'ignore', 'inherit'],
  });
  const poolDoc = {
    apiVersion: 'netplugin.org/v3',
    kind: 'IPPool',
    metadata: { name: 'bench-pool' },
    spec: { cidr: '10.78.0.0/16', blockSize: 26, natOutgoing: false },
  };
  execFileSync(process.execPath, [join(pkg, 'dist/netpluginctl.mjs'), 'apply', '-f', '-'], {
    env: ctlEnv,
    input: JSON.stringify(poolDoc),
    stdio: ['pipe', 'ignore', 'inherit'],
  });

  // ---- binaries as installed ----
  const agentBin = join(tmp, 'bin-agent', 'netplugin');
  const execBin = join(tmp, 'bin-exec', 'netplugin');
  for (const b of [agentBin, execBin]) {
    mkdirSync(dirname(b), { recursive: true });
    copyFileSync(SHIM, b);
    chmodSync(b, 0o755);
  }
  // Profiles are kept after the run for a closer look (node scripts/bench/profile.mjs DIR).
  const profDir = join(tmpdir(), `netplugin-bench-prof-${process.pid}`);
  // The per-exec install: install-cni writes this file beside the shim (node, package dir).
  // With --cpu-prof each per-exec plugin writes a profile too, through a node wrapper
  // (NODE_OPTIONS may not carry --cpu-prof).
  const perexecProfDir = join(profDir, 'perexec');
  let fallbackNode = process.execPath;
  if (opts['cpu-prof']) {
    fallbackNode = join(tmp, 'node-cpu-prof');
    writeFileSync(
      fallbackNode,
      `#!/bin/sh\nexec '${process.execPath}' --cpu-prof --cpu-prof-dir='${perexecProfDir}' "$@"\n`,
      { mode: 0o755 },
    );
  }
  writeFileSync(join(dirname(execBin), 'netplugin.fallback'), `${fallbackNode}\n${pkg}\n`);
  const socket = join(tmp, 'run', 'cni.sock');
  const noAgent = join(tmp, 'run', 'no-agent.sock');

  // ---- the host namespace as a node has it ----
  // A node's uplink has an address and comes early in the link list. Without
  // any (the throwaway namespace has lo alone), the kernel's choice of a source
  // address for each pod's host route walks every link on the node
  // (inet_select_addr), a per-pod cost that grows with the pods and that no
  // node pays. An address from the documentation range on lo stands in for it.
  execFileSync('ip', ['addr', 'add', '192.0.2.1/32', 'dev', 'lo']);

  // ---- the agent ----
  const agentArgs = [
    ...(opts['cpu-prof'] ? ['--cpu-prof', `--cpu-prof-dir=${profDir}`] : []),
    join(pkg, 'dist/netplugin-node.cjs'),
    '--socket',
    socket,
    '--log-level',
    'WARNING',
    ...(opts['agent-args'] ?? '').split(' ').filter(Boolean),
  ];
  // As deployed: through the .cjs entry, with no tuning from outside.
  agent = spawn(process.execPath, agentArgs, { env: { PATH: process.env.PATH }, stdio: ['ignore', 'ignore', 'pipe'] });
  let agentLog = '';
  agent.stderr.on('data', (d) => {
    agentLog += d;
    if (agentLog.length > 1 << 20) agentLog = agentLog.slice(-(1 << 19));
  });
  await waitSocket(socket, 30_000, () => (agent.exitCode !== null ? `the agent exited: ${agentLog}` : undefined));

  // ---- pods ----
  for (let i = 0; i < PODS; i++) {
    const n = `${tag}-p${i}`;
    execFileSync('ip', ['netns', 'add', n]);
    namespaces.push(n);
  }
  const hostLocalDir = join(tmp, 'host-local');
  const baseEnv = { PATH: process.env.PATH, CNI_PATH: '/usr/lib/cni', CNI_IFNAME: 'eth0' };
  const paths = {
    ptp: {
      bin: '/usr/lib/cni/ptp',
      env: {},
      conf: {
        cniVersion: '1.0.0',
        name: 'bench-ptp',
        type: 'ptp',
        ipMasq: false,
        ipam: { type: 'host-local', ranges: [[{ subnet: '10.79.0.0/16' }]], dataDir: hostLocalDir },
      },
    },
    agent: {
      bin: agentBin,
      env: { NETPLUGIN_AGENT_SOCKET: socket },
      conf: {
        cniVersion: '1.0.0',
        name: 'k8s-pod-network',
        type: 'netplugin',
        nodename: 'bench-node',
        etcd_endpoints: etcd.endpoint,
        ipam: { type: 'netplugin-ipam' },
        ipam_lock_file: join(tmp, 'ipam.lock'),
        host_veth_prefix: 'npb',
      },
    },
    perexec: {
      bin: execBin,
      env: { NETPLUGIN_AGENT_SOCKET: noAgent },
      conf: null,
    },
  };
  paths.perexec.conf = paths.agent.conf;

  // ---- floor ----
  const trueEnv = { ...baseEnv, CNI_COMMAND: 'ADD' };
  const t1 = [];
  for (let i = 0; i < PODS; i++) t1.push((await execCni('/bin/true', trueEnv, '{}')).ms);
  const cMax = Math.max(...CONC);
  const w0 = performance.now();
  await mapLimit(Array.from({ length: PODS }), cMax, () => execCni('/bin/true', trueEnv, '{}'));
  const floor = { c1: summary(t1), cMax: { c: cMax, podsPerSec: PODS / ((performance.now() - w0) / 1000) } };
  log(`bench: exec floor /bin/true p50 ${floor.c1.p50.toFixed(2)} ms`);

  // ---- cells ----
  const cells = [];
  const order = ALL_PATHS.filter((p) => ONLY.includes(p));
  let cellNo = 0;
  async function phase(pathKey, c, command, ids) {
    const p = paths[pathKey];
    const stdin = JSON.stringify(p.conf);
    const cpu0 = childrenCpuMs();
    const a0 = processCpuMs(agent.pid);
    const th0 = pathKey === 'agent' ? threadCpuMs(agent.pid) : undefined;
    const e0 = processCpuMs(etcd.proc.pid);
    const w0c = pathKey === 'ptp' ? undefined : await etcdWriteCounters(etcd.endpoint);
    const w = performance.now();
    const rs = await mapLimit(ids, c, (id, i) =>
      execCni(
        p.bin,
        {
          ...baseEnv,
          ...p.env,
          CNI_COMMAND: command,
          CNI_CONTAINERID: id,
          CNI_NETNS: `/var/run/netns/${namespaces[i]}`,
          CNI_ARGS: `IgnoreUnknown=1;K8S_POD_NAMESPACE=bench;K8S_POD_NAME=pod-${i}`,
        },
        stdin,
      ),
    );
    const wall = performance.now() - w;
    const children = childrenCpuMs() - cpu0;
    const agentCpu = pathKey === 'agent' ? processCpuMs(agent.pid) - a0 : 0;
    // Where the agent's CPU went, by thread kind (main JS thread, dataplane
    // workers, libuv pool, V8 helpers): user and kernel time per pod.
    let agentThreads;
    if (th0) {
      agentThreads = {};
      for (const [tid, t] of Object.entries(threadCpuMs(agent.pid))) {
        const b = th0[tid] ?? { user: 0, sys: 0 };
        const kind = tid === String(agent.pid) ? 'main' : t.comm;
        const k = (agentThreads[kind] ??= { userMsPerPod: 0, sysMsPerPod: 0 });
        k.userMsPerPod += (t.user - b.user) / ids.length;
        k.sysMsPerPod += (t.sys - b.sys) / ids.length;
      }
    }
    const etcdCpu = pathKey === 'ptp' ? 0 : processCpuMs(etcd.proc.pid) - e0;
    // etcd's own count of the writes this phase cost (proposals) and of its WAL fsyncs.
    const etcdWrites = w0c ? perPod(await etcdWriteCounters(etcd.endpoint), w0c, ids.length) : undefined;
    const bad = rs.findIndex((r) => r.code !== 0);
    if (bad >= 0) {
      const r = rs[bad];
      throw new Error(
        `${pathKey} ${command} of pod ${bad} (c=${c}) failed: exit ${r.code ?? r.signal}\nstdout: ${r.stdout}` +
          `\nstderr: ${r.stderr.slice(-2000)}`,
      );
    }
    const s = summary(rs.map((r) => r.ms));
    const cell = {
      path: pathKey,
      c,
      phase: command,
      ...s,
      podsPerSec: ids.length / (wall / 1000),
      wallMs: wall,
      cpuMsPerPod: (children + agentCpu) / ids.length,
      childCpuMsPerPod: children / ids.length,
      agentCpuMsPerPod: agentCpu / ids.length,
      etcdCpuMsPerPod: etcdCpu / ids.length,
      ...(agentThreads ? { agentThreads } : {}),
      ...(etcdWrites ? { etcdWritesPerPod: etcdWrites } : {}),
    };
    cells.push(cell);
    const wr = etcdWrites
      ? `  etcd ${etcdWrites.proposals.toFixed(2)} writes/pod, ${etcdWrites.fsyncs.toFixed(2)} fsyncs/pod`
      : '';
    log(
      `  ${pathKey.padEnd(7)} c=${String(c).padEnd(2)} ${command} p50 ${s.p50.toFixed(1).padStart(6)} ms  p90 ` +
        `${s.p90.toFixed(1).padStart(6)}  p99 ${s.p99.toFixed(1).padStart(6)}  ` +
        `${cell.podsPerSec.toFixed(1).padStart(6)} pods/s  cpu ${cell.cpuMsPerPod.toFixed(1)} ms/pod${wr}`,
    );
  }
  // A per-exec plugin holding the node's IPAM lock makes the agent suspend its
  // read cache for a second at its next acquisition (docs/ipam.md): a node
  // where both serve pods at once. The agent's cells measure the agent as
  // deployed, so after a per-exec phase one throwaway pod goes through the
  // agent and the suspension runs out before the agent's phase starts.
  // The agent's first request opens its datastore connection and fills its
  // read cache (a node whose agent started with its conflist has done that
  // before the first pod): one throwaway pod goes through it before its first
  // phase, so the cells measure the warm agent.
  let perexecSinceAgent = ONLY.includes('agent');
  async function settleAgent() {
    const p = paths.agent;
    const env = {
      ...baseEnv,
      ...p.env,
      CNI_CONTAINERID: `settle-${cellNo}-${tag}`,
      CNI_NETNS: `/var/run/netns/${namespaces[0]}`,
      CNI_ARGS: 'IgnoreUnknown=1;K8S_POD_NAMESPACE=bench;K8S_POD_NAME=settle',
    };
    await execCni(p.bin, { ...env, CNI_COMMAND: 'ADD' }, JSON.stringify(p.conf));
    await execCni(p.bin, { ...env, CNI_COMMAND: 'DEL' }, JSON.stringify(p.conf));
    await new Promise((r) => setTimeout(r, 1500));
  }
  for (const c of CONC) {
    const turn = order.map((_, k) => order[(k + cellNo) % order.length]);
    cellNo++;
    for (const pathKey of turn) {
      if (pathKey === 'agent' && perexecSinceAgent) await settleAgent();
      if (pathKey === 'perexec') perexecSinceAgent = true;
      if (pathKey === 'agent') perexecSinceAgent = false;
      const ids = Array.from({ length: PODS }, (_, i) => `${pathKey}-c${c}-${i}-${tag}`);
      await phase(pathKey, c, 'ADD', ids);
      await phase(pathKey, c, 'DEL', ids);
    }
  }
  const mem = memoryMiB(agent.pid);
  const scale = SCALE && ONLY.includes('agent') ? await scaleCell(paths.agent, baseEnv) : undefined;

  // ---- the pure dataplane ----
  const dataplane = await dataplaneCost(pkg, namespaces.slice(0, Math.min(PODS, 200)));
  log(
    `bench: dataplane setup p50 ${dataplane.setup.p50.toFixed(3)} ms, teardown p50 ` +
      `${dataplane.teardown.p50.toFixed(3)} ms`,
  );

  // ---- stop the agent (writes its profile) ----
  const exited = new Promise((r) => agent.once('exit', r));
  agent.kill('SIGTERM');
  await exited;
  let profile;
  if (opts['cpu-prof']) {
    const files = existsSync(profDir) ? profileFiles([profDir]) : [];
    // Node names them CPU.<date>.<time>.<pid>.<thread id>.<seq>.cpuprofile; thread 0 is the main thread.
    const main = files.filter((f) => /\.\d+\.0\.\d+\.cpuprofile$/.test(f));
    if (files.length) {
      profile = summariseProfiles(main.length ? main : files, 30, root);
      const workers = summariseProfiles(
        files.filter((f) => !main.includes(f)),
        15,
        root,
      );
      const text =
        `### Main thread\n\n${formatProfile(profile)}\n\n### Other JS threads, if any (wall time on ` +
        `stack: a netlink call that waits in the kernel counts)\n\n${formatProfile(workers)}`;
      console.log(`\nagent CPU profile (whole run; files in ${profDir}):\n` + text);
      mkdirSync(OUT, { recursive: true });
      writeFileSync(
        join(OUT, 'agent-profile.md'),
        `# Agent CPU profile\n\n\`node scripts/bench.mjs ${process.argv.slice(2).join(' ')}\`, ` +
          `${new Date().toISOString()}\n\n${text}\n`,
      );
    } else {
      log('bench: --cpu-prof: the agent wrote no profile');
    }
    if (ONLY.includes('perexec'))
      log(
        `bench: --cpu-prof: one profile per per-exec plugin run in ${perexecProfDir} (node scripts/bench/profile.mjs ` +
          `DIR)`,
      );
  }

  // ---- report ----
  const get = (p, c, ph) => cells.find((x) => x.path === p && x.c === c && x.phase === ph);
  const ratio = (p, c, ph, k) =>
    get(p, c, ph) && get('ptp', c, ph) ? get(p, c, ph)[k] / get('ptp', c, ph)[k] : undefined;
  const cpuRatio = (c) => {
    const ours = (get('agent', c, 'ADD')?.cpuMsPerPod ?? NaN) + (get('agent', c, 'DEL')?.cpuMsPerPod ?? NaN);
    const base = (get('ptp', c, 'ADD')?.cpuMsPerPod ?? NaN) + (get('ptp', c, 'DEL')?.cpuMsPerPod ?? NaN);
    return Number.isNaN(ours / base) ? undefined : ours / base;
  };
  const lo = Math.min(...CONC);
  const hi = Math.max(...CONC);
  const t = (name, op, want, value) => ({
    name,
    op,
    want,
    value,
    pass: value === undefined ? undefined : op === '≤' ? value <= want : op === '<' ? value < want : value >= want,
  });
  const w = (c, ph) => get('agent', c, ph)?.etcdWritesPerPod;
  const targets = [
    t(`agent ADD p50 / ptp, c=${lo}`, '≤', 0.5, ratio('agent', lo, 'ADD', 'p50')),
    t(`agent ADD p50 / ptp, c=${hi}`, '≤', 0.5, ratio('agent', hi, 'ADD', 'p50')),
    t(`agent ADD pods/s / ptp, c=${hi}`, '≥', 2, ratio('agent', hi, 'ADD', 'podsPerSec')),
    t(`agent DEL p50 / ptp, c=${lo}`, '≤', 0.7, ratio('agent', lo, 'DEL', 'p50')),
    t(`agent DEL pods/s / ptp, c=${hi}`, '≥', 1.5, ratio('agent', hi, 'DEL', 'podsPerSec')),
    ...CONC.map((c) => t(`agent CPU per pod (ADD+DEL) / ptp, c=${c}`, '≤', 0.5, cpuRatio(c))),
    t(`etcd writes per ADD, agent, c=${lo}`, '≤', 1, w(lo, 'ADD')?.proposals),
    t(`etcd writes per DEL, agent, c=${lo}`, '≤', 1, w(lo, 'DEL')?.proposals),
    t(`etcd WAL fsyncs per ADD, agent, c=${hi}`, '<', 1, w(hi, 'ADD')?.fsyncs),
    t(`etcd WAL fsyncs per DEL, agent, c=${hi}`, '<', 1, w(hi, 'DEL')?.fsyncs),
    t(`per-exec ADD p50 / ptp, c=${lo}`, '≤', 8, ratio('perexec', lo, 'ADD', 'p50')),
    t(`agent peak RSS (MiB) with ${PODS} pods`, '≤', 150, mem.hwm),
    ...(scale
      ? [
          t(`scale: agent ADD p50 with ${scale.pods} pods / first pod`, '≤', 1.2, scale.ratio),
          t(`scale: agent RSS (MiB) with ${scale.pods} pods`, '≤', 120, scale.rssMiB),
        ]
      : []),
  ];
  const cpuModel = (
    readFileSync('/proc/cpuinfo', 'utf8').match(/^model name\s*:\s*(.+)$/m)?.[1] ?? 'unknown CPU'
  ).trim();
  const result = {
    date: new Date().toISOString(),
    quick: !!opts.quick,
    command: `npm run bench${process.argv.length > 2 ? ` -- ${process.argv.slice(2).join(' ')}` : ''}`,
    machine: {
      cpus: cpus().length,
      cpuModel,
      kernel: release(),
      node: process.version,
      loadavg: readFileSync('/proc/loadavg', 'utf8').trim(),
    },
    pods: PODS,
    concurrency: CONC,
    notes: {
      perexec:
        'the installed shim with no agent running: it falls back to exec node dist/netplugin.mjs (netplugin.fallback ' +
        'beside it)',
      cpu:
        "node-side CPU per pod: exec'd plugin processes and their waited-for children (cutime+cstime of the " +
        'harness) plus the agent process (all threads); etcd apart',
      latency: 'spawn to exit of one plugin exec, ms',
    },
    floor,
    dataplane,
    agent: { hwmMiB: mem.hwm, rssMiB: mem.rss },
    ...(scale ? { scale } : {}),
    cells,
    targets,
    ...(profile ? { agentProfileTop: profile.rows.slice(0, 15) } : {}),
    durationSec: (Date.now() - started) / 1000,
  };
  mkdirSync(OUT, { recursive: true });
  writeFileSync(join(OUT, 'latest.json'), JSON.stringify(result, null, 2) + '\n');
  const md = markdown(result);
  writeFileSync(join(OUT, 'latest.md'), md);
  writeFileSync(join(OUT, 'latest.svg'), svg(result));
  console.log('\n' + md);
  log(`bench: wrote ${join(OUT, 'latest.{json,md,svg}')} in ${result.durationSec.toFixed(0)} s`);
}

/**
 * The scale cell: ADD p50 of one pod on an empty node (SAMPLES times ADD+DEL,
 * one at a time), then the node is filled with SCALE pods (c = 16, not timed),
 * then the same for pod SCALE+1; the agent's RSS with SCALE pods; then all go.
 */
async function scaleCell(p, baseEnv) {
  const SAMPLES = SCALE_SAMPLES;
  log(`bench: scale cell: ${SCALE} pods on the node`);
  const ns = [];
  for (let i = 0; i <= SCALE; i++) {
    const n = `${tag}-s${i}`;
    execFileSync('ip', ['netns', 'add', n]);
    namespaces.push(n);
    ns.push(n);
  }
  const stdin = JSON.stringify(p.conf);
  const env = (command, id, i) => ({
    ...baseEnv,
    ...p.env,
    CNI_COMMAND: command,
    CNI_CONTAINERID: id,
    CNI_NETNS: `/var/run/netns/${ns[i]}`,
    CNI_ARGS: `IgnoreUnknown=1;K8S_POD_NAMESPACE=scale;K8S_POD_NAME=pod-${i}`,
  });
  const ok = (r, what) => {
    if (r.code !== 0)
      throw new Error(
        `scale cell: ${what} failed: exit ${r.code ?? r.signal}\nstdout: ${r.stdout}\nstderr: ${r.stderr.slice(-2000)}`,
      );
    return r;
  };
  // Where an ADD+DEL pair's extra time goes: the agent's main (JS) thread's
  // time on a CPU (schedstat, ns) and its user/system split (stat, clock ticks:
  // coarse), per pair. System time there is the inline dataplane's syscalls.
  const mainCpu = () => {
    const [run] = readFileSync(`/proc/${agent.pid}/task/${agent.pid}/schedstat`, 'utf8').split(' ');
    const t = threadCpuMs(agent.pid)[agent.pid] ?? { user: NaN, sys: NaN };
    return { run: Number(run) / 1e6, user: t.user, sys: t.sys };
  };
  const probe = async (label) => {
    const ms = [];
    const c0 = mainCpu();
    for (let k = 0; k < SAMPLES; k++) {
      const id = `scale-${label}-${k}-${tag}`;
      ms.push(ok(await execCni(p.bin, env('ADD', id, SCALE), stdin), `ADD ${id}`).ms);
      ok(await execCni(p.bin, env('DEL', id, SCALE), stdin), `DEL ${id}`);
    }
    const c1 = mainCpu();
    const per = (k) => (c1[k] - c0[k]) / SAMPLES;
    return { ...summary(ms), agentMainMsPerPair: { onCpu: per('run'), user: per('user'), sys: per('sys') } };
  };
  const first = await probe('first');
  const ids = Array.from({ length: SCALE }, (_, i) => `scale-${i}-${tag}`);
  await mapLimit(ids, 16, async (id, i) => ok(await execCni(p.bin, env('ADD', id, i), stdin), `ADD ${id}`));
  log(`bench: scale: ${SCALE} pods on the node; timing pod ${SCALE + 1} (agent pid ${agent.pid})`);
  const full = await probe('full');
  const mem = memoryMiB(agent.pid);
  await mapLimit(ids, 16, async (id, i) => ok(await execCni(p.bin, env('DEL', id, i), stdin), `DEL ${id}`));
  for (const n of ns) {
    execFileSync('ip', ['netns', 'del', n]);
    namespaces.splice(namespaces.indexOf(n), 1);
  }
  log(
    `bench: scale: ADD p50 first pod ${first.p50.toFixed(1)} ms, with ${SCALE} pods ${full.p50.toFixed(1)} ms; agent ` +
      `RSS ${mem.rss.toFixed(1)} MiB`,
  );
  const cpuLine = (c) => `${c.onCpu.toFixed(2)} ms on a CPU (user ${c.user.toFixed(1)}, system ${c.sys.toFixed(1)})`;
  log(
    `bench: scale: agent main thread per ADD+DEL pair: first pod ${cpuLine(first.agentMainMsPerPair)}; with ${SCALE} ` +
      `pods ${cpuLine(full.agentMainMsPerPair)}`,
  );
  return { pods: SCALE, samples: SAMPLES, first, full, ratio: full.p50 / first.p50, rssMiB: mem.rss, hwmMiB: mem.hwm };
}

/**
 * dist/ (with the per-exec bundles' code caches), the native addon and package.json under dir (node_modules linked);
 * returns dir.
 */
function snapshotPackage(dir) {
  mkdirSync(join(dir, 'dist'), { recursive: true });
  for (const f of readdirSync(join(root, 'dist')))
    if (/\.(mjs|cjs|cache)$/.test(f)) copyFileSync(join(root, 'dist', f), join(dir, 'dist', f));
  copyFileSync(join(root, 'package.json'), join(dir, 'package.json'));
  symlinkSync(join(root, 'node_modules'), join(dir, 'node_modules'));
  const built = join(root, 'build/Release/netplugin_netlink.node');
  const pre = join(root, `prebuilds/${process.platform}-${process.arch}/netplugin.node`);
  if (existsSync(built)) {
    mkdirSync(join(dir, 'build/Release'), { recursive: true });
    copyFileSync(built, join(dir, 'build/Release/netplugin_netlink.node'));
  } else if (existsSync(pre)) {
    mkdirSync(dirname(join(dir, pre.slice(root.length + 1))), { recursive: true });
    copyFileSync(pre, join(dir, pre.slice(root.length + 1)));
  } else {
    throw new Error('the native addon is missing (build/Release or prebuilds/); run npm run build:native');
  }
  return dir;
}

/** setupWorkload/teardownWorkload in this process (the host namespace is ours), one IPv4 address each. */
async function dataplaneCost(pkg, pods) {
  const { build } = await import('esbuild');
  const out = join(pkg, 'bench', 'dataplane-inproc.mjs');
  mkdirSync(dirname(out), { recursive: true });
  await build({
    // The dataplane and the host veth naming rule (model/names.ts) the specs use.
    stdin: {
      contents: "export * from './src/dataplane/index.ts'; export { hostVethName } from './src/model/names.ts';",
      resolveDir: root,
    },
    outfile: out,
    bundle: true,
    platform: 'node',
    format: 'esm',
    target: 'node20',
    external: ['node-gyp-build'],
    logLevel: 'warning',
  });
  const dp = await import(out);
  const setup = [];
  const teardown = [];
  for (let i = 0; i < pods.length; i++) {
    const spec = {
      netnsPath: `/var/run/netns/${pods[i]}`,
      ifname: 'eth0',
      hostIfname: dp.hostVethName('npd', `bench.dp-${i}`),
      numQueues: 1,
      hostMac: 'ee:ee:ee:ee:ee:ee',
      addresses: [`10.77.${(i >> 8) & 255}.${i & 255}/32`],
      allowIpForwarding: false,
    };
    let t0 = performance.now();
    dp.setupWorkload(spec);
    setup.push(performance.now() - t0);
    t0 = performance.now();
    dp.teardownWorkload({ netnsPath: spec.netnsPath, ifname: 'eth0', hostIfname: spec.hostIfname });
    teardown.push(performance.now() - t0);
  }
  return { setup: summary(setup), teardown: summary(teardown) };
}

main().then(
  () => {
    cleanup();
    process.exit(0);
  },
  (e) => {
    console.error(`bench: ${e.message}`);
    cleanup();
    process.exit(1);
  },
);
