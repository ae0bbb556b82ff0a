#!/usr/bin/env node
// netplugin-node's entry: a CommonJS file on purpose. libuv sizes its
// threadpool once, on first use, and Node reads an ES module entry through
// that pool, so a setting made in dist/netplugin-node.mjs comes too late; the
// first line of a CommonJS entry runs before any pool work. The pool runs the
// agent's blocking calls off the event loop (nftables, the odd direct veth
// deletion, file reads), and libuv's default of 4 is too few for a node
// starting many pods at once. An explicit UV_THREADPOOL_SIZE is kept.
'use strict';
if (!process.env.UV_THREADPOOL_SIZE) process.env.UV_THREADPOOL_SIZE = '16';
import('./netplugin-node.mjs').catch((e) => {
  process.stderr.write(`netplugin-node: ${e?.stack || e}\n`);
  process.exit(1);
});
