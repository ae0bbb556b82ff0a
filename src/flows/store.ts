// The aggregator's memory: a ring of 15 s buckets covering the retention, each
// bucket holding one aggregated flow per key. Keys (reporter, action, both
// endpoints, port, protocol, policy trace) are interned once and shared by all
// buckets; a bucket stores only numbers in typed arrays (key id, start/end
// offsets, counters) and a small open-addressing index key id -> slot. One hour
// of 10,000 distinct flows per bucket is 2.4 million aggregated flows: objects
// per flow would not fit the memory budget (docs/performance.md), columns do.
import {
  COUNTERS,
  rfc3339,
  type Action,
  type Flow,
  type FlowEndpoint,
  type FlowRecord,
  type PolicyHit,
  type PolicyTrace,
  type Reporter,
} from './record.js';

export const BUCKET_SECONDS = 15;
const BUCKET_MS = BUCKET_SECONDS * 1000;
/** A bucket is exported this long after its end; records that arrive later are exported on their own. */
const CLOSE_GRACE_MS = BUCKET_MS;
/** Records dated further ahead than this (a node's clock) count as now. */
const FUTURE_SLACK_MS = 60_000;

/** A record's identity: what it says but its counters and times. */
interface FlowKey
  extends Pick<FlowRecord, 'reporter' | 'action' | 'source' | 'dest' | 'destPort' | 'protocol' | 'policies'> {
  id: number;
  /** Policy names (enforced and pending) for the `policy` filter. */
  policyNames: Set<string>;
  /** The newest bucket number holding this key: the key is dropped when that bucket leaves the ring. */
  lastBucket: number;
  /** Its string in keyIds (ids of its endpoints and trace). */
  str: string;
}

// Per slot: bytes in and out (float64); packets in and out, connections started,
// completed and live (uint32, saturating); start and end (uint16, 100 ms units
// after the bucket's start). 44 bytes a flow, plus the index while it is needed.
const F64 = 2;
const U32 = 5;
const TICK_MS = 100;
const MAX_U32 = 0xffffffff;
/** Slots per bucket in a packed match (query): far above any bucket's flows. */
const SLOT_SPAN = 1 << 24;

class Bucket {
  /** Absolute bucket number (unix seconds / 15), -1 when empty. */
  b = -1;
  constructor(
    /** Its position in the ring. */
    readonly pos: number,
  ) {}
  n = 0;
  exported = false;
  /** Records that arrived after the bucket was exported, by slot: exported as their own lines. */
  late: Map<number, { startMs: number; endMs: number; c: number[] }> | undefined;
  keyIds = new Uint32Array(0);
  times = new Uint16Array(0);
  f64 = new Float64Array(0);
  u32 = new Uint32Array(0);
  /**
   * Open addressing: key id + 1 at a position (0 empty), the slot at the same position. Built
   * when a record needs it; a trimmed bucket (past) drops it until a late record comes.
   */
  index = new Int32Array(0);
  indexSlot = new Int32Array(0);

  reset(b: number): void {
    this.clear();
    this.b = b;
  }

  clear(): void {
    this.b = -1;
    this.n = 0;
    this.exported = false;
    this.late = undefined;
    this.keyIds = new Uint32Array(0);
    this.times = new Uint16Array(0);
    this.f64 = new Float64Array(0);
    this.u32 = new Uint32Array(0);
    this.index = new Int32Array(0);
    this.indexSlot = new Int32Array(0);
  }

  private rebuildIndex(size: number): void {
    this.index = new Int32Array(size);
    this.indexSlot = new Int32Array(size);
    for (let s = 0; s < this.n; s++) this.place(this.keyIds[s]!, s);
  }

  private place(keyId: number, slot: number): void {
    const mask = this.index.length - 1;
    let p = (Math.imul(keyId, 0x9e3779b1) >>> 0) & mask;
    while (this.index[p] !== 0) p = (p + 1) & mask;
    this.index[p] = keyId + 1;
    this.indexSlot[p] = slot;
  }

  find(keyId: number): number {
    if (this.index.length === 0) {
      let size = 32;
      while (size < this.n * 2) size *= 2;
      this.rebuildIndex(size);
    }
    const mask = this.index.length - 1;
    let p = (Math.imul(keyId, 0x9e3779b1) >>> 0) & mask;
    for (;;) {
      const v = this.index[p]!;
      if (v === 0) return -1;
      if (v === keyId + 1) return this.indexSlot[p]!;
      p = (p + 1) & mask;
    }
  }

