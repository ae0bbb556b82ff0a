// netplugin-kube-controllers entry: flags and environment -> clients, health
// listener, leader election and controllers (src/kube-controllers/).
import {
  checkListenFlags,
  entryLogger,
  fatalExit,
  parseEntryFlags,
  stringFlags,
  usageError as cliUsageError,
} from './common/cli.js';
import { LogThrottle } from '../log/index.js';
import { datastoreConfigFromEnv, kubeconfigPathsFromEnv, openDatastore } from '../datastore/index.js';
import { createKubeClient, ownNamespace } from '../k8s/client.js';
import { Registry } from '../observe/metrics.js';
import { observeInvalidObjects } from '../datastore/invalid.js';
import { registerLogThrottleMetrics, registerProcessMetrics } from '../observe/process-metrics.js';
import { startHealthServer } from '../observe/health.js';
import { CONTROLLER_NAMES, parseDuration, type ControllerName } from '../model/kube-controllers-config.js';
import { startKubeControllers } from '../kube-controllers/index.js';

const USAGE = `usage: netplugin-kube-controllers [--kubeconfig FILE] [--controllers LIST] [--health-addr HOST:PORT]
                                  [--metrics-addr HOST:PORT] [--namespace NS] [--lease-duration D] [--log-level L]
                                  [--log-format text|json] [--version]

  --kubeconfig FILE     Kubernetes access (default: $KUBECONFIG, else the in-cluster service account)
  --controllers LIST    comma list of ${CONTROLLER_NAMES.join(',')} (default: $ENABLED_CONTROLLERS, else all)
  --health-addr A       /healthz, /readyz and /metrics listener (default 127.0.0.1:9094)
  --metrics-addr A      also serve /metrics, and only /metrics, on A for Prometheus (e.g. :9095, every
                        address; default: none)
  --namespace NS        namespace of the leader-election Lease "netplugin-kube-controllers"
                        (default: $POD_NAMESPACE, the service account's namespace, else kube-system)
  --lease-duration D    how long a leader's lease lasts without renewal (default 15s); a standby takes
                        over within this after the leader dies
  --log-level L         ERROR, WARNING, INFO (default) or DEBUG
  --log-format F        text (default) or json (one JSON object per line, as the node agent's)

Datastore from the environment, as netpluginctl: DATASTORE_TYPE (etcdv3|kubernetes), ETCD_ENDPOINTS,
ETCD_CA_CERT_FILE, ETCD_CERT_FILE, ETCD_KEY_FILE, KUBECONFIG. Settings: the KubeControllersConfiguration
resource "default" (see docs/kube-controllers.md).
`;

const CLI = { program: 'netplugin-kube-controllers', usage: USAGE };
function usageError(msg: string): never {
  return cliUsageError(CLI, msg);
}

