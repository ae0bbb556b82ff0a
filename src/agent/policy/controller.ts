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
import { Informer, type ListWatchSource } from '../../watch/informer.js';
import { datastoreSource } from '../../datastore/list-watch.js';
import { createReconcileQueue, type WorkQueue } from '../../watch/queue.js';
import { REMOVAL_DELAY_MS, createBatchTimer } from './batch-timer.js';
import { isKnownOrUnsure } from './known.js';
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
  const nft = opts.nft ?? (await defaultNft());
  const state = await ensureBaseTable(opts.base, nft);
  opts.log.info(
    state === 'installed'
      ? 'policy: base ruleset installed (pods isolated until programmed)'
      : 'policy: keeping the table of the previous run until the resync',
  );
  return new Controller(opts, nft).start();
}

/** The compiler's inputs of one batch, and what derives from them. */
interface BatchInputs {
  inputs: ReturnType<PolicyController['inputs']>;
  weps: Array<Resource<'WorkloadEndpoint'>>;
  /** The programmed local endpoints by endpointStatusKey. */
  local: Map<string, Resource<'WorkloadEndpoint'>>;
  settings: AgentSettings;
}

/**
 * The datastore's policy model, batched (one per burst of changes), compiled and programmed: the
 * first batch and any refused one as a full resync of the table, the others as its difference.
 */
class Controller implements PolicyController {
  readonly synced: Promise<void>;
  readonly signal: ProgrammedSignal;
  private resolveSynced!: () => void;
  private readonly compiler: PolicyCompiler;
  private readonly status: StatusReporter;
  private readonly locals: LocalEndpoints;
  private readonly refusals: KernelRefusals;
  private readonly cut: (addrs: string[], denied: (f: ConntrackFlow) => boolean) => number;
  private readonly informers = new Map<Kind, Informer<Resource<Kind>>>();
  /** Staged policies: outside the batches (they change no rule), read only when a flow is reported. */
  private readonly stagedInformers: Array<Informer<StagedPolicy>> = [];
  private readonly queue: WorkQueue;
  private readonly appliedCbs: Array<(s: ApplyStats) => void> = [];
  /** Undefined until the first full resync. */
  private programmed: DesiredState | undefined;
  /** The state a batch in flight is putting in the table. */
  private applying: DesiredState | undefined;
  private readonly batchTimer: ReturnType<typeof createBatchTimer>;
  private lastInputs: ReturnType<PolicyController['inputs']> = { policies: [], profiles: new Map(), endpoints: [] };
  private lastSettings: AgentSettings;
  /** What the last batch saw, to find the endpoints whose policy a batch changed (conntrack). */
  private seen: Seen | undefined;
  private stagedChanged = true;
  private pendingMemo: { policies: PolicyInput[]; pending: PendingPolicies | undefined } | undefined;
  private stopped = false;
  private resynced = false;
  /** The oldest change not yet in the table: from its watch event (or the start) until a batch with it applied. */
  private pendingSince: number | undefined = Date.now();
  private applyingSince: number | undefined;

  constructor(
    private readonly opts: PolicyControllerOptions,
    private readonly nft: (script: string) => Promise<string>,
  ) {
    const { log } = opts;
    this.synced = new Promise<void>((r) => (this.resolveSynced = r));
    this.compiler = new PolicyCompiler(opts.flowLog);
    this.lastSettings = agentSettings(opts.nodename, []);
    this.status = new StatusReporter({ statusDir: opts.statusDir, log });
    this.locals = new LocalEndpoints({
      nodename: opts.nodename,
      vethPrefixes: opts.base.vethPrefixes,
      log,
      onInterfaceConflict: opts.onInterfaceConflict,
    });
    this.refusals = new KernelRefusals({ base: opts.base, nft, log, onRefused: opts.onRefused });
    this.signal = {
      onProgrammed: (key, cb) => this.status.signal.onProgrammed(key, cb),
      mayBeKnown: (ifname) => isKnownOrUnsure(ifname, this.programmed, this.applying),
    };
    this.batchTimer = createBatchTimer(() => this.queue.add('apply'), {
      delayMs: opts.batchDelayMs ?? 5,
      lazyDelayMs: REMOVAL_DELAY_MS,
    });
    this.cut =
      opts.cutConntrack ??
      ((addrs: string[], denied: (f: ConntrackFlow) => boolean) => cutConntrack(addrs, denied, log).deleted);
    for (const kind of WATCHED) {
      const inf = new Informer(
        datastoreSource(opts.ds, kind),
        // An endpoint removed waits for company (batch-timer.ts); everything else is prompt.
        { onChange: (_k, obj) => this.schedule(kind === 'WorkloadEndpoint' && obj === undefined) },
        { onError: (e, src) => log.warn('policy: watch failed; re-listing', { source: src, error: e.message }) },
      );
      this.informers.set(kind, inf as unknown as Informer<Resource<Kind>>);
    }
    for (const kind of opts.staged ? STAGED_KINDS : []) {
      const onError = (e: Error, source: string) =>
        log.warn('policy: staged watch failed; re-listing', { source, error: e.message });
      const src = datastoreSource(opts.ds, kind) as unknown as ListWatchSource<StagedPolicy>;
      const onChange = () => void (this.stagedChanged = true);
      this.stagedInformers.push(new Informer<StagedPolicy>(src, { onChange }, { onError }));
    }
    this.queue = createReconcileQueue(() => this.applyTracked(), {
      baseDelayMs: 200,
      onError: (err, n) =>
        log.error('policy: applying the ruleset failed; retrying', { error: err.message, failures: n }),
    });
  }

