// The agent's flow logs: turns conntrack accounting on, reads the NFLOG group
// and the conntrack events (src/dataplane/flowlog.ts), aggregates them per
// flush interval (./aggregate.ts) and pushes the records to the aggregator
// through FlowClient (src/flows/client.ts: mTLS, bounded buffer, resend). Runs
// beside the policy controller and never in its way: every step is on timers
// and socket callbacks, push() never waits, and a failure here is logged, not
// thrown into pod setup or policy programming.
import { readFileSync } from 'node:fs';
import type { Logger } from '../../log/types.js';
import type { PolicyController } from '../policy/controller.js';
import type { FlowLogRules } from '../policy/compile.js';
import type { FlowRecord } from '../../flows/record.js';
import { FlowAggregator, type PendingEvaluator, type ResolvedEndpoint } from './aggregate.js';
import { DEFAULT_FLOW_LOG_GROUP } from './tags.js';
import { endpointViews, type EndpointInput, type EndpointView, type ProfileInput } from '../../model/policy-eval.js';
import { pendingTrace } from '../../model/staged.js';

export const DEFAULT_FLUSH_INTERVAL_MS = 15_000;
/** Tag samples per pod interface and direction: a flood costs the agent at most this many a second per pod. */
export const DEFAULT_FLOW_LOG_RULES: FlowLogRules = { group: DEFAULT_FLOW_LOG_GROUP, rate: 200, burst: 400 };

export interface FlowLogConfig {
  /** https://HOST:PORT of the aggregator's collector. */
  aggregator: string;
  certFile: string;
  keyFile: string;
  caFile: string;
  flushIntervalMs: number;
  rules?: FlowLogRules;
}

export interface FlowLogs {
  readonly rules: FlowLogRules;
  /** Flushes now (tests, shutdown); resolves with what was pushed. */
  flushNow(): FlowRecord[];
  stop(): Promise<void>;
}

/** `--flow-flush-interval` and `flowLogsFlushInterval`: 15s, 500ms, 1m (a whole number and a unit). */
export function parseFlushInterval(s: string): number | undefined {
  const m = /^(\d{1,6})(ms|s|m)$/.exec(s.trim());
  if (!m) return undefined;
  const ms = Number(m[1]) * (m[2] === 'ms' ? 1 : m[2] === 's' ? 1000 : 60_000);
  return ms >= 100 && ms <= 3_600_000 ? ms : undefined;
}

/** Addresses → endpoints, rebuilt when the controller's endpoint list changes. */
function endpointIndex(controller: () => PolicyController | undefined): (addr: string) => ResolvedEndpoint | undefined {
  let seen: EndpointInput[] | undefined;
  let index = new Map<string, ResolvedEndpoint>();
  return (addr) => {
    const eps = controller()?.inputs().endpoints;
    if (eps !== seen) {
      seen = eps;
      index = new Map();
      for (const e of eps ?? []) {
        const r: ResolvedEndpoint = {
          endpoint: { type: 'wep', namespace: e.namespace, name: e.pod ?? e.key, labels: { ...e.labels } },
          local: e.interfaceName !== undefined,
        };
        for (const a of e.addrs) index.set(a, r);
      }
    }
    return index.get(addr);
  };
}

/** Protocols whose flows have a destination port the rules match (the others' destPort is not one). */
const PORT_PROTOCOLS = new Set([6, 17, 132, 136]);

/**
 * The pending trace of each reported flow: what the policies would decide with the staged changes
 * applied (src/model/staged.ts), from the controller's endpoints, profiles and pending policies.
 * Empty while no staged policy exists. The views are rebuilt when the endpoints or profiles change,
 * so evaluateFlow's per-view memo holds between flows.
 */
