// A read layer for the resident agent: the objects every ADD and DEL reads
// (ClusterInformation, IP pools, IPAMConfig, block affinities, blocks) are
// served from memory, fed by a watch from the revision of a list (re-listed
// when the watch breaks or its revision is compacted): one shared informer
// (watch/informer.ts) per kind, which answers only while its watch is open and
// keeps the newer of a write-through and a watch event. Everything else, and
// every write, goes to the store.
//
// Why a stale entry is safe (docs/ipam.md, "The agent's read cache"): every
// write is guarded by the revision it was computed from, so a decision made on
// a stale block, affinity or config fails its compare and is retried; the
// failed compare drops the entry, so the retry reads the store (and so does
// every later read of it, until the watch or a store read brings it back: an
// object whose last change the watch delivered before the drop would otherwise
// read as missing for good). The one read
// that no write would compare is the pool an address comes from: a deleted
// pool whose blocks are still there would let the block's compare succeed. So
// a transaction that takes addresses in a block also checks the block's pool
// at the revision the cache had (a compare-only op, txn.ts): a deleted or
// changed pool fails it. A transaction's own results are written through, so
// the next request does not wait for the watch to see them. Handles and
// workload endpoints are not watched: the cache only remembers what this
// process wrote of them (RECENT_KINDS), and answers from that only when the
// caller asks (CallOptions.recent: a DEL whose deletes are guarded by the
// revisions it read).
import { DatastoreError } from '../errors.js';
import type { Kind, Resource } from '../model/resources.js';
import { containsCidr, tryParseCidr } from '../net/cidr.js';
import { Informer, type ListWatchSource } from '../watch/informer.js';
import { datastoreSource, resourceKey as keyOf } from './list-watch.js';
import { TxnError, opIdentity, opKind, type TxnOp } from './txn.js';
import type {
  CallOptions,
  Datastore,
  DeleteOptions,
  ListOptions,
  ListResult,
  Watch,
  WatchEvent,
  WatchOptions,
} from './types.js';

const CACHED_KINDS: readonly Kind[] = ['ClusterInformation', 'IPPool', 'IPAMConfig', 'BlockAffinity', 'IPAMBlock'];

/**
 * Kinds of which the cache remembers only its own writes (no watch: one
 * object per pod, written and deleted by this node's ADD and DEL): a DEL
 * reads the handle and the endpoint its ADD wrote from here when it asks
 * (CallOptions.recent), and guards its deletes by their revisions.
 */
const RECENT_KINDS: readonly Kind[] = ['IPAMHandle', 'WorkloadEndpoint'];

/**
 * How many of its own writes the cache remembers (oldest go first: pods DEL'd by another process are never forgotten
 * otherwise).
 */
const MAX_RECENT = 4096;

/**
 * How long reads of an object go to the store after a failed compare or our own delete, unless the watch shows it
 * first.
 */
const BYPASS_MS = 2_000;

interface CachedDatastoreOptions {
  log?: { warn(msg: string, fields?: Record<string, unknown>): void };
  /** First re-list delay after a watch failure (doubles up to 5 s). Default 200 ms. */
  backoffMs?: number;
}

interface CacheStats {
  hits: number;
  misses: number;
  relists: number;
  /** Reads answered from this process's own recent writes (CallOptions.recent). */
  recentHits: number;
}

interface KindCache {
  /** The kind's list+watch: its objects, revision and whether its watch is open. */
  inf: Informer<Resource>;
  /** key -> until when reads go to the store, and whether only a DELETED event ends it. */
  bypass: Map<string, { until: number; untilDeleted: boolean }>;
  /**
   * Keys dropped after a failed guard or our own delete. Their absence from
   * the informer says nothing: the store may have them, and when the watch already
   * delivered their last change it never mentions them again. Reads of them (and lists) go to
   * the store until a watch event, a re-list or such a read settles them; the
   * token tells a read that nothing settled the key while it was under way.
   */
  unknown: Map<string, symbol>;
}

