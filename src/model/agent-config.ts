// The AgentConfiguration resources: `default` for the cluster and
// `node.<name>` for one node, whose fields replace the default's one by one.
// The node agent reads the merged settings live (host endpoint failsafe ports,
// what pods may send to their own node); docs/policy.md lists the fields.
import type { AgentConfigurationSpec, HostPortSpec } from './resources.js';
import type { FieldProblem } from './bgp.js';
import { containsIP, parseCidr, tryParseIP } from '../net/cidr.js';

const AGENT_CONFIG_DEFAULT = 'default';
const AGENT_CONFIG_NODE_PREFIX = 'node.';

export type EndpointToHostAction = 'Drop' | 'Return' | 'Accept';

/**
 * Ports a host endpoint never closes, so policy cannot lock an operator out
 * of a node: SSH, DHCP, BGP, etcd, Typha-style agents, the API server (the
 * well-known Calico defaults).
 */
export const DEFAULT_FAILSAFE_INBOUND: readonly HostPortSpec[] = [
  { protocol: 'TCP', port: 22 },
  { protocol: 'UDP', port: 68 },
  ...failsafeBothWays(),
];

export const DEFAULT_FAILSAFE_OUTBOUND: readonly HostPortSpec[] = [
  { protocol: 'UDP', port: 53 },
  { protocol: 'UDP', port: 67 },
  ...failsafeBothWays(),
];

/** The TCP ports open both ways: BGP, etcd (client and peer), Typha-style agents, the API server. */
function failsafeBothWays(): HostPortSpec[] {
  return [179, 2379, 2380, 5473, 6443, 6666, 6667].map((port) => ({ protocol: 'TCP', port }));
}

const DEFAULT_FLOW_LOGS_FLUSH_INTERVAL = '15s';

/** The settings one node's agent works with. */
export interface AgentSettings {
  failsafeInbound: HostPortSpec[];
  failsafeOutbound: HostPortSpec[];
  endpointToHost: EndpointToHostAction;
  flowLogsAggregator?: string;
  flowLogsFlushInterval: string;
}

/** The node a `node.<name>` configuration applies to, undefined for `default`; an error message for other names. */
function agentConfigurationNode(name: string): { node?: string } | { error: string } {
  if (name === AGENT_CONFIG_DEFAULT) return {};
  if (name.startsWith(AGENT_CONFIG_NODE_PREFIX) && name.length > AGENT_CONFIG_NODE_PREFIX.length) {
    return { node: name.slice(AGENT_CONFIG_NODE_PREFIX.length) };
  }
  return { error: `AgentConfiguration name ${JSON.stringify(name)} is invalid: use "default" or "node.<node name>"` };
}

export function agentConfigurationNameProblems(name: string): FieldProblem[] {
  const n = agentConfigurationNode(name);
  return 'error' in n ? [{ path: 'metadata.name', message: n.error }] : [];
}

/** The settings of node `node`: its `node.<name>` fields over the `default` ones over the built-in defaults. */
export function agentSettings(
  node: string,
  configs: ReadonlyArray<{ metadata: { name: string }; spec: AgentConfigurationSpec }>,
): AgentSettings {
  const dflt = configs.find((c) => c.metadata.name === AGENT_CONFIG_DEFAULT)?.spec ?? {};
  const own = configs.find((c) => c.metadata.name === `${AGENT_CONFIG_NODE_PREFIX}${node}`)?.spec ?? {};
  const pick = <K extends keyof AgentConfigurationSpec>(k: K): AgentConfigurationSpec[K] => own[k] ?? dflt[k];
  const aggregator = pick('flowLogsAggregator');
  return {
    failsafeInbound: [...(pick('failsafeInboundHostPorts') ?? DEFAULT_FAILSAFE_INBOUND)],
    failsafeOutbound: [...(pick('failsafeOutboundHostPorts') ?? DEFAULT_FAILSAFE_OUTBOUND)],
    endpointToHost: pick('defaultEndpointToHostAction') ?? 'Accept',
    ...(aggregator ? { flowLogsAggregator: aggregator } : {}),
    flowLogsFlushInterval: pick('flowLogsFlushInterval') ?? DEFAULT_FLOW_LOGS_FLUSH_INTERVAL,
  };
}

/** The failsafe entry of `ports` that opens a connection with `peer` on `port` (the net, when set, holds the peer). */
export function failsafeFor(
  ports: readonly HostPortSpec[],
  protocol: string,
  port: number | undefined,
  peer: string,
): HostPortSpec | undefined {
  if (port === undefined) return undefined;
  const ip = tryParseIP(peer);
  return ports.find((p) => {
    if (p.protocol !== protocol.toUpperCase() || p.port !== port) return false;
    if (!p.net) return true;
    try {
      const c = parseCidr(p.net, { strict: false });
      return !!ip && c.family === ip.family && containsIP(c, ip);
    } catch {
      return false;
    }
  });
}
