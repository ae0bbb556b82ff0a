// The node's routing in the kernel: tunnel devices (VXLAN, IPIP), our routes
// (tagged with ROUTE_PROTOCOL), permanent neighbours and FDB entries of our
// devices. The agent's route controller computes a RoutingState (pure) and
// hands it to apply(); only differences are written, so a route that is already
// right is never touched (an agent restart drops no traffic), and only what is
// ours is removed: routes with our protocol, entries on devices we created.
import type { Logger } from '../log/types.js';
import {
  NetlinkError,
  RouteType,
  netlink,
  type AddrInfo,
  type LinkInfo,
  type Netlink,
  type RouteInfo,
} from '../native/index.js';
import { parseCidr, type Cidr, type Family } from '../net/cidr.js';

export type { AddrInfo, LinkInfo };

export const VXLAN_DEVICE: Record<Family, string> = { 4: 'vxlan.netplugin', 6: 'vx6.netplugin' };
export const IPIP_DEVICE = 'tunl.netplugin';
const VXLAN_VNI = 4096;
export const VXLAN_PORT = 4789;
/** Encapsulation overhead on the underlay MTU: outer IP + UDP + VXLAN + inner Ethernet. */
export const OVERHEAD = { vxlan4: 50, vxlan6: 70, ipip: 20 } as const;
/** RTPROT number our routes carry: reconciling lists and removes only these. */
const ROUTE_PROTOCOL = 80;

interface DesiredRoute {
  family: Family;
  dst: string;
  type: 'unicast' | 'blackhole';
  gateway?: string;
  dev?: string;
  onlink?: boolean;
}

/** What the node's routing should be: the part of the route controller's result the kernel holds. */
export interface RoutingState {
  routes: DesiredRoute[];
  /** Per tunnel device: permanent neighbours (tunnel address -> VTEP MAC). */
  neighbours: Map<string, Array<{ dst: string; lladdr: string }>>;
  /** Per VXLAN device: FDB entries (VTEP MAC -> remote node IP). */
  fdb: Map<string, Array<{ lladdr: string; dst: string }>>;
  /** Devices the routes need (a pool uses the mode). */
  devices: { vxlan4: boolean; vxlan6: boolean; ipip: boolean };
}

const RTNH_F_ONLINK = 4;
const OUR_DEVICES = new Set([VXLAN_DEVICE[4], VXLAN_DEVICE[6], IPIP_DEVICE]);

export interface LocalTunnel {
  /** The node's own address of the device's family (VTEP / tunnel source). */
  local: string;
  /** Our tunnel address, put on the device (/32, /128). */
  address: string;
  mac?: string;
}

interface ApplyInput {
  desired: RoutingState;
  /** Present when this node has what the device needs (tunnel address, node IP). */
  tunnels: { vxlan4?: LocalTunnel; vxlan6?: LocalTunnel; ipip?: LocalTunnel };
  underlayMtu: number;
}

interface ApplyStats {
  routesAdded: number;
  routesRemoved: number;
  errors: string[];
}

/** The node's routing, on a netlink socket of its own (the addon loads here, on first use). */
export function openNodeRouting(log: Logger): NodeRouting {
  return new NodeRouting(netlink(), log);
}

export class NodeRouting {
  /** The VTEP source address each VXLAN device was created with by this process. */
  private readonly createdWith = new Map<string, string>();
  /** Reported once per device, not every reconcile. */
  private readonly reported = new Set<string>();

  constructor(
    private readonly nl: Netlink,
    private readonly log: Logger,
  ) {}

  /** The node's addresses (node registration's autodetection reads them). */
  addrList(opts?: { family?: 4 | 6 }): AddrInfo[] {
    return this.nl.addrList(opts);
  }

  linkList(): LinkInfo[] {
    return this.nl.linkList();
  }

  /** The node's directly connected subnets, our own devices excluded. */
  connectedSubnets(): Cidr[] {
    const names = new Map(this.nl.linkList().map((l) => [l.index, l.name]));
    const out: Cidr[] = [];
    for (const a of this.nl.addrList()) {
      if (a.scope !== 0) continue;
      if (OUR_DEVICES.has(names.get(a.index) ?? '')) continue;
      if (a.prefixLen === (a.family === 4 ? 32 : 128)) continue;
      try {
        out.push(parseCidr(`${a.address}/${a.prefixLen}`, { strict: false }));
      } catch {
        /* not ours to judge */
      }
    }
    return out;
  }

