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
//   timeout) marks it unsynced (reads go to the API) until a fresh LIST.
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
import type { Logger } from '../log/types.js';
import type { KubeClient, KubeList, KubeObject, KubePod, WatchHandle } from './client.js';
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

function rvNum(rv: string | undefined): bigint | undefined {
  return rv !== undefined && /^[0-9]{1,30}$/.test(rv) ? BigInt(rv) : undefined;
}

const keyOf = (o: KubeObject) =>
  o.metadata.namespace ? `${o.metadata.namespace}/${o.metadata.name}` : o.metadata.name;

/** managedFields is most of a pod's bytes and nothing here reads it. */
function trim<T extends KubeObject>(o: T): T {
  if (o.metadata?.managedFields === undefined) return o;
  const { managedFields: _drop, ...metadata } = o.metadata;
  return { ...o, metadata: metadata as T['metadata'] };
}

/** LIST + WATCH of one collection into a map; re-lists after every end of the watch. */
class Reflector {
  items = new Map<string, KubeObject>();
  synced = false;
  /** resourceVersion of the LIST or the last event applied. */
  rv: string | undefined;
  private stopped = true;
  private generation = 0;
  private handle: WatchHandle | undefined;
  private timer: NodeJS.Timeout | undefined;
  private guard: NodeJS.Timeout | undefined;
  private backoff: number;
  private listFailing = false;

  constructor(
    private readonly client: KubeClient,
    private readonly path: string,
    private readonly query: Record<string, string | undefined>,
    private readonly what: string,
    private readonly opts: Required<
      Pick<CachingPodSourceOptions, 'watchTimeoutSeconds' | 'backoffMs' | 'maxBackoffMs'>
    > & { log?: Logger },
    private readonly onSynced: () => void,
  ) {
    this.backoff = opts.backoffMs;
  }

  start(): void {
    if (!this.stopped) return;
    this.stopped = false;
    void this.list();
  }

  stop(): void {
    this.stopped = true;
    this.synced = false;
    this.generation++;
    this.handle?.stop();
    this.handle = undefined;
    clearTimeout(this.timer);
    clearTimeout(this.guard);
  }

  /** Stores a read-through result when it is newer than all the watch has applied. */
  offer(o: KubeObject): void {
    if (!this.synced) return;
    const got = rvNum(o.metadata.resourceVersion);
    const seen = rvNum(this.rv);
    if (got === undefined || seen === undefined || got <= seen) return;
    const cur = this.items.get(keyOf(o));
    const curRv = cur ? rvNum(cur.metadata.resourceVersion) : undefined;
    if (cur && (curRv === undefined || curRv >= got)) return;
    this.items.set(keyOf(o), trim(o));
  }

  private retry(gen: number, delay: number): void {
    if (this.stopped || gen !== this.generation) return;
    clearTimeout(this.timer);
    this.timer = setTimeout(() => void this.list(), delay);
    this.timer.unref?.();
  }

  private nextBackoff(): number {
    const d = this.backoff;
    this.backoff = Math.min(this.backoff * 2, this.opts.maxBackoffMs);
    // Jitter: many agents re-listing in lockstep after an API server restart is what hurts it.
    return Math.round(d * (0.75 + Math.random() * 0.5));
  }

  private async list(): Promise<void> {
    const gen = ++this.generation;
    this.synced = false;
    this.handle?.stop();
    this.handle = undefined;
    clearTimeout(this.guard);
    let list: KubeList;
    try {
      list = await this.client.request<KubeList>('GET', this.path, undefined, { query: this.query });
    } catch (e) {
      if (this.stopped || gen !== this.generation) return;
      const delay = this.nextBackoff();
      // Once per outage at WARNING: a down API server must not flood the agent's log.
      const say = this.listFailing ? this.opts.log?.debug.bind(this.opts.log) : this.opts.log?.warn.bind(this.opts.log);
      this.listFailing = true;
      say?.(
        `${this.what} cache: list failed, reads go to the API server; retrying in ${delay} ms: ${(e as Error).message}`,
      );
      return this.retry(gen, delay);
    }
    if (this.stopped || gen !== this.generation) return;
    if (this.listFailing) this.opts.log?.info(`${this.what} cache: listed again; serving from the cache`);
    this.listFailing = false;
    const items = new Map<string, KubeObject>();
    for (const o of list.items ?? []) items.set(keyOf(o), trim(o));
    this.items = items;
    this.rv = list.metadata?.resourceVersion;
    this.synced = true;
    this.watch(gen);
    this.onSynced();
  }

