#!/usr/bin/env node
// The scale harness (npm run bench:scale): N simulated nodes (network
// namespaces on an underlay bridge, one netplugin-node each), one datastore,
// 20 pods per node; route, policy and node-deletion convergence, agent CPU and
// RSS, datastore load per agent (scripts/bench/scale.ts says what and how).
//
//   npm run build:ts && bash scripts/in-netns node scripts/bench-scale.mjs \
//     [--nodes 10,25,50] [--datastore etcdv3,kubernetes] [--pods-per-node 20] [--policies 5] \
//     [--idle-seconds 20] [--concurrency 8] [--json FILE]
//   --remote 0,10000,30000  instead: one agent with that many other nodes' endpoints in etcd (RSS, CPU)
// Everything (namespaces, agents, etcd, temp dirs) is removed at exit, also on Ctrl-C or failure.
import { importTs } from './bench/ts.mjs';

const mod = await importTs('scripts/bench/scale.ts');
mod.main(process.argv.slice(2)).then(
  () => process.exit(0),
  (e) => {
    console.error(`bench-scale: ${e?.stack ?? e}`);
    process.exit(1);
  },
);
