// The kinds the CLI exposes and the names people type for them.
import type { Kind } from '../model/resources.js';
import { CtlError, suggestFlag } from './io.js';

interface KindInfo {
  kind: Kind;
  aliases: string[];
  /** WorkloadEndpoints are written by the plugin only. */
  readOnly?: boolean;
}

export const CTL_KINDS: readonly KindInfo[] = [
  { kind: 'IPPool', aliases: ['ippool', 'ippools', 'pool', 'pools', 'ipp'] },
  { kind: 'IPAMConfig', aliases: ['ipamconfig', 'ipamconfigs', 'ipamconfiguration', 'ipamconfigurations', 'ipamc'] },
  { kind: 'Node', aliases: ['node', 'nodes', 'no'] },
  { kind: 'ClusterInformation', aliases: ['clusterinformation', 'clusterinformations', 'clusterinfo', 'ci'] },
  { kind: 'HostEndpoint', aliases: ['hostendpoint', 'hostendpoints', 'hep', 'heps'] },
  {
    kind: 'KubeControllersConfiguration',
    aliases: [
      'kubecontrollersconfiguration',
      'kubecontrollersconfigurations',
      'kubecontrollerconfiguration',
      'kcc',
      'kccs',
    ],
  },
  { kind: 'AgentConfiguration', aliases: ['agentconfiguration', 'agentconfigurations', 'agentconfig', 'agentconfigs'] },
  { kind: 'Profile', aliases: ['profile', 'profiles', 'pro', 'pros'] },
  {
    kind: 'NetworkPolicy',
    aliases: ['networkpolicy', 'networkpolicies', 'netpol', 'netpols', 'np', 'policy', 'policies'],
  },
  { kind: 'GlobalNetworkPolicy', aliases: ['globalnetworkpolicy', 'globalnetworkpolicies', 'gnp', 'gnps'] },
  { kind: 'BGPConfiguration', aliases: ['bgpconfiguration', 'bgpconfigurations', 'bgpconfig', 'bgpconfigs'] },
  { kind: 'BGPPeer', aliases: ['bgppeer', 'bgppeers', 'bgpp'] },
  { kind: 'StagedNetworkPolicy', aliases: ['stagednetworkpolicy', 'stagednetworkpolicies', 'snp', 'snps'] },
  {
    kind: 'StagedGlobalNetworkPolicy',
    aliases: ['stagedglobalnetworkpolicy', 'stagedglobalnetworkpolicies', 'sgnp', 'sgnps'],
  },
  {
    kind: 'StagedKubernetesNetworkPolicy',
    aliases: ['stagedkubernetesnetworkpolicy', 'stagedkubernetesnetworkpolicies', 'sknp', 'sknps'],
  },
  { kind: 'WorkloadEndpoint', aliases: ['workloadendpoint', 'workloadendpoints', 'wep', 'weps'], readOnly: true },
];

const BY_ALIAS = new Map<string, KindInfo>();
for (const k of CTL_KINDS) {
  BY_ALIAS.set(k.kind.toLowerCase(), k);
  for (const a of k.aliases) BY_ALIAS.set(a, k);
}

function known(): string {
  return CTL_KINDS.map((k) => k.kind).join(', ');
}

/** Case-insensitive; singular, plural, short name, optionally `.netplugin.org` qualified. */
export function resolveKind(input: string): KindInfo {
  const key = input.toLowerCase().replace(/\.netplugin\.org$/, '');
  const k = BY_ALIAS.get(key);
  if (!k)
    throw new CtlError(
      `unknown resource kind ${JSON.stringify(input)}${suggestFlag(key, [...BY_ALIAS.keys()]) || ';'} known kinds: ` +
        `${known()}`,
    );
  return k;
}

/** Kind name exactly as in a manifest's `kind:` (also case-insensitive). */
export function manifestKind(input: unknown, where: string): KindInfo {
  if (typeof input !== 'string' || !input)
    throw new CtlError(`${where}: field "kind" is missing; set it to one of ${known()}`);
  return resolveKind(input);
}
