// Entry of the policy controller for netplugin-node: started from the node's
// CNI config (--config) when its netconf says `policy: {type: "k8s"}`.
import { parseNetconf, type Netconf } from '../../config/index.js';
import { resolveNodename } from '../../config/nodename.js';
import { DEFAULT_POLICY_TABLE, policyTable } from '../../dataplane/nft/programmed.js';
import { nftAvailable, nftRunAsync } from '../../dataplane/nft/run.js';
import type { Datastore } from '../../datastore/types.js';
import { createKubeClient, type KubeClient } from '../../k8s/client.js';
import type { Logger } from '../../log/types.js';
import type { DatastoreSource } from '../../datastore/pool.js';
import { DEFAULT_VETH_PREFIX } from '../../plugins/main/common.js';
import type { ProgrammedSignal } from '../../policy-status/index.js';
import * as flows from '../flows/index.js';
import { createPodEvents, type PodEvents } from '../pod-events.js';
import {
  ensureBaseTable,
  startPolicyController,
  type ApplyStats,
  type InterfaceConflict,
  type PolicyController,
  type RefusedObject,
} from './controller.js';
import type { FlowLogRules } from './compile.js';
import type { BaseOptions } from './nft-script.js';

interface PolicyAgentOptions {
  retryMs?: number;
  onApplied?: (s: ApplyStats) => void;
  /** Also told of every interface conflict (the agent's metric); the log and the pod's Event are done here. */
  onInterfaceConflict?: (c: InterfaceConflict) => void;
  /**
   * Also told of every object left out of the table (the agent's metric); the log and the pod's Event are done here.
   */
  onRefused?: (r: RefusedObject) => void;
  /** Warning Events on pods (default true; the agent's --pod-events). */
  podEvents?: boolean;
  /** Flow logs (the TLS files; the aggregator and interval from the flags or the AgentConfiguration). */
  flows?: flows.FlowLogFlags;
}

/**
 * Starts enforcement for the node whose netconf is `raw` (the netplugin entry
 * of the CNI config). Returns undefined when policy is not enabled. Throws when
 * it is and libnftables is missing (the message names the package).
 */
export async function startPolicyAgent(
  raw: Record<string, unknown>,
  log: Logger,
  datastores: DatastoreSource,
  opts: PolicyAgentOptions = {},
): Promise<PolicyAgent | undefined> {
  let conf: Netconf;
  try {
    conf = parseNetconf(raw, { pluginType: 'netplugin', warn: () => undefined });
  } catch {
    return undefined; // node-init reports an unusable --config and exits
  }
  if (conf.policy?.type !== 'k8s') return undefined;
  const avail = nftAvailable();
  if (avail !== true) throw new Error(`policy.type is "k8s" but ${avail}`);
  // NETPLUGIN_POLICY_TABLE: another table name, only where several agents share a network namespace (tests).
  const named = policyTable();
  const table = named === DEFAULT_POLICY_TABLE ? undefined : named;
  const base = { vethPrefixes: [conf.host_veth_prefix ?? DEFAULT_VETH_PREFIX], ...(table ? { table } : {}) };
  // Fail closed before anything else: pods appearing while the datastore is unreachable stay isolated.
  const installed = await ensureBaseTable(base, (s) => nftRunAsync(s));
  if (installed === 'installed')
    log.info('policy: base ruleset installed (pods isolated until programmed)', {
      table: `inet ${table ?? 'netplugin'}`,
    });
  const agent = new PolicyAgent(conf, base, log, datastores, opts);
  void agent.run();
  return agent;
}

/** The policy controller of one node, started (and retried) in the background, with its flow logs and pod Events. */
export class PolicyAgent {
  private ctl: PolicyController | undefined;
  private flowLogs: flows.FlowLogs | undefined;
  private readonly flowRules: FlowLogRules | undefined;
  private stopped = false;
  private timer: NodeJS.Timeout | undefined;
  // Flow logs as configured now (JSON of the config in force, '' when off), changed one at a time.
  private flowKey = '';
  private flowProblems = '';
  private flowChain = Promise.resolve();
  // On the Kubernetes datastore the pod is the endpoint: its Events go through the API access the datastore uses.
  private eventClient: KubeClient | undefined;
  private podEvents: PodEvents | undefined;

  constructor(
    private readonly conf: Netconf,
    private readonly base: BaseOptions,
    private readonly log: Logger,
    private readonly datastores: DatastoreSource,
    private readonly opts: PolicyAgentOptions,
  ) {
    this.flowRules = opts.flows ? (opts.flows.rules ?? flows.DEFAULT_FLOW_LOG_RULES) : undefined;
  }

  /** Undefined until the datastore was reached and the controller started. */
  controller(): PolicyController | undefined {
    return this.ctl;
  }

