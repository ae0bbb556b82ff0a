// Builders for the netplugin.org/v3 resources tests create over and over:
// one place that knows their required fields, so a test states only what it
// is about (a pool's CIDR and block size, an endpoint's pod and addresses).
// Pods and namespaces on the fake API server: putPod / putNamespace in k8s-harness.ts.
import { workloadEndpointName } from '../../src/model/names.js';
import { API_VERSION, type IPPoolSpec, type Resource, type WorkloadEndpointSpec } from '../../src/model/resources.js';
import type { Datastore } from '../../src/datastore/types.js';

/** An IPPool; `spec` adds to or overrides the CIDR (blockSize etc. default as the datastore defaults them). */
export function ipPool(name: string, cidr: string, spec: Partial<IPPoolSpec> = {}): Resource<'IPPool'> {
  return { apiVersion: API_VERSION, kind: 'IPPool', metadata: { name }, spec: { cidr, ...spec } };
}

/** Creates ipPool(name, cidr, spec) in the datastore and returns what it stored. */
export function createPool(
  ds: Datastore,
  name: string,
  cidr: string,
  spec: Partial<IPPoolSpec> = {},
): Promise<Resource<'IPPool'>> {
  return ds.create(ipPool(name, cidr, spec));
}

export interface EndpointDef {
  node: string;
  namespace: string;
  pod: string;
  containerID: string;
  /** Addresses without a prefix get /32 or /128. */
  ips: string[];
  /** The host veth; default "eth0". */
  interfaceName?: string;
  labels?: Record<string, string>;
  spec?: Partial<WorkloadEndpointSpec>;
}

/** A Kubernetes pod's WorkloadEndpoint (interface eth0), named as the plugin names it. */
export function workloadEndpoint(e: EndpointDef): Resource<'WorkloadEndpoint'> {
  const ipNetworks = e.ips.map((ip) => (ip.includes('/') ? ip : `${ip}/${ip.includes(':') ? 128 : 32}`));
  return {
    apiVersion: API_VERSION,
    kind: 'WorkloadEndpoint',
    metadata: {
      name: workloadEndpointName(e.node, 'k8s', e.pod, 'eth0'),
      namespace: e.namespace,
      ...(e.labels ? { labels: e.labels } : {}),
    },
    spec: {
      orchestrator: 'k8s',
      node: e.node,
      containerID: e.containerID,
      pod: e.pod,
      endpoint: 'eth0',
      ipNetworks,
      interfaceName: e.interfaceName ?? 'eth0',
      ...e.spec,
    },
  };
}