  private resize(cap: number): void {
    const grow = <T extends Uint16Array | Uint32Array | Float64Array>(a: T, per: number): T => {
      const next = new (a.constructor as new (n: number) => T)(cap * per);
      next.set(a.subarray(0, this.n * per));
      return next;
    };
    this.keyIds = grow(this.keyIds, 1);
    this.times = grow(this.times, 2);
    this.f64 = grow(this.f64, F64);
    this.u32 = grow(this.u32, U32);
  }

  /** A new slot for keyId (find() returned -1, so the index exists). */
  add(keyId: number): number {
    if (this.n === this.keyIds.length) this.resize(Math.max(16, this.n * 2));
    const s = this.n++;
    this.keyIds[s] = keyId;
    this.times[2 * s] = 0xffff;
    this.times[2 * s + 1] = 0;
    this.f64.fill(0, s * F64, s * F64 + F64);
    this.u32.fill(0, s * U32, s * U32 + U32);
    if (this.n * 2 > this.index.length) this.rebuildIndex(this.index.length * 2);
    else this.place(keyId, s);
    return s;
  }

  /** A bucket past: its growth slack and its index are given back. */
  trim(): void {
    if (this.keyIds.length !== this.n) this.resize(this.n);
    this.index = new Int32Array(0);
    this.indexSlot = new Int32Array(0);
  }

  startMs(s: number): number {
    return this.b * BUCKET_MS + this.times[2 * s]! * TICK_MS;
  }
  endMs(s: number): number {
    return this.b * BUCKET_MS + this.times[2 * s + 1]! * TICK_MS;
  }
}

export type SortField = 'startTime' | 'action' | 'sourceName' | 'destName';
export const SORT_FIELDS: readonly SortField[] = ['startTime', 'action', 'sourceName', 'destName'];
export type HintType = 'sourceNamespace' | 'destNamespace' | 'sourceName' | 'destName' | 'policy';
export const HINT_TYPES: readonly HintType[] = ['sourceNamespace', 'destNamespace', 'sourceName', 'destName', 'policy'];
export type GroupBy = 'policy' | 'rule';
export const GROUP_BYS: readonly GroupBy[] = ['policy', 'rule'];

/** Filters of a query; each absent one matches everything. Times are unix seconds. */
export interface FlowFilter {
  startTimeGte?: number;
  startTimeLt?: number;
  action?: Action;
  sourceNamespace?: string;
  sourceName?: string;
  destNamespace?: string;
  destName?: string;
  destPort?: number;
  protocol?: string;
  reporter?: Reporter;
  /** A policy name: matches a hit in the enforced or the pending trace. */
  policy?: string;
  /** Either end's namespace. */
  namespace?: string;
  /** Either end: `NAME` or `NAMESPACE/NAME`. */
  endpoint?: string;
}

export interface FlowQuery extends FlowFilter {
  sortBy?: { field: SortField; desc: boolean };
  pageSize?: number;
  page?: number;
}

interface StatCounters {
  allowedPackets: number;
  allowedBytes: number;
  deniedPackets: number;
  deniedBytes: number;
  connections: number;
}

interface StatItem extends StatCounters {
  kind: string;
  namespace: string;
  name: string;
  ruleIndex?: number;
  series: Array<{ time: string } & StatCounters>;
}

interface StoreStats {
  records: number;
  tooOld: number;
  flows: number;
  keys: number;
}

interface StoreOptions {
  retentionMs: number;
  now?: () => number;
}

function epKey(e: FlowEndpoint): string {
  let l = '';
  for (const k in e.labels) l += `${k}=${e.labels[k]}\u0001`;
  return `${e.type}\u0000${e.namespace}\u0000${e.name}\u0000${l}`;
}

function hitKey(h: PolicyHit): string {
  return `${h.kind}\u0000${h.namespace}\u0000${h.name}\u0000${h.tier}\u0000${h.action}\u0000${h.ruleIndex}`;
}

