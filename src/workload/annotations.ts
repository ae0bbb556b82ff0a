// Orchestrator annotations: every key in one place, one schema that parses
// them, and the address-selection precedence (docs/addresses-and-annotations.md
// Errors 1-8) written once. The rest of the plugin receives a typed
// AddressRequest and never reads annotations itself.
//
// Hand-written rather than zod: the schema is five list-valued keys, and the
// per-pod path should not pay for a schema library it does not otherwise need.
import { WorkloadError } from './errors.js';
import type { Logger } from '../log/types.js';
import { cidrEquals, containsCidr, containsIP, formatIP, tryParseCidr, tryParseIP, type IP } from '../net/cidr.js';

import { ANNOTATIONS } from '../model/annotations.js';

/** The netconf flags that gate annotations (docs/addresses-and-annotations.md), and why they are off by default. */
const FEATURE_FLAGS = {
  ipAddrsNoIpam: 'feature_control.ip_addrs_no_ipam',
  floatingIPs: 'feature_control.floating_ips',
} as const;
const FEATURE_CAUTION: Record<keyof typeof FEATURE_FLAGS, string> = {
  ipAddrsNoIpam: 'ipAddrsNoIpam lets a pod use any address, which allows bypassing network policy by IP spoofing',
  floatingIPs: 'floating IPs may let a pod receive traffic not intended for it',
};

type ReadKey = 'ipv4Pools' | 'ipv6Pools' | 'ipAddrs' | 'ipAddrsNoIpam' | 'floatingIPs';

/**
 * The one schema: which object may carry each annotation, what its list holds.
 * `namespace: true` means a namespace's value applies to every pod in it unless
 * the pod carries the same key (docs/addresses-and-annotations.md).
 */
const SCHEMA: Record<ReadKey, { key: string; namespace: boolean; items: 'pool' | 'address'; perFamilyMax?: number }> = {
  ipv4Pools: { key: ANNOTATIONS.ipv4Pools, namespace: true, items: 'pool' },
  ipv6Pools: { key: ANNOTATIONS.ipv6Pools, namespace: true, items: 'pool' },
  // docs/addresses-and-annotations.md: one IPv4, one IPv6, or one of each.
  ipAddrs: { key: ANNOTATIONS.ipAddrs, namespace: false, items: 'address', perFamilyMax: 1 },
  ipAddrsNoIpam: { key: ANNOTATIONS.ipAddrsNoIpam, namespace: false, items: 'address', perFamilyMax: 1 },
  floatingIPs: { key: ANNOTATIONS.floatingIPs, namespace: false, items: 'address' },
};

/** Where a value came from, for messages and logs. */
interface OptionSource {
  from: 'pod' | 'namespace' | 'netconf' | 'cni-args';
  /** Annotation key, netconf field (`ipam.ipv4_pools`) or `CNI_ARGS IP`. */
  key: string;
  /** The raw value as written. */
  value: string;
  /** `pod default/web-0`, `namespace default`, `netconf`, `CNI_ARGS`. */
  object: string;
}

/** The parsed annotations of one pod (and its namespace), precedence between pod and namespace applied. */
interface WorkloadOptions {
  ipv4Pools?: string[];
  ipv6Pools?: string[];
  /** Allocated through IPAM (recorded, cannot be taken twice). */
  ipAddrs?: string[];
  ipAddrsNoIpam?: string[];
  floatingIPs?: string[];
  source: Partial<Record<ReadKey, OptionSource>>;
}

/** The pool facts address selection needs (from `Datastore.list('IPPool')`: see poolsFromResources). */
/** A pool's optional fields are copied from the IPPool's spec, which may lack them. */
export interface PoolInfo {
  name: string;
  cidr: string;
  vxlanMode?: string | undefined;
  ipipMode?: string | undefined;
  disabled?: boolean | undefined;
}

