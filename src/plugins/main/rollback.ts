// An ADD is a sequence of steps; each pushes its undo here. On failure the
// stack unwinds in reverse so a failed ADD leaves nothing behind (CNI spec:
// a plugin must not leave resources behind after an ADD error).
import type { Logger } from '../../log/types.js';
import { toCniError } from '../../cni/errors.js';
import { CniError } from '../../errors.js';

export class Rollback {
  private readonly undos: Array<{ what: string; fn: () => Promise<unknown> | unknown }> = [];
  constructor(private readonly log: Logger) {}

  push(what: string, fn: () => Promise<unknown> | unknown): void {
    this.undos.push({ what, fn });
  }

  /** Runs every undo, newest first; an undo that fails is logged and the rest still run. */
  async unwind(): Promise<void> {
    while (this.undos.length) {
      const { what, fn } = this.undos.pop()!;
      try {
        await fn();
        this.log.debug(`rolled back: ${what}`);
      } catch (e) {
        this.log.error(`rollback of '${what}' failed; it may need manual cleanup`, { error: (e as Error).message });
      }
    }
  }
}

/**
 * Runs one named ADD step; its failure becomes a CniError whose message starts
 * with the step ("creating the veth pair: ..."), keeping the code the failure
 * maps to (datastore down stays 11, and so on).
 */
export async function step<T>(name: string, fn: () => Promise<T> | T): Promise<T> {
  try {
    return await fn();
  } catch (e) {
    throw inStep(name, e);
  }
}

function inStep(name: string, e: unknown): Error {
  if ((e as { step?: string } | null)?.step) return e as Error;
  const err = toCniError(e);
  const out = new CniError(err.code, `${name}: ${err.message}`, err.details) as CniError & {
    step?: string;
    internal?: boolean;
  };
  out.step = name;
  out.cause = e;
  // An unexpected exception keeps its stack for the log (the dispatcher logs internal errors' stacks).
  if (err.internal) {
    out.internal = true;
    if (e instanceof Error && e.stack) out.stack = e.stack;
  }
  return out;
}
