// Per-process caches of the expensive things an invocation needs: datastore
// connections (etcd3 import ~75-95 ms, Kubernetes client ~150-230 ms) and the
// dataplane. A per-exec plugin uses them once; the resident agent keeps them
// warm across requests, keyed by the datastore settings of the netconf.
import type { Datastore } from '../../datastore/types.js';
import { createClientCache } from '../../client-cache.js';
import type { DatastoreConfig } from '../../datastore/index.js';
import type { WorkloadSpec, WorkloadState } from '../../dataplane/index.js';
import type { ConntrackLog } from '../../dataplane/conntrack.js';

export interface DataplanePort {
  setup(spec: WorkloadSpec): Promise<WorkloadState>;
  teardown(o: { netnsPath?: string; ifname: string; hostIfname: string; keepHostEnd?: boolean; hostMac?: string }): Promise<{ removed: boolean }>;
  check(spec: WorkloadSpec, expect: { containerMac: string }): Promise<string[]>;
  /** Deletes the veths a crashed agent left in the trash group (src/dataplane/trash.ts); returns how many. */
  purgeTrash(hostMac: string): Promise<number>;
  /** The conntrack entries of released addresses (src/dataplane/conntrack.ts): at once per-exec, batched off the request path in the agent. */
  flushConntrack(addrs: string[], log: ConntrackLog): void;
}

/**
 * Open datastores by settings. Bounded: a node has one or two networks, but
 * each distinct netconf the agent is sent would otherwise keep its own
 * connection (and fds) open for ever.
 */
export const DATASTORE_CACHE = { max: 16, idleMs: 10 * 60_000, graceMs: 60_000 };
const datastores = createClientCache<Datastore>({ ...DATASTORE_CACHE, close: (d) => d.close() });
let dataplanePort: DataplanePort | undefined;
/** Set by the agent: in-process signal that an endpoint's policy is programmed. */
let policySignal: unknown;
let ipamBatching = false;
/** Set by the agent (src/agent/metrics.ts): counts addresses and times datastore calls. */
let ipamObserver: IpamObserver | undefined;
let datastoreWrapper: ((ds: Datastore) => Datastore) | undefined;

export interface IpamObserver {
  assigned(n: number): void;
  released(n: number): void;
}
export function setIpamObserver(o: IpamObserver | undefined): void {
  ipamObserver = o;
}
export function getIpamObserver(): IpamObserver | undefined {
  return ipamObserver;
}
export function wrapDatastore(ds: Datastore): Datastore {
  return datastoreWrapper ? datastoreWrapper(ds) : ds;
}
/** Applied to every datastore opened from now on (the agent installs it before serving). */
export function setDatastoreWrapper(fn: ((ds: Datastore) => Datastore) | undefined): void {
  datastoreWrapper = fn;
}

/** The netconf's datastore fields (src/datastore/index.ts DatastoreConfig). */
export type DatastoreSettings = DatastoreConfig;

export function datastoreKey(s: DatastoreSettings): string {
  return JSON.stringify([
    s.datastore_type ?? 'etcdv3', s.etcd_endpoints, s.etcd_discovery_srv, s.etcd_key_file, s.etcd_cert_file,
    s.etcd_ca_cert_file, s.etcd_authority, s.etcd_scheme, s.kubernetes?.kubeconfig, s.kubernetes?.k8s_api_root,
  ]);
}

export function getDatastore(s: DatastoreSettings): Promise<Datastore> {
  // A failed connection is not cached: the next invocation retries.
  return datastores.get(datastoreKey(s), () => import('../../datastore/index.js').then((m) => m.openDatastore(s)).then(wrapDatastore));
}

export async function closeDatastores(): Promise<void> {
  await datastores.closeAll();
}

export function setDataplanePort(p: DataplanePort): void {
  dataplanePort = p;
}

/** The dataplane: the agent installs a worker-pool port; per-exec runs it inline. */
export async function dataplane(): Promise<DataplanePort> {
  if (dataplanePort) return dataplanePort;
  const dp = await import('../../dataplane/index.js');
  dataplanePort = {
    setup: async (spec) => dp.setupWorkload(spec),
    teardown: async (o) => dp.teardownWorkload(o),
    check: async (spec, expect) => dp.checkWorkload(spec, expect),
    purgeTrash: (hostMac) => dp.purgeTrash({ hostMac }),
    flushConntrack: (addrs, log) => dp.flushConntrack(addrs, log),
  };
  return dataplanePort;
}

export function setPolicySignal(s: unknown): void {
  policySignal = s;
}
export function getPolicySignal(): unknown {
  return policySignal;
}

/**
 * The resident agent serves many ADDs at once: their IPAM assignments on one
 * node then share lock acquisitions and block writes (Ipam `batch` option).
 * A per-exec process has one request, so it leaves this off.
 */
export function enableIpamBatching(on = true): void {
  ipamBatching = on;
}
export function ipamBatchingEnabled(): boolean {
  return ipamBatching;
}