export interface ResolveInput {
  podAnnotations?: Record<string, string>;
  namespaceAnnotations?: Record<string, string>;
  /** Names the objects in messages. */
  pod?: { namespace: string; name: string };
  conf: {
    ipam?: {
      ipv4_pools?: string[] | undefined;
      ipv6_pools?: string[] | undefined;
      assign_ipv4?: string | boolean;
      assign_ipv6?: string | boolean;
    };
    feature_control?: { ip_addrs_no_ipam?: boolean; floating_ips?: boolean };
  };
  /** `IP=` from CNI_ARGS: one IPv4 and/or one IPv6, comma-separated. */
  cniArgsIP?: string;
  /** Every existing IPPool (enabled or not). */
  pools: PoolInfo[];
  log?: Logger;
}

/** What IPAM and the endpoint writer receive. Feed the first five fields to IPAM `assign()`. */
export interface AddressRequest {
  assignIPv4: boolean;
  assignIPv6: boolean;
  /**
   * Pool names (resolved from names or CIDRs); undefined = IPAM's default (pools whose nodeSelector selects the node).
   */
  ipv4Pools?: string[];
  ipv6Pools?: string[];
  /** Specific addresses to allocate through IPAM (ipAddrs annotation or CNI_ARGS IP=), canonical text, no prefix. */
  requestedIPs?: string[];
  /** Addresses to configure with no IPAM record (ipAddrsNoIpam). When set, IPAM assigns nothing. */
  noIpamIPs?: string[];
  /**
   * External addresses for the endpoint's ipNATs; pair them with pairFloatingIPs() once the pod's addresses are known.
   */
  floatingIPs?: string[];
  /** Also logged at WARNING. */
  warnings: string[];
  /** Which input each decision came from. */
  source: { ipv4Pools?: OptionSource; ipv6Pools?: OptionSource; addresses?: OptionSource; floatingIPs?: OptionSource };
}

// ---------------------------------------------------------------------------
// Parsing (the schema)
// ---------------------------------------------------------------------------

function quote(v: string): string {
  return `'${v.length > 200 ? v.slice(0, 200) + '...' : v}'`;
}

function describe(src: OptionSource): string {
  return src.from === 'pod' || src.from === 'namespace'
    ? `annotation ${src.key} on ${src.object}`
    : `${src.key} in the ${src.object}`;
}

function malformed(src: OptionSource, why: string, fix: string): WorkloadError {
  return new WorkloadError('malformed', `${describe(src)} has value ${quote(src.value)}: ${why}; ${fix}`);
}

const EXAMPLE: Record<'pool' | 'address', string> = {
  pool: `'["default-ipv4-ippool"]' or '["10.244.0.0/16"]'`,
  address: `'["10.244.1.5"]' or '["10.244.1.5", "fd00::5"]'`,
};

/** A string holding a JSON array of non-empty strings; anything else is an error that quotes the value. */
function parseList(src: OptionSource, items: 'pool' | 'address'): string[] {
  const example =
    src.key === ANNOTATIONS.ipv6Pools ? `'["default-ipv6-ippool"]' or '["fd00:10:244::/64"]'` : EXAMPLE[items];
  const fix = `write a JSON array of strings, e.g. ${example}`;
  let parsed: unknown;
  try {
    parsed = JSON.parse(src.value);
  } catch (e) {
    throw malformed(src, `not valid JSON (${(e as Error).message})`, fix);
  }
  if (!Array.isArray(parsed)) {
    throw malformed(src, `a JSON ${parsed === null ? 'null' : typeof parsed}, not an array`, fix);
  }
  if (parsed.length === 0) {
    throw malformed(src, 'the list is empty', `list at least one ${items}, or remove the annotation`);
  }
  return parsed.map((v, i) => {
    if (typeof v !== 'string') {
      throw malformed(
        src,
        `element ${i} is ` +
          (v === null
            ? 'null'
            : Array.isArray(v)
              ? 'an array'
              : typeof v === 'object'
                ? 'an object'
                : `a ${typeof v}`) +
          ', not a string',
        fix,
      );
    }
    const s = v.trim();
    if (s === '') throw malformed(src, `element ${i} is an empty string`, fix);
    return s;
  });
}

