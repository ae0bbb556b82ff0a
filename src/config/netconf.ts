// The netconf schema (zod 3). Built on first use so importing this module on
// the per-pod path costs nothing until a netconf is actually parsed.
import { tryParseIPPrefix } from '../net/cidr.js';
import { z } from 'zod';
import { CniError, ErrorCodes } from '../errors.js';
import type { DatastoreSettings } from '../datastore/settings.js';
import {
  DEFAULT_MTU_FILE,
  DEFAULT_NODENAME_FILE,
  NETCONF_FIELDS,
  NUM_QUEUES_MAX,
  fieldDoc,
  sectionKeys,
} from './fields.js';

type PluginType = 'netplugin' | 'netplugin-ipam';

// The types are the schema's (built below): what parseNetconf returns is what
// the schema outputs, defaults applied. Field docs sit on the schema's fields
// and in the field table (./fields.ts, docs/netconf.md).
type Schemas = ReturnType<typeof build>;
type NetconfSchema = ReturnType<typeof netconfObject>;

/** `ipam` of type netplugin-ipam; `assign_ipv4`/`assign_ipv6` normalised to lower case ("True" -> "true"). */
export type NetpluginIpam = z.output<Schemas['ownIpam']>;

/** A validated netconf. Unknown top-level keys are kept (runtimes add their own). */
export type Netconf = z.output<NetconfSchema> & {
  /**
   * Derived: the etcd endpoints to dial (etcdv3 only): `etcd_endpoints` split,
   * else `<etcd_scheme>://<etcd_authority>` with their defaults; empty when
   * `etcd_discovery_srv` is used instead.
   */
  etcdEndpointList: string[];
};

export function isNetpluginIpam(ipam: Netconf['ipam']): ipam is NetpluginIpam {
  return ipam.type === 'netplugin-ipam';
}

interface ParseOptions {
  pluginType: PluginType;
  /** Deprecations and likely typos; the caller logs them. Absent or undefined: not reported. */
  warn?: ((msg: string) => void) | undefined;
}

