// The node's route controller: watches pools, blocks, nodes and endpoints (their floating IPs), computes the
// routing state (desired.ts, pure) and hands it to the node's routing in
// dataplane/routing.ts, which applies the difference; registers the node's
// addresses and tunnel addresses first, re-registers when the node address
// changes, and writes the pod MTU file the plugin reads.
import { mkdirSync, readFileSync, rmSync } from 'node:fs';
import { writeFileAtomic } from '../../atomic-write.js';
import { dirname } from 'node:path';
import type { Logger } from '../../log/types.js';
import type { Datastore } from '../../datastore/types.js';
import { createIpam, type Ipam } from '../../ipam/index.js';
import { ensureTunnelAddresses, registerNode, type AutodetectMethod } from '../node-registration.js';
import type { LocalTunnel, NodeRouting } from '../../dataplane/routing.js';
import { addrOf, computeDesired, poolViews, type ClusterView, type Desired } from './desired.js';
import { resolveFloatingIPs } from '../nat/floating.js';
import type { Kind, NodeSpec, Resource } from '../../model/resources.js';
import { Informer } from '../../watch/informer.js';
import { datastoreSource } from '../../datastore/list-watch.js';
import { createReconcileQueue } from '../../watch/queue.js';

const VETH_DEFAULT_MTU = 1500;

interface RoutesOptions {
  ds: Datastore;
  node: string;
  /** The node's routing in the kernel (dataplane/routing.ts): the controller hands it the desired state. */
  kernel: NodeRouting;
  log: Logger;
  ipv4?: string;
  ipv6?: string;
  autodetect: AutodetectMethod;
  /** Where the pod MTU goes (the plugin reads it when the netconf sets no mtu); null: not written. */
  mtuFile: string | null;
  /** How often the node address is re-detected (default 30 s). */
  redetectMs?: number;
  /** BGP is on: BIRD routes the blocks of pools without encapsulation (desired.ts birdRoutesPool). */
  bgp?: boolean;
  /** Called after each reconcile (tests, NAT controller). */
  onReconciled?: (d: Desired) => void;
  /** Called after each kernel apply with its duration and changes (metrics). */
  onApplied?: (s: { seconds: number; routesAdded: number; routesRemoved: number; errors: number }) => void;
}

/** Informers of the kinds the routing state is computed from (the shared list+watch layer). */
interface RouteInputs {
  pools: Informer<Resource<'IPPool'>>;
  blocks: Informer<Resource<'IPAMBlock'>>;
  nodes: Informer<Resource<'Node'>>;
  weps: Informer<Resource<'WorkloadEndpoint'>>;
}

/**
 * Registers the node, then keeps the kernel's routing equal to what computeDesired makes of the
 * datastore: one reconcile at a time through a work queue (one key: the state is computed as a
 * whole), debounced, retried on failure.
 */
export class RoutesController {
  /** Resolves after the first complete reconcile. */
  readonly ready: Promise<void>;
  private markReady!: () => void;
  private readonly ipam: Ipam;
  private readonly queue: ReturnType<typeof createReconcileQueue>;
  private readonly inputs: RouteInputs;
  private stopped = false;
  private debounce: NodeJS.Timeout | undefined;
  private retry: NodeJS.Timeout | undefined;
  private redetect: NodeJS.Timeout | undefined;
  /** The tunnel addresses must be ensured again (pools changed, or the last attempt failed). */
  private tunnelsDirty = true;
  private lastPools = '';
  private lastEnsure = 0;
  private warned = new Set<string>();
  /** Who holds which floating IP, as last reconciled. */
  private floatingKey = '';

  constructor(private readonly o: RoutesOptions) {
    this.ready = new Promise<void>((r) => (this.markReady = r));
    // Tunnel addresses: the route controller is no plugin process, so no host lock; the datastore's
    // compare-and-swap keeps them consistent.
    this.ipam = createIpam(o.ds, { lock: 'none', log: o.log });
    this.queue = createReconcileQueue(() => this.reconcile(), {
      baseDelayMs: 1000,
      onError: (err, n) => o.log.warn('routes: reconcile failed; retrying', { error: err.message, failures: n }),
    });
    const schedule = () => this.schedule();
    this.inputs = {
      pools: this.informer('IPPool', () => {
        this.tunnelsDirty = true;
        this.schedule();
      }),
      blocks: this.informer('IPAMBlock', schedule),
      nodes: this.informer('Node', schedule),
      // Floating IPs are routed to the node of the endpoint holding them. Endpoints come and go with
      // every pod: only a change of who holds which floating IP is worth a reconcile.
      weps: this.informer('WorkloadEndpoint', () => this.onEndpoints()),
    };
  }

