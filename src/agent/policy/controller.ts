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
import { createWorkQueue, type WorkQueue } from '../../watch/queue.js';
import { REMOVAL_DELAY_MS, createBatchTimer } from './batch-timer.js';
import { isKnownOrUnsure } from './known.js';
import { readdir, rm } from 'node:fs/promises';
import { join } from 'node:path';
import {
  clearPolicyStatus,
  DEFAULT_STATUS_DIR,
  endpointStatusKey,
  isStatusFileName,
  statusFileName,
  writePolicyStatus,
  type ProgrammedSignal,
} from '../../policy-status/index.js';
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
import {
  endpointFromWep,
  endpointViews,
  flowDecisions,
  policyId,
  policySelects,
  type EndpointView,
} from '../../model/policy-eval.js';
import {
  BASE_ID,
  baseCommands,
  diffCommands,
  emptyState,
  entriesChanged,
  fullScriptAttributed,
  ownerFingerprint,
  staleNames,
  withoutOwners,
  type BaseOptions,
} from './nft-script.js';
import { ownerId, type Owner } from '../../dataplane/nft/model.js';
import type { TagRef } from '../flows/tags.js';
import { pendingPolicies, STAGED_KINDS, type PendingPolicies, type StagedPolicy } from '../../model/staged.js';
import { cutConntrack, type ConntrackFlow } from '../../dataplane/conntrack.js';

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

export interface RefusedObject {
  owner: Owner;
  stage: 'model' | 'kernel';
  reason: string;
}

