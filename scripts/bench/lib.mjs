// Helpers of scripts/bench.mjs: process accounting from /proc, exec of a CNI
// plugin as a runtime does it, a throwaway etcd, statistics.
import { execFileSync, spawn } from 'node:child_process';
import { copyFileSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createConnection, createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import { pathToFileURL } from 'node:url';

export const CLK_TCK = Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim()) || 100;

/** Fields of /proc/<pid>/stat after the command name; index k is field k+3 of proc(5). */
function statFields(pid) {
  const s = readFileSync(`/proc/${pid}/stat`, 'utf8');
  return s.slice(s.lastIndexOf(')') + 2).split(' ');
}

/**
 * CPU (ms) of the children this process has waited for: cutime + cstime. Grandchildren count once their parent waited
 * for them (ptp -> host-local).
 */
export function childrenCpuMs() {
  const f = statFields('self');
  return ((Number(f[13]) + Number(f[14])) * 1000) / CLK_TCK;
}

/** CPU (ms) of a live process, all its threads: utime + stime. */
export function processCpuMs(pid) {
  const f = statFields(pid);
  return ((Number(f[11]) + Number(f[12])) * 1000) / CLK_TCK;
}

/** CPU (ms) per thread of a live process: { tid: { comm, user, sys } }. */
export function threadCpuMs(pid) {
  const out = {};
  for (const tid of readdirSync(`/proc/${pid}/task`)) {
    try {
      const f = statFields(`${pid}/task/${tid}`);
      const comm = readFileSync(`/proc/${pid}/task/${tid}/comm`, 'utf8').trim();
      out[tid] = { comm, user: (Number(f[11]) * 1000) / CLK_TCK, sys: (Number(f[12]) * 1000) / CLK_TCK };
    } catch {
      /* the thread ended */
    }
  }
  return out;
}

/** VmHWM / VmRSS of a live process, in MiB. */
export function memoryMiB(pid) {
  const s = readFileSync(`/proc/${pid}/status`, 'utf8');
  const kb = (k) => Number(new RegExp(`^${k}:\\s+(\\d+) kB`, 'm').exec(s)?.[1] ?? NaN);
  return { hwm: kb('VmHWM') / 1024, rss: kb('VmRSS') / 1024 };
}

