// The one list+watch of the code base: LIST a collection, WATCH it from the
// list's revision, keep the objects by key, tell a handler which keys changed.
// It knows nothing of where the objects come from: a source (k8s/list-watch.ts
// for the Kubernetes API, datastore/list-watch.ts for our datastore) lists at a
// revision and streams changes after it. Every user goes through it: the
// kube-controllers and agent controllers (handlers), the agent's pod and
// namespace cache (k8s/cache.ts) and its datastore read cache
// (datastore/cached.ts), which also answer reads from it.
//
// What it keeps:
// - A broken watch or a revision that is gone (410 / compaction) re-lists after
//   a backoff (reset by any event, or by a watch that lived 30 s); the re-list's
//   difference to the cache is reported (a deletion missed while disconnected
//   shows up as a deleted key), so a consumer converges whatever it missed.
// - `open`: listed and the watch not ended since. A cache that must not answer
//   from a view the watch no longer feeds asks this, not `synced`.
// - Objects from outside the watch (a read-through GET: offer; a write-through:
//   put) are compared by revision with what the watch brings: an event older than
//   such an object does not overwrite or delete it, and a re-list older than it
//   keeps it. Revisions are compared only when both are decimal integers (etcd,
//   the in-memory store and the Kubernetes API in practice); anything else is
//   never stored from outside.
// - A source that says when its server ends every watch (watchEndsWithinMs) gets
//   a silent-watch guard: a stream still open well past that is half-open, so
//   it is dropped and the collection re-listed.

export type SourceEvent<T> =
  | { type: 'ADDED' | 'MODIFIED' | 'DELETED'; object: T }
  /** The server's progress note: nothing changed up to `revision`. */
  | { type: 'BOOKMARK'; revision: string };

/** How a watch stream ended: gone (the revision is too old), error (it broke); neither: the server's timeout. */
export interface ListWatchEnd {
  gone?: boolean;
  error?: Error;
  revision?: string;
}

export interface ListWatchSource<T> {
  /** For logs: `nodes`, `datastore NetworkPolicy`. */
  readonly name: string;
  list(): Promise<{ items: T[]; revision: string }>;
  /** Streams changes after `revision` until stopped or ended (onEnd, at most once). */
  watch(revision: string, onEvent: (ev: SourceEvent<T>) => void, onEnd: (end: ListWatchEnd) => void): { stop(): void };
  /** Throws on an object without identity (the stream is then not trusted: re-list). */
  keyOf(obj: T): string;
  revisionOf(obj: T): string | undefined;
  /** The server ends every watch within this long (its timeout); a stream open far longer is half-open. */
  readonly watchEndsWithinMs?: number;
}

interface InformerHandler<T> {
  /** `obj` undefined: the key was deleted (`old` is its last state). */
  onChange?(key: string, obj: T | undefined, old: T | undefined): void;
  /** Every watch event's key, whether it changed the cache or not (a cache that tracks unknown keys settles them). */
  onEvent?(key: string, type: 'ADDED' | 'MODIFIED' | 'DELETED'): void;
}

export interface InformerOptions<T> {
  /** Re-list backoff: first delay (default 500 ms), doubling up to maxBackoffMs (default 10 s). */
  backoffMs?: number;
  maxBackoffMs?: number;
  /** ±25 % on each delay: many agents re-listing in lockstep after an API server restart is what hurts it. */
  jitter?: boolean;
  /** `retry`: what failed and when the informer tries again. */
  onError?: (err: Error, source: string, retry?: { phase: 'list' | 'watch' | 'silent'; inMs: number }) => void;
  /** Told after every successful list (count the resyncs; a cache resets what it derived). */
  onList?: (count: number) => void;
  /** After the server's own end of a watch: resume from the last revision (default) or re-list. */
  afterTimeout?: 'resume' | 'relist';
  /** Applied to every object listed, watched or offered before it is kept (drop what nobody reads). */
  transform?: (obj: T) => T;
  /** How long past the source's watchEndsWithinMs a silent stream is trusted (default 30 s). */
  silentGraceMs?: number;
}

/** A watch that lived this long was healthy: the backoff starts over. */
const HEALTHY_WATCH_MS = 30_000;

function revNum(rv: string | undefined): bigint | undefined {
  return rv !== undefined && /^[0-9]{1,30}$/.test(rv) ? BigInt(rv) : undefined;
}

