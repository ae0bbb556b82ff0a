// The resource model: the typed netplugin.org/v3 resources every layer speaks
// (IPAM objects, endpoints, nodes, policies, cluster settings). The bottom
// layer: datastore/ stores them, k8s/ derives some from Kubernetes objects,
// ipam/, agent/ and ctl/ read and write them; none of those import each other
// for these types.

import type {
  GlobalNetworkPolicySpec,
  NetworkPolicySpec,
  ProfileSpec,
  StagedGlobalNetworkPolicySpec,
  StagedNetworkPolicySpec,
} from './policy.js';
import type { StagedKubernetesNetworkPolicySpec } from './k8s-networkpolicy-types.js';

export const API_GROUP = 'netplugin.org';
export const API_VERSION = 'netplugin.org/v3';

// The optional fields may be present and undefined: objects are copied field
// by field from a stored one that may lack them, and JSON drops undefined.
/** metadata.ownerReferences[]: the object this one belongs to (Kubernetes' garbage collector follows it). */
export interface OwnerReference {
  apiVersion: string;
  kind: string;
  name: string;
  uid: string;
  controller?: boolean;
  blockOwnerDeletion?: boolean;
}

export interface ObjectMeta {
  name: string;
  namespace?: string | undefined;
  /** etcd: the key's mod revision; Kubernetes: metadata.resourceVersion. Empty on create. */
  resourceVersion?: string | undefined;
  uid?: string | undefined;
  creationTimestamp?: string | undefined;
  labels?: Record<string, string> | undefined;
  annotations?: Record<string, string> | undefined;
  ownerReferences?: OwnerReference[];
}

export interface Resource<K extends Kind = Kind, S = SpecOf<K>> {
  apiVersion: typeof API_VERSION;
  kind: K;
  metadata: ObjectMeta;
  spec: S;
}

export type EncapMode = 'Never' | 'Always' | 'CrossSubnet';

/**
 * An IPPool's blockSize: the default and the allowed range per family. Facts of
 * the resource, so the CRD schema (datastore/crds.ts) and the IPAM's pool check
 * read the same numbers.
 */
export const DEFAULT_BLOCK_SIZE: Readonly<Record<4 | 6, number>> = { 4: 26, 6: 122 };
export const BLOCK_SIZE_RANGE: Readonly<Record<4 | 6, readonly [number, number]>> = { 4: [20, 32], 6: [116, 128] };

export interface IPPoolSpec {
  cidr: string;
  /** Prefix length of the blocks the pool is carved into: 20-32 (IPv4, default 26), 116-128 (IPv6, default 122). */
  blockSize?: number;
  ipipMode?: EncapMode;
  vxlanMode?: EncapMode;
  natOutgoing?: boolean;
  disabled?: boolean;
  /** Label selector over Node labels (src/selector). Default `all()`. */
  nodeSelector?: string;
  allowedUses?: Array<'Workload' | 'Tunnel'>;
}

export interface AllocationAttribute {
  /** IPAM handle (`<network>.<containerID>`), or null for reserved/unknown. */
  handle_id: string | null;
  secondary?: Record<string, string>;
}

/** One block of a pool: the unit of node affinity. Name: cidr with '/' -> '-' (e.g. `10.0.0.0-26`). */
export interface IPAMBlockSpec {
  cidr: string;
  /** `host:<node>` when affine to a node, null when not. */
  affinity: string | null;
  /** allocations[i] is the index into `attributes` of ordinal i, or null when free. */
  allocations: Array<number | null>;
  /** Free ordinals, in the order they will be handed out. */
  unallocated: number[];
  attributes: AllocationAttribute[];
  /** Set while a node is releasing the block so racing writers back off. */
  deleted?: boolean;
  sequenceNumber?: number;
}

type AffinityState = 'pending' | 'confirmed' | 'pendingDeletion';

