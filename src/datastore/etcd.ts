// etcd v3 backend. Each object is one key holding the JSON of the resource
// without resourceVersion; the key's mod revision is the resourceVersion, and
// every write is a transaction comparing it (create: create_revision == 0).
// Loaded only by dynamic import from ./index.ts. The wire is a small KV seam
// (etcd-kv.ts) with two transports: etcd's JSON gateway over node:http(s)
// (etcd-http.ts, the default: a few ms to load) and the etcd3 package over gRPC
// (etcd-grpc.ts, ~180 ms to load and connect; imported only when chosen).
import { readFileSync } from 'node:fs';
import { randomUUID } from 'node:crypto';
import { DatastoreError } from '../errors.js';
import { NAMESPACED_KINDS, type Kind, type Resource } from '../model/resources.js';
import type * as ds from './types.js';
import { etcdKey, etcdKeyIdentity, etcdListPrefix, onNode } from './keys.js';
import { resourceProblem, validateResource } from './schemas.js';
import { InvalidObjectError, invalidObjects, invalidTombstone, rawText, type InvalidObject } from './invalid.js';
import { parseSelector } from '../selector/index.js';
import type { DatastoreConfig } from './settings.js';
import {
  GatewayUnusableError,
  prefixEnd,
  type CallContext,
  type Compare,
  type KV,
  type KVOptions,
  type KeyValue,
  type TlsMaterial,
  type TxnOp as KVTxnOp,
  type TxnResponse,
  type WatchCallbacks,
  type WatchRequest,
} from './etcd-kv.js';
import { TxnError, checkDistinct, describeOp, type TxnOp } from './txn.js';
import { HttpKV } from './etcd-http.js';
import { mark } from '../observe/timeline.js';

const DEFAULT_TIMEOUT_MS = 10_000;
/** Values of its own puts a store remembers for its watches (EtcdDatastore.ownPuts). */
const OWN_PUTS = 256;

type EtcdTransport = 'grpc' | 'http';

function readConfFile(field: string, path: string): Buffer {
  try {
    return readFileSync(path);
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code ?? String(e);
    throw new DatastoreError(
      'Invalid',
      `${field}=${path} cannot be read (${code}); point ${field} at an existing PEM file`,
    );
  }
}

/** Endpoints from etcd_endpoints, etcd_discovery_srv, or the deprecated etcd_authority/etcd_scheme. */
async function resolveEndpoints(conf: DatastoreConfig): Promise<string[]> {
  if (conf.etcd_endpoints && conf.etcd_discovery_srv) {
    throw new DatastoreError(
      'Invalid',
      'etcd_endpoints and etcd_discovery_srv are mutually exclusive; set only one of them',
    );
  }
  if (conf.etcd_endpoints) {
    const eps = conf.etcd_endpoints
      .split(',')
      .map((s) => s.trim())
      .filter(Boolean);
    for (const ep of eps) {
      if (!/^https?:\/\/[^/\s]+\/?$/.test(ep)) {
        throw new DatastoreError(
          'Invalid',
          `etcd_endpoints entry ${JSON.stringify(ep)} is not an endpoint URL; use e.g. https://10.0.0.1:2379`,
        );
      }
    }
    const schemes = new Set(eps.map((e) => e.split(':')[0]));
    if (schemes.size > 1)
      throw new DatastoreError(
        'Invalid',
        `etcd_endpoints=${conf.etcd_endpoints} mixes http and https; use one scheme for all endpoints`,
      );
    if (eps.length) return eps.map((e) => e.replace(/\/$/, ''));
  }
  if (conf.etcd_discovery_srv) return discoverSrv(conf.etcd_discovery_srv);
  const scheme = conf.etcd_scheme || 'http';
  if (scheme !== 'http' && scheme !== 'https')
    throw new DatastoreError('Invalid', `etcd_scheme=${scheme} is invalid; use http or https`);
  return [`${scheme}://${conf.etcd_authority || '127.0.0.1:2379'}`];
}