  start(): this {
    for (const inf of this.informers.values()) inf.start();
    for (const inf of this.stagedInformers) inf.start();
    // The first resync waits for every list; a kind that lists nothing reports no change, so
    // schedule it once all are in (the batches before it return early).
    void Promise.all([...this.informers.values()].map((i) => i.whenSynced())).then(() => this.schedule());
    return this;
  }

  current(): DesiredState {
    return this.programmed ?? emptyState();
  }

  inputs(): ReturnType<PolicyController['inputs']> {
    return this.lastInputs;
  }

  flowRefs(): ReadonlyMap<string, TagRef> {
    return this.compiler.flowRefs;
  }

  settings(): AgentSettings {
    return this.lastSettings;
  }

  onApplied(cb: (s: ApplyStats) => void): void {
    this.appliedCbs.push(cb);
  }

  programmingLagSeconds(): number {
    const oldest = Math.min(this.pendingSince ?? Infinity, this.applyingSince ?? Infinity);
    return oldest === Infinity ? 0 : Math.max(0, (Date.now() - oldest) / 1000);
  }

  pending(): PendingPolicies | undefined {
    const { stagedInformers, lastInputs } = this;
    if (!stagedInformers.length || stagedInformers.some((i) => !i.synced)) return undefined;
    if (!this.stagedChanged && this.pendingMemo?.policies === lastInputs.policies) return this.pendingMemo.pending;
    this.stagedChanged = false;
    const staged = stagedInformers.flatMap((i) => i.list());
    const p = staged.length ? pendingPolicies(lastInputs.policies, staged) : undefined;
    for (const s of p?.skipped ?? []) {
      this.opts.log.debug('policy: staged policy left out of the pending trace', { ...s.ref, reason: s.reason });
    }
    this.pendingMemo = { policies: lastInputs.policies, pending: p };
    return p;
  }

  async stop(): Promise<void> {
    this.stopped = true;
    this.batchTimer.clear();
    for (const inf of this.informers.values()) inf.stop();
    for (const inf of this.stagedInformers) inf.stop();
    await this.queue.stop();
  }

  private schedule(lazy = false): void {
    this.pendingSince ??= Date.now();
    if (!this.stopped) this.batchTimer.schedule(lazy);
  }

  private allSynced(): boolean {
    for (const inf of this.informers.values()) if (!inf.synced) return false;
    return true;
  }

  private list<K extends Kind>(kind: K): Array<Resource<K>> {
    return this.informers.get(kind)!.list() as Array<Resource<K>>;
  }

  private async applyTracked(): Promise<void> {
    if (!this.allSynced()) return; // still pending: apply() waits for every list
    const since = this.pendingSince;
    this.pendingSince = undefined;
    this.applyingSince = since;
    try {
      await this.apply();
    } catch (e) {
      // Not applied: its changes stay pending (the queue retries).
      if (since !== undefined) this.pendingSince = Math.min(since, this.pendingSince ?? since);
      throw e;
    } finally {
      this.applyingSince = undefined;
      this.applying = undefined;
    }
  }

  /** One batch: the inputs read, compiled, programmed; denied flows cut; the endpoints' status reported. */
  private async apply(): Promise<void> {
    if (this.stopped || !this.allSynced()) return; // the first batch waits for every list
    const { log } = this.opts;
    const t0 = performance.now();
    const batch = this.readInputs();
    const { policies, endpoints } = batch.inputs;
    this.lastInputs = batch.inputs;
    this.lastSettings = batch.settings;
    const next = this.compiler.compile(this.lastInputs);
    this.applying = next;
    for (const r of next.refused) this.refusals.tell({ owner: r.owner, stage: 'model', reason: r.reason });
    const t1 = performance.now();
    const { full, commands } = await this.program(next);
    const t2 = performance.now();
    const { addrs, ctDeleted } = this.cutDeniedFlows(batch);
    await this.status.report(batch.local, this.programmed);
    if (full) {
      log.info('policy: table resynced', {
        policies: policies.length,
        endpoints: endpoints.length,
        commands,
        ms: Math.round(t2 - t0),
      });
      if (!this.resynced) await this.status.sweep();
      this.resynced = true;
      this.resolveSynced();
    }
    const st = { full, commands, compileMs: t1 - t0, applyMs: t2 - t1, flushedAddrs: addrs, ctDeleted };
    for (const cb of this.appliedCbs) cb(st);
  }

