// Flow-log aggregator bench (npm run bench:flows): the built netplugin-flows fed
// one hour of flows through the real collector protocol (HTTP/2 + mTLS, the
// agent's client module), then its memory:
//   ingest     flow updates per second, from the first batch sent to the last acknowledged
//   memory     RSS of the aggregator holding 240 buckets (1 h) x DISTINCT flows
//   store      the same records into the store in-process (no network, no JSON): its own ceiling
// Environment: FLOWS_DISTINCT (default 10000 distinct flows per 15 s bucket), FLOWS_BUCKETS (240),
// FLOWS_NODE_FLAGS (node flags for the aggregator; default the manifest's heap bounds). The retention is the hour plus
// 10 minutes, so no bucket leaves the ring while the hour is being sent.
import { build } from 'esbuild';
import { spawn, execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, readFileSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join, dirname } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const DISTINCT = Number(process.env.FLOWS_DISTINCT ?? 10_000);
const BUCKETS = Number(process.env.FLOWS_BUCKETS ?? 240);
const work = mkdtempSync(join(tmpdir(), 'netplugin-bench-flows-'));
let agg;
process.on('exit', () => {
  agg?.kill('SIGKILL');
  rmSync(work, { recursive: true, force: true });
});

// The client and the store as the agent and the aggregator run them, bundled from src/.
const entry = join(work, 'entry.ts');
writeFileSync(
  entry,
  `export { FlowClient } from '${join(root, 'src/flows/client.ts')}';\nexport { FlowStore } from '` +
    `${join(root, 'src/flows/store.ts')}';\n`,
);
await build({
  entryPoints: [entry],
  bundle: true,
  platform: 'node',
  format: 'esm',
  outfile: join(work, 'flows.mjs'),
  logLevel: 'warning',
});
const { FlowClient, FlowStore } = await import(pathToFileURL(join(work, 'flows.mjs')).href);

