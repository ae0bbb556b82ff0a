// One internal result (the CNI 1.1 shape) printed in whatever version the
// runtime asked for, and results of any supported version (prevResult, a
// delegated IPAM plugin's output) read back into it.
import { addressOf, ipFamily, tryParseIPPrefix } from '../net/cidr.js';
import { CniError, ErrorCodes } from '../errors.js';
import type { CniDNS, CniInterface, CniIPConfig, CniResult, CniRoute, CniVersion } from './types.js';
import { compareVersions, isSupportedVersion } from './version.js';
import { SUPPORTED_VERSIONS } from './types.js';

/** The JSON object a runtime reads, in `version`'s shape. Fields a version does not know are dropped. */
export function formatResult(result: CniResult, version: CniVersion): Record<string, unknown> {
  const v11 = compareVersions(version, '1.1.0') >= 0;
  // 1.0.0 removed ips[].version: the address already says which family it is.
  const withIpVersion = compareVersions(version, '1.0.0') < 0;
  const out: Record<string, unknown> = { cniVersion: version };
  if (result.interfaces) {
    out['interfaces'] = result.interfaces.map((i) =>
      compact({
        name: i.name,
        mac: i.mac,
        mtu: v11 ? i.mtu : undefined,
        sandbox: i.sandbox,
        socketPath: v11 ? i.socketPath : undefined,
        pciID: v11 ? i.pciID : undefined,
      }),
    );
  }
  if (result.ips) {
    out['ips'] = result.ips.map((ip) =>
      compact({
        version: withIpVersion ? (ipFamily(addressOf(ip.address)) === 6 ? '6' : '4') : undefined,
        interface: ip.interface,
        address: ip.address,
        gateway: ip.gateway,
      }),
    );
  }
  if (result.routes) {
    out['routes'] = result.routes.map((r) =>
      compact({
        dst: r.dst,
        gw: r.gw,
        mtu: v11 ? r.mtu : undefined,
        advmss: v11 ? r.advmss : undefined,
        priority: v11 ? r.priority : undefined,
        table: v11 ? r.table : undefined,
        scope: v11 ? r.scope : undefined,
      }),
    );
  }
  if (result.dns) {
    out['dns'] = compact({ ...result.dns });
  }
  return out;
}

/** `o` with its undefined values dropped: a key that may hold undefined becomes an absent one. */
type Compacted<T> = { [K in keyof T as undefined extends T[K] ? never : K]: T[K] } & {
  [K in keyof T as undefined extends T[K] ? K : never]?: Exclude<T[K], undefined>;
};
function compact<T extends Record<string, unknown>>(o: T): Compacted<T> {
  for (const k of Object.keys(o)) if (o[k] === undefined) delete o[k];
  return o as Compacted<T>;
}

function isCidr(s: string): boolean {
  return tryParseIPPrefix(s) !== undefined;
}

/**
 * Reads a result of any supported version. `label` names it in errors
 * ("prevResult", "host-local result"); `fallbackVersion` is used when the
 * object carries no cniVersion (a prevResult inherits the netconf's).
 */