  private readInputs(): BatchInputs {
    const { nodename, base } = this.opts;
    const profiles = new Map<string, ProfileInput>();
    for (const p of this.list('Profile')) profiles.set(p.metadata.name, { name: p.metadata.name, spec: p.spec });
    const policies: PolicyInput[] = [];
    for (const p of this.list('NetworkPolicy'))
      policies.push({
        kind: 'NetworkPolicy',
        name: p.metadata.name,
        namespace: p.metadata.namespace ?? 'default',
        spec: p.spec,
      });
    for (const p of this.list('GlobalNetworkPolicy'))
      policies.push({ kind: 'GlobalNetworkPolicy', name: p.metadata.name, spec: p.spec });
    const weps = this.list('WorkloadEndpoint');
    const { endpoints, local } = this.locals.derive(weps);
    const settings = agentSettings(nodename, this.list('AgentConfiguration'));
    const host = {
      ...hostInput(this.list('HostEndpoint'), settings, nodename, base.vethPrefixes),
      vxlanPort: VXLAN_PORT,
    };
    return { inputs: { policies, profiles, endpoints, host }, weps, local, settings };
  }

  /**
   * The difference to the table as programmed; a full resync the first time and when the kernel
   * refuses the difference. Objects libnftables refused stay out while their content is the same.
   */
  private async program(compiled: DesiredState): Promise<{ full: boolean; commands: number }> {
    const { base, log } = this.opts;
    let next = compiled;
    const exclude = this.refusals.exclusions(next);
    if (this.programmed !== undefined) {
      const target = withoutOwners(next, exclude);
      // The plugin marks re-created interfaces stale: read the marks only when entries change.
      const stale = entriesChanged(this.programmed, target)
        ? staleNames(await this.nft(`list set inet ${base.table ?? TABLE} wl-stale\n`))
        : new Set<string>();
      const cmds = diffCommands(this.programmed, target, base, stale);
      try {
        if (cmds.length > 0) await this.nft(cmds.join('\n') + '\n');
        this.programmed = target;
        return { full: false, commands: cmds.length };
      } catch (e) {
        // The kernel's table is not what we think (edited by hand?), or an object it refuses:
        // resync the whole table, recomputed from scratch, leaving out what it refuses.
        log.warn('policy: incremental batch refused; resyncing the whole table', { error: (e as Error).message });
        this.compiler.reset();
        this.applying = next = this.compiler.compile(this.lastInputs);
      }
    }
    this.programmed = undefined;
    const r = await this.refusals.applyFull(next, exclude);
    this.programmed = r.applied;
    return { full: true, commands: r.commands };
  }

  /**
   * Only now, with the new rules in force (an entry flushed earlier could be re-created under the
   * old ones): each conntrack entry of an endpoint whose policy the batch changed is decided again,
   * by the evaluator, on the inputs just programmed; only the denied ones go; an allowed connection
   * keeps its entry (and is never re-decided by its next packet).
   */
  private cutDeniedFlows(batch: BatchInputs): { addrs: number; ctDeleted: number } {
    const { policies, profiles, endpoints } = batch.inputs;
    const was = this.seen;
    const seen = snapshot(batch.weps, endpoints, policies, profiles, was);
    this.seen = seen;
    const addrs = was ? affectedAddresses(was, seen) : [];
    if (!addrs.length) return { addrs: 0, ctDeleted: 0 };
    const views = [...seen.views.values()].map((v) => v.view);
    const enforced = new Set([...seen.local].map((id) => seen.views.get(id)!.view));
    const denied = (f: ConntrackFlow): boolean => {
      const d = flowDecisions(views, policies, profiles, f, (ep) => enforced.has(ep));
      // The node's own packets leave through no rule: only the egress of a pod it talks to counts.
      return d.egress?.verdict === 'deny' || (!f.fromNode && d.ingress?.verdict === 'deny');
    };
    const ctDeleted = this.cut(addrs, denied);
    this.opts.log.debug('policy: deleted the conntrack entries of flows the policy change denies', {
      addrs: addrs.length,
      deleted: ctDeleted,
    });
    return { addrs: addrs.length, ctDeleted };
  }
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
