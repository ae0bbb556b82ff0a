// LIST then WATCH with resync, over any source that can list at a revision and
// watch from it: the Kubernetes API (kubeSource) and our datastore
// (datastoreSource). The informer keeps a cache of the objects by key and tells
// its handler which keys changed. When the watch breaks or the revision is gone
// (410 / compaction) it re-lists after a backoff; the re-list's difference to
// the cache is reported as well (a deletion missed while disconnected shows up
// as a deleted key), so a consumer converges whatever it missed.
import type { KubeClient, KubeList, KubeObject } from '../k8s/client.js';
import type { Kind, Resource } from '../model/resources.js';
import type { Datastore } from '../datastore/types.js';

interface SourceEvent<T> {
  type: 'ADDED' | 'MODIFIED' | 'DELETED';
  object: T;
}

export interface ListWatchSource<T> {
  /** For logs: `nodes`, `datastore NetworkPolicy`. */
  readonly name: string;
  list(): Promise<{ items: T[]; revision: string }>;
  /**
   * Streams changes after `revision`. onEnd: the stream ended (gone: the
   * revision is too old; error: it broke). A normal end (server timeout) has
   * neither and resumes from the last revision without a re-list.
   */
  watch(
    revision: string,
    onEvent: (ev: SourceEvent<T>) => void,
    onEnd: (end: { gone?: boolean; error?: Error; revision?: string }) => void,
  ): { stop(): void };
  keyOf(obj: T): string;
  revisionOf(obj: T): string | undefined;
}

interface InformerHandler<T> {
  /** `obj` undefined: the key was deleted (`old` is its last state). */
  onChange(key: string, obj: T | undefined, old: T | undefined): void;
}

interface InformerOptions {
  /** Re-list backoff: first delay (default 500 ms) up to maxBackoffMs (default 10 s). */
  backoffMs?: number;
  maxBackoffMs?: number;
  onError?: (err: Error, source: string) => void;
  /** Told after every successful list (count the resyncs). */
  onList?: (count: number) => void;
}

export class Informer<T> {
  private readonly cache = new Map<string, T>();
  private revision = '';
  private watchHandle: { stop(): void } | undefined;
  private timer: NodeJS.Timeout | undefined;
  private stopped = true;
  private backoff: number;
  private syncedOnce = false;
  private syncWaiters: Array<() => void> = [];
  /** True while a watch stream is open (for /healthz). */
  watching = false;

  constructor(
    readonly source: ListWatchSource<T>,
    private readonly handler: InformerHandler<T>,
    private readonly opts: InformerOptions = {},
  ) {
    this.backoff = opts.backoffMs ?? 500;
  }

  get synced(): boolean {
    return this.syncedOnce;
  }

  /** Resolves after the first complete list. */
  whenSynced(): Promise<void> {
    if (this.syncedOnce) return Promise.resolve();
    return new Promise((r) => this.syncWaiters.push(r));
  }

  get(key: string): T | undefined {
    return this.cache.get(key);
  }

  list(): T[] {
    return [...this.cache.values()];
  }

  keys(): string[] {
    return [...this.cache.keys()];
  }

  start(): void {
    if (!this.stopped) return;
    this.stopped = false;
    void this.relist();
  }

  stop(): void {
    this.stopped = true;
    this.watching = false;
    clearTimeout(this.timer);
    this.watchHandle?.stop();
    this.watchHandle = undefined;
  }

  /** A handler that throws must not stop the informer (nor, from a stream callback, crash the process). */
  private notify(key: string, obj: T | undefined, old: T | undefined): void {
    try {
      this.handler.onChange(key, obj, old);
    } catch (e) {
      this.opts.onError?.(e as Error, `${this.source.name} (handler for ${key})`);
    }
  }

  private fail(err: Error): void {
    this.watching = false;
    this.opts.onError?.(err, this.source.name);
    if (this.stopped) return;
    clearTimeout(this.timer);
    this.timer = setTimeout(() => void this.relist(), this.backoff);
    this.backoff = Math.min(this.backoff * 2, this.opts.maxBackoffMs ?? 10_000);
  }

