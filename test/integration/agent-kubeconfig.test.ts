// The plugin's kubeconfig written by the agent (src/agent/kubeconfig-writer.ts)
// against the fake API server over TLS with authentication: TokenRequest for
// the plugin's ServiceAccount, the file usable by netplugin's own Kubernetes
// client and by kubectl, rotation before expiry (the server grants a few
// seconds), retries while the ServiceAccount is missing; then the real agent
// binary with --plugin-kubeconfig.
import { execFile, spawn, spawnSync } from 'node:child_process';
import { promisify } from 'node:util';
import { mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startPluginKubeconfig } from '../../src/agent/kubeconfig-writer.js';
import { createKubeClient } from '../../src/k8s/client.js';
import { DIST } from '../support/cni.js';
import { startFakeApiServer, writeKubeconfig, type FakeApiServer } from '../support/fake-apiserver.js';

const AGENT_TOKEN = 'agent-sa-token';
let api: FakeApiServer;
let tmp: string;
const lines: string[] = [];
const log = {
  error: (m: string) => lines.push(`E ${m}`),
  warn: (m: string, f?: object) => lines.push(`W ${m} ${JSON.stringify(f)}`),
  info: (m: string) => lines.push(`I ${m}`),
  debug: () => {},
};

async function until(what: string, fn: () => boolean | Promise<boolean>, limitMs = 60_000): Promise<void> {
  const end = Date.now() + limitMs;
  while (!(await fn())) {
    if (Date.now() > end) throw new Error(`gave up waiting for: ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

const tokenIn = (path: string) => /token: "([^"]+)"/.exec(readFileSync(path, 'utf8'))![1]!;

beforeAll(async () => {
  api = await startFakeApiServer({ tls: true, auth: { tokens: [AGENT_TOKEN] }, tokenLifetimeSeconds: 3 });
  tmp = mkdtempSync(join(tmpdir(), `agent-kubeconfig-${process.pid}-`));
});
afterAll(async () => {
  await api?.stop();
  if (tmp) rmSync(tmp, { recursive: true, force: true });
});

describe('plugin kubeconfig from TokenRequest', () => {
  it('retries while the ServiceAccount is missing, then writes a 0600 kubeconfig that works and rotates it before expiry', async () => {
    const agentClient = await createKubeClient({ kubeconfig: writeKubeconfig(api.dir, api, { token: AGENT_TOKEN }) });
    const path = join(tmp, 'netplugin-kubeconfig');
    const w = startPluginKubeconfig({
      path,
      serviceAccount: 'netplugin-cni',
      namespace: 'kube-system',
      client: agentClient,
      ca: readFileSync(api.caFile!),
      expirationSeconds: 3600,
      audiences: ['netplugin'],
      log,
      minRetryMs: 100,
      maxRetryMs: 400,
    });
    try {
      await until('a failed attempt is reported', () => w.status().lastError !== undefined);
      expect(w.status().lastError).toContain('serviceaccounts "netplugin-cni" not found');
      expect(w.status().writes).toBe(0);
      api.put('/api/v1/namespaces/kube-system/serviceaccounts/netplugin-cni', {
        apiVersion: 'v1',
        kind: 'ServiceAccount',
        metadata: { name: 'netplugin-cni' },
      });
      await w.firstWrite;
      expect(statSync(path).mode & 0o777).toBe(0o600);
      expect(w.status().lastError).toBeUndefined();
      const first = tokenIn(path);
      const issued = api.issuedTokens();
      expect(issued.at(-1)).toMatchObject({
        token: first,
        namespace: 'kube-system',
        serviceAccount: 'netplugin-cni',
        audiences: ['netplugin'],
      });

      // The file alone is enough for netplugin's client (CA embedded, token) and for kubectl.
      const plugin = await createKubeClient({ kubeconfig: path });
      expect((await plugin.getNamespace('default')).metadata.name).toBe('default');
      plugin.close();
      // Asynchronous: the API server runs in this process.
      const k = await promisify(execFile)('kubectl', ['--kubeconfig', path, 'get', 'namespaces', '-o', 'name'], {
        encoding: 'utf8',
        timeout: 30_000,
      });
      expect(k.stderr).toBe('');
      expect(k.stdout).toContain('namespace/kube-system');

      // Granted 3 s: rewritten after ~2 s with a new token, before the old one expires.
      await until('the token is rotated', () => w.status().writes >= 2);
      const second = tokenIn(path);
      expect(second).not.toBe(first);
      const expiry = issued.at(-1)!.expires.getTime();
      expect(statSync(path).mtimeMs).toBeLessThan(expiry);
      // The old token stops working when it expires; the file's current one keeps working.
      await until('the first token expired', () => Date.now() > expiry + 100);
      const stale = await createKubeClient({ kubeconfig: writeKubeconfig(api.dir, api, { token: first }) });
      await expect(stale.getNamespace('default')).rejects.toThrow(/401|Unauthorized|credentials/i);
      stale.close();
      const fresh = await createKubeClient({ kubeconfig: path });
      expect((await fresh.getNamespace('default')).metadata.name).toBe('default');
      fresh.close();
    } finally {
      w.stop();
      agentClient.close();
    }
  });

  it('the agent binary writes it with --plugin-kubeconfig and its own --kubeconfig', async () => {
    const path = join(tmp, 'from-agent-kubeconfig');
    const own = writeKubeconfig(api.dir, api, { token: AGENT_TOKEN, inline: true });
    const agent = spawn(
      process.execPath,
      [
        join(DIST, 'netplugin-node.mjs'),
        '--socket',
        join(tmp, 'run/cni.sock'),
        '--health-addr',
        'off',
        '--kubeconfig',
        own,
        '--plugin-kubeconfig',
        path,
        '--plugin-token-seconds',
        '7200',
      ],
      {
        stdio: ['ignore', 'ignore', 'pipe'],
      },
    );
    let err = '';
    agent.stderr!.on('data', (d: Buffer) => (err += d));
    try {
      await until('the agent wrote the plugin kubeconfig', () => err.includes('plugin kubeconfig written'));
      const c = await createKubeClient({ kubeconfig: path });
      expect((await c.getNamespace('kube-system')).metadata.name).toBe('kube-system');
      c.close();
      expect(api.issuedTokens().at(-1)!.serviceAccount).toBe('netplugin-cni');
    } finally {
      agent.kill('SIGTERM');
      await new Promise((r) => agent.once('exit', r));
    }
    const bad = spawnSync(
      process.execPath,
      [join(DIST, 'netplugin-node.mjs'), '--plugin-kubeconfig', path, '--plugin-token-seconds', '60'],
      { encoding: 'utf8', timeout: 30_000 },
    );
    expect(bad.status).toBe(2);
    expect(bad.stderr).toContain("--plugin-token-seconds '60' is not an integer of at least 600");
  });
});
