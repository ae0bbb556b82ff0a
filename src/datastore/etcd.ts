// etcd v3 backend. Each object is one key holding the JSON of the resource
// without resourceVersion; the key's mod revision is the resourceVersion, and
// every write is a transaction comparing it (create: create_revision == 0).
// Loaded only by dynamic import from ./index.ts; etcd3 itself (~100 ms to load)
// only when the first client is built.
import { readFileSync } from 'node:fs';
import { randomUUID } from 'node:crypto';
import { DatastoreError, type DatastoreErrorKind } from '../errors.js';
import {
  NAMESPACED_KINDS,
  type CallOptions,
  type Datastore,
  type Kind,
  type ListOptions,
  type ListResult,
  type Resource,
  type Watch,
  type WatchEvent,
} from './types.js';
import { etcdKey, etcdListPrefix } from './keys.js';
import { validateResource } from './schemas.js';
import { parseSelector } from '../selector/index.js';
import type { DatastoreConfig } from './index.js';

type Etcd3Module = typeof import('etcd3');
type Etcd3 = import('etcd3').Etcd3;
type IKeyValue = import('etcd3').IKeyValue;

export const DEFAULT_TIMEOUT_MS = 10_000;

interface TlsMaterial {
  ca?: Buffer;
  cert?: Buffer;
  key?: Buffer;
  caFile?: string;
  certFile?: string;
  keyFile?: string;
}

function readConfFile(field: string, path: string): Buffer {
  try {
    return readFileSync(path);
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code ?? String(e);
    throw new DatastoreError('Invalid', `${field}=${path} cannot be read (${code}); point ${field} at an existing PEM file`);
  }
}

/** Endpoints from etcd_endpoints, etcd_discovery_srv, or the deprecated etcd_authority/etcd_scheme. */
export async function resolveEndpoints(conf: DatastoreConfig): Promise<string[]> {
  if (conf.etcd_endpoints && conf.etcd_discovery_srv) {
    throw new DatastoreError('Invalid', 'etcd_endpoints and etcd_discovery_srv are mutually exclusive; set only one of them');
  }
  if (conf.etcd_endpoints) {
    const eps = conf.etcd_endpoints.split(',').map((s) => s.trim()).filter(Boolean);
    for (const ep of eps) {
      if (!/^https?:\/\/[^/\s]+\/?$/.test(ep)) {
        throw new DatastoreError('Invalid', `etcd_endpoints entry ${JSON.stringify(ep)} is not an endpoint URL; use e.g. https://10.0.0.1:2379`);
      }
    }
    const schemes = new Set(eps.map((e) => e.split(':')[0]));
    if (schemes.size > 1) throw new DatastoreError('Invalid', `etcd_endpoints=${conf.etcd_endpoints} mixes http and https; use one scheme for all endpoints`);
    if (eps.length) return eps.map((e) => e.replace(/\/$/, ''));
  }
  if (conf.etcd_discovery_srv) return discoverSrv(conf.etcd_discovery_srv);
  const scheme = conf.etcd_scheme || 'http';
  if (scheme !== 'http' && scheme !== 'https') throw new DatastoreError('Invalid', `etcd_scheme=${scheme} is invalid; use http or https`);
  return [`${scheme}://${conf.etcd_authority || '127.0.0.1:2379'}`];
}