  start(): this {
    for (const inf of Object.values(this.inputs)) inf.start();
    // Registration first (the tunnel addresses and other nodes need our address).
    void this.registerUntilDone().then(() => {
      this.schedule();
      // Node IP changes (DHCP, a moved interface) are picked up and propagate through the Node resource.
      this.redetect = setInterval(() => {
        void this.register().catch((e: Error) => this.o.log.warn('node re-registration failed', { error: e.message }));
      }, this.o.redetectMs ?? 30_000);
      this.redetect.unref();
    });
    return this;
  }

  stop(): void {
    this.stopped = true;
    clearTimeout(this.debounce);
    clearTimeout(this.retry);
    clearInterval(this.redetect);
    for (const inf of Object.values(this.inputs)) inf.stop();
    void this.queue.stop();
  }

  private informer<K extends Kind>(kind: K, onChange: () => void): Informer<Resource<K>> {
    return new Informer<Resource<K>>(
      datastoreSource(this.o.ds, kind),
      { onChange },
      { onError: (e, src) => this.o.log.warn('routes: watch failed; re-listing', { source: src, error: e.message }) },
    );
  }

  private schedule(): void {
    if (this.stopped) return;
    clearTimeout(this.debounce);
    this.debounce = setTimeout(() => this.queue.add('routes'), 20);
  }

  private floatingNow() {
    const { weps, pools } = this.inputs;
    return [...resolveFloatingIPs(weps.list(), poolViews(pools.list())).held.values()];
  }

  private onEndpoints(): void {
    const key = JSON.stringify(this.floatingNow().map((f) => [f.external, f.internal, f.node]));
    if (key === this.floatingKey) return;
    this.floatingKey = key;
    this.schedule();
  }

  private register(): Promise<unknown> {
    const { o } = this;
    return registerNode({
      ds: o.ds,
      node: o.node,
      nl: o.kernel,
      log: o.log,
      autodetect: o.autodetect,
      ...(o.ipv4 !== undefined ? { ipv4: o.ipv4 } : {}),
      ...(o.ipv6 !== undefined ? { ipv6: o.ipv6 } : {}),
    });
  }

  /** Retried while the datastore is down. */
  private async registerUntilDone(): Promise<void> {
    for (let attempt = 1; !this.stopped; attempt++) {
      try {
        await this.register();
        return;
      } catch (e) {
        this.o.log.warn('cannot register the node yet; retrying', { attempt, error: (e as Error).message });
        await new Promise((r) => setTimeout(r, Math.min(5000, 200 * attempt)));
      }
    }
  }

  /** One pass: tunnel addresses, the desired state, the kernel, the MTU file. */
  async reconcile(): Promise<void> {
    const { pools, blocks, nodes, weps } = this.inputs;
    await Promise.all([pools.whenSynced(), blocks.whenSynced(), nodes.whenSynced(), weps.whenSynced()]);
    if (this.stopped) return;
    await this.ensureTunnelAddresses();
    const view = this.view();
    const desired = computeDesired(view, this.o.kernel.connectedSubnets());
    this.retryMissingTunnelData(desired, view.nodes.get(this.o.node));
    this.warnOnce(desired.warnings);
    const mtu = this.applyToKernel(desired, view.nodes.get(this.o.node) ?? {});
    if (this.o.mtuFile) writePodMtu(this.o.mtuFile, mtu - desired.overhead, this.o.log);
    this.o.onReconciled?.(desired);
    this.markReady();
  }

  private async ensureTunnelAddresses(): Promise<void> {
    try {
      const poolKey = JSON.stringify(this.inputs.pools.list().map((p) => [p.metadata.name, p.spec]));
      if (!this.tunnelsDirty && poolKey === this.lastPools) return;
      this.tunnelsDirty = false;
      this.lastPools = poolKey;
      this.lastEnsure = Date.now();
      await ensureTunnelAddresses(this.o.ds, this.ipam, this.o.node, this.o.log);
    } catch (e) {
      this.tunnelsDirty = true;
      this.o.log.warn('routes: tunnel address step failed; retrying on the next change', {
        error: (e as Error).message,
      });
    }
  }

