// The agent registers its node in the datastore: the node's own addresses
// (given with --node-ip/--node-ipv6 or autodetected) and the tunnel data the
// other nodes' agents route through (VXLAN tunnel address and VTEP MAC, IPIP
// tunnel address). Tunnel addresses come from IPAM with the handles
// `vxlan-tunnel-addr-<node>`, `vxlan-v6-tunnel-addr-<node>` and
// `ipip-tunnel-addr-<node>`, only from pools whose allowedUses include Tunnel.
import { createHash } from 'node:crypto';
import { createSocket } from 'node:dgram';
import type { Logger } from '../log/types.js';
import type { NodeSpec, Resource } from '../model/resources.js';
import type { Datastore } from '../datastore/types.js';
import { API_VERSION } from '../model/resources.js';
import { casRetry } from '../datastore/cas.js';
import { containsIP, parseCidr, tryParseIP, type Family } from '../net/cidr.js';
import { TUNNEL_HANDLES, type Ipam } from '../ipam/index.js';
import { IPIP_DEVICE, VXLAN_DEVICE, type AddrInfo, type LinkInfo } from '../dataplane/routing.js';
import { addrOf, poolViews } from './routes/desired.js';

/** Calico's IP_AUTODETECTION_METHOD forms. */
export type AutodetectMethod =
  | { kind: 'first-found' }
  | { kind: 'interface'; re: RegExp }
  | { kind: 'can-reach'; dest: string }
  | { kind: 'cidr'; cidrs: string[] };

export function parseAutodetect(s: string): AutodetectMethod {
  if (s === 'first-found') return { kind: 'first-found' };
  const eq = s.indexOf('=');
  const key = eq < 0 ? s : s.slice(0, eq);
  const val = eq < 0 ? '' : s.slice(eq + 1);
  if (key === 'interface' && val) {
    try {
      return { kind: 'interface', re: new RegExp(`^(?:${val})$`) };
    } catch (e) {
      throw new Error(`--ip-autodetection interface=${val}: not a regular expression (${(e as Error).message})`);
    }
  }
  if (key === 'can-reach' && val) {
    if (!tryParseIP(val))
      throw new Error(`--ip-autodetection can-reach=${val}: give an IP address (e.g. can-reach=8.8.8.8)`);
    return { kind: 'can-reach', dest: val };
  }
  if (key === 'cidr' && val) {
    const cidrs = val.split(',');
    for (const c of cidrs) {
      try {
        parseCidr(c, { strict: false });
      } catch {
        throw new Error(`--ip-autodetection cidr=${val}: '${c}' is not a CIDR (e.g. cidr=192.0.2.0/24)`);
      }
    }
    return { kind: 'cidr', cidrs };
  }
  throw new Error(
    `--ip-autodetection '${s}': expected first-found, interface=REGEX, can-reach=ADDR or cidr=CIDR[,CIDR]`,
  );
}

/** Interfaces first-found never picks: loopback, our own devices, container and bridge plumbing. */
const SKIP_IFACES = new RegExp(
  '^(lo|docker.*|cbr.*|virbr.*|lxcbr.*|veth.*|cni.*|br-.*|kube-ipvs.*|flannel.*|cali.*|npi.*|' +
    String.raw`vxlan\.netplugin|vx6\.netplugin|tunl\.netplugin|tunl0)$`,
);

interface AddrSource {
  addrList(opts?: { family?: 4 | 6 }): AddrInfo[];
  linkList(): LinkInfo[];
}

/** The source address the kernel picks towards `dest` (a UDP connect sends nothing). */
async function sourceFor(dest: string, family: Family): Promise<string | undefined> {
  const sock = createSocket(family === 4 ? 'udp4' : 'udp6');
  try {
    await new Promise<void>((res, rej) => {
      sock.once('error', rej);
      sock.connect(53, dest, () => res());
    });
    return sock.address().address;
  } catch {
    return undefined;
  } finally {
    sock.close();
  }
}