  private watch(gen: number): void {
    const started = Date.now();
    const timeout = this.opts.watchTimeoutSeconds;
    this.handle = this.client.watch(
      this.path,
      { ...this.query, resourceVersion: this.rv, allowWatchBookmarks: 'true', timeoutSeconds: String(timeout) },
      (ev) => {
        if (this.stopped || gen !== this.generation) return;
        const o = ev.object;
        const rv = o?.metadata?.resourceVersion;
        if (ev.type === 'BOOKMARK') {
          if (rv) this.rv = rv;
          return;
        }
        if (!o?.metadata?.name) return;
        const k = keyOf(o);
        // A read-through result may already hold a later version than this event.
        const cur = this.items.get(k);
        const curRv = cur ? rvNum(cur.metadata.resourceVersion) : undefined;
        const evRv = rvNum(rv);
        const older = curRv !== undefined && evRv !== undefined && curRv > evRv;
        if (ev.type === 'DELETED') {
          if (!older) this.items.delete(k);
        } else if (!older) {
          this.items.set(k, trim(o));
        }
        if (rv) this.rv = rv;
      },
      (end) => {
        if (this.stopped || gen !== this.generation) return;
        this.synced = false;
        clearTimeout(this.guard);
        const lived = Date.now() - started;
        // A watch that ran its course was healthy: re-list at once. One that
        // ended early (403, 410 right away, a flapping server) backs off.
        let delay = 0;
        if (lived >= 30_000) this.backoff = this.opts.backoffMs;
        else delay = this.nextBackoff();
        if (end.error)
          this.opts.log?.info(
            `${this.what} cache: watch ended (${end.gone ? '410 Gone' : end.error.message}); re-listing`,
          );
        this.retry(gen, delay);
      },
    );
    // A half-open connection never ends on its own: if the server's timeout
    // has long passed, the stream is dead; re-list.
    this.guard = setTimeout(
      () => {
        if (this.stopped || gen !== this.generation) return;
        this.opts.log?.warn(`${this.what} cache: watch silent past its ${timeout} s timeout; re-listing`);
        void this.list();
      },
      (timeout + 30) * 1000,
    );
    this.guard.unref?.();
  }
}

/**
 * A PodSource over a KubeClient that serves the pods of one node and all
 * namespaces from watch-fed caches, reading through to the API on a miss.
 */
export class CachingPodSource implements PodSource {
  private readonly pods: Reflector;
  private readonly namespaces: Reflector;
  private waiters: Array<() => void> = [];

  constructor(
    private readonly client: KubeClient,
    private readonly opts: CachingPodSourceOptions,
  ) {
    const o = {
      watchTimeoutSeconds: opts.watchTimeoutSeconds ?? 300,
      backoffMs: opts.backoffMs ?? 200,
      maxBackoffMs: opts.maxBackoffMs ?? 10_000,
      ...(opts.log ? { log: opts.log } : {}),
    };
    const woke = () => this.wake();
    this.pods = new Reflector(
      client,
      '/api/v1/pods',
      { fieldSelector: `spec.nodeName=${opts.nodeName}` },
      `pods of node ${opts.nodeName}`,
      o,
      woke,
    );
    this.namespaces = new Reflector(client, '/api/v1/namespaces', {}, 'namespaces', o, woke);
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
    return this.pods.synced && this.namespaces.synced;
  }

  /** The resourceVersion each watch has applied (read-through results do not move it). */
  get revisions(): { pods: string | undefined; namespaces: string | undefined } {
    return { pods: this.pods.rv, namespaces: this.namespaces.rv };
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
    if (this.pods.synced) {
      const p = this.pods.items.get(`${namespace}/${name}`) as KubePod | undefined;
      if (p && (!uid || p.metadata.uid === uid) && !p.metadata.deletionTimestamp) return structuredClone(p);
    }
    const p = await this.client.getPod(namespace, name);
    if (p.spec?.nodeName === this.opts.nodeName) this.pods.offer(p);
    return p;
  }

  async getNamespace(name: string): Promise<KubeObject> {
    if (this.namespaces.synced) {
      const n = this.namespaces.items.get(name);
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
