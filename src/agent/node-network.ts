// Starts the agent's pod-network controllers once the datastore is ready: node registration + routes/tunnels
// (src/agent/routes), natOutgoing and floating IPs (src/agent/nat), and BIRD with --bgp on (src/agent/bgp).
// The CNI server runs regardless; a failure here is logged.
import { hostname } from 'node:os';
import { parseNetconf, type Netconf } from '../config/index.js';
import { resolveNodename } from '../config/nodename.js';
import { openNodeRouting, type NodeRouting } from '../dataplane/routing.js';
import type { Datastore } from '../datastore/types.js';
import type { Logger } from '../log/types.js';
import type { DatastoreSource } from '../datastore/pool.js';
import { startBgpController } from './bgp/index.js';
import { startNatController, type NatController } from './nat/index.js';
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

/** The pod-network controllers of one agent; stop() settles once BIRD (with --bgp on) exited. */
export class NodeNetwork {
  private stopped = false;
  /** Newest first at stop: BGP (when on) before routes, NAT and the kernel handle. */
  private readonly stops: Array<() => void> = [];
  private bgpStopped: Promise<void> = Promise.resolve();

  constructor(private readonly o: NodeNetworkOptions) {}

  /** Starts the controllers in the background once node init reached the datastore; a failure is logged. */
  start(): void {
    this.run().catch((e: Error) =>
      this.o.log.error('pod network controllers did not start; pods on this node reach only this node', {
        error: e.message,
      }),
    );
  }

  stop(): Promise<void> {
    this.stopped = true;
    this.runStops();
    return this.bgpStopped.catch(() => undefined);
  }

  private async run(): Promise<void> {
    const { o } = this;
    await o.nodeInit;
    if (this.stopped) return;
    const conf = parseNetconf(readNetpluginConf(o.configPath), { pluginType: 'netplugin' });
    const node = this.nodeName(conf);
    const ds = await o.datastores.datastore(conf);
    // The addon loads on this first netlink call: only an agent with the pod network on pays for it.
    const kernel = openNodeRouting(o.log);
    const nat = this.startNat(ds, node);
    const routes = this.startRoutes(ds, node, kernel, conf);
    this.stops.push(
      () => routes.stop(),
      () => nat.stop(),
      () => kernel.close(),
    );
    if (o.bgp) this.startBgp(o.bgp, ds, node, kernel);
    if (this.stopped) this.runStops();
    o.log.info('pod network controllers started', { node });
  }

  private runStops(): void {
    for (const s of this.stops.splice(0)) s();
  }

  /** --nodename, else the netconf's, else the one the CNI plugin resolves, else the host name. */
  private nodeName(conf: Netconf): string {
    const node = this.o.nodename ?? (conf.nodename || undefined);
    if (node) return node;
    try {
      return resolveNodename(conf);
    } catch {
      return hostname();
    }
  }

  private startNat(ds: Datastore, node: string): NatController {
    const { log, onFloatingRefused: refused } = this.o;
    return startNatController({
      ds,
      log,
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
  }

  private startRoutes(ds: Datastore, node: string, kernel: NodeRouting, conf: Netconf): RoutesController {
    const { o } = this;
    return new RoutesController({
      ds,
      node,
      kernel,
      log: o.log,
      autodetect: o.autodetect,
      ...(o.nodeIP !== undefined ? { ipv4: o.nodeIP } : {}),
      ...(o.nodeIPv6 !== undefined ? { ipv6: o.nodeIPv6 === 'autodetect' ? '' : o.nodeIPv6 } : {}),
      mtuFile: o.mtuFile ?? conf.mtu_file,
      ...(o.onRoutesApplied ? { onApplied: o.onRoutesApplied } : {}),
      bgp: o.bgp !== undefined,
    }).start();
  }

  private startBgp(b: NonNullable<NodeNetworkOptions['bgp']>, ds: Datastore, node: string, kernel: NodeRouting): void {
    const bgp = startBgpController({
      ds,
      node,
      subnets: () => kernel.connectedSubnets(),
      log: this.o.log,
      birdPath: b.birdPath,
      runDir: b.runDir,
      ...(b.readSecret ? { readSecret: b.readSecret } : {}),
    });
    b.onStarted(bgp);
    // Before kernel.close (the controller reads connected subnets through it). The agent stops to be
    // restarted: BIRD shuts down for a graceful restart, so peers keep this node's routes meanwhile.
    this.stops.unshift(() => {
      this.bgpStopped = bgp.stop({ graceful: true });
    });
  }
}