/** Addresses: valid, no prefix length, at most `perFamilyMax` per family; returned in canonical text. */
function parseAddresses(src: OptionSource, list: string[], perFamilyMax?: number): string[] {
  const out: string[] = [];
  const count = { 4: 0, 6: 0 };
  for (const s of list) {
    const ip = tryParseIP(s);
    if (!ip) {
      const hint = s.includes('/')
        ? 'write the address without a prefix length'
        : 'each element must be an IPv4 or IPv6 address';
      throw malformed(src, `${JSON.stringify(s)} is not an IP address`, hint);
    }
    count[ip.family]++;
    if (perFamilyMax !== undefined && count[ip.family] > perFamilyMax) {
      throw malformed(
        src,
        `it holds more than one IPv${ip.family} address`,
        'give at most one IPv4 and one IPv6 address',
      );
    }
    const text = formatIP(ip);
    if (!out.includes(text)) out.push(text);
  }
  return out;
}

/**
 * Parse the annotations of a pod and its namespace. Pod-over-namespace is per
 * key: a pod's `ipv4pools` replaces the namespace's `ipv4pools` wholesale (no
 * merging of lists), and a namespace value the pod overrides is not read at all.
 * Address annotations are only honoured on pods. Throws code 7 for malformed
 * values and for ipAddrs + ipAddrsNoIpam together.
 */
export function parseWorkloadAnnotations(
  podAnnotations: Record<string, string> = {},
  namespaceAnnotations: Record<string, string> = {},
  pod?: { namespace: string; name: string },
): WorkloadOptions {
  const podObj = pod ? `pod ${pod.namespace}/${pod.name}` : 'the pod';
  const nsObj = pod ? `namespace ${pod.namespace}` : "the pod's namespace";
  const out: WorkloadOptions = { source: {} };
  for (const field of Object.keys(SCHEMA) as ReadKey[]) {
    const rule = SCHEMA[field];
    let src: OptionSource | undefined;
    const pv = podAnnotations[rule.key];
    const nv = rule.namespace ? namespaceAnnotations[rule.key] : undefined;
    if (pv !== undefined) src = { from: 'pod', key: rule.key, value: pv, object: podObj };
    else if (nv !== undefined) src = { from: 'namespace', key: rule.key, value: nv, object: nsObj };
    if (!src) continue;
    const list = parseList(src, rule.items);
    out[field] = rule.items === 'address' ? parseAddresses(src, list, rule.perFamilyMax) : list;
    out.source[field] = src;
  }
  // docs/addresses-and-annotations.md.
  if (out.ipAddrs && out.ipAddrsNoIpam) {
    throw new WorkloadError(
      'malformed',
      `${podObj} carries both ${ANNOTATIONS.ipAddrs} (${quote(out.source.ipAddrs!.value)}) and ` +
        `${ANNOTATIONS.ipAddrsNoIpam} ` +
        `(${quote(out.source.ipAddrsNoIpam!.value)}): they cannot be used together; keep only one of them`,
    );
  }
  return out;
}

// ---------------------------------------------------------------------------
// Resolution against the netconf and the existing pools
// ---------------------------------------------------------------------------

function semantic(src: OptionSource, why: string, fix: string): WorkloadError {
  // An annotation problem is the orchestrator's (102); the same problem in the netconf is a config error (7).
  const kind = src.from === 'pod' || src.from === 'namespace' ? 'annotation-not-honoured' : 'invalid-setting';
  return new WorkloadError(kind, `${describe(src)} has value ${quote(src.value)}: ${why}; ${fix}`);
}

function listPools(pools: PoolInfo[]): string {
  if (pools.length === 0) return 'no IP pools exist';
  const shown = pools.slice(0, 10).map((p) => `${p.name} (${p.cidr}${p.disabled ? ', disabled' : ''})`);
  return `existing pools: ${shown.join(', ')}${pools.length > 10 ? `, and ${pools.length - 10} more` : ''}`;
}