/** `addr/prefix` of this node for `family`, or undefined when none qualifies. */
export async function detectAddress(
  nl: AddrSource,
  family: Family,
  method: AutodetectMethod,
): Promise<string | undefined> {
  const names = new Map(nl.linkList().map((l) => [l.index, l.name]));
  // Global-scope addresses only (scope 0): link-local and host addresses never carry node traffic.
  const addrs = nl.addrList({ family }).filter((a) => a.scope === 0);
  const named = addrs.map((a) => ({ a, name: names.get(a.index) ?? '' }));
  let hit: AddrInfo | undefined;
  switch (method.kind) {
    case 'first-found':
      hit = named.find((x) => !SKIP_IFACES.test(x.name))?.a;
      break;
    case 'interface':
      hit = named.find((x) => method.re.test(x.name))?.a;
      break;
    case 'cidr': {
      const cidrs = method.cidrs.map((c) => parseCidr(c, { strict: false })).filter((c) => c.family === family);
      hit = addrs.find((a) => cidrs.some((c) => containsIP(c, tryParseIP(a.address)!)));
      break;
    }
    case 'can-reach': {
      if ((tryParseIP(method.dest)?.family ?? 4) !== family) return undefined;
      const src = await sourceFor(method.dest, family);
      hit = src ? addrs.find((a) => a.address === src) : undefined;
      break;
    }
  }
  return hit ? `${hit.address}/${hit.prefixLen}` : undefined;
}

/** A stable, locally administered unicast MAC for this node's VTEP. */
export function vtepMac(node: string, family: Family): string {
  const h = createHash('sha256').update(`${family}:${node}`).digest();
  const b = [0x66, h[0]!, h[1]!, h[2]!, h[3]!, h[4]!];
  return b.map((x) => x.toString(16).padStart(2, '0')).join(':');
}

/** Read-modify-write of the Node with CAS retries; creates it when absent. */
async function updateNode(
  ds: Datastore,
  name: string,
  edit: (spec: NodeSpec) => NodeSpec | undefined,
): Promise<Resource<'Node'>> {
  const r = await casRetry(
    ds,
    { kind: 'Node', name },
    (cur) => {
      const next = edit(structuredClone(cur?.spec ?? {}));
      if (!next) return undefined;
      return cur ? { ...cur, spec: next } : { apiVersion: API_VERSION, kind: 'Node', metadata: { name }, spec: next };
    },
    { attempts: 11 },
  );
  return r.stored!;
}

function sameJSON(a: unknown, b: unknown): boolean {
  return JSON.stringify(a) === JSON.stringify(b);
}

interface RegisterOptions {
  ds: Datastore;
  node: string;
  nl: AddrSource;
  /** --node-ip / --node-ipv6 (ADDR or ADDR/PREFIX); 'none' for no address of that family. */
  ipv4?: string;
  ipv6?: string;
  autodetect: AutodetectMethod;
  log: Logger;
}

/** Resolves the node's addresses (given or detected); ADDR without prefix gets the prefix of the local address. */
async function nodeAddresses(
  o: Pick<RegisterOptions, 'nl' | 'ipv4' | 'ipv6' | 'autodetect'>,
): Promise<{ ipv4?: string; ipv6?: string }> {
  const out: { ipv4?: string; ipv6?: string } = {};
  for (const family of [4, 6] as const) {
    const given = family === 4 ? o.ipv4 : o.ipv6;
    let v: string | undefined;
    if (given === 'none') continue;
    if (given) {
      const [addr, prefix] = given.split('/');
      const ip = tryParseIP(addr!);
      if (!ip || ip.family !== family)
        throw new Error(
          `--node-ip${family === 6 ? 'v6' : ''} '${given}' is not an IPv${family} address (ADDR or ADDR/PREFIX)`,
        );
      const local = o.nl.addrList({ family }).find((a) => a.address === addr);
      v = `${addr}/${prefix ?? local?.prefixLen ?? (family === 4 ? 32 : 128)}`;
    } else {
      // IPv6 is detected only when asked for (Calico: IP6=autodetect); IPv4 by default.
      if (family === 6 && o.ipv6 === undefined) continue;
      v = await detectAddress(o.nl, family, o.autodetect);
    }
    if (v) out[family === 4 ? 'ipv4' : 'ipv6'] = v;
  }
  return out;
}

/** Writes spec.addresses / ipv4Address / ipv6Address; returns the stored Node. */
export async function registerNode(o: RegisterOptions): Promise<Resource<'Node'>> {
  const addrs = await nodeAddresses(o);
  if (!addrs.ipv4 && !addrs.ipv6) {
    o.log.warn('no node address found: other nodes cannot route to this one; set --node-ip or --ip-autodetection', {
      node: o.node,
    });
  }
  return updateNode(o.ds, o.node, (spec) => {
    const next: NodeSpec = { ...spec };
    for (const k of ['ipv4Address', 'ipv6Address'] as const) {
      const v = k === 'ipv4Address' ? addrs.ipv4 : addrs.ipv6;
      if (v) next[k] = v;
      else delete next[k];
    }
    const others = (spec.addresses ?? []).filter((a) => a.type !== 'NetpluginNodeIP');
    next.addresses = [
      ...others,
      ...[addrs.ipv4, addrs.ipv6]
        .filter((x): x is string => !!x)
        .map((a) => ({ address: addrOf(a)!, type: 'NetpluginNodeIP' })),
    ];
    if (sameJSON(next, spec)) return undefined;
    o.log.info('registering node addresses', { node: o.node, ipv4: addrs.ipv4 ?? null, ipv6: addrs.ipv6 ?? null });
    return next;
  });
}