  private view(): ClusterView {
    const { pools, blocks, nodes } = this.inputs;
    return {
      me: this.o.node,
      nodes: new Map(nodes.list().map((n) => [n.metadata.name, n.spec])),
      pools: poolViews(pools.list()),
      floating: this.floatingNow(),
      blocks: blocks.list().map((b) => ({
        cidr: b.spec.cidr,
        node: b.spec.affinity?.startsWith('host:') ? b.spec.affinity.slice(5) : undefined,
      })),
      bgp: this.o.bgp === true,
    };
  }

  /**
   * Our Node lost its tunnel data (edited or recreated), or the last allocation failed: try again,
   * at most every 5 s.
   */
  private retryMissingTunnelData(desired: Desired, mine: NodeSpec | undefined): void {
    const missing =
      (desired.devices.vxlan4 && !mine?.vxlanTunnelAddress) ||
      (desired.devices.vxlan6 && !mine?.vxlanTunnelAddressV6) ||
      (desired.devices.ipip && !mine?.ipv4IPIPTunnelAddr);
    if (!missing || this.tunnelsDirty || !mine) return;
    this.tunnelsDirty = true;
    clearTimeout(this.retry);
    this.retry = setTimeout(() => this.schedule(), Math.max(0, 5000 - (Date.now() - this.lastEnsure)));
  }

  /** Each warning is logged when it appears, not again while it stays. */
  private warnOnce(warnings: string[]): void {
    const fresh = new Set(warnings);
    for (const w of fresh) if (!this.warned.has(w)) this.o.log.warn(`routes: ${w}`);
    this.warned = fresh;
  }

  /** Hands the desired state and this node's tunnel endpoints to the kernel; returns the underlay MTU. */
  private applyToKernel(desired: Desired, me: NodeSpec): number {
    const { kernel, log } = this.o;
    const v4 = addrOf(me.ipv4Address);
    const v6 = addrOf(me.ipv6Address);
    const mtu = kernel.underlayMtu(v4 ?? v6) ?? 1500;
    const tunnel = (local: string | undefined, address: string | undefined, mac?: string) =>
      local && address ? { local, address: addrOf(address)!, ...(mac ? { mac } : {}) } : undefined;
    const tunnels: Partial<Record<'vxlan4' | 'vxlan6' | 'ipip', LocalTunnel>> = {};
    const set = (k: keyof typeof tunnels, t: LocalTunnel | undefined) => t && (tunnels[k] = t);
    set('vxlan4', tunnel(v4, me.vxlanTunnelAddress, me.vxlanTunnelMACAddr));
    set('vxlan6', tunnel(v6, me.vxlanTunnelAddressV6, me.vxlanTunnelMACAddrV6));
    set('ipip', tunnel(v4, me.ipv4IPIPTunnelAddr));
    const t0 = process.hrtime.bigint();
    const stats = kernel.apply({ desired, tunnels, underlayMtu: mtu });
    this.o.onApplied?.({
      seconds: Number(process.hrtime.bigint() - t0) / 1e9,
      routesAdded: stats.routesAdded,
      routesRemoved: stats.routesRemoved,
      errors: stats.errors.length,
    });
    if (stats.routesAdded || stats.routesRemoved)
      log.info('routes reconciled', {
        added: stats.routesAdded,
        removed: stats.routesRemoved,
        errors: stats.errors.length,
      });
    return mtu;
  }
}

/**
 * Written atomically and only when it changes; per-exec ADDs read the same file.
 * A pod MTU equal to the veth default (1500) is expressed by no file at all, so
 * a node on Never/Never pools with a 1500 underlay leaves nothing behind.
 */
function writePodMtu(file: string, mtu: number, log: Logger): void {
  let cur = '';
  try {
    cur = readFileSync(file, 'utf8').trim();
  } catch {
    /* first write */
  }
  if (mtu === VETH_DEFAULT_MTU) {
    if (cur !== '') {
      rmSync(file, { force: true });
      log.info('pod MTU file removed: pods get the default MTU', { file, mtu });
    }
    return;
  }
  if (cur === String(mtu)) return;
  try {
    mkdirSync(dirname(file), { recursive: true });
    writeFileAtomic(file, `${mtu}\n`, 0o644);
    log.info('pod MTU written', { file, mtu });
  } catch (e) {
    log.warn('cannot write the pod MTU file', { file, error: (e as Error).message });
  }
}
