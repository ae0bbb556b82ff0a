// Network policy (policy.type k8s in the node's CNI config) as a part: nftables from the datastore's
// policy model, flow logs with the --flow-* flags, and the signal ADD's policy wait listens to.
import type { Logger } from '../../log/types.js';
import type { ProgrammedSignal } from '../../policy-status/index.js';
import type { FlowLogFlags } from '../flows/index.js';
import type { createAgentMetrics } from '../metrics.js';
import { readNetpluginConf } from '../node-init.js';
import type { AgentPart } from '../part.js';
import { startPolicyAgent, type PolicyAgent } from '../policy/index.js';
import type { DatastoresPart } from './datastores.js';

interface PolicyInputs {
  log: Logger;
  configPath: string;
  datastores: DatastoresPart;
  metrics: ReturnType<typeof createAgentMetrics>;
  podEvents: boolean;
  flows?: FlowLogFlags | undefined;
}

export class PolicyPart implements AgentPart {
  readonly name = 'policy';
  /** Policy on without libnftables, or an unusable config: the agent exits 2. */
  readonly exitCode = 2;
  private agent: PolicyAgent | undefined;

  constructor(private readonly o: PolicyInputs) {}

  /** The controller's signal that an endpoint is programmed; undefined until it runs and after stop. */
  signal(): ProgrammedSignal | undefined {
    return this.agent?.signal();
  }

  async start(): Promise<void> {
    const { o } = this;
    const m = o.metrics;
    this.agent = await startPolicyAgent(readNetpluginConf(o.configPath), o.log, o.datastores, {
      onApplied: (s) => m.policyApplied(s),
      onInterfaceConflict: (c) => m.policyInterfaceConflict(c.kind),
      onRefused: (r) => m.policyRefused(r.stage, r.owner.kind),
      podEvents: o.podEvents,
      ...(o.flows ? { flows: o.flows } : {}),
    });
    m.watchPolicy(() => this.agent?.controller());
  }

  /** The nftables table stays: existing pods keep their enforcement, new ones stay isolated. */
  async stop(): Promise<void> {
    await this.agent?.stop();
  }
}