function resKey(r: Resource): string {
  return keyOf(r.metadata.name, r.metadata.namespace || undefined);
}

function allocated(r: Resource | undefined): number {
  const a = (r?.spec as { allocations?: Array<number | null> } | undefined)?.allocations;
  return a ? a.reduce<number>((n, x) => (x === null ? n : n + 1), 0) : 0;
}

/** kind/namespace/name: the key of this process's last write of an object (RECENT_KINDS). */
function recentKey(kind: Kind, name: string, namespace: string | undefined): string {
  return `${kind}/${keyOf(name, namespace)}`;
}

/**
 * The read cache in front of `ds`. Private fields, not `#` ones: the agent's
 * metrics wrap it in a Proxy, through which untimed methods run with the
 * proxy as `this`.
 */
class CachedDatastore implements Datastore {
  readonly type: Datastore['type'];
  // Declared, not initialised: the property exists only when the store has it.
  declare readonly atomicTxn?: boolean;
  readonly stats: CacheStats = { hits: 0, misses: 0, relists: 0, recentHits: 0 };
  /** kind/namespace/name -> this process's last write of it (RECENT_KINDS), oldest first. */
  private readonly recent = new Map<string, Resource>();
  private readonly caches = new Map<Kind, KindCache>();
  private suspendedUntil = 0;

  constructor(
    private readonly ds: Datastore,
    private readonly opts: CachedDatastoreOptions,
  ) {
    this.type = ds.type;
    if (ds.atomicTxn) (this as { atomicTxn?: boolean }).atomicTxn = true;
    for (const kind of CACHED_KINDS) {
      const c = this.watchKind(kind);
      this.caches.set(kind, c);
      c.inf.start();
    }
  }

  synced(): boolean {
    return CACHED_KINDS.every((k) => this.caches.get(k)?.inf.open);
  }

  /** Every read goes to the store for `ms` (another process wrote meanwhile: the node's IPAM lock says so). */
  suspend(ms: number): void {
    this.suspendedUntil = Math.max(this.suspendedUntil, Date.now() + ms);
  }

  async get<K extends Kind>(kind: K, name: string, namespace?: string, o?: CallOptions): Promise<Resource<K>> {
    const mine = o?.recent && !o.fresh ? this.recent.get(recentKey(kind, name, namespace)) : undefined;
    if (mine) {
      this.stats.recentHits++;
      return structuredClone(mine) as Resource<K>;
    }
    const c = o?.fresh ? undefined : this.live(kind);
    const key = keyOf(name, namespace);
    const token = c?.unknown.get(key);
    if (!c || token || this.bypassed(c, key)) {
      if (!c) return this.ds.get(kind, name, namespace, o);
      this.stats.misses++;
      try {
        const obj = await this.ds.get(kind, name, namespace, o);
        this.settle(c, key, token, obj);
        return obj;
      } catch (e) {
        if (DatastoreError.is(e, 'NotFound')) this.settle(c, key, token, undefined);
        throw e;
      }
    }
    this.stats.hits++;
    const obj = c.inf.get(key);
    if (!obj) throw new DatastoreError('NotFound', `${kind} ${name} not found`);
    return structuredClone(obj) as Resource<K>;
  }

  async list<K extends Kind>(kind: K, o: ListOptions & CallOptions = {}): Promise<ListResult<K>> {
    const c = o.fresh ? undefined : this.live(kind);
    if (!c || o.labelSelector || c.unknown.size || [...c.bypass.keys()].some((k) => this.bypassed(c, k))) {
      if (c) this.stats.misses++;
      return this.listThrough(kind, c, o);
    }
    this.stats.hits++;
    const items = c.inf
      .list()
      .filter(
        (r) =>
          (o.namespace === undefined || (r.metadata.namespace || undefined) === o.namespace) &&
          (!o.namePrefix || r.metadata.name.startsWith(o.namePrefix)),
      )
      .sort((a, b) => (a.metadata.name < b.metadata.name ? -1 : a.metadata.name > b.metadata.name ? 1 : 0))
      .map((r) => structuredClone(r) as Resource<K>);
    return { items, revision: c.inf.revision };
  }

