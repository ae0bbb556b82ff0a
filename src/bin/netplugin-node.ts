// netplugin-node: the per-node agent. Flags in, then one composition root: the agent's named parts
// (src/agent/parts/), each with its inputs, listed in the order they start; they stop in the reverse
// one (src/agent/part.ts). Serving the CNI socket comes first among the node's work: node init, the
// pod network and policy run beside it and retry in the background.
import { dirname } from 'node:path';
import { DEFAULT_HEALTH_ADDR } from '../agent/health.js';
import { createAgentMetrics } from '../agent/metrics.js';
import { agentOptions, AgentFlagError, type AgentOptions } from '../agent/options.js';
import { AgentParts, type PartStartError, type AgentPart } from '../agent/part.js';
import { CniServerPart } from '../agent/parts/cni-server.js';
import { DataplanePart } from '../agent/parts/dataplane.js';
import { DatastoresPart } from '../agent/parts/datastores.js';
import { KubeAccessPart, PluginKubeconfigPart } from '../agent/parts/kube-access.js';
import { ListenerPart } from '../agent/parts/listeners.js';
import { NodeInitPart } from '../agent/parts/node-init.js';
import { NodeNetworkPart } from '../agent/parts/node-network.js';
import { NodenameFilePart } from '../agent/parts/nodename-file.js';
import { PolicyPart } from '../agent/parts/policy.js';
import { DEFAULT_SOCKET } from '../agent/protocol.js';
import { DEFAULT_PLUGIN_SERVICE_ACCOUNT, DEFAULT_TOKEN_SECONDS } from '../agent/kubeconfig-writer.js';
import { NETPLUGIN_VERSION } from '../ctl/version.js';
import { observeInvalidObjects } from '../datastore/invalid.js';
import { LogThrottle } from '../log/index.js';
import type { Logger } from '../log/types.js';
import { registerLogThrottleMetrics, registerProcessMetrics } from '../observe/process-metrics.js';
import { checkListenFlags, entryLogger, parseEntryFlags, stringFlags, usageError } from './common/cli.js';

