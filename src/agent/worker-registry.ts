// The functions the agent's worker threads run (see worker-pool.ts), by name.
// The pool calls them with structured-clone arguments and returns their
// structured-clone results; thrown errors keep name, message, code, errno, op
// and subject. Keep this module light: every worker thread imports it.
//
// The dataplane runs here so that netlink calls that sleep in the kernel
// (deleting a veth takes ~20 ms) never block the agent's event loop.
import { setupWorkload, teardownWorkload, checkWorkload } from '../dataplane/index.js';

// eslint-disable-next-line @typescript-eslint/no-explicit-any
export type WorkerFunction = (...args: any[]) => unknown;

export const workerFunctions: Record<string, WorkerFunction> = {
  /** Shows a thread started and loaded this registry (tests, readiness checks). */
  ping: () => 'pong',
  setupWorkload,
  teardownWorkload,
  checkWorkload,
};
