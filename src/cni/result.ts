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
  /** Each element of the array o[key], checked to be an object and parsed with its path (`.key[i]`). */
  const objects = <T>(key: string, parse: (e: Record<string, unknown>, p: string) => T): T[] | undefined =>
    arr(o[key], `.${key}`)?.map((x, i) => parse(obj(x, `.${key}[${i}]`), `.${key}[${i}]`));
  const strList = (v: unknown, path: string): string[] | undefined =>
    arr(v, path)?.map((x, i) => str(x, `${path}[${i}]`, false)!);

  const ifaces = objects('interfaces', (e, p): CniInterface => {
    return compact({
      name: str(e['name'], `${p}.name`, false)!,
      mac: str(e['mac'], `${p}.mac`),
      mtu: int(e['mtu'], `${p}.mtu`),
      sandbox: str(e['sandbox'], `${p}.sandbox`),
      socketPath: str(e['socketPath'], `${p}.socketPath`),
      pciID: str(e['pciID'], `${p}.pciID`),
    });
  });
  if (ifaces) res.interfaces = ifaces;
  const ips = objects('ips', (e, p): CniIPConfig => {
    const address = str(e['address'], `${p}.address`, false)!;
    if (!isCidr(address)) throw bad(`${p}.address`, address, 'an address with prefix length, e.g. "10.0.0.5/24"');
    const fam = ipFamily(addressOf(address));
    const version = e['version'];
    if (version !== undefined && version !== String(fam)) throw bad(`${p}.version`, version, `"${fam}" for ${address}`);
    const gateway = str(e['gateway'], `${p}.gateway`);
    if (gateway !== undefined && ipFamily(gateway) !== fam) throw bad(`${p}.gateway`, gateway, `an IPv${fam} address`);
    const iface = int(e['interface'], `${p}.interface`);
    if (iface !== undefined && res.interfaces && iface >= res.interfaces.length) {
      throw bad(`${p}.interface`, iface, `an index into interfaces (0..${res.interfaces.length - 1})`);
    }
    return compact({ address, gateway, interface: iface });
  });
  if (ips) res.ips = ips;
  const routes = objects('routes', (e, p): CniRoute => {
    const dst = str(e['dst'], `${p}.dst`, false)!;
    if (!isCidr(dst)) throw bad(`${p}.dst`, dst, 'a CIDR, e.g. "0.0.0.0/0"');
    const gw = str(e['gw'], `${p}.gw`);
    if (gw !== undefined && ipFamily(gw) === 0) throw bad(`${p}.gw`, gw, 'an IP address');
    return compact({
      dst,
      gw,
      mtu: int(e['mtu'], `${p}.mtu`),
      advmss: int(e['advmss'], `${p}.advmss`),
      priority: int(e['priority'], `${p}.priority`),
      table: int(e['table'], `${p}.table`),
      scope: int(e['scope'], `${p}.scope`),
    });
  });
  if (routes) res.routes = routes;
  if (o['dns'] !== undefined && o['dns'] !== null) {
    const d = obj(o['dns'], '.dns');
    const dns: CniDNS = compact({
      nameservers: strList(d['nameservers'], '.dns.nameservers'),
      domain: str(d['domain'], '.dns.domain'),
      search: strList(d['search'], '.dns.search'),
      options: strList(d['options'], '.dns.options'),
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
