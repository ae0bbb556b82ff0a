#!/usr/bin/env node
// The agent ADD against its floor (docs/performance.md, "The hot path"). Side by side in one run:
//   agent    ADD/DEL through the installed shim and a resident agent, one pod at a time
//   ptp      Debian's ptp + host-local, the same pods (the ratio's denominator)
//   perexec  (--perexec) the shim with no agent: its per-exec fallback
//   --vs DIR the same agent/perexec cells from another built checkout (a scratch worktree
//            of an older commit), each with an etcd of its own, in alternating rounds
//   --vs-conf JSON  netconf fields for the vs side only, e.g. --vs . --vs-conf '{"etcd_transport":"grpc"}'
// and the floor's parts, each alone:
//   exec     the shim exec'd as a runtime does, answered by the agent at once (CNI VERSION)
//   etcd     one transaction writing what an ADD writes (the same keys' sizes), on a
//            kept-alive connection, as the agent sends it
//   kernel   setupWorkload in-process (the ADD's netlink and sysctl work)
// Figures: wall p50 per ADD, and the process CPU time (user+sys, from /proc) per ADD of the
// agent and of the exec'd processes: CPU time holds on a loaded machine, wall time does not.
// --timeline: the agent's per-step timeline of each ADD (NETPLUGIN_TIMELINE=1), median per step.
// --strace: syscalls per ADD+DEL of the agent (strace -c -f attached for one round).
//
//   bash scripts/in-netns node scripts/bench-floor.mjs [--pods 20] [--rounds 5] [--timeline]
//     [--perexec] [--strace] [--vs /work/wt-old] [--vs-conf JSON]
import { execFileSync, spawn } from 'node:child_process';
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
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { childrenCpuMs, execCni, processCpuMs, startEtcd, summary, waitSocket, withBundle } from './bench/lib.mjs';

const here = join(dirname(fileURLToPath(import.meta.url)), '..');
const { values: opts } = parseArgs({
  options: {
    pods: { type: 'string', default: '20' },
    rounds: { type: 'string', default: '5' },
    vs: { type: 'string' },
    'vs-conf': { type: 'string' },
    perexec: { type: 'boolean' },
    timeline: { type: 'boolean' },
    strace: { type: 'boolean' },
    'strace-log': { type: 'string' },
  },
});
const PODS = Number(opts.pods);
const ROUNDS = Number(opts.rounds);
if (!Number.isInteger(PODS) || PODS < 1 || PODS > 500) throw new Error(`--pods ${opts.pods}: an integer from 1 to 500`);
if (!Number.isInteger(ROUNDS) || ROUNDS < 1 || ROUNDS > 100)
  throw new Error(`--rounds ${opts.rounds}: an integer from 1 to 100`);
if (process.getuid?.() !== 0 || !process.env.NETPLUGIN_HOST_NETNS) {
  console.error(
    'bench-floor: run it as root in a throwaway namespace: bash scripts/in-netns node scripts/bench-floor.mjs',
  );
  process.exit(2);
}
const log = (s) => process.stderr.write(s + '\n');
const tmp = mkdtempSync(join(tmpdir(), 'netplugin-floor-'));
const tag = `f${process.pid}`;
const namespaces = [];
const cleanups = [];
let cleaned = false;
function cleanup() {
  if (cleaned) return;
  cleaned = true;
  for (const f of cleanups.splice(0).reverse()) {
    try {
      f();
    } catch {
      /* best effort */
    }
  }
  for (const n of namespaces.splice(0)) {
    try {
      execFileSync('ip', ['netns', 'del', n], { stdio: 'ignore' });
    } catch {
      /* gone */
    }
  }
  rmSync(tmp, { recursive: true, force: true });
}
for (const sig of ['SIGINT', 'SIGTERM', 'SIGHUP']) process.on(sig, () => (cleanup(), process.exit(130)));
process.on('exit', cleanup);

const baseEnv = { PATH: process.env.PATH, CNI_PATH: '/usr/lib/cni', CNI_IFNAME: 'eth0' };
const podEnv = (command, id, i) => ({
  ...baseEnv,
  CNI_COMMAND: command,
  CNI_CONTAINERID: id,
  CNI_NETNS: `/var/run/netns/${namespaces[i]}`,
  CNI_ARGS: `IgnoreUnknown=1;K8S_POD_NAMESPACE=bench;K8S_POD_NAME=pod-${i}`,
});

