// Kinds the kubernetes datastore derives on read, under the names the etcd
// mirrors of netplugin-kube-controllers carry, so both datastores show one
// model: NetworkPolicy `knp.default.<name>` from networking.k8s.io/v1
// NetworkPolicies, Profile `kns.<ns>` from Namespaces and `ksa.<ns>.<sa>`
// from ServiceAccounts (src/model/). They are read-only: the Kubernetes
// objects are the ones to change.
import { DatastoreError } from '../errors.js';
import type { KubeClient, KubeList, KubeObject, WatchHandle } from '../k8s/client.js';
import {
  convertK8sNetworkPolicy,
  K8S_POLICY_PREFIX,
  k8sPolicyName,
  PolicyConversionError,
  type KubeNetworkPolicy,
} from '../model/k8s-networkpolicy.js';
import * as profiles from '../model/profiles.js';
import { InvalidObjectError, invalidTombstone, type InvalidObject } from './invalid.js';
import type { Kind, Resource } from '../model/resources.js';
import type { Watch, WatchEvent, WatchOptions } from './types.js';

const enc = encodeURIComponent;

interface DerivedSource {
  /** The collection path (all namespaces, or one). */
  path(namespace?: string): string;
  /** The derived object, or undefined when the source object derives none. Throws on a malformed one. */
  toResource(obj: KubeObject): Resource | undefined;
  /** The derived object's kind and name (to name a malformed source object). */
  identity(obj: KubeObject): { kind: Kind; name: string; namespace?: string };
}

const npSource: DerivedSource = {
  path: (ns) => `/apis/networking.k8s.io/v1${ns !== undefined ? `/namespaces/${enc(ns)}` : ''}/networkpolicies`,
  toResource: (o) => convertK8sNetworkPolicy(o as unknown as KubeNetworkPolicy),
  identity: (o) => ({
    kind: 'NetworkPolicy',
    name: k8sPolicyName(o.metadata.name),
    namespace: o.metadata.namespace ?? 'default',
  }),
};
const nsSource: DerivedSource = {
  path: () => '/api/v1/namespaces',
  toResource: (o) => profiles.namespaceToProfile(o),
  identity: (o) => ({ kind: 'Profile', name: profiles.namespaceProfileName(o.metadata.name) }),
};
const saSource: DerivedSource = {
  path: () => '/api/v1/serviceaccounts',
  toResource: (o) => profiles.serviceAccountToProfile(o),
  identity: (o) => ({
    kind: 'Profile',
    name: profiles.serviceAccountProfileName(o.metadata.namespace || 'default', o.metadata.name),
  }),
};

/**
 * One source object: its derived object, none, or why it cannot be derived
 * (a NetworkPolicy the API server should have refused): named, never thrown
 * into a list or a watch (invalid.ts).
 */
function derive(
  src: DerivedSource,
  o: KubeObject,
  server: string,
): { res: Resource } | { invalid: InvalidObject } | undefined {
  try {
    const r = src.toResource(o);
    return r ? { res: withSourceMeta(r, o) } : undefined;
  } catch (e) {
    if (!(e instanceof PolicyConversionError) && !(e instanceof TypeError) && !(e instanceof DatastoreError)) throw e;
    const ns = o.metadata?.namespace;
    const path = `${src.path(ns)}/${enc(String(o.metadata?.name ?? ''))}`;
    return {
      invalid: {
        ...src.identity(o),
        ...(o.metadata?.resourceVersion ? { revision: o.metadata.resourceVersion } : {}),
        where: `${server}${path}`,
        reason: (e as Error).message,
        raw: {
          apiVersion: o.apiVersion,
          kind: o.kind,
          metadata: { name: o.metadata?.name, namespace: ns, labels: o.metadata?.labels },
          spec: o.spec,
        },
      },
    };
  }
}