/** etcd's own discovery convention: TLS clients under _etcd-client-ssl, plain under _etcd-client. */
async function discoverSrv(
  domain: string,
  resolver?: (name: string) => Promise<Array<{ name: string; port: number; priority: number; weight: number }>>,
): Promise<string[]> {
  // node:dns is loaded only when discovery is configured (start-up cost of every other run).
  const resolve = resolver ?? (await import('node:dns/promises')).resolveSrv;
  for (const [svc, scheme] of [
    ['_etcd-client-ssl', 'https'],
    ['_etcd-client', 'http'],
  ] as const) {
    try {
      const recs = await resolve(`${svc}._tcp.${domain}`);
      if (recs.length) {
        recs.sort((a, b) => a.priority - b.priority || b.weight - a.weight);
        return recs.map((r) => `${scheme}://${r.name.replace(/\.$/, '')}:${r.port}`);
      }
    } catch (e) {
      const code = (e as NodeJS.ErrnoException).code;
      if (code !== 'ENOTFOUND' && code !== 'ENODATA') {
        throw new DatastoreError(
          'Unavailable',
          `etcd_discovery_srv=${domain}: DNS SRV lookup of ${svc}._tcp.${domain} failed (${code ?? String(e)})`,
          { cause: e },
        );
      }
    }
  }
  throw new DatastoreError(
    'Invalid',
    `etcd_discovery_srv=${domain}: neither _etcd-client-ssl._tcp.${domain} nor _etcd-client._tcp.${domain} has SRV ` +
      `records; check the domain or set etcd_endpoints`,
  );
}

export { discoverSrv as _discoverSrvForTests };

function loadTls(conf: DatastoreConfig): TlsMaterial {
  const t: TlsMaterial = {};
  if (!!conf.etcd_cert_file !== !!conf.etcd_key_file) {
    throw new DatastoreError(
      'Invalid',
      `mutual TLS needs both etcd_cert_file and etcd_key_file (got only ` +
        `${conf.etcd_cert_file ? 'etcd_cert_file' : 'etcd_key_file'})`,
    );
  }
  if (conf.etcd_ca_cert_file) {
    t.caFile = conf.etcd_ca_cert_file;
    t.ca = readConfFile('etcd_ca_cert_file', conf.etcd_ca_cert_file);
  }
  if (conf.etcd_cert_file && conf.etcd_key_file) {
    t.certFile = conf.etcd_cert_file;
    t.keyFile = conf.etcd_key_file;
    t.cert = readConfFile('etcd_cert_file', conf.etcd_cert_file);
    t.key = readConfFile('etcd_key_file', conf.etcd_key_file);
  }
  return t;
}

function objectLabel(kind: Kind, name: string, namespace?: string): string {
  return `${kind} ${NAMESPACED_KINDS.has(kind) ? `${namespace || 'default'}/` : ''}${name}`;
}

export class EtcdDatastore implements ds.Datastore {
  readonly type = 'etcdv3' as const;
  readonly atomicTxn = true;
  private readonly timeoutMs: number;
  private closed = false;
  private readonly watches = new Set<ds.Watch>();

  private constructor(
    readonly endpoints: string[],
    private kv: KV,
    timeoutMs: number | undefined,
    /** Set when the transport was not chosen explicitly: see GatewayUnusableError. */
    private readonly kvOptionsForFallback: KVOptions | undefined,
  ) {
    this.timeoutMs = timeoutMs ?? DEFAULT_TIMEOUT_MS;
  }

  private grpcFallback: Promise<KV> | undefined;
  private readonly retired: KV[] = [];

  /**
   * Runs fn on the current transport; when etcd's JSON gateway turns out to be
   * unusable (and http was not asked for explicitly), switches this store to
   * gRPC for good and runs fn again: the gateway never reached etcd, so
   * nothing was applied.
   */
  private async wire<T>(fn: (kv: KV) => Promise<T>): Promise<T> {
    try {
      return await fn(this.kv);
    } catch (e) {
      const next = await this.fallback(e);
      if (!next) throw e;
      return fn(next);
    }
  }

  private async fallback(e: unknown): Promise<KV | undefined> {
    if (!(e instanceof GatewayUnusableError) || !this.kvOptionsForFallback || this.closed) return undefined;
    const opts = this.kvOptionsForFallback;
    // etcd3 (grpc-js) costs ~180 ms to load: only a fall-back to gRPC pays for it.
    this.grpcFallback ??= import('./etcd-grpc.js').then((m) => {
      // The http transport is closed with the store: calls still in flight on it fall back on their own.
      this.retired.push(this.kv);
      this.kv = new m.GrpcKV(opts);
      return this.kv;
    });
    return this.grpcFallback;
  }

