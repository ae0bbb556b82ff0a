// Starts the agent's pod-network controllers once the datastore is ready:
// node registration + routes/tunnels (src/agent/routes) and natOutgoing
// (src/agent/nat). The CNI server runs regardless; a failure here is logged.
import { hostname } from 'node:os';
import type { Logger } from '../log/types.js';
import { parseAutodetect } from './node-registration.js';
import { readNetpluginConf } from './node-init.js';
import type { DatastoreSource } from '../plugins/main/runtime.js';

interface NodeNetworkOptions {
  configPath: string;
  /** Settles when the datastore step of node init succeeded. */
  nodeInit: Promise<void>;
  log: Logger;
  /** The agent's runtime (its warm datastore connections). */
  datastores: DatastoreSource;
  nodename: string | undefined;
  nodeIP: string | undefined;
  nodeIPv6: string | undefined;
  autodetect: string | undefined;
  mtuFile: string | undefined;
  /** --bgp on: BIRD is supervised and routes the pools without encapsulation. */
  bgp?: { birdPath: string; runDir: string; onStarted: (c: import('./bgp/index.js').BgpController) => void };
  /** Metrics hook: each route reconcile applied to the kernel. */
  onRoutesApplied?: (s: import('./metrics.js').RoutesApplied) => void;
}

/** Throws (before anything starts) on bad flags. */
export function startNodeNetwork(o: NodeNetworkOptions): { stop(): void } {
  const autodetect = parseAutodetect(o.autodetect ?? 'first-found');
  let stopped = false;
  const stops: Array<() => void> = [];
  void (async () => {
    await o.nodeInit;
    if (stopped) return;
    const raw = readNetpluginConf(o.configPath);
    const { parseNetconf } = await import('../config/index.js');
    const conf = parseNetconf(raw, { pluginType: 'netplugin' });
    const { resolveNodename } = await import('../config/nodename.js');
    let node = o.nodename ?? (conf.nodename || undefined);
    if (!node) {
      try {
        node = resolveNodename(conf);
      } catch {
        node = hostname();
      }
    }
    const ds = await o.datastores.datastore(conf);
    // Loaded here: only an agent with the pod network on pays for the addon.
    const { openNodeRouting } = await import('../dataplane/routing.js');
    const kernel = openNodeRouting(o.log);
    const { startRoutesController } = await import('./routes/index.js');
    const { startNatController } = await import('./nat/index.js');
    const nat = startNatController({ ds, log: o.log });
    const routes = startRoutesController({
      ds,
      node,
      kernel,
      log: o.log,
      autodetect,
      ...(o.nodeIP !== undefined ? { ipv4: o.nodeIP } : {}),
      ...(o.nodeIPv6 !== undefined ? { ipv6: o.nodeIPv6 === 'autodetect' ? '' : o.nodeIPv6 } : {}),
      mtuFile: o.mtuFile ?? conf.mtu_file,
      ...(o.onRoutesApplied ? { onApplied: o.onRoutesApplied } : {}),
      bgp: o.bgp !== undefined,
    });
    stops.push(
      () => routes.stop(),
      () => nat.stop(),
      () => kernel.close(),
    );
    if (o.bgp) {
      const { startBgpController } = await import('./bgp/index.js');
      const bgp = startBgpController({
        ds,
        node,
        subnets: () => kernel.connectedSubnets(),
        log: o.log,
        birdPath: o.bgp.birdPath,
        runDir: o.bgp.runDir,
      });
      o.bgp.onStarted(bgp);
      // Before kernel.close (the controller reads connected subnets through it).
      stops.unshift(() => void bgp.stop());
    }
    if (stopped) for (const s of stops.splice(0)) s();
    o.log.info('pod network controllers started', { node });
  })().catch((e: Error) =>
    o.log.error('pod network controllers did not start; pods on this node reach only this node', { error: e.message }),
  );
  return {
    stop() {
      stopped = true;
      for (const s of stops.splice(0)) s();
    },
  };
}
