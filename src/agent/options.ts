// The agent's flags, checked and typed before any part starts: a bad flag stops the agent with the
// usage (exit 2), never after it began serving.
import { parseAutodetect, type AutodetectMethod } from './node-registration.js';
import { aggregatorUrlProblem, parseFlushInterval, type FlowLogFlags } from './flows/index.js';
import { DEFAULT_PLUGIN_SERVICE_ACCOUNT, DEFAULT_TOKEN_SECONDS } from './kubeconfig-writer.js';
import { DEFAULT_SOCKET } from './protocol.js';
import { checkRunDir } from './bgp/render.js';
import { DEFAULT_BIRD_PATH, DEFAULT_BIRD_RUN_DIR } from '../model/bgp.js';

/** A flag the agent cannot run with; the message names the flag, the value and the fix. */
export class AgentFlagError extends Error {}

export type Ipv6ForwardingMode = 'auto' | 'on' | 'off';

export interface AgentOptions {
  socketPath: string;
  /** The node's CNI config (--config). */
  config?: string;
  cniConfDir?: string;
  nodename?: string;
  ipv6Forwarding: Ipv6ForwardingMode;
  maxConcurrent: number;
  /** --kubeconfig: the agent's own API access (else the in-cluster service account, in a pod). */
  kubeconfig?: string;
  pluginKubeconfig?: { path: string; serviceAccount: string; tokenSeconds: number };
  podEvents: boolean;
  /** Node registration, routes, NAT: with --config and without --no-routes. */
  network?: {
    nodeIP?: string;
    nodeIPv6?: string;
    autodetect: AutodetectMethod;
    mtuFile?: string;
  };
  bgp?: { birdPath: string; runDir: string };
  flows?: FlowLogFlags;
}

/** The agent's flags as node:util parseArgs returns them. */
type AgentFlags = Partial<Record<string, string | boolean>>;

const fail = (msg: string): never => {
  throw new AgentFlagError(msg);
};

const str = (v: AgentFlags, k: string): string | undefined => (typeof v[k] === 'string' ? (v[k] as string) : undefined);

function oneOf<T extends string>(v: AgentFlags, flag: string, allowed: readonly T[], dflt: T): T {
  const s = str(v, flag) ?? dflt;
  if (!(allowed as readonly string[]).includes(s)) fail(`--${flag} '${s}' is not one of ${allowed.join(', ')}`);
  return s as T;
}

/** Checks every flag of the agent that is not the logging or listener flags every entry has. */
export function agentOptions(v: AgentFlags, env: NodeJS.ProcessEnv): AgentOptions {
  const config = str(v, 'config');
  const noRoutes = v['no-routes'] === true;
  const maxConcurrent = Number(str(v, 'max-concurrent') ?? 64);
  if (!Number.isInteger(maxConcurrent) || maxConcurrent < 1)
    fail(`--max-concurrent '${str(v, 'max-concurrent')}' is not a positive integer`);
  const bgp = oneOf(v, 'bgp', ['on', 'off'], 'off');
  if (bgp === 'on' && (!config || noRoutes))
    fail('--bgp on needs --config (the datastore) and routes (no --no-routes)');
  const ipv6Forwarding = oneOf(v, 'ipv6-forwarding', ['auto', 'on', 'off'], 'auto');
  if (str(v, 'ipv6-forwarding') !== undefined && !config && ipv6Forwarding === 'auto')
    fail('--ipv6-forwarding auto needs --config (it decides from the CNI config)');
  const nodename = str(v, 'nodename');
  if (nodename !== undefined && !/^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$/.test(nodename)) {
    fail(
      `--nodename '${nodename}' is not a valid node name (lower-case letters, digits, '-' and '.', as ` +
        `Kubernetes node names)`,
    );
  }
  const podEvents = oneOf(v, 'pod-events', ['on', 'off'], 'on') === 'on';
  const o: AgentOptions = {
    socketPath: str(v, 'socket') ?? (env['NETPLUGIN_AGENT_SOCKET'] || DEFAULT_SOCKET),
    ipv6Forwarding,
    maxConcurrent,
    podEvents,
  };
  const copy = { config, 'cni-conf-dir': str(v, 'cni-conf-dir'), nodename, kubeconfig: str(v, 'kubeconfig') };
  if (copy.config !== undefined) o.config = copy.config;
  if (copy['cni-conf-dir'] !== undefined) o.cniConfDir = copy['cni-conf-dir'];
  if (copy.nodename !== undefined) o.nodename = copy.nodename;
  if (copy.kubeconfig !== undefined) o.kubeconfig = copy.kubeconfig;
  const pluginKubeconfig = pluginKubeconfigFlags(v);
  if (pluginKubeconfig) o.pluginKubeconfig = pluginKubeconfig;
  if (config && !noRoutes) o.network = networkFlags(v);
  if (bgp === 'on') o.bgp = bgpFlags(v);
  const flows = flowFlags(v);
  if (flows) o.flows = flows;
  return o;
}