  /** Which wire this store speaks (for logs and tests). */
  get transport(): EtcdTransport {
    return this.kv.transport;
  }

  static async open(conf: DatastoreConfig): Promise<EtcdDatastore> {
    const transport = conf.etcd_transport ?? 'http';
    if (transport !== 'http' && transport !== 'grpc') {
      throw new DatastoreError(
        'Invalid',
        `etcd_transport=${JSON.stringify(transport)} is not supported; use "http" or "grpc"`,
      );
    }
    const tls = loadTls(conf);
    const endpoints = await resolveEndpoints(conf);
    if (endpoints.some((e) => e.startsWith('http:')) && (tls.cert || tls.ca)) {
      throw new DatastoreError(
        'Invalid',
        `etcd TLS files are set but etcd_endpoints (${endpoints.join(',')}) use http://; use https:// endpoints`,
      );
    }
    const kvOpts: KVOptions = { endpoints, tls, timeoutMs: conf.timeoutMs ?? DEFAULT_TIMEOUT_MS };
    // Lazy: only the gRPC transport loads etcd3 (~180 ms); the per-exec plugin speaks HTTP.
    const kv = transport === 'grpc' ? new (await import('./etcd-grpc.js')).GrpcKV(kvOpts) : new HttpKV(kvOpts);
    return new EtcdDatastore(endpoints, kv, conf.timeoutMs, conf.etcd_transport === undefined ? kvOpts : undefined);
  }

  private ctx(what: string, opts: ds.CallOptions | undefined): CallContext {
    if (this.closed) throw new DatastoreError('Unavailable', 'the etcd datastore is closed');
    return { what, timeoutMs: opts?.timeoutMs ?? this.timeoutMs };
  }

  /** This store in the process's record of malformed objects (invalid.ts). */
  private get storeId(): string {
    return `etcd ${this.endpoints.join(',')}`;
  }

  /** One stored value: the resource, or why it is malformed (named by its key: the value may not say). */
  /**
   * Values this store's transactions put, by key, until a watch brings them back: checked on the
   * way out (checkShape), so the watch does not run the schema over them again (the agent's read
   * cache watches the blocks every ADD and DEL writes). Bounded: values nobody watches age out.
   */
  private readonly ownPuts = new Map<string, Buffer>();

  private notePut(key: Buffer, value: Buffer): void {
    const k = key.toString();
    this.ownPuts.delete(k);
    if (this.ownPuts.size >= OWN_PUTS) this.ownPuts.delete(this.ownPuts.keys().next().value!);
    this.ownPuts.set(k, value);
  }

  /** True once for a watched value that is byte for byte one this store put. */
  private ownPut(kv: KeyValue): boolean {
    const k = kv.key.toString();
    const v = this.ownPuts.get(k);
    if (v === undefined || !v.equals(kv.value)) return false;
    this.ownPuts.delete(k);
    return true;
  }

  private decodeOne<K extends Kind>(
    kind: K,
    kv: KeyValue,
    checked = false,
  ): { res: Resource<K> } | { invalid: InvalidObject } {
    const key = kv.key.toString();
    const id = etcdKeyIdentity(kind, key) ?? { name: key };
    const base = { kind, ...id, revision: kv.modRevision, where: `etcd key ${key}` };
    const text = kv.value.toString();
    let obj: unknown;
    try {
      obj = JSON.parse(text);
    } catch (e) {
      return { invalid: { ...base, reason: `the value is not JSON (${(e as Error).message})`, raw: rawText(text) } };
    }
    const problem = checked ? undefined : resourceProblem(kind, obj);
    if (problem !== undefined) return { invalid: { ...base, reason: problem, raw: obj } };
    const res = obj as Resource<K>;
    res.metadata.resourceVersion = kv.modRevision;
    return { res };
  }

  /** A value read on its own (get): a malformed one fails with its name, key and field. */
  private decode<K extends Kind>(kind: K, kv: KeyValue): Resource<K> {
    const d = this.decodeOne(kind, kv);
    if ('invalid' in d) {
      invalidObjects.seen(this.storeId, d.invalid);
      throw new InvalidObjectError(d.invalid);
    }
    invalidObjects.cleared(this.storeId, kind, d.res.metadata.name, d.res.metadata.namespace);
    return d.res;
  }

