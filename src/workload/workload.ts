// Pod -> workload endpoint: the labels, profiles and ports the node agent
// needs to enforce NetworkPolicy (docs/policy.md), the
// endpoint's name, and the decision whether to read the pod at all.
//
// Coded against small structural interfaces (PodLike, PodSource) so the real
// API client (src/k8s/client.ts) and plain test objects both fit.
import { CniError, DatastoreError, ErrorCodes } from '../errors.js';
import type { Logger } from '../log/types.js';
// Types only: datastore/ may import k8s/, never the reverse (ARCHITECTURE layers).
import type { Resource, WorkloadEndpointSpec } from '../model/resources.js';
import { workloadEndpointName } from '../model/names.js';
import { LABEL_NAMESPACE, LABEL_ORCHESTRATOR, LABEL_SERVICEACCOUNT } from '../model/annotations.js';
import { resolveWorkloadOptions, type AddressRequest, type PoolInfo, type ResolveInput } from './annotations.js';

/** API_VERSION of src/datastore/types.ts, spelled out (the type below catches drift). */
const WEP_API_VERSION: Resource<'WorkloadEndpoint'>['apiVersion'] = 'netplugin.org/v3';

const PROFILE_NAMESPACE_PREFIX = 'kns.';
const PROFILE_SERVICEACCOUNT_PREFIX = 'ksa.';

type Orchestrator = 'k8s' | 'cni';

interface ContainerPortLike {
  name?: string;
  containerPort: number;
  protocol?: string;
  hostPort?: number;
  hostIP?: string;
}

/** The subset of a core/v1 Pod the plugin reads (matches @kubernetes/client-node V1Pod). */
export interface PodLike {
  metadata: {
    name: string;
    /** Always set by the API server for a pod read by name; readPodContext fills it if absent. */
    namespace?: string | undefined;
    uid?: string | undefined;
    generateName?: string | undefined;
    labels?: Record<string, string> | undefined;
    annotations?: Record<string, string> | undefined;
  };
  spec?: {
    serviceAccountName?: string;
    /** Deprecated alias of serviceAccountName; still filled by old clients. */
    serviceAccount?: string;
    nodeName?: string;
    containers?: Array<{ name?: string; ports?: ContainerPortLike[] }>;
  };
}

export interface NamespaceLike {
  metadata: {
    name: string;
    labels?: Record<string, string> | undefined;
    annotations?: Record<string, string> | undefined;
  };
}

/** What the plugin needs from the API client; `createKubeClient()` (src/k8s/client.ts) satisfies it. */
export interface PodSource {
  getPod(namespace: string, name: string): Promise<PodLike>;
  getNamespace(name: string): Promise<NamespaceLike>;
}

interface EndpointPort {
  name: string;
  protocol: string;
  port: number;
  hostPort?: number;
  hostIP?: string;
}

interface PodEndpointAttributes {
  labels: Record<string, string>;
  profiles: string[];
  ports: EndpointPort[];
  serviceAccountName: string;
  generateName?: string;
}

/**
 * Whether this ADD reads the Pod and its Namespace. Decision (lead, issue 8):
 * with `policy.type: k8s` (labels/profiles for NetworkPolicy) or the kubernetes
 * datastore (endpoints derive from Pods), and only when the runtime named a pod.
 * Otherwise annotations are ignored, which is logged at DEBUG so a user asking
 * "why is my annotation ignored?" finds the reason.
 */
export function needsPodLookup(
  conf: { policy?: { type?: string | undefined } | undefined; datastore_type?: string | undefined },
  args: { K8S_POD_NAMESPACE?: string | undefined; K8S_POD_NAME?: string | undefined },
  log?: Logger,
): boolean {
  const hasPod = !!args.K8S_POD_NAMESPACE && !!args.K8S_POD_NAME;
  const wanted = conf.policy?.type === 'k8s' || conf.datastore_type === 'kubernetes';
  if (wanted && hasPod) return true;
  log?.debug(
    !hasPod
      ? 'not reading the pod: CNI_ARGS carries no K8S_POD_NAMESPACE/K8S_POD_NAME; annotations are ignored'
      : 'not reading the pod: neither policy.type is "k8s" nor datastore_type is "kubernetes"; cni.netplugin.org/* ' +
          'annotations are ignored',
    { policyType: conf.policy?.type, datastoreType: conf.datastore_type ?? 'etcdv3' },
  );
  return false;
}

