// Starts the agent's pod-network controllers once the datastore is ready:
// node registration + routes/tunnels (src/agent/routes) and natOutgoing
// (src/agent/nat). The CNI server runs regardless; a failure here is logged.
import { hostname } from 'node:os';
import { parseNetconf } from '../config/index.js';
import { resolveNodename } from '../config/nodename.js';
import { openNodeRouting } from '../dataplane/routing.js';
import type { Logger } from '../log/types.js';
import type { DatastoreSource } from '../datastore/pool.js';
import { startBgpController } from './bgp/index.js';
import { startNatController } from './nat/index.js';
import { readNetpluginConf } from './node-init.js';
import type { AutodetectMethod } from './node-registration.js';
import { RoutesController } from './routes/index.js';

export interface NodeNetworkOptions {
  configPath: string;
  /** Settles when the datastore step of node init succeeded. */
  nodeInit: Promise<void>;
  log: Logger;
  /** The agent's runtime (its warm datastore connections). */
  datastores: DatastoreSource;
  nodename: string | undefined;
  nodeIP: string | undefined;
  nodeIPv6: string | undefined;
  autodetect: AutodetectMethod;
  mtuFile: string | undefined;
  /** --bgp on: BIRD is supervised and routes the pools without encapsulation. */
  bgp?: {
    birdPath: string;
    runDir: string;
    readSecret?: (name: string, key: string) => Promise<string>;
    onStarted: (c: import('./bgp/index.js').BgpController) => void;
  };
  /** A floating IP of this node's endpoint refused (another endpoint holds it, or the entry is invalid). */
  onFloatingRefused?: (r: {
    kind: 'conflict' | 'invalid';
    namespace: string | undefined;
    pod: string | undefined;
    message: string;
  }) => void;
  /** Metrics hook: each route reconcile applied to the kernel. */
  onRoutesApplied?: (s: import('./metrics.js').RoutesApplied) => void;
}

/** stop() settles once BIRD (with --bgp on) exited. */
export function startNodeNetwork(o: NodeNetworkOptions): { stop(): Promise<void> } {
  const { autodetect } = o;
  let stopped = false;
  const stops: Array<() => void> = [];
  let bgpStopped: Promise<void> = Promise.resolve();
  void (async () => {
    await o.nodeInit;
    if (stopped) return;
    const raw = readNetpluginConf(o.configPath);
    const conf = parseNetconf(raw, { pluginType: 'netplugin' });
    let node = o.nodename ?? (conf.nodename || undefined);
    if (!node) {
      try {
        node = resolveNodename(conf);
      } catch {
        node = hostname();
      }
    }
    const ds = await o.datastores.datastore(conf);
    // The addon loads on this first netlink call: only an agent with the pod network on pays for it.
    const kernel = openNodeRouting(o.log);
    const refused = o.onFloatingRefused;
    const nat = startNatController({
      ds,
      log: o.log,
      node,
      ...(refused
        ? {
            onFloatingConflict: (c) =>
              refused({
                kind: 'conflict',
                namespace: c.refused.namespace,
                pod: c.refused.pod,
                message:
                  `floating IP ${c.external} is held by the older endpoint ${c.holder.endpoint} ` +
                  `on node ${c.holder.node}; this pod gets it once that endpoint is gone`,
              }),
            onFloatingInvalid: (i) =>
              refused({
                kind: 'invalid',
                namespace: i.namespace,
                pod: i.pod,
                message: `floating IP ignored: ${i.problem}`,
              }),
          }
        : {}),
    });
    const routes = new RoutesController({
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
    }).start();
    stops.push(
      () => routes.stop(),
      () => nat.stop(),
      () => kernel.close(),
    );
    if (o.bgp) {
      const bgp = startBgpController({
        ds,
        node,
        subnets: () => kernel.connectedSubnets(),
        log: o.log,
        birdPath: o.bgp.birdPath,
        runDir: o.bgp.runDir,
        ...(o.bgp.readSecret ? { readSecret: o.bgp.readSecret } : {}),
      });
      o.bgp.onStarted(bgp);
      // Before kernel.close (the controller reads connected subnets through it). The agent stops to be
      // restarted: BIRD shuts down for a graceful restart, so peers keep this node's routes meanwhile.
      stops.unshift(() => {
        bgpStopped = bgp.stop({ graceful: true });
      });
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
      return bgpStopped.catch(() => undefined);
    },
  };
}
