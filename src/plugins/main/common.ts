// What ADD, DEL, CHECK and GC share: who the workload is, its names, and the
// datastore/IPAM/Kubernetes handles for this invocation.
import { resolveNodename } from '../../config/nodename.js';
import type { Netconf } from '../../config/index.js';
import type { CniArgs, CniContext } from '../../cni/types.js';
import { CniError, DatastoreError, ErrorCodes } from '../../errors.js';
import type { Resource } from '../../model/resources.js';
import type { Datastore } from '../../datastore/types.js';
import { hostVethKey, hostVethName, workloadEndpointName } from '../../model/names.js';
import type { PluginRuntime } from './runtime.js';
import { createIpam, handleIDFor, type Ipam } from '../../ipam/index.js';

export const HOST_MAC = 'ee:ee:ee:ee:ee:ee';
export const DEFAULT_VETH_PREFIX = 'npi';

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
export function identify(
  conf: Netconf,
  c: { containerId: string; ifname: string; args: CniArgs },
  nodenameDeps?: Parameters<typeof resolveNodename>[1],
): Workload {
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
    hostIfname: hostVethName(
      prefix,
      hostVethKey({ orchestrator, namespace: pod?.namespace, pod: pod?.name, containerID: c.containerId }),
    ),
    endpointName: workloadEndpointName(node, orchestrator, workload, c.ifname),
  };
}

/**
 * ClusterInformation `default` must exist with datastoreReady; otherwise code 11 (the runtime retries).
 * Read on every ADD. Per-exec it is a store read, issued together with the
 * IPAM reads (no extra round trip); in the agent it comes from the watch-fed
 * read cache, and the ADD's transaction compares ClusterInformation at the
 * revision read (src/datastore/cached.ts), so no ADD writes after an operator
 * marked the datastore not ready for an upgrade, even before the watch says so.
 */
export async function checkClusterReady(ds: Datastore): Promise<void> {
  let ci: Resource<'ClusterInformation'>;
  try {
    ci = await ds.get('ClusterInformation', 'default');
  } catch (e) {
    if (DatastoreError.is(e, 'NotFound')) {
      throw new CniError(
        ErrorCodes.TryAgainLater,
        "the datastore is not initialised: ClusterInformation 'default' is missing; run `netpluginctl datastore " +
          'init` (install-cni and the node agent do this on start)',
      );
    }
    throw e;
  }
  if (ci.spec.datastoreReady !== true) {
    throw new CniError(
      ErrorCodes.TryAgainLater,
      "the datastore is marked not ready (ClusterInformation 'default' datastoreReady is not true, e.g. during an " +
        'upgrade); run `netpluginctl datastore ready --set=true` when maintenance is over',
    );
  }
}

/** A handler's context: the netconf and the runtime of the process serving it (src/plugins/main/runtime.ts). */
export type PluginContext = CniContext<Netconf, PluginRuntime>;

/**
 * This invocation's IPAM: the node's lock (src/plugins/node-lock.ts, with the
 * runtime's lock-takeover hook), the runtime's shared IPAM state and, for
 * assignments and releases, its batching.
 */
export async function ipamFor(
  ctx: Pick<PluginContext, 'conf' | 'env' | 'log' | 'runtime'>,
  ds: Datastore,
  use: 'assign' | 'read' = 'read',
): Promise<Ipam> {
  // Lazy: the host lock loads the addon (flock); an invocation with a delegated IPAM never gets here.
  const { nodeIpamLock } = await import('../node-lock.js');
  const lock = nodeIpamLock(ctx, ctx.runtime.ipam.onLockTakeover);
  const batch = use === 'assign' && ctx.runtime.ipam.batch;
  return createIpam(ds, { log: ctx.log, lock, shared: ctx.runtime.ipam.shared, ...(batch ? { batch: true } : {}) });
}

export function statusDir(conf: Netconf): string | undefined {
  return conf.endpoint_status_dir;
}
