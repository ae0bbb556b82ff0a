// The node agent's metrics: what an operator needs to see whether pods get
// networks (CNI requests by verb, their latency, errors by CNI code), whether
// IPAM is healthy (addresses assigned and released, compare-and-swap retries
// on IPAM objects) and whether the datastore is slow. Served on /metrics by
// src/observe/health.ts; names follow Prometheus conventions (_total,
// _seconds).
import type { Datastore } from '../datastore/types.js';
import type { IpamObserver } from '../plugins/main/runtime.js';
import { Registry } from '../observe/metrics.js';

export interface ServedRequest {
  plugin: string;
  command: string;
  /** Process exit code (0 success). */
  exitCode: number;
  /** The stdout the runtime gets: a CNI error JSON when exitCode is not 0. */
  stdout: string;
  seconds: number;
}

interface AgentMetrics {
  readonly registry: Registry;
  /** Called by the CNI server for every answered request. */
  served(r: ServedRequest): void;
  /** Counts the addresses the plugins assign and release (the runtime's IPAM observer). */
  readonly ipamObserver: IpamObserver;
  /** Times every datastore call; counts compare-and-swap conflicts on IPAM objects (each is retried). */
  wrapDatastore(ds: Datastore): Datastore;
  /** One nftables batch of the policy controller applied (full resync or incremental). */
  policyApplied(s: PolicyApplied): void;
  /** A local endpoint whose recorded host interface the policy agent does not take (by kind: recorded, shared). */
  policyInterfaceConflict(kind: string): void;
  /** An object the policy controller left out of the table (model: refused before rendering; kernel: by nftables). */
  policyRefused(stage: 'model' | 'kernel', kind: string): void;
  /** One reconcile of the route controller applied to the kernel. */
  routesApplied(s: RoutesApplied): void;
  /** State gauges of the policy controller (undefined until it runs), read from what it holds at scrape time. */
  watchPolicy(controller: () => PolicyState | undefined): void;
  /** A floating IP of a local endpoint refused: held by another endpoint (conflict) or an invalid entry. */
  floatingRefused(kind: 'conflict' | 'invalid'): void;
}

/** What the state gauges read of the policy controller (src/agent/policy/controller.ts). */
interface PolicyState {
  current(): {
    chains: ReadonlyMap<string, { owner: { kind: string; namespace?: string; name: string } }>;
    endpoints: ReadonlyMap<string, unknown>;
  };
  programmingLagSeconds(): number;
}

/** The kinds of programmed objects the policies gauge counts. */
const POLICY_KINDS = ['NetworkPolicy', 'GlobalNetworkPolicy', 'Profile'] as const;

interface PolicyApplied {
  full: boolean;
  commands: number;
  compileMs: number;
  applyMs: number;
  /** Addresses whose conntrack entries were checked after the batch. */
  flushedAddrs?: number;
  /** Of their entries, those deleted (the new policy denies their flow). */
  ctDeleted?: number;
}

export interface RoutesApplied {
  seconds: number;
  routesAdded: number;
  routesRemoved: number;
  errors: number;
}

/** Objects IPAM updates with compare-and-swap and retries on Conflict. */
const IPAM_KINDS = new Set(['IPAMBlock', 'IPAMHandle', 'BlockAffinity', 'IPAMConfig']);
const TIMED = new Set(['get', 'list', 'create', 'update', 'delete', 'txn']);

/** The kind label of a call: its kind, or for a transaction the kinds it writes (`IPAMBlock+WorkloadEndpoint`). */
type OpLike = { kind?: string; res?: { kind?: string } } | undefined;
const opKind = (o: OpLike) => o?.res?.kind ?? o?.kind ?? '';
function kindOf(op: string, first: unknown): string {
  if (op === 'txn' && Array.isArray(first)) return [...new Set(first.map((o: OpLike) => opKind(o)))].sort().join('+');
  return typeof first === 'string' ? first : String((first as { kind?: string } | undefined)?.kind ?? '');
}

/** The CNI error code in a runtime-facing error JSON, or 'unknown'. */
export function cniErrorCode(stdout: string): string {
  try {
    const code = (JSON.parse(stdout) as { code?: unknown }).code;
    return typeof code === 'number' ? String(code) : 'unknown';
  } catch {
    return 'unknown';
  }
}

