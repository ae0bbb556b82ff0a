// Processes for the demo: a command runner, a throwaway etcd, the node agent,
// and a CNI "runtime" that execs plugins the way libcni does.
import { spawn } from 'node:child_process';
import { accessSync, closeSync, constants, existsSync, openSync, readFileSync } from 'node:fs';
import { createConnection, createServer } from 'node:net';
import { join } from 'node:path';

export class DemoError extends Error {}

/** Runs a command to completion; never throws for a non-zero exit (callers decide). */
export function run(file, args = [], opts = {}) {
  return new Promise((resolve, reject) => {
    const t0 = process.hrtime.bigint();
    const child = spawn(file, args, { env: opts.env ?? process.env, cwd: opts.cwd, stdio: ['pipe', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => (stdout += d));
    child.stderr.on('data', (d) => (stderr += d));
    child.on('error', (e) => reject(new DemoError(`cannot run ${file}: ${e.message}`)));
    child.on('close', (code, signal) =>
      resolve({ code, signal, stdout, stderr, ms: Number(process.hrtime.bigint() - t0) / 1e6 }),
    );
    child.stdin.on('error', () => undefined);
    child.stdin.end(opts.input ?? '');
  });
}

/** Like run(), but a non-zero exit is a DemoError carrying the command's stderr. */
export async function runOk(file, args = [], opts = {}) {
  const r = await run(file, args, opts);
  if (r.code !== 0) {
    const what = opts.what ?? [file, ...args].join(' ');
    throw new DemoError(`${what} failed (exit ${r.code ?? r.signal}): ${(r.stderr || r.stdout).trim()}`);
  }
  return r;
}

export function freePort() {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.on('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function waitFor(what, timeoutMs, probe, diedWhy) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const dead = diedWhy();
    if (dead) throw new DemoError(`${what}: ${dead}`);
    if (await probe()) return;
    if (Date.now() > deadline) throw new DemoError(`${what}: not ready after ${timeoutMs} ms`);
    await sleep(50);
  }
}

/** Stops a child: SIGTERM, then SIGKILL after graceMs. Resolves when it has exited. */
export function stopChild(child, graceMs = 5000) {
  if (!child || child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  return new Promise((resolve) => {
    const t = setTimeout(() => child.kill('SIGKILL'), graceMs);
    child.once('exit', () => {
      clearTimeout(t);
      resolve();
    });
    child.kill('SIGTERM');
  });
}

/** etcd on 127.0.0.1 (of the throwaway node namespace) with free ports and a data dir under `dir`. */
export async function startEtcd(dir) {
  const clientPort = await freePort();
  const peerPort = await freePort();
  const endpoint = `http://127.0.0.1:${clientPort}`;
  // Clients also on every address of the throwaway node namespace: the demo's
  // second node reaches etcd over the link between the two nodes.
  const listen = `http://0.0.0.0:${clientPort}`;
  const peer = `http://127.0.0.1:${peerPort}`;
  const args = [
    '--name',
    'demo',
    '--data-dir',
    join(dir, 'etcd'),
    '--listen-client-urls',
    listen,
    '--advertise-client-urls',
    endpoint,
    '--listen-peer-urls',
    peer,
    '--initial-advertise-peer-urls',
    peer,
    '--initial-cluster',
    `demo=${peer}`,
    '--log-level',
    'error',
  ];
  const child = spawn('etcd', args, { stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  child.stderr.on('data', (d) => (stderr += d));
  let spawnError;
  child.on('error', (e) => (spawnError = e));
  const etcd = { child, endpoint, clientPort, args };
  await waitFor(
    `etcd on ${endpoint}`,
    15_000,
    async () => {
      try {
        const res = await fetch(`${endpoint}/health`, { signal: AbortSignal.timeout(1000) });
        return res.ok && (await res.json()).health === 'true';
      } catch {
        return false;
      }
    },
    () =>
      spawnError
        ? `cannot start etcd (${spawnError.message}); run 'bash scripts/setup' to install etcd-server`
        : child.exitCode !== null
          ? `etcd exited with ${child.exitCode}: ${stderr.trim()}`
          : undefined,
  );
  return etcd;
}

function socketAnswers(path) {
  return new Promise((resolve) => {
    const s = createConnection(path);
    s.once('connect', () => {
      s.destroy();
      resolve(true);
    });
    s.once('error', () => resolve(false));
  });
}

/**
 * The node agent serving the shim's socket; its stderr goes to `logFile`.
 * With `readyText`, also waits for that log line (the agent's node preparation
 * runs beside the server and would otherwise compete with the first request).
 */
export async function startAgent(nodeBin, agentBundle, args, socket, logFile, readyText) {
  const fd = openSync(logFile, 'a');
  let child;
  try {
    child = spawn(nodeBin, [agentBundle, ...args], {
      stdio: ['ignore', 'ignore', fd],
      env: { ...process.env, NODE_EXTRA_CA_CERTS: '' },
    });
  } finally {
    closeSync(fd);
  }
  await waitFor(
    `netplugin-node on ${socket}`,
    10_000,
    async () => existsSync(socket) && (await socketAnswers(socket)),
    () => (child.exitCode !== null ? `the agent exited with ${child.exitCode}; see ${logFile}` : undefined),
  );
  if (readyText) {
    await waitFor(
      `netplugin-node: "${readyText}" in its log`,
      10_000,
      async () => readFileSync(logFile, 'utf8').includes(readyText),
      () =>
        child.exitCode !== null
          ? `the agent exited with ${child.exitCode}: ${readFileSync(logFile, 'utf8').trim()}`
          : undefined,
    );
  }
  return child;
}

/** A process serving HTTP on :80 inside a pod's namespace; resolves once it listens. */
export function startPodServer(netnsName, nodeBin, podName) {
  const script =
    `require('http').createServer((q, s) => s.end('hello from ${podName}, you are ' + ` +
    `q.socket.remoteAddress + '\\n')).listen(80, () => console.log('listening'))`;
  const child = spawn('ip', ['netns', 'exec', netnsName, nodeBin, '-e', script], { stdio: ['ignore', 'pipe', 'pipe'] });
  return new Promise((resolve, reject) => {
    let err = '';
    child.stderr.on('data', (d) => (err += d));
    child.stdout.on('data', (d) => {
      if (String(d).includes('listening')) resolve(child);
    });
    child.on('exit', (code) =>
      reject(new DemoError(`the HTTP server in ${podName} exited with ${code}: ${err.trim()}`)),
    );
  });
}

/** Where libcni finds a plugin: the first executable named `type` in CNI_PATH. */
export function findPlugin(type, cniPath) {
  for (const dir of cniPath.split(':')) {
    const p = join(dir, type);
    try {
      accessSync(p, constants.X_OK);
      return p;
    } catch {
      // not in this dir
    }
  }
  throw new DemoError(
    `plugin '${type}' not found in CNI_PATH ${cniPath}; run 'bash scripts/setup' (containernetworking-plugins)`,
  );
}

/**
 * Executes one plugin of a conflist as a runtime does: the plugin's entry with
 * the list's name and cniVersion on stdin, CNI_* in a clean environment.
 * Returns the parsed result (or error) JSON, the exit code and the time taken.
 */
export async function cniExec({ command, entry, containerId, netns, ifname = 'eth0', args, cniPath, extraEnv = {} }) {
  const bin = findPlugin(entry.type, cniPath);
  const env = {
    PATH: '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin',
    CNI_COMMAND: command,
    CNI_CONTAINERID: containerId,
    CNI_NETNS: netns,
    CNI_IFNAME: ifname,
    CNI_PATH: cniPath,
    ...(args ? { CNI_ARGS: args } : {}),
    ...extraEnv,
  };
  const r = await run(bin, [], { env, input: JSON.stringify(entry) });
  let json;
  try {
    json = r.stdout.trim() ? JSON.parse(r.stdout) : undefined;
  } catch {
    json = undefined;
  }
  return { ...r, bin, env, json };
}
