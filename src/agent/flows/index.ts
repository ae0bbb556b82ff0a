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
import { conntrackSnapshot, enableConntrackAccounting, openFlowEvents } from '../../dataplane/flowlog.js';
import { FlowClient } from '../../flows/client.js';
import type { FlowRecord } from '../../flows/record.js';
import { FlowAggregator, type PendingEvaluator, type ResolvedEndpoint } from './aggregate.js';
import { DEFAULT_FLOW_LOG_GROUP } from './tags.js';
import { endpointViews, type EndpointInput, type EndpointView, type ProfileInput } from '../../model/policy-eval.js';
import { pendingTrace } from '../../model/staged.js';
import type { AgentSettings } from '../../model/agent-config.js';

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

/**
 * What the flags give: the TLS files always (an AgentConfiguration cannot carry them), the
 * aggregator and the interval when set (they then win over the AgentConfiguration's).
 */
export type FlowLogFlags = Omit<FlowLogConfig, 'aggregator' | 'flushIntervalMs'> & {
  aggregator?: string;
  flushIntervalMs?: number;
};

/** Why `url` is not an aggregator address (https://HOST:PORT), undefined when it is. */
export function aggregatorUrlProblem(url: string): string | undefined {
  let u: URL | undefined;
  try {
    u = new URL(url);
  } catch {
    u = undefined;
  }
  if (u?.protocol !== 'https:' || !u.port || u.pathname !== '/' || u.search || u.hash) {
    return `'${url}' is not https://HOST:PORT (the aggregator's --collector-addr, over mTLS)`;
  }
  return undefined;
}

/**
 * The flow log configuration in force: the flags' aggregator and interval, else the node's
 * AgentConfiguration fields (flowLogsAggregator, flowLogsFlushInterval). Undefined when neither
 * names an aggregator (flow logs off). A bad value from the datastore is reported in `problems`:
 * a bad aggregator turns flow logs off, a bad interval falls back to the default.
 */
export function effectiveFlowConfig(
  flags: FlowLogFlags,
  settings: Pick<AgentSettings, 'flowLogsAggregator' | 'flowLogsFlushInterval'>,
): { config?: FlowLogConfig; problems: string[] } {
  const problems: string[] = [];
  let aggregator = flags.aggregator;
  if (aggregator === undefined && settings.flowLogsAggregator !== undefined) {
    const p = aggregatorUrlProblem(settings.flowLogsAggregator);
    if (p) problems.push(`AgentConfiguration flowLogsAggregator ${p}; flow logs stay off`);
    else aggregator = settings.flowLogsAggregator;
  }
  if (aggregator === undefined) return { problems };
  let flushIntervalMs = flags.flushIntervalMs;
  if (flushIntervalMs === undefined) {
    flushIntervalMs = parseFlushInterval(settings.flowLogsFlushInterval);
    if (flushIntervalMs === undefined) {
      problems.push(
        `AgentConfiguration flowLogsFlushInterval '${settings.flowLogsFlushInterval}' is not a duration of 100ms ` +
          `to 1h such as 15s, 500ms or 1m; using ${DEFAULT_FLUSH_INTERVAL_MS / 1000}s`,
      );
      flushIntervalMs = DEFAULT_FLUSH_INTERVAL_MS;
    }
  }
  const { aggregator: _a, flushIntervalMs: _f, ...files } = flags;
  return { config: { ...files, aggregator, flushIntervalMs }, problems };
}

export interface FlowLogs {
  readonly rules: FlowLogRules;
  /** Flushes now (tests, shutdown); resolves with what was pushed. */
  flushNow(): FlowRecord[];
  /**
   * Sends to another aggregator or at another interval from now on (a new client: what the old one
   * held is flushed and sent first, for 2 s at most), or, with undefined, to none (flow logs off).
   */
  reconfigure(cfg: FlowLogConfig | undefined): Promise<void>;
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
  try {
    if (enableConntrackAccounting()) log.info('flow logs: conntrack accounting turned on (nf_conntrack_acct=1)');
  } catch (e) {
    const error = (e as Error).message;
    log.warn('flow logs: cannot turn conntrack accounting on; packet and byte counts stay 0', { error });
  }
  const clientFor = (c: FlowLogConfig) =>
    new FlowClient({
      url: c.aggregator,
      node: deps.node,
      cert: readFileSync(c.certFile),
      key: readFileSync(c.keyFile),
      ca: readFileSync(c.caFile),
      log: (level, msg, fields) => log[level](`flow logs: ${msg}`, fields),
    });
  // Undefined while turned off by reconfigure(): the readers keep running (their NFLOG group is not
  // bound again at once after a close), and each flush's records are dropped.
  let client: InstanceType<typeof FlowClient> | undefined = clientFor(cfg);
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
    if (records.length) client?.push(records);
    const { samples, unknownTags } = agg;
    log.debug('flow logs: flushed', { records: records.length, samples, unknownTags, ...client?.stats() });
    return records;
  };
  let timer: NodeJS.Timeout | undefined;
  const report = (c: FlowLogConfig | undefined) => {
    clearInterval(timer);
    timer = setInterval(flushNow, c?.flushIntervalMs ?? DEFAULT_FLUSH_INTERVAL_MS);
    timer.unref();
    const nflogGroup = rules.group;
    if (c)
      log.info('flow logs: reporting', { aggregator: c.aggregator, flushIntervalMs: c.flushIntervalMs, nflogGroup });
    else log.info('flow logs: off (no aggregator); records are not kept');
  };
  /** Flushes into the current client, lets it send what it holds (2 s at most), closes it. */
  const retire = async () => {
    flushNow();
    const old = client;
    client = undefined;
    await old?.drained(2000);
    await old?.close();
  };
  report(cfg);
  return {
    rules,
    flushNow,
    async reconfigure(next) {
      await retire();
      if (next) client = clientFor(next);
      report(next);
    },
    async stop() {
      clearInterval(timer);
      events?.close();
      await retire();
    },
  };
}