function sourcesOf(kind: Kind, namespace?: string): DerivedSource[] {
  if (kind === 'NetworkPolicy') return [npSource];
  // Profiles are cluster-scoped: a namespace filter does not apply.
  if (kind === 'Profile' && namespace === undefined) return [nsSource, saSource];
  return [];
}

/** Whether `name` of `kind` is derived (and so read-only) in kubernetes mode. */
export function isDerived(kind: Kind, name: string): boolean {
  if (kind === 'NetworkPolicy') return name.startsWith(K8S_POLICY_PREFIX);
  if (kind === 'Profile') return profiles.parseProfileName(name) !== undefined;
  return false;
}

export function readOnlyError(kind: Kind, name: string, namespace?: string): DatastoreError {
  const profile = profiles.parseProfileName(name);
  const src =
    kind === 'NetworkPolicy'
      ? `the Kubernetes NetworkPolicy ${namespace || 'default'}/${name.slice(K8S_POLICY_PREFIX.length)}`
      : profile?.serviceAccount !== undefined
        ? `the ServiceAccount ${profile.namespace}/${profile.serviceAccount}`
        : `the Namespace ${profile?.namespace}`;
  return new DatastoreError(
    'Invalid',
    `${kind} ${name} is derived from ${src} and is read-only with the kubernetes datastore; change the Kubernetes ` +
      `object instead`,
  );
}

/** The source object carries the version: a derived object changes exactly when it does. */
function withSourceMeta(res: Resource, o: KubeObject): Resource {
  const m = res.metadata;
  if (o.metadata.resourceVersion) m.resourceVersion = o.metadata.resourceVersion;
  if (o.metadata.uid) m.uid = o.metadata.uid;
  if (o.metadata.creationTimestamp) m.creationTimestamp = o.metadata.creationTimestamp;
  return res;
}

export async function derivedGet<K extends Kind>(
  client: KubeClient,
  kind: K,
  name: string,
  namespace: string | undefined,
): Promise<Resource<K>> {
  let path: string;
  if (kind === 'NetworkPolicy')
    path = `${npSource.path(namespace || 'default')}/${enc(name.slice(K8S_POLICY_PREFIX.length))}`;
  else {
    const p = profiles.parseProfileName(name)!;
    path =
      p.serviceAccount === undefined
        ? `/api/v1/namespaces/${enc(p.namespace)}`
        : `/api/v1/namespaces/${enc(p.namespace)}/serviceaccounts/${enc(p.serviceAccount)}`;
  }
  const notFound = () =>
    new DatastoreError(
      'NotFound',
      `${kind} ${kind === 'NetworkPolicy' ? `${namespace || 'default'}/` : ''}${name} not found (derived from ${path})`,
    );
  let o: KubeObject;
  try {
    o = await client.request<KubeObject>('GET', path);
  } catch (e) {
    if (DatastoreError.is(e, 'NotFound')) throw notFound();
    throw e;
  }
  const src =
    kind === 'NetworkPolicy'
      ? npSource
      : profiles.parseProfileName(name)!.serviceAccount === undefined
        ? nsSource
        : saSource;
  const d = derive(src, o, client.server);
  if (d && 'invalid' in d && d.invalid.name === name) throw new InvalidObjectError(d.invalid);
  if (!d || !('res' in d) || d.res.metadata.name !== name) throw notFound();
  return d.res as Resource<K>;
}

/**
 * The derived objects of `kind` (none for kinds that have none) and the source objects that derive none validly, with
 * the oldest list revision.
 */
export async function derivedList<K extends Kind>(
  client: KubeClient,
  kind: K,
  namespace: string | undefined,
): Promise<{ items: Array<Resource<K>>; invalid: InvalidObject[]; revision?: string }> {
  const items: Array<Resource<K>> = [];
  const invalid: InvalidObject[] = [];
  let revision: string | undefined;
  for (const src of sourcesOf(kind, namespace)) {
    const l = await client.request<KubeList>('GET', src.path(namespace));
    for (const o of l.items) {
      const d = derive(src, o, client.server);
      if (d && 'res' in d) items.push(d.res as Resource<K>);
      else if (d) invalid.push(d.invalid);
    }
    revision = minRevision(revision, l.metadata.resourceVersion);
  }
  return { items, invalid, ...(revision !== undefined ? { revision } : {}) };
}