/** Each item names a pool exactly, by name or by CIDR (docs/addresses-and-annotations.md). Returns pool names. */
function resolvePools(src: OptionSource, items: string[], family: 4 | 6, pools: PoolInfo[]): string[] {
  const parsedPools = pools.map((p) => ({ p, net: tryParseCidr(p.cidr, { strict: false }) }));
  const names: string[] = [];
  const otherKey =
    src.from === 'netconf'
      ? `ipam.ipv${family === 4 ? 6 : 4}_pools`
      : family === 4
        ? ANNOTATIONS.ipv6Pools
        : ANNOTATIONS.ipv4Pools;
  for (const item of items) {
    let match: PoolInfo | undefined;
    if (item.includes('/')) {
      const net = tryParseCidr(item, { strict: false });
      if (!net)
        throw malformed(
          src,
          `${JSON.stringify(item)} is neither a pool name nor a valid CIDR`,
          `name an existing pool; ${listPools(pools)}`,
        );
      match = parsedPools.find((x) => x.net && cidrEquals(x.net, net))?.p;
      if (!match) {
        const parent = parsedPools.find(
          (x) => x.net && x.net.family === net.family && x.net.prefix < net.prefix && containsCidr(x.net, net),
        );
        if (parent) {
          throw semantic(
            src,
            `${item} is a subset of pool ${parent.p.name} (${parent.p.cidr}); requesting a subset of a pool is not ` +
              `supported`,
            `name the whole pool (${parent.p.name} or ${parent.p.cidr}), or create a separate IPPool for ${item}`,
          );
        }
        throw semantic(
          src,
          `IP pool ${item} does not exist`,
          `name a pool exactly by name or CIDR; ${listPools(pools)}`,
        );
      }
    } else {
      match = pools.find((p) => p.name === item);
      if (!match)
        throw semantic(
          src,
          `IP pool ${JSON.stringify(item)} does not exist`,
          `name a pool exactly by name or CIDR; ${listPools(pools)}`,
        );
    }
    const poolFamily = tryParseCidr(match.cidr, { strict: false })?.family;
    if (poolFamily !== family) {
      throw semantic(
        src,
        `pool ${match.name} (${match.cidr}) is an IPv${poolFamily ?? '?'} pool`,
        `list it in ${otherKey} instead`,
      );
    }
    if (match.disabled) {
      throw semantic(src, `pool ${match.name} (${match.cidr}) is disabled`, 'enable the pool or name another one');
    }
    if (!names.includes(match.name)) names.push(match.name);
  }
  return names;
}

function poolsContaining(ip: IP, pools: PoolInfo[]): PoolInfo[] {
  return pools.filter((p) => {
    const net = tryParseCidr(p.cidr, { strict: false });
    return net !== undefined && containsIP(net, ip);
  });
}

function flag(v: string | boolean | undefined, dflt: boolean): boolean {
  if (v === undefined) return dflt;
  return v === true || v === 'true';
}

/** Throws unless the netconf turned on the feature that gates `src` (`on`: its flag's value). */
function requireFeature(on: boolean | undefined, feature: keyof typeof FEATURE_FLAGS, src: OptionSource): void {
  if (on === true) return;
  const flagName = FEATURE_FLAGS[feature];
  throw new WorkloadError(
    'feature-disabled',
    `${describe(src)} (${quote(src.value)}) is not allowed: the feature is disabled. ` +
      `To enable it set "${flagName.split('.')[1]}": true in the netconf's "feature_control" object (${flagName}); ` +
      `caution: ${FEATURE_CAUTION[feature]}, so restrict who may set this annotation with admission control`,
  );
}

/**
 * Decide how this workload gets its addresses (docs/addresses-and-annotations.md
 * highest precedence first): (1) annotations, (2) the netconf's ipam section and
 * CNI_ARGS IP=, (3) pools whose nodeSelector selects the node (IPAM's default,
 * signalled by leaving ipv4Pools/ipv6Pools undefined).
 *
 * Throws WorkloadError (as CNI codes): 7 for malformed values and conflicts, 102 for annotations
 * that are well-formed but cannot be honoured, 7/4/100 for the netconf/CNI_ARGS
 * equivalents. Every message names the key, the value, why and the fix.
 */
