#!/usr/bin/env node
// Flow logs on the node (the agent's half of npm run bench:flows), run through
// scripts/in-netns: two "pods" (network namespaces behind host veths, as the
// plugin makes them) and the policy controller programming real nftables, once
// without flow logs and once with them (tagged rules, the NFLOG and conntrack
// readers, aggregation and a conntrack dump per flush), alternated so each
// pair is measured side by side on a loaded machine:
//   conn/s   new TCP connections per second, client to server (connect, read "ok", close), C at once
//   bulk     MB/s over one TCP connection
//   cpu      this process's CPU (the agent's part) per 1000 connections/s
//
//   node scripts/bench-flows-node.mjs [--seconds 8] [--rounds 2] [--concurrency 8] [--out bench/results]
import { build } from 'esbuild';
import { mkdirSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const { values } = parseArgs({
  options: {
    seconds: { type: 'string' },
    rounds: { type: 'string' },
    concurrency: { type: 'string' },
    out: { type: 'string' },
  },
});
const SECONDS = Number(values.seconds ?? 8);
const ROUNDS = Number(values.rounds ?? 2);
const CONC = Number(values.concurrency ?? 8);
const OUT = values.out ?? join(root, 'bench/results');

const body = `
import { execFileSync, spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { MemoryDatastore } from ${JSON.stringify(join(root, 'src/datastore/memory.ts'))};
import { startPolicyController } from ${JSON.stringify(join(root, 'src/agent/policy/controller.ts'))};
import { nftRun } from ${JSON.stringify(join(root, 'src/native/nft.ts'))};
import { namespaceToProfile } from ${JSON.stringify(join(root, 'src/model/profiles.ts'))};
import { hostVethName } from ${JSON.stringify(join(root, 'src/model/names.ts'))};
import { FlowAggregator } from ${JSON.stringify(join(root, 'src/agent/flows/aggregate.ts'))};
import { DEFAULT_FLOW_LOG_RULES } from ${JSON.stringify(join(root, 'src/agent/flows/index.ts'))};
import { enableConntrackAccounting, openFlowEvents, conntrackSnapshot } from ${JSON.stringify(join(root, 'src/dataplane/flowlog.ts'))};

const V = 'netplugin.org/v3';
const TABLE = 'netplugin-fnb';
const quiet = { error(m) { process.stderr.write('ERROR ' + m + String.fromCharCode(10)); }, warn() {}, info() {}, debug() {}, child() { return quiet; } };
const PODS = { cli: '10.174.0.2', srv: '10.174.0.3' };
const sh = (...a) => execFileSync(a[0], a.slice(1), { stdio: ['ignore', 'pipe', 'pipe'] }).toString();
const nsName = (p) => 'fnb-' + p + '-' + process.pid;
// The host veth the agent derives for the pod (it refuses an endpoint recorded under another name).
const IF = (p) => hostVethName('fnb', 'ns0.' + p);

export function setup() {
  for (const [p, ip] of Object.entries(PODS)) {
    const ns = nsName(p);
    sh('ip', 'netns', 'add', ns);
    sh('ip', 'link', 'add', IF(p), 'type', 'veth', 'peer', 'name', 'eth0', 'netns', ns);
    sh('ip', 'link', 'set', IF(p), 'up');
    // The pods' gateway: a host address on each host veth (answered by ARP; no route needed).
    sh('ip', 'addr', 'add', '169.254.1.1/32', 'dev', IF(p));
    sh('ip', 'route', 'add', ip + '/32', 'dev', IF(p));
    sh('ip', '-n', ns, 'link', 'set', 'lo', 'up');
    sh('ip', '-n', ns, 'addr', 'add', ip + '/32', 'dev', 'eth0');
    sh('ip', '-n', ns, 'link', 'set', 'eth0', 'up');
    sh('ip', '-n', ns, 'route', 'add', '169.254.1.1', 'dev', 'eth0', 'scope', 'link');
    sh('ip', '-n', ns, 'route', 'add', 'default', 'via', '169.254.1.1');
  }
}

export function teardown() {
  for (const p of Object.keys(PODS)) {
    try { sh('ip', 'netns', 'del', nsName(p)); } catch {}
  }
  try { nftRun('delete table inet ' + TABLE); } catch {}
}

function wep(p) {
  return { apiVersion: V, kind: 'WorkloadEndpoint', metadata: { name: 'node1-k8s-' + p + '-eth0', namespace: 'ns0', labels: { pod: p, 'netplugin.org/namespace': 'ns0', 'netplugin.org/orchestrator': 'k8s' } },
    spec: { orchestrator: 'k8s', node: 'node1', containerID: 'c-' + p, pod: p, endpoint: 'eth0', ipNetworks: [PODS[p] + '/32'], profiles: ['kns.ns0'], interfaceName: IF(p) } };
}

const SERVER = "const net=require('net');net.createServer(s=>{s.on('error',()=>{});s.end('ok')}).listen(80,()=>{});net.createServer(s=>{s.on('error',()=>{});s.resume()}).listen(81,()=>console.log('ready'))";
const CLIENT = "const net=require('net');const [dst,secs,conc,mode]=process.argv.slice(1);const end=Date.now()+secs*1000;" +
  "if(mode==='bulk'){const buf=Buffer.alloc(1<<16);let n=0;const s=net.connect(81,dst,()=>{const w=()=>{while(Date.now()<end){n+=buf.length;if(!s.write(buf))return s.once('drain',w)}s.end();console.log(n)};w()})}" +
  "else{let n=0,live=+conc;const one=()=>{if(Date.now()>=end){if(--live===0)console.log(n);return}const s=net.connect(80,dst);s.on('data',()=>{});s.on('end',()=>{n++;s.destroy();one()});s.on('error',()=>{s.destroy();one()})};for(let i=0;i<conc;i++)one()}";

function inNs(p, args) {
  return new Promise((resolve, reject) => {
    const c = spawn('ip', ['netns', 'exec', nsName(p), process.execPath, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    c.stdout.on('data', (d) => (out += d));
    c.stderr.on('data', (d) => (err += d));
    c.on('exit', (code) => (code === 0 ? resolve(out.trim()) : reject(new Error('client exit ' + code + ': ' + err.slice(-2000)))));
  });
}

export async function run(flows, seconds, conc) {
  try { nftRun('delete table inet ' + TABLE); } catch {}
  const ds = new MemoryDatastore();
  await ds.create(namespaceToProfile({ metadata: { name: 'ns0', labels: {} } }));
  for (const p of Object.keys(PODS)) await ds.create(wep(p));
  const statusDir = mkdtempSync(join(tmpdir(), 'bench-flows-status-'));
  const c = await startPolicyController({ ds, nodename: 'node1', log: quiet, base: { vethPrefixes: ['fnb'], table: TABLE }, statusDir, ...(flows ? { flowLog: DEFAULT_FLOW_LOG_RULES } : {}) });
  await c.synced;
  let events, timer, agg, records = 0;
  if (flows) {
    enableConntrackAccounting();
    const byAddr = new Map(Object.entries(PODS).map(([p, ip]) => [ip, { endpoint: { type: 'wep', namespace: 'ns0', name: p, labels: { pod: p } }, local: true }]));
    agg = new FlowAggregator({ resolve: (a) => byAddr.get(a), refs: () => c.flowRefs() });
    events = openFlowEvents({ group: DEFAULT_FLOW_LOG_RULES.group, onNflog: (x) => agg.onNflog(x), onConntrack: (x) => agg.onConntrack(x) });
    // Flushes every 5 s here (the default is 15 s): the dump's cost is in the figure.
    timer = setInterval(() => (records += agg.flush(conntrackSnapshot()).length), 5000);
  }
  // Its own process group: killed as a whole (ip netns exec may stay its parent).
  const server = spawn('ip', ['netns', 'exec', nsName('srv'), process.execPath, '-e', SERVER], { stdio: ['ignore', 'pipe', 'inherit'], detached: true });
  const killServer = () => { try { process.kill(-server.pid, 'SIGKILL'); } catch {} };
  process.once('exit', killServer);
  await new Promise((r) => createInterface({ input: server.stdout }).once('line', r));
  let conns, wall, cpu, bulkBytes;
  try {
    const cpu0 = process.cpuUsage();
    const t0 = performance.now();
    conns = Number(await inNs('cli', ['-e', CLIENT, PODS.srv, String(seconds), String(conc), 'conn']));
    wall = (performance.now() - t0) / 1000;
    cpu = process.cpuUsage(cpu0);
    bulkBytes = Number(await inNs('cli', ['-e', CLIENT, PODS.srv, String(Math.max(3, seconds / 2)), '1', 'bulk']));
  } finally {
    killServer();
  }
  if (flows) {
    clearInterval(timer);
    records += agg.flush(conntrackSnapshot()).length;
    events.close();
  }
  await c.stop();
  try { nftRun('delete table inet ' + TABLE); } catch {}
  rmSync(statusDir, { recursive: true, force: true });
  const rate = conns / wall;
  const cpuMsPerS = (cpu.user + cpu.system) / 1000 / wall;
  return { flows, connPerS: Math.round(rate), bulkMBps: Math.round(bulkBytes / Math.max(3, seconds / 2) / 1e5) / 10,
    cpuMsPerS: Math.round(cpuMsPerS * 10) / 10, cpuMsPer1000ConnPerS: Math.round((cpuMsPerS / (rate / 1000)) * 10) / 10, records,
    samples: agg?.samples ?? 0 };
}
`;

const cache = join(root, 'node_modules/.cache');
mkdirSync(cache, { recursive: true });
const entry = join(cache, 'bench-flows-node-body.ts');
writeFileSync(entry, body);
const outfile = join(cache, 'bench-flows-node.mjs');
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
const { setup, teardown, run } = await import(pathToFileURL(outfile).href);

const rows = [];
setup();
try {
  for (let i = 0; i < ROUNDS; i++) {
    for (const flows of [false, true]) {
      const r = await run(flows, SECONDS, CONC);
      rows.push(r);
      process.stdout.write(JSON.stringify(r) + '\n');
    }
  }
} finally {
  teardown();
}
const mean = (f, k) => rows.filter((r) => r.flows === f).reduce((s, r) => s + r[k], 0) / ROUNDS;
const pct = (k) => Math.round((mean(true, k) / mean(false, k)) * 1000) / 10;
const md = [
  `Flow logs on the node (${new Date().toISOString()}): ${ROUNDS} rounds of off/on side by side, ${SECONDS} s each, ${CONC} connections at once`,
  '',
  '| flow logs | new TCP conn/s | bulk MB/s | agent CPU ms/s | agent CPU ms/s per 1000 conn/s |',
  '|---|---:|---:|---:|---:|',
  ...rows.map(
    (r) => `| ${r.flows ? 'on' : 'off'} | ${r.connPerS} | ${r.bulkMBps} | ${r.cpuMsPerS} | ${r.cpuMsPer1000ConnPerS} |`,
  ),
  '',
  `on/off: connections ${pct('connPerS')} %, bulk ${pct('bulkMBps')} %`,
].join('\n');
mkdirSync(OUT, { recursive: true });
writeFileSync(join(OUT, 'flows-node-latest.md'), md + '\n');
process.stdout.write(md + '\n');
