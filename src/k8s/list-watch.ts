// The Kubernetes API as a list+watch source for the one informer (watch/informer.ts):
// a collection LISTed in pages and WATCHed from the list's resourceVersion, with
// bookmarks; a selector narrows both to the same set.
import type { ListWatchSource } from '../watch/informer.js';
import type { KubeClient, KubeList, KubeObject } from './client.js';

interface KubeSourceOptions {
  /** fieldSelector / labelSelector, sent with the list and the watch alike (`spec.nodeName=n1`). */
  query?: Record<string, string | undefined>;
  /** Asked of the server for each watch (it ends the stream then); the informer's silent-watch guard. Default 300. */
  watchTimeoutSeconds?: number;
}

/** `namespace/name`, or `name` for a cluster-scoped object. */
function kubeKeyOf(o: KubeObject): string {
  if (!o.metadata?.name) throw new Error('object without metadata.name');
  return o.metadata.namespace ? `${o.metadata.namespace}/${o.metadata.name}` : o.metadata.name;
}

/** A Kubernetes collection (`/api/v1/nodes`, `/apis/networking.k8s.io/v1/networkpolicies`). */
export function kubeSource<T extends KubeObject = KubeObject>(
  client: KubeClient,
  path: string,
  opts: KubeSourceOptions = {},
): ListWatchSource<T> {
  const timeout = opts.watchTimeoutSeconds ?? 300;
  const query = opts.query ?? {};
  return {
    name: path,
    watchEndsWithinMs: timeout * 1000,
    async list() {
      const items: T[] = [];
      let cont: string | undefined;
      let revision = '';
      do {
        const l = await client.request<KubeList<T>>('GET', path, undefined, {
          query: { ...query, limit: '500', continue: cont },
        });
        items.push(...(l.items ?? []));
        revision = l.metadata?.resourceVersion ?? revision;
        cont = l.metadata?.continue || undefined;
      } while (cont);
      return { items, revision };
    },
    watch(revision, onEvent, onEnd) {
      return client.watch(
        path,
        { ...query, resourceVersion: revision, allowWatchBookmarks: 'true', timeoutSeconds: String(timeout) },
        (ev) => {
          if (ev.type === 'ERROR') return; // the client ends the stream on it
          if (ev.type === 'BOOKMARK') {
            const rv = ev.object?.metadata?.resourceVersion;
            if (rv) onEvent({ type: 'BOOKMARK', revision: rv });
            return;
          }
          onEvent({ type: ev.type, object: ev.object as T });
        },
        (end) => onEnd({ ...(end.gone ? { gone: true } : {}), ...(end.error ? { error: end.error } : {}) }),
      );
    },
    keyOf: kubeKeyOf,
    revisionOf: (o) => o.metadata.resourceVersion,
  };
}
