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
import type { Logger } from '../../cni/types.js';
import type { Kind, Resource } from '../../model/resources.js';
import type { Datastore } from '../../datastore/types.js';
import { datastoreSource, Informer } from '../../watch/informer.js';
import { createWorkQueue, type WorkQueue } from '../../watch/queue.js';
import { clearPolicyStatus, writePolicyStatus, type ProgrammedSignal } from '../../k8s/policy-wait.js';
import { PolicyCompiler, TABLE, type DesiredState, type EndpointInput, type PolicyInput, type ProfileInput } from './compile.js';
import { endpointFromWep } from '../../model/policy-eval.js';
import { BASE_ID, baseCommands, diffCommands, emptyState, entriesChanged, fullScriptAttributed, ownerFingerprint, staleNames, withoutOwners, type BaseOptions } from './nft-script.js';
import { ownerId, type Owner } from '../../dataplane/nft/model.js';

export interface PolicyControllerOptions {
  ds: Datastore;
  nodename: string;
  log: Logger;
  base: BaseOptions;
  /** endpoint_status_dir (default /var/run/netplugin/endpoint-status). */
  statusDir?: string;
  /** Runs an nft script as one transaction (default: the addon's libnftables binding). */
  nft?: (script: string) => Promise<string>;
  /** Collects changes for this long before compiling (default 5 ms): one batch per burst. */
  batchDelayMs?: number;
  /**
   * Told once per object left out of the table: `model` when the compiler
   * refused a value before rendering, `kernel` when libnftables refused it.
   */
  onRefused?: (r: RefusedObject) => void;
}

export interface RefusedObject {
  owner: Owner;
  stage: 'model' | 'kernel';
  reason: string;
}

export interface ApplyStats {
  full: boolean;
  commands: number;
  compileMs: number;
  applyMs: number;
}

export interface PolicyController {
  /** Resolves after the first full resync was applied. */
  readonly synced: Promise<void>;
  readonly signal: ProgrammedSignal;
  /** The table content last applied (for explain and tests). */
  current(): DesiredState;
  /** The compiler's inputs as last seen. */
  inputs(): { policies: PolicyInput[]; profiles: Map<string, ProfileInput>; endpoints: EndpointInput[] };
  /** Told after every applied batch. */
  onApplied(cb: (s: ApplyStats) => void): void;
  stop(): Promise<void>;
}

const WATCHED: Kind[] = ['WorkloadEndpoint', 'NetworkPolicy', 'GlobalNetworkPolicy', 'Profile'];

async function defaultNft(): Promise<(script: string) => Promise<string>> {
  const { nftRunAsync } = await import('../../native/nft.js');
  return (s) => nftRunAsync(s);
}