function pluginKubeconfigFlags(v: AgentFlags): AgentOptions['pluginKubeconfig'] {
  const seconds = str(v, 'plugin-token-seconds');
  const tokenSeconds = Number(seconds ?? DEFAULT_TOKEN_SECONDS);
  if (!Number.isInteger(tokenSeconds) || tokenSeconds < 600)
    fail(`--plugin-token-seconds '${seconds}' is not an integer of at least 600 (the TokenRequest minimum)`);
  const path = str(v, 'plugin-kubeconfig');
  if (path === undefined) return undefined;
  if (!path.startsWith('/')) fail(`--plugin-kubeconfig '${path}' must be an absolute path`);
  return { path, serviceAccount: str(v, 'plugin-service-account') ?? DEFAULT_PLUGIN_SERVICE_ACCOUNT, tokenSeconds };
}

function networkFlags(v: AgentFlags): NonNullable<AgentOptions['network']> {
  let autodetect: AutodetectMethod;
  try {
    autodetect = parseAutodetect(str(v, 'ip-autodetection') ?? 'first-found');
  } catch (e) {
    return fail((e as Error).message);
  }
  const n: NonNullable<AgentOptions['network']> = { autodetect };
  const [ip, ip6, mtu] = [str(v, 'node-ip'), str(v, 'node-ipv6'), str(v, 'mtu-file')];
  if (ip !== undefined) n.nodeIP = ip;
  if (ip6 !== undefined) n.nodeIPv6 = ip6;
  if (mtu !== undefined) n.mtuFile = mtu;
  return n;
}

function bgpFlags(v: AgentFlags): NonNullable<AgentOptions['bgp']> {
  const runDir = str(v, 'bird-run-dir') ?? DEFAULT_BIRD_RUN_DIR;
  try {
    checkRunDir(runDir);
  } catch (e) {
    fail((e as Error).message);
  }
  return { birdPath: str(v, 'bird-path') ?? DEFAULT_BIRD_PATH, runDir };
}

const FLOW_FLAGS = ['flow-aggregator', 'flow-tls-cert', 'flow-tls-key', 'flow-tls-ca', 'flow-flush-interval'];

/**
 * The --flow-* flags: undefined without any. With the TLS files and without --flow-aggregator, the
 * AgentConfiguration's flowLogsAggregator turns flow logs on.
 */
function flowFlags(v: AgentFlags): FlowLogFlags | undefined {
  const given = FLOW_FLAGS.filter((k) => str(v, k) !== undefined);
  if (!given.length) return undefined;
  const url = str(v, 'flow-aggregator');
  const problem = url === undefined ? undefined : aggregatorUrlProblem(url);
  if (problem) fail(`--flow-aggregator ${problem}`);
  if (!v['config']) fail(`--${given[0]} needs --config (flow logs come from the policy table: policy.type k8s)`);
  const file = (k: string): string =>
    str(v, k) ?? fail(`--${given[0]} needs --${k} FILE (the collector takes mTLS only)`);
  const files = { certFile: file('flow-tls-cert'), keyFile: file('flow-tls-key'), caFile: file('flow-tls-ca') };
  const interval = str(v, 'flow-flush-interval');
  const ms = interval === undefined ? undefined : parseFlushInterval(interval);
  if (interval !== undefined && ms === undefined)
    fail(`--flow-flush-interval '${interval}' is not a duration of 100ms to 1h such as 15s, 500ms or 1m`);
  return {
    ...files,
    ...(url !== undefined ? { aggregator: url } : {}),
    ...(ms !== undefined ? { flushIntervalMs: ms } : {}),
  };
}
