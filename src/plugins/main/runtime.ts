// The plugin's runtime: everything an invocation uses that outlives it or is
// chosen by the process serving it — datastore connections (etcd3 import
// ~75-95 ms, Kubernetes client ~150-230 ms), API clients, where pods are read
// from, the dataplane, IPAM batching and counting, the policy signal. The
// caller of the dispatcher builds one (src/bin/netplugin.ts: the plain one of
// a per-exec run; src/bin/netplugin-node.ts: the agent's, kept warm across
// requests) and every handler reads it from `ctx.runtime`. Nothing here is
// module-level state: two runtimes in one process (tests) share nothing.
// Only types, the small client cache and the IPAM's shared-state factory are
// imported: this module is on the per-exec path before any command runs.
import type { Datastore } from '../../datastore/types.js';
import { createClientCache } from '../../client-cache.js';
import type { DatastoreConfig } from '../../datastore/index.js';
import { CLIENT_CACHE_LIMITS, createDatastorePool, type DatastorePool } from '../../datastore/pool.js';
import type { WorkloadSpec, WorkloadState } from '../../dataplane/index.js';
import type { ConntrackLog } from '../../dataplane/conntrack.js';
import type { KubeClient } from '../../k8s/client.js';
import type { PodSource } from '../../workload/workload.js';
import type { ProgrammedSignal } from '../../policy-status/index.js';
import { CniError, ErrorCodes } from '../../errors.js';
import { createIpamShared, type IpamShared } from '../../ipam/index.js';

export interface DataplanePort {
  setup(spec: WorkloadSpec): Promise<WorkloadState>;
  teardown(o: {
    netnsPath?: string;
    ifname: string;
    hostIfname: string;
    keepHostEnd?: boolean;
    hostMac?: string;
  }): Promise<{ removed: boolean }>;
  check(spec: WorkloadSpec, expect: { containerMac: string }): Promise<string[]>;
  /** Deletes the veths a crashed agent left in the trash group (src/dataplane/trash.ts); returns how many. */
  purgeTrash(hostMac: string): Promise<number>;
  /**
   * The conntrack entries of released addresses (src/dataplane/conntrack.ts): at once per-exec, batched off the request
   * path in the agent.
   */
  flushConntrack(addrs: string[], log: ConntrackLog): void;
}

/** Counts addresses handed out and given back (the agent's /metrics, src/agent/metrics.ts). */
export interface IpamObserver {
  assigned(n: number): void;
  released(n: number): void;
}

/** A watch-fed cache of one node's pods and namespaces (src/k8s/cache.ts CachingPodSource). */
interface PodCache {
  /** The cache as a PodSource for one pod: a cached pod with another uid is read from the API. */
  forPod(uid: string | undefined): PodSource;
  stop(): void;
}

/** Where the pod's Kubernetes API access is configured (the netconf's `kubernetes` block). */
type KubeSettings = Pick<DatastoreConfig, 'kubernetes'>;

export interface PluginRuntime {
  /** The open datastore for these settings (one per distinct settings; a failed open is retried by the next call). */
  datastore(s: DatastoreConfig): Promise<Datastore>;
  /** The API client for the netconf's kubeconfig / API root; CNI code 7 when neither is set. */
  kubeClient(conf: KubeSettings): Promise<KubeClient>;
  /**
   * Where ADD reads its pod and namespace: the API client itself, or in the
   * agent a watch-fed cache of `node`'s pods (one per API client and node).
   * `podUid` is CNI_ARGS K8S_POD_UID: a cached pod with another uid is read again.
   */
  podSource(conf: KubeSettings, kube: KubeClient, node: string, podUid?: string): Promise<PodSource>;
  dataplane(): Promise<DataplanePort>;
  /** The in-process signal that an endpoint's policy is programmed: the agent's policy controller once it runs. */
  policySignal(): ProgrammedSignal | undefined;
  /**
   * IPAM options of this process. `batch`: the resident agent serves many ADDs
   * at once, so their assignments on one node share lock acquisitions and
   * block writes (Ipam `batch`); a per-exec run has one request and leaves it off.
   * `shared`: the batch queues and the blocks last seen full, one per runtime
   * (src/ipam/shared.ts), given to every Ipam this runtime's handlers create.
   * `onLockTakeover`: given to the node IPAM lock they take (src/plugins/node-lock.ts).
   */
  readonly ipam: {
    readonly batch: boolean;
    readonly shared: IpamShared;
    readonly observer?: IpamObserver;
    readonly onLockTakeover?: () => void;
  };
  /** Closes every datastore, API client and pod cache (shutdown, tests). */
  close(): Promise<void>;
}