type TunnelKind = 'vxlan4' | 'vxlan6' | 'ipip';
const TUNNEL_FIELDS: Record<
  TunnelKind,
  { addr: keyof NodeSpec; mac?: keyof NodeSpec; family: Family; device: string }
> = {
  vxlan4: { addr: 'vxlanTunnelAddress', mac: 'vxlanTunnelMACAddr', family: 4, device: VXLAN_DEVICE[4] },
  vxlan6: { addr: 'vxlanTunnelAddressV6', mac: 'vxlanTunnelMACAddrV6', family: 6, device: VXLAN_DEVICE[6] },
  ipip: { addr: 'ipv4IPIPTunnelAddr', family: 4, device: IPIP_DEVICE },
};

/**
 * Allocates (or releases) this node's tunnel addresses so they match the
 * enabled pools' modes; records them on the Node. Pools of the mode whose
 * allowedUses include Tunnel are used, those listing Tunnel explicitly first.
 */
export async function ensureTunnelAddresses(ds: Datastore, ipam: Ipam, node: string, log: Logger): Promise<void> {
  const pools = poolViews((await ds.list('IPPool')).items).filter((p) => !p.spec.disabled);
  const nodeRes = await ds.get('Node', node).catch(() => undefined);
  const spec = nodeRes?.spec ?? {};
  for (const kind of Object.keys(TUNNEL_FIELDS) as TunnelKind[]) {
    const f = TUNNEL_FIELDS[kind];
    const candidates = pools
      .filter((p) => p.cidr.family === f.family)
      .filter((p) => {
        const vx = p.spec.vxlanMode === 'Always' || p.spec.vxlanMode === 'CrossSubnet';
        const ip = !vx && (p.spec.ipipMode === 'Always' || p.spec.ipipMode === 'CrossSubnet');
        return kind === 'ipip' ? ip : vx;
      })
      .filter((p) => (p.spec.allowedUses?.length ? p.spec.allowedUses.includes('Tunnel') : true))
      .sort(
        (a, b) =>
          Number(!!b.spec.allowedUses?.includes('Tunnel')) - Number(!!a.spec.allowedUses?.includes('Tunnel')) ||
          a.name.localeCompare(b.name),
      );
    const handle = TUNNEL_HANDLES[kind](node);
    const have = spec[f.addr] as string | undefined;
    const held = await ipam.handleAddresses(handle);
    const haveIp = addrOf(have);
    const stillInPool = haveIp && candidates.some((p) => containsIP(p.cidr, tryParseIP(haveIp)!));
    if (candidates.length && haveIp && held.includes(haveIp) && stillInPool) continue;
    if (!candidates.length && !have && !held.length) continue;
    // Whatever was held is stale now (pool gone, mode off, record lost): release and start over.
    if (held.length) await ipam.releaseByHandle(handle);
    let addr: string | undefined;
    if (candidates.length) {
      try {
        const got = await ipam.assign({
          handleID: handle,
          node,
          attrs: { type: kind === 'ipip' ? 'ipipTunnelAddress' : 'vxlanTunnelAddress', node },
          assignIPv4: f.family === 4,
          assignIPv6: f.family === 6,
          ...(f.family === 4
            ? { ipv4Pools: candidates.map((p) => p.name) }
            : { ipv6Pools: candidates.map((p) => p.name) }),
          use: 'Tunnel',
          fields: { ipv4Pools: `${kind} tunnel pools`, ipv6Pools: `${kind} tunnel pools` },
        });
        addr = got[0]?.ip;
      } catch (e) {
        log.error(`cannot allocate the ${kind} tunnel address of node ${node}`, { error: (e as Error).message });
      }
    }
    await updateNode(ds, node, (s) => {
      const next = { ...s } as Record<string, unknown>;
      if (addr) {
        next[f.addr] = addr;
        if (f.mac) next[f.mac] = vtepMac(node, f.family);
      } else {
        delete next[f.addr];
        if (f.mac) delete next[f.mac];
      }
      return sameJSON(next, s) ? undefined : (next as NodeSpec);
    });
    log.info(addr ? `${kind} tunnel address allocated` : `${kind} tunnel address released`, {
      node,
      address: addr ?? have ?? null,
      device: f.device,
    });
  }
}