  /** MTU of the link holding `ip` (the node address), or undefined. */
  underlayMtu(ip: string | undefined): number | undefined {
    if (!ip) return undefined;
    const a = this.nl.addrList().find((x) => x.address === ip);
    return a ? this.nl.linkGet(a.index).mtu : undefined;
  }

  close(): void {
    this.nl.close();
  }

  apply(input: ApplyInput): ApplyStats {
    const stats: ApplyStats = { routesAdded: 0, routesRemoved: 0, errors: [] };
    const { desired } = input;
    const present = new Set<string>();
    const dev = (
      name: string,
      want: boolean,
      t: LocalTunnel | undefined,
      create: (t: LocalTunnel) => void,
      mtu: number,
    ) => {
      const link = this.nl.linkFind(name);
      if (!want || !t) {
        this.reported.delete(name);
        if (link) {
          this.nl.linkDel(name);
          this.createdWith.delete(name);
          this.log.info('removed tunnel device no pool needs', { device: name });
        }
        return;
      }
      try {
        let l = link;
        const before = this.createdWith.get(name);
        if (l && before !== undefined && before !== t.local) {
          // The node address changed: the VTEP source is fixed at creation.
          this.nl.linkDel(name);
          l = undefined;
        }
        if (!l) {
          create(t);
          this.createdWith.set(name, t.local);
          this.log.info('created tunnel device', { device: name, local: t.local, mtu });
          l = this.nl.linkGet(name);
        } else if (before === undefined) {
          this.createdWith.set(name, t.local);
        }
        if (l.mtu !== mtu) this.nl.linkSet(name, { mtu });
        if (!l.up) this.nl.linkSet(name, { up: true });
        const plen = t.address.includes(':') ? 128 : 32;
        const addrs = this.nl.addrList({ link: name }).filter((a) => a.scope === 0);
        for (const a of addrs) if (a.address !== t.address) this.nl.addrDel(name, a.cidr);
        if (!addrs.some((a) => a.address === t.address)) this.nl.addrAdd(name, `${t.address}/${plen}`, { nodad: true });
        present.add(name);
        this.reported.delete(name);
      } catch (e) {
        const msg = `cannot set up ${name}: ${(e as Error).message}`;
        stats.errors.push(msg);
        if (!this.reported.has(name))
          this.log.error(`${msg}; routes through it are skipped, everything else is served`, { device: name });
        this.reported.add(name);
      }
    };
    const mtu = input.underlayMtu;
    for (const family of [4, 6] as const) {
      const name = VXLAN_DEVICE[family];
      const devMtu = mtu - OVERHEAD[family === 4 ? 'vxlan4' : 'vxlan6'];
      const vxlan = (t: LocalTunnel) =>
        this.nl.vxlanAdd({
          name,
          vni: VXLAN_VNI,
          port: VXLAN_PORT,
          local: t.local,
          learning: false,
          mtu: devMtu,
          ...(t.mac ? { mac: t.mac } : {}),
        });
      dev(name, desired.devices[`vxlan${family}`], input.tunnels[`vxlan${family}`], vxlan, devMtu);
    }
    dev(
      IPIP_DEVICE,
      desired.devices.ipip,
      input.tunnels.ipip,
      (t) => this.nl.ipipAdd({ name: IPIP_DEVICE, local: t.local, mtu: mtu - OVERHEAD.ipip }),
      mtu - OVERHEAD.ipip,
    );

    // Neighbours and FDB before routes, so a new route never points at an unresolved next hop.
    for (const name of [VXLAN_DEVICE[4], VXLAN_DEVICE[6]]) {
      if (!present.has(name)) continue;
      this.syncNeighbours(name, desired.neighbours.get(name) ?? [], stats);
      this.syncFdb(name, desired.fdb.get(name) ?? [], stats);
    }
    for (const family of [4, 6] as const)
      this.syncRoutes(
        family,
        desired.routes.filter((r) => r.family === family),
        present,
        stats,
      );
    return stats;
  }

  private try(stats: ApplyStats, what: string, fn: () => void): void {
    try {
      fn();
    } catch (e) {
      stats.errors.push(`${what}: ${(e as Error).message}`);
      this.log.warn(`routes: ${what} failed`, { error: (e as Error).message });
    }
  }

