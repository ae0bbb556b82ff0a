// Our datastore (either backend) as a list+watch source for the one informer
// (watch/informer.ts): one kind, listed at the store's revision and watched from
// it. Any watch error ends the stream (the informer re-lists).
import type { Kind, Resource } from '../model/resources.js';
import type { ListWatchSource } from '../watch/informer.js';
import type { Datastore } from './types.js';

/** The informer's key of a resource: `namespace/name`, or `name` for a cluster-scoped one. */
export function resourceKey(name: string, namespace: string | undefined): string {
  return namespace ? `${namespace}/${name}` : name;
}

function keyOf(r: Resource): string {
  if (!r.metadata?.name) throw new Error('resource without metadata.name');
  return resourceKey(r.metadata.name, r.metadata.namespace || undefined);
}

export function datastoreSource<K extends Kind>(
  ds: Datastore,
  kind: K,
  opts: { namespace?: string } = {},
): ListWatchSource<Resource<K>> {
  return {
    name: `datastore ${kind}`,
    list: () => ds.list(kind, { namespace: opts.namespace }),
    watch(revision, onEvent, onEnd) {
      let ended = false;
      const w = ds.watch(kind, { revision, namespace: opts.namespace }, (ev) => {
        if (ended) return;
        if (ev.type === 'ERROR') {
          ended = true;
          w.stop();
          onEnd({ error: ev.error });
          return;
        }
        onEvent(ev);
      });
      return {
        stop: () => {
          ended = true;
          w.stop();
        },
      };
    },
    keyOf,
    revisionOf: (o) => o.metadata.resourceVersion,
  };
}
