// The datastore settings: which store netplugin keeps its data in and how to
// reach it. Declared once, here: the netconf's fields of the same names (the
// netconf schema in src/config/netconf.ts is checked against this type), the
// environment (DATASTORE_TYPE, ETCD_*, KUBECONFIG, ...) parsed by
// datastoreConfigFromEnv below, netpluginctl's --config, and the datastore
// fields a rendered conflist carries. Type-only for the per-pod path: nothing
// here loads a backend.
import { DatastoreError } from '../errors.js';
import type { KubeClientOptions } from '../k8s/client.js';

/**
 * The netconf's datastore fields (docs/netconf.md). Optional fields may hold
 * undefined: settings are copied field by field between a parsed netconf, a
 * config file and the environment, any of which may lack them.
 */
export interface DatastoreSettings {
  /** Absent: etcdv3. */
  datastore_type?: 'etcdv3' | 'kubernetes' | undefined;
  /** Comma-separated etcd URLs. */
  etcd_endpoints?: string | undefined;
  /** A DNS domain whose SRV records name the etcd endpoints (instead of etcd_endpoints). */
  etcd_discovery_srv?: string | undefined;
  etcd_key_file?: string | undefined;
  etcd_cert_file?: string | undefined;
  etcd_ca_cert_file?: string | undefined;
  /** Deprecated: used only when etcd_endpoints is unset. */
  etcd_authority?: string | undefined;
  /** Deprecated: http or https, with etcd_authority (checked when the store is opened). */
  etcd_scheme?: string | undefined;
  kubernetes?: { kubeconfig?: string | undefined; k8s_api_root?: string | undefined } | undefined;
}

/** The etcd fields, copied as they are between a netconf, netpluginctl's settings and a rendered conflist. */
export const ETCD_SETTINGS = [
  'etcd_endpoints',
  'etcd_discovery_srv',
  'etcd_key_file',
  'etcd_cert_file',
  'etcd_ca_cert_file',
] as const;
/** ETCD_SETTINGS and the deprecated ones, which a netconf may still hold (never written by us). */
export const ETCD_SETTINGS_WITH_DEPRECATED = [...ETCD_SETTINGS, 'etcd_authority', 'etcd_scheme'] as const;

/** What opens a store: the settings, plus what only programs (not a netconf) set. */
export interface DatastoreConfig extends DatastoreSettings {
  /**
   * kubeconfig_paths, context, allow_exec: netpluginctl's --kubeconfig/KUBECONFIG, --context and exec plugins
   * (src/k8s/client.ts).
   */
  kubernetes?: Omit<KubeClientOptions, 'timeoutMs'> | undefined;
  /** Default per-call deadline in ms (absent or undefined: 10 s). */
  timeoutMs?: number | undefined;
  /**
   * Internal (not a netconf field): how etcdv3 is spoken. "http" (default):
   * etcd's JSON gateway over node:http(s), cheap to load for a per-exec run;
   * "grpc": the etcd3 package (~180 ms to load and connect).
   */
  etcd_transport?: 'grpc' | 'http' | undefined;
}

/**
 * The datastore settings of a netconf not (yet) validated, e.g. a file given
 * to netpluginctl --config: the etcd fields that are strings and the
 * kubernetes block's two fields. `datastore_type` is returned as found, for
 * the caller to check and report in its own words.
 */
export function datastoreSettingsOf(
  raw: Record<string, unknown>,
): Omit<DatastoreSettings, 'datastore_type'> & { datastore_type?: unknown } {
  const out: Omit<DatastoreSettings, 'datastore_type'> & { datastore_type?: unknown } = {};
  if (raw['datastore_type'] != null) out.datastore_type = raw['datastore_type'];
  for (const k of ETCD_SETTINGS_WITH_DEPRECATED) {
    const v = raw[k];
    if (typeof v === 'string') out[k] = v;
  }
  const k8s = raw['kubernetes'] as { kubeconfig?: string; k8s_api_root?: string } | undefined;
  if (k8s && typeof k8s === 'object')
    out.kubernetes = {
      ...(k8s.kubeconfig ? { kubeconfig: k8s.kubeconfig } : {}),
      ...(k8s.k8s_api_root ? { k8s_api_root: k8s.k8s_api_root } : {}),
    };
  return out;
}

