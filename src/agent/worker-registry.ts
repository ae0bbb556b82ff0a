// The functions the agent's worker threads run (see worker-pool.ts), by name.
// The pool calls them with structured-clone arguments and returns their
// structured-clone results; thrown errors keep name, message, code, errno, op
// and subject. Keep this module light: every worker thread imports it.
//
// The dataplane is wired in here (setupWorkload, teardownWorkload,
// checkWorkload from ../dataplane/index.js), e.g.
//   import { setupWorkload, teardownWorkload, checkWorkload } from '../dataplane/index.js';
//   export const workerFunctions = { setupWorkload, teardownWorkload, checkWorkload };

// eslint-disable-next-line @typescript-eslint/no-explicit-any
export type WorkerFunction = (...args: any[]) => unknown;

export const workerFunctions: Record<string, WorkerFunction> = {
  /** Shows a thread started and loaded this registry (tests, readiness checks). */
  ping: () => 'pong',
};
