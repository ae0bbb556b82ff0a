// The agent's side of the policy-status protocol: a status file per local endpoint once its policy is
// programmed (ADD's policy wait reads it), cleared when it is not any more, and the in-process signal
// the agent's own ADDs listen to.
import { readdir, rm } from 'node:fs/promises';
import { join } from 'node:path';
import type { Logger } from '../../log/types.js';
import type { Resource } from '../../model/resources.js';
import {
  clearPolicyStatus,
  DEFAULT_STATUS_DIR,
  isStatusFileName,
  statusFileName,
  writePolicyStatus,
  type ProgrammedSignal,
} from '../../policy-status/index.js';
import type { DesiredState } from './compile.js';

export class StatusReporter {
  /** Local endpoints reported programmed: endpointStatusKey → containerID@revision. */
  private readonly reported = new Map<string, string>();
  private readonly waiters = new Map<string, Set<(containerID: string) => void>>();
  readonly signal: ProgrammedSignal = {
    onProgrammed: (key, cb) => {
      let s = this.waiters.get(key);
      if (!s) this.waiters.set(key, (s = new Set()));
      s.add(cb);
      return () => {
        s!.delete(cb);
        if (s!.size === 0) this.waiters.delete(key);
      };
    },
  };

  constructor(private readonly opts: { statusDir?: string | undefined; log: Logger }) {}

  /** Writes the status of the local endpoints programmed in `current`, clears those no longer. */
  async report(
    candidates: Map<string, Resource<'WorkloadEndpoint'>>,
    current: DesiredState | undefined,
  ): Promise<void> {
    const jobs: Array<() => Promise<void>> = [];
    // Programmed means its interface entry is in the table (an endpoint left out is not reported).
    const inTable = new Set(
      [...(current?.endpoints.values() ?? [])].map((e) => `${e.owner.namespace}/${e.owner.name}`),
    );
    const local = new Map(
      [...candidates].filter(([, w]) => inTable.has(`${w.metadata.namespace ?? 'default'}/${w.metadata.name}`)),
    );
    for (const [key, w] of local) {
      // Keyed by revision too: a re-ADD of the same container cleared the file and rewrote the endpoint.
      const stamp = `${w.spec.containerID}@${w.metadata.resourceVersion ?? ''}`;
      if (this.reported.get(key) === stamp) continue;
      this.reported.set(key, stamp);
      jobs.push(async () => {
        await writePolicyStatus(key, {
          ...(this.opts.statusDir ? { statusDir: this.opts.statusDir } : {}),
          containerID: w.spec.containerID,
        });
        for (const cb of this.waiters.get(key) ?? []) cb(w.spec.containerID);
      });
    }
    for (const key of [...this.reported.keys()]) {
      if (local.has(key)) continue;
      this.reported.delete(key);
      jobs.push(() => clearPolicyStatus(key, this.opts.statusDir));
    }
    // A resync reports every pod of the node: a few files at a time, not one after another.
    for (let i = 0; i < jobs.length; i += 32) await Promise.all(jobs.slice(i, i + 32).map((j) => j()));
  }

  /**
   * After the first resync: status files no current endpoint has (an earlier agent's, or of the
   * name format before the namespace was in it).
   */
  async sweep(): Promise<void> {
    const dir = this.opts.statusDir ?? DEFAULT_STATUS_DIR;
    const keep = new Set([...this.reported.keys()].map(statusFileName));
    let files: string[];
    try {
      files = await readdir(dir);
    } catch {
      return; // no directory yet: nothing to sweep
    }
    const stale = files.filter((f) => f.endsWith('.json') && !f.startsWith('.') && !keep.has(f));
    await Promise.all(stale.map((f) => rm(join(dir, f), { force: true }).catch(() => undefined)));
    if (stale.length === 0) return;
    const oldFormat = stale.filter((f) => !isStatusFileName(f)).length;
    const msg = 'policy: removed endpoint status files of endpoints gone or of an earlier format';
    this.opts.log.info(msg, { count: stale.length, oldFormat });
  }
}
