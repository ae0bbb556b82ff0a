// Opens the datastore the configuration names. Each backend module is imported
// dynamically so a per-pod run loads only the one it uses (and etcd3 /
// node:https clients only then).
import { DatastoreError } from '../errors.js';
import type { Datastore } from './types.js';

export type { Datastore } from './types.js';

/** The netconf's datastore fields (same names), so the plugin passes its parsed netconf. */
export interface DatastoreConfig {
  datastore_type?: 'etcdv3' | 'kubernetes';
  etcd_endpoints?: string;
  etcd_discovery_srv?: string;
  etcd_key_file?: string;
  etcd_cert_file?: string;
  etcd_ca_cert_file?: string;
  /** Deprecated: used only when etcd_endpoints is unset. */
  etcd_authority?: string;
  /** Deprecated: http or https, with etcd_authority. */
  etcd_scheme?: string;
  /** kubeconfig_paths, context, allow_exec: netpluginctl's --kubeconfig/KUBECONFIG, --context and exec plugins (src/k8s/client.ts). */
  kubernetes?: { kubeconfig?: string; k8s_api_root?: string; kubeconfig_paths?: string[]; context?: string; allow_exec?: boolean };
  /** Default per-call deadline in ms (10 s). */
  timeoutMs?: number;
  /**
   * Internal (not a netconf field): how etcdv3 is spoken. "http" (default):
   * etcd's JSON gateway over node:http(s), cheap to load for a per-exec run;
   * "grpc": the etcd3 package (~180 ms to load and connect).
   */
  etcd_transport?: 'grpc' | 'http';
}

export async function openDatastore(conf: DatastoreConfig): Promise<Datastore> {
  const type = conf.datastore_type ?? 'etcdv3';
  switch (type) {
    case 'etcdv3': {
      const { EtcdDatastore } = await import('./etcd.js');
      return EtcdDatastore.open(conf);
    }
    case 'kubernetes': {
      const { KubernetesDatastore } = await import('./kubernetes.js');
      return KubernetesDatastore.open(conf);
    }
    default:
      throw new DatastoreError('Invalid', `datastore_type=${JSON.stringify(type)} is not supported; use "etcdv3" or "kubernetes"`);
  }
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
export function datastoreConfigFromEnv(env: Record<string, string | undefined>, opts: { cli?: boolean } = {}): DatastoreConfig {
  const conf: DatastoreConfig = {};
  const t = env.DATASTORE_TYPE;
  if (t !== undefined && t !== '') {
    if (t !== 'etcdv3' && t !== 'kubernetes') throw new DatastoreError('Invalid', `DATASTORE_TYPE=${t} is not supported; use etcdv3 or kubernetes`);
    conf.datastore_type = t;
  } else if (opts.cli) {
    // etcd wins when its endpoints are given: KUBECONFIG is set on many admin
    // machines for kubectl and says nothing about where netplugin keeps its data.
    conf.datastore_type = env.ETCD_ENDPOINTS || env.ETCD_DISCOVERY_SRV ? 'etcdv3' : 'kubernetes';
  }
  const set = (k: keyof DatastoreConfig & string, v: string | undefined) => {
    if (v) (conf as Record<string, unknown>)[k] = v;
  };
  set('etcd_endpoints', env.ETCD_ENDPOINTS);
  set('etcd_discovery_srv', env.ETCD_DISCOVERY_SRV);
  set('etcd_key_file', env.ETCD_KEY_FILE);
  set('etcd_cert_file', env.ETCD_CERT_FILE);
  set('etcd_ca_cert_file', env.ETCD_CA_CERT_FILE);
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
    if (!Number.isInteger(n) || n <= 0) throw new DatastoreError('Invalid', `DATASTORE_TIMEOUT_MS=${env.DATASTORE_TIMEOUT_MS} must be a positive integer (milliseconds)`);
    conf.timeoutMs = n;
  }
  if (opts.cli && conf.datastore_type === 'etcdv3' && !conf.etcd_endpoints && !conf.etcd_discovery_srv) {
    throw new DatastoreError('Invalid', 'DATASTORE_TYPE=etcdv3 needs ETCD_ENDPOINTS (e.g. http://127.0.0.1:2379) or ETCD_DISCOVERY_SRV');
  }
  return conf;
}
