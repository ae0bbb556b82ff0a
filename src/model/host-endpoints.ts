// Automatic host endpoints (docs/kube-controllers.md): one
// HostEndpoint `<node>-auto-hep` per node, labelled as created by
// netplugin-kube-controllers, with the allow-all profile attached so that all
// traffic is allowed when no network policy applies. The node controller
// creates them; `netpluginctl upgrade auto-hep` recognizes them.
import { API_VERSION, type Resource } from './resources.js';

export const CREATED_BY_LABEL = 'netplugin.org/created-by';
export const CREATED_BY = 'netplugin-kube-controllers';
export const AUTO_HEP_SUFFIX = '-auto-hep';
export const DEFAULT_ALLOW_PROFILE = 'netplugin-default-allow';

export function autoHostEndpointName(node: string): string {
  return `${node}${AUTO_HEP_SUFFIX}`;
}

/** A node's automatic host endpoint: all interfaces, the node's addresses and labels. */
export function autoHostEndpoint(
  node: string,
  labels: Record<string, string> | undefined,
  addresses: string[],
): Resource<'HostEndpoint'> {
  return {
    apiVersion: API_VERSION,
    kind: 'HostEndpoint',
    metadata: { name: autoHostEndpointName(node), labels: { ...(labels ?? {}), [CREATED_BY_LABEL]: CREATED_BY } },
    spec: { node, interfaceName: '*', expectedIPs: addresses, profiles: [DEFAULT_ALLOW_PROFILE] },
  };
}

export function defaultAllowProfile(): Resource<'Profile'> {
  return {
    apiVersion: API_VERSION,
    kind: 'Profile',
    metadata: { name: DEFAULT_ALLOW_PROFILE },
    spec: { ingress: [{ action: 'Allow' }], egress: [{ action: 'Allow' }] },
  };
}
