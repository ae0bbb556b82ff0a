// netplugin-node: the per-node agent. For now it serves the CNI socket the
// native shim (/opt/cni/bin/netplugin) forwards to, so pod setup runs in a warm
// process instead of a fresh Node per call. Policy enforcement comes later.
import { parseArgs } from 'node:util';
import { parseEntryFlags, usageError as cliUsageError } from './common/cli.js';
import { mkdirSync, renameSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { DEFAULT_NODENAME_FILE } from '../config/fields.js';
import type { PluginSpec } from '../cni/types.js';
import { DEFAULT_SOCKET } from '../agent/protocol.js';
import { startCniServer, type CniServer } from '../agent/server.js';
import { createLogger, LogThrottle, normalizeLevel } from '../log/index.js';
import { createPluginRuntime, type DataplanePort, type PluginRuntime } from '../plugins/main/runtime.js';
import { HOST_MAC } from '../plugins/main/common.js';
import type { WorkloadSpec, TeardownOptions } from '../dataplane/index.js';
import {
  findNetpluginConf,
  readNetpluginConf,
  startNodeInit,
  warmDatastore,
  type NodeInit,
} from '../agent/node-init.js';
import type { Logger } from '../log/types.js';
import { DEFAULT_HEALTH_ADDR, startAgentHealth } from '../agent/health.js';
import { createAgentMetrics } from '../agent/metrics.js';
import { parseListenAddr, startHealthServer, type HealthServer } from '../observe/health.js';
import { cachedDatastore } from '../datastore/cached.js';
import { observeInvalidObjects } from '../datastore/invalid.js';
import { NETPLUGIN_VERSION } from '../ctl/version.js';
import { registerLogThrottleMetrics, registerProcessMetrics } from '../observe/process-metrics.js';
import { LOG_FORMATS, type LogFormat } from '../log/index.js';
import {
  DEFAULT_PLUGIN_SERVICE_ACCOUNT,
  DEFAULT_TOKEN_SECONDS,
  type PluginKubeconfig,
} from '../agent/kubeconfig-writer.js';
import { aggregatorUrlProblem, parseFlushInterval, type FlowLogFlags } from '../agent/flows/index.js';

async function enableIpv6Forwarding(log: Logger): Promise<void> {
  try {
    const { applySysctls } = await import('../dataplane/sysctl.js');
    applySysctls({ 'net.ipv6.conf.all.forwarding': '1' });
    log.info('IPv6 forwarding turned on (net.ipv6.conf.all.forwarding=1)', { why: '--ipv6-forwarding=on' });
  } catch (e) {
    log.error('cannot turn on IPv6 forwarding', { error: (e as Error).message });
  }
}

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

// Handlers load on the first request that needs them, as in the per-exec
// entry; both plugins are served with the agent's runtime.
function agentPlugins(
  runtime: PluginRuntime,
  logThrottle: LogThrottle,
  // biome-ignore lint/suspicious/noExplicitAny: a registry of plugins of different netconf types
): Record<string, PluginSpec<any, PluginRuntime>> {
  return {
    netplugin: {
      name: 'netplugin',
      load: async () => (await import('../plugins/main/index.js')).handlers,
      resident: true,
      runtime,
      logThrottle,
    },
    'netplugin-ipam': {
      name: 'netplugin-ipam',
      load: async () => (await import('../plugins/ipam/index.js')).handlers,
      resident: true,
      runtime,
      logThrottle,
    },
  };
}

const CLI = { program: 'netplugin-node', usage: USAGE };

/**
 * The --flow-* flags, checked: undefined without the TLS files. With them and without
 * --flow-aggregator, the AgentConfiguration's flowLogsAggregator turns flow logs on.
 */
function flowFlags(v: Record<string, string | boolean | undefined>): FlowLogFlags | undefined {
  const s = (k: string) => (typeof v[k] === 'string' ? (v[k] as string) : undefined);
  const url = s('flow-aggregator');
  const flags = ['flow-aggregator', 'flow-tls-cert', 'flow-tls-key', 'flow-tls-ca', 'flow-flush-interval'];
  const given = flags.filter((k) => s(k) !== undefined);
  if (!given.length) return undefined;
  if (url !== undefined) {
    const problem = aggregatorUrlProblem(url);
    if (problem) usageError(`--flow-aggregator ${problem}`);
  }
  if (!v.config) usageError(`--${given[0]} needs --config (flow logs come from the policy table: policy.type k8s)`);
  const files = { certFile: s('flow-tls-cert'), keyFile: s('flow-tls-key'), caFile: s('flow-tls-ca') };
  for (const [k, f] of [
    ['flow-tls-cert', files.certFile],
    ['flow-tls-key', files.keyFile],
    ['flow-tls-ca', files.caFile],
  ] as const) {
    if (!f) usageError(`--${given[0]} needs --${k} FILE (the collector takes mTLS only)`);
  }
  const interval = s('flow-flush-interval');
  const ms = interval === undefined ? undefined : parseFlushInterval(interval);
  if (interval !== undefined && ms === undefined) {
    usageError(`--flow-flush-interval '${interval}' is not a duration of 100ms to 1h such as 15s, 500ms or 1m`);
  }
  return {
    certFile: files.certFile!,
    keyFile: files.keyFile!,
    caFile: files.caFile!,
    ...(url !== undefined ? { aggregator: url } : {}),
    ...(ms !== undefined ? { flushIntervalMs: ms } : {}),
  };
}
function usageError(msg: string): never {
  return cliUsageError(CLI, msg);
}

async function main(): Promise<void> {
  let values: {
    socket?: string;
    config?: string;
    nodename?: string;
    'ipv6-forwarding'?: string;
    'log-level'?: string;
    'log-format'?: string;
    'health-addr'?: string;
    'metrics-addr'?: string;
    'plugin-kubeconfig'?: string;
    'plugin-service-account'?: string;
    'plugin-token-seconds'?: string;
    kubeconfig?: string;
    'pod-events'?: string;
    'max-concurrent'?: string;
    'node-ip'?: string;
    'node-ipv6'?: string;
    'ip-autodetection'?: string;
    'mtu-file'?: string;
    'cni-conf-dir'?: string;
    'no-routes'?: boolean;
    bgp?: string;
    'bird-path'?: string;
    'bird-run-dir'?: string;
    'flow-aggregator'?: string;
    'flow-tls-cert'?: string;
    'flow-tls-key'?: string;
    'flow-tls-ca'?: string;
    'flow-flush-interval'?: string;
    help?: boolean;
    version?: boolean;
  };
  const parsed = await parseEntryFlags(
    CLI,
    () => NETPLUGIN_VERSION,
    () =>
      parseArgs({
        options: {
          socket: { type: 'string' },
          config: { type: 'string' },
          nodename: { type: 'string' },
          'ipv6-forwarding': { type: 'string' },
          'log-level': { type: 'string' },
          'log-format': { type: 'string' },
          'health-addr': { type: 'string' },
          'metrics-addr': { type: 'string' },
          'plugin-kubeconfig': { type: 'string' },
          'plugin-service-account': { type: 'string' },
          'plugin-token-seconds': { type: 'string' },
          kubeconfig: { type: 'string' },
          'pod-events': { type: 'string' },
          version: { type: 'boolean' },
          'max-concurrent': { type: 'string' },
          'node-ip': { type: 'string' },
          'node-ipv6': { type: 'string' },
          'ip-autodetection': { type: 'string' },
          'mtu-file': { type: 'string' },
          'cni-conf-dir': { type: 'string' },
          'no-routes': { type: 'boolean' },
          bgp: { type: 'string' },
          'bird-path': { type: 'string' },
          'bird-run-dir': { type: 'string' },
          'flow-aggregator': { type: 'string' },
          'flow-tls-cert': { type: 'string' },
          'flow-tls-key': { type: 'string' },
          'flow-tls-ca': { type: 'string' },
          'flow-flush-interval': { type: 'string' },
          help: { type: 'boolean', short: 'h' },
        },
        allowPositionals: false,
      }).values,
  );
  if (!parsed) return;
  values = parsed;
  const format = values['log-format'] ?? 'text';
  if (!(LOG_FORMATS as readonly string[]).includes(format))
    usageError(`--log-format '${format}' is not one of ${LOG_FORMATS.join(', ')}`);
  const healthAddr = values['health-addr'] ?? DEFAULT_HEALTH_ADDR;
  if (healthAddr !== 'off') {
    try {
      parseListenAddr(healthAddr);
    } catch (e) {
      usageError(`--health-addr: ${(e as Error).message}`);
    }
  }
  const metricsAddr = values['metrics-addr'];
  if (metricsAddr !== undefined) {
    try {
      parseListenAddr(metricsAddr);
    } catch (e) {
      usageError(`--metrics-addr: ${(e as Error).message}`);
    }
  }
  const level = values['log-level'] ?? 'INFO';
  if (!normalizeLevel(level)) usageError(`--log-level '${level}' is not one of ERROR, WARNING, INFO, DEBUG`);
  let maxConcurrent = 64;
  if (values['max-concurrent'] !== undefined) {
    maxConcurrent = Number(values['max-concurrent']);
    if (!Number.isInteger(maxConcurrent) || maxConcurrent < 1) {
      usageError(`--max-concurrent '${values['max-concurrent']}' is not a positive integer`);
    }
  }
  // Checked before the CNI server starts, as every other flag.
  const bgpFlag = values.bgp ?? 'off';
  if (bgpFlag !== 'on' && bgpFlag !== 'off') usageError(`--bgp '${bgpFlag}' is not on or off`);
  if (bgpFlag === 'on' && (!values.config || values['no-routes']))
    usageError('--bgp on needs --config (the datastore) and routes (no --no-routes)');
  const v6 = values['ipv6-forwarding'] ?? 'auto';
  if (v6 !== 'auto' && v6 !== 'on' && v6 !== 'off') usageError(`--ipv6-forwarding '${v6}' is not one of auto, on, off`);
  if (values['ipv6-forwarding'] !== undefined && !values.config && v6 === 'auto')
    usageError('--ipv6-forwarding auto needs --config (it decides from the CNI config)');
  const flows = flowFlags(values);
  const socketPath = values.socket ?? (process.env['NETPLUGIN_AGENT_SOCKET'] || DEFAULT_SOCKET);
  // A failure that repeats (a watch that keeps breaking, a bad netconf the runtime keeps sending) is
  // logged once a minute with a count, by the agent and by the requests it serves.
  const throttle = new LogThrottle();
  const log = createLogger({
    level,
    format: format as LogFormat,
    stderr: (s) => process.stderr.write(s),
    context: { component: 'netplugin-node' },
    throttle,
  });

  // The agent's runtime, built before anything opens a datastore or serves a
  // request: every datastore is timed by the metrics, pods are read through
  // watch-fed caches, concurrent IPAM assignments are batched, and ADD's
  // policy wait listens to the policy controller once it runs.
  const metrics = createAgentMetrics();
  // Malformed objects the datastores skip: one warning each, and their count on /metrics.
  observeInvalidObjects(metrics.registry, log);
  registerProcessMetrics(metrics.registry, { component: 'netplugin-node', version: NETPLUGIN_VERSION });
  registerLogThrottleMetrics(metrics.registry, throttle);
  const dataplane = await installDataplane(log, dirname(socketPath));
  let policy: import('../agent/policy/index.js').PolicyAgent | undefined;
  // The read caches of the datastores the runtime opened (weakly: the runtime
  // closes and drops an idle one).
  const readCaches = new Set<WeakRef<{ suspend?: (ms: number) => void }>>();
  const runtime = createPluginRuntime({
    // IPAM's reads from a watch-fed cache (src/datastore/cached.ts), timed by the metrics outside it.
    wrapDatastore: (ds) => {
      const cached = cachedDatastore(ds, { log });
      if (cached.suspend) readCaches.add(new WeakRef(cached));
      return metrics.wrapDatastore(cached);
    },
    // A per-exec plugin that held the node's IPAM lock since the agent did may have written what the caches have not
    // seen yet.
    ipamLockTakeover: () => {
      for (const r of readCaches) {
        const c = r.deref();
        if (c) c.suspend?.(1_000);
        else readCaches.delete(r);
      }
    },
    ipamObserver: metrics.ipamObserver,
    ipamBatching: true,
    podCache: async (kube, node) =>
      new (await import('../k8s/cache.js')).CachingPodSource(kube, { nodeName: node, log }).start(),
    dataplane: dataplane.port,
    policySignal: () => policy?.signal(),
  });

  if (values.nodename !== undefined) {
    try {
      writeNodename(values.nodename, values.config);
    } catch (e) {
      usageError((e as Error).message);
    }
  }

  const tokenSeconds = Number(values['plugin-token-seconds'] ?? DEFAULT_TOKEN_SECONDS);
  if (!Number.isInteger(tokenSeconds) || tokenSeconds < 600)
    usageError(
      `--plugin-token-seconds '${values['plugin-token-seconds']}' is not an integer of at least 600 (the ` +
        `TokenRequest minimum)`,
    );
  if (values['plugin-kubeconfig'] !== undefined && !values['plugin-kubeconfig'].startsWith('/'))
    usageError(`--plugin-kubeconfig '${values['plugin-kubeconfig']}' must be an absolute path`);
  const podEventsFlag = values['pod-events'] ?? 'on';
  if (podEventsFlag !== 'on' && podEventsFlag !== 'off') usageError(`--pod-events '${podEventsFlag}' is not on or off`);
  // The agent's own API access: --kubeconfig, or in a pod its service account.
  const api =
    values.kubeconfig || process.env['KUBERNETES_SERVICE_HOST']
      ? await agentKubeClient(values.kubeconfig, log)
      : undefined;
  // Before the CNI server: with the kubernetes datastore the plugin needs this file for every ADD.
  let pluginKubeconfig: PluginKubeconfig | undefined;
  if (values['plugin-kubeconfig']) {
    if (!api)
      log.error(
        `cannot write the plugin kubeconfig ${values['plugin-kubeconfig']}: no Kubernetes API access (run in a pod, ` +
          `or pass --kubeconfig)`,
      );
    else
      pluginKubeconfig = await startPluginKubeconfigFromFlags(
        values['plugin-kubeconfig'],
        values['plugin-service-account'] ?? DEFAULT_PLUGIN_SERVICE_ACCOUNT,
        tokenSeconds,
        api,
        log,
      );
  }
  let podEvents: import('../agent/pod-events.js').PodEvents | undefined;
  if (api && podEventsFlag === 'on') {
    const { createPodEvents } = await import('../agent/pod-events.js');
    const { hostname } = await import('node:os');
    podEvents = createPodEvents({ client: api, node: values.nodename ?? hostname(), log });
  }

  let server: CniServer;
  try {
    server = await startCniServer({
      socketPath,
      plugins: agentPlugins(runtime, throttle),
      log,
      maxConcurrent,
      onServed: (r) => {
        metrics.served(r);
        podEvents?.served(r);
      },
    });
  } catch (e) {
    log.error(`cannot start the CNI server: ${(e as Error).message}`);
    process.exit(1);
  }

  // Node preparation runs beside the server: a datastore that is down at boot
  // must not keep pods on this node from being served (they get code 11 and
  // are retried), so it retries in the background.
  let nodeInit: NodeInit | undefined;
  if (values.config) {
    nodeInit = startNodeInit({ configPath: values.config, log, datastores: runtime, ipv6Forwarding: v6 });
    // Only an unusable --config ends up here (the datastore step retries).
    nodeInit.done.catch((e: Error) => {
      log.error(e.message);
      process.exit(2);
    });
  } else {
    if (v6 === 'on') await enableIpv6Forwarding(log);
    const found = findNetpluginConf(values['cni-conf-dir']);
    if (found) void warmDatastore(found, runtime, log);
  }
  let bgp: import('../agent/bgp/index.js').BgpController | undefined;
  let bgpOpts: import('../agent/node-network.js').NodeNetworkOptions['bgp'];
  if (bgpFlag === 'on') {
    const { checkRunDir } = await import('../agent/bgp/render.js');
    const { DEFAULT_BIRD_PATH, DEFAULT_BIRD_RUN_DIR } = await import('../agent/bgp/supervisor.js');
    const runDir = values['bird-run-dir'] ?? DEFAULT_BIRD_RUN_DIR;
    try {
      checkRunDir(runDir);
    } catch (e) {
      usageError((e as Error).message);
    }
    bgpOpts = { birdPath: values['bird-path'] ?? DEFAULT_BIRD_PATH, runDir, onStarted: (c) => (bgp = c) };
    // BGPPeer password.secretKeyRef: the Secret in the agent's own namespace, read with its own identity.
    if (api) {
      const { readSecretKey } = await import('../agent/bgp/index.js');
      const { ownNamespace } = await import('../k8s/client.js');
      const namespace = ownNamespace();
      bgpOpts.readSecret = (name, key) => readSecretKey(api, namespace, name, key);
    }
    const reg = metrics.registry;
    const running = reg.gauge(
      'netplugin_bgp_bird_running',
      'Whether the BIRD daemon the agent supervises runs (1) or not (0).',
    );
    const established = reg.gauge(
      'netplugin_bgp_sessions_established',
      'BGP sessions of this node in state Established.',
    );
    const sessions = reg.gauge('netplugin_bgp_sessions', 'BGP sessions BIRD has configured for this node.');
    const restarts = reg.gauge('netplugin_bgp_bird_restarts', 'Times the agent restarted BIRD after it exited.');
    reg.onCollect(() => {
      const st = bgp?.status();
      running.set(undefined, st?.running ? 1 : 0);
      established.set(undefined, st?.established ?? 0);
      sessions.set(undefined, st?.sessions.length ?? 0);
      restarts.set(undefined, st?.restarts ?? 0);
    });
  }
  let network: { stop(): Promise<void> } | undefined;
  if (values.config && nodeInit && !values['no-routes']) {
    const { startNodeNetwork } = await import('../agent/node-network.js');
    try {
      network = startNodeNetwork({
        configPath: values.config,
        nodeInit: nodeInit.done,
        log,
        datastores: runtime,
        nodename: values.nodename,
        nodeIP: values['node-ip'],
        nodeIPv6: values['node-ipv6'],
        autodetect: values['ip-autodetection'],
        mtuFile: values['mtu-file'],
        onRoutesApplied: (s) => metrics.routesApplied(s),
        onFloatingRefused: (r) => {
          metrics.floatingRefused(r.kind);
          if (r.namespace && r.pod) podEvents?.warn(r.namespace, r.pod, 'NetpluginFloatingIPRefused', r.message);
        },
        ...(bgpOpts ? { bgp: bgpOpts } : {}),
      });
    } catch (e) {
      usageError((e as Error).message);
    }
  }
  // Network policy (policy.type k8s in the config): nftables from the datastore's policy model.
  if (values.config) {
    try {
      const { startPolicyAgent } = await import('../agent/policy/index.js');
      policy = await startPolicyAgent(readNetpluginConf(values.config), log, runtime, {
        onApplied: (s) => metrics.policyApplied(s),
        onInterfaceConflict: (c) => metrics.policyInterfaceConflict(c.kind),
        onRefused: (r) => metrics.policyRefused(r.stage, r.owner.kind),
        podEvents: podEventsFlag === 'on',
        ...(flows ? { flows } : {}),
      });
    } catch (e) {
      log.error(`policy: ${(e as Error).message}`);
      process.exit(2);
    }
  }

  metrics.watchPolicy(() => policy?.controller());

  let stopping = false;
  let nodeInitialised = false;
  void nodeInit?.done.then(
    () => (nodeInitialised = true),
    () => undefined,
  );
  let health: Awaited<ReturnType<typeof startAgentHealth>> | undefined;
  if (healthAddr !== 'off') {
    const configPath = values.config;
    try {
      health = await startAgentHealth({
        addr: healthAddr,
        registry: metrics.registry,
        socketPath,
        serving: () => !stopping,
        ...(bgpOpts ? { bgp: () => bgp?.status() } : {}),
        ...(configPath
          ? {
              node: {
                initialised: () => nodeInitialised,
                // The connection node init opened and requests reuse (same settings, same cache key).
                datastore: async () => {
                  const { parseNetconf } = await import('../config/index.js');
                  return runtime.datastore(
                    parseNetconf(readNetpluginConf(configPath), { pluginType: 'netplugin', warn: () => undefined }),
                  );
                },
              },
            }
          : {}),
      });
      log.info('serving /healthz, /readyz and /metrics', { addr: `${health.host}:${health.port}` });
    } catch (e) {
      // Pods need the CNI socket more than probes need a port: keep serving,
      // and say why the probes will fail.
      log.error(
        `${(e as Error).message}; serving CNI requests without health and metrics endpoints (pass another ` +
          `--health-addr, or off)`,
      );
    }
  }
  let metricsServer: HealthServer | undefined;
  if (metricsAddr !== undefined) {
    try {
      metricsServer = await startHealthServer({ addr: metricsAddr, registry: metrics.registry, metricsOnly: true });
      log.info('serving /metrics', { addr: `${metricsServer.host}:${metricsServer.port}` });
    } catch (e) {
      log.error(
        `${(e as Error).message}; serving CNI requests without the metrics listener (pass another --metrics-addr)`,
      );
    }
  }
  const stop = (signal: string) => {
    if (stopping) {
      log.warn(`second ${signal}: exiting without waiting for running requests`);
      process.exit(1);
    }
    stopping = true;
    log.info(`${signal}: shutting down`);
    nodeInit?.stop();
    pluginKubeconfig?.stop();
    void health?.close();
    void metricsServer?.close();
    const networkStopped = network?.stop();
    // The nftables table stays: existing pods keep their enforcement, new ones stay isolated.
    void policy?.stop();
    server.close().then(
      async () => {
        // BIRD's graceful-restart shutdown (--bgp on) ends within seconds (BirdSupervisor.stop).
        await networkStopped;
        await dataplane.close();
        await runtime.close();
        process.exit(0);
      },
      (e: Error) => {
        log.error(`shutdown failed: ${e.message}`);
        process.exit(1);
      },
    );
  };
  process.on('SIGTERM', () => stop('SIGTERM'));
  process.on('SIGINT', () => stop('SIGINT'));
}

/**
 * The agent's dataplane: setup and check inline (short syscalls that never
 * sleep), and teardown through the trash group: a DEL moves the host veth
 * into the trash and returns; the trash is deleted in one batch every few ms
 * on the libuv threadpool (the deletion sleeps ~20 ms in the kernel waiting
 * for an RCU grace period), so the loop is never held (docs/performance.md).
 */
async function installDataplane(
  log: Logger,
  stateDir: string,
): Promise<{ port: DataplanePort; close(): Promise<void> }> {
  const dp = await import('../dataplane/index.js');
  const trash = dp.createTrash({ log });
  // A crash's leftovers go now.
  await trash
    .purge(HOST_MAC)
    .catch((e: Error) => log.error('cannot delete the trashed veths left by an earlier agent', { error: e.message }));
  // A DEL's conntrack flush runs off its request path, one dump for every DEL
  // meanwhile; an ADD reusing one of those addresses waits for it (docs/performance.md).
  // Journaled beside the socket (its directory is the agent's, 0700): what a killed agent left is flushed here, before
  // serving.
  mkdirSync(stateDir, { recursive: true, mode: 0o700 });
  const conntrack = dp.createConntrackFlusher({ log, journal: join(stateDir, 'conntrack-pending') });
  const workloads = dp.createWorkloadSetup();
  return {
    port: {
      setup: async (spec: WorkloadSpec) => (await conntrack.settled(spec.addresses), workloads.setup(spec)),
      teardown: (o: TeardownOptions) => trash.teardown(o),
      check: async (spec: WorkloadSpec, expect: { containerMac: string }) => dp.checkWorkload(spec, expect),
      purgeTrash: (hostMac: string) => trash.purge(hostMac),
      flushConntrack: (addrs: string[]) => conntrack.defer(addrs),
    },
    close: () => Promise.all([conntrack.close(), trash.close()]).then(() => workloads.close()),
  };
}

/** The agent's own API access (--kubeconfig, or the in-cluster service account); undefined when unusable. */
async function agentKubeClient(
  kubeconfig: string | undefined,
  log: Logger,
): Promise<import('../k8s/client.js').KubeClient | undefined> {
  try {
    const { createKubeClient } = await import('../k8s/client.js');
    return await createKubeClient(kubeconfig ? { kubeconfig } : {});
  } catch (e) {
    log.error(`no Kubernetes API access for the plugin kubeconfig and pod Events: ${(e as Error).message}`);
    return undefined;
  }
}

/** Writes the plugin kubeconfig with tokens for `serviceAccount`, in the agent's own namespace. */
async function startPluginKubeconfigFromFlags(
  path: string,
  serviceAccount: string,
  seconds: number,
  client: import('../k8s/client.js').KubeClient,
  log: Logger,
): Promise<PluginKubeconfig | undefined> {
  const { SA_DIR } = await import('../k8s/client.js');
  const { startPluginKubeconfig } = await import('../agent/kubeconfig-writer.js');
  const { readFileSync } = await import('node:fs');
  let namespace = 'kube-system';
  try {
    namespace = readFileSync(`${SA_DIR}/namespace`, 'utf8').trim() || namespace;
  } catch {
    // Outside a pod (--kubeconfig): kube-system, where deploy/rbac.yaml puts the account.
  }
  // The CA the agent trusts for this server, so the plugin trusts the same one.
  return startPluginKubeconfig({
    path,
    serviceAccount,
    namespace,
    client,
    ...(client.ca ? { ca: client.ca } : {}),
    expirationSeconds: seconds,
    log,
  });
}

/** The plugin falls back to this file when its netconf has no nodename (src/config/nodename.ts); written atomically. */
function writeNodename(name: string, configPath: string | undefined): void {
  if (!/^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$/.test(name)) {
    throw new Error(
      `--nodename '${name}' is not a valid node name (lower-case letters, digits, '-' and '.', as Kubernetes node ` +
        `names)`,
    );
  }
  const conf = configPath ? readNetpluginConf(configPath) : {};
  const file = typeof conf['nodename_file'] === 'string' ? (conf['nodename_file'] as string) : DEFAULT_NODENAME_FILE;
  mkdirSync(dirname(file), { recursive: true });
  const tmp = `${file}.${process.pid}.tmp`;
  writeFileSync(tmp, name + '\n', { mode: 0o644 });
  renameSync(tmp, file);
}

main().catch((e: Error) => {
  process.stderr.write(`netplugin-node: ${e.stack ?? e.message}\n`);
  process.exit(1);
});