/** A local endpoint whose recorded `interfaceName` is not the host veth the agent derives for it. */
export interface InterfaceConflict {
  namespace: string;
  /** The endpoint's name. */
  endpoint: string;
  /** The pod (Kubernetes endpoints). */
  pod?: string;
  recorded: string;
  /** What the endpoint is programmed as; undefined when it is not programmed (`shared`). */
  derived?: string;
  /** `recorded`: the recorded name is not the derived one; `shared`: another endpoint that derives the same has it. */
  kind: 'recorded' | 'shared';
  message: string;
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
  let applying: DesiredState | undefined; // the state a batch in flight is putting in the table
  let lastInputs: ReturnType<PolicyController['inputs']> = { policies: [], profiles: new Map(), endpoints: [] };
  let lastSettings = agentSettings(opts.nodename, []);
  const appliedCbs: Array<(s: ApplyStats) => void> = [];
  // Local endpoints reported programmed: endpointStatusKey → containerID@revision.
  const reported = new Map<string, string>();
  const waiters = new Map<string, Set<(containerID: string) => void>>();
  // Interface conflicts reported: endpoint id → what was reported (reported again only when it changes).
  const conflicts = new Map<string, string>();
  // What the last batch saw, to find the endpoints whose policy a batch changed (conntrack).
  let seen: Seen | undefined;
  const cut =
    opts.cutConntrack ??
    ((addrs: string[], denied: (f: ConntrackFlow) => boolean) => cutConntrack(addrs, denied, log).deleted);
  // Objects libnftables refused: ownerId → the fingerprint of the content refused (retried when it changes).
  const kernelRefused = new Map<string, string>();
  // Refusals already reported (ownerId + reason), so each is told once.
  const told = new Set<string>();
  const tell = (r: RefusedObject) => {
    const k = `${r.stage}\0${ownerId(r.owner)}\0${r.reason}`;
    if (told.has(k)) return;
    told.add(k);
    const o = r.owner;
    log.warn(
      `policy: ${o.kind} ${o.namespace ? `${o.namespace}/` : ''}${o.name} left out of the table; its pods stay ` +
        `isolated`,
      { stage: r.stage, reason: r.reason },
    );
    opts.onRefused?.(r);
  };
  const scratch = `${opts.base.table ?? TABLE}-check`;
  /** Whether libnftables takes this script, tried in a scratch table that is never hooked and is gone afterwards. */
  const accepted = async (d: DesiredState, exclude: ReadonlySet<string>): Promise<boolean> => {
    const a = fullScriptAttributed({ ...opts.base, table: scratch }, d, exclude, { hooks: false });
    try {
      await nft(a.script + `delete table inet ${scratch}\n`);
      return true;
    } catch {
      return false;
    }
  };
  /**
   * The objects of `d` libnftables refuses: each found as the shortest
   * refused prefix of the objects in script order (the ones before it are
   * the ones it may depend on), by bisection.
   */
  const culprits = async (d: DesiredState, exclude: Set<string>): Promise<string[] | undefined> => {
    const order = [...new Set(fullScriptAttributed(opts.base, d, exclude).lineOwners)];
    if (!(await accepted(d, new Set([...exclude, ...order.filter((o) => o !== BASE_ID)])))) return undefined;
    const found: string[] = [];
    let start = 1; // order[0] is the base
    const upto = (k: number) => new Set([...exclude, ...found, ...order.slice(k)]); // keeps order[0..k)
    while (start < order.length) {
      if (await accepted(d, upto(order.length))) break;
      let lo = start; // order[0..lo) is accepted
      let hi = order.length; // order[0..hi) is refused
      while (hi - lo > 1) {
        const mid = (lo + hi) >> 1;
        if (await accepted(d, upto(mid))) lo = mid;
        else hi = mid;
      }
      found.push(order[hi - 1]!);
      start = hi;
    }
    return found;
  };
  /** A full resync; when refused, its culprits are left out and reported, everything else is programmed. */
  const applyFull = async (
    next: DesiredState,
    exclude: Set<string>,
  ): Promise<{ applied: DesiredState; commands: number }> => {
    let a = fullScriptAttributed(opts.base, next, exclude);
    // Objects the renderer refused (the compiler should have): left out like a kernel refusal.
    for (const u of a.unrendered) {
      const id = ownerId(u.owner);
      exclude.add(id);
      kernelRefused.set(id, ownerFingerprint(next, id));
      tell({ owner: u.owner, stage: 'model', reason: u.reason });
    }
    try {
      await nft(a.script);
      return { applied: withoutOwners(next, exclude), commands: a.lineOwners.length };
    } catch (e) {
      const found = await culprits(next, exclude);
      if (!found?.length) throw e; // the base itself, or not reproducible in the scratch table: retried
      for (const id of found) {
        exclude.add(id);
        kernelRefused.set(id, ownerFingerprint(next, id));
        tell({ owner: a.owners.get(id)!, stage: 'kernel', reason: (e as Error).message.slice(0, 512) });
      }
      a = fullScriptAttributed(opts.base, next, exclude);
      await nft(a.script);
      return { applied: withoutOwners(next, exclude), commands: a.lineOwners.length };
    }
  };
  let resolveSynced!: () => void;
  const synced = new Promise<void>((r) => (resolveSynced = r));
  let stopped = false;