export function resolveWorkloadOptions(input: ResolveInput): AddressRequest {
  const { conf, pools, log } = input;
  const opts = parseWorkloadAnnotations(input.podAnnotations, input.namespaceAnnotations, input.pod);
  const features = conf.feature_control ?? {};
  const warnings: string[] = [];
  const warn = (m: string): void => {
    warnings.push(m);
    log?.warn(m);
  };
  const enabledPools = pools.filter((p) => !p.disabled);
  const req: AddressRequest = { assignIPv4: false, assignIPv6: false, warnings, source: {} };

  // floatingIPs combine with any address choice; checked first so a disabled
  // feature fails before anything else is looked at.
  if (opts.floatingIPs) {
    const src = opts.source.floatingIPs!;
    requireFeature(features.floating_ips, 'floatingIPs', src);
    for (const a of opts.floatingIPs) {
      if (poolsContaining(tryParseIP(a)!, pools).length === 0) {
        throw semantic(
          src,
          `floating IP ${a} is not inside any IP pool, so it would never be advertised`,
          `choose an address inside a pool; ${listPools(pools)}`,
        );
      }
    }
    req.floatingIPs = opts.floatingIPs;
    req.source.floatingIPs = src;
  }

  const addrAnnotation = opts.ipAddrs ? 'ipAddrs' : opts.ipAddrsNoIpam ? 'ipAddrsNoIpam' : undefined;
  if (addrAnnotation) {
    // docs/addresses-and-annotations.md: the address annotations take priority over pool annotations.
    for (const k of ['ipv4Pools', 'ipv6Pools'] as const) {
      const s = opts.source[k];
      if (s) log?.info(`${describe(s)} is ignored: ${SCHEMA[addrAnnotation].key} takes priority`);
    }
    if (input.cniArgsIP)
      log?.info(`CNI_ARGS IP=${input.cniArgsIP} is ignored: ${SCHEMA[addrAnnotation].key} takes priority`);
  }

  if (opts.ipAddrs) {
    const src = opts.source.ipAddrs!;
    for (const a of opts.ipAddrs) {
      const ip = tryParseIP(a)!;
      const inside = poolsContaining(ip, pools);
      if (inside.length === 0) {
        throw semantic(
          src,
          `${a} is not inside any IP pool (addresses in ipAddrs are allocated through IPAM)`,
          `choose an address inside a pool, or use ${ANNOTATIONS.ipAddrsNoIpam} (needs ${FEATURE_FLAGS.ipAddrsNoIpam}` +
            `); ${listPools(pools)}`,
        );
      }
      if (inside.every((p) => p.disabled)) {
        throw semantic(
          src,
          `${a} is only inside disabled pool ${inside[0]!.name} (${inside[0]!.cidr})`,
          'enable the pool or choose an address in an enabled pool',
        );
      }
    }
    setRequested(req, opts.ipAddrs, src);
  } else if (opts.ipAddrsNoIpam) {
    const src = opts.source.ipAddrsNoIpam!;
    requireFeature(features.ip_addrs_no_ipam, 'ipAddrsNoIpam', src);
    for (const a of opts.ipAddrsNoIpam) {
      const inside = poolsContaining(tryParseIP(a)!, enabledPools);
      // docs/addresses-and-annotations.md: routes are distributed only for addresses in a BGP-mode pool.
      if (inside.length === 0) {
        warn(
          `${describe(src)}: ${a} is outside every IP pool; no routes will be distributed for it, so routing to it ` +
            `must be provided by another mechanism`,
        );
      } else {
        const vx = inside.find((p) => p.vxlanMode !== undefined && p.vxlanMode !== 'Never');
        if (vx)
          warn(
            `${describe(src)}: ${a} is inside pool ${vx.name} (${vx.cidr}), which uses VXLAN; no routes will be ` +
              `distributed for it, so routing to it must be provided by another mechanism`,
          );
      }
    }
    req.noIpamIPs = opts.ipAddrsNoIpam;
    req.source.addresses = src;
  } else {
    const assign4 = flag(conf.ipam?.assign_ipv4, true);
    const assign6 = flag(conf.ipam?.assign_ipv6, false);
    const poolAnnotation = opts.ipv4Pools !== undefined || opts.ipv6Pools !== undefined;
    if (input.cniArgsIP && !poolAnnotation) {
      const src: OptionSource = { from: 'cni-args', key: 'IP', value: input.cniArgsIP, object: 'CNI_ARGS' };
      const addrs = parseCniArgsIP(src);
      for (const a of addrs) {
        const inside = poolsContaining(tryParseIP(a)!, enabledPools);
        if (inside.length === 0) {
          throw new WorkloadError(
            'address-not-in-pool',
            `CNI_ARGS IP=${input.cniArgsIP}: ${a} is not inside any enabled IP pool; ` +
              `request an address inside a pool (${listPools(pools)})`,
          );
        }
      }
      setRequested(req, addrs, src);
    } else {
      if (input.cniArgsIP) {
        warn(
          `CNI_ARGS IP=${input.cniArgsIP} is ignored: the pool annotation on the pod or its namespace takes priority`,
        );
      }
      req.assignIPv4 = assign4;
      req.assignIPv6 = assign6;
      for (const [family, k, confKey, assigned] of [
        [4, 'ipv4Pools', 'ipv4_pools', assign4],
        [6, 'ipv6Pools', 'ipv6_pools', assign6],
      ] as const) {
        const ann = opts[k];
        const list = conf.ipam?.[confKey];
        if (ann) {
          const src = opts.source[k]!;
          if (!assigned) {
            warn(
              `${describe(src)} is ignored: IPv${family} is not assigned (set ipam.assign_ipv${family}: "true" in ` +
                `the netconf to assign IPv${family} addresses)`,
            );
            continue;
          }
          req[k] = resolvePools(src, ann, family, pools);
          req.source[k] = src;
        } else if (assigned && list?.length) {
          const src: OptionSource = {
            from: 'netconf',
            key: `ipam.${confKey}`,
            value: JSON.stringify(list),
            object: 'netconf',
          };
          req[k] = resolvePools(src, list, family, pools);
          req.source[k] = src;
        }
      }
    }
  }

  if (req.floatingIPs) {
    // Fail before IPAM when a floating IP can have no partner of its family.
    const fams = new Set<number>();
    if (req.assignIPv4) fams.add(4);
    if (req.assignIPv6) fams.add(6);
    for (const a of req.requestedIPs ?? req.noIpamIPs ?? []) fams.add(tryParseIP(a)!.family);
    for (const a of req.floatingIPs) {
      const f = tryParseIP(a)!.family;
      if (!fams.has(f)) {
        throw semantic(
          req.source.floatingIPs!,
          `floating IP ${a} is IPv${f} but the pod gets no IPv${f} address to pair it with`,
          `assign the pod an IPv${f} address or remove ${a}`,
        );
      }
    }
  }
  log?.debug('address selection', {
    assignIPv4: req.assignIPv4,
    assignIPv6: req.assignIPv6,
    ipv4Pools: req.ipv4Pools,
    ipv6Pools: req.ipv6Pools,
    requestedIPs: req.requestedIPs,
    noIpamIPs: req.noIpamIPs,
    floatingIPs: req.floatingIPs,
    source: Object.fromEntries(Object.entries(req.source).map(([k, s]) => [k, describe(s)])),
  });
  return req;
}