interface PluginRuntimeOptions {
  /**
   * The datastores requests use: the agent's warm ones, which its controllers share (it closes them
   * itself). Default: opened on first use and closed by close().
   */
  datastores?: DatastorePool;
  /** Without `datastores`: applied to every datastore opened (tests time or count calls). */
  wrapDatastore?: (ds: Datastore) => Datastore;
  /** Without `datastores`: how etcdv3 stores without an explicit etcd_transport are spoken. */
  etcdTransport?: 'grpc' | 'http';
  /**
   * Starts a watch-fed pod cache for an API client and node (the agent only:
   * a watch in a one-shot process costs a LIST per ADD). The runtime keeps one
   * per API client and node. The agent passes it so the per-exec bundles never
   * reference the cache's code.
   */
  podCache?: (kube: KubeClient, node: string) => Promise<PodCache>;
  /** Default: the dataplane inline, loaded on first use (a per-exec run). */
  dataplane?: DataplanePort;
  policySignal?: () => ProgrammedSignal | undefined;
  ipamBatching?: boolean;
  ipamObserver?: IpamObserver;
  /**
   * Called when an IPAM step of this runtime takes the node's IPAM lock and
   * finds that another process held it since (the agent: its read caches
   * may miss that process's writes).
   */
  ipamLockTakeover?: () => void;
}

export function createPluginRuntime(opts: PluginRuntimeOptions = {}): PluginRuntime {
  const datastores =
    opts.datastores ??
    createDatastorePool({
      ...(opts.wrapDatastore ? { wrap: opts.wrapDatastore } : {}),
      ...(opts.etcdTransport ? { etcdTransport: opts.etcdTransport } : {}),
    });
  const kubeClients = createClientCache<KubeClient>({ ...CLIENT_CACHE_LIMITS, close: (c) => c.close() });
  const podCaches = new Map<string, Promise<PodCache>>();
  let dataplanePort = opts.dataplane;
  const ipam = {
    batch: opts.ipamBatching === true,
    shared: createIpamShared(),
    ...(opts.ipamObserver ? { observer: opts.ipamObserver } : {}),
    ...(opts.ipamLockTakeover ? { onLockTakeover: opts.ipamLockTakeover } : {}),
  };

  return {
    datastore: (s) => datastores.datastore(s),
    kubeClient(conf) {
      const k = conf.kubernetes ?? {};
      if (!k.kubeconfig && !k.k8s_api_root) {
        return Promise.reject(
          new CniError(
            ErrorCodes.InvalidNetworkConfig,
            'kubernetes: neither kubernetes.kubeconfig nor kubernetes.k8s_api_root is set, but the pod must be read ' +
              'from the API server; set kubernetes.kubeconfig',
          ),
        );
      }
      return kubeClients.get(JSON.stringify([k.kubeconfig, k.k8s_api_root]), () =>
        // Lazy: only a command that reads the pod from the API loads the client.
        import('../../k8s/client.js').then((m) =>
          m.createKubeClient({
            ...(k.kubeconfig ? { kubeconfig: k.kubeconfig } : {}),
            ...(k.k8s_api_root ? { k8s_api_root: k.k8s_api_root } : {}),
          }),
        ),
      );
    },
    async podSource(conf, kube, node, podUid) {
      if (!opts.podCache) return kube;
      const k = conf.kubernetes ?? {};
      const key = JSON.stringify([k.kubeconfig, k.k8s_api_root, node]);
      let p = podCaches.get(key);
      if (!p) {
        p = opts.podCache(kube, node);
        podCaches.set(key, p);
        // A cache that failed to start is not kept: the next ADD tries again.
        p.catch(() => podCaches.delete(key));
      }
      return (await p).forPod(podUid);
    },
    async dataplane() {
      if (dataplanePort) return dataplanePort;
      // Lazy: only a command that touches the kernel (ADD, DEL, CHECK) loads the dataplane.
      const dp = await import('../../dataplane/index.js');
      dataplanePort = {
        setup: async (spec) => dp.setupWorkload(spec),
        teardown: async (o) => dp.teardownWorkload(o),
        check: async (spec, expect) => dp.checkWorkload(spec, expect),
        purgeTrash: (hostMac) => dp.purgeTrash({ hostMac }),
        flushConntrack: (addrs, log) => dp.flushConntrack(addrs, log),
      };
      return dataplanePort;
    },
    policySignal: () => opts.policySignal?.(),
    ipam,
    async close() {
      const caches = [...podCaches.values()];
      podCaches.clear();
      await Promise.all(
        caches.map((p) =>
          p.then(
            (c) => c.stop(),
            () => undefined,
          ),
        ),
      );
      await Promise.all([opts.datastores ? undefined : datastores.close(), kubeClients.closeAll()]);
    },
  };
}
