// The BIRD 2 configuration of one node, rendered from the datastore's view of
// the cluster. Pure: the supervisor (./supervisor.ts) gathers the input, writes
// the files and reloads BIRD.
//
// Every value taken from a datastore object is re-parsed and re-formatted here
// before it is written (addresses from their parsed form, numbers as integers,
// interface globs and protocol names from a closed alphabet); a peer that fails
// is left out with a warning, so one bad object never breaks the others'
// sessions. Passwords go to one root-only file per session, included from the
// main file, and are refused when BIRD's strings (no escapes) cannot hold them.
//
// What is advertised: a static protocol per family holds exactly the prefixes
// this node originates (its affine blocks of enabled BGP-mode pools, addresses
// it holds in other nodes' blocks, floating IPs and ipAddrsNoIpam addresses in
// such pools, the service ranges); the BGP export filters accept that protocol
// only, plus, on a route reflector towards its iBGP peers, the routes it
// reflects inside the pools. What is learned goes to the kernel (proto bird)
// through the kernel protocol, except routes of IPIP pools, which stay with the
// route controller (it programs them through the tunnel device, which BIRD 2
// cannot express). The kernel's own blackholes of our blocks are not BIRD's and
// stay.
import {
  bgpConfigurationNode,
  bgpPeerProblems,
  DEFAULT_AS_NUMBER,
  DEFAULT_BGP_PORT,
  DEFAULT_RESTART_MS,
  durationSeconds,
  parsePeerIP,
  passwordProblem,
  protocolName,
  type PeerType,
} from '../../model/bgp.js';
import type {
  BGPConfigurationSpec,
  BGPLogSeverity,
  BGPPeerSpec,
  IPPoolSpec,
  NodeSpec,
  Resource,
} from '../../model/resources.js';
import {
  addressOf,
  containsCidr,
  containsIP,
  formatCidr,
  formatIP,
  tryParseCidr,
  tryParseIP,
  type Cidr,
  type Family,
  type IP,
} from '../../net/cidr.js';
import { parseSelector } from '../../selector/index.js';
import { birdRoutesPool } from '../routes/desired.js';

export interface BirdInput {
  /** This node's name. */
  me: string;
  nodes: ReadonlyArray<Pick<Resource<'Node'>, 'metadata' | 'spec'>>;
  configs: ReadonlyArray<Pick<Resource<'BGPConfiguration'>, 'metadata' | 'spec'>>;
  peers: ReadonlyArray<Pick<Resource<'BGPPeer'>, 'metadata' | 'spec'>>;
  pools: ReadonlyArray<{ name: string; spec: IPPoolSpec }>;
  /** Blocks affine to this node (CIDRs). */
  blocks: readonly string[];
  /** Addresses this node holds in other nodes' blocks. */
  borrowed: readonly string[];
  /** Floating IPs and ipAddrsNoIpam addresses of this node's pods. */
  extraAddresses: readonly string[];
  /** This node's directly connected subnets: a peer inside one is reached directly, others by multihop. */
  subnets: readonly Cidr[];
  /** BGPPeer name -> password, read by the caller from password.file or password.secretKeyRef. */
  passwords: ReadonlyMap<string, string>;
  /** Where the password files are written (the --bird-run-dir). */
  runDir: string;
}

interface RenderedPeer {
  /** BIRD protocol name. */
  protocol: string;
  type: PeerType;
  address: string;
  family: Family;
  asNumber: number;
}

export interface BirdConfig {
  config: string;
  /** File name under runDir -> content (mode 0600). */
  secrets: Map<string, string>;
  peers: RenderedPeer[];
  /** Prefixes advertised, per family (canonical CIDRs). */
  advertised: Record<Family, string[]>;
  warnings: string[];
}

const STATIC_PROTOCOL: Record<Family, string> = { 4: 'netplugin_static4', 6: 'netplugin_static6' };

const LOG_CLASSES: Record<BGPLogSeverity, string> = {
  Debug: 'all',
  Info: '{ info, remote, warning, error, auth, fatal, bug }',
  Warning: '{ warning, error, auth, fatal, bug }',
  Error: '{ error, fatal, bug }',
  Fatal: '{ fatal, bug }',
};

