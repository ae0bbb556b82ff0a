// The node agent's policy controller: watches workload endpoints, network
// policies, global network policies and profiles in the datastore (through the
// shared informer), recompiles the node's `inet netplugin` table when they
// change, and applies the difference as one nft transaction per burst of
// changes (through libnftables in the addon). After a batch that programmed a
// local endpoint it writes the endpoint's policy-programmed status (file and
// in-process signal) that the ADD's policy_setup_timeout_seconds wait uses.
//
// One bad object never costs the node its batch: values the typed model
// cannot hold are refused by the compiler (the endpoint stays isolated), and
// when libnftables still refuses a full resync, the controller narrows the
// batch to its culprits (each object checked in a scratch table that is never
// hooked, by bisection), programs everything else, and reports each culprit
// (log, metric, the onRefused hook: an Event on the pod). A refused object is
// retried only when its content changes.
//
// Start: the base ruleset (default-drop for pod interfaces not yet programmed)
// is installed at once when the table is absent, before the datastore is
// reached; a table left by the previous agent run stays in force until the
// first full resync replaces it atomically. Stop: the table stays (existing
// pods keep their enforcement, new pods stay isolated).
import type { Logger } from '../../log/types.js';
import type { Kind, Resource } from '../../model/resources.js';
import type { Datastore } from '../../datastore/types.js';
import { datastoreSource, Informer, type ListWatchSource } from '../../watch/informer.js';
import { createWorkQueue, type WorkQueue } from '../../watch/queue.js';
import type { ProgrammedSignal } from '../../policy-status/index.js';
import {
  PolicyCompiler,
  TABLE,
  type DesiredState,
  type EndpointInput,
  type FlowLogRules,
  type HostInput,
  type PolicyInput,
  type ProfileInput,
} from './compile.js';
import { agentSettings, type AgentSettings } from '../../model/agent-config.js';
import { VXLAN_PORT } from '../../dataplane/routing.js';
import { flowDecisions } from '../../model/policy-eval.js';
import {
  baseCommands,
  diffCommands,
  emptyState,
  entriesChanged,
  staleNames,
  withoutOwners,
  type BaseOptions,
} from './nft-script.js';
import type { TagRef } from '../flows/tags.js';
import { pendingPolicies, STAGED_KINDS, type PendingPolicies, type StagedPolicy } from '../../model/staged.js';
import { cutConntrack, type ConntrackFlow } from '../../dataplane/conntrack.js';
import { LocalEndpoints, type InterfaceConflict } from './local-endpoints.js';
import { affectedAddresses, snapshot, type Seen } from './policy-change.js';
import { KernelRefusals, type RefusedObject } from './refusals.js';
import { StatusReporter } from './status-reporter.js';

export type { InterfaceConflict, RefusedObject };

interface PolicyControllerOptions {
  ds: Datastore;
  nodename: string;
  log: Logger;
  base: BaseOptions;
  /** endpoint_status_dir (default /var/run/netplugin/endpoint-status). */
  statusDir?: string;
  /** Runs an nft script as one transaction (default: dataplane/nft/run.ts, libnftables in the addon). */
  nft?: (script: string) => Promise<string>;
  /** Collects changes for this long before compiling (default 5 ms): one batch per burst. */
  batchDelayMs?: number;
  /**
   * Deletes the host's conntrack entries of these addresses whose flow `denied` says the new
   * policy denies (default: cutConntrack), after a batch that changed the policy of the endpoints
   * that have them (see affectedAddresses). Returns how many it deleted.
   */
  cutConntrack?: (addrs: string[], denied: (f: ConntrackFlow) => boolean) => number;
  /** Told once per local endpoint whose recorded host interface the agent does not take (again when that changes). */
  onInterfaceConflict?: (c: InterfaceConflict) => void;
  /**
   * Told once per object left out of the table: `model` when the compiler
   * refused a value before rendering, `kernel` when libnftables refused it.
   */
  onRefused?: (r: RefusedObject) => void;
  /** Flow logs on: the deciding rules also log their tag to this NFLOG group (compile.ts FlowLogRules). */
  flowLog?: FlowLogRules;
  /**
   * Also watch the staged policy kinds (never enforced) for pending(): on with flow logs only,
   * where they fill the pending trace of each record.
   */
  staged?: boolean;
}

export interface ApplyStats {
  full: boolean;
  commands: number;
  compileMs: number;
  applyMs: number;
  /** Addresses whose conntrack entries were checked after the batch (a policy change of their endpoints). */
  flushedAddrs: number;
  /** Conntrack entries of those addresses deleted because the new policy denies their flow. */
  ctDeleted: number;
}