/** Name: `<node>-<cidr with / and : replaced by ->` (Kubernetes-safe). */
export interface BlockAffinitySpec {
  state: AffinityState;
  node: string;
  cidr: string;
  deleted?: boolean;
}

/** Name: the handle ID. `block` maps block CIDR -> number of addresses the handle holds there. */
interface IPAMHandleSpec {
  handleID: string;
  block: Record<string, number>;
  deleted?: boolean;
}

/** Singleton named `default`. */
export interface IPAMConfigSpec {
  strictAffinity?: boolean;
  maxBlocksPerHost?: number;
  autoAllocateBlocks?: boolean;
}

export interface WorkloadEndpointSpec {
  orchestrator: string;
  workload?: string;
  node: string;
  containerID: string;
  pod?: string;
  endpoint: string;
  serviceAccountName?: string;
  ipNetworks: string[];
  ipNATs?: Array<{ internalIP: string; externalIP: string }>;
  profiles?: string[];
  interfaceName: string;
  mac?: string;
  ports?: Array<{ name: string; protocol: string; port: number; hostPort?: number; hostIP?: string }>;
  generateName?: string;
}

/** Singleton named `default`. */
export interface ClusterInformationSpec {
  clusterGUID?: string;
  clusterType?: string;
  netpluginVersion?: string;
  datastoreReady?: boolean;
}

export interface NodeSpec {
  addresses?: Array<{ address: string; type?: string }>;
  /** Pod CIDRs of the node (from the orchestrator), used by host-local `usePodCidr`. */
  podCIDRs?: string[];
  bgp?: NodeBGPSpec;
  /** The node's own addresses with prefix (`192.0.2.10/24`), registered by its agent. */
  ipv4Address?: string;
  ipv6Address?: string;
  /** Tunnel data the agent allocates and registers, read by the other nodes' agents. */
  vxlanTunnelAddress?: string;
  vxlanTunnelMACAddr?: string;
  vxlanTunnelAddressV6?: string;
  vxlanTunnelMACAddrV6?: string;
  ipv4IPIPTunnelAddr?: string;
}

/** The node's BGP identity: addresses (with prefix, registered by its agent) and overrides. */
interface NodeBGPSpec {
  ipv4Address?: string;
  ipv6Address?: string;
  /** This node's AS number, overriding the BGPConfiguration's. */
  asNumber?: number;
  /** Set on route reflectors: the cluster ID (dotted quad) they reflect for; the mesh does not include them. */
  routeReflectorClusterID?: string;
}

export type BGPLogSeverity = 'Debug' | 'Info' | 'Warning' | 'Error' | 'Fatal';

/** `default` for the cluster, `node.<name>` for one node (which may not set nodeToNodeMeshEnabled). */
export interface BGPConfigurationSpec {
  /** Default 64512. */
  asNumber?: number;
  /** Default true; only on `default`. */
  nodeToNodeMeshEnabled?: boolean;
  /** Default 179. */
  listenPort?: number;
  logSeverityScreen?: BGPLogSeverity;
  /** Service ranges every node advertises. */
  serviceClusterIPs?: Array<{ cidr: string }>;
  serviceExternalIPs?: Array<{ cidr: string }>;
  serviceLoadBalancerIPs?: Array<{ cidr: string }>;
  /** Interface names (globs with `*`) BIRD does not use. */
  ignoredInterfaces?: string[];
  /** Graceful restart time of the mesh sessions (Go duration, default `120s`). */
  nodeMeshMaxRestartTime?: string;
}

export interface BGPPeerSpec {
  /** The one node of ours that peers. With neither this nor nodeSelector every node peers. */
  node?: string;
  nodeSelector?: string;
  /** `ADDR`, `ADDR:PORT` or `[V6ADDR]:PORT`; exclusive with peerSelector. */
  peerIP?: string;
  asNumber?: number;
  /** Peer with our own nodes this selects (route reflectors); exclusive with peerIP. */
  peerSelector?: string;
  password?: { secretKeyRef?: { name: string; key: string }; file?: string };
  keepOriginalNextHop?: boolean;
  sourceAddress?: 'UseNodeIP' | 'None';
  /** Go duration; default `120s`. */
  maxRestartTime?: string;
  /** GTSM: the peer is at most this many hops away. */
  ttlSecurity?: number;
}

