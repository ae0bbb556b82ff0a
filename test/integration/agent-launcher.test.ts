// netplugin-node's CommonJS entry (dist/netplugin-node.cjs) sizes libuv's
// threadpool before anything uses it, so the agent performs the same however
// it is started; the ES module entry alone gets libuv's default of 4. Counted
// on the running process: libuv starts every pool thread at once.
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { DIST } from '../support/cni.js';
import { startEtcd } from '../support/etcd.js';

const dirs: string[] = [];
const procs: ChildProcess[] = [];
afterEach(() => {
  for (const p of procs.splice(0)) p.kill('SIGKILL');
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

/** Starts the agent through `entry`, waits for its socket, returns its thread count. */
async function threads(entry: string, env: NodeJS.ProcessEnv): Promise<number> {
  const d = mkdtempSync(join(tmpdir(), 'np-launch-'));
  dirs.push(d);
  const sock = join(d, 'cni.sock');
  const p = spawn(process.execPath, [join(DIST, entry), '--socket', sock, '--log-level', 'ERROR'], {
    env,
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  procs.push(p);
  let err = '';
  p.stderr!.on('data', (b) => (err += b));
  const deadline = Date.now() + 30_000;
  while (!existsSync(sock) && p.exitCode === null && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
  expect(existsSync(sock), `the agent (${entry}) did not start: ${err}`).toBe(true);
  const n = readdirSync(`/proc/${p.pid}/task`).length;
  p.kill('SIGKILL');
  return n;
}

describe('netplugin-node entry', () => {
  it('the .cjs entry runs the agent with a threadpool of 16 (12 threads more than the .mjs entry with libuv default 4), an explicit UV_THREADPOOL_SIZE wins', async () => {
    const env = { PATH: process.env['PATH'] };
    const plain = await threads('netplugin-node.mjs', env);
    const launched = await threads('netplugin-node.cjs', env);
    expect(launched - plain).toBe(12);
    const explicit = await threads('netplugin-node.cjs', { ...env, UV_THREADPOOL_SIZE: '6' });
    expect(explicit - plain).toBe(2);
  });
});

/**
 * Starts the agent without --config on `confDir`; resolves once `line` shows in its log (or the bound passes), with a
 * reader of the log.
 */
async function logUntil(confDir: string, line: RegExp): Promise<() => string> {
  const d = mkdtempSync(join(tmpdir(), 'np-warm-'));
  dirs.push(d);
  const p = spawn(
    process.execPath,
    [
      join(DIST, 'netplugin-node.cjs'),
      '--socket',
      join(d, 'cni.sock'),
      '--cni-conf-dir',
      confDir,
      '--no-routes',
      '--log-level',
      'INFO',
    ],
    { stdio: ['ignore', 'ignore', 'pipe'] },
  );
  procs.push(p);
  let log = '';
  p.stderr!.on('data', (b) => (log += b));
  const deadline = Date.now() + 20_000;
  while (!line.test(log) && p.exitCode === null && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
  return () => log;
}

describe('netplugin-node without --config', () => {
  it("warms the datastore connection at start from the first config of the CNI conf dir when it is netplugin's, and not otherwise", async () => {
    const etcd = await startEtcd();
    try {
      const conf = (name: string, type: string) =>
        JSON.stringify({
          cniVersion: '1.0.0',
          name,
          plugins: [
            { type, datastore_type: 'etcdv3', etcd_endpoints: etcd.endpoint, ipam: { type: 'netplugin-ipam' } },
          ],
        });
      const ours = mkdtempSync(join(tmpdir(), 'np-netd-'));
      dirs.push(ours);
      writeFileSync(join(ours, '10-netplugin.conflist'), conf('k8s-pod-network', 'netplugin'));
      writeFileSync(join(ours, '20-other.conflist'), conf('other', 'bridge'));
      const warmed = (await logUntil(ours, /datastore connection warmed|cannot warm/))();
      expect(warmed).toMatch(/datastore connection warmed from the node's CNI config/);
      expect(warmed).toContain(join(ours, '10-netplugin.conflist'));

      // The runtime would use another plugin's config (it sorts first): nothing to warm.
      const theirs = mkdtempSync(join(tmpdir(), 'np-netd-'));
      dirs.push(theirs);
      writeFileSync(join(theirs, '05-bridge.conflist'), conf('other', 'bridge'));
      writeFileSync(join(theirs, '10-netplugin.conflist'), conf('k8s-pod-network', 'netplugin'));
      const cold = await logUntil(theirs, /CNI server listening/);
      await new Promise((r) => setTimeout(r, 500));
      expect(cold()).toMatch(/CNI server listening/);
      expect(cold()).not.toMatch(/datastore connection warmed|cannot warm/);
    } finally {
      await etcd.stop();
    }
  });
});