  create<K extends Kind>(res: Resource<K>, o?: CallOptions): Promise<Resource<K>> {
    return this.single({ op: 'create', res }, () => this.ds.create(res, o));
  }

  update<K extends Kind>(res: Resource<K>, o?: CallOptions): Promise<Resource<K>> {
    return this.single({ op: 'update', res }, () => this.ds.update(res, o));
  }

  delete<K extends Kind>(kind: K, name: string, o: DeleteOptions & CallOptions = {}): Promise<void> {
    return this.single(
      {
        op: 'delete',
        kind,
        name,
        ...(o.namespace !== undefined ? { namespace: o.namespace } : {}),
        ...(o.revision !== undefined ? { revision: o.revision } : {}),
      },
      () => this.ds.delete(kind, name, o),
    );
  }

  async txn(ops: TxnOp[], o?: CallOptions): Promise<Array<Resource | undefined>> {
    let out: Array<Resource | undefined>;
    let checks: Array<{ op: TxnOp; guards: number }> = [];
    try {
      checks = await this.readChecks(ops);
      out = await this.ds.txn(checks.length ? [...ops, ...checks.map((c) => c.op)] : ops, o);
    } catch (e) {
      const i = TxnError.opOf(e);
      if (i !== undefined && i >= ops.length && e instanceof TxnError) {
        // The pool went or changed: read pools from the store, and report the
        // failure on the block op it guards, so the caller re-reads and retries.
        const chk = checks[i - ops.length]!;
        this.invalidateOp(chk.op);
        if (opKind(chk.op) === 'ClusterInformation') {
          // Not a conflict to retry: the caller read readiness from the cache; a new request reads it from the store.
          throw new DatastoreError(
            'Unavailable',
            `ClusterInformation 'default' changed since this request read it (datastoreReady may have been turned ` +
              `off); nothing was written, try again`,
            { cause: e },
          );
        }
        this.invalidateOp(ops[chk.guards]!);
        throw new TxnError('Conflict', `${e.message} (the pool of the block changed or was deleted)`, chk.guards, {
          cause: e,
        });
      }
      this.failed(e, ops);
      throw e;
    }
    ops.forEach((op, i) => this.writeThrough(op, out[i]));
    return out.slice(0, ops.length);
  }

  watch<K extends Kind>(kind: K, o: WatchOptions, onEvent: (ev: WatchEvent<K>) => void): Watch {
    return this.ds.watch(kind, o, onEvent);
  }

  async close(): Promise<void> {
    this.recent.clear();
    for (const c of this.caches.values()) c.inf.stop();
    await this.ds.close();
  }

  /** The kind's list+watch, not started. */
  private watchKind(kind: Kind): KindCache {
    const c: KindCache = {
      inf: new Informer(
        datastoreSource(this.ds, kind) as ListWatchSource<Resource>,
        {
          // Any event of a key settles it; one other than its delete ends a bypass that waits for no delete.
          onEvent(key, type) {
            c.unknown.delete(key);
            if (type === 'DELETED' || !c.bypass.get(key)?.untilDeleted) c.bypass.delete(key);
          },
        },
        {
          backoffMs: this.opts.backoffMs ?? 200,
          maxBackoffMs: 5_000,
          onList: () => {
            this.stats.relists++;
            c.bypass.clear();
            c.unknown.clear();
          },
          onError: (err) => this.opts.log?.warn('datastore read cache: re-listing', { kind, error: err.message }),
        },
      ),
      bypass: new Map(),
      unknown: new Map(),
    };
    return c;
  }