/** One checkout's agent and per-exec install, with an etcd of its own. */
async function side(name, root, k) {
  const shim = [join(root, 'build/shim/netplugin-shim'), join(root, 'prebuilds/linux-x64/netplugin-shim')].find(
    existsSync,
  );
  if (!shim) throw new Error(`${root}: no shim (npm run build)`);
  const etcd = await startEtcd();
  cleanups.push(() => etcd.stop());
  const ctl = (args, input) =>
    execFileSync(process.execPath, [join(root, 'dist/netpluginctl.mjs'), ...args], {
      env: { PATH: process.env.PATH, ETCD_ENDPOINTS: etcd.endpoint },
      ...(input ? { input } : {}),
      stdio: [input ? 'pipe' : 'ignore', 'ignore', 'inherit'],
    });
  ctl(['datastore', 'init']);
  const pool = { cidr: `10.${70 + k}.0.0/16`, blockSize: 26, natOutgoing: false };
  ctl(
    ['apply', '-f', '-'],
    JSON.stringify({ apiVersion: 'netplugin.org/v3', kind: 'IPPool', metadata: { name: 'floor' }, spec: pool }),
  );
  const dir = join(tmp, name);
  const bin = join(dir, 'agent', 'netplugin');
  const execBin = join(dir, 'exec', 'netplugin');
  for (const b of [bin, execBin]) {
    mkdirSync(dirname(b), { recursive: true });
    copyFileSync(shim, b);
    chmodSync(b, 0o755);
  }
  writeFileSync(join(dirname(execBin), 'netplugin.fallback'), `${process.execPath}\n${root}\n`);
  const socket = join(dir, 'cni.sock');
  const env = { PATH: process.env.PATH, ...(opts.timeline ? { NETPLUGIN_TIMELINE: '1' } : {}) };
  const agent = spawn(
    process.execPath,
    [join(root, 'dist/netplugin-node.cjs'), '--socket', socket, '--log-level', 'WARNING'],
    {
      env,
      stdio: ['ignore', 'ignore', 'pipe'],
    },
  );
  cleanups.push(() => agent.kill('SIGKILL'));
  let stderr = '';
  const timelines = [];
  agent.stderr.on('data', (d) => {
    stderr += d;
    let nl;
    while ((nl = stderr.indexOf('\n')) >= 0) {
      const line = stderr.slice(0, nl);
      stderr = stderr.slice(nl + 1);
      const m = /^netplugin-timeline (.*)$/.exec(line);
      if (m) timelines.push(JSON.parse(m[1]));
    }
  });
  await waitSocket(socket, 30_000, () =>
    agent.exitCode !== null ? `${name}: the agent exited: ${stderr}` : undefined,
  );
  const conf = {
    cniVersion: '1.0.0',
    name: 'k8s-pod-network',
    type: 'netplugin',
    nodename: 'floor-node',
    etcd_endpoints: etcd.endpoint,
    ipam: { type: 'netplugin-ipam' },
    ipam_lock_file: join(dir, 'lock', 'ipam.lock'),
    host_veth_prefix: `nf${k}`,
    // --vs-conf '{"etcd_transport":"grpc"}': netconf fields of the vs side only (one build, two settings).
    ...(k === 1 && opts['vs-conf'] ? JSON.parse(opts['vs-conf']) : {}),
  };
  const s = { name, root, etcd, agent, bin, execBin, socket, conf, timelines, cells: {} };
  // The first request opens the datastore and fills the read cache: not timed.
  await run(s, 'agent', 'ADD', `warm-${k}`, 0);
  await run(s, 'agent', 'DEL', `warm-${k}`, 0);
  return s;
}

