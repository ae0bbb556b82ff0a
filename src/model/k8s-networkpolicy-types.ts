// The networking.k8s.io/v1 NetworkPolicy as netplugin reads it (the fields the conversion to our
// model uses), and the StagedKubernetesNetworkPolicy spec built on it. Types only (the conversion
// and the schema are ./k8s-networkpolicy.ts), so the resource model names them without a cycle.
import type { StagedAction } from './policy.js';

export interface KubeLabelSelector {
  matchLabels?: Record<string, string>;
  matchExpressions?: Array<{ key: string; operator: string; values?: string[] }>;
}

export interface KubeNetworkPolicyPort {
  protocol?: string;
  port?: number | string;
  endPort?: number;
}

export interface KubeNetworkPolicyPeer {
  podSelector?: KubeLabelSelector;
  namespaceSelector?: KubeLabelSelector;
  ipBlock?: { cidr: string; except?: string[] };
}

export interface KubeNetworkPolicySpec {
  podSelector?: KubeLabelSelector;
  policyTypes?: string[];
  ingress?: Array<{ from?: KubeNetworkPolicyPeer[]; ports?: KubeNetworkPolicyPort[] }>;
  egress?: Array<{ to?: KubeNetworkPolicyPeer[]; ports?: KubeNetworkPolicyPort[] }>;
}

export interface KubeNetworkPolicy {
  metadata: { name: string; namespace?: string; [k: string]: unknown };
  spec?: KubeNetworkPolicySpec;
}

/** A StagedKubernetesNetworkPolicy: the spec of the Kubernetes NetworkPolicy of its namespace and name. */
export interface StagedKubernetesNetworkPolicySpec extends KubeNetworkPolicySpec {
  stagedAction?: StagedAction;
}