/** Host-side veth prefix and our own devices: never BIRD's interfaces. */
const POD_AND_TUNNEL_IFACES = ['npi*', '*.netplugin'];

interface NodeInfo {
  name: string;
  labels: Record<string, string>;
  addr: Record<Family, IP | undefined>;
  asNumber: number;
  port: number;
  rrClusterID: string | undefined;
}

function ipOf(s: string | undefined): IP | undefined {
  return s ? tryParseIP(addressOf(s)) : undefined;
}

/** The node's BGP address of a family: Node.spec.bgp, else the address its agent registered. */
function nodeAddress(spec: NodeSpec, family: Family): IP | undefined {
  const k = family === 4 ? 'ipv4Address' : 'ipv6Address';
  const a = ipOf(spec.bgp?.[k]) ?? ipOf(spec[k]);
  return a?.family === family ? a : undefined;
}

function dottedQuad(s: string | undefined): string | undefined {
  if (s === undefined) return undefined;
  const ip = tryParseIP(s);
  return ip?.family === 4 ? formatIP(ip) : undefined;
}

function int(n: unknown, min: number, max: number): number | undefined {
  return typeof n === 'number' && Number.isInteger(n) && n >= min && n <= max ? n : undefined;
}

const asn = (n: unknown) => int(n, 1, 4294967295);

/** A deterministic router ID for a node without IPv4 (BIRD needs one). */
function hashRouterID(name: string): string {
  let h = 2166136261;
  for (const c of Buffer.from(name)) h = Math.imul(h ^ c, 16777619) >>> 0;
  return formatIP(4, BigInt(h));
}

function setLine(prefixes: readonly string[]): string {
  return `[ ${prefixes.join(', ')} ]`;
}

/** Quoting for values this module produced itself (paths checked by checkRunDir, interface globs). */
function quote(s: string): string {
  if (!/^[A-Za-z0-9_.*/@-]+$/.test(s))
    throw new Error(`internal: ${JSON.stringify(s)} cannot be written as a BIRD string`);
  return `"${s}"`;
}

export function checkRunDir(dir: string): void {
  if (!/^\/[A-Za-z0-9_./-]*$/.test(dir)) {
    throw new Error(
      `--bird-run-dir ${JSON.stringify(dir)} must be an absolute path of letters, digits and _ . / - (BIRD includes ` +
        `files from it)`,
    );
  }
}