export interface HostEndpointSpec {
  node: string;
  /** The host interface it protects, or `*` for all of the node's interfaces (pod interfaces excepted). */
  interfaceName?: string;
  /** The node's addresses on it: what peer selectors of policies match for this endpoint. */
  expectedIPs?: string[];
  profiles?: string[];
  /** Named ports, for policy rules naming a destination port. */
  ports?: Array<{ name: string; protocol: string; port: number }>;
}

/** A failsafe port: always open on a host endpoint (inbound: from `net`; outbound: to `net`). */
export interface HostPortSpec {
  protocol: 'TCP' | 'UDP' | 'SCTP';
  port: number;
  /** A network (CIDR); absent: any address. */
  net?: string;
}

/** `default` for the cluster, `node.<name>` overriding it field by field for one node. */
export interface AgentConfigurationSpec {
  /** Replaces the default inbound failsafe ports; an empty list turns them off. */
  failsafeInboundHostPorts?: HostPortSpec[];
  failsafeOutboundHostPorts?: HostPortSpec[];
  /** What happens to traffic from a pod to its own node after the pod's egress policy (default Accept). */
  defaultEndpointToHostAction?: 'Drop' | 'Return' | 'Accept';
  /** The flow log aggregator the agent sends its flow logs to (an https URL). */
  flowLogsAggregator?: string;
  /** How often flow logs are flushed (Go duration, default `15s`). */
  flowLogsFlushInterval?: string;
}

export interface KubeControllersConfigurationSpec {
  controllers?: {
    node?: {
      hostEndpoint?: { autoCreate?: 'Enabled' | 'Disabled' };
      /** How long an allocation must look leaked before IPAM GC releases it (Go duration, default `15m`). */
      leakGracePeriod?: string;
      /** How often IPAM GC scans (Go duration, default `1m`). */
      reconcilerPeriod?: string;
    };
    [k: string]: unknown;
  };
  [k: string]: unknown;
}

interface SpecMap {
  IPPool: IPPoolSpec;
  IPAMBlock: IPAMBlockSpec;
  BlockAffinity: BlockAffinitySpec;
  IPAMHandle: IPAMHandleSpec;
  IPAMConfig: IPAMConfigSpec;
  WorkloadEndpoint: WorkloadEndpointSpec;
  ClusterInformation: ClusterInformationSpec;
  Node: NodeSpec;
  HostEndpoint: HostEndpointSpec;
  KubeControllersConfiguration: KubeControllersConfigurationSpec;
  AgentConfiguration: AgentConfigurationSpec;
  Profile: ProfileSpec;
  NetworkPolicy: NetworkPolicySpec;
  GlobalNetworkPolicy: GlobalNetworkPolicySpec;
  BGPConfiguration: BGPConfigurationSpec;
  BGPPeer: BGPPeerSpec;
  StagedNetworkPolicy: StagedNetworkPolicySpec;
  StagedGlobalNetworkPolicy: StagedGlobalNetworkPolicySpec;
  StagedKubernetesNetworkPolicy: StagedKubernetesNetworkPolicySpec;
}
export type Kind = keyof SpecMap;
export type SpecOf<K extends Kind> = SpecMap[K];

/** Namespaced kinds; every other kind is cluster-scoped. */
export const NAMESPACED_KINDS: ReadonlySet<Kind> = new Set<Kind>([
  'WorkloadEndpoint',
  'NetworkPolicy',
  'StagedNetworkPolicy',
  'StagedKubernetesNetworkPolicy',
]);