/** etcd's own discovery convention: TLS clients under _etcd-client-ssl, plain under _etcd-client. */
async function discoverSrv(domain: string, resolver?: (name: string) => Promise<Array<{ name: string; port: number; priority: number; weight: number }>>): Promise<string[]> {
  // node:dns is loaded only when discovery is configured (start-up cost of every other run).
  const resolve = resolver ?? (await import('node:dns/promises')).resolveSrv;
  for (const [svc, scheme] of [['_etcd-client-ssl', 'https'], ['_etcd-client', 'http']] as const) {
    try {
      const recs = await resolve(`${svc}._tcp.${domain}`);
      if (recs.length) {
        recs.sort((a, b) => a.priority - b.priority || b.weight - a.weight);
        return recs.map((r) => `${scheme}://${r.name.replace(/\.$/, '')}:${r.port}`);
      }
    } catch (e) {
      const code = (e as NodeJS.ErrnoException).code;
      if (code !== 'ENOTFOUND' && code !== 'ENODATA') {
        throw new DatastoreError('Unavailable', `etcd_discovery_srv=${domain}: DNS SRV lookup of ${svc}._tcp.${domain} failed (${code ?? String(e)})`, { cause: e });
      }
    }
  }
  throw new DatastoreError('Invalid', `etcd_discovery_srv=${domain}: neither _etcd-client-ssl._tcp.${domain} nor _etcd-client._tcp.${domain} has SRV records; check the domain or set etcd_endpoints`);
}

export { discoverSrv as _discoverSrvForTests };

