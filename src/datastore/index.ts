// Opens the datastore the configuration names. Each backend module is imported
// dynamically so a per-pod run loads only the one it uses (and etcd3 /
// node:https clients only then).
import { DatastoreError } from '../errors.js';
import type { Datastore } from './types.js';
import type { DatastoreConfig } from './settings.js';

export type { Datastore } from './types.js';

export type { DatastoreConfig, DatastoreSettings } from './settings.js';
export { datastoreConfigFromEnv, datastoreEnvGiven, kubeconfigPathsFromEnv } from './settings.js';

export async function openDatastore(conf: DatastoreConfig): Promise<Datastore> {
  const type = conf.datastore_type ?? 'etcdv3';
  switch (type) {
    case 'etcdv3': {
      // Only the configured backend loads (the per-exec plugin opens one, and pays for no other).
      const { EtcdDatastore } = await import('./etcd.js');
      return EtcdDatastore.open(conf);
    }
    case 'kubernetes': {
      const { KubernetesDatastore } = await import('./kubernetes.js');
      return KubernetesDatastore.open(conf);
    }
    default:
      throw new DatastoreError(
        'Invalid',
        `datastore_type=${JSON.stringify(type)} is not supported; use "etcdv3" or "kubernetes"`,
      );
  }
}