  private encode(res: Resource): Buffer {
    const { resourceVersion: _rv, ...metadata } = res.metadata;
    return Buffer.from(JSON.stringify({ apiVersion: res.apiVersion, kind: res.kind, metadata, spec: res.spec }));
  }

  private checkShape(res: Resource): void {
    if (!res || typeof res !== 'object' || !res.metadata || typeof res.metadata.name !== 'string') {
      throw new DatastoreError('Invalid', 'a resource needs metadata.name');
    }
    validateResource(res.kind, res, `${res.kind} ${res.metadata.name} (to be written)`);
  }

  async get<K extends Kind>(kind: K, name: string, namespace?: string, opts?: ds.CallOptions): Promise<Resource<K>> {
    const key = etcdKey(kind, name, namespace);
    const ctx = this.ctx(`get ${objectLabel(kind, name, namespace)}`, opts);
    const r = await this.wire((kv) => kv.range({ key: Buffer.from(key) }, ctx));
    const kv = r.kvs[0];
    if (!kv) throw new DatastoreError('NotFound', `${objectLabel(kind, name, namespace)} not found`);
    return this.decode(kind, kv);
  }

  async list<K extends Kind>(kind: K, opts: ds.ListOptions & ds.CallOptions = {}): Promise<ds.ListResult<K>> {
    const prefix = etcdListPrefix(kind, opts.namespace, opts.namePrefix);
    const sel = opts.labelSelector ? parseSelector(opts.labelSelector) : undefined;
    // Endpoint keys are per namespace, not per node: the node is filtered here.
    const mine = onNode(kind, opts.node);
    const ctx = this.ctx(`list ${kind}`, opts);
    const r = await this.wire((kv) =>
      kv.range({ key: Buffer.from(prefix), rangeEnd: prefixEnd(Buffer.from(prefix)) }, ctx),
    );
    const items: Array<Resource<K>> = [];
    const invalid: InvalidObject[] = [];
    for (const kv of r.kvs) {
      const d = this.decodeOne(kind, kv);
      if ('invalid' in d) {
        // One malformed value costs itself only (invalid.ts). A label selector cannot be applied to it.
        const o = d.invalid;
        if (opts.namespace !== undefined && NAMESPACED_KINDS.has(kind) && (o.namespace ?? 'default') !== opts.namespace)
          continue;
        if (opts.namePrefix && !o.name.startsWith(opts.namePrefix)) continue;
        const rawNode = (o.raw as { spec?: { node?: unknown } } | undefined)?.spec?.node;
        if (opts.node !== undefined && typeof rawNode === 'string' && rawNode !== opts.node) continue;
        invalid.push(o);
        continue;
      }
      const o = d.res;
      if (
        opts.namespace !== undefined &&
        NAMESPACED_KINDS.has(kind) &&
        (o.metadata.namespace ?? 'default') !== opts.namespace
      )
        continue;
      if (opts.namePrefix && !o.metadata.name.startsWith(opts.namePrefix)) continue;
      if (sel && !sel.matches(o.metadata.labels ?? {})) continue;
      if (!mine(o)) continue;
      items.push(o);
    }
    const complete = !opts.namePrefix && !opts.labelSelector && opts.node === undefined;
    invalidObjects.listed(
      this.storeId,
      kind,
      complete ? { complete, namespace: opts.namespace } : { complete: false },
      invalid,
    );
    items.sort(
      (a, b) =>
        (a.metadata.namespace ?? '').localeCompare(b.metadata.namespace ?? '') ||
        a.metadata.name.localeCompare(b.metadata.name),
    );
    return { items, revision: r.revision, ...(invalid.length ? { invalid } : {}) };
  }

