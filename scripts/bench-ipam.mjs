#!/usr/bin/env node
// Allocation throughput of the in-process allocator (src/ipam) on a throwaway
// etcd: sequential, 16-way concurrent on one node (the host lock serialises
// them), and 16 nodes at once (CAS contention only on block claims).
//
//   node scripts/bench-ipam.mjs [--n 600]
//
// Node 20 cannot run the TypeScript sources directly, so the bench body below
// is bundled with esbuild and imported (withBundle, scripts/bench/lib.mjs).
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { withBundle } from './bench/lib.mjs';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const nArg = process.argv.indexOf('--n');
const N = nArg > 0 ? Number(process.argv[nArg + 1]) : 600;

const body = `
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startEtcd } from ${JSON.stringify(join(root, 'test/support/etcd.ts'))};
import { openDatastore } from ${JSON.stringify(join(root, 'src/datastore/index.ts'))};
import { Ipam } from ${JSON.stringify(join(root, 'src/ipam/index.ts'))};
import { ipamHostLock } from ${JSON.stringify(join(root, 'src/hostlock/index.ts'))};

export async function run(N) {
  const etcd = await startEtcd();
  const dir = mkdtempSync(join(tmpdir(), 'netplugin-bench-ipam-'));
  const ds = await openDatastore({ datastore_type: 'etcdv3', etcd_endpoints: etcd.endpoint, timeoutMs: 30000 });
  const counts = { get: 0, list: 0, create: 0, update: 0, delete: 0 };
  const counted = new Proxy(ds, {
    get(t, k) {
      const v = t[k];
      if (typeof v !== 'function') return v;
      return (...a) => { if (k in counts) counts[k]++; return v.apply(t, a); };
    },
  });
  const rows = [];
  try {
    await ds.create({ apiVersion: 'netplugin.org/v3', kind: 'IPPool', metadata: { name: 'bench' }, spec: { cidr: '10.200.0.0/16', blockSize: 26 } });
    const mk = (node) => new Ipam(counted, { lock: ipamHostLock(join(dir, node + '.lock')) });
    let seq = 0;
    const req = (node) => ({ handleID: 'bench.' + (++seq), node, attrs: { namespace: 'bench', pod: 'p' + seq }, assignIPv4: true, assignIPv6: false });
    // warm the connection
    await mk('warm').assign(req('warm'));

    const phase = async (name, n, conc, nodes, op) => {
      for (const k in counts) counts[k] = 0;
      const ipams = nodes.map(mk);
      let next = 0;
      const t0 = performance.now();
      await Promise.all(Array.from({ length: conc }, async (_, w) => {
        while (next < n) { const i = next++; await op(ipams[i % ipams.length], nodes[i % nodes.length], i); }
      }));
      const ms = performance.now() - t0;
      const calls = Object.values(counts).reduce((a, b) => a + b, 0);
      rows.push({ phase: name, ops: n, concurrency: conc, nodes: nodes.length, ms: Math.round(ms), perSec: Math.round(n / (ms / 1000)), callsPerOp: +(calls / n).toFixed(2), writesPerOp: +((counts.create + counts.update + counts.delete) / n).toFixed(2) });
    };
    const handles = [];
    const assign = async (ipam, node) => { const r = req(node); await ipam.assign(r); handles.push([ipam, r.handleID]); };
    await phase('assign, sequential, 1 node', N, 1, ['node-0'], assign);
    await phase('assign, 16-way, 1 node (host lock)', N, 16, ['node-1'], assign);
    const sixteen = Array.from({ length: 16 }, (_, i) => 'node-x' + i);
    await phase('assign, 16-way, 16 nodes', N, 16, sixteen, assign);
    const toRelease = handles.splice(0);
    await phase('release, sequential', N, 1, ['node-0'], async (_ipam, _node, i) => { const [ipam, h] = toRelease[i]; await ipam.releaseByHandle(h); });
    await phase('release, 16-way', toRelease.length - N, 16, ['node-0'], async (_ipam, _node, i) => { const [ipam, h] = toRelease[N + i]; await ipam.releaseByHandle(h); });
  } finally {
    await ds.close();
    await etcd.stop();
    rmSync(dir, { recursive: true, force: true });
  }
  return rows;
}
`;

const rows = await withBundle(root, 'bench-ipam', body, ({ run }) => run(N));
console.log(`netplugin IPAM allocator on a local etcd (${N} operations per phase, pool 10.200.0.0/16, /26 blocks)`);
console.table(rows);