export function createAgentMetrics(registry = new Registry()): AgentMetrics {
  const requests = registry.counter(
    'netplugin_cni_requests_total',
    'CNI requests the agent answered, by plugin, CNI command and result (success or error).',
    ['plugin', 'command', 'result'],
  );
  const latency = registry.histogram(
    'netplugin_cni_request_duration_seconds',
    'Time from accepting a CNI request to its answer, by plugin and CNI command.',
    ['plugin', 'command'],
  );
  const errors = registry.counter(
    'netplugin_cni_errors_total',
    'CNI requests that failed, by plugin, CNI command and CNI error code (e.g. 11 try again, 7 invalid config, 100+ ' +
      'netplugin codes).',
    ['plugin', 'command', 'code'],
  );
  const assigned = registry.counter(
    'netplugin_ipam_addresses_assigned_total',
    'Addresses IPAM assigned to workloads on this node.',
  );
  const released = registry.counter(
    'netplugin_ipam_addresses_released_total',
    'Addresses IPAM released from workloads on this node.',
  );
  const retries = registry.counter(
    'netplugin_ipam_cas_retries_total',
    'Compare-and-swap conflicts (Conflict, AlreadyExists) on IPAM objects, each retried, by kind: contention with ' +
      'other nodes or processes.',
    ['kind'],
  );
  const dsLatency = registry.histogram(
    'netplugin_datastore_request_duration_seconds',
    'Datastore calls made by the agent, by operation, kind and result.',
    ['operation', 'kind', 'result'],
  );
  const policyLatency = registry.histogram(
    'netplugin_policy_program_duration_seconds',
    'Compiling and applying one nftables batch of network policy (inet netplugin), by mode: full (resync) or ' +
      'incremental.',
    ['mode'],
  );
  const policyCommands = registry.counter(
    'netplugin_policy_nft_commands_total',
    'nftables commands applied by the policy controller, by mode.',
    ['mode'],
  );
  const ifConflicts = registry.counter(
    'netplugin_policy_interface_conflicts_total',
    'Local endpoints whose recorded host interface (interfaceName) is not the one the agent derives for them ' +
      '(recorded), or whose derived interface a newer endpoint has (shared); each is reported once, with a log ' +
      'line and a Warning Event on the pod.',
    ['kind'],
  );
  const ctFlushes = registry.counter(
    'netplugin_policy_conntrack_flushed_addresses_total',
    "Addresses whose conntrack entries the policy agent checked after a batch changed their endpoint's policy " +
      '(each entry whose flow the new policy denies is deleted: the connection is cut).',
  );
  const ctDeleted = registry.counter(
    'netplugin_policy_conntrack_deleted_entries_total',
    'Conntrack entries the policy agent deleted after a batch because the new policy denies their flow.',
  );
  const policyRefused = registry.counter(
    'netplugin_policy_refused_objects_total',
    'Objects (endpoints, policies, profiles) the policy controller left out of the table, by stage (model: a value ' +
      'nftables cannot hold, refused before rendering; kernel: refused by libnftables) and kind; an endpoint left ' +
      'out stays isolated.',
    ['stage', 'kind'],
  );
  const routeLatency = registry.histogram(
    'netplugin_route_reconcile_duration_seconds',
    'Applying one reconcile of routes, tunnel devices, neighbours and FDB entries to the kernel.',
  );
  const routeChanges = registry.counter(
    'netplugin_route_changes_total',
    'Routes the route controller added or removed, by change.',
    ['change'],
  );
  const floatingRefused = registry.counter(
    'netplugin_floating_ip_refused_total',
    'Floating IPs of local endpoints the agent does not translate, by kind: conflict (an older endpoint holds the ' +
      'address) or invalid (the ipNATs entry fails validation); each is reported once, with a log line and a ' +
      'Warning Event on the pod.',
    ['kind'],
  );
  const routeErrors = registry.counter(
    'netplugin_route_errors_total',
    'Kernel refusals while reconciling routes (each is retried on the next reconcile).',
  );

  const localEndpoints = registry.gauge(
    'netplugin_policy_local_endpoints',
    "This node's workload endpoints programmed in the policy table (an endpoint left out stays isolated).",
  );
  const programmed = registry.gauge(
    'netplugin_policy_programmed_policies',
    'Policies and profiles whose rules are programmed in the policy table, by kind.',
    ['kind'],
  );
  const lag = registry.gauge(
    'netplugin_policy_programming_lag_seconds',
    'Age of the oldest datastore change (endpoint, policy, profile) not yet programmed; 0 when the table is current. ' +
      'Since the start until the first resync.',
  );
  const policyRunning = registry.gauge(
    'netplugin_policy_controller_running',
    'Whether the policy controller runs (1) or not yet (0; policy not enabled or datastore unreachable).',
  );

  return {
    registry,
    watchPolicy(controller) {
      // Counted once per applied table (the object changes with every batch), not per scrape.
      let counted: object | undefined;
      registry.onCollect(() => {
        const c = controller();
        policyRunning.set(undefined, c ? 1 : 0);
        lag.set(undefined, c ? c.programmingLagSeconds() : 0);
        const cur = c?.current();
        if (cur === counted) return;
        counted = cur;
        localEndpoints.set(undefined, cur?.endpoints.size ?? 0);
        const owners = new Map<string, Set<string>>(POLICY_KINDS.map((k) => [k, new Set()]));
        for (const ch of cur?.chains.values() ?? []) {
          owners.get(ch.owner.kind)?.add(`${ch.owner.namespace ?? ''}/${ch.owner.name}`);
        }
        for (const [kind, set] of owners) programmed.set({ kind }, set.size);
      });
    },
    served(r) {
      const ok = r.exitCode === 0;
      requests.inc({ plugin: r.plugin, command: r.command, result: ok ? 'success' : 'error' });
      latency.observe({ plugin: r.plugin, command: r.command }, r.seconds);
      if (!ok) errors.inc({ plugin: r.plugin, command: r.command, code: cniErrorCode(r.stdout) });
    },
    policyApplied(a) {
      const mode = a.full ? 'full' : 'incremental';
      policyLatency.observe({ mode }, (a.compileMs + a.applyMs) / 1000);
      policyCommands.inc({ mode }, a.commands);
      if (a.flushedAddrs) ctFlushes.inc(undefined, a.flushedAddrs);
      if (a.ctDeleted) ctDeleted.inc(undefined, a.ctDeleted);
    },
    policyInterfaceConflict(kind) {
      ifConflicts.inc({ kind });
    },
    policyRefused(stage, kind) {
      policyRefused.inc({ stage, kind });
    },
    floatingRefused(kind) {
      floatingRefused.inc({ kind });
    },
    routesApplied(r) {
      routeLatency.observe(undefined, r.seconds);
      if (r.routesAdded) routeChanges.inc({ change: 'added' }, r.routesAdded);
      if (r.routesRemoved) routeChanges.inc({ change: 'removed' }, r.routesRemoved);
      if (r.errors) routeErrors.inc(undefined, r.errors);
    },
    ipamObserver: {
      assigned: (n) => assigned.inc(undefined, n),
      released: (n) => released.inc(undefined, n),
    },
    wrapDatastore(ds) {
      return new Proxy(ds, {
        get(target, prop, receiver) {
          const v = Reflect.get(target, prop, receiver) as unknown;
          if (typeof prop !== 'string' || !TIMED.has(prop) || typeof v !== 'function') return v;
          return (...args: unknown[]) => {
            const first = args[0];
            const kind = kindOf(prop, first);
            const stop = dsLatency.startTimer({ operation: prop, kind });
            return (v as (...a: unknown[]) => Promise<unknown>).apply(target, args).then(
              (res) => {
                stop({ result: 'ok' });
                return res;
              },
              (e: unknown) => {
                const errKind = (e as { kind?: string })?.kind;
                stop({ result: typeof errKind === 'string' ? errKind : 'error' });
                // A transaction names the op whose guard failed (TxnError.failedOp).
                const failed =
                  prop === 'txn' && Array.isArray(first)
                    ? opKind((first as OpLike[])[(e as { failedOp?: number }).failedOp ?? -1])
                    : kind;
                if ((errKind === 'Conflict' || errKind === 'AlreadyExists') && IPAM_KINDS.has(failed))
                  retries.inc({ kind: failed });
                throw e;
              },
            );
          };
        },
      });
    },
  };
}
