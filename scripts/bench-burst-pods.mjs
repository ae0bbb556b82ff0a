#!/usr/bin/env node
// The pod burst: 110 pods ADDed at once on one node with 200 NetworkPolicies,
// through the agent, its per-exec fallback and ptp + host-local side by side,
// ready-with-policy checked by traffic (scripts/bench/burst-pods.ts says how).
//
//   npm run build:ts && bash scripts/in-netns node scripts/bench-burst-pods.mjs \
//     [--pods 110] [--policies 200] [--namespaces 10] [--paths agent,perexec,ptp] [--steps] [--ready-timeout 60]
//     [--cpu-prof DIR]
//   --steps  the plugins log at debug level to a file and the report adds where an ADD's time went
//   --cpu-prof DIR  the agent runs under node --cpu-prof (summary: node scripts/bench/profile.mjs DIR)
import { importTs } from './bench/ts.mjs';

const mod = await importTs('scripts/bench/burst-pods.ts');
mod.main(process.argv.slice(2)).then(
  () => process.exit(0),
  (e) => {
    console.error(`bench-burst-pods: ${e?.stack ?? e}`);
    process.exit(1);
  },
);