/** Runs `bin` once like a container runtime: env, netconf on stdin, result on stdout. */
export function execCni(bin, env, stdin) {
  return new Promise((resolve, reject) => {
    const t0 = performance.now();
    const child = spawn(bin, [], { env, stdio: ['pipe', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => (stdout += d));
    child.stderr.on('data', (d) => (stderr += d));
    child.on('error', reject);
    child.on('close', (code, signal) => resolve({ ms: performance.now() - t0, code, signal, stdout, stderr }));
    child.stdin.on('error', () => undefined);
    child.stdin.end(stdin);
  });
}

export async function mapLimit(items, limit, fn) {
  const out = new Array(items.length);
  let next = 0;
  const worker = async () => {
    for (;;) {
      const i = next++;
      if (i >= items.length) return;
      out[i] = await fn(items[i], i);
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
  return out;
}

/** Nearest-rank quantile. */
export function quantile(xs, p) {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.max(0, Math.ceil(p * s.length) - 1))];
}

export function summary(xs) {
  return {
    p50: quantile(xs, 0.5),
    p90: quantile(xs, 0.9),
    p99: quantile(xs, 0.99),
    mean: xs.reduce((a, b) => a + b, 0) / xs.length,
    n: xs.length,
  };
}

function freePort() {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.unref();
    s.on('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

function waitPort(port, ms, failed) {
  const end = Date.now() + ms;
  return new Promise((resolve, reject) => {
    const go = () => {
      const why = failed();
      if (why) return reject(new Error(why));
      const c = createConnection({ port, host: '127.0.0.1' });
      c.once('connect', () => {
        c.destroy();
        resolve();
      });
      c.once('error', () => {
        c.destroy();
        if (Date.now() > end) reject(new Error(`etcd did not listen on 127.0.0.1:${port} within ${ms} ms`));
        else setTimeout(go, 50);
      });
    };
    go();
  });
}

/** A throwaway single-member etcd on 127.0.0.1 (the benchmark's datastore). */
export async function startEtcd() {
  const dataDir = mkdtempSync(join(tmpdir(), 'netplugin-bench-etcd-'));
  const [client, peer] = [await freePort(), await freePort()];
  const endpoint = `http://127.0.0.1:${client}`;
  const proc = spawn(
    'etcd',
    [
      '--name',
      'bench',
      '--data-dir',
      dataDir,
      '--listen-client-urls',
      endpoint,
      '--advertise-client-urls',
      endpoint,
      '--listen-peer-urls',
      `http://127.0.0.1:${peer}`,
      '--initial-advertise-peer-urls',
      `http://127.0.0.1:${peer}`,
      '--initial-cluster',
      `bench=http://127.0.0.1:${peer}`,
      '--log-level',
      'error',
    ],
    { stdio: ['ignore', 'ignore', 'pipe'] },
  );
  let stderr = '';
  proc.stderr.on('data', (d) => (stderr += d));
  await waitPort(client, 15_000, () => (proc.exitCode !== null ? `etcd exited: ${stderr}` : undefined));
  return {
    endpoint,
    proc,
    stop() {
      if (proc.exitCode === null && proc.signalCode === null) proc.kill('SIGKILL');
      rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

/** Waits until a unix socket accepts connections (the agent is up). */
export function waitSocket(path, ms, failed) {
  const end = Date.now() + ms;
  return new Promise((resolve, reject) => {
    const go = () => {
      const why = failed();
      if (why) return reject(new Error(why));
      const c = createConnection(path);
      c.once('connect', () => {
        c.destroy();
        resolve();
      });
      c.once('error', () => {
        c.destroy();
        if (Date.now() > end) reject(new Error(`nothing listens on ${path} after ${ms} ms`));
        else setTimeout(go, 25);
      });
    };
    go();
  });
}

/**
 * etcd's own write counters from its /metrics endpoint: raft proposals
 * committed (one per write request: a Put, a Txn, a DeleteRange), WAL fsyncs
 * (concurrent proposals share one), and the MVCC counters.
 */
export async function etcdWriteCounters(endpoint) {
  const text = await (await fetch(`${endpoint}/metrics`)).text();
  const pick = (name) => {
    let sum = 0;
    for (const m of text.matchAll(new RegExp(`^${name}(?:\\{[^}]*\\})? ([0-9.e+]+)$`, 'gm'))) sum += Number(m[1]);
    return sum;
  };
  return {
    proposals: pick('etcd_server_proposals_committed_total'),
    fsyncs: pick('etcd_disk_wal_fsync_duration_seconds_count'),
    puts: pick('etcd_mvcc_put_total'),
    deletes: pick('etcd_mvcc_delete_total'),
    txns: pick('etcd_mvcc_txn_total'),
    // Requests the node side sent (each a round trip), by gRPC method; the JSON gateway counts too.
    rangeCalls: pick('grpc_server_handled_total\\{[^}]*grpc_method="Range"[^}]*\\}'),
    txnCalls: pick('grpc_server_handled_total\\{[^}]*grpc_method="Txn"[^}]*\\}'),
  };
}

/** Per-pod difference of two etcdWriteCounters() readings. */
export function perPod(after, before, pods) {
  return Object.fromEntries(Object.keys(after).map((k) => [k, (after[k] - before[k]) / pods]));
}

/**
 * Bundles a bench body written in TypeScript (it imports src/ and test/support/ by absolute
 * path; Node 20 cannot run them directly) with esbuild into node_modules/.cache/netplugin-bench,
 * where the package's dependencies resolve, imports it, and removes the files again after `use`.
 * `besides` are files copied next to the bundle (what a bundled module reads beside itself).
 */
export async function withBundle(root, name, body, use, { besides = [] } = {}) {
  const { build } = await import('esbuild');
  const cache = join(root, 'node_modules/.cache/netplugin-bench');
  mkdirSync(cache, { recursive: true });
  const entry = join(cache, `${name}-${process.pid}.ts`);
  const out = join(cache, `${name}-${process.pid}.mjs`);
  writeFileSync(entry, body);
  for (const f of besides) copyFileSync(f, join(cache, basename(f)));
  try {
    await build({
      entryPoints: [entry],
      outfile: out,
      bundle: true,
      platform: 'node',
      target: 'node20',
      format: 'esm',
      external: ['etcd3', 'node-gyp-build', 'yaml', '@grpc/grpc-js', '@grpc/proto-loader'],
      banner: { js: "import { createRequire as __cr } from 'node:module'; const require = __cr(import.meta.url);" },
      logLevel: 'error',
    });
    return await use(await import(pathToFileURL(out).href));
  } finally {
    rmSync(entry, { force: true });
    rmSync(out, { force: true });
  }
}
