// Watch-fed Pod and Namespace caches for the resident agent (issue 8): an ADD
// there reads its pod and namespace from memory instead of two API round trips.
// Never used by the one-shot executable (a watch outlives nothing there).
//
// Safety argument (why a cached pod is as good as a GET for CNI ADD):
// - The kubelet runs CNI ADD only after it has seen the pod bound to this node,
//   with the annotations it was created with. Our pods watch uses the same
//   filter (spec.nodeName=<node>), so the pod normally arrives here well before
//   the sandbox is built. A pod not (yet) in the cache is read with a GET, so
//   "created a moment ago" is never a failure, only a slower read.
// - Annotation edits on a running pod are not honoured (docs/addresses-and-annotations.md): the
//   addresses are chosen once at ADD. What matters is the pod *instance*.
// - A pod deleted and recreated under the same name (StatefulSet) has a new
//   uid. When the runtime passes K8S_POD_UID (containerd, CRI-O) it must equal
//   the cached uid, else we GET. Without it, a cached pod that carries a
//   deletionTimestamp is never served (it is the instance being replaced; the
//   graceful deletion precedes the replacement by the grace period), so only a
//   watch lagging by more than deletion + re-creation + scheduling + sandbox
//   set-up could hand out the old instance.
// - The cache answers only while synced: after a LIST and while its watch is
//   open. Any end of the watch (410 Gone, ERROR event, disconnect, server
//   timeout, silence past the server's timeout) marks it unsynced (reads go to
//   the API) until a fresh LIST.
// Namespaces: annotations may change at any time. A change racing an ADD can
// be missed for the watch latency (milliseconds); a direct GET has the same
// race one round trip earlier, and nothing orders a namespace edit against a
// pod's ADD except the edit happening first, which then precedes the pod's
// scheduling and sandbox set-up by far more than the watch latency. Accepted.
//
// Read-through results are stored only when that cannot regress the watch's
// view: the object's resourceVersion must be numeric and newer than everything
// the watch has applied (then the watch will deliver that version or a later
// one itself). Non-numeric versions: the watch is preferred, nothing is stored.
// The list+watch itself is the shared informer's (watch/informer.ts: offer()
// is the read-through rule, `open` the answering rule).
import type { Logger } from '../log/types.js';
import { Informer, type InformerOptions } from '../watch/informer.js';
import type { KubeClient, KubeObject, KubePod } from './client.js';
import { kubeSource } from './list-watch.js';
import type { NamespaceLike, PodLike, PodSource } from '../workload/workload.js';

export interface CachingPodSourceOptions {
  /** Only pods bound to this node are watched (spec.nodeName). */
  nodeName: string;
  log?: Logger;
  /** Server-side end of each watch (the API server's own default is 5-10 min); a re-list follows. Default 300 s. */
  watchTimeoutSeconds?: number;
  /** First retry delay after a failed LIST or a short-lived watch; doubles up to maxBackoffMs. Default 200 ms. */
  backoffMs?: number;
  /** Default 10 s. */
  maxBackoffMs?: number;
}

/** managedFields is most of a pod's bytes and nothing here reads it. */
function trim<T extends KubeObject>(o: T): T {
  if (o.metadata?.managedFields === undefined) return o;
  const { managedFields: _drop, ...metadata } = o.metadata;
  return { ...o, metadata: metadata as T['metadata'] };
}

/**
 * The informer's settings for one cache: re-list after every end of the watch,
 * jittered backoff, trimmed objects; list failures logged once per outage at
 * WARNING (a down API server must not flood the agent's log).
 */