async function main(): Promise<void> {
  const values = await parseEntryFlags(
    CLI,
    async () => (await import('../ctl/version.js')).NETPLUGIN_VERSION,
    stringFlags(
      'kubeconfig',
      'controllers',
      'health-addr',
      'metrics-addr',
      'namespace',
      'lease-duration',
      'log-level',
      'log-format',
    ),
  );
  if (!values) return;
  // A failure that repeats (a watch that keeps breaking) is logged once a minute with a count.
  const throttle = new LogThrottle();
  const log = entryLogger(CLI, values, throttle);
  const list = values.controllers ?? (process.env.ENABLED_CONTROLLERS || CONTROLLER_NAMES.join(','));
  const controllers = [
    ...new Set(
      list
        .split(',')
        .map((s) => s.trim())
        .filter(Boolean),
    ),
  ];
  const bad = controllers.filter((c) => !(CONTROLLER_NAMES as readonly string[]).includes(c));
  if (bad.length || !controllers.length) {
    usageError(
      `${values.controllers !== undefined ? '--controllers' : 'ENABLED_CONTROLLERS'}=${JSON.stringify(list)}: ` +
        `${bad.length ? `unknown controller ${bad.join(', ')}` : 'empty'}; use a comma list of ` +
        `${CONTROLLER_NAMES.join(', ')}`,
    );
  }
  let leaseDurationMs: number | undefined;
  if (values['lease-duration'] !== undefined) {
    leaseDurationMs = parseDuration(values['lease-duration']);
    if (leaseDurationMs === undefined || leaseDurationMs < 1000)
      usageError(`--lease-duration '${values['lease-duration']}' is not a duration of at least 1s (e.g. 15s)`);
  }
  const healthAddr = values['health-addr'] ?? '127.0.0.1:9094';
  const metricsAddr = values['metrics-addr'];
  checkListenFlags(CLI, { 'health-addr': healthAddr, 'metrics-addr': metricsAddr });

  const kubeconfig = values.kubeconfig ?? kubeconfigPathsFromEnv(process.env)[0];
  if (!kubeconfig && !process.env.KUBERNETES_SERVICE_HOST)
    usageError(
      'no Kubernetes API access: pass --kubeconfig FILE, set KUBECONFIG, or run in a pod (in-cluster service account)',
    );
  let dsConf;
  try {
    dsConf = datastoreConfigFromEnv(process.env);
  } catch (e) {
    usageError((e as Error).message);
  }
  if (dsConf.datastore_type === 'kubernetes' && !dsConf.kubernetes?.kubeconfig && kubeconfig)
    dsConf.kubernetes = { ...dsConf.kubernetes, kubeconfig };
  const fatal = fatalExit(CLI, log);
  const kube = await createKubeClient(kubeconfig ? { kubeconfig } : {}).catch((e) =>
    fatal('cannot set up Kubernetes API access', e),
  );
  const ds = await openDatastore(dsConf).catch((e) => fatal('cannot open the datastore', e));

  const registry = new Registry();
  // Malformed objects the datastore skips: one warning each, and their count on /metrics.
  observeInvalidObjects(registry, log);
  registerProcessMetrics(registry, {
    component: 'netplugin-kube-controllers',
    version: (await import('../ctl/version.js')).NETPLUGIN_VERSION,
  });
  registerLogThrottleMetrics(registry, throttle);
  let exiting = false;
  const kc = startKubeControllers({
    ds,
    kube,
    log,
    registry,
    controllers: controllers as ControllerName[],
    namespace: values.namespace ?? ownNamespace(),
    ...(leaseDurationMs ? { leaseDurationMs } : {}),
    onLostLeadership: () => {
      if (exiting) return;
      log.error('netplugin-kube-controllers: exiting after losing the lease (a restart campaigns again)');
      process.exit(1);
    },
  });
  log.info('netplugin-kube-controllers: started; campaigning for the lease', {
    identity: kc.identity,
    controllers,
    datastore: ds.type,
  });
  const health = await startHealthServer({
    addr: healthAddr,
    registry,
    healthz: () => kc.healthy(),
    readyz: () => kc.ready(),
  }).catch((e) => fatal('health listener', e));
  log.info('netplugin-kube-controllers: serving /healthz, /readyz and /metrics', {
    addr: `${health.host}:${health.port}`,
  });
  const metricsServer =
    metricsAddr === undefined
      ? undefined
      : await startHealthServer({ addr: metricsAddr, registry, metricsOnly: true }).catch((e) =>
          fatal('metrics listener', e),
        );
  if (metricsServer)
    log.info('netplugin-kube-controllers: serving /metrics', { addr: `${metricsServer.host}:${metricsServer.port}` });

  const stop = async (sig: string) => {
    if (exiting) return;
    exiting = true;
    log.info(`netplugin-kube-controllers: ${sig}: stopping (handing the lease back)`);
    const force = setTimeout(() => process.exit(0), 10_000);
    force.unref();
    await kc.stop().catch(() => undefined);
    await health.close().catch(() => undefined);
    await metricsServer?.close().catch(() => undefined);
    await ds.close().catch(() => undefined);
    kube.close();
    process.exit(0);
  };
  process.on('SIGTERM', () => void stop('SIGTERM'));
  process.on('SIGINT', () => void stop('SIGINT'));
  // Keep the process up: everything else is timers and sockets that may be unref'd.
  setInterval(() => undefined, 1 << 30);
}

await main();