export interface PolicyController {
  /** Resolves after the first full resync was applied. */
  readonly synced: Promise<void>;
  readonly signal: ProgrammedSignal;
  /** The table content last applied (for explain and tests). */
  current(): DesiredState;
  /** The compiler's inputs as last seen. */
  inputs(): {
    policies: PolicyInput[];
    profiles: Map<string, ProfileInput>;
    endpoints: EndpointInput[];
    host?: HostInput;
  };
  /** The flow-log tags' refs → what they name (empty without flow logs). */
  flowRefs(): ReadonlyMap<string, TagRef>;
  /**
   * The policies as they would be with every staged change applied, computed once per change of
   * the enforced or staged policies; undefined without `staged`, before the staged kinds are
   * listed, or when no staged policy exists (the pending trace is then left empty).
   */
  pending(): PendingPolicies | undefined;
  /** The node's AgentConfiguration settings as of the last batch (the built-in defaults before the first). */
  settings(): AgentSettings;
  /** Told after every applied batch. */
  onApplied(cb: (s: ApplyStats) => void): void;
  /** Seconds since the oldest change seen but not yet in the table (0 when the table is current). */
  programmingLagSeconds(): number;
  stop(): Promise<void>;
}

const WATCHED: Kind[] = [
  'WorkloadEndpoint',
  'NetworkPolicy',
  'GlobalNetworkPolicy',
  'Profile',
  'HostEndpoint',
  'AgentConfiguration',
];

async function defaultNft(): Promise<(script: string) => Promise<string>> {
  const { nftRunAsync } = await import('../../dataplane/nft/run.js');
  return (s) => nftRunAsync(s);
}

/** Installs the base ruleset when the table is absent (fail closed from the first moment). */
export async function ensureBaseTable(
  base: BaseOptions,
  nft: (s: string) => Promise<string>,
): Promise<'installed' | 'kept'> {
  try {
    await nft(`list table inet ${base.table ?? TABLE}`);
    return 'kept';
  } catch {
    await nft(baseCommands(base).join('\n') + '\n');
    return 'installed';
  }
}