function traceKey(t: PolicyTrace): string {
  return `${t.enforced.map(hitKey).join('\u0001')}\u0002${t.pending.map(hitKey).join('\u0001')}`;
}

const ACTION_ORDER: Record<Action, number> = { Allow: 0, Deny: 1, Pass: 2 };

export class FlowStore {
  readonly retentionMs: number;
  readonly size: number;
  private readonly now: () => number;
  private readonly ring: Bucket[];
  private readonly keyIds = new Map<string, number>();
  private readonly keys = new Map<number, FlowKey>();
  private nextKeyId = 1;
  private readonly counts = { records: 0, tooOld: 0 };
  private readonly watchers = new Map<(flows: Flow[]) => void, FlowFilter>();
  /** (bucket number, slot) of flows changed since the watchers were last told, while any watch. */
  private readonly dirty = new Map<number, Set<number>>();
  private readonly closedListeners = new Set<(flows: Flow[]) => void>();
  private current = -1;

  constructor(o: StoreOptions) {
    if (!(o.retentionMs >= BUCKET_MS)) throw new RangeError(`retention must be at least ${BUCKET_SECONDS}s`);
    this.retentionMs = o.retentionMs;
    this.size = Math.ceil(o.retentionMs / BUCKET_MS);
    this.now = o.now ?? Date.now;
    this.ring = Array.from({ length: this.size }, (_, i) => new Bucket(i));
  }

  private nowBucket(): number {
    return Math.floor(this.now() / BUCKET_MS);
  }

  /**
   * Endpoints and traces get ids (never reused) by their content; a batch's records share those
   * objects (protocol.ts), so each is looked at once per batch. A key is then a short string of ids.
   */
  private epIds = new Map<string, number>();
  private traceIds = new Map<string, number>();
  private epIdOf = new WeakMap<FlowEndpoint, number>();
  private traceIdOf = new WeakMap<PolicyTrace, number>();
  private nextPartId = 1;

  private partId<T extends object>(
    cache: WeakMap<T, number>,
    ids: Map<string, number>,
    v: T,
    fn: (v: T) => string,
  ): number {
    let id = cache.get(v);
    if (id !== undefined) return id;
    const k = fn(v);
    id = ids.get(k);
    if (id === undefined) ids.set(k, (id = this.nextPartId++));
    cache.set(v, id);
    return id;
  }

  private keyOf(r: FlowRecord, b: number): number {
    const src = this.partId(this.epIdOf, this.epIds, r.source, epKey);
    const dst = this.partId(this.epIdOf, this.epIds, r.dest, epKey);
    const tr = this.partId(this.traceIdOf, this.traceIds, r.policies, traceKey);
    const k = `${r.reporter}${r.action}.${src}.${dst}.${r.destPort}.${r.protocol}.${tr}`;
    let id = this.keyIds.get(k);
    if (id === undefined) {
      id = this.nextKeyId++;
      this.keyIds.set(k, id);
      this.keys.set(id, {
        id,
        reporter: r.reporter,
        action: r.action,
        source: r.source,
        dest: r.dest,
        destPort: r.destPort,
        protocol: r.protocol,
        policies: r.policies,
        policyNames: new Set([...r.policies.enforced, ...r.policies.pending].map((h) => h.name)),
        lastBucket: b,
        str: k,
      });
    } else {
      const key = this.keys.get(id)!;
      if (key.lastBucket < b) key.lastBucket = b;
    }
    return id;
  }