/** Whether the environment names a datastore at all (DATASTORE_TYPE, etcd endpoints, or Kubernetes access). */
export function datastoreEnvGiven(env: Record<string, string | undefined>): boolean {
  return !!(env.DATASTORE_TYPE || env.ETCD_ENDPOINTS || env.ETCD_DISCOVERY_SRV || env.KUBECONFIG || env.K8S_API_ROOT);
}

/** KUBECONFIG's files: a ':'-separated list, merged in order as kubectl merges them (src/k8s/client.ts). */
export function kubeconfigPathsFromEnv(env: Record<string, string | undefined>): string[] {
  return (env.KUBECONFIG ?? '').split(':').filter(Boolean);
}

/**
 * Datastore settings from the environment: DATASTORE_TYPE, ETCD_ENDPOINTS,
 * ETCD_DISCOVERY_SRV, ETCD_KEY_FILE, ETCD_CERT_FILE, ETCD_CA_CERT_FILE,
 * KUBECONFIG, K8S_API_ROOT, DATASTORE_TIMEOUT_MS. The one parser of these,
 * used by netplugin-kube-controllers and netpluginctl.
 *
 * `cli` (netpluginctl): without DATASTORE_TYPE the type follows from what is
 * given (etcd when its endpoints are, else kubernetes), etcdv3 then needs its
 * endpoints, and every KUBECONFIG file is kept (kubeconfig_paths, merged);
 * otherwise the first KUBECONFIG file is the datastore's kubeconfig.
 */
export function datastoreConfigFromEnv(
  env: Record<string, string | undefined>,
  opts: { cli?: boolean } = {},
): DatastoreConfig {
  const conf: DatastoreConfig = {};
  const t = env.DATASTORE_TYPE;
  if (t !== undefined && t !== '') {
    if (t !== 'etcdv3' && t !== 'kubernetes')
      throw new DatastoreError('Invalid', `DATASTORE_TYPE=${t} is not supported; use etcdv3 or kubernetes`);
    conf.datastore_type = t;
  } else if (opts.cli) {
    // etcd wins when its endpoints are given: KUBECONFIG is set on many admin
    // machines for kubectl and says nothing about where netplugin keeps its data.
    conf.datastore_type = env.ETCD_ENDPOINTS || env.ETCD_DISCOVERY_SRV ? 'etcdv3' : 'kubernetes';
  }
  // ETCD_ENDPOINTS -> etcd_endpoints, ...
  for (const k of ETCD_SETTINGS) {
    const v = env[k.toUpperCase()];
    if (v) conf[k] = v;
  }
  if (env.KUBECONFIG || env.K8S_API_ROOT) {
    conf.kubernetes = {};
    const paths = kubeconfigPathsFromEnv(env);
    if (env.KUBECONFIG) {
      if (opts.cli) conf.kubernetes.kubeconfig_paths = paths;
      else if (paths[0]) conf.kubernetes.kubeconfig = paths[0];
    }
    if (env.K8S_API_ROOT) conf.kubernetes.k8s_api_root = env.K8S_API_ROOT;
  }
  if (env.DATASTORE_TIMEOUT_MS) {
    const n = Number(env.DATASTORE_TIMEOUT_MS);
    if (!Number.isInteger(n) || n <= 0)
      throw new DatastoreError(
        'Invalid',
        `DATASTORE_TIMEOUT_MS=${env.DATASTORE_TIMEOUT_MS} must be a positive integer (milliseconds)`,
      );
    conf.timeoutMs = n;
  }
  if (opts.cli && conf.datastore_type === 'etcdv3' && !conf.etcd_endpoints && !conf.etcd_discovery_srv) {
    throw new DatastoreError(
      'Invalid',
      'DATASTORE_TYPE=etcdv3 needs ETCD_ENDPOINTS (e.g. http://127.0.0.1:2379) or ETCD_DISCOVERY_SRV',
    );
  }
  return conf;
}