export function renderBirdConfig(input: BirdInput): BirdConfig {
  checkRunDir(input.runDir);
  const warnings: string[] = [];
  const configs = new Map<string, BGPConfigurationSpec>();
  for (const c of input.configs) configs.set(c.metadata.name, c.spec);
  const global = configs.get('default') ?? {};
  const nodeConfig = (n: string) => configs.get(`node.${n}`) ?? {};
  for (const name of configs.keys()) {
    try {
      bgpConfigurationNode(name);
    } catch (e) {
      warnings.push(`${(e as Error).message}; ignored`);
    }
  }

  const nodes = new Map<string, NodeInfo>();
  for (const n of input.nodes) {
    const nc = nodeConfig(n.metadata.name);
    nodes.set(n.metadata.name, {
      name: n.metadata.name,
      labels: n.metadata.labels ?? {},
      addr: { 4: nodeAddress(n.spec, 4), 6: nodeAddress(n.spec, 6) },
      asNumber: asn(n.spec.bgp?.asNumber) ?? asn(nc.asNumber) ?? asn(global.asNumber) ?? DEFAULT_AS_NUMBER,
      port: int(nc.listenPort, 1, 65535) ?? int(global.listenPort, 1, 65535) ?? DEFAULT_BGP_PORT,
      rrClusterID: dottedQuad(n.spec.bgp?.routeReflectorClusterID),
    });
  }
  const me = nodes.get(input.me);
  if (!me)
    throw new Error(`node ${input.me} is not registered in the datastore: no BGP configuration without its addresses`);
  const mine = nodeConfig(input.me);
  const severity: BGPLogSeverity = mine.logSeverityScreen ?? global.logSeverityScreen ?? 'Info';

  // Pools in BGP mode: no VXLAN. IPIP ones are advertised, their learned routes stay with the route controller.
  const pools: Array<{ cidr: Cidr; ipip: boolean; blockSize: number }> = [];
  for (const p of input.pools) {
    const cidr = tryParseCidr(p.spec.cidr);
    if (!cidr) {
      warnings.push(`IPPool ${p.name}: cidr ${JSON.stringify(p.spec.cidr)} is invalid; not advertised`);
      continue;
    }
    if (p.spec.disabled || (p.spec.vxlanMode !== undefined && p.spec.vxlanMode !== 'Never')) continue;
    const ipip = !birdRoutesPool(p.spec, cidr.family);
    const blockSize = int(p.spec.blockSize, 0, 128) ?? (cidr.family === 4 ? 26 : 122);
    pools.push({ cidr, ipip, blockSize });
  }
  const inPool = (c: Cidr) => pools.some((p) => p.cidr.family === c.family && containsCidr(p.cidr, c));

  const advertised: Record<Family, Set<string>> = { 4: new Set(), 6: new Set() };
  const add = (c: Cidr) => advertised[c.family].add(formatCidr(c));
  for (const b of input.blocks) {
    const c = tryParseCidr(b);
    if (c && inPool(c)) add(c);
  }
  for (const a of [...input.borrowed, ...input.extraAddresses]) {
    const ip = tryParseIP(addressOf(a));
    if (!ip) continue;
    const host: Cidr = { family: ip.family, base: ip.value, prefix: ip.family === 4 ? 32 : 128 };
    if (inPool(host)) add(host);
  }
  const services = [
    ...(global.serviceClusterIPs ?? []),
    ...(global.serviceExternalIPs ?? []),
    ...(global.serviceLoadBalancerIPs ?? []),
  ];
  for (const s of services) {
    const c = tryParseCidr(s.cidr);
    if (c) add(c);
    else warnings.push(`BGPConfiguration default: service range ${JSON.stringify(s.cidr)} is invalid; not advertised`);
  }

  const peers: Array<RenderedPeer & { body: string[]; ibgp: boolean }> = [];
  const secrets = new Map<string, string>();
  const taken = new Set<string>();
  const meshOn = global.nodeToNodeMeshEnabled !== false;
  const myRestart = (s: string | undefined) =>
    (s !== undefined ? durationSeconds(s) : undefined) ?? DEFAULT_RESTART_MS / 1000;
  const direct = (ip: IP) => input.subnets.some((s) => s.family === ip.family && containsIP(s, ip));

  const addPeer = (
    type: PeerType,
    ip: IP,
    port: number | undefined,
    asNumber: number,
    opts: { peerName?: string; spec?: BGPPeerSpec; restart: number; rrClient?: string | undefined },
  ) => {
    const family = ip.family;
    const local = me.addr[family];
    if (!local) {
      warnings.push(`${type} peer ${formatIP(ip)}: this node has no IPv${family} address for BGP; skipped`);
      return;
    }
    if (local.value === ip.value) return;
    const protocol = protocolName(type, ip, port);
    // One session per address: node-specific peers before global ones before the mesh.
    const key = `${formatIP(ip)}|${port ?? DEFAULT_BGP_PORT}`;
    if (taken.has(key)) return;
    const spec = opts.spec;
    const body: string[] = [];
    const src = spec?.sourceAddress === 'None' ? '' : ` ${formatIP(local)}`;
    body.push(`local${src} port ${me.port} as ${me.asNumber};`);
    body.push(`neighbor ${formatIP(ip)} port ${port ?? DEFAULT_BGP_PORT} as ${asNumber};`);
    const ttl = int(spec?.ttlSecurity, 1, 255);
    if (ttl !== undefined) body.push('ttl security on;', ttl > 1 || !direct(ip) ? `multihop ${ttl};` : 'direct;');
    else body.push(direct(ip) ? 'direct;' : 'multihop;');
    body.push('graceful restart on;', `graceful restart time ${opts.restart};`);
    if (opts.rrClient) body.push('rr client;', `rr cluster id ${opts.rrClient};`);
    if (spec?.password && opts.peerName !== undefined) {
      const pw = input.passwords.get(opts.peerName);
      const problem = pw === undefined ? 'its password could not be read' : passwordProblem(pw);
      if (problem) {
        warnings.push(`BGPPeer ${opts.peerName}: ${problem}; session to ${formatIP(ip)} not configured`);
        return;
      }
      const file = `${protocol}.password.conf`;
      secrets.set(file, `password "${pw}";\n`);
      body.push(`include ${quote(`${input.runDir}/${file}`)};`);
    }
    taken.add(key);
    const ibgp = asNumber === me.asNumber;
    const reflects = ibgp && me.rrClusterID !== undefined;
    const ch = [
      `import filter netplugin_import${family};`,
      `export filter netplugin_export${reflects ? '_reflect' : ''}${family};`,
    ];
    if (spec?.keepOriginalNextHop) ch.push('next hop keep;');
    else if (!reflects) ch.push('next hop self;');
    body.push(`ipv${family} {`, ...ch.map((l) => `  ${l}`), '};');
    peers.push({ protocol, type, address: formatIP(ip), family, asNumber, body, ibgp });
  };

  const myLabels = me.labels;
  const selects = (expr: string | undefined, labels: Record<string, string>): boolean => {
    if (expr === undefined) return false;
    return parseSelector(expr).matches(labels);
  };
  const sorted = [...input.peers].sort((a, b) => a.metadata.name.localeCompare(b.metadata.name));
  const appliesHere = (p: BGPPeerSpec) =>
    p.node !== undefined
      ? p.node === input.me
      : p.nodeSelector !== undefined
        ? selects(p.nodeSelector, myLabels)
        : true;
  for (const pass of ['node specific', 'global'] as const) {
    for (const p of sorted) {
      const spec = p.spec;
      const type: PeerType = spec.node !== undefined || spec.nodeSelector !== undefined ? 'node specific' : 'global';
      if (type !== pass) continue;
      const problems = (() => {
        try {
          return bgpPeerProblems(spec);
        } catch (e) {
          return [{ path: '', message: (e as Error).message }];
        }
      })();
      if (problems.length) {
        warnings.push(
          `BGPPeer ${p.metadata.name}: ${problems.map((x) => `spec.${x.path}: ${x.message}`).join('; ')}; skipped`,
        );
        continue;
      }
      let applies: boolean;
      try {
        if (spec.peerSelector !== undefined) parseSelector(spec.peerSelector);
        applies = appliesHere(spec);
      } catch (e) {
        warnings.push(`BGPPeer ${p.metadata.name}: ${(e as Error).message}; skipped`);
        continue;
      }
      if (!applies) continue;
      const restart = myRestart(spec.maxRestartTime);
      if (spec.peerIP !== undefined) {
        const a = parsePeerIP(spec.peerIP)!;
        addPeer(type, a.ip, a.port, asn(spec.asNumber)!, { peerName: p.metadata.name, spec, restart });
        continue;
      }
      for (const n of [...nodes.values()].sort((a, b) => a.name.localeCompare(b.name))) {
        if (n.name === input.me || !selects(spec.peerSelector, n.labels)) continue;
        for (const fam of [4, 6] as const) {
          const ip = n.addr[fam];
          if (!ip) continue;
          const rrClient =
            me.rrClusterID !== undefined && n.rrClusterID !== me.rrClusterID ? me.rrClusterID : undefined;
          addPeer(type, ip, n.port === DEFAULT_BGP_PORT ? undefined : n.port, n.asNumber, {
            peerName: p.metadata.name,
            spec,
            restart,
            rrClient,
          });
        }
      }
    }
  }
  if (meshOn) {
    const restart = myRestart(global.nodeMeshMaxRestartTime);
    for (const n of [...nodes.values()].sort((a, b) => a.name.localeCompare(b.name))) {
      if (n.name === input.me) continue;
      for (const fam of [4, 6] as const) {
        const ip = n.addr[fam];
        if (ip && me.addr[fam])
          addPeer('node-to-node mesh', ip, n.port === DEFAULT_BGP_PORT ? undefined : n.port, n.asNumber, { restart });
      }
    }
  }

  const ignored: string[] = [];
  for (const i of [...(global.ignoredInterfaces ?? []), ...(mine.ignoredInterfaces ?? [])]) {
    if (/^[A-Za-z0-9_.@*-]{1,32}$/.test(i)) ignored.push(i);
    else
      warnings.push(`BGPConfiguration: ignoredInterfaces entry ${JSON.stringify(i)} is not an interface name; ignored`);
  }

  const routerID = me.addr[4] ? formatIP(me.addr[4]) : hashRouterID(me.name);
  const L: string[] = [];
  L.push(`# BIRD configuration of node ${me.name}, rendered by netplugin-node; changes are overwritten.`);
  L.push(`router id ${routerID};`);
  L.push(`log stderr ${LOG_CLASSES[severity]};`);
  if (severity === 'Debug') L.push('debug protocols { states, events };');
  L.push('timeformat protocol iso long;', '');
  L.push('protocol device {', '  scan time 10;', '}', '');
  L.push('# Connected subnets, for next hops of multihop sessions; pod and tunnel devices excluded.');
  const ifaces = [...[...POD_AND_TUNNEL_IFACES, ...ignored].map((i) => `-${quote(i)}`), '"*"'].join(', ');
  L.push('protocol direct {', '  ipv4;', '  ipv6;', `  interface ${ifaces};`, '}', '');
  for (const fam of [4, 6] as const) {
    const own = [...advertised[fam]].sort();
    const max = fam === 4 ? 32 : 128;
    const famPools = pools.filter((p) => p.cidr.family === fam);
    L.push(`# What this node originates over IPv${fam}: exactly these prefixes.`);
    L.push(`protocol static ${STATIC_PROTOCOL[fam]} {`, `  ipv${fam};`);
    for (const c of own) L.push(`  route ${c} blackhole;`);
    L.push('}', '');
    L.push(`filter netplugin_export${fam} {`, `  if proto = "${STATIC_PROTOCOL[fam]}" then accept;`, '  reject;', '}');
    L.push(`filter netplugin_export_reflect${fam} {`, `  if proto = "${STATIC_PROTOCOL[fam]}" then accept;`);
    if (famPools.length)
      L.push(
        `  if source = RTS_BGP && net ~ ` +
          `${setLine(famPools.map((p) => `${formatCidr(p.cidr)}{${p.blockSize},${max}}`))} then accept;`,
      );
    L.push('  reject;', '}');
    L.push(`filter netplugin_import${fam} {`);
    if (own.length) L.push(`  if net ~ ${setLine(own)} then reject;`);
    L.push('  accept;', '}');
    const ipip = famPools.filter((p) => p.ipip);
    L.push(`filter netplugin_kernel${fam} {`);
    if (ipip.length) {
      L.push('  # IPIP pools: the route controller programs these through the tunnel device.');
      L.push(`  if net ~ ${setLine(ipip.map((p) => `${formatCidr(p.cidr)}+`))} then reject;`);
    }
    L.push('  if source = RTS_BGP then accept;', '  reject;', '}');
    L.push(
      `protocol kernel kernel${fam} {`,
      `  ipv${fam} {`,
      '    import all;',
      `    export filter netplugin_kernel${fam};`,
      '  };',
    );
    L.push('  learn;', '  persist;', '  scan time 10;', '  graceful restart;', '  merge paths on;', '}', '');
  }
  for (const p of peers) {
    L.push(`# ${p.type} peer ${p.address} (AS ${p.asNumber})`);
    L.push(`protocol bgp ${p.protocol} {`, ...p.body.map((l) => `  ${l}`), '}', '');
  }
  return {
    config: L.join('\n'),
    secrets,
    peers: peers.map(({ protocol, type, address, family, asNumber }) => ({
      protocol,
      type,
      address,
      family,
      asNumber,
    })),
    advertised: { 4: [...advertised[4]].sort(), 6: [...advertised[6]].sort() },
    warnings,
  };
}