/** Labels, profiles, named ports and generateName of a pod's endpoint. */
export function podEndpointAttributes(pod: PodLike): PodEndpointAttributes {
  const ns = pod.metadata.namespace || 'default';
  // The API server's admission fills serviceAccountName; 'default' is what it would fill.
  const sa = pod.spec?.serviceAccountName || pod.spec?.serviceAccount || 'default';
  // Our labels are written after the pod's own so a pod cannot claim another
  // namespace or service account through its labels and slip past policy.
  const labels: Record<string, string> = {
    ...(pod.metadata.labels ?? {}),
    [LABEL_NAMESPACE]: ns,
    [LABEL_ORCHESTRATOR]: 'k8s',
    [LABEL_SERVICEACCOUNT]: sa,
  };
  const ports: EndpointPort[] = [];
  for (const c of pod.spec?.containers ?? []) {
    for (const p of c.ports ?? []) {
      // Only named ports: NetworkPolicy refers to ports by name; numbered ones need no lookup.
      if (!p.name) continue;
      const port: EndpointPort = { name: p.name, protocol: (p.protocol || 'TCP').toUpperCase(), port: p.containerPort };
      if (p.hostPort) {
        port.hostPort = p.hostPort;
        if (p.hostIP) port.hostIP = p.hostIP;
      }
      ports.push(port);
    }
  }
  const out: PodEndpointAttributes = {
    labels,
    profiles: [`${PROFILE_NAMESPACE_PREFIX}${ns}`, `${PROFILE_SERVICEACCOUNT_PREFIX}${ns}.${sa}`],
    ports,
    serviceAccountName: sa,
  };
  if (pod.metadata.generateName) out.generateName = pod.metadata.generateName;
  return out;
}

interface EndpointInput {
  node: string;
  containerId: string;
  /** CNI_IFNAME inside the container. */
  ifname: string;
  /** The host-side veth name (WorkloadEndpointSpec.interfaceName). */
  hostIfname: string;
  /** Addresses with prefix (`10.0.0.5/32`). */
  ipNetworks: string[];
  ipNATs?: Array<{ internalIP: string; externalIP: string }>;
  mac?: string;
  /** Present for Kubernetes pods that were read from the API server. */
  pod?: PodLike;
  /** For plain-CNI workloads (no pod): the namespace to file the endpoint under (default `default`). */
  namespace?: string;
}

/** The WorkloadEndpoint resource for one interface of one workload. */
export function buildWorkloadEndpoint(input: EndpointInput): Resource<'WorkloadEndpoint'> {
  const pod = input.pod;
  const orchestrator: Orchestrator = pod ? 'k8s' : 'cni';
  const workload = pod ? pod.metadata.name : input.containerId;
  const spec: WorkloadEndpointSpec = {
    orchestrator,
    node: input.node,
    containerID: input.containerId,
    endpoint: input.ifname,
    ipNetworks: input.ipNetworks,
    interfaceName: input.hostIfname,
  };
  let labels: Record<string, string> | undefined;
  if (!pod) spec.workload = input.containerId;
  else {
    const a = podEndpointAttributes(pod);
    spec.pod = pod.metadata.name;
    spec.serviceAccountName = a.serviceAccountName;
    spec.profiles = a.profiles;
    if (a.ports.length) spec.ports = a.ports;
    if (a.generateName) spec.generateName = a.generateName;
    labels = a.labels;
  }
  if (input.ipNATs?.length) spec.ipNATs = input.ipNATs;
  if (input.mac) spec.mac = input.mac;
  return {
    apiVersion: WEP_API_VERSION,
    kind: 'WorkloadEndpoint',
    metadata: {
      name: workloadEndpointName(input.node, orchestrator, workload, input.ifname),
      namespace: pod ? pod.metadata.namespace || 'default' : (input.namespace ?? 'default'),
      ...(labels ? { labels } : {}),
    },
    spec,
  };
}

/**
 * Map an API client failure while reading a pod or namespace to a CNI error.
 *
 * - Unavailable (unreachable, timeout, 429/5xx) -> 11: transient; the runtime retries the sandbox.
 * - NotFound -> 102, not 3. CNI code 3 ("unknown container") tells the runtime
 *   the *container* does not exist and needs no DEL cleanup; here the runtime's
 *   sandbox does exist and only the API object is missing (typically the pod was
 *   deleted while its sandbox was being created), so cleanup must still run.
 * - Unauthorized -> 102 with the RBAC fix; retrying cannot help.
 */