  /** Adds validated records (src/flows/record.ts parseFlowRecord) to their buckets. */
  ingest(records: readonly FlowRecord[]): void {
    this.advance();
    const nowB = this.current;
    const oldest = nowB - this.size + 1;
    for (const r of records) {
      this.counts.records++;
      let startMs = r.startTime * 1000;
      let endMs = r.endTime * 1000;
      if (startMs > this.now() + FUTURE_SLACK_MS) {
        endMs = this.now() + (endMs - startMs);
        startMs = this.now();
      }
      const b = Math.floor(startMs / BUCKET_MS);
      if (b < oldest) {
        this.counts.tooOld++;
        continue;
      }
      const bucket = this.ring[b % this.size]!;
      if (bucket.b !== b) bucket.reset(b);
      const keyId = this.keyOf(r, b);
      let s = bucket.find(keyId);
      if (s < 0) s = bucket.add(keyId);
      const base = b * BUCKET_MS;
      const st = Math.floor((startMs - base) / TICK_MS);
      const en = Math.min(Math.ceil((endMs - base) / TICK_MS), 0xfffe);
      const prevEnd = bucket.times[2 * s + 1]!;
      if (st < bucket.times[2 * s]!) bucket.times[2 * s] = st;
      if (en > prevEnd) bucket.times[2 * s + 1] = en;
      const f = s * F64;
      bucket.f64[f] = bucket.f64[f]! + r.bytesIn;
      bucket.f64[f + 1] = bucket.f64[f + 1]! + r.bytesOut;
      const u = s * U32;
      const u32 = bucket.u32;
      u32[u] = Math.min(u32[u]! + r.packetsIn, MAX_U32);
      u32[u + 1] = Math.min(u32[u + 1]! + r.packetsOut, MAX_U32);
      u32[u + 2] = Math.min(u32[u + 2]! + r.connectionsStarted, MAX_U32);
      u32[u + 3] = Math.min(u32[u + 3]! + r.connectionsCompleted, MAX_U32);
      // A gauge: one key comes from one reporter's node, whose newest report is the truth.
      if (en >= prevEnd) u32[u + 4] = Math.min(r.connectionsLive, MAX_U32);
      if (bucket.exported && this.closedListeners.size) {
        bucket.late ??= new Map();
        let l = bucket.late.get(s);
        if (!l) bucket.late.set(s, (l = { startMs, endMs, c: [0, 0, 0, 0, 0, 0, 0] }));
        l.startMs = Math.min(l.startMs, startMs);
        l.endMs = Math.max(l.endMs, endMs);
        COUNTERS.forEach((k, i) => (l.c[i] = k === 'connectionsLive' ? r[k] : l.c[i]! + r[k]));
      }
      if (this.watchers.size) {
        let set = this.dirty.get(b);
        if (!set) this.dirty.set(b, (set = new Set()));
        set.add(s);
      }
    }
  }

  /**
   * Moves the ring to now: buckets that left the retention are emptied and
   * keys no bucket holds any more are forgotten. Runs on each ingest and tick.
   */
  private advance(): void {
    const nowB = this.nowBucket();
    if (nowB === this.current) return;
    const oldest = nowB - this.size + 1;
    for (const bucket of this.ring) {
      if (bucket.b >= 0 && bucket.b < oldest) bucket.clear();
      else if (bucket.b >= 0 && bucket.b < nowB) bucket.trim();
    }
    let dropped = false;
    for (const [id, k] of this.keys) {
      if (k.lastBucket < oldest) {
        this.keys.delete(id);
        dropped = true;
      }
    }
    if (dropped) {
      // Forget the endpoints and traces no key holds; the ids of the others stay.
      this.keyIds.clear();
      const eps = new Map<string, number>();
      const trs = new Map<string, number>();
      const epOf = new WeakMap<FlowEndpoint, number>();
      const trOf = new WeakMap<PolicyTrace, number>();
      for (const k of this.keys.values()) {
        this.keyIds.set(k.str, k.id);
        for (const e of [k.source, k.dest]) {
          const id = this.epIdOf.get(e)!;
          eps.set(epKey(e), id);
          epOf.set(e, id);
        }
        const t = this.traceIdOf.get(k.policies)!;
        trs.set(traceKey(k.policies), t);
        trOf.set(k.policies, t);
      }
      this.epIds = eps;
      this.traceIds = trs;
      this.epIdOf = epOf;
      this.traceIdOf = trOf;
    }
    this.current = nowB;
  }

