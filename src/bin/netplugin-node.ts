// netplugin-node: the per-node agent. For now it serves the CNI socket the
// native shim (/opt/cni/bin/netplugin) forwards to, so pod setup runs in a warm
// process instead of a fresh Node per call. Policy enforcement comes later.
import { parseArgs } from 'node:util';
import type { PluginSpec } from '../cni/types.js';
import { DEFAULT_SOCKET } from '../agent/protocol.js';
import { startCniServer, type CniServer } from '../agent/server.js';
import { createLogger, normalizeLevel } from '../log/index.js';
import { createWorkerPool } from '../agent/worker-pool.js';
import { setDataplanePort } from '../plugins/main/runtime.js';
import type { WorkloadSpec, WorkloadState, TeardownOptions } from '../dataplane/index.js';
import { startNodeInit, type NodeInit } from '../agent/node-init.js';
import type { Logger } from '../cni/types.js';

async function enableIpv6Forwarding(log: Logger): Promise<void> {
  try {
    (await import('../native/index.js')).netlink().sysctlSet('net.ipv6.conf.all.forwarding', '1');
    log.info('IPv6 forwarding turned on (net.ipv6.conf.all.forwarding=1)', { why: '--ipv6-forwarding=on' });
  } catch (e) {
    log.error('cannot turn on IPv6 forwarding', { error: (e as Error).message });
  }
}

const USAGE = `usage: netplugin-node [--socket PATH] [--config FILE] [--ipv6-forwarding auto|on|off]
                     [--log-level ERROR|WARNING|INFO|DEBUG] [--max-concurrent N]

  --socket PATH        CNI socket the shim connects to (default: $NETPLUGIN_AGENT_SOCKET or ${DEFAULT_SOCKET})
  --config FILE        the node's CNI config (e.g. /etc/cni/net.d/10-netplugin.conflist): at start, open
                       its datastore (kept warm for requests), initialise ClusterInformation, and turn on
                       IPv6 forwarding when IPv6 is in use
  --ipv6-forwarding M  auto (default: on when the config assigns IPv6 or an enabled IPv6 IPPool exists),
                       on, or off (never touch net.ipv6.conf.all.forwarding)
  --log-level L        default INFO
  --max-concurrent N   CNI requests run at once per plugin (default 64)
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
  let values: { socket?: string; config?: string; 'ipv6-forwarding'?: string; 'log-level'?: string; 'max-concurrent'?: string; help?: boolean };
  try {
    ({ values } = parseArgs({
      options: {
        socket: { type: 'string' },
        config: { type: 'string' },
        'ipv6-forwarding': { type: 'string' },
        'log-level': { type: 'string' },
        'max-concurrent': { type: 'string' },
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
  const socketPath = values.socket ?? (process.env['NETPLUGIN_AGENT_SOCKET'] || DEFAULT_SOCKET);
  const log = createLogger({ level, stderr: (s) => process.stderr.write(s), context: { component: 'netplugin-node' } });

  // Dataplane work goes to worker threads (one per core is plenty: each call is
  // a few syscalls, the slow part is the kernel's own veth teardown).
  const pool = createWorkerPool({ module: new URL('./netplugin-worker.mjs', import.meta.url), size: Math.max(2, Math.min(4, (await import('node:os')).availableParallelism())) });
  setDataplanePort({
    setup: (spec: WorkloadSpec) => pool.call<WorkloadState>('setupWorkload', spec),
    teardown: (o: TeardownOptions) => pool.call<{ removed: boolean }>('teardownWorkload', o),
    check: (spec: WorkloadSpec, expect: { containerMac: string }) => pool.call<string[]>('checkWorkload', spec, expect),
  });

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

  let stopping = false;
  const stop = (signal: string) => {
    if (stopping) {
      log.warn(`second ${signal}: exiting without waiting for running requests`);
      process.exit(1);
    }
    stopping = true;
    log.info(`${signal}: shutting down`);
    nodeInit?.stop();
    server.close().then(
      async () => {
        await pool.close();
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

main().catch((e: Error) => {
  process.stderr.write(`netplugin-node: ${e.stack ?? e.message}\n`);
  process.exit(1);
});