  async create<K extends Kind>(res: Resource<K>, opts?: ds.CallOptions): Promise<Resource<K>> {
    this.checkShape(res);
    const stored = structuredClone(res);
    if (NAMESPACED_KINDS.has(res.kind)) stored.metadata.namespace ||= 'default';
    else delete stored.metadata.namespace;
    stored.metadata.uid ||= randomUUID();
    // Milliseconds kept: "created first" decides between objects made within one second (floating IPs).
    stored.metadata.creationTimestamp ||= new Date().toISOString();
    const key = Buffer.from(etcdKey(res.kind, res.metadata.name, stored.metadata.namespace));
    const what = `create ${objectLabel(res.kind, res.metadata.name, stored.metadata.namespace)}`;
    const ctx = this.ctx(what, opts);
    const r = await this.wire((kv) =>
      kv.txn(
        {
          compare: [{ key, target: 'Create', result: 'Equal', revision: '0' }],
          success: [{ put: { key, value: this.encode(stored) } }],
          failure: [],
        },
        ctx,
      ),
    );
    if (!r.succeeded)
      throw new DatastoreError(
        'AlreadyExists',
        `${objectLabel(res.kind, res.metadata.name, stored.metadata.namespace)} already exists`,
      );
    stored.metadata.resourceVersion = r.revision;
    return stored;
  }

  async update<K extends Kind>(res: Resource<K>, opts?: ds.CallOptions): Promise<Resource<K>> {
    this.checkShape(res);
    const label = objectLabel(res.kind, res.metadata.name, res.metadata.namespace);
    const rv = res.metadata.resourceVersion;
    if (!rv || !/^\d+$/.test(rv))
      throw new DatastoreError(
        'Invalid',
        `update of ${label} needs metadata.resourceVersion from a previous read (got ${JSON.stringify(rv)})`,
      );
    const stored = structuredClone(res);
    if (NAMESPACED_KINDS.has(res.kind)) stored.metadata.namespace ||= 'default';
    else delete stored.metadata.namespace;
    const key = Buffer.from(etcdKey(res.kind, res.metadata.name, stored.metadata.namespace));
    const ctx = this.ctx(`update ${label}`, opts);
    const r = await this.wire((kv) =>
      kv.txn(
        {
          compare: [{ key, target: 'Mod', result: 'Equal', revision: rv }],
          success: [{ put: { key, value: this.encode(stored) } }],
          failure: [{ range: { key, keysOnly: true } }],
        },
        ctx,
      ),
    );
    if (!r.succeeded) throw this.casFailure(label, rv, r.responses[0]?.kvs?.[0]);
    stored.metadata.resourceVersion = r.revision;
    return stored;
  }

  private casFailure(label: string, rv: string, cur: KeyValue | undefined): DatastoreError {
    if (!cur) return new DatastoreError('NotFound', `${label} not found`);
    return new DatastoreError(
      'Conflict',
      `${label} was modified concurrently (have revision ${rv}, store has ${cur.modRevision}); re-read and retry`,
    );
  }

  async delete<K extends Kind>(kind: K, name: string, opts: ds.DeleteOptions & ds.CallOptions = {}): Promise<void> {
    const label = objectLabel(kind, name, opts.namespace);
    const key = Buffer.from(etcdKey(kind, name, opts.namespace));
    const rv = opts.revision;
    if (rv !== undefined && !/^\d+$/.test(rv))
      throw new DatastoreError('Invalid', `delete of ${label}: revision ${JSON.stringify(rv)} is not an etcd revision`);
    const ctx = this.ctx(`delete ${label}`, opts);
    const r = await this.wire((kv) =>
      kv.txn(
        {
          compare:
            rv !== undefined
              ? [{ key, target: 'Mod', result: 'Equal', revision: rv }]
              : [{ key, target: 'Create', result: 'Greater', revision: '0' }],
          success: [{ deleteRange: { key } }],
          failure: [{ range: { key, keysOnly: true } }],
        },
        ctx,
      ),
    );
    if (!r.succeeded) throw this.casFailure(label, rv ?? '', r.responses[0]?.kvs?.[0]);
  }

