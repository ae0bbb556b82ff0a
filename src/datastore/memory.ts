// In-memory Datastore with the same CAS semantics as the real backends: for
// unit tests (allocator, plugin logic) and dry runs. Not for production.
import { randomUUID } from 'node:crypto';
import { DatastoreError } from '../errors.js';
import { NAMESPACED_KINDS, type Kind, type Resource } from '../model/resources.js';
import type * as ds from './types.js';
import { parseSelector } from '../selector/index.js';
import { onNode } from './keys.js';
import { TxnError, checkDistinct, describeOp, type TxnOp } from './txn.js';

type Listener = { kind: Kind; namespace?: string | undefined; fn: (ev: ds.WatchEvent<Kind>) => void };

export class MemoryDatastore implements ds.Datastore {
  readonly type = 'memory' as const;
  readonly atomicTxn = true;
  private revision = 0;
  private readonly objects = new Map<string, Resource>();
  private readonly listeners = new Set<Listener>();
  private readonly history: Array<{ rev: number; ev: ds.WatchEvent<Kind> & { object: Resource } }> = [];
  /** Fault injection for tests: when set, every call throws it. */
  failWith: DatastoreError | undefined;

  private key(kind: Kind, name: string, namespace?: string): string {
    return NAMESPACED_KINDS.has(kind) ? `${kind}/${namespace ?? 'default'}/${name}` : `${kind}//${name}`;
  }
  private check(): void {
    if (this.failWith) throw this.failWith;
  }
  private clone<T>(v: T): T {
    return structuredClone(v);
  }
  private emit(type: 'ADDED' | 'MODIFIED' | 'DELETED', object: Resource): void {
    const ev = { type, object: this.clone(object) };
    this.history.push({ rev: this.revision, ev });
    for (const l of this.listeners) {
      if (l.kind === object.kind && (l.namespace === undefined || l.namespace === object.metadata.namespace))
        l.fn(this.clone(ev));
    }
  }

  async get<K extends Kind>(kind: K, name: string, namespace?: string, _o?: ds.CallOptions): Promise<Resource<K>> {
    this.check();
    const o = this.objects.get(this.key(kind, name, namespace));
    if (!o) throw new DatastoreError('NotFound', `${kind} ${namespace ? namespace + '/' : ''}${name} not found`);
    return this.clone(o) as Resource<K>;
  }

  async list<K extends Kind>(kind: K, opts: ds.ListOptions & ds.CallOptions = {}): Promise<ds.ListResult<K>> {
    this.check();
    const sel = opts.labelSelector ? parseSelector(opts.labelSelector) : undefined;
    const mine = onNode(kind, opts.node);
    const items: Array<Resource<K>> = [];
    for (const o of this.objects.values()) {
      if (o.kind !== kind) continue;
      if (opts.namespace !== undefined && o.metadata.namespace !== opts.namespace) continue;
      if (opts.namePrefix && !o.metadata.name.startsWith(opts.namePrefix)) continue;
      if (sel && !sel.matches(o.metadata.labels ?? {})) continue;
      if (!mine(o)) continue;
      items.push(this.clone(o) as Resource<K>);
    }
    items.sort(
      (a, b) =>
        (a.metadata.namespace ?? '').localeCompare(b.metadata.namespace ?? '') ||
        a.metadata.name.localeCompare(b.metadata.name),
    );
    return { items, revision: String(this.revision) };
  }

  async create<K extends Kind>(res: Resource<K>): Promise<Resource<K>> {
    this.check();
    const k = this.key(res.kind, res.metadata.name, res.metadata.namespace);
    if (this.objects.has(k))
      throw new DatastoreError('AlreadyExists', `${res.kind} ${res.metadata.name} already exists`);
    const stored = this.clone(res);
    stored.metadata.resourceVersion = String(++this.revision);
    stored.metadata.uid ??= randomUUID();
    stored.metadata.creationTimestamp ??= new Date().toISOString();
    if (NAMESPACED_KINDS.has(res.kind)) stored.metadata.namespace ??= 'default';
    this.objects.set(k, stored as Resource);
    this.emit('ADDED', stored as Resource);
    return this.clone(stored);
  }

