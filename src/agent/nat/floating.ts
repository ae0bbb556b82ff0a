// Floating IPs: which endpoint holds each floating address, computed from the
// datastore alone (pure). The endpoints' `ipNATs` are tenant data (written by
// the plugin from a pod annotation, and by anyone who can write a
// WorkloadEndpoint), so every entry is checked here before any node acts on it:
// both addresses canonical and of one family, the internal address one of the
// endpoint's own, the external one inside an IP pool and no endpoint's own
// address. An entry that fails is left out on its own (the endpoint's other
// entries and every other endpoint are served).
//
// Two endpoints claiming one floating IP: the one created first holds it (ties:
// the endpoint's namespace/name, in code-point order), so every node decides the
// same without talking to the others, and a pod re-created elsewhere takes the
// address over only once the old endpoint is gone. The others are reported.
//
// The NAT controller translates the claims of its own node (the nft table of
// floatingTable()); the route controller routes every other node's claims to
// that node (routes/desired.ts); BGP advertises its own node's claims.
import type { WorkloadEndpointSpec } from '../../model/resources.js';
import type { BaseChain, ElemType, ElemValue } from '../../dataplane/nft/model.js';
import {
  baseChainCommands,
  dataMapElementCommands,
  elementCommands,
  mapCommand,
  setCommand,
  tableRef,
} from '../../dataplane/nft/render.js';
import { addressOf, containsIP, formatIP, tryParseIP, type Family } from '../../net/cidr.js';
import type { PoolView } from '../routes/desired.js';

interface FloatingClaim {
  /** The floating address (canonical). */
  external: string;
  /** The endpoint's own address it is translated to (canonical, same family). */
  internal: string;
  family: Family;
  node: string;
  /** `namespace/name` of the WorkloadEndpoint. */
  endpoint: string;
  namespace: string | undefined;
  pod: string | undefined;
  /** The endpoint's creationTimestamp ('' when unknown: it then sorts first, by name). */
  created: string;
}

export interface FloatingConflict {
  external: string;
  holder: FloatingClaim;
  refused: FloatingClaim;
}

export interface FloatingInvalid {
  endpoint: string;
  node: string;
  namespace: string | undefined;
  pod: string | undefined;
  problem: string;
}

interface FloatingView {
  /** The claim that holds each floating address, by address. */
  held: Map<string, FloatingClaim>;
  conflicts: FloatingConflict[];
  invalid: FloatingInvalid[];
}

interface WepLike {
  metadata: { name: string; namespace?: string | undefined; creationTimestamp?: string | undefined };
  spec: Pick<WorkloadEndpointSpec, 'node' | 'ipNetworks' | 'ipNATs' | 'pod'>;
}

/** Who holds each floating IP of the cluster. */
export function resolveFloatingIPs(weps: Iterable<WepLike>, pools: readonly PoolView[]): FloatingView {
  const list = [...weps];
  // Every endpoint's own addresses: a floating IP equal to one would take that address from its pod.
  const owned = new Map<string, string>();
  for (const w of list) {
    for (const n of Array.isArray(w.spec.ipNetworks) ? w.spec.ipNetworks : []) {
      const ip = typeof n === 'string' ? tryParseIP(addressOf(n)) : undefined;
      if (ip) owned.set(formatIP(ip), keyOf(w));
    }
  }
  const claims: FloatingClaim[] = [];
  const invalid: FloatingInvalid[] = [];
  for (const w of list) {
    const nats = w.spec.ipNATs;
    if (nats === undefined || (Array.isArray(nats) && nats.length === 0)) continue;
    const endpoint = keyOf(w);
    const where = { endpoint, node: String(w.spec.node), namespace: w.metadata.namespace, pod: w.spec.pod };
    if (!Array.isArray(nats)) {
      invalid.push({ ...where, problem: 'ipNATs is not a list of {internalIP, externalIP}' });
      continue;
    }
    if (typeof w.spec.node !== 'string' || w.spec.node === '') {
      invalid.push({ ...where, problem: 'the endpoint names no node' });
      continue;
    }
    const own = new Set<string>();
    for (const n of Array.isArray(w.spec.ipNetworks) ? w.spec.ipNetworks : []) {
      const ip = typeof n === 'string' ? tryParseIP(addressOf(n)) : undefined;
      if (ip) own.add(formatIP(ip));
    }
    for (const nat of nats) {
      const problem = checkNat(nat, own, owned, endpoint, pools);
      if (typeof problem === 'string') {
        invalid.push({ ...where, problem });
        continue;
      }
      claims.push({
        ...problem,
        node: w.spec.node,
        endpoint,
        namespace: w.metadata.namespace,
        pod: w.spec.pod,
        created: typeof w.metadata.creationTimestamp === 'string' ? w.metadata.creationTimestamp : '',
      });
    }
  }
  claims.sort(byPrecedence);
  const held = new Map<string, FloatingClaim>();
  const conflicts: FloatingConflict[] = [];
  for (const c of claims) {
    const h = held.get(c.external);
    if (!h) held.set(c.external, c);
    else if (h.endpoint !== c.endpoint) conflicts.push({ external: c.external, holder: h, refused: c });
  }
  return { held, conflicts, invalid };
}

