// Every annotation and label key netplugin reads or writes, in one place: the
// k8s layer reads the user-facing annotations, the kubernetes datastore stores
// a workload endpoint in the pod's annotations, the plugin and the controllers
// set the endpoint labels.

export const ANNOTATION_PREFIX = 'cni.netplugin.org/';

/** Every annotation key netplugin reads or writes. */
export const ANNOTATIONS = {
  // Read (user-facing; docs/addresses-and-annotations.md).
  ipv4Pools: 'cni.netplugin.org/ipv4pools',
  ipv6Pools: 'cni.netplugin.org/ipv6pools',
  ipAddrs: 'cni.netplugin.org/ipAddrs',
  ipAddrsNoIpam: 'cni.netplugin.org/ipAddrsNoIpam',
  floatingIPs: 'cni.netplugin.org/floatingIPs',
  // Written by the plugin on the Pod (kubernetes datastore: the endpoint is derived from them).
  podIP: 'cni.netplugin.org/podIP',
  podIPs: 'cni.netplugin.org/podIPs',
  containerID: 'cni.netplugin.org/containerID',
  // Also written by datastore/kubernetes.ts to store the rest of the endpoint on the Pod.
  interfaceName: 'cni.netplugin.org/interfaceName',
  mac: 'cni.netplugin.org/mac',
  endpoint: 'cni.netplugin.org/endpoint',
  ipNATs: 'cni.netplugin.org/ipNATs',
} as const;

/** The pod annotations that hold a WorkloadEndpoint on the kubernetes datastore. */
export const ENDPOINT_ANNOTATIONS = {
  containerID: ANNOTATIONS.containerID,
  /** The first address, in CIDR form (`10.0.0.5/32`). */
  podIP: ANNOTATIONS.podIP,
  /** All addresses, comma-separated CIDRs. */
  podIPs: ANNOTATIONS.podIPs,
  /** The host-side veth. */
  interfaceName: ANNOTATIONS.interfaceName,
  /** The container-side interface's MAC. */
  mac: ANNOTATIONS.mac,
  /** The container-side interface name when not eth0. */
  endpoint: ANNOTATIONS.endpoint,
  /** Floating IP NAT mappings, JSON array of {internalIP, externalIP}. */
  ipNATs: ANNOTATIONS.ipNATs,
} as const;

/** Labels netplugin puts on workload endpoints (authoritative over the pod's own labels). */
export const LABEL_NAMESPACE = 'netplugin.org/namespace';
export const LABEL_ORCHESTRATOR = 'netplugin.org/orchestrator';
export const LABEL_SERVICEACCOUNT = 'netplugin.org/serviceaccount';
