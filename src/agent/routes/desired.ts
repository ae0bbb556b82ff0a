// What the kernel of this node should hold for the pod network, computed from
// the datastore alone (pools, blocks with their affinity, nodes) plus the
// node's directly connected subnets. Pure: the controller applies the result.
//
// Per block affine to another node, by its pool's mode (IPv4: vxlanMode, then
// ipipMode; IPv6: vxlanMode):
//   Never            block via <node IP>                     (only when on-link)
//   VXLAN Always     block via <tunnel addr> dev vxlan.netplugin onlink
//                    + neighbour tunnel addr -> VTEP MAC, FDB VTEP MAC -> node IP
//   VXLANCrossSubnet VXLAN towards nodes in another subnet, direct otherwise
//   IPIP Always      block via <node IP> dev tunl.netplugin onlink
//   IPIPCrossSubnet  IPIP towards nodes in another subnet, direct otherwise
// Per block affine to this node: a blackhole route, so an unused address of
// our own block never leaves through the default route.
import type { EncapMode, IPPoolSpec, NodeSpec } from '../../model/resources.js';
import { IPIP_DEVICE, OVERHEAD, VXLAN_DEVICE, type RoutingState } from '../../dataplane/routing.js';
import {
  addressOf,
  containsCidr,
  containsIP,
  hostPrefix,
  parseCidr,
  tryParseCidr,
  tryParseIP,
  type Cidr,
  type Family,
} from '../../net/cidr.js';

export interface PoolView {
  name: string;
  cidr: Cidr;
  spec: IPPoolSpec;
}

interface BlockView {
  cidr: string;
  /** Affine node, or undefined for an unaffine block. */
  node: string | undefined;
}

export interface ClusterView {
  me: string;
  nodes: ReadonlyMap<string, NodeSpec>;
  pools: readonly PoolView[];
  blocks: readonly BlockView[];
  /** BGP is on: BIRD programs the other nodes' blocks of pools without encapsulation, so they get no route here. */
  bgp?: boolean;
  /** Floating IPs with the node and endpoint address holding each (nat/floating.ts resolveFloatingIPs). */
  floating?: ReadonlyArray<{ external: string; internal: string; node: string }>;
}

/** The routing state dataplane/routing.ts applies, and what the controller itself uses of the result. */
export interface Desired extends RoutingState {
  /** Largest encapsulation overhead of the enabled pools (0 with Never/Never only). */
  overhead: number;
  warnings: string[];
}

type Mode = 'direct' | 'vxlan' | 'ipip';

/** The address part of `192.0.2.10/24` (or a bare address). */
export function addrOf(s: string | undefined): string | undefined {
  if (!s) return undefined;
  const a = addressOf(s);
  return tryParseIP(a) ? a : undefined;
}

/**
 * Whether BIRD, when BGP is on, programs the routes to other nodes' blocks of
 * this pool: no VXLAN and no IPIP (the tunnel routes need `onlink` through our
 * device, which BIRD 2 cannot set, so they stay with this controller).
 */
export function birdRoutesPool(spec: IPPoolSpec, family: Family): boolean {
  return !uses(spec.vxlanMode) && (family === 6 || !uses(spec.ipipMode));
}

function uses(m: EncapMode | undefined): boolean {
  return m === 'Always' || m === 'CrossSubnet';
}

/** VXLAN/IPIP need for a pool: which devices it implies and its overhead. */
function poolEncap(p: PoolView): { vxlan: boolean; ipip: boolean; overhead: number } {
  const vxlan = uses(p.spec.vxlanMode);
  const ipip = !vxlan && p.cidr.family === 4 && uses(p.spec.ipipMode);
  const overhead = vxlan ? (p.cidr.family === 4 ? OVERHEAD.vxlan4 : OVERHEAD.vxlan6) : ipip ? OVERHEAD.ipip : 0;
  return { vxlan, ipip, overhead };
}

function modeFor(p: PoolView, sameSubnet: boolean): Mode {
  const { vxlanMode, ipipMode } = p.spec;
  if (vxlanMode === 'Always' || (vxlanMode === 'CrossSubnet' && !sameSubnet)) return 'vxlan';
  if (p.cidr.family === 4 && (ipipMode === 'Always' || (ipipMode === 'CrossSubnet' && !sameSubnet))) return 'ipip';
  return 'direct';
}

/**
 * @param subnets the node's directly connected subnets (its own interfaces'
 *   address prefixes, tunnel devices excluded): a peer inside one is "same subnet".
 */
