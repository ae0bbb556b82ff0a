#!/usr/bin/env node
// The per-exec burst (npm run bench:burst): many `netplugin-ipam` ADDs exec'd
// at once as a runtime does when its node's agent is down, all contending for
// their node's host lock. 3 node configs (nodename + ipam_lock_file, the lock
// files in one root-only directory) x 60 ADDs, 24 processes at a time, one /24
// pool, a throwaway local etcd.
//
// Reported: ADD latency (exec to result) p50/p99/max, failures, and the time
// each ADD waited for its node's lock: the plugin logs it (debug level) when it
// had to wait; an ADD that found the lock free waited 0. Targets: no failure,
// ADD p99 <= 5 s, longest wait <= 2x the median wait of the ADDs that waited.
// Also the CPU the plugins burnt in total (their children's utime + stime).
//
// node scripts/bench-burst.mjs [--adds 60] [--nodes 3] [--concurrency 24] [--block-size 26] [--package DIR] [--logs
// DIR]
//
// Runs dist/netplugin-ipam.cjs (the entry the shim's per-exec fallback runs) of
// this tree (npm run bench:burst builds it first; do not rebuild during a run),
// or of --package DIR: a copy of another build (package.json, dist/,
// build/Release/, node_modules) to compare against.
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { cpus, tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { childrenCpuMs, execCni, mapLimit, quantile, startEtcd } from './bench/lib.mjs';

const { values: opts } = parseArgs({
  options: {
    package: { type: 'string' },
    logs: { type: 'string' },
    adds: { type: 'string', default: '60' },
    nodes: { type: 'string', default: '3' },
    concurrency: { type: 'string', default: '24' },
    'block-size': { type: 'string', default: '26' },
  },
});
const int = (name, lo, hi) => {
  const v = Number(opts[name]);
  if (!Number.isInteger(v) || v < lo || v > hi) {
    console.error(`bench-burst: --${name} '${opts[name]}' is not an integer from ${lo} to ${hi}`);
    process.exit(2);
  }
  return v;
};
const ADDS = int('adds', 1, 1000);
const NODES = int('nodes', 1, 16);
const CONC = int('concurrency', 1, 256);
const BLOCK = int('block-size', 24, 32);
const root = opts.package ?? join(dirname(fileURLToPath(import.meta.url)), '..');
const BIN = join(root, 'dist/netplugin-ipam.cjs');
const CTL = join(root, 'dist/netpluginctl.mjs');
if (process.getuid?.() !== 0) {
  console.error('bench-burst: needs root (the lock directory is root-only, as on a node)');
  process.exit(2);
}
for (const f of [BIN, CTL]) {
  if (!existsSync(f)) {
    console.error(`bench-burst: ${f} is missing (npm run build:ts)`);
    process.exit(2);
  }
}

const tmp = mkdtempSync(join(tmpdir(), 'netplugin-burst-'));
// The plugins' debug logs (each lock wait among them): kept with --logs DIR.
const LOGS = opts.logs ?? tmp;
mkdirSync(LOGS, { recursive: true });
let etcd;
const cleanup = () => {
  etcd?.stop();
  rmSync(tmp, { recursive: true, force: true });
};
process.on('exit', cleanup);
for (const sig of ['SIGINT', 'SIGTERM', 'SIGHUP']) process.on(sig, () => process.exit(130));

const waitMaxOf = (xs) => (xs.length ? Math.max(...xs) : undefined);
const ms = (x) => (x === undefined ? '-' : x >= 1000 ? `${(x / 1000).toFixed(2)} s` : `${Math.round(x)} ms`);

async function main() {
  etcd = await startEtcd();
  const ctlEnv = { PATH: process.env.PATH, ETCD_ENDPOINTS: etcd.endpoint };
  execFileSync(process.execPath, [CTL, 'datastore', 'init'], { env: ctlEnv, stdio: ['ignore', 'ignore', 'inherit'] });
  const spec = { cidr: '10.79.0.0/24', blockSize: BLOCK, natOutgoing: false };
  const pool = { apiVersion: 'netplugin.org/v3', kind: 'IPPool', metadata: { name: 'burst' }, spec };
  const input = JSON.stringify(pool);
  execFileSync(process.execPath, [CTL, 'apply', '-f', '-'], {
    env: ctlEnv,
    input,
    stdio: ['pipe', 'ignore', 'inherit'],
  });

  const lockDir = join(tmp, 'run');
  mkdirSync(lockDir, { mode: 0o700 });
  const nodes = Array.from({ length: NODES }, (_, i) => `burst-node-${i}`);
  const conf = (node) =>
    JSON.stringify({
      cniVersion: '1.0.0',
      name: 'burst',
      type: 'bridge',
      nodename: node,
      datastore_type: 'etcdv3',
      etcd_endpoints: etcd.endpoint,
      log_level: 'DEBUG',
      log_file_path: join(LOGS, `${node}.log`),
      ipam_lock_file: join(lockDir, `${node}.lock`),
      ipam: { type: 'netplugin-ipam' },
    });
  const env = (cid) => ({
    PATH: `${dirname(process.execPath)}:/usr/sbin:/usr/bin:/sbin:/bin`,
    CNI_COMMAND: 'ADD',
    CNI_CONTAINERID: cid,
    CNI_NETNS: `/var/run/netns/burst-${cid}`,
    CNI_IFNAME: 'eth0',
    CNI_PATH: '/usr/lib/cni',
  });
  // Interleaved as a runtime would see them: node 0, 1, 2, 0, 1, 2, ...
  const jobs = Array.from({ length: ADDS * NODES }, (_, i) => ({ cid: `burst${i}`, node: nodes[i % NODES] }));

  // One exec first, alone: node startup and the datastore connection warmed, not timed.
  await execCni(BIN, env('burst-warm'), conf(nodes[0]));
  const cpu0 = childrenCpuMs();
  const t0 = performance.now();
  const results = await mapLimit(jobs, CONC, ({ cid, node }) => execCni(BIN, env(cid), conf(node)));
  const wall = performance.now() - t0;
  const cpu = childrenCpuMs() - cpu0;

  const failures = results.filter((r) => r.code !== 0);
  const lat = results.map((r) => r.ms);
  // Lock waits the plugins logged ("waited N ms for the host lock ..."), by container.
  const waits = [];
  const waitOf = new Map();
  for (const node of nodes) {
    let text = '';
    try {
      text = readFileSync(join(LOGS, `${node}.log`), 'utf8');
    } catch {
      /* nothing logged */
    }
    for (const m of text.matchAll(/cid=(\S+) waited (\d+) ms for the host lock/g)) {
      waits.push(Number(m[2]));
      waitOf.set(m[1], Number(m[2]));
    }
  }
  // What an ADD spent outside the lock wait: start-up, reads, its own time under the lock, exit.
  const rest = results.map((r, i) => r.ms - (waitOf.get(jobs[i].cid) ?? 0));
  const waitP50 = waits.length ? quantile(waits, 0.5) : undefined;
  const waitMax = waits.length ? Math.max(...waits) : undefined;
  const p99 = quantile(lat, 0.99);

  console.log(
    `netplugin per-exec burst: ${jobs.length} netplugin-ipam ADDs (${NODES} node configs x ${ADDS}), ` +
      `${CONC} at a time, one /24 pool (/${BLOCK} blocks), local etcd, ${cpus().length} CPUs`,
  );
  const q = (xs, p) => (xs.length ? quantile(xs, p) : undefined);
  const row = (xs) => ({ p50: ms(q(xs, 0.5)), p99: ms(q(xs, 0.99)), max: ms(waitMaxOf(xs)) });
  console.table({
    'ADD latency': row(lat),
    'lock wait (ADDs that waited)': row(waits),
    'ADD minus its lock wait': row(rest),
  });
  const load = readFileSync('/proc/loadavg', 'utf8').split(' ').slice(0, 3).join(' ');
  console.log(
    `load average at the end ${load}; wall ${ms(wall)}; plugins' CPU ${ms(cpu)} (${ms(cpu / jobs.length)} per ADD); ` +
      `${waits.length} of ${jobs.length} ADDs logged a lock wait; failures ${failures.length}`,
  );
  for (const f of failures.slice(0, 5))
    console.log(`  failed (exit ${f.code}): ${(f.stdout || f.stderr).trim().slice(0, 300)}`);
  const targets = [
    ['no failure', failures.length === 0],
    ['ADD p99 <= 5 s', p99 <= 5000],
    ['longest wait <= 2x median wait', waitMax === undefined ? undefined : waitMax <= 2 * waitP50],
  ];
  for (const [name, ok] of targets) console.log(`  ${ok === undefined ? 'n/a ' : ok ? 'met ' : 'MISS'} ${name}`);
}

main().then(
  () => process.exit(0),
  (e) => {
    console.error(e);
    process.exit(1);
  },
);