const USAGE = `usage: netplugin-node [--socket PATH] [--config FILE] [--nodename NAME] [--ipv6-forwarding auto|on|off]
                     [--log-level ERROR|WARNING|INFO|DEBUG] [--log-format text|json] [--health-addr HOST:PORT]
                     [--metrics-addr HOST:PORT]
                     [--plugin-kubeconfig PATH [--plugin-service-account NAME] [--plugin-token-seconds N]
                      [--kubeconfig PATH]] [--max-concurrent N] [--version]

  --socket PATH        CNI socket the shim connects to (default: $NETPLUGIN_AGENT_SOCKET or ${DEFAULT_SOCKET})
  --config FILE        the node's CNI config (e.g. /etc/cni/net.d/10-netplugin.conflist): at start, open
                       its datastore (kept warm for requests), initialise ClusterInformation, and turn on
                       IPv6 forwarding when IPv6 is in use. Without it the datastore connection is still
                       warmed at start when the first config of --cni-conf-dir is netplugin's
  --cni-conf-dir DIR   where to look for that config without --config (default /etc/cni/net.d)
  --nodename NAME      the name this node registered with; written to the netconf's nodename_file
                       (default /var/lib/netplugin/nodename) so plugins without a netconf nodename agree
  --ipv6-forwarding M  auto (default: on when the config assigns IPv6 or an enabled IPv6 IPPool exists),
                       on, or off (never touch net.ipv6.conf.all.forwarding)
  --node-ip ADDR[/P]   this node's IPv4 address (default: autodetected; 'none': no IPv4)
  --node-ipv6 ADDR[/P] this node's IPv6 address ('autodetect' to detect it; default none)
  --ip-autodetection M first-found (default), interface=REGEX, can-reach=ADDR or cidr=CIDR[,CIDR]
  --mtu-file PATH      where the pod MTU is written (default: the config's mtu_file, /var/lib/netplugin/mtu)
  --no-routes          do not register the node nor program routes/NAT (the CNI server only)
                       Routes, tunnels and NAT need --config (the datastore) and a node name.
  --bgp on|off         run BIRD and exchange pod routes over BGP (default off): BGPConfiguration and
                       BGPPeer resources; pools with vxlanMode Never are routed by BIRD (docs/bgp.md)
  --bird-path PATH     the bird binary (default /usr/sbin/bird; birdc is taken from the same directory)
  --bird-run-dir DIR   BIRD's configuration, password files and control socket (default
                       /var/run/netplugin/bird; netpluginctl node status reads the socket there)
  --log-level L        default INFO
  --log-format F       text (default) or json (one object per line, for log collectors)
  --health-addr A      serve /healthz (alive), /readyz (socket served; with --config: datastore
                       initialised and answering) and /metrics (Prometheus) on A (default
                       ${DEFAULT_HEALTH_ADDR}; "off" disables)
  --metrics-addr A     also serve /metrics, and only /metrics, on A for Prometheus (e.g. :9091, every
                       address; default: none, /metrics only on --health-addr)
  --plugin-kubeconfig P  write the CNI plugin's kubeconfig to P (mode 0600; e.g.
                       /etc/cni/net.d/netplugin-kubeconfig) with a token for --plugin-service-account
                       from the TokenRequest API, rewritten when a third of its lifetime is left
  --plugin-service-account NAME  default ${DEFAULT_PLUGIN_SERVICE_ACCOUNT}, in the agent's own namespace
  --plugin-token-seconds N  requested token lifetime (default ${DEFAULT_TOKEN_SECONDS}; the API server may cap it)
  --kubeconfig PATH    the agent's own API access for the TokenRequest and pod Events (default: the
                       in-cluster service account, when the agent runs in a pod)
  --pod-events on|off  record a Kubernetes Event on a pod whose ADD failed for a reason its owner can
                       fix (no address left, invalid annotation or config); throttled (default on;
                       needs API access)
  --flow-aggregator https://HOST:PORT  send flow logs (the verdict of every connection, from the
                       kernel: docs/flows.md) to the aggregator netplugin-flows; needs --config with
                       policy.type k8s and the three --flow-tls-* files. Without it, the
                       AgentConfiguration's flowLogsAggregator names the aggregator (live)
  --flow-tls-cert F    the agent's client certificate (PEM) for the aggregator
  --flow-tls-key F     its key (PEM)
  --flow-tls-ca F      the CA that signed the aggregator's certificate (PEM)
  --flow-flush-interval D  flow records are aggregated and sent every D (default: the
                       AgentConfiguration's flowLogsFlushInterval, else 15s; e.g. 5s, 1m)
  --version            print the version and exit
  --max-concurrent N   CNI requests run at once per plugin (default 64)

Start it as dist/netplugin-node.cjs (the package's bin): that entry sets UV_THREADPOOL_SIZE=16
(libuv's threadpool: nftables, direct veth deletions) unless it is set, which an ES module entry
cannot do for itself.
`;

const CLI = { program: 'netplugin-node', usage: USAGE };
const FLAGS = {
  ...stringFlags('socket', 'config', 'cni-conf-dir', 'nodename', 'ipv6-forwarding', 'max-concurrent', 'kubeconfig'),
  ...stringFlags('log-level', 'log-format', 'health-addr', 'metrics-addr', 'pod-events'),
  ...stringFlags('plugin-kubeconfig', 'plugin-service-account', 'plugin-token-seconds'),
  ...stringFlags('node-ip', 'node-ipv6', 'ip-autodetection', 'mtu-file', 'bgp', 'bird-path', 'bird-run-dir'),
  ...stringFlags('flow-aggregator', 'flow-tls-cert', 'flow-tls-key', 'flow-tls-ca', 'flow-flush-interval'),
  'no-routes': { type: 'boolean' },
} as const;

function checkedOptions(values: Parameters<typeof agentOptions>[0]): AgentOptions {
  try {
    return agentOptions(values, process.env);
  } catch (e) {
    if (!(e instanceof AgentFlagError)) throw e;
    return usageError(CLI, e.message);
  }
}