  /**
   * One etcd Txn: a compare per op (absence for a create, the mod revision for
   * an update or a delete with a revision, presence for a plain delete), all
   * writes in the success branch, and a keys-only read of every key in the
   * failure branch so the failed guard can be named. One revision, one WAL
   * write: all or nothing.
   */
  async txn(ops: TxnOp[], opts?: ds.CallOptions): Promise<Array<Resource | undefined>> {
    checkDistinct(ops);
    if (!ops.length) return [];
    const compare: Compare[] = [];
    const success: KVTxnOp[] = [];
    const keys: Buffer[] = [];
    const stored: Array<Resource | undefined> = [];
    for (const op of ops) {
      if (op.op === 'check') {
        if (!/^\d+$/.test(op.revision))
          throw new DatastoreError(
            'Invalid',
            `${describeOp(op)}: revision ${JSON.stringify(op.revision)} is not an etcd revision`,
          );
        const key = Buffer.from(etcdKey(op.kind, op.name, op.namespace));
        keys.push(key);
        // A missing key's mod revision is 0: a deleted object fails the compare too.
        compare.push({ key, target: 'Mod', result: 'Equal', revision: op.revision });
        stored.push(undefined);
        continue;
      }
      if (op.op === 'delete') {
        const rv = op.revision;
        if (rv !== undefined && !/^\d+$/.test(rv))
          throw new DatastoreError(
            'Invalid',
            `${describeOp(op)}: revision ${JSON.stringify(rv)} is not an etcd revision`,
          );
        const key = Buffer.from(etcdKey(op.kind, op.name, op.namespace));
        keys.push(key);
        compare.push(
          rv !== undefined
            ? { key, target: 'Mod', result: 'Equal', revision: rv }
            : { key, target: 'Create', result: 'Greater', revision: '0' },
        );
        success.push({ deleteRange: { key } });
        stored.push(undefined);
        continue;
      }
      this.checkShape(op.res);
      const s = structuredClone(op.res);
      if (NAMESPACED_KINDS.has(s.kind)) s.metadata.namespace ||= 'default';
      else delete s.metadata.namespace;
      const key = Buffer.from(etcdKey(s.kind, s.metadata.name, s.metadata.namespace));
      keys.push(key);
      if (op.op === 'create') {
        s.metadata.uid ||= randomUUID();
        s.metadata.creationTimestamp ||= new Date().toISOString();
        compare.push({ key, target: 'Create', result: 'Equal', revision: '0' });
      } else {
        const rv = s.metadata.resourceVersion;
        if (!rv || !/^\d+$/.test(rv))
          throw new DatastoreError(
            'Invalid',
            `${describeOp(op)} needs metadata.resourceVersion from a previous read (got ${JSON.stringify(rv)})`,
          );
        compare.push({ key, target: 'Mod', result: 'Equal', revision: rv });
      }
      const value = this.encode(s);
      success.push({ put: { key, value } });
      stored.push(s);
    }
    const ctx = this.ctx(`transaction (${ops.map(describeOp).join(', ')})`, opts);
    mark('etcd txn sent');
    const r = await this.wire((kv) =>
      kv.txn({ compare, success, failure: keys.map((key) => ({ range: { key, keysOnly: true } })) }, ctx),
    );
    mark('etcd txn answered');
    if (!r.succeeded) throw this.txnFailure(ops, compare, r.responses);
    for (const p of success) if ('put' in p) this.notePut(p.put.key, p.put.value);
    for (const s of stored) if (s) s.metadata.resourceVersion = r.revision;
    return stored;
  }

  private txnFailure(ops: TxnOp[], compare: Compare[], responses: TxnResponse['responses']): TxnError {
    for (const [i, op] of ops.entries()) {
      const cur = responses[i]?.kvs?.[0];
      const c = compare[i]!;
      const what = describeOp(op);
      if (op.op === 'create') {
        if (cur) return new TxnError('AlreadyExists', `${what}: it already exists`, i);
      } else if (!cur) {
        return new TxnError('NotFound', `${what}: not found`, i);
      } else if (c.target === 'Mod' && cur.modRevision !== c.revision) {
        return new TxnError(
          'Conflict',
          `${what}: modified concurrently (have revision ${c.revision}, store has ${cur.modRevision}); re-read and ` +
            `retry`,
          i,
        );
      }
    }
    // The guards are evaluated atomically with the failure branch's reads, so one of them shows the cause.
    return new TxnError(
      'Conflict',
      `transaction (${ops.map(describeOp).join(', ')}) failed its compare; re-read and retry`,
      0,
    );
  }