function openssl(args) {
  execFileSync('openssl', args, { cwd: work, stdio: ['ignore', 'ignore', 'pipe'] });
}
function pki() {
  openssl([
    'req',
    '-x509',
    '-newkey',
    'ec',
    '-pkeyopt',
    'ec_paramgen_curve:P-256',
    '-nodes',
    '-keyout',
    'ca.key',
    '-out',
    'ca.crt',
    '-days',
    '1',
    '-subj',
    '/CN=bench-ca',
  ]);
  for (const [name, ext] of [
    ['server', 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n'],
    ['agent', 'extendedKeyUsage=clientAuth\n'],
  ]) {
    writeFileSync(join(work, `${name}.ext`), ext);
    openssl([
      'req',
      '-newkey',
      'ec',
      '-pkeyopt',
      'ec_paramgen_curve:P-256',
      '-nodes',
      '-keyout',
      `${name}.key`,
      '-out',
      `${name}.csr`,
      '-subj',
      `/CN=${name}`,
    ]);
    openssl([
      'x509',
      '-req',
      '-in',
      `${name}.csr`,
      '-CA',
      'ca.crt',
      '-CAkey',
      'ca.key',
      '-CAcreateserial',
      '-out',
      `${name}.crt`,
      '-days',
      '1',
      '-extfile',
      `${name}.ext`,
    ]);
  }
}
const freePort = () =>
  new Promise((resolve) => {
    const s = createServer().listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
const rss = (pid) => {
  const st = readFileSync(`/proc/${pid}/status`, 'utf8');
  const kb = (k) => Number(new RegExp(`${k}:\\s+(\\d+)`).exec(st)[1]);
  return { rss: kb('VmRSS') / 1024, hwm: kb('VmHWM') / 1024 };
};

/** DISTINCT distinct flows: 50 namespaces x pods, ports, both reporters and verdicts, a trace each. */
function templates() {
  const out = [];
  for (let i = 0; i < DISTINCT; i++) {
    const deny = i % 5 === 0;
    out.push({
      reporter: i % 2 ? 'Src' : 'Dst',
      action: deny ? 'Deny' : 'Allow',
      source: {
        type: 'wep',
        namespace: `ns-${i % 50}`,
        name: `client-${i % 997}`,
        labels: { app: `client-${i % 97}`, tier: 'frontend' },
      },
      dest: {
        type: 'wep',
        namespace: `ns-${(i * 7) % 50}`,
        name: `server-${i % 331}`,
        labels: { app: `server-${i % 31}` },
      },
      destPort: 8000 + (i % 13),
      protocol: i % 11 ? 'TCP' : 'UDP',
      policies: {
        enforced: [
          {
            kind: deny ? 'EndOfTier' : 'NetworkPolicy',
            namespace: deny ? '' : `ns-${(i * 7) % 50}`,
            name: deny ? 'default' : `allow-${i % 40}`,
            tier: 'default',
            action: deny ? 'Deny' : 'Allow',
            ruleIndex: deny ? -1 : i % 4,
          },
        ],
        pending:
          i % 9
            ? []
            : [
                {
                  kind: 'StagedNetworkPolicy',
                  namespace: `ns-${(i * 7) % 50}`,
                  name: 'staged-deny',
                  tier: 'default',
                  action: 'Deny',
                  ruleIndex: 0,
                },
              ],
      },
      startTime: 0,
      endTime: 0,
      packetsIn: 10,
      packetsOut: 9,
      bytesIn: 1500,
      bytesOut: 900,
      connectionsStarted: 1,
      connectionsCompleted: 1,
      connectionsLive: 0,
    });
  }
  return out;
}

const tpl = templates();
const nowS = Math.floor(Date.now() / 1000 / 15) * 15;
const bucketRecords = (b) => {
  const t = nowS - (BUCKETS - 1 - b) * 15;
  return tpl.map((r) => ({ ...r, startTime: t + 1, endTime: t + 14 }));
};
const total = DISTINCT * BUCKETS;

// 1. In-process store.
{
  const store = new FlowStore({ retentionMs: BUCKETS * 15_000 + 60_000 });
  const t0 = process.hrtime.bigint();
  for (let b = 0; b < BUCKETS; b++) store.ingest(bucketRecords(b));
  const s = Number(process.hrtime.bigint() - t0) / 1e9;
  const q0 = process.hrtime.bigint();
  const page = store.query({ action: 'Deny', pageSize: 100 });
  const qs = Number(process.hrtime.bigint() - q0) / 1e6;
  console.log(
    `store (in-process): ${total} records in ${s.toFixed(1)} s = ${Math.round(total / s)} updates/s; ` +
      `${store.stats().flows} flows held; a filtered query (action=Deny, ${page.total} matches, one page sorted) ` +
      `${qs.toFixed(0)} ms`,
  );
}

// 2. The built aggregator through the collector protocol.
pki();
const collectorPort = await freePort();
const apiPort = await freePort();
const healthPort = await freePort();
// The heap bounds deploy/netplugin-flows.yaml sets (NODE_OPTIONS; src/model/flows-manifest.ts).
const nodeFlags = (process.env.FLOWS_NODE_FLAGS ?? '--max-old-space-size=128 --max-semi-space-size=4')
  .split(' ')
  .filter(Boolean);
agg = spawn(
  process.execPath,
  [
    ...nodeFlags,
    join(root, 'dist/netplugin-flows.mjs'),
    `--collector-addr=127.0.0.1:${collectorPort}`,
    `--tls-cert=${join(work, 'server.crt')}`,
    `--tls-key=${join(work, 'server.key')}`,
    `--client-ca=${join(work, 'ca.crt')}`,
    `--api-addr=127.0.0.1:${apiPort}`,
    `--health-addr=127.0.0.1:${healthPort}`,
    `--retention=${BUCKETS * 15 + 600}s`,
  ],
  { stdio: ['ignore', 'ignore', 'inherit'] },
);
for (let i = 0; ; i++) {
  if (
    await fetch(`http://127.0.0.1:${healthPort}/readyz`).then(
      (r) => r.ok,
      () => false,
    )
  )
    break;
  if (i > 100) throw new Error('netplugin-flows did not start');
  await new Promise((r) => setTimeout(r, 100));
}
const idle = rss(agg.pid);
const client = new FlowClient({
  url: `https://127.0.0.1:${collectorPort}`,
  node: 'bench',
  cert: readFileSync(join(work, 'agent.crt')),
  key: readFileSync(join(work, 'agent.key')),
  ca: readFileSync(join(work, 'ca.crt')),
  maxBufferedRecords: 200_000,
  batchRecords: 1000,
});
const t0 = process.hrtime.bigint();
for (let b = 0; b < BUCKETS; b++) {
  client.push(bucketRecords(b));
  // Keep the client's buffer below its bound (an agent pushes one flush interval at a time).
  while (client.stats().buffered > 100_000) await new Promise((r) => setTimeout(r, 5));
}
if (!(await client.drained(600_000))) throw new Error('the aggregator did not acknowledge everything');
const secs = Number(process.hrtime.bigint() - t0) / 1e9;
const st = client.stats();
if (st.dropped || st.rejected) throw new Error(`dropped ${st.dropped}, rejected ${st.rejected}`);
const held = await (await fetch(`http://127.0.0.1:${apiPort}/api/v1/flows?pageSize=1`)).json();
await new Promise((r) => setTimeout(r, 2000));
const full = rss(agg.pid);
const q0 = process.hrtime.bigint();
await (await fetch(`http://127.0.0.1:${apiPort}/api/v1/flows?action=Deny&sourceNamespace=ns-5&pageSize=100`)).json();
const qms = Number(process.hrtime.bigint() - q0) / 1e6;
console.log(
  `aggregator (built, HTTP/2 + mTLS): ${total} flow updates in ${secs.toFixed(1)} s = ${Math.round(total / secs)} ` +
    `updates/s (client in this process; target >= 20000)`,
);
console.log(
  `aggregator memory: ${held.total} aggregated flows (${BUCKETS} buckets x ${DISTINCT}) held in RSS ` +
    `${full.rss.toFixed(0)} MiB (idle ${idle.rss.toFixed(0)} MiB, peak ${full.hwm.toFixed(0)} MiB; target <= 256 ` +
    `MiB)`,
);
console.log(`aggregator query over the hour (action=Deny&sourceNamespace=ns-5, first page): ${qms.toFixed(0)} ms`);
await client.close();
agg.kill('SIGTERM');