/** Older first, then by endpoint key: the first claim of an address holds it. */
function byPrecedence(a: FloatingClaim, b: FloatingClaim): number {
  if (a.created !== b.created) return a.created < b.created ? -1 : 1;
  return a.endpoint < b.endpoint ? -1 : a.endpoint > b.endpoint ? 1 : 0;
}

function keyOf(w: WepLike): string {
  return `${w.metadata.namespace ?? ''}/${w.metadata.name}`;
}

function checkNat(
  nat: unknown,
  own: ReadonlySet<string>,
  owned: ReadonlyMap<string, string>,
  endpoint: string,
  pools: readonly PoolView[],
): string | { external: string; internal: string; family: Family } {
  const o = nat as { internalIP?: unknown; externalIP?: unknown } | null;
  const ext = typeof o?.externalIP === 'string' ? tryParseIP(o.externalIP) : undefined;
  const int = typeof o?.internalIP === 'string' ? tryParseIP(o.internalIP) : undefined;
  const shown = JSON.stringify(nat)?.slice(0, 200);
  if (!ext) return `ipNATs entry ${shown}: externalIP is not an IP address`;
  if (!int) return `ipNATs entry ${shown}: internalIP is not an IP address`;
  const external = formatIP(ext);
  const internal = formatIP(int);
  if (ext.family !== int.family)
    return `floating IP ${external} is IPv${ext.family} but its internalIP ${internal} is not`;
  if (!own.has(internal)) {
    return `floating IP ${external}: internalIP ${internal} is not one of the endpoint's own addresses`;
  }
  if (!pools.some((p) => p.cidr.family === ext.family && containsIP(p.cidr, ext))) {
    return `floating IP ${external} is not inside any IP pool`;
  }
  const taken = owned.get(external);
  if (taken !== undefined) {
    return `floating IP ${external} is the address of endpoint ${taken === endpoint ? 'itself' : taken}`;
  }
  return { external, internal, family: ext.family };
}

/** The floating IPs a node holds (its own endpoints' claims that won). */
export function heldBy(view: FloatingView, node: string): FloatingClaim[] {
  return [...view.held.values()].filter((c) => c.node === node);
}

/** The node's floating IP table (family inet: one table for both families). */
export const FLOATING_TABLE = 'netplugin-floating';

/**
 * The script that makes the floating IP table exactly what `claims` (this
 * node's) ask for, replaced whole in one transaction. Per family:
 *   fipN   map  floating -> internal: DNAT of what arrives at the node
 *          (prerouting: other nodes, outside, local pods) or leaves a local
 *          process (output); the client's source is kept;
 *   selfN  set  internal . internal, snatN map internal -> floating: hairpin,
 *          the pod reaching its own floating IP: after DNAT its packet would
 *          come back from its own address, which it drops, so the source
 *          becomes the floating IP.
 * Replies are translated back by conntrack. Addresses reach nftables only as
 * typed elements (render.ts checks each again); no tenant value is a token of
 * a rule.
 */