function run(s, how, command, id, i) {
  const bin = how === 'agent' ? s.bin : s.execBin;
  const sock = how === 'agent' ? s.socket : join(tmp, 'no-agent.sock');
  return execCni(bin, { ...podEnv(command, id, i), NETPLUGIN_AGENT_SOCKET: sock }, JSON.stringify(s.conf)).then((r) => {
    if (r.code !== 0)
      throw new Error(
        `${s.name} ${how} ${command} ${id}: exit ${r.code ?? r.signal}: ${r.stdout} ${r.stderr.slice(-800)}`,
      );
    return r;
  });
}

function cell(s, key) {
  return (s.cells[key] ??= { ADD: [], DEL: [], agentCpu: { ADD: 0, DEL: 0 }, childCpu: { ADD: 0, DEL: 0 }, n: 0 });
}

/** PODS ADDs one at a time, then their DELs; CPU of the agent and of the exec'd processes per phase. */
async function round(s, how, r, key = how) {
  const c = cell(s, key);
  const ids = Array.from({ length: PODS }, (_, i) => `${how}-${r}-${i}-${tag}`);
  for (const command of ['ADD', 'DEL']) {
    const a0 = processCpuMs(s.agent.pid);
    const c0 = childrenCpuMs();
    for (let i = 0; i < PODS; i++) c[command].push((await run(s, how, command, ids[i], i)).ms);
    c.agentCpu[command] += processCpuMs(s.agent.pid) - a0;
    c.childCpu[command] += childrenCpuMs() - c0;
  }
  c.n += PODS;
}

const ptpCell = { ADD: [], DEL: [], agentCpu: { ADD: 0, DEL: 0 }, childCpu: { ADD: 0, DEL: 0 }, n: 0 };
async function ptpRound(r) {
  const conf = JSON.stringify({
    cniVersion: '1.0.0',
    name: 'floor-ptp',
    type: 'ptp',
    ipMasq: false,
    ipam: { type: 'host-local', ranges: [[{ subnet: '10.69.0.0/16' }]], dataDir: join(tmp, 'host-local') },
  });
  for (const command of ['ADD', 'DEL']) {
    const c0 = childrenCpuMs();
    for (let i = 0; i < PODS; i++) {
      const x = await execCni('/usr/lib/cni/ptp', podEnv(command, `ptp-${r}-${i}-${tag}`, i), conf);
      if (x.code !== 0) throw new Error(`ptp ${command}: ${x.stdout}${x.stderr}`);
      ptpCell[command].push(x.ms);
    }
    ptpCell.childCpu[command] += childrenCpuMs() - c0;
  }
  ptpCell.n += PODS;
}

/** The shim's exec and round trip alone: CNI VERSION, which the agent answers without work. */
async function execFloor(s) {
  const ms = [];
  const c0 = childrenCpuMs();
  for (let i = 0; i < PODS * 2; i++) {
    const r = await execCni(
      s.bin,
      { ...baseEnv, CNI_COMMAND: 'VERSION', NETPLUGIN_AGENT_SOCKET: s.socket },
      JSON.stringify(s.conf),
    );
    if (r.code !== 0) throw new Error(`VERSION: ${r.stdout}${r.stderr}`);
    ms.push(r.ms);
  }
  return { ...summary(ms), childCpuMs: (childrenCpuMs() - c0) / (PODS * 2) };
}

/** One etcd transaction as large as an ADD's (the same keys' values, under scratch keys), kept-alive HTTP. */
async function etcdFloor(s) {
  const b64 = (x) => Buffer.from(x).toString('base64');
  const range = async (prefix) => {
    const end = prefix.slice(0, -1) + String.fromCharCode(prefix.charCodeAt(prefix.length - 1) + 1);
    const r = await fetch(`${s.etcd.endpoint}/v3/kv/range`, {
      method: 'POST',
      body: JSON.stringify({ key: b64(prefix), range_end: b64(end) }),
    });
    return (await r.json()).kvs ?? [];
  };
  // One pod's writes: its block (the whole block object is rewritten), its handle and its endpoint.
  await run(s, 'agent', 'ADD', `size-${tag}`, 0);
  const kvs = await range('/');
  const pick = (re) => kvs.find((kv) => re.test(Buffer.from(kv.key, 'base64').toString()));
  const written = [pick(/ipam\/v2\/assignment|ipamblock/i), pick(/handle/i), pick(/workloadendpoint/i)].filter(Boolean);
  await run(s, 'agent', 'DEL', `size-${tag}`, 0);
  const bytes = written.reduce((n, kv) => n + Buffer.from(kv.value, 'base64').length, 0);
  const ms = [];
  for (let i = 0; i < PODS * 2; i++) {
    const success = written.map((kv, j) => ({ request_put: { key: b64(`/floor/${j}/${i}`), value: kv.value } }));
    const t0 = performance.now();
    const r = await fetch(`${s.etcd.endpoint}/v3/kv/txn`, { method: 'POST', body: JSON.stringify({ success }) });
    await r.arrayBuffer();
    ms.push(performance.now() - t0);
  }
  return { ...summary(ms), keys: written.length, bytes };
}