  /** The kind's cache when it may answer (synced, watching). */
  private live(kind: Kind): KindCache | undefined {
    const c = this.caches.get(kind);
    return c?.inf.open && Date.now() >= this.suspendedUntil ? c : undefined;
  }

  private bypassed(c: KindCache, key: string): boolean {
    const b = c.bypass.get(key);
    if (!b) return false;
    if (Date.now() < b.until) return true;
    c.bypass.delete(key);
    return false;
  }

  /** After a failed guard: the store has something else; read it there until the watch shows it. */
  private invalidate(kind: Kind, name: string, namespace: string | undefined): void {
    this.recent.delete(recentKey(kind, name, namespace));
    const c = this.caches.get(kind);
    if (!c) return;
    const key = keyOf(name, namespace);
    c.inf.forget(key);
    c.bypass.set(key, { until: Date.now() + BYPASS_MS, untilDeleted: false });
    c.unknown.set(key, Symbol(key));
  }

  /**
   * A store read of a key the cache does not know settles it, unless the
   * watch or a re-list spoke meanwhile: the watch brings every change after
   * the read, and put() keeps the newer of the two.
   */
  private settle(c: KindCache, key: string, token: symbol | undefined, obj: Resource | undefined): void {
    if (!token || c.unknown.get(key) !== token) return;
    c.unknown.delete(key);
    if (obj) c.inf.put(structuredClone(obj));
  }

  /** A list from the store; a whole-kind list settles every unknown key. */
  private async listThrough<K extends Kind>(
    kind: K,
    c: KindCache | undefined,
    o: ListOptions & CallOptions = {},
  ): Promise<ListResult<K>> {
    const whole = c && c.unknown.size > 0 && !o.labelSelector && o.namespace === undefined && !o.namePrefix;
    const tokens = whole ? new Map(c.unknown) : undefined;
    const listed = await this.ds.list(kind, o);
    if (c && tokens) {
      const byKey = new Map<string, Resource>(listed.items.map((r) => [resKey(r), r]));
      for (const [k, t] of tokens) this.settle(c, k, t, byKey.get(k));
    }
    return listed;
  }

  private invalidateOp(op: TxnOp): void {
    if ('res' in op) this.invalidate(op.res.kind, op.res.metadata.name, op.res.metadata.namespace || undefined);
    else this.invalidate(op.kind, op.name, op.namespace);
  }

  private remember(kind: Kind, name: string, namespace: string | undefined, out: Resource | undefined): void {
    if (!RECENT_KINDS.includes(kind)) return;
    const key = recentKey(kind, name, namespace);
    this.recent.delete(key);
    if (!out) return;
    this.recent.set(key, out);
    if (this.recent.size > MAX_RECENT) this.recent.delete(this.recent.keys().next().value!);
  }

  private writeThrough(op: TxnOp, out: Resource | undefined): void {
    if (op.op === 'check') return;
    if ('res' in op) this.remember(op.res.kind, op.res.metadata.name, op.res.metadata.namespace || undefined, out);
    else this.remember(op.kind, op.name, op.namespace, undefined);
    if (op.op === 'delete') {
      const c = this.caches.get(op.kind);
      if (!c) return;
      const key = keyOf(op.name, op.namespace);
      c.inf.forget(key);
      // Until the watch shows the delete, an event it still owes us could bring the object back.
      c.bypass.set(key, { until: Date.now() + BYPASS_MS, untilDeleted: true });
      // And when it showed the delete, and a re-creation, before we got here, nothing will: unknown, not absent.
      c.unknown.set(key, Symbol(key));
      return;
    }
    const c = this.caches.get(op.res.kind);
    if (c && out) c.inf.put(out);
  }