const NAME = /^[A-Za-z0-9][A-Za-z0-9_.-]*$/;
// Kubernetes object names (IPPool metadata.name): DNS-1123 subdomain.
const POOL_NAME = /^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$/;
const DOMAIN =
  /^(?=.{1,253}$)([A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*\.?$/;

function isHttpUrl(s: string): boolean {
  try {
    const u = new URL(s);
    return (u.protocol === 'http:' || u.protocol === 'https:') && u.hostname !== '';
  } catch {
    return false;
  }
}

/** `user:pass@` in a URL: never used for authentication by our clients, and printed wherever the URL is. */
function hasUserinfo(s: string): boolean {
  try {
    const u = new URL(s);
    return u.username !== '' || u.password !== '';
  } catch {
    return false;
  }
}

function isCidrOf(s: string, fam: 4 | 6): boolean {
  return tryParseIPPrefix(s)?.ip.family === fam;
}

let schemas: Schemas | undefined;
/** A schema's fields for the optional properties of T: each outputs exactly T's type (defaults may narrow it). */
type FieldsOf<T> = { [K in keyof T]-?: z.ZodType<T[K], z.ZodTypeDef, unknown> };

function build() {
  const nonEmpty = z.string().min(1);
  const absPath = z
    .string()
    .refine((s) => s.startsWith('/'), { message: 'expected an absolute path (starting with /)' });
  const noCredentials = (where: string) => ({
    message:
      `credentials in the URL are not used and would be printed in logs and errors; remove the user:password@ ` +
      `part and ${where}`,
  });
  const httpUrl = z
    .string()
    .refine(isHttpUrl, { message: 'expected an http:// or https:// URL' })
    .refine(
      (s) => !hasUserinfo(s),
      noCredentials('put the credentials in the kubeconfig that kubernetes.kubeconfig names'),
    );
  const strBool = z
    .string()
    .refine((s) => s.toLowerCase() === 'true' || s.toLowerCase() === 'false', { message: 'expected "true" or "false"' })
    .transform((s) => s.toLowerCase() as 'true' | 'false');
  const poolRef = (fam: 4 | 6) =>
    z.string().refine((s) => (s.includes('/') ? isCidrOf(s, fam) : POOL_NAME.test(s)), {
      message:
        `expected an IPv${fam} CIDR (e.g. ${fam === 4 ? '10.244.0.0/16' : 'fd00:10:244::/64'}) or an IP pool ` +
        `name (lower-case letters, digits, '-', '.')`,
    });
  const uint = (min: number, max?: number) => {
    let n = z.number().int().min(min);
    if (max !== undefined) n = n.max(max);
    return n;
  };

  const ownIpam = z
    .object({
      type: z.literal('netplugin-ipam'),
      /** The documented string booleans (docs/netconf.md), normalised to lower case ("True" -> "true"). */
      assign_ipv4: strBool.default('true'),
      assign_ipv6: strBool.default('false'),
      ipv4_pools: z.array(poolRef(4)).optional(),
      ipv6_pools: z.array(poolRef(6)).optional(),
    })
    .strict();
  const otherIpam = z.object({ type: nonEmpty }).passthrough();

  const base = {
    name: z
      .string()
      .regex(NAME, { message: "expected letters, digits, '_', '.' or '-', starting with a letter or digit" }),
    cniVersion: z.string().optional(),
    cniVersions: z.array(z.string()).optional(),
    nodename: nonEmpty.optional(),
    nodename_file: absPath.default(DEFAULT_NODENAME_FILE),
    /** Where the node agent writes the pod MTU; read when `mtu` is not set. */
    mtu_file: absPath.default(DEFAULT_MTU_FILE),
    datastore_type: z.enum(['etcdv3', 'kubernetes']).default('etcdv3'),
    etcd_endpoints: z
      .string()
      .refine((s) => s.split(',').every((e) => isHttpUrl(e.trim())), {
        message: 'expected comma-separated http(s) URLs, e.g. "https://10.0.0.1:2379,https://10.0.0.2:2379"',
      })
      .refine(
        (s) => !s.split(',').some((e) => hasUserinfo(e.trim())),
        noCredentials('authenticate to etcd with mTLS: etcd_cert_file, etcd_key_file and etcd_ca_cert_file'),
      )
      .optional(),
    etcd_discovery_srv: z
      .string()
      .regex(DOMAIN, { message: 'expected a DNS domain name, e.g. "example.com"' })
      .optional(),
    etcd_key_file: absPath.optional(),
    etcd_cert_file: absPath.optional(),
    etcd_ca_cert_file: absPath.optional(),
    etcd_authority: z
      .string()
      .regex(/^[^\s/:]+(:\d{1,5})?$|^\[[0-9a-fA-F:.]+\](:\d{1,5})?$/, {
        message: 'expected host:port, e.g. "127.0.0.1:2379"',
      })
      .optional(),
    etcd_scheme: z.enum(['http', 'https']).optional(),
    container_settings: z
      .object({ allow_ip_forwarding: z.boolean().default(false) })
      .strict()
      .default({}),
    readiness_gates: z.array(httpUrl).optional(),
    /** Overall deadline of the readiness-gate wait; absent: 30 s. */
    readiness_gate_timeout_seconds: uint(1, 3600).optional(),
    kubernetes: z.object({ kubeconfig: absPath.optional(), k8s_api_root: httpUrl.optional() }).strict().optional(),
    policy: z
      .object({ type: z.literal('k8s') })
      .strict()
      .optional(),
    policy_setup_timeout_seconds: uint(0).optional(),
    feature_control: z
      .object({ ip_addrs_no_ipam: z.boolean().default(false), floating_ips: z.boolean().default(false) })
      .strict()
      .default({}),
    num_queues: uint(1, NUM_QUEUES_MAX).default(1),
    host_veth_prefix: z
      .string()
      .regex(/^[a-z][a-z0-9]{0,3}$/, {
        message:
          'expected 1-4 lower-case letters or digits starting with a letter, e.g. "npi" (the host veth name is the ' +
          'prefix plus 11 hex characters and must fit 15 bytes)',
      })
      .optional(),
    ipam_lock_file: absPath.optional(),
    endpoint_status_dir: absPath.optional(),
    mtu: uint(68, 65535).optional(),
    log_level: z
      .string()
      .transform((s) => (s.toUpperCase() === 'WARN' ? 'WARNING' : s.toUpperCase()))
      .pipe(z.enum(['ERROR', 'WARNING', 'INFO', 'DEBUG']))
      .default('INFO'),
    log_format: z.enum(['text', 'json']).default('text'),
    /** undefined (absent or ""): stderr only. */
    log_file_path: z
      .string()
      .refine((s) => s === '' || s.startsWith('/'), {
        message: 'expected an absolute path, or "" to log to stderr only',
      })
      .transform((s) => (s === '' ? undefined : s))
      .optional(),
    log_file_max_size: uint(1).default(100),
    log_file_max_age: uint(0).default(30),
    log_file_max_count: uint(0).default(10),
    capabilities: z.record(z.unknown()).optional(),
    runtimeConfig: z.record(z.unknown()).optional(),
    args: z.record(z.unknown()).optional(),
    prevResult: z.unknown().optional(),
  };

  return {
    // The datastore fields are those src/datastore/settings.ts declares, with those types.
    base: base satisfies FieldsOf<DatastoreSettings>,
    ownIpam,
    otherIpam,
    /** `type` of netplugin's own netconf. */
    pluginType: z.literal('netplugin'),
    /** `type` when parsed for netplugin-ipam: the delegating plugin's, not checked. */
    delegatorType: z.string().optional(),
  };
}

function netconfObject(
  s: Schemas,
  type: Schemas['pluginType'] | Schemas['delegatorType'],
  ipam: Schemas['ownIpam'] | Schemas['otherIpam'],
) {
  return z
    .object({ ...s.base, type, ipam })
    .passthrough()
    .superRefine((c, ctx) => {
      if (c.etcd_endpoints !== undefined && c.etcd_discovery_srv !== undefined) {
        ctx.addIssue({
          code: 'custom',
          path: ['etcd_discovery_srv'],
          message: 'cannot be combined with etcd_endpoints: remove one of the two',
        });
      }
      if ((c.etcd_key_file === undefined) !== (c.etcd_cert_file === undefined)) {
        const missing = c.etcd_key_file === undefined ? 'etcd_key_file' : 'etcd_cert_file';
        const other = missing === 'etcd_key_file' ? 'etcd_cert_file' : 'etcd_key_file';
        ctx.addIssue({
          code: 'custom',
          path: [missing],
          message: `missing while ${other} is set; mutual TLS needs both: set both or neither`,
        });
      }
    });
}

const cache = new Map<string, NetconfSchema>();
/** The schema for a netconf whose ipam is netplugin-ipam's (`own`) or another plugin's, read by `pluginType`. */
function schemaFor(own: boolean, pluginType: PluginType): NetconfSchema {
  schemas ??= build();
  const key = `${own}:${pluginType}`;
  let s = cache.get(key);
  if (!s) {
    s = netconfObject(
      schemas,
      pluginType === 'netplugin' ? schemas.pluginType : schemas.delegatorType,
      own ? schemas.ownIpam : schemas.otherIpam,
    );
    cache.set(key, s);
  }
  return s;
}

function describe(v: unknown): string {
  if (v === undefined) return 'nothing';
  if (v === null) return 'null';
  if (Array.isArray(v)) return `an array ${truncate(JSON.stringify(v))}`;
  if (typeof v === 'object') return 'an object';
  return `${typeof v} ${truncate(JSON.stringify(v))}`;
}
function truncate(s: string): string {
  return s.length > 60 ? s.slice(0, 57) + '...' : s;
}

function valueAt(raw: unknown, path: readonly (string | number)[]): unknown {
  let v = raw;
  for (const p of path) {
    if (typeof v !== 'object' || v === null) return undefined;
    v = (v as Record<string | number, unknown>)[p];
  }
  return v;
}

function pathString(path: readonly (string | number)[]): string {
  let s = '';
  for (const p of path) s += typeof p === 'number' ? `[${p}]` : s === '' ? p : `.${p}`;
  return s || '(netconf)';
}

function editDistance(a: string, b: string): number {
  const d = Array.from({ length: b.length + 1 }, (_, i) => i);
  for (let i = 1; i <= a.length; i++) {
    let prev = d[0]!;
    d[0] = i;
    for (let j = 1; j <= b.length; j++) {
      const cur = d[j]!;
      d[j] = Math.min(d[j]! + 1, d[j - 1]! + 1, prev + (a[i - 1] === b[j - 1] ? 0 : 1));
      prev = cur;
    }
  }
  return d[b.length]!;
}
/** The candidate a typo most likely meant (a few edits away), for "did you mean" hints. */
export function closest(key: string, candidates: readonly string[]): string | undefined {
  let best: string | undefined;
  let bestD = Infinity;
  for (const c of candidates) {
    const dist = editDistance(key.toLowerCase(), c.toLowerCase());
    // A typo is a few edits; longer names tolerate a few more (a dropped suffix).
    if (dist <= Math.max(2, Math.floor(c.length / 5)) && dist < bestD) {
      bestD = dist;
      best = c;
    }
  }
  return best;
}

/** The expectation of a field in words, from the field table. */
function expectation(path: readonly (string | number)[]): string {
  const doc = fieldDoc(path);
  if (!doc) return 'a valid value';
  const item = typeof path[path.length - 1] === 'number' && doc.type.startsWith('array of ');
  const type = item ? doc.type.slice('array of '.length).replace(/s$/, '') : doc.type;
  return `expected ${/^[aeiou]/.test(type) ? 'an' : 'a'} ${type}${doc.allowed ? ` (${doc.allowed})` : ''}`;
}

function formatIssue(issue: z.ZodIssue, raw: unknown): string[] {
  const path = issue.path;
  const where = pathString(path);
  const value = valueAt(raw, path);
  const doc = fieldDoc(path);
  switch (issue.code) {
    case 'unrecognized_keys': {
      const section = pathString(path);
      const allowed = sectionKeys(section);
      return issue.keys.map((k) => {
        const guess = closest(k, allowed);
        return (
          `${section}.${k}: unknown field (got ${describe(valueAt(raw, [...path, k]))}); ` +
          `${guess ? `did you mean ${section}.${guess}? ` : ''}${section} allows only ${allowed.join(', ')}`
        );
      });
    }
    case 'invalid_type': {
      if (issue.received === 'undefined') {
        const example = doc?.example ? `: add "${path[path.length - 1]}": ${doc.example}` : '';
        return [`${where}: missing; ${expectation(path)}${example}`];
      }
      // The classic mistakes: booleans and numbers quoted, or string-booleans unquoted.
      if (doc?.type.startsWith('string (not boolean)') && typeof value === 'boolean') {
        return [`${where}: got boolean ${value}; this field is a string: write "${value}" (quoted)`];
      }
      if (issue.expected === 'boolean' && (value === 'true' || value === 'false')) {
        return [`${where}: got string "${value}"; this field is a boolean: write ${value} (no quotes)`];
      }
      if (issue.expected === 'number' && typeof value === 'string' && /^-?\d+(\.\d+)?$/.test(value)) {
        return [`${where}: got string "${value}"; this field is a number: write ${value} (no quotes)`];
      }
      return [`${where}: got ${describe(value)}; ${expectation(path)}`];
    }
    case 'invalid_literal':
      if (value === undefined) {
        const example = doc?.example ? `: add "${path[path.length - 1]}": ${doc.example}` : '';
        return [`${where}: missing; expected ${JSON.stringify(issue.expected)}${example}`];
      }
      return [
        `${where}: got ${describe(value)}; expected ${JSON.stringify(issue.expected)}` +
          `${doc?.allowed && doc.path.endsWith('type') && doc.path !== 'type' ? ` (${doc.allowed})` : ''}`,
      ];
    case 'invalid_enum_value':
      return [`${where}: got ${describe(value)}; ${expectation(path)}`];
    case 'too_small':
    case 'too_big':
    case 'not_finite':
      return [`${where}: got ${describe(value)}; ${expectation(path)}`];
    case 'custom':
      // Refinements say what was expected; cross-field rules say what is wrong.
      if (issue.message.startsWith('expected')) return [`${where}: got ${describe(value)}; ${issue.message}`];
      return [`${where}: ${issue.message}`];
    default:
      if (issue.message.startsWith('Expected') || issue.message.startsWith('Invalid')) {
        return [`${where}: got ${describe(value)}; ${expectation(path)}`];
      }
      return [`${where}: got ${describe(value)}; ${issue.message}`];
  }
}

/**
 * Validates a netconf and applies defaults. Throws CniError(7) naming every
 * bad field with its value and the fix. For 'netplugin-ipam' the top-level
 * `type` is the delegating plugin's and is not checked, but `ipam.type` must
 * be netplugin-ipam.
 */
export function parseNetconf(raw: unknown, opts: ParseOptions): Netconf {
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) {
    throw new CniError(ErrorCodes.InvalidNetworkConfig, `netconf: got ${describe(raw)}; expected a JSON object`);
  }
  const r = raw as Record<string, unknown>;
  const ipam = r['ipam'];
  const ipamType = typeof ipam === 'object' && ipam !== null ? (ipam as Record<string, unknown>)['type'] : undefined;
  if (opts.pluginType === 'netplugin-ipam' && ipamType !== undefined && ipamType !== 'netplugin-ipam') {
    throw new CniError(
      ErrorCodes.InvalidNetworkConfig,
      `ipam.type: got ${describe(ipamType)}; netplugin-ipam was run for a netconf whose ipam.type is not ` +
        `"netplugin-ipam": set "ipam": {"type": "netplugin-ipam"}`,
    );
  }
  const schema = schemaFor(ipamType === 'netplugin-ipam' || ipamType === undefined, opts.pluginType);
  const res = schema.safeParse(raw);
  if (!res.success) {
    const msgs = res.error.issues.flatMap((i) => formatIssue(i, raw));
    throw new CniError(
      ErrorCodes.InvalidNetworkConfig,
      `invalid network configuration: ${msgs.join('; ')}`,
      'see docs/netconf.md for every field',
    );
  }
  const conf = res.data;

  if (conf.etcd_authority !== undefined || conf.etcd_scheme !== undefined) {
    opts.warn?.(
      conf.etcd_endpoints !== undefined
        ? 'etcd_authority/etcd_scheme are deprecated and ignored because etcd_endpoints is set; remove them'
        : `etcd_authority/etcd_scheme are deprecated: replace them with "etcd_endpoints": ` +
            `"${conf.etcd_scheme ?? 'http'}://${conf.etcd_authority ?? '127.0.0.1:2379'}"`,
    );
  }
  if (
    conf.datastore_type === 'kubernetes' &&
    (conf.etcd_endpoints !== undefined || conf.etcd_discovery_srv !== undefined)
  ) {
    opts.warn?.('etcd_* options are ignored because datastore_type is "kubernetes"');
  }
  if (opts.warn) {
    const known = new Set(NETCONF_FIELDS.filter((f) => !f.path.includes('.')).map((f) => f.path));
    for (const k of Object.keys(r)) {
      if (known.has(k) || k.startsWith('cni.dev/')) continue;
      const guess = closest(k, [...known]);
      if (guess) opts.warn(`unknown netconf field "${k}" is ignored; did you mean "${guess}"?`);
    }
  }
  const etcdEndpointList =
    conf.datastore_type !== 'etcdv3' || conf.etcd_discovery_srv !== undefined
      ? []
      : conf.etcd_endpoints !== undefined
        ? conf.etcd_endpoints
            .split(',')
            .map((e) => e.trim())
            .filter((e) => e !== '')
        : [`${conf.etcd_scheme ?? 'http'}://${conf.etcd_authority ?? '127.0.0.1:2379'}`];
  return Object.assign(conf, { etcdEndpointList });
}

/** The schema's own keys (for the table/schema sync test). */
export function schemaKeys(pluginType: PluginType = 'netplugin'): string[] {
  const keys: string[] = [];
  const walk = (s: z.ZodTypeAny, prefix: string): void => {
    let t = s;
    for (;;) {
      if (t instanceof z.ZodEffects) t = t.innerType();
      else if (t instanceof z.ZodDefault) t = t._def.innerType;
      else if (t instanceof z.ZodOptional) t = t.unwrap();
      else break;
    }
    if (t instanceof z.ZodObject) {
      for (const [k, v] of Object.entries(t.shape as Record<string, z.ZodTypeAny>)) {
        const p = prefix ? `${prefix}.${k}` : k;
        keys.push(p);
        walk(v, p);
      }
    }
  };
  walk(schemaFor(true, pluginType), '');
  return keys;
}