export function parseResult(raw: unknown, label: string, fallbackVersion?: CniVersion): CniResult {
  const bad = (path: string, got: unknown, want: string) =>
    new CniError(ErrorCodes.InvalidNetworkConfig, `${label}${path}: got ${describe(got)}; expected ${want}`);
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) throw bad('', raw, 'a CNI result object');
  const o = raw as Record<string, unknown>;
  const ver = o['cniVersion'] ?? fallbackVersion;
  if (!isSupportedVersion(ver)) {
    throw new CniError(
      ErrorCodes.IncompatibleVersion,
      `${label}.cniVersion: ${describe(ver)} is not a result version netplugin reads; supported: ` +
        `${SUPPORTED_VERSIONS.join(', ')}`,
    );
  }
  const res: CniResult = {};
  const str = (v: unknown, path: string, optional = true): string | undefined => {
    if (v === undefined && optional) return undefined;
    if (typeof v !== 'string') throw bad(path, v, 'a string');
    return v;
  };
  const int = (v: unknown, path: string, min = 0): number | undefined => {
    if (v === undefined) return undefined;
    if (typeof v !== 'number' || !Number.isInteger(v) || v < min) throw bad(path, v, `an integer >= ${min}`);
    return v;
  };
  const arr = (v: unknown, path: string): unknown[] | undefined => {
    if (v === undefined || v === null) return undefined;
    if (!Array.isArray(v)) throw bad(path, v, 'an array');
    return v;
  };
  const obj = (v: unknown, path: string): Record<string, unknown> => {
    if (typeof v !== 'object' || v === null || Array.isArray(v)) throw bad(path, v, 'an object');
    return v as Record<string, unknown>;
  };
  /** The fields of the object at `path`, each checked and named in errors by its own path (`.ips[0].gateway`). */
  const fields = (e: Record<string, unknown>, path: string) => ({
    at: (key: string) => `${path}.${key}`,
    raw: (key: string) => e[key],
    str: (key: string, optional = true) => str(e[key], `${path}.${key}`, optional),
    int: (key: string) => int(e[key], `${path}.${key}`),
    strList: (key: string) => arr(e[key], `${path}.${key}`)?.map((x, i) => str(x, `${path}.${key}[${i}]`, false)!),
  });
  /** Each element of the array o[key], checked to be an object and parsed through its fields (`.key[i]`). */
  const objects = <T>(key: string, parse: (f: ReturnType<typeof fields>) => T): T[] | undefined =>
    arr(o[key], `.${key}`)?.map((x, i) => parse(fields(obj(x, `.${key}[${i}]`), `.${key}[${i}]`)));

  const ifaces = objects('interfaces', (f): CniInterface => {
    return compact({
      name: f.str('name', false)!,
      mac: f.str('mac'),
      mtu: f.int('mtu'),
      sandbox: f.str('sandbox'),
      socketPath: f.str('socketPath'),
      pciID: f.str('pciID'),
    });
  });
  if (ifaces) res.interfaces = ifaces;
  const ips = objects('ips', (f): CniIPConfig => {
    const address = f.str('address', false)!;
    if (!isCidr(address)) throw bad(f.at('address'), address, 'an address with prefix length, e.g. "10.0.0.5/24"');
    const fam = ipFamily(addressOf(address));
    const version = f.raw('version');
    if (version !== undefined && version !== String(fam))
      throw bad(f.at('version'), version, `"${fam}" for ${address}`);
    const gateway = f.str('gateway');
    if (gateway !== undefined && ipFamily(gateway) !== fam) throw bad(f.at('gateway'), gateway, `an IPv${fam} address`);
    const iface = f.int('interface');
    if (iface !== undefined && res.interfaces && iface >= res.interfaces.length) {
      throw bad(f.at('interface'), iface, `an index into interfaces (0..${res.interfaces.length - 1})`);
    }
    return compact({ address, gateway, interface: iface });
  });
  if (ips) res.ips = ips;
  const routes = objects('routes', (f): CniRoute => {
    const dst = f.str('dst', false)!;
    if (!isCidr(dst)) throw bad(f.at('dst'), dst, 'a CIDR, e.g. "0.0.0.0/0"');
    const gw = f.str('gw');
    if (gw !== undefined && ipFamily(gw) === 0) throw bad(f.at('gw'), gw, 'an IP address');
    const [mtu, advmss, priority, table, scope] = ['mtu', 'advmss', 'priority', 'table', 'scope'].map(f.int);
    return compact({ dst, gw, mtu, advmss, priority, table, scope });
  });
  if (routes) res.routes = routes;
  if (o['dns'] !== undefined && o['dns'] !== null) {
    const d = fields(obj(o['dns'], '.dns'), '.dns');
    const dns: CniDNS = compact({
      nameservers: d.strList('nameservers'),
      domain: d.str('domain'),
      search: d.strList('search'),
      options: d.strList('options'),
    });
    res.dns = dns;
  }
  return res;
}

function describe(v: unknown): string {
  if (v === undefined) return 'nothing';
  if (v === null) return 'null';
  if (Array.isArray(v)) return 'an array';
  if (typeof v === 'object') return 'an object';
  const s = JSON.stringify(v);
  return `${typeof v} ${s.length > 60 ? s.slice(0, 60) + '...' : s}`;
}