  /**
   * Once a second: moves the ring, hands closed buckets to the export
   * listeners, and tells watchers the flows that changed.
   */
  tick(): void {
    this.advance();
    // Past buckets that late records grew (an agent's backlog after a reconnect) shrink again.
    for (const bk of this.ring)
      if (bk.b >= 0 && bk.b < this.current && (bk.index.length || bk.keyIds.length !== bk.n)) bk.trim();
    const nowMs = this.now();
    if (this.closedListeners.size) {
      const closable = this.ring
        .filter((bk) => bk.b >= 0 && !bk.exported && (bk.b + 1) * BUCKET_MS + CLOSE_GRACE_MS <= nowMs)
        .sort((x, y) => x.b - y.b);
      for (const bk of closable) {
        bk.exported = true;
        const flows: Flow[] = [];
        for (let s = 0; s < bk.n; s++) flows.push(this.flowAt(bk, s));
        for (const l of this.closedListeners) l(flows);
      }
      // Late records of exported buckets: their own lines, so the lines of a key add up to its totals.
      for (const bk of this.ring) {
        if (!bk.late) continue;
        const flows: Flow[] = [];
        for (const [s, l] of bk.late) {
          const f = this.flowAt(bk, s);
          f.startTime = rfc3339(l.startMs / 1000);
          f.endTime = rfc3339(l.endMs / 1000);
          COUNTERS.forEach((k, i) => (f[k] = l.c[i]!));
          flows.push(f);
        }
        bk.late = undefined;
        for (const l of this.closedListeners) l(flows);
      }
    } else {
      for (const bk of this.ring) if (bk.b >= 0 && (bk.b + 1) * BUCKET_MS + CLOSE_GRACE_MS <= nowMs) bk.exported = true;
    }
    if (this.dirty.size) {
      const changed: Array<{ bk: Bucket; s: number; k: FlowKey }> = [];
      for (const [b, slots] of this.dirty) {
        const bk = this.ring[b % this.size]!;
        if (bk.b !== b) continue;
        for (const s of slots) changed.push({ bk, s, k: this.keys.get(bk.keyIds[s]!)! });
      }
      this.dirty.clear();
      for (const [w, f] of this.watchers) {
        const flows = changed
          .filter((c) => this.keyMatches(c.k, f) && this.timeMatches(c.bk.startMs(c.s), f))
          .map((c) => this.flowAt(c.bk, c.s));
        if (flows.length) w(flows);
      }
    }
  }

  /** fn is called from tick() with the new or updated flows that pass the filter; returns the unsubscribe. */
  watch(fn: (flows: Flow[]) => void, filter: FlowFilter = {}): () => void {
    this.watchers.set(fn, filter);
    return () => {
      this.watchers.delete(fn);
      if (!this.watchers.size) this.dirty.clear();
    };
  }

  /** Called from tick() with every flow of a bucket once it closed (CLOSE_GRACE_MS after its end). */
  onBucketClosed(fn: (flows: Flow[]) => void): () => void {
    this.closedListeners.add(fn);
    return () => this.closedListeners.delete(fn);
  }

  private flowAt(bk: Bucket, s: number): Flow {
    const k = this.keys.get(bk.keyIds[s]!)!;
    const f = s * F64;
    const u = s * U32;
    return {
      startTime: rfc3339(bk.startMs(s) / 1000),
      endTime: rfc3339(bk.endMs(s) / 1000),
      action: k.action,
      reporter: k.reporter,
      protocol: k.protocol,
      sourceType: k.source.type,
      sourceNamespace: k.source.namespace,
      sourceName: k.source.name,
      sourceLabels: k.source.labels,
      destType: k.dest.type,
      destNamespace: k.dest.namespace,
      destName: k.dest.name,
      destLabels: k.dest.labels,
      destPort: k.destPort,
      policies: k.policies,
      packetsIn: bk.u32[u]!,
      packetsOut: bk.u32[u + 1]!,
      bytesIn: bk.f64[f]!,
      bytesOut: bk.f64[f + 1]!,
      connectionsStarted: bk.u32[u + 2]!,
      connectionsCompleted: bk.u32[u + 3]!,
      connectionsLive: bk.u32[u + 4]!,
    };
  }