  /**
   * The controller's signal that an endpoint's policy is programmed (the agent's runtime hands it to ADD's policy
   * wait); undefined until it runs and after stop.
   */
  signal(): ProgrammedSignal | undefined {
    return this.stopped ? undefined : this.ctl?.signal;
  }

  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.timer);
    await this.flowChain;
    await this.flowLogs?.stop();
    await this.ctl?.stop();
    this.eventClient?.close();
  }

  /** Starts the controller, retrying until the datastore answers or the agent stops. */
  async run(): Promise<void> {
    const retryMs = this.opts.retryMs ?? 2000;
    while (!this.stopped) {
      try {
        await this.startController();
        return;
      } catch (e) {
        this.log.warn('policy: cannot start the controller yet; retrying (pods stay isolated meanwhile)', {
          error: (e as Error).message,
          retryInMs: retryMs,
        });
        await new Promise<void>((r) => (this.timer = setTimeout(r, retryMs)));
      }
    }
  }

  private async startController(): Promise<void> {
    const { conf, log, opts, flowRules } = this;
    const ds = await this.datastores.datastore(conf);
    const nodename = resolveNodename(conf);
    const events = await this.podEventsFor(ds, nodename);
    const controller = await startPolicyController({
      ds,
      nodename,
      log,
      base: this.base,
      ...(flowRules ? { flowLog: flowRules, staged: true } : {}),
      ...(conf.endpoint_status_dir ? { statusDir: conf.endpoint_status_dir } : {}),
      onInterfaceConflict: (c) => {
        opts.onInterfaceConflict?.(c);
        if (c.pod) events?.warn(c.namespace, c.pod, 'NetpluginInterfaceMismatch', c.message);
      },
      onRefused: (r) => {
        opts.onRefused?.(r);
        // An endpoint is a pod's: its owner sees why the pod is isolated in `kubectl describe pod`.
        const o = r.owner;
        if (o.kind === 'Endpoint' && o.namespace && o.pod) {
          events?.warn(
            o.namespace,
            o.pod,
            'NetpluginPolicyNotProgrammed',
            `netplugin cannot program this pod's network policy, so the pod stays isolated: ${r.reason}`,
          );
        }
      },
    });
    this.ctl = controller;
    if (opts.onApplied) controller.onApplied(opts.onApplied);
    log.info('policy: controller started', { nodename });
    if (opts.flows) {
      // The flags' aggregator and interval, else the AgentConfiguration's, which is read after each
      // batch: a change restarts the flow client (what it buffered is flushed first).
      this.reconcileFlows(nodename);
      controller.onApplied(() => this.reconcileFlows(nodename));
    }
    if (this.stopped) {
      await this.flowChain;
      await this.flowLogs?.stop();
      await controller.stop();
    }
  }

  /** Brings the flow logs to the configuration in force now (flags over AgentConfiguration), one change at a time. */
  private reconcileFlows(nodename: string): void {
    const { opts, log } = this;
    const c = this.ctl;
    if (!opts.flows || !c || this.stopped) return;
    const flags = opts.flows;
    this.flowChain = this.flowChain.then(async () => {
      const { config, problems } = flows.effectiveFlowConfig(flags, c.settings());
      const key = config ? JSON.stringify(config) : '';
      const told = problems.join('\n');
      if (told !== this.flowProblems) for (const p of problems) log.warn(`flow logs: ${p}`);
      this.flowProblems = told;
      if (key === this.flowKey || this.stopped) return;
      this.flowKey = key;
      if (this.flowLogs) {
        log.info('flow logs: configuration changed; restarting the flow client');
        await this.flowLogs.reconfigure(config);
        return;
      }
      if (!config) return;
      // Flow logs must never cost enforcement: a failure to start them is logged only.
      try {
        this.flowLogs = await flows.startFlowLogs(
          { ...config, rules: this.flowRules! },
          {
            node: nodename,
            log,
            controller: () => this.ctl,
            pending: flows.pendingEvaluator(() => this.ctl),
          },
        );
      } catch (e) {
        log.error('flow logs: cannot start; policy is enforced without them', { error: (e as Error).message });
      }
    });
  }

  private async podEventsFor(ds: Datastore, node: string): Promise<PodEvents | undefined> {
    const { opts, log } = this;
    if (opts.podEvents === false || ds.type !== 'kubernetes') return undefined;
    if (this.podEvents) return this.podEvents; // a retry of the start
    try {
      this.eventClient = await createKubeClient({ ...this.conf.kubernetes });
    } catch (e) {
      const error = (e as Error).message;
      log.warn('policy: no Kubernetes API access for pod Events; interface conflicts are only logged', { error });
      return undefined;
    }
    return (this.podEvents = createPodEvents({ client: this.eventClient, node, log }));
  }
}