  private syncNeighbours(dev: string, want: Array<{ dst: string; lladdr: string }>, stats: ApplyStats): void {
    const have = this.nl.neighList({ dev }).filter((n) => n.permanent);
    const wantBy = new Map(want.map((w) => [w.dst, w.lladdr]));
    for (const n of have)
      if (!wantBy.has(n.dst))
        this.try(stats, `removing neighbour ${n.dst} dev ${dev}`, () => this.nl.neighDel({ dev, dst: n.dst }));
    for (const w of want) {
      if (have.some((n) => n.dst === w.dst && n.lladdr === w.lladdr)) continue;
      this.try(stats, `neighbour ${w.dst} dev ${dev}`, () => this.nl.neighSet({ dev, dst: w.dst, lladdr: w.lladdr }));
    }
  }

  private syncFdb(dev: string, want: Array<{ lladdr: string; dst: string }>, stats: ApplyStats): void {
    const have = this.nl.fdbList({ dev }).filter((f) => f.dst !== undefined);
    const key = (x: { lladdr: string; dst?: string }) => `${x.lladdr}>${x.dst}`;
    const wantKeys = new Set(want.map(key));
    for (const f of have)
      if (!wantKeys.has(key(f)))
        this.try(stats, `removing FDB ${key(f)} dev ${dev}`, () =>
          this.nl.fdbDel({ dev, lladdr: f.lladdr, dst: f.dst! }),
        );
    const haveKeys = new Set(have.map(key));
    for (const w of want)
      if (!haveKeys.has(key(w)))
        this.try(stats, `FDB ${key(w)} dev ${dev}`, () => this.nl.fdbSet({ dev, lladdr: w.lladdr, dst: w.dst }));
  }

  private syncRoutes(family: Family, want: DesiredRoute[], present: Set<string>, stats: ApplyStats): void {
    const have = this.nl.routeList({ family, protocol: ROUTE_PROTOCOL });
    const index = new Map<string, number>();
    for (const name of present) index.set(name, this.nl.linkGet(name).index);
    const wanted = new Map<string, DesiredRoute>();
    for (const r of want) if (!r.dev || present.has(r.dev)) wanted.set(r.dst, r);
    const matches = (h: RouteInfo, r: DesiredRoute) =>
      h.type === (r.type === 'blackhole' ? RouteType.blackhole : RouteType.unicast) &&
      (h.gateway ?? '') === (r.gateway ?? '') &&
      (!r.dev || h.oif === index.get(r.dev)) &&
      !!(h.flags & RTNH_F_ONLINK) === !!r.onlink;
    for (const h of have) {
      const w = wanted.get(h.dst);
      if (w && matches(h, w)) {
        wanted.delete(h.dst);
        continue;
      }
      if (!w) {
        this.try(stats, `removing route ${h.dst}`, () => {
          try {
            this.nl.routeDel({
              dst: h.dst,
              protocol: ROUTE_PROTOCOL,
              ...(h.type === RouteType.blackhole ? { type: 'blackhole' as const } : {}),
            });
          } catch (e) {
            if (!NetlinkError.is(e, 'ESRCH')) throw e;
          }
        });
        stats.routesRemoved++;
      }
    }
    // A route of the same prefix that is not ours (a pod's `/32 dev <veth>` when the block is a
    // single address, an operator's route) is never replaced: the kernel's replace matches on
    // prefix and metric, not protocol, and would put our route, say a blackhole, over it.
    const foreign = new Set<string>();
    if (wanted.size)
      for (const h of this.nl.routeList({ family })) if (h.protocol !== ROUTE_PROTOCOL) foreign.add(h.dst);
    for (const r of wanted.values()) {
      if (foreign.has(r.dst)) continue;
      this.try(stats, `route ${r.dst}`, () =>
        this.nl.routeReplace({
          dst: r.dst,
          protocol: ROUTE_PROTOCOL,
          ...(r.type === 'blackhole' ? { type: 'blackhole' as const } : {}),
          ...(r.gateway ? { gateway: r.gateway } : {}),
          ...(r.dev ? { dev: r.dev } : {}),
          ...(r.onlink ? { onlink: true } : {}),
        }),
      );
      stats.routesAdded++;
    }
  }
}