/**
 * How IPAM should name each input in its own errors (its AssignRequest.fields),
 * so a pool or address problem it finds points at the annotation or netconf
 * field that asked for it rather than at a bare `ipv4_pools` / `IP`.
 */
export function ipamFieldNames(req: AddressRequest): { ipv4Pools?: string; ipv6Pools?: string; requestedIPs?: string } {
  const out: { ipv4Pools?: string; ipv6Pools?: string; requestedIPs?: string } = {};
  if (req.source.ipv4Pools) out.ipv4Pools = describe(req.source.ipv4Pools);
  if (req.source.ipv6Pools) out.ipv6Pools = describe(req.source.ipv6Pools);
  if (req.source.addresses) out.requestedIPs = describe(req.source.addresses);
  return out;
}

function setRequested(req: AddressRequest, addrs: string[], src: OptionSource): void {
  // The families of the requested addresses decide what is assigned: ipAddrs
  // holding only an IPv4 address gives an IPv4-only pod.
  req.requestedIPs = addrs;
  req.assignIPv4 = addrs.some((a) => tryParseIP(a)!.family === 4);
  req.assignIPv6 = addrs.some((a) => tryParseIP(a)!.family === 6);
  req.source.addresses = src;
}

function parseCniArgsIP(src: OptionSource): string[] {
  const out: string[] = [];
  const count = { 4: 0, 6: 0 };
  for (const part of src.value.split(',')) {
    const s = part.trim();
    const ip = tryParseIP(s);
    if (!ip) {
      throw new WorkloadError(
        'invalid-cni-args',
        `CNI_ARGS IP=${src.value}: ${JSON.stringify(s)} is not an IP address; ` +
          'give one IPv4 and/or one IPv6 address, comma-separated',
      );
    }
    if (++count[ip.family] > 1) {
      throw new WorkloadError(
        'invalid-cni-args',
        `CNI_ARGS IP=${src.value}: more than one IPv${ip.family} address; give at most one IPv4 and one IPv6 address`,
      );
    }
    out.push(formatIP(ip));
  }
  return out;
}

