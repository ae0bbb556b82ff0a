// Open datastores by settings: the per-exec plugin's one connection, and the agent's warm ones that
// its requests and its controllers share. Only types, the settings list and the small client cache
// are imported: the per-exec plugin loads this module before any command runs, and a backend only
// when it opens one.
import { createClientCache } from '../client-cache.js';
import type { DatastoreConfig } from './index.js';
import { ETCD_SETTINGS_WITH_DEPRECATED } from './settings.js';
import type { Datastore } from './types.js';

/** Where the warm connections come from: what the agent's controllers and its requests share. */
export interface DatastoreSource {
  /** The open datastore for these settings (one per distinct settings; a failed open is retried by the next call). */
  datastore(s: DatastoreConfig): Promise<Datastore>;
}

export interface DatastorePool extends DatastoreSource {
  /** Closes every open datastore (shutdown, tests). */
  close(): Promise<void>;
}

interface DatastorePoolOptions {
  /** Applied to every datastore opened (the agent's read cache and metrics). */
  wrap?: (ds: Datastore) => Datastore;
  /**
   * How etcdv3 stores without an explicit etcd_transport are spoken: a
   * long-lived process may prefer gRPC (one multiplexed, pinged connection for
   * many watches); the default is the HTTP gateway, cheap to load.
   */
  etcdTransport?: 'grpc' | 'http';
}

/**
 * Open clients by settings. Bounded: a node has one or two networks, but each
 * distinct netconf the agent is sent would otherwise keep its own connection
 * (and fds) open for ever.
 */
export const CLIENT_CACHE_LIMITS = Object.freeze({ max: 16, idleMs: 10 * 60_000, graceMs: 60_000 });

/**
 * One key per distinct connection: the etcd fields come from the settings' own list, so a new field cannot be forgotten
 * here.
 */
function datastoreKey(s: DatastoreConfig): string {
  return JSON.stringify([
    s.datastore_type ?? 'etcdv3',
    ...ETCD_SETTINGS_WITH_DEPRECATED.map((k) => s[k]),
    s.kubernetes?.kubeconfig,
    s.kubernetes?.k8s_api_root,
    s.etcd_transport,
  ]);
}

export function createDatastorePool(opts: DatastorePoolOptions = {}): DatastorePool {
  const open = createClientCache<Datastore>({ ...CLIENT_CACHE_LIMITS, close: (d) => d.close() });
  const wrap = opts.wrap ?? ((ds: Datastore) => ds);
  return {
    datastore(s) {
      const conf =
        s.datastore_type !== 'kubernetes' && !s.etcd_transport && opts.etcdTransport
          ? { ...s, etcd_transport: opts.etcdTransport }
          : s;
      // A failed connection is not cached: the next invocation retries. Loaded on first use: the
      // per-exec plugin pays for a backend only when a command needs it.
      return open.get(datastoreKey(conf), () => import('./index.js').then((m) => m.openDatastore(conf)).then(wrap));
    },
    close: () => open.closeAll(),
  };
}
