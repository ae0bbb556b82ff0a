#!/usr/bin/env node
// Times one full pod interface setup (setupWorkload with one IPv4 address into
// a fresh namespace) and its teardown, over N runs (default 200): median and
// p90. Namespaces are created and removed outside the timed region; a netns
// plays the host so the root namespace is left alone. Run as root after
// `npm run build:native`:  node scripts/bench-dataplane.mjs [runs] [existing]
// existing: pods set up first (each in its own namespace, as on a node) and
// left in place while the runs are timed: the kernel's costs that grow with
// the pods on the node (docs/performance.md, "The scale cell, profiled").
import { execFileSync } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { build } from 'esbuild';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const runs = Number(process.argv[2] ?? 200);
if (!Number.isInteger(runs) || runs < 1) {
  console.error(`bench-dataplane: runs must be a positive integer, got ${process.argv[2]}`);
  process.exit(2);
}
const existing = Number(process.argv[3] ?? 0);
if (!Number.isInteger(existing) || existing < 0 || existing > 4000) {
  console.error(`bench-dataplane: existing must be an integer from 0 to 4000, got ${process.argv[3]}`);
  process.exit(2);
}

// The dataplane is TypeScript: bundle it next to the package (so the addon
// loader finds package.json above it) and import the bundle.
const out = join(root, 'build', 'bench', 'dataplane.mjs');
mkdirSync(dirname(out), { recursive: true });
await build({
  // The dataplane and the host veth naming rule (model/names.ts) the specs use.
  stdin: {
    contents: "export * from './src/dataplane/index.ts'; export { hostVethName } from './src/model/names.ts';",
    resolveDir: root,
  },
  outfile: out,
  bundle: true,
  platform: 'node',
  format: 'esm',
  target: 'node20',
  external: ['node-gyp-build'],
  logLevel: 'warning',
});
const dp = await import(out);

const tag = `npb${process.pid}`;
const ip = (...a) => execFileSync('ip', a, { stdio: ['ignore', 'ignore', 'inherit'] });
const nsNames = [];
const cleanup = () => {
  for (const n of nsNames.splice(0)) {
    try {
      ip('netns', 'del', n);
    } catch {
      /* already gone */
    }
  }
};
process.on('SIGINT', () => {
  cleanup();
  process.exit(130);
});

const hostNs = `${tag}-host`;
ip('netns', 'add', hostNs);
nsNames.push(hostNs);
const setupMs = [];
const teardownMs = [];
const specOf = (i, c) => ({
  netnsPath: `/var/run/netns/${c}`,
  hostNetnsPath: `/var/run/netns/${hostNs}`,
  ifname: 'eth0',
  hostIfname: dp.hostVethName('npi', `bench.pod-${i}`),
  numQueues: 1,
  hostMac: 'ee:ee:ee:ee:ee:ee',
  addresses: [`10.${(i >> 8) & 255}.${i & 255}.5/32`],
  allowIpForwarding: false,
});
try {
  for (let i = 0; i < existing; i++) {
    const c = `${tag}-e${i}`;
    ip('netns', 'add', c);
    nsNames.push(c);
    dp.setupWorkload(specOf(runs + i, c));
  }
  for (let i = 0; i < runs; i++) {
    const c = `${tag}-c${i}`;
    ip('netns', 'add', c);
    nsNames.push(c);
    const spec = specOf(i, c);
    let t = process.hrtime.bigint();
    dp.setupWorkload(spec);
    setupMs.push(Number(process.hrtime.bigint() - t) / 1e6);
    t = process.hrtime.bigint();
    const r = dp.teardownWorkload({
      netnsPath: spec.netnsPath,
      hostNetnsPath: spec.hostNetnsPath,
      ifname: 'eth0',
      hostIfname: spec.hostIfname,
    });
    teardownMs.push(Number(process.hrtime.bigint() - t) / 1e6);
    if (!r.removed) throw new Error(`run ${i}: teardown found nothing to remove`);
    ip('netns', 'del', c);
    nsNames.pop();
  }
} finally {
  cleanup();
}

const q = (xs, p) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor(p * s.length))];
};
const fmt = (x) => x.toFixed(3);
console.log(`dataplane, ${runs} runs (one IPv4 address, fresh netns each; ${existing} pods on the host):`);
console.log(
  `  setupWorkload     median ${fmt(q(setupMs, 0.5))} ms   p90 ${fmt(q(setupMs, 0.9))} ms   min ` +
    `${fmt(Math.min(...setupMs))} ms`,
);
console.log(
  `  teardownWorkload  median ${fmt(q(teardownMs, 0.5))} ms   p90 ${fmt(q(teardownMs, 0.9))} ms   min ` +
    `${fmt(Math.min(...teardownMs))} ms`,
);
