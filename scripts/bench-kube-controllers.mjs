#!/usr/bin/env node
// How fast netplugin-kube-controllers reacts: the time from a write to the
// fake API server until the mirror's change arrives on a watch of etcd, for
// NetworkPolicy creation, update and deletion and for namespace label
// changes; and how long a standby needs to take over after SIGKILL of the
// leader (lease 15 s, the default). Runs the built executable.
//
//   npm run build:ts && bash scripts/in-netns node scripts/bench-kube-controllers.mjs [--n 50]
//
// Node 20 cannot run the TypeScript sources directly, so the bench body is
// bundled with esbuild into node_modules/.cache and imported from there.
import { build } from 'esbuild';
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const nArg = process.argv.indexOf('--n');
const N = nArg > 0 ? Number(process.argv[nArg + 1]) : 50;

const body = `
import { spawn } from 'node:child_process';
import { startEtcd, freePort } from ${JSON.stringify(join(root, 'test/support/etcd.ts'))};
import { startFakeApiServer, writeKubeconfig } from ${JSON.stringify(join(root, 'test/support/fake-apiserver.ts'))};
import { openDatastore } from ${JSON.stringify(join(root, 'src/datastore/index.ts'))};

const BIN = ${JSON.stringify(join(root, 'dist/netplugin-kube-controllers.mjs'))};

export async function run(N) {
  const etcd = await startEtcd();
  const api = await startFakeApiServer({ crdDir: ${JSON.stringify(join(root, 'deploy/crds'))} });
  const kubeconfig = writeKubeconfig(api.dir, api);
  const ds = await openDatastore({ etcd_endpoints: etcd.endpoint, timeoutMs: 10000 });
  const procs = [];
  const start = async (extra = []) => {
    const port = await freePort();
    const p = spawn(process.execPath, [BIN, '--kubeconfig', kubeconfig, '--health-addr', '127.0.0.1:' + port, ...extra], {
      env: { PATH: process.env.PATH, ETCD_ENDPOINTS: etcd.endpoint, POD_NAMESPACE: 'kube-system' }, stdio: 'ignore' });
    procs.push(p);
    return { p, port };
  };
  const leader = async (k) => {
    for (;;) {
      try {
        const r = await fetch('http://127.0.0.1:' + k.port + '/readyz');
        if (r.status === 200 && (await r.text()).includes('"role":"leader"')) return;
      } catch {}
      await new Promise((r) => setTimeout(r, 20));
    }
  };
  const seen = new Map();
  const waiters = new Map();
  const onEvent = (e) => {
    if (e.type === 'ERROR') return;
    const key = e.type + ' ' + e.object.metadata.name + ' ' + JSON.stringify(e.object.spec);
    const now = performance.now();
    for (const [match, resolve] of waiters) if (match(e)) { waiters.delete(match); resolve(now); }
    seen.set(key, now);
  };
  const until = (match) => new Promise((resolve) => waiters.set(match, resolve));
  const rows = [];
  try {
    const a = await start();
    await leader(a);
    const { revision } = await ds.list('NetworkPolicy');
    ds.watch('NetworkPolicy', { revision }, onEvent);
    ds.watch('Profile', { revision: (await ds.list('Profile')).revision }, onEvent);
    const measure = async (label, write, match) => {
      const lat = [];
      for (let i = 0; i < N; i++) {
        const wait = until(match(i));
        const t0 = performance.now();
        await write(i);
        lat.push((await wait) - t0);
      }
      lat.sort((x, y) => x - y);
      const q = (p) => lat[Math.min(lat.length - 1, Math.floor(p * lat.length))].toFixed(1);
      rows.push({ what: label, n: N, p50_ms: q(0.5), p95_ms: q(0.95), max_ms: lat[lat.length - 1].toFixed(1) });
    };
    const npPath = (i) => '/apis/networking.k8s.io/v1/namespaces/default/networkpolicies/np' + i;
    await measure('NetworkPolicy created -> mirror', (i) => api.put(npPath(i), { metadata: { name: 'np' + i }, spec: { podSelector: {} } }),
      (i) => (e) => e.type === 'ADDED' && e.object.metadata.name === 'knp.default.np' + i);
    await measure('NetworkPolicy updated -> mirror', (i) => api.put(npPath(i), { metadata: { name: 'np' + i }, spec: { podSelector: { matchLabels: { v: '2' } } } }),
      (i) => (e) => e.type === 'MODIFIED' && e.object.metadata.name === 'knp.default.np' + i);
    await measure('NetworkPolicy deleted -> mirror', (i) => fetch(api.url + npPath(i), { method: 'DELETE' }),
      (i) => (e) => e.type === 'DELETED' && e.object.metadata.name === 'knp.default.np' + i);
    await measure('Namespace labelled -> profile', (i) => api.put('/api/v1/namespaces/default', { metadata: { name: 'default', labels: { i: String(i) } } }),
      (i) => (e) => e.object.metadata.name === 'kns.default' && e.object.spec.labelsToApply?.['pcns.i'] === String(i));

    const b = await start();
    await new Promise((r) => setTimeout(r, 3000)); // b has seen the lease
    const t0 = performance.now();
    a.p.kill('SIGKILL');
    await leader(b);
    rows.push({ what: 'failover after SIGKILL of the leader (lease 15s)', n: 1, p50_ms: (performance.now() - t0).toFixed(0), p95_ms: '', max_ms: '' });
  } finally {
    for (const p of procs) p.kill('SIGKILL');
    await ds.close();
    await api.stop();
    await etcd.stop();
  }
  return rows;
}
`;

const dir = join(root, 'node_modules/.cache/netplugin-bench-kc');
mkdirSync(dir, { recursive: true });
const src = join(dir, 'body.ts');
const out = join(dir, 'body.mjs');
writeFileSync(src, body);
await build({
  entryPoints: [src],
  outfile: out,
  bundle: true,
  platform: 'node',
  format: 'esm',
  target: 'node20',
  external: ['etcd3', 'yaml'],
  logLevel: 'warning',
});
try {
  const { run } = await import(pathToFileURL(out).href);
  const rows = await run(N);
  console.table(rows);
} finally {
  rmSync(dir, { recursive: true, force: true });
}