  async update<K extends Kind>(res: Resource<K>): Promise<Resource<K>> {
    this.check();
    const k = this.key(res.kind, res.metadata.name, res.metadata.namespace);
    const cur = this.objects.get(k);
    if (!cur) throw new DatastoreError('NotFound', `${res.kind} ${res.metadata.name} not found`);
    if (!res.metadata.resourceVersion)
      throw new DatastoreError('Invalid', `update of ${res.kind} ${res.metadata.name} needs metadata.resourceVersion`);
    if (cur.metadata.resourceVersion !== res.metadata.resourceVersion) {
      throw new DatastoreError(
        'Conflict',
        `${res.kind} ${res.metadata.name} was modified (have ${res.metadata.resourceVersion}, store has ` +
          `${cur.metadata.resourceVersion})`,
      );
    }
    const stored = this.clone(res);
    stored.metadata.resourceVersion = String(++this.revision);
    stored.metadata.uid = cur.metadata.uid;
    stored.metadata.creationTimestamp = cur.metadata.creationTimestamp;
    this.objects.set(k, stored as Resource);
    this.emit('MODIFIED', stored as Resource);
    return this.clone(stored);
  }

  async delete<K extends Kind>(kind: K, name: string, opts: ds.DeleteOptions & ds.CallOptions = {}): Promise<void> {
    this.check();
    const k = this.key(kind, name, opts.namespace);
    const cur = this.objects.get(k);
    if (!cur) throw new DatastoreError('NotFound', `${kind} ${name} not found`);
    if (opts.revision !== undefined && cur.metadata.resourceVersion !== opts.revision) {
      throw new DatastoreError(
        'Conflict',
        `${kind} ${name} was modified (have ${opts.revision}, store has ${cur.metadata.resourceVersion})`,
      );
    }
    this.objects.delete(k);
    ++this.revision;
    this.emit('DELETED', cur);
  }

  /** All guards are checked before anything is written, and the writes share one revision, as etcd's Txn does. */
  async txn(ops: TxnOp[]): Promise<Array<Resource | undefined>> {
    this.check();
    checkDistinct(ops);
    for (const [i, op] of ops.entries()) {
      const what = describeOp(op);
      if (op.op === 'update' && !op.res.metadata.resourceVersion)
        throw new TxnError('Invalid', `${what} needs metadata.resourceVersion`, i);
      const cur = this.objects.get(
        'res' in op
          ? this.key(op.res.kind, op.res.metadata.name, op.res.metadata.namespace)
          : this.key(op.kind, op.name, op.namespace),
      );
      const want = 'res' in op ? (op.op === 'update' ? op.res.metadata.resourceVersion : undefined) : op.revision;
      if (op.op === 'create') {
        if (cur) throw new TxnError('AlreadyExists', `${what}: it already exists`, i);
      } else if (!cur) {
        throw new TxnError('NotFound', `${what}: not found`, i);
      } else if (want !== undefined && cur.metadata.resourceVersion !== want) {
        throw new TxnError(
          'Conflict',
          `${what}: modified (have ${want}, store has ${cur.metadata.resourceVersion})`,
          i,
        );
      }
    }
    const rev = String(++this.revision);
    const out: Array<Resource | undefined> = [];
    for (const op of ops) {
      if (op.op === 'check') {
        out.push(undefined);
        continue;
      }
      if (op.op === 'delete') {
        const k = this.key(op.kind, op.name, op.namespace);
        const cur = this.objects.get(k)!;
        this.objects.delete(k);
        this.emit('DELETED', cur);
        out.push(undefined);
        continue;
      }
      const k = this.key(op.res.kind, op.res.metadata.name, op.res.metadata.namespace);
      const cur = this.objects.get(k);
      const stored = this.clone(op.res);
      stored.metadata.resourceVersion = rev;
      stored.metadata.uid = cur?.metadata.uid ?? stored.metadata.uid ?? randomUUID();
      stored.metadata.creationTimestamp =
        cur?.metadata.creationTimestamp ?? stored.metadata.creationTimestamp ?? new Date().toISOString();
      if (NAMESPACED_KINDS.has(stored.kind)) stored.metadata.namespace ??= 'default';
      this.objects.set(k, stored);
      this.emit(cur ? 'MODIFIED' : 'ADDED', stored);
      out.push(this.clone(stored));
    }
    return out;
  }

  watch<K extends Kind>(kind: K, opts: ds.WatchOptions, onEvent: (ev: ds.WatchEvent<K>) => void): ds.Watch {
    const l: Listener = { kind, namespace: opts.namespace, fn: onEvent as (ev: ds.WatchEvent<Kind>) => void };
    if (opts.revision !== undefined) {
      const from = Number(opts.revision);
      for (const h of this.history) {
        if (
          h.rev > from &&
          h.ev.object.kind === kind &&
          (opts.namespace === undefined || h.ev.object.metadata.namespace === opts.namespace)
        ) {
          queueMicrotask(() => onEvent(this.clone(h.ev) as ds.WatchEvent<K>));
        }
      }
    }
    this.listeners.add(l);
    return { stop: () => void this.listeners.delete(l) };
  }

  async close(): Promise<void> {
    this.listeners.clear();
  }
}