  private async relist(): Promise<void> {
    if (this.stopped) return;
    this.watchHandle?.stop();
    this.watchHandle = undefined;
    let listed: { items: T[]; revision: string };
    try {
      listed = await this.source.list();
    } catch (e) {
      return this.fail(e as Error);
    }
    if (this.stopped) return;
    const seen = new Set<string>();
    for (const obj of listed.items) {
      const key = this.source.keyOf(obj);
      seen.add(key);
      const old = this.cache.get(key);
      this.cache.set(key, obj);
      if (!old || this.source.revisionOf(old) !== this.source.revisionOf(obj)) this.notify(key, obj, old);
    }
    for (const [key, old] of [...this.cache]) {
      if (seen.has(key)) continue;
      this.cache.delete(key);
      this.notify(key, undefined, old);
    }
    this.revision = listed.revision;
    this.opts.onList?.(listed.items.length);
    if (!this.syncedOnce) {
      this.syncedOnce = true;
      const w = this.syncWaiters;
      this.syncWaiters = [];
      w.forEach((f) => f());
    }
    this.startWatch();
  }

  private startWatch(): void {
    if (this.stopped) return;
    this.watching = true;
    const handle = this.source.watch(
      this.revision,
      (ev) => {
        if (this.stopped || this.watchHandle !== handle) return;
        this.backoff = this.opts.backoffMs ?? 500;
        let key: string;
        let rev: string | undefined;
        try {
          key = this.source.keyOf(ev.object);
          rev = this.source.revisionOf(ev.object);
        } catch (e) {
          // An event without metadata: the stream cannot be trusted; start over.
          handle.stop();
          this.watchHandle = undefined;
          return this.fail(
            new Error(`${this.source.name}: malformed watch event (${(e as Error).message}); re-listing`),
          );
        }
        if (rev) this.revision = rev;
        const old = this.cache.get(key);
        if (ev.type === 'DELETED') {
          if (!this.cache.delete(key)) return;
          this.notify(key, undefined, old);
        } else {
          this.cache.set(key, ev.object);
          this.notify(key, ev.object, old);
        }
      },
      (end) => {
        if (this.stopped || this.watchHandle !== handle) return;
        this.watchHandle = undefined;
        if (end.revision) this.revision = end.revision;
        if (end.gone || end.error)
          return this.fail(
            end.error ?? new Error(`${this.source.name}: watch revision ${this.revision} is gone; re-listing`),
          );
        // The server's own watch timeout: resume where we are.
        this.timer = setTimeout(() => this.startWatch(), 50);
      },
    );
    this.watchHandle = handle;
  }
}

// ---- sources ----

/** A Kubernetes collection (`/api/v1/nodes`, `/apis/networking.k8s.io/v1/networkpolicies`). */
export function kubeSource<T extends KubeObject = KubeObject>(client: KubeClient, path: string): ListWatchSource<T> {
  return {
    name: path,
    async list() {
      const items: T[] = [];
      let cont: string | undefined;
      let revision = '';
      do {
        const l = await client.request<KubeList<T>>('GET', path, undefined, {
          query: { limit: '500', continue: cont },
        });
        items.push(...l.items);
        revision = l.metadata.resourceVersion ?? revision;
        cont = l.metadata.continue || undefined;
      } while (cont);
      return { items, revision };
    },
    watch(revision, onEvent, onEnd) {
      let last: string | undefined;
      return client.watch(
        path,
        { resourceVersion: revision, allowWatchBookmarks: 'true', timeoutSeconds: '300' },
        (ev) => {
          if (ev.object?.metadata?.resourceVersion) last = ev.object.metadata.resourceVersion;
          if (ev.type === 'BOOKMARK' || ev.type === 'ERROR') return;
          onEvent({ type: ev.type, object: ev.object as T });
        },
        (end) =>
          onEnd({
            ...(end.gone ? { gone: true } : {}),
            ...(end.error ? { error: end.error } : {}),
            ...(last ? { revision: last } : {}),
          }),
      );
    },
    keyOf: (o) => (o.metadata.namespace ? `${o.metadata.namespace}/${o.metadata.name}` : o.metadata.name),
    revisionOf: (o) => o.metadata.resourceVersion,
  };
}

/** One kind of our datastore (either backend). Any watch error re-lists. */
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
    keyOf: (o) => (o.metadata.namespace ? `${o.metadata.namespace}/${o.metadata.name}` : o.metadata.name),
    revisionOf: (o) => o.metadata.resourceVersion,
  };
}
