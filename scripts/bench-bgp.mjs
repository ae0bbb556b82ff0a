#!/usr/bin/env node
// BGP: how fast a claimed block reaches a top-of-rack router, and what BIRD
// costs. A node namespace runs a real BIRD through the agent's supervisor
// (src/agent/bgp) and peers over eBGP with FRR's bgpd + zebra in a "ToR"
// namespace (AS 65000). Measured:
//   - block claimed (re-render + bird -p + birdc configure) -> route in the ToR's kernel, p50/p99 over N blocks
//   - re-render time and apply (bird -p + birdc configure) time
//   - 1,000 advertised routes: BIRD's and this process's (the agent's renderer and supervisor) CPU and memory
//
//   npm run bench:bgp            (bash scripts/in-netns node scripts/bench-bgp.mjs [--n 50])
import { spawnSync } from 'node:child_process';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { memoryMiB, processCpuMs, summary, withBundle } from './bench/lib.mjs';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const nArg = process.argv.indexOf('--n');
const N = nArg > 0 ? Number(process.argv[nArg + 1]) : 50;

const body = `
import { execFileSync, spawn } from 'node:child_process';
import { chmodSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { BirdSupervisor } from ${JSON.stringify(join(root, 'src/agent/bgp/supervisor.ts'))};
import { renderBirdConfig } from ${JSON.stringify(join(root, 'src/agent/bgp/render.ts'))};
import { parseCidr, formatCidr, blockAt } from ${JSON.stringify(join(root, 'src/net/cidr.ts'))};
import { createNetns, deleteNetns } from ${JSON.stringify(join(root, 'test/support/netns.ts'))};

export async function run(N, lib) {
  const tmp = mkdtempSync(join(tmpdir(), 'bench-bgp-'));
  chmodSync(tmp, 0o755);
  const node = createNetns('bbnode').name, tor = createNetns('bbtor').name;
  const procs = [];
  let bird;
  const ip = (n, ...a) => execFileSync('ip', ['-n', n, ...a]);
  try {
    ip(node, 'link', 'add', 'eth0', 'type', 'veth', 'peer', 'name', 'eth0', 'netns', tor);
    ip(node, 'addr', 'add', '10.210.0.1/24', 'dev', 'eth0'); ip(node, 'link', 'set', 'eth0', 'up');
    ip(tor, 'addr', 'add', '10.210.0.254/24', 'dev', 'eth0'); ip(tor, 'link', 'set', 'eth0', 'up');
    const frr = join(tmp, 'frr'); mkdirSync(frr);
    writeFileSync(join(frr, 'zebra.conf'), '');
    writeFileSync(join(frr, 'bgpd.conf'), ['frr defaults traditional', 'router bgp 65000', ' bgp router-id 10.210.0.254',
      ' no bgp ebgp-requires-policy', ' neighbor 10.210.0.1 remote-as 64512', ' neighbor 10.210.0.1 timers connect 1', ''].join('\\n'));
    execFileSync('chown', ['-R', 'frr:frr', frr]);
    const common = ['--vty_socket', frr, '-z', join(frr, 'zserv.api'), '-u', 'frr', '-g', 'frr', '-P', '0'];
    procs.push(spawn('ip', ['netns', 'exec', tor, '/usr/lib/frr/zebra', '-f', join(frr, 'zebra.conf'), '-i', join(frr, 'z.pid'), ...common], { stdio: 'ignore' }));
    await new Promise((r) => setTimeout(r, 500));
    procs.push(spawn('ip', ['netns', 'exec', tor, '/usr/lib/frr/bgpd', '-f', join(frr, 'bgpd.conf'), '-i', join(frr, 'b.pid'), ...common], { stdio: 'ignore' }));
    const bin = join(tmp, 'bin'); mkdirSync(bin);
    writeFileSync(join(bin, 'bird'), '#!/bin/sh\\nexec ip netns exec ' + node + ' /usr/sbin/bird "$@"\\n');
    writeFileSync(join(bin, 'birdc'), '#!/bin/sh\\nexec /usr/sbin/birdc "$@"\\n');
    for (const f of ['bird', 'birdc']) chmodSync(join(bin, f), 0o755);
    const silent = { error() {}, warn() {}, info() {}, debug() {} };
    bird = new BirdSupervisor({ birdPath: join(bin, 'bird'), runDir: join(tmp, 'bird'), log: silent, pollMs: 100 });
    const pool = parseCidr('10.244.0.0/16');
    const blocks = Array.from({ length: 1024 }, (_, i) => formatCidr(blockAt(pool, 26, BigInt(i))));
    const input = (n) => ({ me: 'a', nodes: [{ metadata: { name: 'a' }, spec: { ipv4Address: '10.210.0.1/24' } }], configs: [],
      peers: [{ metadata: { name: 'tor' }, spec: { peerIP: '10.210.0.254', asNumber: 65000 } }],
      pools: [{ name: 'p', spec: { cidr: '10.244.0.0/16', vxlanMode: 'Never', ipipMode: 'Never' } }],
      blocks: blocks.slice(0, n), borrowed: [], extraAddresses: [], subnets: [parseCidr('10.210.0.0/24')], passwords: new Map(), runDir: join(tmp, 'bird') });
    const torHas = (cidr) => execFileSync('ip', ['-n', tor, '-4', 'route', 'show', 'exact', cidr], { encoding: 'utf8' }).includes('via');
    const torCount = () => execFileSync('ip', ['-n', tor, '-4', 'route', 'show', 'proto', 'bgp'], { encoding: 'utf8' }).split('\\n').filter(Boolean).length;
    await bird.apply(renderBirdConfig(input(1)));
    for (let t = Date.now(); bird.status().established < 1 || !torHas(blocks[0]); ) {
      if (Date.now() - t > 60000) throw new Error('no session to the ToR');
      await new Promise((r) => setTimeout(r, 50));
    }
    const toTor = [], render = [], apply = [];
    for (let i = 2; i <= N + 1; i++) {
      const t0 = performance.now();
      const cfg = renderBirdConfig(input(i));
      const t1 = performance.now();
      await bird.apply(cfg);
      const t2 = performance.now();
      while (!torHas(blocks[i - 1])) await new Promise((r) => setTimeout(r, 2));
      toTor.push(performance.now() - t0); render.push(t1 - t0); apply.push(t2 - t1);
    }
    // 1,000 advertised routes.
    const pid = bird.status().pid;
    const cpu0 = { bird: lib.processCpuMs(pid), self: process.cpuUsage() };
    const t0 = performance.now();
    const big = renderBirdConfig(input(1000));
    const bigRender = performance.now() - t0;
    await bird.apply(big);
    const bigApply = performance.now() - t0 - bigRender;
    while (torCount() < 1000) await new Promise((r) => setTimeout(r, 10));
    const all = performance.now() - t0;
    const c = process.cpuUsage(cpu0.self);
    return {
      n: N, toTor: lib.summary(toTor), render: lib.summary(render), apply: lib.summary(apply),
      big: { renderMs: bigRender, applyMs: bigApply, allAtTorMs: all, birdCpuMs: lib.processCpuMs(pid) - cpu0.bird,
        agentCpuMs: (c.user + c.system) / 1000, birdMem: lib.memoryMiB(pid), agentRssMiB: process.memoryUsage().rss / 1048576,
        configBytes: big.config.length },
    };
  } finally {
    await bird?.stop();
    for (const p of procs) p.kill('SIGTERM');
    await new Promise((r) => setTimeout(r, 300));
    deleteNetns(node); deleteNetns(tor);
    rmSync(tmp, { recursive: true, force: true });
  }
}
`;