  /** Whether a key passes the filter's key fields (times are checked per flow). */
  private keyMatches(k: FlowKey, f: FlowFilter): boolean {
    if (f.action !== undefined && k.action !== f.action) return false;
    if (f.reporter !== undefined && k.reporter !== f.reporter) return false;
    if (f.sourceNamespace !== undefined && k.source.namespace !== f.sourceNamespace) return false;
    if (f.sourceName !== undefined && k.source.name !== f.sourceName) return false;
    if (f.destNamespace !== undefined && k.dest.namespace !== f.destNamespace) return false;
    if (f.destName !== undefined && k.dest.name !== f.destName) return false;
    if (f.destPort !== undefined && k.destPort !== f.destPort) return false;
    if (f.protocol !== undefined && k.protocol !== f.protocol) return false;
    if (f.policy !== undefined && !k.policyNames.has(f.policy)) return false;
    if (f.namespace !== undefined && k.source.namespace !== f.namespace && k.dest.namespace !== f.namespace)
      return false;
    if (f.endpoint !== undefined) {
      const i = f.endpoint.indexOf('/');
      const ns = i < 0 ? undefined : f.endpoint.slice(0, i);
      const name = i < 0 ? f.endpoint : f.endpoint.slice(i + 1);
      const is = (e: FlowEndpoint) => e.name === name && (ns === undefined || e.namespace === ns);
      if (!is(k.source) && !is(k.dest)) return false;
    }
    return true;
  }

  private timeMatches(startMs: number, f: FlowFilter): boolean {
    return (
      (f.startTimeGte === undefined || startMs >= f.startTimeGte * 1000) &&
      (f.startTimeLt === undefined || startMs < f.startTimeLt * 1000)
    );
  }

  /** Runs fn for each (bucket, slot) whose flow passes the filter, oldest bucket first. */
  private scan(f: FlowFilter, fn: (bk: Bucket, s: number, k: FlowKey) => void, newestFirst = false): void {
    this.advance();
    const cache = new Map<number, boolean>();
    const gte = f.startTimeGte === undefined ? -Infinity : f.startTimeGte * 1000;
    const lt = f.startTimeLt === undefined ? Infinity : f.startTimeLt * 1000;
    const buckets = this.ring
      .filter((bk) => bk.b >= 0 && (bk.b + 1) * BUCKET_MS > gte && bk.b * BUCKET_MS < lt)
      .sort((x, y) => (newestFirst ? y.b - x.b : x.b - y.b));
    for (const bk of buckets) {
      for (let s = 0; s < bk.n; s++) {
        const id = bk.keyIds[s]!;
        let ok = cache.get(id);
        const k = this.keys.get(id)!;
        if (ok === undefined) cache.set(id, (ok = this.keyMatches(k, f)));
        if (!ok) continue;
        if (!this.timeMatches(bk.startMs(s), f)) continue;
        fn(bk, s, k);
      }
    }
  }

  /** One page of the flows passing the filter, sorted (default: newest first), and how many pass. */
  query(q: FlowQuery): { items: Flow[]; total: number } {
    const sort = q.sortBy ?? { field: 'startTime', desc: true };
    const dir = sort.desc ? -1 : 1;
    const size = q.pageSize ?? 100;
    const from = (q.page ?? 0) * size;
    if (sort.field === 'startTime') {
      // Buckets do not overlap in start times: walk them in order, count, and sort only the page's.
      const items: Flow[] = [];
      let total = 0;
      let cur: Bucket | undefined;
      let slots: number[] = [];
      const close = () => {
        const bk = cur;
        const before = total - slots.length;
        if (bk && before < from + size && total > from) {
          slots.sort((a, b) => dir * (bk.startMs(a) - bk.startMs(b)));
          for (let i = Math.max(0, from - before); i < slots.length && before + i < from + size; i++)
            items.push(this.flowAt(bk, slots[i]!));
        }
        slots = [];
      };
      this.scan(
        q,
        (bk, s) => {
          if (bk !== cur) {
            close();
            cur = bk;
          }
          slots.push(s);
          total++;
        },
        sort.desc,
      );
      close();
      return { items, total };
    }
    // Matches as numbers (ring position * 2^24 + slot): an hour of flows sorts without an object each.
    const hits: number[] = [];
    this.scan(q, (bk, s) => hits.push(bk.pos * SLOT_SPAN + s));
    const bkOf = (h: number) => this.ring[Math.floor(h / SLOT_SPAN)]!;
    const keyOf = (h: number) => this.keys.get(bkOf(h).keyIds[h % SLOT_SPAN]!)!;
    const st = (h: number) => bkOf(h).startMs(h % SLOT_SPAN);
    const byTime = (a: number, b: number) => st(a) - st(b);
    const byName = (name: (k: FlowKey) => string) => (a: number, b: number) => {
      const x = name(keyOf(a));
      const y = name(keyOf(b));
      return x < y ? -1 : x > y ? 1 : byTime(a, b);
    };
    const cmp: Record<SortField, (a: number, b: number) => number> = {
      startTime: byTime, // walked above
      action: (a, b) => ACTION_ORDER[keyOf(a).action] - ACTION_ORDER[keyOf(b).action] || byTime(a, b),
      sourceName: byName((k) => k.source.name),
      destName: byName((k) => k.dest.name),
    };
    const c = cmp[sort.field];
    hits.sort((a, b) => dir * c(a, b));
    return { items: hits.slice(from, from + size).map((h) => this.flowAt(bkOf(h), h % SLOT_SPAN)), total: hits.length };
  }

