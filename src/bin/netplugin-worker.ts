// Entry of the agent's worker threads (bundled to dist/netplugin-worker.mjs,
// next to dist/netplugin-node.mjs, which starts them through
// src/agent/worker-pool.ts). Not an executable of its own.
export { workerFunctions } from '../agent/worker-registry.js';