const r = await withBundle(root, 'bench-bgp', body, ({ run }) => run(N, { processCpuMs, memoryMiB, summary }));
const f = (s) => `p50 ${s.p50.toFixed(1)} ms, p99 ${s.p99.toFixed(1)} ms`;
const v = spawnSync('/usr/sbin/bird', ['--version'], { encoding: 'utf8' });
console.log(`${(v.stderr || v.stdout).trim()}, FRR bgpd as the ToR; ${N} blocks, one at a time`);
console.log(`block claimed -> route at the ToR: ${f(r.toTor)}`);
console.log(`  re-render: ${f(r.render)}; bird -p + birdc configure: ${f(r.apply)}`);
const b = r.big;
console.log(
  `1,000 advertised routes: render ${b.renderMs.toFixed(1)} ms (${(b.configBytes / 1024).toFixed(0)} KiB), bird -p + ` +
    `configure ${b.applyMs.toFixed(1)} ms, all at the ToR after ${b.allAtTorMs.toFixed(0)} ms`,
);
console.log(
  `  BIRD: ${b.birdCpuMs.toFixed(0)} ms CPU, RSS ${b.birdMem.rss.toFixed(1)} MiB (peak ${b.birdMem.hwm.toFixed(1)}); ` +
    `agent (renderer + supervisor): ${b.agentCpuMs.toFixed(0)} ms CPU, RSS ${b.agentRssMiB.toFixed(0)} MiB`,
);