export async function startPolicyController(opts: PolicyControllerOptions): Promise<PolicyController> {
  const { ds, log } = opts;
  const nft = opts.nft ?? (await defaultNft());
  const state = await ensureBaseTable(opts.base, nft);
  log.info(
    state === 'installed'
      ? 'policy: base ruleset installed (pods isolated until programmed)'
      : 'policy: keeping the table of the previous run until the resync',
  );

  const compiler = new PolicyCompiler(opts.flowLog);
  let current: DesiredState | undefined; // undefined until the first full resync
  let lastInputs: ReturnType<PolicyController['inputs']> = { policies: [], profiles: new Map(), endpoints: [] };
  let lastSettings = agentSettings(opts.nodename, []);
  const appliedCbs: Array<(s: ApplyStats) => void> = [];
  const status = new StatusReporter({ statusDir: opts.statusDir, log });
  const locals = new LocalEndpoints({
    nodename: opts.nodename,
    vethPrefixes: opts.base.vethPrefixes,
    log,
    onInterfaceConflict: opts.onInterfaceConflict,
  });
  const refusals = new KernelRefusals({ base: opts.base, nft, log, onRefused: opts.onRefused });
  // What the last batch saw, to find the endpoints whose policy a batch changed (conntrack).
  let seen: Seen | undefined;
  const cut =
    opts.cutConntrack ??
    ((addrs: string[], denied: (f: ConntrackFlow) => boolean) => cutConntrack(addrs, denied, log).deleted);
  let resolveSynced!: () => void;
  const synced = new Promise<void>((r) => (resolveSynced = r));
  let timer: NodeJS.Timeout | undefined;
  let stopped = false;
  let resynced = false;

  const informers = new Map<Kind, Informer<Resource<Kind>>>();
  // The oldest change not yet in the table: from its watch event (or the start) until a batch with it applied.
  let pendingSince: number | undefined = Date.now();
  let applyingSince: number | undefined;
  const schedule = () => {
    pendingSince ??= Date.now();
    if (stopped || timer) return;
    timer = setTimeout(() => {
      timer = undefined;
      queue.add('apply');
    }, opts.batchDelayMs ?? 5);
  };
  for (const kind of WATCHED) {
    informers.set(
      kind,
      new Informer(
        datastoreSource(ds, kind),
        { onChange: schedule },
        { onError: (e, src) => log.warn('policy: watch failed; re-listing', { source: src, error: e.message }) },
      ) as unknown as Informer<Resource<Kind>>,
    );
  }

  // Staged policies: outside the batches (they change no rule), read only when a flow is reported.
  const stagedInformers: Array<Informer<StagedPolicy>> = [];
  let stagedChanged = true;
  let pendingMemo: { policies: PolicyInput[]; pending: PendingPolicies | undefined } | undefined;
  if (opts.staged) {
    for (const kind of STAGED_KINDS) {
      const onError = (e: Error, source: string) =>
        log.warn('policy: staged watch failed; re-listing', { source, error: e.message });
      const src = datastoreSource(ds, kind) as unknown as ListWatchSource<StagedPolicy>;
      const onChange = () => void (stagedChanged = true);
      stagedInformers.push(new Informer<StagedPolicy>(src, { onChange }, { onError }));
    }
  }
  const pending = (): PendingPolicies | undefined => {
    if (!stagedInformers.length || stagedInformers.some((i) => !i.synced)) return undefined;
    if (!stagedChanged && pendingMemo?.policies === lastInputs.policies) return pendingMemo.pending;
    stagedChanged = false;
    const staged = stagedInformers.flatMap((i) => i.list());
    const p = staged.length ? pendingPolicies(lastInputs.policies, staged) : undefined;
    for (const s of p?.skipped ?? []) {
      log.debug('policy: staged policy left out of the pending trace', { ...s.ref, reason: s.reason });
    }
    pendingMemo = { policies: lastInputs.policies, pending: p };
    return p;
  };

  const apply = async (): Promise<void> => {
    if (stopped) return;
    for (const inf of informers.values()) if (!inf.synced) return; // the first batch waits for every list
    const t0 = performance.now();
    const profiles = new Map<string, ProfileInput>();
    for (const p of informers.get('Profile')!.list() as Array<Resource<'Profile'>>)
      profiles.set(p.metadata.name, { name: p.metadata.name, spec: p.spec });
    const policies: PolicyInput[] = [];
    for (const p of informers.get('NetworkPolicy')!.list() as Array<Resource<'NetworkPolicy'>>)
      policies.push({
        kind: 'NetworkPolicy',
        name: p.metadata.name,
        namespace: p.metadata.namespace ?? 'default',
        spec: p.spec,
      });
    for (const p of informers.get('GlobalNetworkPolicy')!.list() as Array<Resource<'GlobalNetworkPolicy'>>)
      policies.push({ kind: 'GlobalNetworkPolicy', name: p.metadata.name, spec: p.spec });
    const weps = informers.get('WorkloadEndpoint')!.list() as Array<Resource<'WorkloadEndpoint'>>;
    const { endpoints, local } = locals.derive(weps);
    const heps = informers.get('HostEndpoint')!.list() as Array<Resource<'HostEndpoint'>>;
    const configs = informers.get('AgentConfiguration')!.list() as Array<Resource<'AgentConfiguration'>>;
    const settings = agentSettings(opts.nodename, configs);
    const host = { ...hostInput(heps, settings, opts.nodename, opts.base.vethPrefixes), vxlanPort: VXLAN_PORT };
    lastInputs = { policies, profiles, endpoints, host };
    lastSettings = settings;
    let next = compiler.compile(lastInputs);
    for (const r of next.refused) refusals.tell({ owner: r.owner, stage: 'model', reason: r.reason });
    // Objects libnftables refused stay out while their content is the same.
    const exclude = refusals.exclusions(next);
    const t1 = performance.now();
    let full = current === undefined;
    let commands = 0;
    if (!full) {
      const target = withoutOwners(next, exclude);
      // The plugin marks re-created interfaces stale: read the marks only when entries change.
      const stale = entriesChanged(current!, target)
        ? staleNames(await nft(`list set inet ${opts.base.table ?? TABLE} wl-stale\n`))
        : new Set<string>();
      const cmds = diffCommands(current!, target, opts.base, stale);
      commands = cmds.length;
      try {
        if (commands > 0) await nft(cmds.join('\n') + '\n');
        current = target;
      } catch (e) {
        // The kernel's table is not what we think (edited by hand?), or an object it refuses:
        // resync the whole table, recomputed from scratch, leaving out what it refuses.
        log.warn('policy: incremental batch refused; resyncing the whole table', { error: (e as Error).message });
        compiler.reset();
        next = compiler.compile(lastInputs);
        full = true;
      }
    }
    if (full) {
      current = undefined;
      const r = await refusals.applyFull(next, exclude);
      current = r.applied;
      commands = r.commands;
    }
    const t2 = performance.now();
    // Only now, with the new rules in force: an entry flushed earlier could be re-created under the old ones.
    const was = seen;
    seen = snapshot(weps, endpoints, policies, profiles, was);
    const addrs = was ? affectedAddresses(was, seen) : [];
    let ctDeleted = 0;
    if (addrs.length) {
      // Each entry's flow decided again, by the evaluator, on the inputs just programmed: only the
      // denied ones go; an allowed connection keeps its entry (and is never re-decided by its next packet).
      const views = [...seen.views.values()].map((v) => v.view);
      const localIds = seen.local;
      const enforced = new Set([...localIds].map((id) => seen!.views.get(id)!.view));
      const denied = (f: ConntrackFlow): boolean => {
        const d = flowDecisions(views, policies, profiles, f, (ep) => enforced.has(ep));
        // The node's own packets leave through no rule: only the egress of a pod it talks to counts.
        return d.egress?.verdict === 'deny' || (!f.fromNode && d.ingress?.verdict === 'deny');
      };
      ctDeleted = cut(addrs, denied);
      log.debug('policy: deleted the conntrack entries of flows the policy change denies', {
        addrs: addrs.length,
        deleted: ctDeleted,
      });
    }
    await status.report(local, current);
    if (full) {
      log.info('policy: table resynced', {
        policies: policies.length,
        endpoints: endpoints.length,
        commands,
        ms: Math.round(t2 - t0),
      });
      if (!resynced) await status.sweep();
      resynced = true;
      resolveSynced();
    }
    const st = { full, commands, compileMs: t1 - t0, applyMs: t2 - t1, flushedAddrs: addrs.length, ctDeleted };
    for (const cb of appliedCbs) cb(st);
  };

  const applyTracked = async (): Promise<void> => {
    for (const inf of informers.values()) if (!inf.synced) return; // still pending: apply() waits for every list
    const since = pendingSince;
    pendingSince = undefined;
    applyingSince = since;
    try {
      await apply();
    } catch (e) {
      // Not applied: its changes stay pending (the queue retries).
      if (since !== undefined) pendingSince = Math.min(since, pendingSince ?? since);
      throw e;
    } finally {
      applyingSince = undefined;
    }
  };

  const queue: WorkQueue = createWorkQueue({
    handle: applyTracked,
    concurrency: 1,
    baseDelayMs: 200,
    maxDelayMs: 10_000,
    onError: (_k, err, n) =>
      log.error('policy: applying the ruleset failed; retrying', { error: (err as Error).message, failures: n }),
  });

  for (const inf of informers.values()) inf.start();
  for (const inf of stagedInformers) inf.start();
  // The first resync waits for every list; a kind that lists nothing reports no change, so
  // schedule it once all are in (the batches before it return early).
  void Promise.all([...informers.values()].map((i) => i.whenSynced())).then(schedule);

  return {
    synced,
    signal: status.signal,
    current: () => current ?? emptyState(),
    inputs: () => lastInputs,
    flowRefs: () => compiler.flowRefs,
    pending,
    settings: () => lastSettings,
    onApplied: (cb) => void appliedCbs.push(cb),
    programmingLagSeconds() {
      const oldest = Math.min(pendingSince ?? Infinity, applyingSince ?? Infinity);
      return oldest === Infinity ? 0 : Math.max(0, (Date.now() - oldest) / 1000);
    },
    async stop() {
      stopped = true;
      clearTimeout(timer);
      for (const inf of informers.values()) inf.stop();
      for (const inf of stagedInformers) inf.stop();
      await queue.stop();
    },
  };
}

/** The compiler's host input: every host endpoint (peers of rules), this node's enforced, and the node's settings. */
function hostInput(
  heps: Array<Resource<'HostEndpoint'>>,
  settings: AgentSettings,
  nodename: string,
  podPrefixes: string[],
): HostInput {
  return {
    endpoints: heps.map((h) => ({
      name: h.metadata.name,
      ...(h.spec.interfaceName !== undefined ? { interfaceName: h.spec.interfaceName } : {}),
      labels: h.metadata.labels ?? {},
      profiles: h.spec.profiles ?? [],
      addrs: h.spec.expectedIPs ?? [],
      ...(h.spec.ports ? { ports: h.spec.ports.map(({ name, protocol, port }) => ({ name, protocol, port })) } : {}),
      local: h.spec.node === nodename,
    })),
    failsafeInbound: settings.failsafeInbound,
    failsafeOutbound: settings.failsafeOutbound,
    endpointToHost: settings.endpointToHost,
    podPrefixes,
  };
}