export function pendingEvaluator(controller: () => PolicyController | undefined): PendingEvaluator {
  let seen: { endpoints: EndpointInput[]; profiles: Map<string, ProfileInput> } | undefined;
  let views = new Map<string, EndpointView>();
  return (flow) => {
    const c = controller();
    const pending = c?.pending();
    if (!c || !pending) return [];
    const { endpoints, profiles } = c.inputs();
    if (seen?.endpoints !== endpoints || seen.profiles !== profiles) {
      seen = { endpoints, profiles };
      views = new Map();
      for (const v of endpointViews(endpoints, profiles)) for (const a of v.addrs) views.set(a, v);
    }
    return pendingTrace(pending, profiles, {
      reporter: flow.reporter,
      source: { addr: flow.sourceAddr, endpoint: views.get(flow.sourceAddr) },
      dest: { addr: flow.destAddr, endpoint: views.get(flow.destAddr) },
      protocol: flow.protocol,
      ...(PORT_PROTOCOLS.has(flow.protocol) ? { port: flow.destPort } : {}),
    });
  };
}

export async function startFlowLogs(
  cfg: FlowLogConfig,
  deps: { node: string; log: Logger; controller: () => PolicyController | undefined; pending?: PendingEvaluator },
): Promise<FlowLogs> {
  const { log } = deps;
  const rules = cfg.rules ?? DEFAULT_FLOW_LOG_RULES;
  const { enableConntrackAccounting, openFlowEvents, conntrackSnapshot } = await import('../../dataplane/flowlog.js');
  const { FlowClient } = await import('../../flows/client.js');
  try {
    if (enableConntrackAccounting()) log.info('flow logs: conntrack accounting turned on (nf_conntrack_acct=1)');
  } catch (e) {
    const error = (e as Error).message;
    log.warn('flow logs: cannot turn conntrack accounting on; packet and byte counts stay 0', { error });
  }
  const client = new FlowClient({
    url: cfg.aggregator,
    node: deps.node,
    cert: readFileSync(cfg.certFile),
    key: readFileSync(cfg.keyFile),
    ca: readFileSync(cfg.caFile),
    log: (level, msg, fields) => log[level](`flow logs: ${msg}`, fields),
  });
  const agg = new FlowAggregator({
    resolve: endpointIndex(deps.controller),
    refs: () => deps.controller()?.flowRefs() ?? new Map(),
    ...(deps.pending ? { pending: deps.pending } : {}),
  });
  const overruns = { nflog: 0, conntrack: 0 };
  let events: { close(): void } | undefined;
  try {
    events = openFlowEvents({
      group: rules.group,
      onNflog: (p) => agg.onNflog(p),
      onConntrack: (e) => agg.onConntrack(e),
      onOverrun: (kind, n) => {
        if (overruns[kind] === 0) log.warn(`flow logs: the kernel dropped ${kind} events (socket full)`);
        overruns[kind] += n;
      },
      onError: (kind, e) => log.error(`flow logs: the ${kind} reader stopped`, { error: e.message }),
    });
  } catch (e) {
    await client.close();
    throw e;
  }
  const flushNow = (): FlowRecord[] => {
    let snapshot: ReturnType<typeof conntrackSnapshot> = [];
    try {
      snapshot = conntrackSnapshot();
    } catch (e) {
      const error = (e as Error).message;
      log.warn('flow logs: conntrack dump failed; live connections are counted at their end', { error });
    }
    const records = agg.flush(snapshot);
    if (records.length) client.push(records);
    const { samples, unknownTags } = agg;
    log.debug('flow logs: flushed', { records: records.length, samples, unknownTags, ...client.stats() });
    return records;
  };
  const timer = setInterval(flushNow, cfg.flushIntervalMs);
  timer.unref();
  const { aggregator, flushIntervalMs } = cfg;
  log.info('flow logs: reporting', { aggregator, flushIntervalMs, nflogGroup: rules.group });
  return {
    rules,
    flushNow,
    async stop() {
      clearInterval(timer);
      events?.close();
      flushNow();
      await client.drained(2000);
      await client.close();
    },
  };
}