export class Informer<T> {
  private cache = new Map<string, T>();
  /** Keys whose object came from outside the watch (offer, put): events and lists older than it leave it. */
  private readonly outside = new Set<string>();
  private rev = '';
  private watchHandle: { stop(): void } | undefined;
  private timer: NodeJS.Timeout | undefined;
  private guard: NodeJS.Timeout | undefined;
  private stopped = true;
  private backoff: number;
  private syncedOnce = false;
  private syncWaiters: Array<() => void> = [];
  /** True while a watch stream is open (for /healthz). */
  watching = false;

  constructor(
    readonly source: ListWatchSource<T>,
    private readonly handler: InformerHandler<T> = {},
    private readonly opts: InformerOptions<T> = {},
  ) {
    this.backoff = opts.backoffMs ?? 500;
  }

  /** Listed at least once (the cache holds a complete view, perhaps an old one). */
  get synced(): boolean {
    return this.syncedOnce;
  }

  /** A watch from a complete list is open: the cache is as fresh as the watch (`watching`, by its other name). */
  get open(): boolean {
    return this.watching;
  }

  /** The revision of the list or of the last event or bookmark applied (offers and puts do not move it). */
  get revision(): string {
    return this.rev;
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
    this.endWatch();
    clearTimeout(this.timer);
  }

  /**
   * A read-through result: kept only while the cache is open and when it is
   * newer than everything the watch has applied (the watch then delivers that
   * version or a later one itself). An older one may describe an object the
   * watch has already deleted.
   */
  offer(obj: T): void {
    if (!this.open) return;
    const got = revNum(this.source.revisionOf(obj));
    const seen = revNum(this.rev);
    if (got === undefined || seen === undefined || got <= seen) return;
    this.keepNewer(obj, got);
  }

  /** A write-through result (the store's answer to our own write): kept unless the cache holds it or a later one. */
  put(obj: T): void {
    const got = revNum(this.source.revisionOf(obj));
    if (got !== undefined) this.keepNewer(obj, got);
  }

  /** Drops a key without telling the handler: the store may still have it, the owner reads it there. */
  forget(key: string): void {
    this.cache.delete(key);
    this.outside.delete(key);
  }

  private keepNewer(obj: T, got: bigint): void {
    const key = this.source.keyOf(obj);
    const old = this.cache.get(key);
    const cur = old === undefined ? undefined : (revNum(this.source.revisionOf(old)) ?? -1n);
    if (cur !== undefined && cur >= got) return;
    const kept = this.opts.transform ? this.opts.transform(obj) : obj;
    this.cache.set(key, kept);
    this.outside.add(key);
    this.notify(key, kept, old);
  }

  /** Whether the object kept under `key` came from outside the watch and is newer than revision `rv`. */
  private newerOutside(key: string, rv: string | undefined): boolean {
    if (!this.outside.has(key)) return false;
    const cur = this.cache.get(key);
    const a = cur === undefined ? undefined : revNum(this.source.revisionOf(cur));
    const b = revNum(rv);
    return a !== undefined && b !== undefined && a > b;
  }

  /** A handler that throws must not stop the informer (nor, from a stream callback, crash the process). */
  private notify(key: string, obj: T | undefined, old: T | undefined): void {
    try {
      this.handler.onChange?.(key, obj, old);
    } catch (e) {
      this.opts.onError?.(e as Error, `${this.source.name} (handler for ${key})`);
    }
  }

  private endWatch(): void {
    this.watching = false;
    clearTimeout(this.guard);
    this.watchHandle?.stop();
    this.watchHandle = undefined;
  }

  private nextBackoff(): number {
    const d = this.backoff;
    this.backoff = Math.min(this.backoff * 2, this.opts.maxBackoffMs ?? 10_000);
    return this.opts.jitter ? Math.round(d * (0.75 + Math.random() * 0.5)) : d;
  }

  private relistIn(delay: number): void {
    if (this.stopped) return;
    clearTimeout(this.timer);
    this.timer = setTimeout(() => void this.relist(), delay);
    this.timer.unref?.();
  }

  private fail(err: Error, phase: 'list' | 'watch' | 'silent', delay = this.nextBackoff()): void {
    this.endWatch();
    if (this.stopped) return;
    this.opts.onError?.(err, this.source.name, { phase, inMs: delay });
    this.relistIn(delay);
  }

