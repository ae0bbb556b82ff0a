// A CNI request's per-step timeline, for finding where an ADD's time goes
// (scripts/bench-floor.mjs --timeline). Off unless the process starts with
// NETPLUGIN_TIMELINE=1: then the agent runs each request inside an async
// context, steps anywhere below it record the time they were reached, and
// the finished timeline goes to stderr as one line. Off, mark() is a single
// test of a constant: nothing is kept, nothing is printed.
import { AsyncLocalStorage } from 'node:async_hooks';

interface Timeline {
  command: string;
  t0: number;
  marks: Array<[string, number]>;
}

const store = process.env['NETPLUGIN_TIMELINE'] === '1' ? new AsyncLocalStorage<Timeline>() : undefined;

/** Records that the current request reached `step` (ms since it was read). */
export function mark(step: string): void {
  if (!store) return;
  const t = store.getStore();
  if (t) t.marks.push([step, Math.round((performance.now() - t.t0) * 1000) / 1000]);
}

/** Runs one request's `fn`, which started at `t0` (performance.now()), with a timeline when they are on. */
export function withTimeline<T>(command: string, t0: number, fn: () => Promise<T>): Promise<T> {
  if (!store) return fn();
  const t: Timeline = { command, t0, marks: [] };
  return store.run(t, fn).finally(() => {
    t.marks.push(['done', Math.round((performance.now() - t0) * 1000) / 1000]);
    process.stderr.write(`netplugin-timeline ${JSON.stringify(t)}\n`);
  });
}