export function computeDesired(view: ClusterView, subnets: readonly Cidr[]): Desired {
  const out: Desired = {
    routes: [],
    neighbours: new Map(),
    fdb: new Map(),
    devices: { vxlan4: false, vxlan6: false, ipip: false },
    overhead: 0,
    warnings: [],
  };
  for (const p of view.pools) {
    if (p.spec.disabled) continue;
    const e = poolEncap(p);
    if (e.vxlan) out.devices[p.cidr.family === 4 ? 'vxlan4' : 'vxlan6'] = true;
    if (e.ipip) out.devices.ipip = true;
    out.overhead = Math.max(out.overhead, e.overhead);
  }
  const onLink = (ip: string) => {
    const a = tryParseIP(ip);
    return !!a && subnets.some((s) => containsIP(s, a));
  };
  const me = view.nodes.get(view.me);
  // The route to an address range held by another node, by its pool's mode.
  const toNode = (dst: string, family: Family, pool: PoolView, nodeName: string, what: string) => {
    const node = view.nodes.get(nodeName);
    if (!node) return;
    const nodeIP = addrOf(family === 4 ? node.ipv4Address : node.ipv6Address);
    if (!nodeIP) {
      out.warnings.push(`node ${nodeName} has no IPv${family} address registered: no route to its ${what} ${dst}`);
      return;
    }
    const same = onLink(nodeIP);
    const mode = modeFor(pool, same);
    if (mode === 'vxlan') {
      const dev = VXLAN_DEVICE[family];
      const tun = addrOf(family === 4 ? node.vxlanTunnelAddress : node.vxlanTunnelAddressV6);
      const mac = family === 4 ? node.vxlanTunnelMACAddr : node.vxlanTunnelMACAddrV6;
      const mine = family === 4 ? me?.vxlanTunnelAddress : me?.vxlanTunnelAddressV6;
      if (!tun || !mac) {
        out.warnings.push(
          `node ${nodeName} has no IPv${family} VXLAN tunnel address/MAC registered yet: no route to its ${what} ` +
            `${dst}`,
        );
        return;
      }
      if (!mine) {
        out.warnings.push(
          `this node has no IPv${family} VXLAN tunnel address yet: no route to ${what} ${dst} of ${nodeName}`,
        );
        return;
      }
      out.routes.push({ family, dst, type: 'unicast', gateway: tun, dev, onlink: true });
      push(out.neighbours, dev, { dst: tun, lladdr: mac.toLowerCase() });
      push(out.fdb, dev, { lladdr: mac.toLowerCase(), dst: nodeIP });
      // A floating IP's pool may be disabled (kept out of IPAM): its routes still need the device.
      out.devices[family === 4 ? 'vxlan4' : 'vxlan6'] = true;
    } else if (mode === 'ipip') {
      out.routes.push({ family, dst, type: 'unicast', gateway: nodeIP, dev: IPIP_DEVICE, onlink: true });
      out.devices.ipip = true;
    } else if (same) {
      out.routes.push({ family, dst, type: 'unicast', gateway: nodeIP });
    } else {
      out.warnings.push(
        `pool ${pool.name} uses no encapsulation and node ${nodeName} (${nodeIP}) is not on a directly connected ` +
          `subnet: no route to its ${what} ${dst}; the underlay must route it, or set the pool's vxlanMode`,
      );
    }
  };
  for (const b of view.blocks) {
    if (!b.node) continue;
    const cidr = tryParseCidr(b.cidr);
    if (!cidr) continue;
    // A block outside every pool (its pool was deleted) gets no route.
    const pool = view.pools.find((p) => p.cidr.family === cidr.family && containsCidr(p.cidr, cidr));
    if (!pool) continue;
    const family = cidr.family;
    if (b.node === view.me) {
      out.routes.push({ family, dst: b.cidr, type: 'blackhole' });
      continue;
    }
    if (view.bgp && birdRoutesPool(pool.spec, family)) continue;
    toNode(b.cidr, family, pool, b.node, 'block');
  }
  // Floating IPs (already resolved: one holder each): a host route to the holder's node, as
  // for a borrowed address; on the holder's node a route to the pod, so the node's own
  // traffic to it finds a route (not the blackhole of a local block) before the DNAT of
  // the output hook sends it to the pod.
  for (const f of view.floating ?? []) {
    const ip = tryParseIP(f.external);
    if (!ip) continue;
    const pool = view.pools.find((p) => p.cidr.family === ip.family && containsIP(p.cidr, ip));
    if (!pool) continue;
    const dst = hostPrefix(f.external);
    if (f.node === view.me) {
      out.routes.push({ family: ip.family, dst, type: 'unicast', gateway: f.internal });
      continue;
    }
    // BIRD advertises floating IPs of enabled BGP-mode pools only: a disabled pool's stay with us.
    if (view.bgp && !pool.spec.disabled && birdRoutesPool(pool.spec, ip.family)) continue;
    toNode(dst, ip.family, pool, f.node, 'floating IP');
  }
  // One neighbour/FDB entry per peer even when it holds several blocks.
  for (const m of [out.neighbours, out.fdb]) for (const [k, v] of m) m.set(k, dedupe(v));
  return out;
}

function push<T>(m: Map<string, T[]>, k: string, v: T): void {
  const a = m.get(k);
  if (a) a.push(v);
  else m.set(k, [v]);
}

function dedupe<T>(xs: T[]): T[] {
  const seen = new Set<string>();
  return xs.filter((x) => {
    const k = JSON.stringify(x);
    if (seen.has(k)) return false;
    seen.add(k);
    return true;
  });
}

/** Pools as the view needs them (invalid CIDRs are left out). */
export function poolViews(pools: Iterable<{ metadata: { name: string }; spec: IPPoolSpec }>): PoolView[] {
  const out: PoolView[] = [];
  for (const p of pools) {
    try {
      out.push({ name: p.metadata.name, cidr: parseCidr(p.spec.cidr), spec: p.spec });
    } catch {
      /* the IPAM layer reports invalid pools */
    }
  }
  return out;
}