  private async relist(): Promise<void> {
    if (this.stopped) return;
    this.endWatch();
    let listed: { items: T[]; revision: string };
    try {
      listed = await this.source.list();
    } catch (e) {
      return this.fail(e as Error, 'list');
    }
    if (this.stopped) return;
    const before = this.cache;
    const fresh = new Map<string, T>();
    for (const raw of listed.items) {
      const obj = this.opts.transform ? this.opts.transform(raw) : raw;
      try {
        fresh.set(this.source.keyOf(obj), obj);
      } catch (e) {
        // One object without identity is left out; the rest of the list stands.
        this.opts.onError?.(
          new Error(`${this.source.name}: listed object skipped: ${(e as Error).message}`),
          this.source.name,
        );
      }
    }
    // Put or offered after the list was taken: the watch from the list's revision brings it (or a later one).
    const listRev = revNum(listed.revision);
    for (const key of this.outside) {
      const mine = revNum(this.source.revisionOf(before.get(key) as T));
      const got = fresh.get(key);
      const listedRev = got === undefined ? -1n : (revNum(this.source.revisionOf(got)) ?? -1n);
      if (mine !== undefined && listRev !== undefined && mine > listRev && mine > listedRev)
        fresh.set(key, before.get(key)!);
      else this.outside.delete(key);
    }
    this.cache = fresh;
    const changed: Array<[string, T | undefined, T | undefined]> = [];
    for (const [key, obj] of fresh) {
      const old = before.get(key);
      if (old !== obj && (!old || this.source.revisionOf(old) !== this.source.revisionOf(obj)))
        changed.push([key, obj, old]);
    }
    for (const [key, old] of before) if (!fresh.has(key)) changed.push([key, undefined, old]);
    this.rev = listed.revision;
    this.opts.onList?.(listed.items.length);
    for (const [key, obj, old] of changed) this.notify(key, obj, old);
    if (!this.syncedOnce) {
      this.syncedOnce = true;
      const w = this.syncWaiters;
      this.syncWaiters = [];
      for (const f of w) f();
    }
    this.startWatch();
  }

  private applyEvent(type: 'ADDED' | 'MODIFIED' | 'DELETED', key: string, obj: T, rv: string | undefined): void {
    this.handler.onEvent?.(key, type);
    // A read- or write-through may already hold a later version than this event.
    if (this.newerOutside(key, rv)) return;
    this.outside.delete(key);
    const old = this.cache.get(key);
    if (type === 'DELETED') {
      if (!this.cache.delete(key)) return;
      this.notify(key, undefined, old);
    } else {
      const kept = this.opts.transform ? this.opts.transform(obj) : obj;
      this.cache.set(key, kept);
      this.notify(key, kept, old);
    }
  }

  private startWatch(): void {
    if (this.stopped) return;
    const started = Date.now();
    this.watching = true;
    const live = () => !this.stopped && this.watchHandle === handle;
    const handle = this.source.watch(
      this.rev,
      (ev) => {
        if (!live()) return;
        this.backoff = this.opts.backoffMs ?? 500;
        if (ev.type === 'BOOKMARK') {
          if (ev.revision) this.rev = ev.revision;
          return;
        }
        let key: string;
        let rv: string | undefined;
        try {
          key = this.source.keyOf(ev.object);
          rv = this.source.revisionOf(ev.object);
        } catch (e) {
          // An event without metadata: the stream cannot be trusted; start over.
          return this.fail(
            new Error(`${this.source.name}: malformed watch event (${(e as Error).message}); re-listing`),
            'watch',
          );
        }
        this.applyEvent(ev.type, key, ev.object, rv);
        if (rv) this.rev = rv;
      },
      (end) => {
        if (!live()) return;
        this.watchHandle = undefined;
        if (end.revision) this.rev = end.revision;
        const healthy = Date.now() - started >= HEALTHY_WATCH_MS;
        if (healthy) this.backoff = this.opts.backoffMs ?? 500;
        if (end.gone || end.error) {
          const err = end.error ?? new Error(`${this.source.name}: watch revision ${this.rev} is gone; re-listing`);
          return this.fail(err, 'watch', healthy ? 0 : this.nextBackoff());
        }
        this.endWatch();
        // The server's own watch timeout: resume where we are, or start over with a list.
        if ((this.opts.afterTimeout ?? 'resume') === 'relist') return this.relistIn(healthy ? 0 : this.nextBackoff());
        clearTimeout(this.timer);
        this.timer = setTimeout(() => this.startWatch(), 50);
        this.timer.unref?.();
      },
    );
    this.watchHandle = handle;
    const within = this.source.watchEndsWithinMs;
    if (within === undefined) return;
    // A half-open connection never ends on its own: well past the server's timeout the stream is dead.
    clearTimeout(this.guard);
    this.guard = setTimeout(
      () => {
        if (!live()) return;
        const secs = Math.round(within / 1000);
        this.fail(new Error(`${this.source.name}: watch silent past its ${secs} s timeout; re-listing`), 'silent', 0);
      },
      within + (this.opts.silentGraceMs ?? 30_000),
    );
    this.guard.unref?.();
  }
}