/**
 * resourceVersions are opaque, but one API server hands out a single
 * increasing sequence; watching every collection from the oldest list's
 * revision re-delivers at worst a few events and never misses one.
 */
export function minRevision(a: string | undefined, b: string | undefined): string | undefined {
  if (a === undefined || a === '') return b;
  if (b === undefined || b === '') return a;
  return /^\d+$/.test(a) && /^\d+$/.test(b) && BigInt(b) < BigInt(a) ? b : a;
}

/**
 * Watches the derived objects of `kind` after `revision`, with the same
 * contract as Datastore.watch: resumes after a normal end, reports ERROR and
 * stops on 410 Gone (the caller re-lists). Undefined for kinds without any.
 */
export function derivedWatch<K extends Kind>(
  client: KubeClient,
  kind: K,
  opts: WatchOptions,
  onEvent: (ev: WatchEvent<K>) => void,
): Watch | undefined {
  const sources = sourcesOf(kind, opts.namespace);
  if (!sources.length) return undefined;
  let stopped = false;
  const handles: WatchHandle[] = [];
  const timers: NodeJS.Timeout[] = [];
  const stop = () => {
    stopped = true;
    timers.forEach(clearTimeout);
    handles.forEach((h) => h.stop());
  };
  sources.forEach((src, i) => {
    let lastRv = opts.revision;
    let backoff = 250;
    const connect = async () => {
      if (stopped) return;
      if (lastRv === undefined) {
        try {
          lastRv = (
            await client.request<KubeList>('GET', src.path(opts.namespace), undefined, { query: { limit: '1' } })
          ).metadata.resourceVersion;
        } catch (e) {
          return retry(e as DatastoreError);
        }
      }
      if (stopped) return;
      handles[i] = client.watch(
        src.path(opts.namespace),
        { resourceVersion: lastRv, allowWatchBookmarks: 'true' },
        (ev) => {
          if (stopped) return;
          if (ev.object?.metadata?.resourceVersion) lastRv = ev.object.metadata.resourceVersion;
          if (ev.type === 'BOOKMARK' || ev.type === 'ERROR') return;
          backoff = 250;
          const d = derive(src, ev.object, client.server);
          if (d && 'res' in d) onEvent({ type: ev.type, object: d.res as Resource<K> });
          // One that derives none validly: a delete of what it derived (invalid.ts).
          else if (d)
            onEvent(
              ev.type === 'DELETED'
                ? { type: 'DELETED', object: invalidTombstone<K>(d.invalid) }
                : { type: 'DELETED', object: invalidTombstone<K>(d.invalid), invalid: d.invalid },
            );
        },
        (end) => {
          if (stopped) return;
          if (
            end.gone ||
            (end.error &&
              (end.error.kind === 'Unauthorized' || end.error.kind === 'NotFound' || end.error.kind === 'Invalid'))
          ) {
            onEvent({
              type: 'ERROR',
              error: end.gone
                ? new DatastoreError(
                    'Conflict',
                    `watch ${kind} (${src.path(opts.namespace)}) from revision ${lastRv}: that revision is too old ` +
                      `(410 Gone); re-list and watch from the list's revision`,
                    { cause: end.error },
                  )
                : end.error!,
            });
            stop();
            return;
          }
          retry(end.error);
        },
      );
    };
    const retry = (e: DatastoreError | undefined) => {
      if (stopped) return;
      timers[i] = setTimeout(() => void connect(), e ? backoff : 50);
      if (e) backoff = Math.min(backoff * 2, 5000);
    };
    void connect();
  });
  return { stop };
}
