#!/usr/bin/env node
// Policy enforcement benchmark (npm run bench:policy): the node agent's policy
// controller (src/agent/policy) against an in-memory datastore and real
// nftables in a throwaway network namespace (run through scripts/in-netns).
// For 0, 100 and 1000 policies with 500 local endpoints:
//   resync     full resync at start: list, compile, one nft transaction
//   add        new endpoint written -> its policy programmed (the signal the ADD waits for)
//   label      endpoint label change -> the batch enforcing it applied
//   host       a host endpoint policy changed -> the batch enforcing it applied (with
//              --host-policies H: H GlobalNetworkPolicies selecting the node's two host
//              endpoints, `*` and eth0, half of them applyOnForward; default 50)
//   cpu / rss  the process's CPU time over the add+label+host phases, and its peak RSS
// Each once through libnftables in the addon and once by exec'ing `nft -f` per
// batch (the same scripts), side by side.
//
//   node scripts/bench-policy.mjs [--pods 500] [--policies 0,100,1000] [--host-policies 50] [--n 60] [--out bench/results]
//
// Node 20 cannot run the TypeScript sources directly: the body is bundled with
// esbuild into node_modules/.cache and imported from there.
import { build } from 'esbuild';
import { mkdirSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const { values } = parseArgs({
  options: {
    pods: { type: 'string' },
    policies: { type: 'string' },
    'host-policies': { type: 'string' },
    n: { type: 'string' },
    out: { type: 'string' },
  },
});
const HOST_POLICIES = Number(values['host-policies'] ?? 50);
const PODS = Number(values.pods ?? 500);
const POLICIES = (values.policies ?? '0,100,1000').split(',').map(Number);
const N = Number(values.n ?? 60);
const OUT = values.out ?? join(root, 'bench/results');

const body = `
import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { MemoryDatastore } from ${JSON.stringify(join(root, 'src/datastore/memory.ts'))};
import { startPolicyController } from ${JSON.stringify(join(root, 'src/agent/policy/controller.ts'))};
import { nftRunAsync, nftRun } from ${JSON.stringify(join(root, 'src/native/nft.ts'))};
import { namespaceToProfile } from ${JSON.stringify(join(root, 'src/model/profiles.ts'))};
import { endpointStatusKey } from ${JSON.stringify(join(root, 'src/policy-status/index.ts'))};
import { hostVethName } from ${JSON.stringify(join(root, 'src/model/names.ts'))};

const V = 'netplugin.org/v3';
const NS = 10;
const quiet = { error(m, f) { process.stderr.write('ERROR ' + m + ' ' + JSON.stringify(f ?? {}).slice(0, 300) + String.fromCharCode(10)); }, warn(m, f) { process.stderr.write('WARN ' + m + ' ' + JSON.stringify(f ?? {}).slice(0, 300) + String.fromCharCode(10)); }, info() {}, debug() {}, child() { return quiet; } };
const pct = (xs, p) => { const s = [...xs].sort((a, b) => a - b); return s[Math.min(s.length - 1, Math.ceil((p / 100) * s.length) - 1)]; };

function wep(i, labels) {
  const ns = 'ns' + (i % NS);
  return { apiVersion: V, kind: 'WorkloadEndpoint', metadata: { name: 'node1-k8s-pod' + i + '-eth0', namespace: ns, labels: { ...labels, 'netplugin.org/namespace': ns, 'netplugin.org/orchestrator': 'k8s' } },
    spec: { orchestrator: 'k8s', node: 'node1', containerID: 'c' + i + '-' + Math.random().toString(36).slice(2), pod: 'pod' + i, endpoint: 'eth0', ipNetworks: ['10.' + (100 + (i >> 16)) + '.' + ((i >> 8) & 255) + '.' + (i & 255) + '/32'], profiles: ['kns.' + ns], interfaceName: hostVethName('npb', ns + '.pod' + i), ports: [{ name: 'http', protocol: 'TCP', port: 8080 }] } };
}
function policy(j) {
  const ns = 'ns' + (j % NS);
  return { apiVersion: V, kind: 'NetworkPolicy', metadata: { name: 'p' + j, namespace: ns }, spec: { order: 1000, selector: "app == 'app" + (j % 50) + "'", types: ['Ingress', 'Egress'],
    ingress: [{ action: 'Allow', protocol: 'TCP', source: { selector: "role == 'r" + (j % 37) + "'" }, destination: { ports: [80, 443, 'http'] } }, { action: 'Allow', protocol: 'UDP', source: { nets: ['10.0.0.0/8'], notNets: ['10.1.0.0/16'] }, destination: { ports: ['5000:5100'] } }],
    egress: [{ action: 'Allow', protocol: 'UDP', destination: { ports: [53] } }, { action: 'Allow', destination: { namespaceSelector: "team == 't" + (j % 7) + "'" } }] } };
}
function hostPolicy(j, gen) {
  return { apiVersion: V, kind: 'GlobalNetworkPolicy', metadata: { name: 'hep' + j }, spec: { order: 10 + j, selector: "node-role == 'edge'", applyOnForward: j % 2 === 0, types: ['Ingress', 'Egress'],
    ingress: [{ action: 'Allow', protocol: 'TCP', source: { nets: ['10.' + (j % 200) + '.0.0/16'] }, destination: { ports: [1000 + ((j + gen) % 30000)] } }],
    egress: [{ action: 'Allow', protocol: 'UDP', destination: { ports: [53] } }] } };
}
const hostEndpoints = [
  { apiVersion: V, kind: 'HostEndpoint', metadata: { name: 'node1-auto-hep', labels: { 'node-role': 'edge' } }, spec: { node: 'node1', interfaceName: '*', expectedIPs: ['192.0.2.1'], profiles: ['allow-all'] } },
  { apiVersion: V, kind: 'HostEndpoint', metadata: { name: 'node1-eth0', labels: { 'node-role': 'edge' } }, spec: { node: 'node1', interfaceName: 'eth0', expectedIPs: ['192.0.2.1'] } },
];
const labelsOf = (i, gen) => ({ app: 'app' + ((i + gen) % 50), role: 'r' + (i % 37) });

async function execNft(script) {
  const dir = mkdtempSync(join(tmpdir(), 'bench-nft-'));
  try {
    writeFileSync(join(dir, 's.nft'), script);
    await new Promise((res, rej) => execFile('nft', ['-f', join(dir, 's.nft')], (e, _o, err) => (e ? rej(new Error(err)) : res())));
  } finally { rmSync(dir, { recursive: true, force: true }); }
  return '';
}

export async function run(pods, policies, n, mode, hostPolicies) {
  const table = 'netplugin-bench';
  try { nftRun('delete table inet ' + table); } catch {}
  const ds = new MemoryDatastore();
  for (let k = 0; k < NS; k++) await ds.create(namespaceToProfile({ metadata: { name: 'ns' + k, labels: { team: 't' + (k % 7) } } }));
  for (let i = 0; i < pods; i++) await ds.create(wep(i, labelsOf(i, 0)));
  for (let j = 0; j < policies; j++) await ds.create(policy(j));
  if (hostPolicies > 0) {
    await ds.create({ apiVersion: V, kind: 'Profile', metadata: { name: 'allow-all' }, spec: { ingress: [{ action: 'Allow' }], egress: [{ action: 'Allow' }] } });
    for (const h of hostEndpoints) await ds.create(h);
    for (let j = 0; j < hostPolicies; j++) await ds.create(hostPolicy(j, 0));
  }
  const statusDir = mkdtempSync(join(tmpdir(), 'bench-status-'));
  const nft = mode === 'libnftables' ? (s) => nftRunAsync(s) : execNft;
  let rss = process.memoryUsage().rss;
  const sample = setInterval(() => { rss = Math.max(rss, process.memoryUsage().rss); }, 20);
  const t0 = performance.now();
  const c = await startPolicyController({ ds, nodename: 'node1', log: quiet, base: { vethPrefixes: ['npb'], table }, statusDir, nft });
  let first;
  c.onApplied((s) => { if (!first) first = s; });
  await c.synced;
  const resyncMs = performance.now() - t0;
  const applied = [];
  c.onApplied((s) => applied.push(s));
  const cpu0 = process.cpuUsage();
  const w0 = performance.now();
  // New endpoints: written -> programmed signal.
  const add = [];
  for (let k = 0; k < n; k++) {
    const obj = wep(pods + k, labelsOf(pods + k, 0));
    const t = performance.now();
    const done = new Promise((r) => { const off = c.signal.onProgrammed(endpointStatusKey(obj.metadata.namespace, obj.metadata.name), () => { off(); r(); }); });
    await ds.create(obj);
    await done;
    add.push(performance.now() - t);
  }
  // Label changes: write -> the batch containing it applied.
  const label = [];
  for (let k = 0; k < n; k++) {
    const i = k % pods;
    const cur = await ds.get('WorkloadEndpoint', 'node1-k8s-pod' + i + '-eth0', 'ns' + (i % NS));
    const t = performance.now();
    const before = applied.length;
    const done = new Promise((r) => { const iv = setInterval(() => { if (applied.length > before) { clearInterval(iv); r(); } }, 0); });
    await ds.update({ ...cur, metadata: { ...cur.metadata, labels: { ...cur.metadata.labels, ...labelsOf(i, k + 1) } } });
    await done;
    label.push(performance.now() - t);
  }
  // Host endpoint policy changes: write -> the batch containing it applied.
  const host = [];
  const hostCpu0 = process.cpuUsage();
  for (let k = 0; hostPolicies > 0 && k < n; k++) {
    const cur = await ds.get('GlobalNetworkPolicy', 'hep' + (k % hostPolicies));
    const t = performance.now();
    const before = applied.length;
    const done = new Promise((r) => { const iv = setInterval(() => { if (applied.length > before) { clearInterval(iv); r(); } }, 0); });
    await ds.update({ ...cur, spec: hostPolicy(k % hostPolicies, k + 1).spec });
    await done;
    host.push(performance.now() - t);
  }
  const hostCpu = process.cpuUsage(hostCpu0);
  const wall = performance.now() - w0;
  const cpu = process.cpuUsage(cpu0);
  clearInterval(sample);
  const rules = nftRun('list table inet ' + table).split('\\n').length;
  await c.stop();
  try { nftRun('delete table inet ' + table); } catch {}
  rmSync(statusDir, { recursive: true, force: true });
  const r = (x) => Math.round(x * 10) / 10;
  return { mode, pods, policies, hostPolicies, hostP50: host.length ? r(pct(host, 50)) : null, hostP99: host.length ? r(pct(host, 99)) : null,
    hostCpuMsPerChange: host.length ? r((hostCpu.user + hostCpu.system) / 1000 / host.length) : null, resyncMs: r(resyncMs), resyncCompileMs: r(first.compileMs), resyncApplyMs: r(first.applyMs), resyncCommands: first.commands, tableLines: rules,
    addP50: r(pct(add, 50)), addP99: r(pct(add, 99)), labelP50: r(pct(label, 50)), labelP99: r(pct(label, 99)),
    labelCommandsP50: pct(applied.slice(n).map((s) => s.commands), 50), addCommandsP50: pct(applied.slice(0, n).map((s) => s.commands), 50),
    labelCompileP50: r(pct(applied.slice(n).map((s) => s.compileMs), 50)), labelApplyP50: r(pct(applied.slice(n).map((s) => s.applyMs), 50)),
    cpuPct: r(((cpu.user + cpu.system) / 1000 / wall) * 100), rssMiB: r(rss / 1048576) };
}
`;

const cache = join(root, 'node_modules/.cache');
mkdirSync(cache, { recursive: true });
const entry = join(cache, 'bench-policy-body.ts');
writeFileSync(entry, body);
const outfile = join(cache, 'bench-policy.mjs');
await build({
  entryPoints: [entry],
  bundle: true,
  platform: 'node',
  format: 'esm',
  target: 'node20',
  outfile,
  external: ['etcd3', 'node-gyp-build'],
  banner: { js: "import { createRequire as __cr } from 'node:module'; const require = __cr(import.meta.url);" },
  logLevel: 'error',
});
const { run } = await import(pathToFileURL(outfile).href);

const rows = [];
for (const p of POLICIES) {
  for (const mode of ['libnftables', 'nft -f']) {
    const r = await run(PODS, p, N, mode, HOST_POLICIES);
    rows.push(r);
    process.stdout.write(JSON.stringify(r) + '\n');
  }
}
const md = [
  `Policy benchmark (${new Date().toISOString()}): ${PODS} local endpoints, ${N} adds, ${N} label changes and ${HOST_POLICIES ? N : 0} host endpoint policy changes per row (${HOST_POLICIES} host endpoint policies on 2 host endpoints), in-memory datastore, real nftables`,
  '',
  '| policies | apply via | resync ms (compile + nft) | add→programmed p50 / p99 ms | label→enforced p50 / p99 ms (compile, nft p50) | host policy→enforced p50 / p99 ms | CPU % | peak RSS MiB |',
  '|---:|---|---:|---:|---:|---:|---:|---:|',
  ...rows.map(
    (r) =>
      `| ${r.policies} | ${r.mode} | ${r.resyncMs} (${r.resyncCompileMs} + ${r.resyncApplyMs}) | ${r.addP50} / ${r.addP99} | ${r.labelP50} / ${r.labelP99} (${r.labelCompileP50}, ${r.labelApplyP50}) | ${r.hostP50 ?? '-'} / ${r.hostP99 ?? '-'} (CPU ${r.hostCpuMsPerChange ?? '-'} ms each) | ${r.cpuPct} | ${r.rssMiB} |`,
  ),
].join('\n');
mkdirSync(OUT, { recursive: true });
writeFileSync(join(OUT, 'policy-latest.md'), md + '\n');
writeFileSync(join(OUT, 'policy-latest.json'), JSON.stringify(rows, null, 2) + '\n');
process.stdout.write(md + '\n');