/** Installs the base ruleset when the table is absent (fail closed from the first moment). */
export async function ensureBaseTable(base: BaseOptions, nft: (s: string) => Promise<string>): Promise<'installed' | 'kept'> {
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
  log.info(state === 'installed' ? 'policy: base ruleset installed (pods isolated until programmed)' : 'policy: keeping the table of the previous run until the resync');

  const compiler = new PolicyCompiler();
  let current: DesiredState | undefined; // undefined until the first full resync
  let lastInputs: ReturnType<PolicyController['inputs']> = { policies: [], profiles: new Map(), endpoints: [] };
  const appliedCbs: Array<(s: ApplyStats) => void> = [];
  // Local endpoints reported programmed: key → containerID.
  const reported = new Map<string, string>();
  const waiters = new Map<string, Set<() => void>>();
  // Objects libnftables refused: ownerId → the fingerprint of the content refused (retried when it changes).
  const kernelRefused = new Map<string, string>();
  // Refusals already reported (ownerId + reason), so each is told once.
  const told = new Set<string>();
  const tell = (r: RefusedObject) => {
    const k = `${r.stage}\0${ownerId(r.owner)}\0${r.reason}`;
    if (told.has(k)) return;
    told.add(k);
    const o = r.owner;
    log.warn(`policy: ${o.kind} ${o.namespace ? `${o.namespace}/` : ''}${o.name} left out of the table; its pods stay isolated`, { stage: r.stage, reason: r.reason });
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
  const applyFull = async (next: DesiredState, exclude: Set<string>): Promise<{ applied: DesiredState; commands: number }> => {
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
  let timer: NodeJS.Timeout | undefined;
  let stopped = false;

  const informers = new Map<Kind, Informer<Resource<Kind>>>();
  const schedule = () => {
    if (stopped || timer) return;
    timer = setTimeout(() => {
      timer = undefined;
      queue.add('apply');
    }, opts.batchDelayMs ?? 5);
  };
  for (const kind of WATCHED) {
    informers.set(
      kind,
      new Informer(datastoreSource(ds, kind), { onChange: schedule }, { onError: (e, src) => log.warn('policy: watch failed; re-listing', { source: src, error: e.message }) }) as unknown as Informer<Resource<Kind>>,
    );
  }

  const apply = async (): Promise<void> => {
    if (stopped) return;
    for (const inf of informers.values()) if (!inf.synced) return; // the first batch waits for every list
    const t0 = performance.now();
    const profiles = new Map<string, ProfileInput>();
    for (const p of informers.get('Profile')!.list() as Array<Resource<'Profile'>>) profiles.set(p.metadata.name, { name: p.metadata.name, spec: p.spec });
    const policies: PolicyInput[] = [];
    for (const p of informers.get('NetworkPolicy')!.list() as Array<Resource<'NetworkPolicy'>>) policies.push({ kind: 'NetworkPolicy', name: p.metadata.name, namespace: p.metadata.namespace ?? 'default', spec: p.spec });
    for (const p of informers.get('GlobalNetworkPolicy')!.list() as Array<Resource<'GlobalNetworkPolicy'>>) policies.push({ kind: 'GlobalNetworkPolicy', name: p.metadata.name, spec: p.spec });
    const weps = informers.get('WorkloadEndpoint')!.list() as Array<Resource<'WorkloadEndpoint'>>;
    const endpoints = weps.map((w) => endpointFromWep(w, opts.nodename));
    lastInputs = { policies, profiles, endpoints };
    let next = compiler.compile(lastInputs);
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
      const stale = entriesChanged(current!, target) ? staleNames(await nft(`list set inet ${opts.base.table ?? TABLE} wl-stale\n`)) : new Set<string>();
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
      const r = await applyFull(next, exclude);
      current = r.applied;
      commands = r.commands;
    }
    const t2 = performance.now();
    await report(weps);
    if (full) {
      log.info('policy: table resynced', { policies: policies.length, endpoints: endpoints.length, commands, ms: Math.round(t2 - t0) });
      resolveSynced();
    }
    const st = { full, commands, compileMs: t1 - t0, applyMs: t2 - t1 };
    for (const cb of appliedCbs) cb(st);
  };

  const report = async (weps: Array<Resource<'WorkloadEndpoint'>>) => {
    const local = new Map<string, Resource<'WorkloadEndpoint'>>();
    // Programmed means its interface entry is in the table (an endpoint left out is not reported).
    const programmed = new Set([...(current?.endpoints.values() ?? [])].map((e) => `${e.owner.namespace}/${e.owner.name}`));
    for (const w of weps) {
      if (w.spec.node === opts.nodename && w.spec.interfaceName && programmed.has(`${w.metadata.namespace ?? 'default'}/${w.metadata.name}`)) local.set(w.metadata.name, w);
    }
    const jobs: Array<() => Promise<void>> = [];
    for (const [key, w] of local) {
      // Keyed by revision too: a re-ADD of the same container cleared the file and rewrote the endpoint.
      const stamp = `${w.spec.containerID}@${w.metadata.resourceVersion ?? ''}`;
      if (reported.get(key) === stamp) continue;
      reported.set(key, stamp);
      jobs.push(async () => {
        await writePolicyStatus(key, { ...(opts.statusDir ? { statusDir: opts.statusDir } : {}), containerID: w.spec.containerID });
        for (const cb of waiters.get(key) ?? []) cb();
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

  const queue: WorkQueue = createWorkQueue({
    handle: apply,
    concurrency: 1,
    baseDelayMs: 200,
    maxDelayMs: 10_000,
    onError: (_k, err, n) => log.error('policy: applying the ruleset failed; retrying', { error: (err as Error).message, failures: n }),
  });

  for (const inf of informers.values()) inf.start();
  // The first resync waits for every list; a kind that lists nothing reports no change, so
  // schedule it once all are in (the batches before it return early).
  void Promise.all([...informers.values()].map((i) => i.whenSynced())).then(schedule);

  return {
    synced,
    signal: {
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
    onApplied: (cb) => void appliedCbs.push(cb),
    async stop() {
      stopped = true;
      clearTimeout(timer);
      for (const inf of informers.values()) inf.stop();
      await queue.stop();
    },
  };
}