function cacheOptions(what: string, opts: CachingPodSourceOptions, onList: () => void): InformerOptions<KubeObject> {
  const log = opts.log;
  let failing = false;
  return {
    backoffMs: opts.backoffMs ?? 200,
    maxBackoffMs: opts.maxBackoffMs ?? 10_000,
    jitter: true,
    afterTimeout: 'relist',
    transform: trim,
    onList: () => {
      if (failing) log?.info(`${what} cache: listed again; serving from the cache`);
      failing = false;
      onList();
    },
    onError: (err, _source, retry) => {
      if (retry?.phase === 'list') {
        const say = failing ? log?.debug.bind(log) : log?.warn.bind(log);
        failing = true;
        say?.(`${what} cache: list failed, reads go to the API server; retrying in ${retry.inMs} ms: ${err.message}`);
      } else if (retry?.phase === 'silent') log?.warn(`${what} cache: ${err.message}`);
      else log?.info(`${what} cache: watch ended (${err.message}); re-listing`);
    },
  };
}

/**
 * A PodSource over a KubeClient that serves the pods of one node and all
 * namespaces from watch-fed caches, reading through to the API on a miss.
 */
export class CachingPodSource implements PodSource {
  private readonly pods: Informer<KubeObject>;
  private readonly namespaces: Informer<KubeObject>;
  private waiters: Array<() => void> = [];

  constructor(
    private readonly client: KubeClient,
    private readonly opts: CachingPodSourceOptions,
  ) {
    const woke = () => queueMicrotask(() => this.wake());
    const timeout = { watchTimeoutSeconds: opts.watchTimeoutSeconds ?? 300 };
    const pods = `pods of node ${opts.nodeName}`;
    this.pods = new Informer(
      kubeSource(client, '/api/v1/pods', { ...timeout, query: { fieldSelector: `spec.nodeName=${opts.nodeName}` } }),
      {},
      cacheOptions(pods, opts, woke),
    );
    this.namespaces = new Informer(
      kubeSource(client, '/api/v1/namespaces', timeout),
      {},
      cacheOptions('namespaces', opts, woke),
    );
  }

  start(): this {
    this.pods.start();
    this.namespaces.start();
    return this;
  }

  stop(): void {
    this.pods.stop();
    this.namespaces.stop();
  }

  get synced(): boolean {
    return this.pods.open && this.namespaces.open;
  }

  /** The resourceVersion each watch has applied (read-through results do not move it). */
  get revisions(): { pods: string | undefined; namespaces: string | undefined } {
    return { pods: this.pods.revision || undefined, namespaces: this.namespaces.revision || undefined };
  }

  /** Resolves once both caches are synced (at once if they are). */
  whenSynced(): Promise<void> {
    if (this.synced) return Promise.resolve();
    return new Promise((resolve) => this.waiters.push(resolve));
  }

  private wake(): void {
    if (!this.synced) return;
    const w = this.waiters;
    this.waiters = [];
    for (const f of w) f();
  }

  /**
   * The pod, from the cache when that is safe (see the file comment), else GET.
   * `uid`: CNI_ARGS K8S_POD_UID when the runtime passed it.
   */
  async getPod(namespace: string, name: string, uid?: string): Promise<KubePod> {
    if (this.pods.open) {
      const p = this.pods.get(`${namespace}/${name}`) as KubePod | undefined;
      if (p && (!uid || p.metadata.uid === uid) && !p.metadata.deletionTimestamp) return structuredClone(p);
    }
    const p = await this.client.getPod(namespace, name);
    if (p.spec?.nodeName === this.opts.nodeName) this.pods.offer(p);
    return p;
  }

  async getNamespace(name: string): Promise<KubeObject> {
    if (this.namespaces.open) {
      const n = this.namespaces.get(name);
      if (n) return structuredClone(n);
    }
    const n = await this.client.getNamespace(name);
    this.namespaces.offer(n);
    return n;
  }

  /** A PodSource for one ADD: binds the runtime's K8S_POD_UID to the pod lookups. */
  forPod(uid: string | undefined): PodSource {
    return {
      getPod: (ns, name) => this.getPod(ns, name, uid) as Promise<PodLike>,
      getNamespace: (name) => this.getNamespace(name) as Promise<NamespaceLike>,
    };
  }
}
