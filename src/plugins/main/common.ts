// What ADD, DEL, CHECK and GC share: who the workload is, its names, and the
// datastore/IPAM/Kubernetes handles for this invocation.
import { resolveNodename } from '../../config/nodename.js';
import type { Netconf } from '../../config/index.js';
import type { CniArgs, Logger } from '../../cni/types.js';
import { CniError, DatastoreError, ErrorCodes } from '../../errors.js';
import type { Resource } from '../../model/resources.js';
import type { Datastore } from '../../datastore/types.js';
import { hostVethName } from '../../dataplane/names.js';
import { handleIDFor } from '../../ipam/handle.js';
import { type PodSource } from '../../k8s/workload.js';
import { workloadEndpointName } from '../../model/names.js';
import { getDatastore } from './runtime.js';
import { createClientCache } from '../../client-cache.js';
import type { KubeClient } from '../../k8s/client.js';
import type { CachingPodSource } from '../../k8s/cache.js';

export const HOST_MAC = 'ee:ee:ee:ee:ee:ee';
export const DEFAULT_VETH_PREFIX = 'npi';
export const IPAM_PLUGIN = 'netplugin-ipam';

export interface Workload {
  node: string;
  orchestrator: 'k8s' | 'cni';
  /** Pod name (k8s) or container ID (plain CNI). */
  workload: string;
  namespace: string;
  pod?: { namespace: string; name: string };
  handleID: string;
  hostIfname: string;
  endpointName: string;
}

/** Derives every name of one attachment from the netconf and the CNI environment. */
export function identify(conf: Netconf, c: { containerId: string; ifname: string; args: CniArgs }, nodenameDeps?: Parameters<typeof resolveNodename>[1]): Workload {
  const node = resolveNodename(conf, nodenameDeps);
  const ns = c.args.K8S_POD_NAMESPACE;
  const name = c.args.K8S_POD_NAME;
  const pod = ns && name ? { namespace: ns, name } : undefined;
  const orchestrator = pod ? 'k8s' : 'cni';
  const workload = pod ? pod.name : c.containerId;
  // The host veth is keyed by pod, not sandbox, so a pod's veth name is stable
  // across sandbox restarts (the new ADD replaces the stale one).
  const prefix = conf.host_veth_prefix ?? DEFAULT_VETH_PREFIX;
  return {
    node,
    orchestrator,
    workload,
    namespace: pod?.namespace ?? 'default',
    ...(pod ? { pod } : {}),
    handleID: handleIDFor(conf.name, c.containerId),
    hostIfname: hostVethName(prefix, pod ? `${pod.namespace}.${pod.name}` : c.containerId),
    endpointName: workloadEndpointName(node, orchestrator, workload, c.ifname),
  };
}

export async function datastoreFor(conf: Netconf): Promise<Datastore> {
  return getDatastore(conf);
}

/**
 * ClusterInformation `default` must exist with datastoreReady; otherwise code 11 (the runtime retries).
 * Read on every ADD, never cached: the resident agent would otherwise keep
 * writing for a while after an operator marked the datastore not ready for
 * an upgrade. ADD issues this read together with its IPAM reads, so it adds
 * no round trip.
 */
export async function checkClusterReady(ds: Datastore): Promise<void> {
  let ci: Resource<'ClusterInformation'>;
  try {
    ci = await ds.get('ClusterInformation', 'default');
  } catch (e) {
    if (DatastoreError.is(e, 'NotFound')) {
      throw new CniError(
        ErrorCodes.TryAgainLater,
        "the datastore is not initialised: ClusterInformation 'default' is missing; run `netpluginctl datastore init` (install-cni and the node agent do this on start)",
      );
    }
    throw e;
  }
  if (ci.spec.datastoreReady !== true) {
    throw new CniError(
      ErrorCodes.TryAgainLater,
      "the datastore is marked not ready (ClusterInformation 'default' datastoreReady is not true, e.g. during an upgrade); run `netpluginctl datastore ready --set=true` when maintenance is over",
    );
  }
}

/** API clients by kubeconfig/API root: bounded like the datastores (src/client-cache.ts). */
const kubeClients = createClientCache<KubeClient>({ max: 16, idleMs: 10 * 60_000, graceMs: 60_000, close: (c) => c.close() });

export function kubeClientFor(conf: Netconf): Promise<KubeClient> {
  const k = conf.kubernetes ?? {};
  if (!k.kubeconfig && !k.k8s_api_root) {
    return Promise.reject(
      new CniError(ErrorCodes.InvalidNetworkConfig, 'kubernetes: neither kubernetes.kubeconfig nor kubernetes.k8s_api_root is set, but the pod must be read from the API server; set kubernetes.kubeconfig'),
    );
  }
  return kubeClients.get(JSON.stringify([k.kubeconfig, k.k8s_api_root]), () =>
    import('../../k8s/client.js').then((m) => m.createKubeClient({ ...(k.kubeconfig ? { kubeconfig: k.kubeconfig } : {}), ...(k.k8s_api_root ? { k8s_api_root: k.k8s_api_root } : {}) })),
  );
}

// Watch-fed pod/namespace caches: only in the resident agent (a watch in the
// one-shot executable would cost a LIST per ADD and outlive nothing).
let podCacheEnabled = false;
let podCacheLog: Logger | undefined;
const podCaches = new Map<string, Promise<CachingPodSource>>();

/** Called by the node agent at start: from then on ADD reads pods and namespaces through CachingPodSource; `log` gets its watch trouble. */
export function enablePodCache(log?: Logger): void {
  podCacheEnabled = true;
  podCacheLog = log;
}

/** Stops every cache's watches (tests, shutdown); ADD reads the API directly again. */
export function disablePodCache(): void {
  podCacheEnabled = false;
  for (const p of podCaches.values()) void p.then((c) => c.stop(), () => undefined);
  podCaches.clear();
}

/**
 * Where ADD reads its pod and namespace: the API client itself, or in the
 * agent a cache of `node`'s pods (one per API client and node). `podUid` is
 * CNI_ARGS K8S_POD_UID: a cached pod with another uid is read again.
 */
export async function podSourceFor(conf: Netconf, kube: KubeClient, node: string, podUid?: string): Promise<PodSource> {
  if (!podCacheEnabled) return kube;
  const k = conf.kubernetes ?? {};
  const key = JSON.stringify([k.kubeconfig, k.k8s_api_root, node]);
  let p = podCaches.get(key);
  if (!p) {
    p = import('../../k8s/cache.js').then((m) => new m.CachingPodSource(kube, { nodeName: node, ...(podCacheLog ? { log: podCacheLog } : {}) }).start());
    podCaches.set(key, p);
  }
  return (await p).forPod(podUid);
}

export function ipamLockPath(conf: Netconf): string | undefined {
  return conf.ipam_lock_file;
}

export function statusDir(conf: Netconf): string | undefined {
  return conf.endpoint_status_dir;
}

export function noteLog(log: Logger, msg: string, fields?: Record<string, unknown>): void {
  log.info(msg, fields);
}