function loadTls(conf: DatastoreConfig): TlsMaterial {
  const t: TlsMaterial = {};
  if (!!conf.etcd_cert_file !== !!conf.etcd_key_file) {
    throw new DatastoreError('Invalid', `mutual TLS needs both etcd_cert_file and etcd_key_file (got only ${conf.etcd_cert_file ? 'etcd_cert_file' : 'etcd_key_file'})`);
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

/** Node's TLS error codes, grouped by what the operator has to fix. */
const UNKNOWN_CA = new Set(['UNABLE_TO_VERIFY_LEAF_SIGNATURE', 'SELF_SIGNED_CERT_IN_CHAIN', 'DEPTH_ZERO_SELF_SIGNED_CERT', 'UNABLE_TO_GET_ISSUER_CERT_LOCALLY', 'UNABLE_TO_GET_ISSUER_CERT', 'CERT_UNTRUSTED']);

/**
 * grpc reports every connection failure as "UNAVAILABLE: No connection
 * established"; to tell the operator what is wrong we redo the TCP/TLS
 * handshake ourselves with the same material and classify its outcome.
 */
export async function probeEndpoint(endpoint: string, tls: TlsMaterial, timeoutMs: number): Promise<DatastoreError | undefined> {
  const [{ connect: netConnect }, { connect: tlsConnect }] = await Promise.all([import('node:net'), import('node:tls')]);
  const u = new URL(endpoint);
  const host = u.hostname.replace(/^\[|\]$/g, '');
  const port = Number(u.port || 2379);
  const secure = u.protocol === 'https:';
  return new Promise((resolve) => {
    let done = false;
    const finish = (e: DatastoreError | undefined) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      sock.destroy();
      resolve(e);
    };
    const timer = setTimeout(() => finish(new DatastoreError('Unavailable', `etcd at ${endpoint} is unreachable: no answer within ${timeoutMs} ms; check etcd_endpoints and the network path`)), timeoutMs);
    const sock = secure
      ? tlsConnect({ host, port, servername: /^[\d.:]+$/.test(host) ? undefined : host, ca: tls.ca, cert: tls.cert, key: tls.key, ALPNProtocols: ['h2'] })
      : netConnect({ host, port });
    sock.on('error', (err: NodeJS.ErrnoException) => finish(classifySocketError(endpoint, err, tls)));
    sock.once(secure ? 'secureConnect' : 'connect', () => {
      if (!secure) return finish(undefined);
      // With TLS 1.3 the server checks the client certificate after the
      // client considers the handshake done: send the HTTP/2 preface and see
      // whether an alert comes back instead of the server's SETTINGS frame.
      sock.write('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00');
      sock.once('data', () => finish(undefined));
      sock.once('end', () => finish(undefined));
    });
  });
}

function classifySocketError(endpoint: string, err: NodeJS.ErrnoException, tls: TlsMaterial): DatastoreError {
  const code = err.code ?? '';
  const kind = (k: DatastoreErrorKind, msg: string) => new DatastoreError(k, msg, { cause: err });
  if (code === 'ECONNREFUSED') return kind('Unavailable', `etcd at ${endpoint} is unreachable: connection refused (ECONNREFUSED); check etcd_endpoints and that etcd is running`);
  if (code === 'ENOTFOUND' || code === 'EAI_AGAIN') return kind('Unavailable', `etcd at ${endpoint} is unreachable: host name does not resolve (${code}); check etcd_endpoints`);
  if (['EHOSTUNREACH', 'ENETUNREACH', 'ETIMEDOUT', 'ECONNRESET', 'EPIPE'].includes(code)) return kind('Unavailable', `etcd at ${endpoint} is unreachable: ${err.message} (${code}); check etcd_endpoints and the network path`);
  if (UNKNOWN_CA.has(code)) {
    const fix = tls.caFile
      ? `etcd_ca_cert_file=${tls.caFile} does not hold the CA that issued the server certificate`
      : 'set etcd_ca_cert_file to the CA that issued the server certificate';
    return kind('Unauthorized', `TLS handshake with ${endpoint} failed: certificate signed by unknown authority (${code}); ${fix}`);
  }
  if (code === 'ERR_TLS_CERT_ALTNAME_INVALID') return kind('Unauthorized', `TLS handshake with ${endpoint} failed: the server certificate is not valid for this host name (${err.message}); use the host name or IP address the certificate names in etcd_endpoints`);
  if (code === 'CERT_HAS_EXPIRED' || code === 'CERT_NOT_YET_VALID') return kind('Unauthorized', `TLS handshake with ${endpoint} failed: the server certificate ${code === 'CERT_HAS_EXPIRED' ? 'has expired' : 'is not yet valid'}; renew it (or check the clock)`);
  const msg = `${err.message} ${code}`;
  // Go's TLS server answers a missing client certificate with bad_certificate
  // (TLS 1.2) or certificate_required (TLS 1.3).
  if (/CERTIFICATE_REQUIRED|BAD_CERTIFICATE|alert handshake failure|ALERT_HANDSHAKE_FAILURE/i.test(msg) && !tls.cert) {
    return kind('Unauthorized', `TLS handshake with ${endpoint} failed: the server requires a client certificate: set etcd_cert_file and etcd_key_file`);
  }
  if (/BAD_CERTIFICATE|UNKNOWN_CA|CERTIFICATE_UNKNOWN|UNSUPPORTED_CERTIFICATE|alert handshake failure|ALERT_HANDSHAKE_FAILURE|ALERT_DECRYPT_ERROR/i.test(msg)) {
    return kind('Unauthorized', `TLS handshake with ${endpoint} failed: the server rejected the client certificate etcd_cert_file=${tls.certFile ?? '(none)'} (${code || err.message}); use a certificate issued by a CA the etcd server trusts (its --trusted-ca-file)`);
  }
  if (/wrong version number|WRONG_VERSION_NUMBER|packet length too long/i.test(msg)) {
    return kind('Unavailable', `TLS handshake with ${endpoint} failed: the server does not speak TLS (${code}); use http:// in etcd_endpoints or enable TLS on etcd`);
  }
  if (/ERR_OSSL|PEM|KEY_VALUES_MISMATCH/i.test(code)) return kind('Invalid', `TLS client material is unusable (${err.message}); check etcd_cert_file=${tls.certFile} and etcd_key_file=${tls.keyFile} are a matching PEM certificate and key`);
  return kind('Unavailable', `etcd at ${endpoint} failed: ${err.message}${code ? ` (${code})` : ''}`);
}

let etcd3Module: Promise<Etcd3Module> | undefined;
function loadEtcd3(): Promise<Etcd3Module> {
  return (etcd3Module ??= import('etcd3'));
}

function objectLabel(kind: Kind, name: string, namespace?: string): string {
  return `${kind} ${NAMESPACED_KINDS.has(kind) ? `${namespace || 'default'}/` : ''}${name}`;
}

/** A cockatiel-compatible policy that runs the call once: we own retries and deadlines. */
// (async: etcd3's markFailed() passes a function that throws synchronously and
// only catches a rejected promise.)
const noRetry = { execute: async <T>(fn: (ctx: { signal: AbortSignal }) => PromiseLike<T> | T) => fn({ signal: new AbortController().signal }) };

export class EtcdDatastore implements Datastore {
  readonly type = 'etcdv3' as const;
  private client: Etcd3 | undefined;
  private clientP: Promise<Etcd3> | undefined;
  private readonly timeoutMs: number;
  private closed = false;
  private readonly watches = new Set<Watch>();

  private constructor(
    readonly endpoints: string[],
    private readonly tls: TlsMaterial,
    timeoutMs: number | undefined,
  ) {
    this.timeoutMs = timeoutMs ?? DEFAULT_TIMEOUT_MS;
  }

  static async open(conf: DatastoreConfig): Promise<EtcdDatastore> {
    const tls = loadTls(conf);
    const endpoints = await resolveEndpoints(conf);
    if (endpoints.some((e) => e.startsWith('http:')) && (tls.cert || tls.ca)) {
      throw new DatastoreError('Invalid', `etcd TLS files are set but etcd_endpoints (${endpoints.join(',')}) use http://; use https:// endpoints`);
    }
    return new EtcdDatastore(endpoints, tls, conf.timeoutMs);
  }

  private getClient(): Promise<Etcd3> {
    if (this.closed) return Promise.reject(new DatastoreError('Unavailable', 'the etcd datastore is closed'));
    return (this.clientP ??= loadEtcd3().then((m) => {
      const secure = this.endpoints[0]!.startsWith('https:');
      this.client = new m.Etcd3({
        hosts: this.endpoints,
        ...(secure ? { credentials: { rootCertificate: this.tls.ca ?? (undefined as unknown as Buffer), privateKey: this.tls.key, certChain: this.tls.cert } } : {}),
        grpcOptions: {
          // A restarted etcd must be re-dialled quickly, not after grpc's 2-minute max backoff.
          'grpc.initial_reconnect_backoff_ms': 100,
          'grpc.max_reconnect_backoff_ms': 1000,
          'grpc.keepalive_time_ms': 15_000,
          'grpc.keepalive_timeout_ms': 5_000,
        },
        // etcd3's default retries three times and opens a circuit breaker for
        // 5 s: a down etcd would surface as "circuit open" or run past the
        // caller's deadline. We fail fast with a classified error instead.
        faultHandling: { host: () => noRetry as never, global: noRetry as never },
      });
      return this.client;
    }));
  }

  /** Runs one RPC under the deadline and maps every failure to a DatastoreError. */
  private async run<T>(what: string, opts: CallOptions | undefined, fn: (c: Etcd3, deadline: Date) => Promise<T>): Promise<T> {
    const timeoutMs = opts?.timeoutMs ?? this.timeoutMs;
    const deadline = new Date(Date.now() + timeoutMs);
    const client = await this.getClient();
    let timer: NodeJS.Timeout | undefined;
    try {
      return await Promise.race([
        fn(client, deadline),
        new Promise<never>((_, reject) => {
          timer = setTimeout(() => reject(Object.assign(new Error('deadline exceeded'), { code: 4 })), timeoutMs + 50);
        }),
      ]);
    } catch (e) {
      throw await this.classify(e, what, timeoutMs);
    } finally {
      clearTimeout(timer);
    }
  }

  private async classify(e: unknown, what: string, timeoutMs: number): Promise<DatastoreError> {
    if (e instanceof DatastoreError) return e;
    const err = e as Error & { code?: number };
    const name = err?.constructor?.name ?? '';
    const msg = String(err?.message ?? e);
    if (/PermissionDenied|Unauthenticated|AuthenticationFailed|InvalidAuthToken|RoleNotGranted|UserNotFound/.test(name) || /permission denied|authentication failed|user name is empty|invalid auth token/i.test(msg)) {
      return new DatastoreError('Unauthorized', `etcd at ${this.endpoints.join(',')} refused ${what}: ${msg}`, { cause: e });
    }
    if (/too many requests|ResourceExhausted|RESOURCE_EXHAUSTED/i.test(name + msg)) {
      return new DatastoreError('Unavailable', `etcd at ${this.endpoints.join(',')} is throttling (${msg}); ${what} can be retried later`, { cause: e });
    }
    if (/Unavailable|DeadlineExceeded|GRPCGenericError|Cancelled|Internal|Unknown|ClientClosed/.test(name) || /deadline|unavailable|no connection|connect|timeout|leader/i.test(msg)) {
      // Find out why: probe each endpoint with the same TLS material (bounded by a short timeout).
      const probes = await Promise.all(this.endpoints.map((ep) => probeEndpoint(ep, this.tls, Math.min(2000, Math.max(250, timeoutMs / 2))).catch(() => undefined)));
      const first = probes.find((p) => p !== undefined);
      if (first) {
        return new DatastoreError(first.kind, `${what}: ${first.message}`, { cause: e });
      }
      if (/deadline/i.test(name + msg)) {
        return new DatastoreError('Unavailable', `${what}: etcd at ${this.endpoints.join(',')} did not answer within ${timeoutMs} ms (it accepts connections, so it may be overloaded or without quorum)`, { cause: e });
      }
      return new DatastoreError('Unavailable', `${what}: etcd at ${this.endpoints.join(',')} is unavailable: ${msg}`, { cause: e });
    }
    return new DatastoreError('Unavailable', `${what}: etcd at ${this.endpoints.join(',')} failed: ${msg}`, { cause: e });
  }

  private decode<K extends Kind>(kind: K, kv: IKeyValue): Resource<K> {
    const key = kv.key.toString();
    let obj: unknown;
    try {
      obj = JSON.parse(kv.value.toString());
    } catch (e) {
      throw new DatastoreError('Invalid', `corrupt ${kind} at etcd key ${key}: not JSON (${(e as Error).message}); fix or delete the key`);
    }
    const res = validateResource(kind, obj, `etcd key ${key}`);
    res.metadata.resourceVersion = String(kv.mod_revision);
    return res;
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

  async get<K extends Kind>(kind: K, name: string, namespace?: string, opts?: CallOptions): Promise<Resource<K>> {
    const key = etcdKey(kind, name, namespace);
    const r = await this.run(`get ${objectLabel(kind, name, namespace)}`, opts, (c, deadline) => c.kv.range({ key: Buffer.from(key) }, { deadline }));
    const kv = r.kvs[0];
    if (!kv) throw new DatastoreError('NotFound', `${objectLabel(kind, name, namespace)} not found`);
    return this.decode(kind, kv);
  }

  async list<K extends Kind>(kind: K, opts: ListOptions & CallOptions = {}): Promise<ListResult<K>> {
    const prefix = etcdListPrefix(kind, opts.namespace, opts.namePrefix);
    const sel = opts.labelSelector ? parseSelector(opts.labelSelector) : undefined;
    const r = await this.run(`list ${kind}`, opts, (c, deadline) =>
      c.kv.range({ key: Buffer.from(prefix), range_end: prefixEnd(Buffer.from(prefix)) }, { deadline }),
    );
    const items: Array<Resource<K>> = [];
    for (const kv of r.kvs) {
      const o = this.decode(kind, kv);
      if (opts.namespace !== undefined && NAMESPACED_KINDS.has(kind) && (o.metadata.namespace ?? 'default') !== opts.namespace) continue;
      if (opts.namePrefix && !o.metadata.name.startsWith(opts.namePrefix)) continue;
      if (sel && !sel.matches(o.metadata.labels ?? {})) continue;
      items.push(o);
    }
    items.sort((a, b) => (a.metadata.namespace ?? '').localeCompare(b.metadata.namespace ?? '') || a.metadata.name.localeCompare(b.metadata.name));
    return { items, revision: String(r.header.revision) };
  }

  async create<K extends Kind>(res: Resource<K>, opts?: CallOptions): Promise<Resource<K>> {
    this.checkShape(res);
    const stored = structuredClone(res);
    if (NAMESPACED_KINDS.has(res.kind)) stored.metadata.namespace ||= 'default';
    else delete stored.metadata.namespace;
    stored.metadata.uid ||= randomUUID();
    stored.metadata.creationTimestamp ||= new Date().toISOString().replace(/\.\d+Z$/, 'Z');
    const key = Buffer.from(etcdKey(res.kind, res.metadata.name, stored.metadata.namespace));
    const what = `create ${objectLabel(res.kind, res.metadata.name, stored.metadata.namespace)}`;
    const r = await this.run(what, opts, (c, deadline) =>
      c.kv.txn(
        { compare: [{ key, target: 'Create', result: 'Equal', create_revision: 0 }], success: [{ request_put: { key, value: this.encode(stored) } }], failure: [] },
        { deadline },
      ),
    );
    if (!r.succeeded) throw new DatastoreError('AlreadyExists', `${objectLabel(res.kind, res.metadata.name, stored.metadata.namespace)} already exists`);
    stored.metadata.resourceVersion = String(r.header.revision);
    return stored;
  }

  async update<K extends Kind>(res: Resource<K>, opts?: CallOptions): Promise<Resource<K>> {
    this.checkShape(res);
    const label = objectLabel(res.kind, res.metadata.name, res.metadata.namespace);
    const rv = res.metadata.resourceVersion;
    if (!rv || !/^\d+$/.test(rv)) throw new DatastoreError('Invalid', `update of ${label} needs metadata.resourceVersion from a previous read (got ${JSON.stringify(rv)})`);
    const stored = structuredClone(res);
    if (NAMESPACED_KINDS.has(res.kind)) stored.metadata.namespace ||= 'default';
    else delete stored.metadata.namespace;
    const key = Buffer.from(etcdKey(res.kind, res.metadata.name, stored.metadata.namespace));
    const r = await this.run(`update ${label}`, opts, (c, deadline) =>
      c.kv.txn(
        {
          compare: [{ key, target: 'Mod', result: 'Equal', mod_revision: rv }],
          success: [{ request_put: { key, value: this.encode(stored) } }],
          failure: [{ request_range: { key, keys_only: true } }],
        },
        { deadline },
      ),
    );
    if (!r.succeeded) throw this.casFailure(label, rv, r.responses[0]?.response_range?.kvs[0]);
    stored.metadata.resourceVersion = String(r.header.revision);
    return stored;
  }

  private casFailure(label: string, rv: string, cur: IKeyValue | undefined): DatastoreError {
    if (!cur) return new DatastoreError('NotFound', `${label} not found`);
    return new DatastoreError('Conflict', `${label} was modified concurrently (have revision ${rv}, store has ${cur.mod_revision}); re-read and retry`);
  }

  async delete<K extends Kind>(kind: K, name: string, opts: { namespace?: string; revision?: string } & CallOptions = {}): Promise<void> {
    const label = objectLabel(kind, name, opts.namespace);
    const key = Buffer.from(etcdKey(kind, name, opts.namespace));
    const rv = opts.revision;
    if (rv !== undefined && !/^\d+$/.test(rv)) throw new DatastoreError('Invalid', `delete of ${label}: revision ${JSON.stringify(rv)} is not an etcd revision`);
    const r = await this.run(`delete ${label}`, opts, (c, deadline) =>
      c.kv.txn(
        {
          compare: rv !== undefined ? [{ key, target: 'Mod', result: 'Equal', mod_revision: rv }] : [{ key, target: 'Create', result: 'Greater', create_revision: 0 }],
          success: [{ request_delete_range: { key } }],
          failure: [{ request_range: { key, keys_only: true } }],
        },
        { deadline },
      ),
    );
    if (!r.succeeded) throw this.casFailure(label, rv ?? '', r.responses[0]?.response_range?.kvs[0]);
  }

  watch<K extends Kind>(kind: K, opts: { revision?: string; namespace?: string }, onEvent: (ev: WatchEvent<K>) => void): Watch {
    const prefix = etcdListPrefix(kind, opts.namespace);
    let stopped = false;
    let watcher: import('etcd3').Watcher | undefined;
    const emitError = (error: Error) => {
      if (!stopped) onEvent({ type: 'ERROR', error });
    };
    const handle: Watch = {
      stop: () => {
        stopped = true;
        this.watches.delete(handle);
        void watcher?.cancel().catch(() => undefined);
      },
    };
    this.watches.add(handle);
    void this.getClient()
      .then((c) => {
        if (stopped) return;
        let b = c.watch().prefix(prefix).withPreviousKV();
        if (opts.revision !== undefined) b = b.startRevision(String(BigInt(opts.revision) + 1n));
        watcher = b.watcher();
        watcher.on('data', (res) => {
          if (stopped) return;
          for (const ev of res.events) {
            try {
              if (ev.type === 'Put') {
                const obj = this.decode(kind, ev.kv);
                if (opts.namespace !== undefined && NAMESPACED_KINDS.has(kind) && obj.metadata.namespace !== opts.namespace) continue;
                onEvent({ type: ev.kv.create_revision === ev.kv.mod_revision ? 'ADDED' : 'MODIFIED', object: obj });
              } else {
                if (!ev.prev_kv) {
                  emitError(new DatastoreError('Invalid', `watch ${kind}: delete of ${ev.kv.key.toString()} came without its previous value`));
                  continue;
                }
                const obj = this.decode(kind, ev.prev_kv);
                // The deleted object carries its last state; its version is the deletion's revision.
                obj.metadata.resourceVersion = String(ev.kv.mod_revision);
                onEvent({ type: 'DELETED', object: obj });
              }
            } catch (e) {
              emitError(e as Error);
            }
          }
        });
        watcher.on('error', async (err) => {
          // etcd 3.4 cancels a watch on a compacted revision without a reason
          // text: ask for that revision directly to find out.
          let compacted = /compacted/i.test(err.message);
          if (!compacted && opts.revision !== undefined) {
            compacted = await c.kv
              .range({ key: Buffer.from(prefix), revision: String(BigInt(opts.revision) + 1n), keys_only: true, limit: 1 }, { deadline: new Date(Date.now() + this.timeoutMs) })
              .then(() => false, (e: Error) => /compacted/i.test(e.message));
          }
          if (compacted) {
            emitError(new DatastoreError('Conflict', `watch ${kind} from revision ${opts.revision}: that revision has been compacted; re-list and watch from the list's revision`, { cause: err }));
            handle.stop();
          } else {
            emitError(new DatastoreError('Unavailable', `watch ${kind}: ${err.message}`, { cause: err }));
          }
        });
      })
      .catch((e) => emitError(e as Error));
    return handle;
  }

  async close(): Promise<void> {
    this.closed = true;
    for (const w of [...this.watches]) w.stop();
    this.client?.close();
    this.client = undefined;
  }
}

/** etcd's "all keys with this prefix" range end: the prefix with its last byte incremented. */
function prefixEnd(prefix: Buffer): Buffer {
  const end = Buffer.from(prefix);
  for (let i = end.length - 1; i >= 0; i--) {
    if (end[i]! < 0xff) {
      end[i]!++;
      return end.subarray(0, i + 1);
    }
  }
  return Buffer.from([0]);
}
