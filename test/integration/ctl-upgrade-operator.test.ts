// The operator-style install through the built netpluginctl: the Installation
// lives in the (fake) Kubernetes API; `installation apply` reads it from there,
// and `--watch` reconciles the node again when it changes.
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startFakeApiServer, writeKubeconfig, type FakeApiServer } from '../support/fake-apiserver.js';
import { openDatastore } from '../../src/datastore/index.js';
import type { Datastore } from '../../src/datastore/types.js';
import { CTL, requireBuiltCtl } from '../support/ctl.js';

const root = resolve(import.meta.dirname, '../..');

let server: FakeApiServer;
let kubeconfig: string;
let ds: Datastore;
let tmp: string;
let pkgDir: string;
let watcher: ChildProcess | undefined;

const INSTALLATION = '/apis/operator.netplugin.org/v1/installations/default';
const installation = (mtu: number) => ({
  apiVersion: 'operator.netplugin.org/v1',
  kind: 'Installation',
  metadata: { name: 'default' },
  spec: { netpluginNetwork: { mtu, ipPools: [{ cidr: '10.80.0.0/16', encapsulation: 'VXLAN' }] } },
});

function start(args: string[]): {
  proc: ChildProcess;
  done: Promise<{ code: number | null; signal: NodeJS.Signals | null; out: string; err: string }>;
  output: () => string;
} {
  const proc = spawn(process.execPath, [CTL, ...args], {
    env: { PATH: process.env.PATH ?? '/usr/bin:/bin', DATASTORE_TYPE: 'kubernetes', KUBECONFIG: kubeconfig },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  let err = '';
  proc.stdout!.on('data', (d) => (out += d));
  proc.stderr!.on('data', (d) => (err += d));
  const done = new Promise<{ code: number | null; signal: NodeJS.Signals | null; out: string; err: string }>((r) =>
    proc.on('close', (code, signal) => r({ code, signal, out, err })),
  );
  return { proc, done, output: () => out + err };
}

async function until(what: string, cond: () => boolean, output: () => string, ms = 30_000): Promise<void> {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}; output so far:\n${output()}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

const nodeArgs = () => [
  '--cni-bin-dir',
  join(tmp, 'bin'),
  '--cni-conf-dir',
  join(tmp, 'conf'),
  '--package-dir',
  pkgDir,
];
const conflistMtu = () => {
  try {
    return JSON.parse(readFileSync(join(tmp, 'conf/10-netplugin.conflist'), 'utf8')).plugins[0].mtu as number;
  } catch {
    return undefined;
  }
};

beforeAll(async () => {
  requireBuiltCtl();
  tmp = mkdtempSync(join(tmpdir(), 'ctl-operator-'));
  pkgDir = join(tmp, 'pkg');
  mkdirSync(join(pkgDir, 'dist'), { recursive: true });
  for (const p of ['netplugin', 'netplugin-ipam']) writeFileSync(join(pkgDir, 'dist', `${p}.mjs`), '// stand-in\n');
  server = await startFakeApiServer();
  kubeconfig = writeKubeconfig(server.dir, server);
  ds = await openDatastore({ datastore_type: 'kubernetes', kubernetes: { kubeconfig }, timeoutMs: 5000 });
});

afterAll(async () => {
  if (watcher && watcher.exitCode === null) watcher.kill('SIGKILL');
  await ds?.close();
  await server?.stop();
  if (tmp) rmSync(tmp, { recursive: true, force: true });
});

describe('installation apply with the Installation in the cluster', () => {
  it('without -f: fails naming the missing Installation, then applies the one in the API', async () => {
    const missing = await start(['installation', 'apply', ...nodeArgs()]).done;
    expect(missing.code).toBe(1);
    expect(missing.err).toMatch(/no Installation "default" in the cluster/);

    server.put(INSTALLATION, installation(1450));
    const r = await start(['installation', 'apply', ...nodeArgs()]).done;
    expect(r.err).toBe('');
    expect(r.code).toBe(0);
    expect(r.out).toMatch(/ippool\/default-ipv4-ippool created \(10\.80\.0\.0\/16\)/);
    expect(conflistMtu()).toBe(1450);
    const conf = JSON.parse(readFileSync(join(tmp, 'conf/10-netplugin.conflist'), 'utf8'));
    expect(conf.plugins[0]).toMatchObject({
      datastore_type: 'kubernetes',
      kubernetes: { kubeconfig },
      policy: { type: 'k8s' },
    });
    expect((await ds.get('IPPool', 'default-ipv4-ippool')).spec.vxlanMode).toBe('Always');
  });

  it('--watch reconciles again when the Installation changes, and stops on SIGTERM', async () => {
    const w = start(['installation', 'apply', '--watch', ...nodeArgs()]);
    watcher = w.proc;
    await until('the first reconcile', () => /no changes/.test(w.output()), w.output);
    server.put(INSTALLATION, installation(1400));
    await until('the conflist to carry mtu 1400', () => conflistMtu() === 1400, w.output);
    // An invalid change is reported and leaves the node as it was.
    server.put(INSTALLATION, { ...installation(1400), spec: { netpluginNetwork: { mtu: 5 } } });
    await until('the validation error', () => /mtu: must be 68-65535 \(got 5\)/.test(w.output()), w.output);
    expect(conflistMtu()).toBe(1400);
    w.proc.kill('SIGTERM');
    const end = await w.done;
    expect(end.code).toBe(0);
    expect((await ds.list('IPPool')).items.map((p) => p.metadata.name)).toEqual(['default-ipv4-ippool']);
  });

  it('the shipped example goes in with kubectl; apply --dry-run shows the node change it implies and keeps the pools', async () => {
    const kubectl = (...args: string[]) =>
      new Promise<{ code: number; stdout: string; stderr: string }>((done) => {
        const child = execFile(
          'kubectl',
          ['--kubeconfig', kubeconfig, '--cache-dir', join(tmp, 'kcache'), '--request-timeout', '10s', ...args],
          { timeout: 30_000 },
          (err, stdout, stderr) => done({ code: err ? ((err as { code?: number }).code ?? 1) : 0, stdout, stderr }),
        );
        child.stdin?.end();
      });
    const a = await kubectl('apply', '--validate=false', '-f', join(root, 'deploy/installation-example.yaml'));
    expect(a.code).toBe(0);
    // The Installation was created without kubectl (no last-applied annotation): kubectl warns and patches it.
    expect(
      a.stderr.replace(
        /^Warning: resource installations\/default is missing the kubectl\.kubernetes\.io\/last-applied-configuration annotation.*\n/m,
        '',
      ),
    ).toBe('');
    expect(a.stdout).toMatch(/installation\.operator\.netplugin\.org\/default configured/);
    expect(a.stdout).toMatch(/flowlogaggregator\.operator\.netplugin\.org\/default created/);
    expect(a.stdout).toMatch(/flowui\.operator\.netplugin\.org\/default created/);
    const d = await start(['installation', 'apply', '--dry-run', ...nodeArgs()]).done;
    expect(d.err).toBe('');
    expect(d.out).toMatch(/10-netplugin\.conflist would write/);
    expect(d.out).toMatch(/ippools unchanged \(1 exist: default-ipv4-ippool;/);
    expect(conflistMtu()).toBe(1400);
  });

  it('--watch and -f together are refused', async () => {
    const r = await start([
      'installation',
      'apply',
      '--watch',
      '-f',
      join(root, 'deploy/installation-example.yaml'),
      ...nodeArgs(),
    ]).done;
    expect(r.code).toBe(1);
    expect(r.err).toMatch(/--watch follows the Installation "default" in the Kubernetes API; drop -f/);
  });
});
