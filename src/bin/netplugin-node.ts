// netplugin-node: the per-node agent. For now it serves the CNI socket the
// native shim (/opt/cni/bin/netplugin) forwards to, so pod setup runs in a warm
// process instead of a fresh Node per call. Policy enforcement comes later.
import { parseArgs } from 'node:util';
import { mkdirSync, renameSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';
import { DEFAULT_NODENAME_FILE } from '../config/fields.js';
import type { PluginSpec } from '../cni/types.js';
import { DEFAULT_SOCKET } from '../agent/protocol.js';
import { startCniServer, type CniServer } from '../agent/server.js';
import { createLogger, normalizeLevel } from '../log/index.js';
import { createWorkerPool, type WorkerPool } from '../agent/worker-pool.js';
import { enableIpamBatching, setDataplanePort } from '../plugins/main/runtime.js';
import { enablePodCache } from '../plugins/main/common.js';
import type { WorkloadSpec, WorkloadState, TeardownOptions } from '../dataplane/index.js';
import { readNetpluginConf, startNodeInit, type NodeInit } from '../agent/node-init.js';
import type { Logger } from '../cni/types.js';

async function enableIpv6Forwarding(log: Logger): Promise<void> {
  try {
    (await import('../native/index.js')).netlink().sysctlSet('net.ipv6.conf.all.forwarding', '1');
    log.info('IPv6 forwarding turned on (net.ipv6.conf.all.forwarding=1)', { why: '--ipv6-forwarding=on' });
  } catch (e) {
    log.error('cannot turn on IPv6 forwarding', { error: (e as Error).message });
  }
}

const USAGE = `usage: netplugin-node [--socket PATH] [--config FILE] [--nodename NAME] [--ipv6-forwarding auto|on|off]
                     [--log-level ERROR|WARNING|INFO|DEBUG] [--max-concurrent N] [--dataplane-threads N]

  --socket PATH        CNI socket the shim connects to (default: $NETPLUGIN_AGENT_SOCKET or ${DEFAULT_SOCKET})
  --config FILE        the node's CNI config (e.g. /etc/cni/net.d/10-netplugin.conflist): at start, open
                       its datastore (kept warm for requests), initialise ClusterInformation, and turn on
                       IPv6 forwarding when IPv6 is in use
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
  --log-level L        default INFO
  --max-concurrent N   CNI requests run at once per plugin (default 64)
  --dataplane-threads N  0 (default): setup and check run inline on the main thread (~1-2 ms of
                       syscalls that never sleep) and the veth deletion of a teardown (~20 ms asleep in
                       the kernel) on the libuv threadpool, no worker threads; N from 1 to 64: the
                       older mode, all dataplane work in N worker threads (~10 MiB each)

Environment: UV_THREADPOOL_SIZE bounds how many veth deletions run at once in the default mode
(libuv's default is 4; the packaged unit and DaemonSet set 16). It must be set before Node starts:
an ES module entry is read through the threadpool, so setting it from here would be too late.
`;

// Handlers load on the first request that needs them, as in the per-exec entry.
const plugins: Record<string, PluginSpec<any>> = {
  netplugin: {
    name: 'netplugin',
    load: async () => (await import('../plugins/main/index.js')).handlers,
  },
  'netplugin-ipam': {
    name: 'netplugin-ipam',
    load: async () => (await import('../plugins/ipam/index.js')).handlers,
  },
};

function usageError(msg: string): never {
  process.stderr.write(`netplugin-node: ${msg}\n${USAGE}`);
  process.exit(2);
}

async function main(): Promise<void> {
  let values: {
    socket?: string;
    config?: string;
    nodename?: string;
    'ipv6-forwarding'?: string;
    'log-level'?: string;
    'max-concurrent'?: string;
    'dataplane-threads'?: string;
    'node-ip'?: string;
    'node-ipv6'?: string;
    'ip-autodetection'?: string;
    'mtu-file'?: string;
    'no-routes'?: boolean;
    help?: boolean;
  };
  try {
    ({ values } = parseArgs({
      options: {
        socket: { type: 'string' },
        config: { type: 'string' },
        nodename: { type: 'string' },
        'ipv6-forwarding': { type: 'string' },
        'log-level': { type: 'string' },
        'max-concurrent': { type: 'string' },
        'dataplane-threads': { type: 'string' },
        'node-ip': { type: 'string' },
        'node-ipv6': { type: 'string' },
        'ip-autodetection': { type: 'string' },
        'mtu-file': { type: 'string' },
        'no-routes': { type: 'boolean' },
        help: { type: 'boolean', short: 'h' },
      },
      allowPositionals: false,
    }));
  } catch (e) {
    usageError((e as Error).message);
  }
  if (values.help) {
    process.stdout.write(USAGE);
    return;
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
  const v6 = values['ipv6-forwarding'] ?? 'auto';
  if (v6 !== 'auto' && v6 !== 'on' && v6 !== 'off') usageError(`--ipv6-forwarding '${v6}' is not one of auto, on, off`);
  if (values['ipv6-forwarding'] !== undefined && !values.config && v6 === 'auto') usageError('--ipv6-forwarding auto needs --config (it decides from the CNI config)');
  let dataplaneThreads = 0;
  if (values['dataplane-threads'] !== undefined) {
    dataplaneThreads = Number(values['dataplane-threads']);
    if (!Number.isInteger(dataplaneThreads) || dataplaneThreads < 0 || dataplaneThreads > 64) {
      usageError(`--dataplane-threads '${values['dataplane-threads']}' is not an integer from 0 to 64 (0: no worker threads)`);
    }
  }
  const socketPath = values.socket ?? (process.env['NETPLUGIN_AGENT_SOCKET'] || DEFAULT_SOCKET);
  const log = createLogger({ level, stderr: (s) => process.stderr.write(s), context: { component: 'netplugin-node' } });

  const pool = await installDataplane(dataplaneThreads);
  enableIpamBatching();
  enablePodCache(log);

  if (values.nodename !== undefined) {
    try {
      writeNodename(values.nodename, values.config);
    } catch (e) {
      usageError((e as Error).message);
    }
  }

  let server: CniServer;
  try {
    server = await startCniServer({ socketPath, plugins, log, maxConcurrent });
  } catch (e) {
    log.error(`cannot start the CNI server: ${(e as Error).message}`);
    process.exit(1);
  }

  // Node preparation runs beside the server: a datastore that is down at boot
  // must not keep pods on this node from being served (they get code 11 and
  // are retried), so it retries in the background.
  let nodeInit: NodeInit | undefined;
  if (values.config) {
    nodeInit = startNodeInit({ configPath: values.config, log, ipv6Forwarding: v6 });
    // Only an unusable --config ends up here (the datastore step retries).
    nodeInit.done.catch((e: Error) => {
      log.error(e.message);
      process.exit(2);
    });
  } else if (v6 === 'on') {
    await enableIpv6Forwarding(log);
  }
  let network: { stop(): void } | undefined;
  if (values.config && nodeInit && !values['no-routes']) {
    const { startNodeNetwork } = await import('../agent/node-network.js');
    try {
      network = startNodeNetwork({
        configPath: values.config,
        nodeInit: nodeInit.done,
        log,
        nodename: values.nodename,
        nodeIP: values['node-ip'],
        nodeIPv6: values['node-ipv6'],
        autodetect: values['ip-autodetection'],
        mtuFile: values['mtu-file'],
      });
    } catch (e) {
      usageError((e as Error).message);
    }
  }
  // Network policy (policy.type k8s in the config): nftables from the datastore's policy model.
  let policy: import('../agent/policy/index.js').PolicyAgent | undefined;
  if (values.config) {
    try {
      policy = await (await import('../agent/policy/index.js')).startPolicyAgent(readNetpluginConf(values.config), log);
    } catch (e) {
      log.error(`policy: ${(e as Error).message}`);
      process.exit(2);
    }
  }

  let stopping = false;
  const stop = (signal: string) => {
    if (stopping) {
      log.warn(`second ${signal}: exiting without waiting for running requests`);
      process.exit(1);
    }
    stopping = true;
    log.info(`${signal}: shutting down`);
    nodeInit?.stop();
    network?.stop();
    // The nftables table stays: existing pods keep their enforcement, new ones stay isolated.
    void policy?.stop();
    server.close().then(
      async () => {
        await pool?.close();
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
 * 0 threads: setup/check inline (short syscalls that never sleep) and teardown's
 * veth deletion on the libuv threadpool (it sleeps ~20 ms in the kernel waiting for
 * an RCU grace period), so the loop is never held and no isolate is paid for.
 * N threads: everything in a worker pool, whose size bounds DEL throughput.
 */
async function installDataplane(threads: number): Promise<WorkerPool | undefined> {
  if (threads === 0) {
    const dp = await import('../dataplane/index.js');
    setDataplanePort({
      setup: async (spec: WorkloadSpec) => dp.setupWorkload(spec),
      teardown: (o: TeardownOptions) => dp.teardownWorkloadAsync(o),
      check: async (spec: WorkloadSpec, expect: { containerMac: string }) => dp.checkWorkload(spec, expect),
    });
    return undefined;
  }
  const pool = createWorkerPool({ module: new URL('./netplugin-worker.mjs', import.meta.url), size: threads, resourceLimits: { maxYoungGenerationSizeMb: 1, maxOldGenerationSizeMb: 24 } });
  setDataplanePort({
    setup: (spec: WorkloadSpec) => pool.call<WorkloadState>('setupWorkload', spec),
    teardown: (o: TeardownOptions) => pool.call<{ removed: boolean }>('teardownWorkload', o),
    check: (spec: WorkloadSpec, expect: { containerMac: string }) => pool.call<string[]>('checkWorkload', spec, expect),
  });
  return pool;
}

/** The plugin falls back to this file when its netconf has no nodename (src/config/nodename.ts); written atomically. */
function writeNodename(name: string, configPath: string | undefined): void {
  if (!/^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$/.test(name)) {
    throw new Error(`--nodename '${name}' is not a valid node name (lower-case letters, digits, '-' and '.', as Kubernetes node names)`);
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