/** setupWorkload in this process: the ADD's kernel work alone (this checkout's src/dataplane, bundled). */
async function kernelFloor() {
  const body =
    `export * from ${JSON.stringify(join(here, 'src/dataplane/index.ts'))};\n` +
    `export { hostVethName } from ${JSON.stringify(join(here, 'src/model/names.ts'))};\n`;
  return withBundle(here, 'floor-dataplane', body, (dp) => {
    const setup = dp.createWorkloadSetup();
    const ms = [];
    for (let i = 0; i < PODS * 2; i++) {
      const spec = {
        netnsPath: `/var/run/netns/${namespaces[i % PODS]}`,
        ifname: 'eth0',
        hostIfname: dp.hostVethName('nfk', `floor.k-${i}`),
        numQueues: 1,
        hostMac: 'ee:ee:ee:ee:ee:ee',
        containerMac: '0a:58:0a:00:00:01',
        addresses: [`10.68.${(i >> 8) & 255}.${i & 255}/32`],
        allowIpForwarding: false,
      };
      const t0 = performance.now();
      setup.setup(spec);
      ms.push(performance.now() - t0);
      dp.teardownWorkload({ netnsPath: spec.netnsPath, ifname: 'eth0', hostIfname: spec.hostIfname });
    }
    setup.close();
    return summary(ms);
  });
}

/** syscalls of the agent over one round of ADD+DEL pairs (strace -c -f attached). */
async function straceRound(s, r) {
  const out = join(tmp, `strace-${s.name}.txt`);
  // --strace-log FILE: first every syscall of one round, timed (-tt -T), for a closer look
  // (one tracer at a time: a process has one).
  if (opts['strace-log']) {
    const tl = spawn('strace', ['-f', '-tt', '-T', '-o', opts['strace-log'], '-p', String(s.agent.pid)], {
      stdio: 'ignore',
    });
    const gone = new Promise((res) => tl.once('exit', res));
    await new Promise((res) => setTimeout(res, 500));
    await round(s, 'agent', r + 1, 'strace-log');
    tl.kill('SIGINT');
    await gone;
  }
  const st = spawn('strace', ['-c', '-f', '-o', out, '-p', String(s.agent.pid)], { stdio: 'ignore' });
  await new Promise((res) => setTimeout(res, 500));
  await round(s, 'agent', r, 'strace');
  const ended = new Promise((res) => st.once('exit', res));
  st.kill('SIGINT');
  await ended;
  const text = readFileSync(out, 'utf8');
  const total = /(\d+)\s+(\d+)?\s*total\s*$/m.exec(text);
  const calls = Number(/^\s*100\.00\s+\S+\s+\S+\s+(\d+)/m.exec(text)?.[1] ?? total?.[1] ?? NaN);
  return { callsPerPair: calls / PODS, table: text };
}

function median(xs) {
  return summary(xs).p50;
}

