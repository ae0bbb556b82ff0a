// The node's route controller: watches pools, blocks, nodes and endpoints (their floating IPs), computes the
// routing state (desired.ts, pure) and hands it to the node's routing in
// dataplane/routing.ts, which applies the difference; registers the node's
// addresses and tunnel addresses first, re-registers when the node address
// changes, and writes the pod MTU file the plugin reads.
import { mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';
import type { Logger } from '../../log/types.js';
import type { Datastore } from '../../datastore/types.js';
import { createIpam } from '../../ipam/index.js';
import { ensureTunnelAddresses, registerNode, type AutodetectMethod } from '../node-registration.js';
import type { LocalTunnel, NodeRouting } from '../../dataplane/routing.js';
import { addrOf, computeDesired, poolViews, type Desired } from './desired.js';
import { resolveFloatingIPs } from '../nat/floating.js';
import type { Kind, Resource } from '../../model/resources.js';
import { Informer } from '../../watch/informer.js';
import { datastoreSource } from '../../datastore/list-watch.js';
import { createWorkQueue } from '../../watch/queue.js';

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

interface RoutesController {
  /** Resolves after the first complete reconcile. */
  readonly ready: Promise<void>;
  stop(): void;
}

export function startRoutesController(o: RoutesOptions): RoutesController {
  const { ds, node, kernel, log } = o;
  // Tunnel addresses: the route controller is no plugin process, so no host lock; the datastore's compare-and-swap
  // keeps them consistent.
  const ipam = createIpam(ds, { lock: 'none', log });
  let stopped = false;
  let debounce: NodeJS.Timeout | undefined;
  let markReady!: () => void;
  const ready = new Promise<void>((r) => (markReady = r));
  let tunnelsDirty = true;
  let lastPools = '';
  let lastEnsure = 0;
  let retry: NodeJS.Timeout | undefined;
  let warned = new Set<string>();

  // One key: the routing state is computed as a whole. The queue runs it once at a
  // time, runs it once more when a change came in meanwhile, and retries a failed run.
  const queue = createWorkQueue({
    handle: () => once(),
    concurrency: 1,
    baseDelayMs: 1000,
    maxDelayMs: 10_000,
    onError: (_k, err, n) =>
      log.warn('routes: reconcile failed; retrying', { error: (err as Error).message, failures: n }),
  });
  const schedule = () => {
    if (stopped) return;
    clearTimeout(debounce);
    debounce = setTimeout(() => queue.add('routes'), 20);
  };

  // The shared list+watch layer (re-list on compaction / 410 / a broken watch).
  const informer = <K extends Kind>(kind: K, onChange: () => void) =>
    new Informer<Resource<K>>(
      datastoreSource(ds, kind),
      { onChange },
      { onError: (e, src) => log.warn('routes: watch failed; re-listing', { source: src, error: e.message }) },
    );
  const pools = informer('IPPool', () => {
    tunnelsDirty = true;
    schedule();
  });
  const blocks = informer('IPAMBlock', schedule);
  const nodes = informer('Node', schedule);
  // Floating IPs are routed to the node of the endpoint holding them. Endpoints come and go
  // with every pod: only a change of who holds which floating IP is worth a reconcile.
  let floatingKey = '';
  const floatingNow = () => [...resolveFloatingIPs(weps.list(), poolViews(pools.list())).held.values()];
  const weps = informer('WorkloadEndpoint', () => {
    const key = JSON.stringify(floatingNow().map((f) => [f.external, f.internal, f.node]));
    if (key === floatingKey) return;
    floatingKey = key;
    schedule();
  });
  for (const inf of [pools, blocks, nodes, weps]) inf.start();

  async function once(): Promise<void> {
    await Promise.all([pools.whenSynced(), blocks.whenSynced(), nodes.whenSynced(), weps.whenSynced()]);
    if (stopped) return;
    try {
      const poolKey = JSON.stringify(pools.list().map((p) => [p.metadata.name, p.spec]));
      if (tunnelsDirty || poolKey !== lastPools) {
        tunnelsDirty = false;
        lastPools = poolKey;
        lastEnsure = Date.now();
        await ensureTunnelAddresses(ds, ipam, node, log);
      }
    } catch (e) {
      tunnelsDirty = true;
      log.warn('routes: tunnel address step failed; retrying on the next change', { error: (e as Error).message });
    }
    const view = {
      me: node,
      nodes: new Map(nodes.list().map((n) => [n.metadata.name, n.spec])),
      pools: poolViews(pools.list()),
      floating: floatingNow(),
      blocks: blocks.list().map((b) => ({
        cidr: b.spec.cidr,
        node: b.spec.affinity?.startsWith('host:') ? b.spec.affinity.slice(5) : undefined,
      })),
      bgp: o.bgp === true,
    };
    const desired = computeDesired(view, kernel.connectedSubnets());
    const mine = view.nodes.get(node);
    const missing =
      (desired.devices.vxlan4 && !mine?.vxlanTunnelAddress) ||
      (desired.devices.vxlan6 && !mine?.vxlanTunnelAddressV6) ||
      (desired.devices.ipip && !mine?.ipv4IPIPTunnelAddr);
    if (missing && !tunnelsDirty && mine) {
      // Our Node lost its tunnel data (edited or recreated), or the last
      // allocation failed: try again, at most every 5 s.
      tunnelsDirty = true;
      clearTimeout(retry);
      retry = setTimeout(schedule, Math.max(0, 5000 - (Date.now() - lastEnsure)));
    }
    const fresh = new Set(desired.warnings);
    for (const w of fresh) if (!warned.has(w)) log.warn(`routes: ${w}`);
    warned = fresh;
    const me = view.nodes.get(node) ?? {};
    const v4 = addrOf(me.ipv4Address);
    const v6 = addrOf(me.ipv6Address);
    const mtu = kernel.underlayMtu(v4 ?? v6) ?? 1500;
    const t = (local: string | undefined, address: string | undefined, mac?: string): LocalTunnel | undefined =>
      local && address ? { local, address: addrOf(address)!, ...(mac ? { mac } : {}) } : undefined;
    const tunnels = {
      ...(t(v4, me.vxlanTunnelAddress, me.vxlanTunnelMACAddr)
        ? { vxlan4: t(v4, me.vxlanTunnelAddress, me.vxlanTunnelMACAddr)! }
        : {}),
      ...(t(v6, me.vxlanTunnelAddressV6, me.vxlanTunnelMACAddrV6)
        ? { vxlan6: t(v6, me.vxlanTunnelAddressV6, me.vxlanTunnelMACAddrV6)! }
        : {}),
      ...(t(v4, me.ipv4IPIPTunnelAddr) ? { ipip: t(v4, me.ipv4IPIPTunnelAddr)! } : {}),
    };
    const t0 = process.hrtime.bigint();
    const stats = kernel.apply({ desired, tunnels, underlayMtu: mtu });
    o.onApplied?.({
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
    if (o.mtuFile) writePodMtu(o.mtuFile, mtu - desired.overhead, log);
    o.onReconciled?.(desired);
    markReady();
  }

  // Registration first (the tunnel addresses and other nodes need our address), retried while the datastore is down.
  let redetect: NodeJS.Timeout | undefined;
  const register = async (): Promise<void> => {
    for (let attempt = 1; !stopped; attempt++) {
      try {
        await registerNode({
          ds,
          node,
          nl: kernel,
          log,
          autodetect: o.autodetect,
          ...(o.ipv4 !== undefined ? { ipv4: o.ipv4 } : {}),
          ...(o.ipv6 !== undefined ? { ipv6: o.ipv6 } : {}),
        });
        return;
      } catch (e) {
        log.warn('cannot register the node yet; retrying', { attempt, error: (e as Error).message });
        await new Promise((r) => setTimeout(r, Math.min(5000, 200 * attempt)));
      }
    }
  };
  void register().then(() => {
    schedule();
    // Node IP changes (DHCP, a moved interface) are picked up and propagate through the Node resource.
    redetect = setInterval(() => {
      void registerNode({
        ds,
        node,
        nl: kernel,
        log,
        autodetect: o.autodetect,
        ...(o.ipv4 !== undefined ? { ipv4: o.ipv4 } : {}),
        ...(o.ipv6 !== undefined ? { ipv6: o.ipv6 } : {}),
      }).catch((e: Error) => log.warn('node re-registration failed', { error: e.message }));
    }, o.redetectMs ?? 30_000);
    redetect.unref();
  });

  return {
    ready,
    stop() {
      stopped = true;
      clearTimeout(debounce);
      clearTimeout(retry);
      clearInterval(redetect);
      pools.stop();
      blocks.stop();
      nodes.stop();
      weps.stop();
      void queue.stop();
    },
  };
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
    const tmp = `${file}.${process.pid}.tmp`;
    writeFileSync(tmp, `${mtu}\n`);
    renameSync(tmp, file);
    log.info('pod MTU written', { file, mtu });
  } catch (e) {
    log.warn('cannot write the pod MTU file', { file, error: (e as Error).message });
  }
}
