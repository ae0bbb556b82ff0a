#!/usr/bin/env node
// Round trip of the native shim through a running agent, 200 sequential calls
// as a runtime makes them (exec, env, stdin, wait), side by side with the
// per-exec fallback and a native Go plugin (ptp) answering the same VERSION.
// A measurement, not a test: run it on an otherwise idle machine.
//   node scripts/bench-shim.mjs [runs]      (needs: npm run build:shim && npm run build:ts)
import { spawn, spawnSync } from 'node:child_process';
import { copyFileSync, chmodSync, existsSync, mkdtempSync, rmSync } from 'node:fs';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const runs = Number(process.argv[2] ?? 200);
for (const f of ['build/shim/netplugin-shim', 'dist/netplugin-node.mjs', 'dist/netplugin.mjs']) {
  if (!existsSync(join(root, f))) {
    console.error(`bench-shim: ${f} is missing; run 'npm run build:shim' and 'npm run build:ts' first`);
    process.exit(1);
  }
}

const tmp = mkdtempSync(join(tmpdir(), 'np-bench-shim-'));
const socket = join(tmp, 'run/cni.sock');
const shim = join(tmp, 'netplugin');
copyFileSync(join(root, 'build/shim/netplugin-shim'), shim);
chmodSync(shim, 0o755);
const agent = spawn(
  process.execPath,
  [join(root, 'dist/netplugin-node.mjs'), '--socket', socket, '--log-level', 'WARNING'],
  {
    stdio: ['ignore', 'inherit', 'inherit'],
  },
);

const cleanup = () => {
  agent.kill('SIGTERM');
  rmSync(tmp, { recursive: true, force: true });
};
process.on('exit', cleanup);

async function waitForAgent() {
  for (let i = 0; i < 200; i++) {
    const ok = await new Promise((resolve) => {
      const c = connect(socket);
      c.once('connect', () => (c.destroy(), resolve(true)));
      c.once('error', () => resolve(false));
    });
    if (ok) return;
    await new Promise((r) => setTimeout(r, 25));
  }
  throw new Error(`agent did not listen on ${socket}`);
}

const stdin = '{"cniVersion":"1.0.0"}';
function time(cmd, args, env, n) {
  const ms = [];
  for (let i = 0; i < n; i++) {
    const t0 = process.hrtime.bigint();
    const r = spawnSync(cmd, args, { env, input: stdin, encoding: 'utf8' });
    const t1 = process.hrtime.bigint();
    if (r.status !== 0 || !r.stdout.includes('supportedVersions')) {
      throw new Error(`${cmd} failed (${r.status}): ${r.stdout}${r.stderr}`);
    }
    ms.push(Number(t1 - t0) / 1e6);
  }
  ms.sort((a, b) => a - b);
  const q = (p) => ms[Math.min(ms.length - 1, Math.floor(p * ms.length))].toFixed(2);
  return `p50 ${q(0.5)} ms  p90 ${q(0.9)} ms  p99 ${q(0.99)} ms  (n=${n})`;
}

await waitForAgent();
const base = { PATH: process.env.PATH, CNI_COMMAND: 'VERSION', CNI_PATH: '/opt/cni/bin' };
const viaAgent = { ...base, NETPLUGIN_AGENT_SOCKET: socket };
const viaFallback = {
  ...base,
  NETPLUGIN_AGENT_SOCKET: join(tmp, 'absent.sock'),
  NETPLUGIN_FALLBACK_NODE: process.execPath,
  NETPLUGIN_FALLBACK_DIR: root,
};
time(shim, [], viaAgent, 10); // warm the agent and the page cache
console.log(`shim -> agent        VERSION  ${time(shim, [], viaAgent, runs)}`);
console.log(`shim -> fallback     VERSION  ${time(shim, [], viaFallback, Math.min(runs, 50))}`);
if (existsSync('/usr/lib/cni/ptp'))
  console.log(`ptp (Go, reference)  VERSION  ${time('/usr/lib/cni/ptp', [], base, runs)}`);
console.log(`sh -c echo (exec floor)        ${time('/bin/sh', ['-c', 'echo supportedVersions'], base, runs)}`);
process.exit(0);