  /** The distinct values of a field among the flows held (passing the filter), sorted. */
  hints(type: HintType, f: FlowFilter = {}): string[] {
    const out = new Set<string>();
    for (const k of this.keys.values()) {
      if (!this.keyMatches(k, f)) continue;
      if (type === 'policy') for (const n of k.policyNames) out.add(n);
      else if (type === 'sourceNamespace') out.add(k.source.namespace);
      else if (type === 'destNamespace') out.add(k.dest.namespace);
      else if (type === 'sourceName') out.add(k.source.name);
      else out.add(k.dest.name);
    }
    out.delete('');
    return [...out].sort();
  }

  /**
   * Packets, bytes and connections allowed and denied per enforced policy (or
   * rule), in total and per bucket. A flow counts once for each policy (rule) of
   * its enforced trace; allowed or denied is the flow's action.
   */
  statistics(groupBy: GroupBy, f: FlowFilter = {}): StatItem[] {
    const groupsOf = new Map<number, string[]>();
    const items = new Map<string, StatItem & { byBucket: Map<number, StatCounters> }>();
    const zero = (): StatCounters => ({
      allowedPackets: 0,
      allowedBytes: 0,
      deniedPackets: 0,
      deniedBytes: 0,
      connections: 0,
    });
    const addTo = (c: StatCounters, allowed: boolean, denied: boolean, pk: number, by: number, conns: number) => {
      if (allowed) (c.allowedPackets += pk), (c.allowedBytes += by);
      if (denied) (c.deniedPackets += pk), (c.deniedBytes += by);
      c.connections += conns;
    };
    this.scan(f, (bk, s, k) => {
      let groups = groupsOf.get(k.id);
      if (!groups) {
        const g = new Set<string>();
        for (const h of k.policies.enforced) {
          const id = `${h.kind}\u0000${h.namespace}\u0000${h.name}${groupBy === 'rule' ? `\u0000${h.ruleIndex}` : ''}`;
          g.add(id);
          if (!items.has(id)) {
            items.set(id, {
              kind: h.kind,
              namespace: h.namespace,
              name: h.name,
              ...(groupBy === 'rule' ? { ruleIndex: h.ruleIndex } : {}),
              ...zero(),
              series: [],
              byBucket: new Map(),
            });
          }
        }
        groupsOf.set(k.id, (groups = [...g]));
      }
      const pk = bk.u32[s * U32]! + bk.u32[s * U32 + 1]!;
      const by = bk.f64[s * F64]! + bk.f64[s * F64 + 1]!;
      const conns = bk.u32[s * U32 + 2]!;
      const allowed = k.action === 'Allow';
      const denied = k.action === 'Deny';
      for (const id of groups) {
        const it = items.get(id)!;
        addTo(it, allowed, denied, pk, by, conns);
        let c = it.byBucket.get(bk.b);
        if (!c) it.byBucket.set(bk.b, (c = zero()));
        addTo(c, allowed, denied, pk, by, conns);
      }
    });
    return [...items.values()]
      .map(({ byBucket, ...it }) => ({
        ...it,
        series: [...byBucket]
          .sort((a, b) => a[0] - b[0])
          .map(([b, c]) => ({ time: rfc3339(b * BUCKET_SECONDS), ...c })),
      }))
      .sort(
        (a, b) =>
          b.allowedPackets + b.deniedPackets - (a.allowedPackets + a.deniedPackets) || (a.name < b.name ? -1 : 1),
      );
  }

  stats(): StoreStats {
    let flows = 0;
    for (const bk of this.ring) flows += bk.n;
    return { ...this.counts, flows, keys: this.keys.size };
  }
}
