// The CNI fast path: the socket the shim forwards to, serving the plugins' handlers warm. The
// handlers read what they use through a PluginRuntime (the per-exec plugin builds the plain one);
// this part builds the agent's from its explicit inputs: the shared datastores, the dataplane,
// watch-fed pod caches, IPAM batching and counting, and the policy controller's signal.
import type { PluginSpec } from '../../cni/types.js';
import type { Logger } from '../../log/types.js';
import type { LogThrottle } from '../../log/index.js';
import type { ProgrammedSignal } from '../../policy-status/index.js';
import {
  createPluginRuntime,
  type DataplanePort,
  type IpamObserver,
  type PluginRuntime,
} from '../../plugins/main/runtime.js';
import { socketHealth } from '../health.js';
import type { AgentPart, PartHealth } from '../part.js';
import type { ServedRequest } from '../metrics.js';
import { startCniServer, type CniServer } from '../server.js';
import type { DatastoresPart } from './datastores.js';

interface CniServerInputs {
  socketPath: string;
  log: Logger;
  /** Shared with the agent's own log: requests' repeated failures are logged once a minute too. */
  throttle: LogThrottle;
  maxConcurrent: number;
  datastores: DatastoresPart;
  /** Read at start (the dataplane part has started by then). */
  dataplane: () => DataplanePort;
  ipamObserver: IpamObserver;
  /** The policy controller's signal that an endpoint is programmed, once it runs. */
  policySignal: () => ProgrammedSignal | undefined;
  onServed: (r: ServedRequest & { cniArgs?: string | undefined }) => void;
  /** False once the agent is shutting down (readiness). */
  serving: () => boolean;
}

export class CniServerPart implements AgentPart {
  readonly name = 'cni-server';
  readonly check = 'socket';
  private server: CniServer | undefined;
  private runtime: PluginRuntime | undefined;

  constructor(private readonly o: CniServerInputs) {}

  async start(): Promise<void> {
    const { o } = this;
    this.runtime = createPluginRuntime({
      datastores: o.datastores,
      ipamLockTakeover: () => o.datastores.suspendReadCaches(),
      ipamObserver: o.ipamObserver,
      ipamBatching: true,
      // Loaded by the first ADD that reads its pod from the API: a node without Kubernetes pods never loads it.
      podCache: async (kube, node) =>
        new (await import('../../k8s/cache.js')).CachingPodSource(kube, { nodeName: node, log: o.log }).start(),
      dataplane: o.dataplane(),
      policySignal: o.policySignal,
    });
    this.server = await startCniServer({
      socketPath: o.socketPath,
      plugins: agentPlugins(this.runtime, o.throttle),
      log: o.log,
      maxConcurrent: o.maxConcurrent,
      onServed: o.onServed,
    });
  }

  /** Lets accepted requests finish (bounded), then closes the API clients and pod caches they used. */
  async stop(): Promise<void> {
    await this.server?.close();
    await this.runtime?.close();
  }

  health(): PartHealth {
    return socketHealth(this.o.socketPath, this.o.serving());
  }
}

// Handlers load on the first request that needs them, as in the per-exec entry; both plugins are
// served with the agent's runtime.
function agentPlugins(
  runtime: PluginRuntime,
  logThrottle: LogThrottle,
  // biome-ignore lint/suspicious/noExplicitAny: a registry of plugins of different netconf types
): Record<string, PluginSpec<any, PluginRuntime>> {
  return {
    netplugin: {
      name: 'netplugin',
      load: async () => (await import('../../plugins/main/index.js')).handlers,
      resident: true,
      runtime,
      logThrottle,
    },
    'netplugin-ipam': {
      name: 'netplugin-ipam',
      load: async () => (await import('../../plugins/ipam/index.js')).handlers,
      resident: true,
      runtime,
      logThrottle,
    },
  };
}
