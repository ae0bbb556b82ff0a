// The node agent's policy controller: watches workload endpoints, network
// policies, global network policies and profiles in the datastore (through the
// shared informer), recompiles the node's `inet netplugin` table when they
// change, and applies the difference as one nft transaction per burst of
// changes (through libnftables in the addon). After a batch that programmed a
// local endpoint it writes the endpoint's policy-programmed status (file and
// in-process signal) that the ADD's policy_setup_timeout_seconds wait uses.
//
// Start: the base ruleset (default-drop for pod interfaces not yet programmed)
// is installed at once when the table is absent, before the datastore is
// reached; a table left by the previous agent run stays in force until the
// first full resync replaces it atomically. Stop: the table stays (existing
// pods keep their enforcement, new pods stay isolated).
import type { Logger } from '../../log/types.js';
import type { Kind, Resource } from '../../model/resources.js';
import type { Datastore } from '../../datastore/types.js';
import { datastoreSource, Informer } from '../../watch/informer.js';
import { createWorkQueue, type WorkQueue } from '../../watch/queue.js';
import { clearPolicyStatus, writePolicyStatus, type ProgrammedSignal } from '../../k8s/policy-wait.js';
import { PolicyCompiler, TABLE, type DesiredState, type EndpointInput, type PolicyInput, type ProfileInput } from './compile.js';
import { endpointFromWep } from '../../model/policy-eval.js';
import { diffCommands, emptyState, fullScript, baseCommands, type BaseOptions } from './nft-script.js';

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
    const next = compiler.compile(lastInputs);
    const t1 = performance.now();
    const full = current === undefined;
    const script = full ? fullScript(opts.base, next) : diffCommands(current!, next, opts.base).join('\n') + '\n';
    const commands = script.split('\n').length - 1;
    if (commands > 0) {
      try {
        await nft(script);
      } catch (e) {
        if (full) throw e;
        // The kernel's table is not what we think (edited by hand?): resync the whole table.
        log.warn('policy: incremental batch refused; resyncing the whole table', { error: (e as Error).message });
        current = undefined;
        compiler.reset(); // and recompute it from scratch
        throw e;
      }
    }
    current = next;
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
    for (const w of weps) if (w.spec.node === opts.nodename && w.spec.interfaceName) local.set(w.metadata.name, w);
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