/**
 * Pair each floating IP with the pod address of its family (docs/addresses-and-annotations.md floatingIPs),
 * giving the endpoint's `ipNATs`. `podIPs` may carry prefix lengths
 * (`10.0.0.5/32`). Throws 102 when a family has no pod address.
 */
export function pairFloatingIPs(
  podIPs: string[],
  floatingIPs: string[] | undefined,
): Array<{ internalIP: string; externalIP: string }> {
  if (!floatingIPs?.length) return [];
  const byFamily = new Map<number, string>();
  for (const p of podIPs) {
    const ip = tryParseIP(p.split('/')[0]!.trim());
    if (ip && !byFamily.has(ip.family)) byFamily.set(ip.family, formatIP(ip));
  }
  return floatingIPs.map((ext) => {
    const ip = tryParseIP(ext);
    if (!ip) {
      const what = `annotation ${ANNOTATIONS.floatingIPs}: ${JSON.stringify(ext)}`;
      throw new WorkloadError('malformed', `${what} is not an IP address`);
    }
    const internal = byFamily.get(ip.family);
    if (!internal) {
      throw new WorkloadError(
        'annotation-not-honoured',
        `annotation ${ANNOTATIONS.floatingIPs}: floating IP ${ext} is IPv${ip.family} but the pod has no IPv` +
          `${ip.family} address (pod addresses: ${podIPs.join(', ') || 'none'}); assign the pod an IPv${ip.family} ` +
          `address or remove ${ext}`,
      );
    }
    return { internalIP: internal, externalIP: formatIP(ip) };
  });
}

/** PoolInfo from IPPool resources as `Datastore.list('IPPool')` returns them. */
export function poolsFromResources(
  items: Array<{
    metadata: { name: string };
    spec: { cidr: string; vxlanMode?: string; ipipMode?: string; disabled?: boolean };
  }>,
): PoolInfo[] {
  return items.map((r) => ({
    name: r.metadata.name,
    cidr: r.spec.cidr,
    vxlanMode: r.spec.vxlanMode,
    ipipMode: r.spec.ipipMode,
    disabled: r.spec.disabled,
  }));
}
