#!/usr/bin/env node
// Summarises V8 .cpuprofile files (node --cpu-prof): self time per function,
// the top N, across all given files (the agent's main thread and its workers
// each write one). Used by `node scripts/bench.mjs --cpu-prof`; also by hand:
//   node scripts/bench/profile.mjs DIR|FILE... [--top 25]
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';

/** [{ fn, where, selfMs, pct }] sorted by self time, plus the total sampled ms. */
export function summariseProfiles(files, top = 25, root = process.cwd()) {
  const self = new Map();
  let total = 0;
  for (const f of files) {
    const p = JSON.parse(readFileSync(f, 'utf8'));
    const byId = new Map(p.nodes.map((n) => [n.id, n]));
    // timeDeltas[i] is the time before sample i: attribute it to that sample's node.
    for (let i = 0; i < p.samples.length; i++) {
      const dt = (p.timeDeltas?.[i] ?? 0) / 1000;
      const n = byId.get(p.samples[i]);
      if (!n) continue;
      const cf = n.callFrame;
      const url = cf.url ? relative(root, cf.url.replace(/^file:\/\//, '')) : '';
      const key = `${cf.functionName || '(anonymous)'}\t${url ? `${url}:${cf.lineNumber + 1}` : ''}`;
      self.set(key, (self.get(key) ?? 0) + dt);
      total += dt;
    }
  }
  const rows = [...self.entries()]
    .map(([k, ms]) => {
      const [fn, where] = k.split('\t');
      return { fn, where, selfMs: ms, pct: total ? (100 * ms) / total : 0 };
    })
    .sort((a, b) => b.selfMs - a.selfMs)
    .slice(0, top);
  return { rows, totalMs: total };
}

export function profileFiles(paths) {
  const out = [];
  for (const p of paths) {
    if (statSync(p).isDirectory())
      out.push(
        ...readdirSync(p)
          .filter((f) => f.endsWith('.cpuprofile'))
          .map((f) => join(p, f)),
      );
    else out.push(p);
  }
  return out;
}

export function formatProfile({ rows, totalMs }) {
  const lines = [
    `sampled ${totalMs.toFixed(0)} ms in total; top functions by self time:`,
    '',
    '| self ms | % | function | where |',
    '|---:|---:|---|---|',
  ];
  for (const r of rows)
    lines.push(`| ${r.selfMs.toFixed(1)} | ${r.pct.toFixed(1)} | \`${r.fn}\` | ${r.where || '(native/VM)'} |`);
  return lines.join('\n');
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const args = process.argv.slice(2);
  const ti = args.indexOf('--top');
  const top = ti >= 0 ? Number(args.splice(ti, 2)[1]) : 25;
  if (!args.length) {
    console.error('usage: node scripts/bench/profile.mjs DIR|FILE.cpuprofile... [--top N]');
    process.exit(2);
  }
  console.log(formatProfile(summariseProfiles(profileFiles(args), top)));
}