export function podLookupError(
  e: unknown,
  /** The pod (namespace and name) being looked up; kind says which read failed. */
  ref: { namespace: string; name: string; kind?: 'pod' | 'namespace' },
  apiServer?: string,
): CniError {
  if (e instanceof CniError) return e;
  const kind = ref.kind ?? 'pod';
  const what = kind === 'pod' ? `pod ${ref.namespace}/${ref.name}` : `namespace ${ref.namespace}`;
  const where = apiServer ? ` at ${apiServer}` : '';
  const cause = e instanceof Error ? e.message : String(e);
  if (DatastoreError.is(e, 'Unavailable')) {
    return new CniError(
      ErrorCodes.TryAgainLater,
      `cannot read ${what}: the Kubernetes API server${where} is unreachable or throttling (${cause}); try again later`,
    );
  }
  if (DatastoreError.is(e, 'NotFound')) {
    return new CniError(
      ErrorCodes.OrchestratorFailure,
      kind === 'pod'
        ? `${what} not found in the API server${where} (was it deleted?)`
        : `${what} (of pod ${ref.namespace}/${ref.name}) not found in the API server${where}`,
    );
  }
  if (DatastoreError.is(e, 'Unauthorized')) {
    return new CniError(
      ErrorCodes.OrchestratorFailure,
      `not allowed to read ${what} from the API server${where} (${cause}); grant the plugin's identity get on pods ` +
        `and namespaces (deploy/rbac.yaml) and check kubernetes.kubeconfig in the netconf`,
    );
  }
  return new CniError(ErrorCodes.OrchestratorFailure, `reading ${what} from the API server${where} failed: ${cause}`);
}

/** Read the pod and its namespace in parallel; failures become CniErrors via podLookupError. */
export async function readPodContext(
  source: PodSource,
  ref: { namespace: string; name: string },
  apiServer?: string,
): Promise<{ pod: PodLike; namespace: NamespaceLike }> {
  const podP = source.getPod(ref.namespace, ref.name).catch((e: unknown) => {
    throw podLookupError(e, { ...ref, kind: 'pod' }, apiServer);
  });
  const nsP = source.getNamespace(ref.namespace).catch((e: unknown) => {
    throw podLookupError(e, { ...ref, kind: 'namespace' }, apiServer);
  });
  // Pod first: its error is the more useful one when both fail.
  const [pod, namespace] = await Promise.allSettled([podP, nsP]);
  if (pod.status === 'rejected') throw pod.reason;
  if (namespace.status === 'rejected') throw namespace.reason;
  const p = pod.value.metadata.namespace
    ? pod.value
    : { ...pod.value, metadata: { ...pod.value.metadata, namespace: ref.namespace } };
  return { pod: p, namespace: namespace.value };
}

/** What readWorkloadContext reads and resolves for one ADD. */
interface WorkloadContextRequest {
  /**
   * Read this pod and its namespace (only when the ADD reads pods: needsPodLookup); `open` gives the source to read
   * from.
   */
  pod?: { ref: { namespace: string; name: string }; open: () => Promise<{ source: PodSource; apiServer?: string }> };
  /**
   * Resolve the pod's address options (our IPAM only) from its annotations,
   * the netconf and CNI_ARGS; `pools` is called once the pod is read (the
   * caller may have the list in flight already).
   */
  resolve?: Omit<ResolveInput, 'podAnnotations' | 'namespaceAnnotations' | 'pools'> & {
    pools: () => Promise<PoolInfo[]>;
  };
}

interface WorkloadContext {
  /** The pod as the API server has it (when it was read). */
  pod?: PodLike;
  namespace?: NamespaceLike;
  /** Its resolved options (when `resolve` was asked): what IPAM and the endpoint writer receive. */
  options?: AddressRequest;
}

/**
 * The pod (when this ADD reads it) and its resolved WorkloadOptions in one
 * call: pod-read failures are CniErrors from podLookupError, option failures
 * the CniErrors of resolveWorkloadOptions (docs/addresses-and-annotations.md).
 * Without a pod read, annotations are absent and only the netconf and
 * CNI_ARGS decide.
 */
export async function readWorkloadContext(req: WorkloadContextRequest): Promise<WorkloadContext> {
  let got: { pod: PodLike; namespace: NamespaceLike } | undefined;
  if (req.pod) {
    const { source, apiServer } = await req.pod.open();
    got = await readPodContext(source, req.pod.ref, apiServer);
  }
  if (!req.resolve) return got ?? {};
  const { pools, ...rest } = req.resolve;
  const options = resolveWorkloadOptions({
    ...rest,
    pools: await pools(),
    podAnnotations: got?.pod.metadata.annotations ?? {},
    namespaceAnnotations: got?.namespace.metadata?.annotations ?? {},
  });
  return { ...(got ?? {}), options };
}