  const informers = new Map<Kind, Informer<Resource<Kind>>>();
  // The oldest change not yet in the table: from its watch event (or the start) until a batch with it applied.
  let pendingSince: number | undefined = Date.now();
  let applyingSince: number | undefined;
  const batchTimer = createBatchTimer(() => queue.add('apply'), {
    delayMs: opts.batchDelayMs ?? 5,
    lazyDelayMs: REMOVAL_DELAY_MS,
  });
  const schedule = (lazy = false) => {
    pendingSince ??= Date.now();
    if (!stopped) batchTimer.schedule(lazy);
  };
  for (const kind of WATCHED) {
    informers.set(
      kind,
      new Informer(
        datastoreSource(ds, kind),
        // An endpoint removed waits for company (batch-timer.ts); everything else is prompt.
        { onChange: (_k, obj) => schedule(kind === 'WorkloadEndpoint' && obj === undefined) },
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
    const { endpoints, local } = localEndpoints(weps);
    const heps = informers.get('HostEndpoint')!.list() as Array<Resource<'HostEndpoint'>>;
    const configs = informers.get('AgentConfiguration')!.list() as Array<Resource<'AgentConfiguration'>>;
    const settings = agentSettings(opts.nodename, configs);
    const host = { ...hostInput(heps, settings, opts.nodename, opts.base.vethPrefixes), vxlanPort: VXLAN_PORT };
    lastInputs = { policies, profiles, endpoints, host };
    lastSettings = settings;
    let next = compiler.compile(lastInputs);
    applying = next;
    for (const r of next.refused) tell({ owner: r.owner, stage: 'model', reason: r.reason });
    // Objects libnftables refused stay out while their content is the same.
    const exclude = new Set<string>();
    for (const [id, fp] of kernelRefused) {
      if (ownerFingerprint(next, id) === fp) exclude.add(id);
      else kernelRefused.delete(id);
    }
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
        applying = next = compiler.compile(lastInputs);
        full = true;
      }
    }
    if (full) {
      current = undefined;
      const r = await applyFull(next, exclude);
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
    await report(local);
    if (full) {
      log.info('policy: table resynced', {
        policies: policies.length,
        endpoints: endpoints.length,
        commands,
        ms: Math.round(t2 - t0),
      });
      if (!resynced) await sweepStatusFiles();
      resynced = true;
      resolveSynced();
    }
    const st = { full, commands, compileMs: t1 - t0, applyMs: t2 - t1, flushedAddrs: addrs.length, ctDeleted };
    for (const cb of appliedCbs) cb(st);
  };

  /**
   * The compiler's endpoints: a local one gets the host veth the agent derives for it (never its
   * recorded interfaceName: a pod annotation on the Kubernetes datastore, so its owner's to edit),
   * and an interface is programmed for one endpoint only: when two derive the same (one pod with two
   * endpoints, or a hash collision), one has it (preferred()) and the other is not programmed.
   * Disagreements are reported. `local`: the programmed local endpoints by endpointStatusKey.
   */
  const localEndpoints = (weps: Array<Resource<'WorkloadEndpoint'>>) => {
    const endpoints: EndpointInput[] = [];
    const owner = new Map<string, { w: Resource<'WorkloadEndpoint'>; e: EndpointInput }>();
    const found = new Map<string, InterfaceConflict>();
    for (const w of weps) {
      const e = endpointFromWep(w, opts.nodename, opts.base.vethPrefixes);
      endpoints.push(e);
      if (w.spec.node !== opts.nodename || !e.interfaceName) continue;
      if (w.spec.interfaceName !== e.interfaceName) found.set(wepId(w), conflictOf(w, e.interfaceName, 'recorded'));
      const other = owner.get(e.interfaceName);
      if (other) {
        const [win, lose] = preferred(w, other.w, e.interfaceName) ? [{ w, e }, other] : [other, { w, e }];
        delete lose.e.interfaceName;
        found.set(wepId(lose.w), conflictOf(lose.w, undefined, 'shared', win.w));
        owner.set(win.e.interfaceName!, win);
      } else owner.set(e.interfaceName, { w, e });
    }
    for (const [id, c] of found) {
      const sig = `${c.kind}\0${c.recorded}\0${c.derived ?? ''}`;
      if (conflicts.get(id) === sig) continue;
      conflicts.set(id, sig);
      log.warn(`policy: ${c.message}`, {
        endpoint: `${c.namespace}/${c.endpoint}`,
        recorded: c.recorded,
        programmedAs: c.derived ?? null,
      });
      opts.onInterfaceConflict?.(c);
    }
    for (const id of [...conflicts.keys()]) if (!found.has(id)) conflicts.delete(id);
    const local = new Map<string, Resource<'WorkloadEndpoint'>>();
    for (const { w } of owner.values()) {
      local.set(endpointStatusKey(w.metadata.namespace ?? 'default', w.metadata.name), w);
    }
    return { endpoints, local };
  };

  /**
   * After the first resync: status files no current endpoint has (an earlier agent's, or of the
   * name format before the namespace was in it).
   */
  let resynced = false;
  const sweepStatusFiles = async () => {
    const dir = opts.statusDir ?? DEFAULT_STATUS_DIR;
    const keep = new Set([...reported.keys()].map(statusFileName));
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
    log.info(msg, { count: stale.length, oldFormat });
  };

  const report = async (candidates: Map<string, Resource<'WorkloadEndpoint'>>) => {
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
      if (reported.get(key) === stamp) continue;
      reported.set(key, stamp);
      jobs.push(async () => {
        await writePolicyStatus(key, {
          ...(opts.statusDir ? { statusDir: opts.statusDir } : {}),
          containerID: w.spec.containerID,
        });
        for (const cb of waiters.get(key) ?? []) cb(w.spec.containerID);
      });
    }
    for (const key of [...reported.keys()]) {
      if (local.has(key)) continue;
      reported.delete(key);
      jobs.push(() => clearPolicyStatus(key, opts.statusDir));
    }
    // A resync reports every pod of the node: a few files at a time, not one after another.
    for (let i = 0; i < jobs.length; i += 32) await Promise.all(jobs.slice(i, i + 32).map((j) => j()));
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
      applying = undefined;
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
  void Promise.all([...informers.values()].map((i) => i.whenSynced())).then(() => schedule());

  return {
    synced,
    signal: {
      mayBeKnown: (ifname) => isKnownOrUnsure(ifname, current, applying),
      onProgrammed(key, cb) {
        let s = waiters.get(key);
        if (!s) waiters.set(key, (s = new Set()));
        s.add(cb);
        return () => {
          s!.delete(cb);
          if (s!.size === 0) waiters.delete(key);
        };
      },
    },
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
      batchTimer.clear();
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

/** An endpoint's identity: its name is unique only within its namespace. */
function wepId(w: Resource<'WorkloadEndpoint'>): string {
  return `${w.metadata.namespace ?? 'default'}/${w.metadata.name}`;
}

/**
 * Whether `a` rather than `b` has interface `ifname` that both derive: the one that records it (the
 * other's record disagrees: another network's veth, or forged), else the newer: created later; in
 * the same second, the greater identity (all agents agree).
 */
function preferred(a: Resource<'WorkloadEndpoint'>, b: Resource<'WorkloadEndpoint'>, ifname: string): boolean {
  const ha = a.spec.interfaceName === ifname;
  if (ha !== (b.spec.interfaceName === ifname)) return ha;
  const ta = a.metadata.creationTimestamp ?? '';
  const tb = b.metadata.creationTimestamp ?? '';
  return ta !== tb ? ta > tb : wepId(a) > wepId(b);
}

function conflictOf(
  w: Resource<'WorkloadEndpoint'>,
  derived: string | undefined,
  kind: InterfaceConflict['kind'],
  winner?: Resource<'WorkloadEndpoint'>,
): InterfaceConflict {
  const namespace = w.metadata.namespace ?? 'default';
  const who = w.spec.pod ? `pod ${namespace}/${w.spec.pod}` : `endpoint ${namespace}/${w.metadata.name}`;
  // The recorded name is the pod owner's text: quoted, bounded.
  const recorded = JSON.stringify(w.spec.interfaceName.slice(0, 64));
  const message =
    kind === 'recorded'
      ? `${who} records host interface ${recorded}, which is not the one this node made for it ` +
        `(${derived}, derived from its namespace and pod); the recorded name is ignored and its policy is ` +
        'programmed on its own interface (on the Kubernetes datastore: remove or correct the annotation ' +
        'cni.netplugin.org/interfaceName)'
      : `${who} derives the host interface of ${winner ? wepId(winner) : 'another endpoint'}, which records ` +
        'it or is newer and keeps it; this endpoint is not programmed (its traffic stays dropped)';
  return {
    namespace,
    endpoint: w.metadata.name,
    ...(w.spec.pod ? { pod: w.spec.pod } : {}),
    recorded: w.spec.interfaceName,
    ...(derived ? { derived } : {}),
    kind,
    message,
  };
}

/** What one batch saw: the objects (by identity: the informers keep an unchanged object) and the endpoints' views. */
interface Seen {
  weps: Map<string, Resource<'WorkloadEndpoint'>>;
  policies: Map<string, PolicyInput>;
  profiles: Map<string, ProfileInput>;
  views: Map<string, { view: EndpointView; sig: string }>;
  /** Endpoints programmed on this node (they have an interface). */
  local: Set<string>;
}

function snapshot(
  weps: Array<Resource<'WorkloadEndpoint'>>,
  endpoints: EndpointInput[],
  policies: PolicyInput[],
  profiles: Map<string, ProfileInput>,
  was: Seen | undefined,
): Seen {
  const now: Seen = { weps: new Map(), policies: new Map(), profiles, views: new Map(), local: new Set() };
  for (const p of policies) now.policies.set(`${p.kind}/${policyId(p)}`, p);
  // A profile change can change any endpoint's labels (namespace labels, labelsToApply): all views anew.
  const reuse = was !== undefined && !changedKeys(was.profiles, profiles).length;
  const fresh: EndpointInput[] = [];
  const freshIds: string[] = [];
  weps.forEach((w, i) => {
    const id = wepId(w);
    now.weps.set(id, w);
    if (endpoints[i]!.interfaceName) now.local.add(id);
    const old = reuse && was.weps.get(id) === w ? was.views.get(id) : undefined;
    if (old) now.views.set(id, old);
    else {
      fresh.push(endpoints[i]!);
      freshIds.push(id);
    }
  });
  endpointViews(fresh, profiles).forEach((v, i) => {
    const sig = JSON.stringify([v.allLabels, v.nsLabels, v.addrs, v.ports, v.profiles]);
    now.views.set(freshIds[i]!, { view: v, sig });
  });
  return now;
}

/** Keys whose value is not the same object in both maps (added, removed or replaced). */
function changedKeys<T extends { spec: unknown }>(a: Map<string, T>, b: Map<string, T>): string[] {
  const out: string[] = [];
  for (const [k, v] of a) {
    const w = b.get(k)?.spec;
    // A relist after a watch failure brings equal objects anew: compared by content then.
    if (w !== v.spec && (w === undefined || JSON.stringify(w) !== JSON.stringify(v.spec))) out.push(k);
  }
  for (const k of b.keys()) if (!a.has(k)) out.push(k);
  return out;
}

/**
 * The addresses whose conntrack entries are checked after a batch: the established connections of
 * the endpoints whose policy the batch changed, so that a flow the new policy denies is cut at once
 * (the base chains accept established traffic before any policy); entries of allowed flows are left
 * alone. Changed are:
 * - an endpoint (on any node) whose labels, namespace labels, addresses, ports or profiles
 *   changed: its own policy, and its membership in the selections of other endpoints' rules;
 * - a local endpoint selected by a policy that was added, removed or changed (old or new version);
 * - a local endpoint naming a profile that was added, removed or changed.
 * A new endpoint has no connection yet (dropped until programmed); a deleted one's are flushed by DEL.
 */
function affectedAddresses(was: Seen, now: Seen): string[] {
  const out = new Set<string>();
  const take = (v: EndpointView | undefined) => v?.addrs.forEach((a) => out.add(a));
  for (const [id, n] of now.views) {
    const o = was.views.get(id);
    if (!o || o === n || o.sig === n.sig) continue;
    take(o.view);
    take(n.view);
  }
  const profiles = new Set(changedKeys(was.profiles, now.profiles));
  const policies = changedKeys(was.policies, now.policies).map(
    (k) => [was.policies.get(k), now.policies.get(k)] as const,
  );
  if (profiles.size === 0 && policies.length === 0) return [...out];
  for (const id of now.local) {
    const n = now.views.get(id)!.view;
    const o = was.views.get(id)?.view;
    if (!o) continue;
    const selects = ([op, np]: (typeof policies)[number]) =>
      (np !== undefined && policySelects(np, n)) || (op !== undefined && policySelects(op, o));
    if (n.profiles.some((p) => profiles.has(p)) || policies.some(selects)) take(n);
  }
  return [...out];
}