function agentMetrics(log: Logger, throttle: LogThrottle): ReturnType<typeof createAgentMetrics> {
  const metrics = createAgentMetrics();
  // Malformed objects the datastores skip: one warning each, and their count on /metrics.
  observeInvalidObjects(metrics.registry, log);
  registerProcessMetrics(metrics.registry, { component: CLI.program, version: NETPLUGIN_VERSION });
  registerLogThrottleMetrics(metrics.registry, throttle);
  return metrics;
}

async function main(): Promise<void> {
  const values = await parseEntryFlags(CLI, () => NETPLUGIN_VERSION, FLAGS);
  if (!values) return;
  const healthAddr = values['health-addr'] ?? DEFAULT_HEALTH_ADDR;
  checkListenFlags(CLI, { 'health-addr': healthAddr, 'metrics-addr': values['metrics-addr'] }, true);
  const o = checkedOptions(values);
  // A failure that repeats (a watch that keeps breaking, a bad netconf the runtime keeps sending) is
  // logged once a minute with a count, by the agent and by the requests it serves.
  const throttle = new LogThrottle();
  const log = entryLogger(CLI, values, throttle);
  const metrics = agentMetrics(log, throttle);

  const exit = (code: number) => (e: Error) => (log.error(e.message), process.exit(code));
  const dataplane = new DataplanePart({ log, stateDir: dirname(o.socketPath) });
  const datastores = new DatastoresPart({ log, metrics });
  const inCluster = !!process.env['KUBERNETES_SERVICE_HOST'];
  const api = new KubeAccessPart({ log, ...o, inCluster });
  const policy = o.config ? new PolicyPart({ log, ...o, configPath: o.config, datastores, metrics }) : undefined;
  const cni = new CniServerPart({
    log,
    throttle,
    ...o,
    datastores,
    dataplane: () => dataplane.dataplane,
    ipamObserver: metrics.ipamObserver,
    policySignal: () => policy?.signal(),
    onServed: (r) => (metrics.served(r), api.podEvents?.served(r)),
    serving: () => !parts.stopped,
  });
  const nodeInit = new NodeInitPart({ log, datastores, ...o, configPath: o.config, onUnusableConfig: exit(2) });
  const net = o.config && o.network ? { configPath: o.config, network: o.network } : undefined;
  const parts: AgentParts = new AgentParts(
    [
      dataplane,
      datastores,
      ...(o.nodename ? [new NodenameFilePart({ nodename: o.nodename, configPath: o.config })] : []),
      api,
      ...(o.pluginKubeconfig ? [new PluginKubeconfigPart({ log, api, ...o.pluginKubeconfig })] : []),
      cni,
      nodeInit,
      ...(net ? [new NodeNetworkPart({ log, ...o, ...net, datastores, nodeInit, api, metrics })] : []),
      ...(policy ? [policy] : []),
      ...(healthAddr !== 'off' ? [listener(healthAddr, () => parts.health())] : []),
      ...(values['metrics-addr'] !== undefined ? [listener(values['metrics-addr'])] : []),
    ] satisfies AgentPart[],
    log,
  );
  function listener(addr: string, ready?: () => ReturnType<AgentParts['health']>): ListenerPart {
    return new ListenerPart({ log, addr, registry: metrics.registry, ...(ready ? { ready } : {}) });
  }
  await parts.start().catch((e: PartStartError) => exit(e.exitCode)(e));
  const stop = (signal: string) => {
    if (parts.stopped) {
      log.warn(`second ${signal}: exiting without waiting for running requests`);
      process.exit(1);
    }
    log.info(`${signal}: shutting down`);
    parts.stop().then(() => process.exit(0), exit(1));
  };
  process.on('SIGTERM', () => stop('SIGTERM'));
  process.on('SIGINT', () => stop('SIGINT'));
}

main().catch((e: Error) => {
  process.stderr.write(`netplugin-node: ${e.stack ?? e.message}\n`);
  process.exit(1);
});