  watch<K extends Kind>(kind: K, opts: ds.WatchOptions, onEvent: (ev: ds.WatchEvent<K>) => void): ds.Watch {
    const prefix = Buffer.from(etcdListPrefix(kind, opts.namespace));
    let stopped = false;
    const emitError = (error: Error) => {
      if (!stopped) onEvent({ type: 'ERROR', error });
    };
    let sub: { cancel(): void } | undefined;
    const handle: ds.Watch = {
      stop: () => {
        stopped = true;
        this.watches.delete(handle);
        sub?.cancel();
      },
    };
    if (this.closed) {
      queueMicrotask(() => emitError(new DatastoreError('Unavailable', 'the etcd datastore is closed')));
      return handle;
    }
    this.watches.add(handle);
    const req: WatchRequest = {
      key: prefix,
      rangeEnd: prefixEnd(prefix),
      ...(opts.revision !== undefined ? { startRevision: String(BigInt(opts.revision) + 1n) } : {}),
    };
    const callbacks: WatchCallbacks = {
      onEvents: (events) => {
        for (const ev of events) {
          if (stopped) return;
          try {
            const inScope = (namespace: string | undefined) =>
              opts.namespace === undefined ||
              !NAMESPACED_KINDS.has(kind) ||
              (namespace ?? 'default') === opts.namespace;
            if (ev.type === 'Put') {
              const d = this.decodeOne(kind, ev.kv, this.ownPut(ev.kv));
              if ('invalid' in d) {
                // Now malformed: a delete of what the key held, so no consumer keeps acting on a stale copy.
                invalidObjects.seen(this.storeId, d.invalid);
                if (!inScope(d.invalid.namespace)) continue;
                const prev = ev.prevKv ? this.decodeOne(kind, ev.prevKv) : undefined;
                const object = prev && 'res' in prev ? prev.res : invalidTombstone<K>(d.invalid);
                object.metadata.resourceVersion = ev.kv.modRevision;
                onEvent({ type: 'DELETED', object, invalid: d.invalid });
                continue;
              }
              const obj = d.res;
              invalidObjects.cleared(this.storeId, kind, obj.metadata.name, obj.metadata.namespace);
              if (!inScope(obj.metadata.namespace)) continue;
              onEvent({ type: ev.kv.createRevision === ev.kv.modRevision ? 'ADDED' : 'MODIFIED', object: obj });
            } else {
              if (!ev.prevKv) {
                emitError(
                  new DatastoreError(
                    'Invalid',
                    `watch ${kind}: delete of ${ev.kv.key.toString()} came without its previous value`,
                  ),
                );
                continue;
              }
              const d = this.decodeOne(kind, ev.prevKv);
              const obj = 'res' in d ? d.res : invalidTombstone<K>(d.invalid);
              invalidObjects.cleared(this.storeId, kind, obj.metadata.name, obj.metadata.namespace);
              if (!inScope(obj.metadata.namespace)) continue;
              // The deleted object carries its last state; its version is the deletion's revision.
              obj.metadata.resourceVersion = ev.kv.modRevision;
              onEvent({ type: 'DELETED', object: obj });
            }
          } catch (e) {
            emitError(e as Error);
          }
        }
      },
      onEnd: ({ compacted, error }) => {
        if (stopped) return;
        if (error instanceof GatewayUnusableError && this.kvOptionsForFallback) {
          // Nothing was delivered through a gateway that cannot reach gRPC: start over on gRPC.
          void this.fallback(error).then(
            (kv) => {
              if (!stopped && kv) sub = kv.watch(req, callbacks);
            },
            (e: Error) => emitError(new DatastoreError('Unavailable', `watch ${kind}: ${e.message}`, { cause: e })),
          );
          return;
        }
        if (compacted) {
          emitError(
            new DatastoreError(
              'Conflict',
              `watch ${kind} from revision ${opts.revision}: that revision has been compacted; re-list and watch ` +
                `from the list's revision`,
              { cause: error },
            ),
          );
          handle.stop();
        } else {
          emitError(
            error instanceof DatastoreError
              ? new DatastoreError(error.kind, `watch ${kind}: ${error.message}`, { cause: error })
              : new DatastoreError('Unavailable', `watch ${kind}: ${error.message}`, { cause: error }),
          );
        }
      },
    };
    sub = this.kv.watch(req, callbacks);
    return handle;
  }

  async close(): Promise<void> {
    this.closed = true;
    for (const w of [...this.watches]) w.stop();
    for (const kv of [...this.retired, this.kv]) kv.close();
  }
}