  private failed(e: unknown, ops: TxnOp[]): void {
    if (!(e instanceof DatastoreError) || !['Conflict', 'AlreadyExists', 'NotFound'].includes(e.kind)) return;
    const i = TxnError.opOf(e);
    if (i !== undefined && ops[i]) this.invalidateOp(ops[i]!);
    else for (const op of ops) this.invalidateOp(op);
  }

  /**
   * Compare-only ops for a transaction that takes addresses in a block (or
   * claims one): the block's pool and ClusterInformation, at the revisions
   * the cache holds; with the index of the block op each guards. Pools come
   * from the store while one of them is bypassed (a check of it failed): a
   * block in no pool then gives no address.
   */
  private async readChecks(ops: TxnOp[]): Promise<Array<{ op: TxnOp; guards: number }>> {
    const blocks = this.caches.get('IPAMBlock');
    const taking = ops.flatMap((op, i) => {
      if (op.op === 'delete' || op.op === 'check' || op.res.kind !== 'IPAMBlock') return [];
      const prev = blocks?.inf.get(resKey(op.res));
      if (op.op === 'update' && prev && allocated(op.res) <= allocated(prev)) return [];
      const cidr = tryParseCidr(String((op.res.spec as { cidr?: unknown }).cidr ?? ''));
      return cidr ? [{ i, cidr }] : [];
    });
    if (!taking.length) return [];
    const pc = this.live('IPPool');
    const fromCache = pc && !pc.unknown.size && ![...pc.bypass.keys()].some((k) => this.bypassed(pc, k));
    if (!pc) return []; // not synced yet: the caller read its pools from the store
    const pools = fromCache ? pc.inf.list() : (await this.listThrough('IPPool', pc)).items;
    const out: Array<{ op: TxnOp; guards: number }> = [];
    const seen = new Set(ops.map(opIdentity));
    const add = (op: TxnOp, guards: number) => {
      if (seen.has(opIdentity(op))) return;
      seen.add(opIdentity(op));
      out.push({ op, guards });
    };
    for (const { i, cidr } of taking) {
      const pool = pools.find((p) => {
        const c = tryParseCidr(String((p.spec as { cidr?: unknown }).cidr ?? ''));
        return c && c.family === cidr.family && containsCidr(c, cidr);
      });
      if (!pool?.metadata.resourceVersion) {
        throw new TxnError(
          'Conflict',
          `block ${(ops[i] as { res: Resource }).res.metadata.name} is in no IP pool (deleted meanwhile?); re-read ` +
            `the pools`,
          i,
        );
      }
      add({ op: 'check', kind: 'IPPool', name: pool.metadata.name, revision: pool.metadata.resourceVersion }, i);
      // datastoreReady=false must stop every ADD write from then on, not once the watch brings it.
      const ci = this.live('ClusterInformation')?.inf.get(keyOf('default', undefined));
      if (ci?.metadata.resourceVersion)
        add({ op: 'check', kind: 'ClusterInformation', name: 'default', revision: ci.metadata.resourceVersion }, i);
    }
    return out;
  }

  /** One write outside a transaction: written through, or its failed guard drops the entry. */
  // biome-ignore lint/suspicious/noConfusingVoidType: writes return the stored object or nothing (delete)
  private async single<T extends Resource | void>(op: TxnOp, write: () => Promise<T>): Promise<T> {
    try {
      const out = await write();
      this.writeThrough(op, out || undefined);
      return out;
    } catch (e) {
      this.failed(e, [op]);
      throw e;
    }
  }
}

/**
 * Wraps `ds` with the read cache (etcd and the in-memory store; a Kubernetes
 * store is returned as is: its resourceVersions are opaque, and a per-node
 * watch of every block through the API server is not what it is sized for).
 */
export function cachedDatastore(
  ds: Datastore,
  opts: CachedDatastoreOptions = {},
): Datastore & Partial<Pick<CachedDatastore, 'stats' | 'synced' | 'suspend'>> {
  if (ds.type === 'kubernetes') return ds;
  return new CachedDatastore(ds, opts);
}
