// An ADD is a sequence of steps; each pushes its undo here. On failure the
// stack unwinds in reverse so a failed ADD leaves nothing behind (CNI spec:
// a plugin must not leave resources behind after an ADD error).
import type { Logger } from '../../cni/types.js';

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

/** Runs one named ADD step; its failure message says which step failed. */
export async function step<T>(name: string, fn: () => Promise<T> | T): Promise<T> {
  try {
    return await fn();
  } catch (e) {
    if (e instanceof Error && !(e as { step?: string }).step) {
      (e as { step?: string }).step = name;
      e.message = `${name}: ${e.message}`;
    }
    throw e;
  }
}
