// The agent's dataplane: setup and check inline (short syscalls that never sleep), and teardown
// through the trash group: a DEL moves the host veth into the trash and returns; the trash is
// deleted in one batch every few ms on the libuv threadpool (the deletion sleeps ~20 ms in the
// kernel waiting for an RCU grace period), so the loop is never held (docs/performance.md).
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import * as dp from '../../dataplane/index.js';
import type { Logger } from '../../log/types.js';
import type { DataplanePort } from '../../plugins/main/runtime.js';
import { HOST_MAC } from '../../plugins/main/common.js';
import type { AgentPart } from '../part.js';

interface DataplaneInputs {
  log: Logger;
  /** The agent's own directory (the socket's, 0700): the conntrack journal lives there. */
  stateDir: string;
}

export class DataplanePart implements AgentPart {
  readonly name = 'dataplane';
  private port: DataplanePort | undefined;
  private closeAll: (() => Promise<void>) | undefined;

  constructor(private readonly o: DataplaneInputs) {}

  /** The port the CNI handlers use; set once start() settled. */
  get dataplane(): DataplanePort {
    if (!this.port) throw new Error('the dataplane part has not started');
    return this.port;
  }

  async start(): Promise<void> {
    const { log, stateDir } = this.o;
    const trash = dp.createTrash({ log });
    // A crash's leftovers go now.
    await trash
      .purge(HOST_MAC)
      .catch((e: Error) => log.error('cannot delete the trashed veths left by an earlier agent', { error: e.message }));
    // A DEL's conntrack flush runs off its request path, one dump for every DEL meanwhile; an ADD
    // reusing one of those addresses waits for it (docs/performance.md). Journaled in the agent's
    // directory: what a killed agent left is flushed here, before serving.
    mkdirSync(stateDir, { recursive: true, mode: 0o700 });
    const conntrack = dp.createConntrackFlusher({ log, journal: join(stateDir, 'conntrack-pending') });
    const workloads = dp.createWorkloadSetup();
    this.port = {
      setup: async (spec) => (await conntrack.settled(spec.addresses), workloads.setup(spec)),
      teardown: (o) => trash.teardown(o),
      check: async (spec, expect) => dp.checkWorkload(spec, expect),
      purgeTrash: (hostMac) => trash.purge(hostMac),
      flushConntrack: (addrs) => conntrack.defer(addrs),
    };
    this.closeAll = () => Promise.all([conntrack.close(), trash.close()]).then(() => workloads.close());
  }

  async stop(): Promise<void> {
    await this.closeAll?.();
  }
}