async function main() {
  for (let i = 0; i < PODS; i++) {
    const n = `${tag}-p${i}`;
    execFileSync('ip', ['netns', 'add', n]);
    namespaces.push(n);
  }
  // A node's uplink address (bench.mjs says why).
  execFileSync('ip', ['addr', 'add', '192.0.2.1/32', 'dev', 'lo']);
  const sides = [await side('this', here, 0)];
  if (opts.vs) sides.push(await side('vs', opts.vs, 1));
  log(`bench-floor: ${PODS} pods × ${ROUNDS} rounds; load ${readFileSync('/proc/loadavg', 'utf8').trim()}`);
  for (let r = 0; r < ROUNDS; r++) {
    const order = r % 2 ? [...sides].reverse() : sides;
    await ptpRound(r);
    for (const s of order) {
      await round(s, 'agent', r);
      if (opts.perexec) await round(s, 'perexec', r);
    }
  }
  const straced = {};
  if (opts.strace) for (const s of sides) straced[s.name] = await straceRound(s, ROUNDS);
  const floor = { exec: await execFloor(sides[0]), etcd: await etcdFloor(sides[0]), kernel: await kernelFloor() };
  const load = readFileSync('/proc/loadavg', 'utf8').trim();

  const ptpAdd = median(ptpCell.ADD);
  const lines = [];
  const fmt = (x) => x.toFixed(2);
  lines.push(`load average at the end: ${load}`);
  lines.push(
    `ptp + host-local: ADD p50 ${fmt(ptpAdd)} ms, DEL p50 ${fmt(median(ptpCell.DEL))} ms, CPU ${fmt(ptpCell.childCpu.ADD / ptpCell.n)} ms per ADD`,
  );
  for (const s of sides) {
    for (const [how, c] of Object.entries(s.cells)) {
      if (how.startsWith('strace')) continue;
      const add = median(c.ADD);
      const cpu = (c.agentCpu.ADD + c.childCpu.ADD) / c.n;
      lines.push(
        `${s.name.padEnd(4)} ${how.padEnd(7)} ADD p50 ${fmt(add)} ms (${fmt(add / ptpAdd)}× ptp), DEL p50 ${fmt(median(c.DEL))} ms; ` +
          `CPU per ADD: agent ${fmt(c.agentCpu.ADD / c.n)} + exec'd ${fmt(c.childCpu.ADD / c.n)} = ${fmt(cpu)} ms ` +
          `(${fmt(cpu / (ptpCell.childCpu.ADD / ptpCell.n))}× ptp); per DEL: agent ${fmt(c.agentCpu.DEL / c.n)} + exec'd ${fmt(c.childCpu.DEL / c.n)} ms`,
      );
    }
    if (straced[s.name])
      lines.push(`${s.name.padEnd(4)} agent syscalls per ADD+DEL pair: ${straced[s.name].callsPerPair.toFixed(1)}`);
  }
  const f = floor;
  const fl = f.exec.p50 + Math.max(f.etcd.p50, f.kernel.p50);
  lines.push(
    `floor: exec of the shim (VERSION through the agent) p50 ${fmt(f.exec.p50)} ms (CPU ${fmt(f.exec.childCpuMs)} ms); ` +
      `etcd txn of ${f.etcd.keys} keys, ${f.etcd.bytes} bytes p50 ${fmt(f.etcd.p50)} ms; kernel setup p50 ${fmt(f.kernel.p50)} ms; ` +
      `exec + max(etcd, kernel) = ${fmt(fl)} ms; agent ADD p50 - floor = ${fmt(median(sides[0].cells.agent.ADD) - fl)} ms`,
  );
  if (opts.timeline) {
    for (const s of sides) {
      const adds = s.timelines.filter((t) => t.command === 'ADD').slice(2);
      if (!adds.length) continue;
      // Median time since the request arrived at which each step was reached.
      const at = new Map();
      for (const t of adds) for (const [step, ms] of t.marks) (at.get(step) ?? at.set(step, []).get(step)).push(ms);
      lines.push(`${s.name} agent ADD timeline (median ms since the request was read, ${adds.length} ADDs):`);
      for (const [step, xs] of [...at].sort((a, b) => median(a[1]) - median(b[1])))
        lines.push(`  ${fmt(median(xs)).padStart(7)}  ${step}`);
    }
  }
  console.log(lines.join('\n'));
  if (opts.strace)
    for (const s of sides) console.log(`\n${s.name} agent strace -c -f (one round):\n${straced[s.name].table}`);
}

main().then(
  () => (cleanup(), process.exit(0)),
  (e) => {
    console.error(`bench-floor: ${e.stack ?? e.message}`);
    cleanup();
    process.exit(1);
  },
);
