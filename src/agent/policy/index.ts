// Entry of the policy controller for netplugin-node: started from the node's
// CNI config (--config) when its netconf says `policy: {type: "k8s"}`.
import { parseNetconf } from '../../config/index.js';
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

export interface PolicyAgent {
  /** Undefined until the datastore was reached and the controller started. */
  controller(): PolicyController | undefined;
  /**
   * The controller's signal that an endpoint's policy is programmed (the agent's runtime hands it to ADD's policy
   * wait); undefined until it runs and after stop.
   */
  signal(): ProgrammedSignal | undefined;
  stop(): Promise<void>;
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
  opts: {
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
    /** Flow logs (the agent's --flow-* flags): tagged rules, and records sent to the aggregator. */
    /** Flow logs (the TLS files; the aggregator and interval from the flags or the AgentConfiguration). */
    flows?: flows.FlowLogFlags;
  } = {},
): Promise<PolicyAgent | undefined> {
  let conf: ReturnType<typeof parseNetconf>;
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

  let controller: PolicyController | undefined;
  let flowLogs: flows.FlowLogs | undefined;
  const flowRules = opts.flows ? (opts.flows.rules ?? flows.DEFAULT_FLOW_LOG_RULES) : undefined;
  let stopped = false;
  let timer: NodeJS.Timeout | undefined;
  // Flow logs as configured now (JSON of the config in force, '' when off), changed one at a time.
  let flowKey = '';
  let flowProblems = '';
  let flowChain = Promise.resolve();
  const flowsDone = () => flowChain;
  const reconcileFlows = (nodename: string): void => {
    if (!opts.flows || !controller || stopped) return;
    const c = controller;
    flowChain = flowChain.then(async () => {
      const { config, problems } = flows.effectiveFlowConfig(opts.flows!, c.settings());
      const key = config ? JSON.stringify(config) : '';
      const told = problems.join('\n');
      if (told !== flowProblems) for (const p of problems) log.warn(`flow logs: ${p}`);
      flowProblems = told;
      if (key === flowKey || stopped) return;
      flowKey = key;
      if (flowLogs) {
        log.info('flow logs: configuration changed; restarting the flow client');
        await flowLogs.reconfigure(config);
        return;
      }
      if (!config) return;
      // Flow logs must never cost enforcement: a failure to start them is logged only.
      try {
        flowLogs = await flows.startFlowLogs(
          { ...config, rules: flowRules! },
          {
            node: nodename,
            log,
            controller: () => controller,
            pending: flows.pendingEvaluator(() => controller),
          },
        );
      } catch (e) {
        log.error('flow logs: cannot start; policy is enforced without them', { error: (e as Error).message });
      }
    });
  };
  const retryMs = opts.retryMs ?? 2000;
  const start = async (): Promise<void> => {
    while (!stopped) {
      try {
        const ds = await datastores.datastore(conf);
        const nodename = resolveNodename(conf);
        const events = await podEventsFor(ds, nodename);
        controller = await startPolicyController({
          ds,
          nodename,
          log,
          base,
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
        if (opts.onApplied) controller.onApplied(opts.onApplied);
        log.info('policy: controller started', { nodename });
        if (opts.flows) {
          // The flags' aggregator and interval, else the AgentConfiguration's, which is read after each
          // batch: a change restarts the flow client (what it buffered is flushed first).
          reconcileFlows(nodename);
          controller.onApplied(() => reconcileFlows(nodename));
        }
        if (stopped) {
          await flowsDone();
          await flowLogs?.stop();
          await controller.stop();
        }
        return;
      } catch (e) {
        log.warn('policy: cannot start the controller yet; retrying (pods stay isolated meanwhile)', {
          error: (e as Error).message,
          retryInMs: retryMs,
        });
        await new Promise<void>((r) => (timer = setTimeout(r, retryMs)));
      }
    }
  };
  // On the Kubernetes datastore the pod is the endpoint: its Events go through the API access the datastore uses.
  let eventClient: KubeClient | undefined;
  let podEvents: PodEvents | undefined;
  const podEventsFor = async (ds: Datastore, node: string) => {
    if (opts.podEvents === false || ds.type !== 'kubernetes') return undefined;
    if (podEvents) return podEvents; // a retry of the start
    try {
      eventClient = await createKubeClient({ ...conf.kubernetes });
    } catch (e) {
      const error = (e as Error).message;
      log.warn('policy: no Kubernetes API access for pod Events; interface conflicts are only logged', { error });
      return undefined;
    }
    return (podEvents = createPodEvents({ client: eventClient, node, log }));
  };
  void start();
  return {
    controller: () => controller,
    signal: () => (stopped ? undefined : controller?.signal),
    async stop() {
      stopped = true;
      clearTimeout(timer);
      await flowsDone();
      await flowLogs?.stop();
      await controller?.stop();
      eventClient?.close();
    },
  };
}
