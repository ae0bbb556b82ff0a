// The agent's HTTP listeners: /healthz, /readyz and /metrics on --health-addr, and /metrics alone on
// --metrics-addr. Pods need the CNI socket more than probes need a port: a listener that cannot
// start is logged, and the agent keeps serving.
import type { Logger } from '../../log/types.js';
import type { CheckResult, HealthServer } from '../../observe/health.js';
import { startHealthServer } from '../../observe/health.js';
import type { Registry } from '../../observe/metrics.js';
import { startAgentHealth } from '../health.js';
import type { AgentPart } from '../part.js';

interface ListenerInputs {
  log: Logger;
  addr: string;
  registry: Registry;
  /** --health-addr: the parts' aggregated health; without it the listener serves /metrics only. */
  ready?: () => Promise<CheckResult>;
}

export class ListenerPart implements AgentPart {
  readonly name: string;
  private server: HealthServer | undefined;

  constructor(private readonly o: ListenerInputs) {
    this.name = o.ready ? 'health-listener' : 'metrics-listener';
  }

  async start(): Promise<void> {
    const { o } = this;
    try {
      if (o.ready) {
        this.server = await startAgentHealth({ addr: o.addr, registry: o.registry, ready: o.ready });
        o.log.info('serving /healthz, /readyz and /metrics', { addr: `${this.server.host}:${this.server.port}` });
      } else {
        this.server = await startHealthServer({ addr: o.addr, registry: o.registry, metricsOnly: true });
        o.log.info('serving /metrics', { addr: `${this.server.host}:${this.server.port}` });
      }
    } catch (e) {
      const flag = o.ready ? 'pass another --health-addr, or off' : 'pass another --metrics-addr';
      const what = o.ready ? 'health and metrics endpoints' : 'the metrics listener';
      o.log.error(`${(e as Error).message}; serving CNI requests without ${what} (${flag})`);
    }
  }

  async stop(): Promise<void> {
    await this.server?.close();
  }
}