export function floatingScript(claims: readonly FloatingClaim[], table = FLOATING_TABLE): string {
  const T = tableRef(table);
  const out = [`table ${T} {}`, `delete table ${T}`];
  if (claims.length === 0) return out.join('\n') + '\n';
  out.push(`add table ${T}`);
  const chains: BaseChain[] = [
    {
      name: 'prerouting',
      type: 'nat',
      hook: 'prerouting',
      priority: -100,
      policy: 'accept',
      comment: 'floating IPs: DNAT',
      rules: [],
    },
    {
      name: 'output',
      type: 'nat',
      hook: 'output',
      priority: -100,
      policy: 'accept',
      comment: 'floating IPs: DNAT',
      rules: [],
    },
    {
      name: 'postrouting',
      type: 'nat',
      hook: 'postrouting',
      priority: 100,
      policy: 'accept',
      comment: 'floating IPs: hairpin',
      rules: [],
    },
  ];
  const elems: string[] = [];
  for (const family of [4, 6] as const) {
    const mine = claims.filter((c) => c.family === family).sort((a, b) => (a.external < b.external ? -1 : 1));
    if (mine.length === 0) continue;
    const t: ElemType = family === 4 ? 'ipv4_addr' : 'ipv6_addr';
    const [fip, self, snat] = [`fip${family}`, `self${family}`, `snat${family}`];
    out.push(mapCommand(T, fip, { key: [t], data: t, comment: 'floating IP -> the address of the pod holding it' }));
    out.push(setCommand(T, self, { type: [t, t], comment: 'pod address . pod address: hairpin', elements: new Map() }));
    out.push(mapCommand(T, snat, { key: [t], data: t, comment: 'pod address -> its floating IP (hairpin source)' }));
    const dnat = {
      matches: [],
      stmts: [{ s: 'natMap' as const, nat: 'dnat' as const, family, key: 'd' as const, map: fip }],
    };
    chains[0]!.rules.push(dnat);
    chains[1]!.rules.push(dnat);
    chains[2]!.rules.push({
      matches: [{ m: 'ctStatusDnat' }, { m: 'addrPairSet', family, set: self }],
      stmts: [{ s: 'natMap', nat: 'snat', family, key: 's', map: snat }],
    });
    elems.push(
      ...dataMapElementCommands(
        T,
        'add',
        fip,
        [t],
        t,
        mine.map((c): [ElemValue[], ElemValue] => [[c.external], c.internal]),
      ),
    );
    const firstOf = new Map<string, string>();
    for (const c of mine) if (!firstOf.has(c.internal)) firstOf.set(c.internal, c.external);
    elems.push(
      ...elementCommands(
        T,
        'add',
        self,
        [t, t],
        [...firstOf.keys()].map((i) => [i, i]),
      ),
    );
    elems.push(
      ...dataMapElementCommands(
        T,
        'add',
        snat,
        [t],
        t,
        [...firstOf].map(([i, e]): [ElemValue[], ElemValue] => [[i], e]),
      ),
    );
  }
  for (const c of chains) out.push(...baseChainCommands(T, c));
  out.push(...elems);
  return out.join('\n') + '\n';
}

/**
 * The translations a floating table listing holds (`nft list map` of fip4/fip6):
 * floating -> internal. An agent reads what an earlier run left, so that its
 * first apply also cuts the connections of floating IPs it no longer translates.
 */
export function parseTranslations(listing: string): Map<string, string> {
  const out = new Map<string, string>();
  const m = /elements\s*=\s*\{([^}]*)\}/.exec(listing);
  if (!m) return out;
  for (const item of m[1]!.split(',')) {
    const [e, i] = item.split(' : ').map((x) => tryParseIP(x.trim()));
    if (e && i) out.set(formatIP(e), formatIP(i));
  }
  return out;
}
