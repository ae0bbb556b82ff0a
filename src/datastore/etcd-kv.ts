// The little of etcd v3 the datastore uses, as one interface with two
// transports: etcd-grpc.ts (the etcd3 package: grpc-js + protobufjs, ~180 ms to
// load and connect, worth it only in a long-lived process) and etcd-http.ts
// (etcd's own JSON gateway on the same client port over node:http(s), a few ms).
// Also the error wording both share, so an operator reads the same message
// whichever transport ran.
import { DatastoreError, isUnknownCa, type DatastoreErrorKind } from '../errors.js';

export interface KeyValue {
  key: Buffer;
  value: Buffer;
  createRevision: string;
  modRevision: string;
}

export interface RangeRequest {
  key: Buffer;
  /** etcd's range_end: absent for one key. */
  rangeEnd?: Buffer;
  /** Read at this revision (fails when compacted). */
  revision?: string;
  keysOnly?: boolean;
  limit?: number;
}

export interface RangeResponse {
  /** The store's revision when the range was served. */
  revision: string;
  kvs: KeyValue[];
}

export interface Compare {
  key: Buffer;
  target: 'Create' | 'Mod';
  result: 'Equal' | 'Greater';
  /** Compared with the key's create_revision (Create) or mod_revision (Mod). */
  revision: string;
}

export type TxnOp =
  | { put: { key: Buffer; value: Buffer } }
  | { deleteRange: { key: Buffer } }
  | { range: { key: Buffer; keysOnly?: boolean } };

export interface TxnRequest {
  compare: Compare[];
  success: TxnOp[];
  failure: TxnOp[];
}

export interface TxnResponse {
  succeeded: boolean;
  revision: string;
  /** One per op of the branch taken; `kvs` for range ops. */
  responses: Array<{ kvs?: KeyValue[] }>;
}

export interface KVEvent {
  type: 'Put' | 'Delete';
  kv: KeyValue;
  prevKv?: KeyValue;
}

export interface WatchRequest {
  key: Buffer;
  rangeEnd: Buffer;
  /** First revision to deliver; absent: changes after now. Previous values are always requested. */
  startRevision?: string;
}

export interface WatchCallbacks {
  onEvents(events: KVEvent[]): void;
  /**
   * The watch has ended for good: `compacted` when startRevision is no longer
   * in etcd's history, else the server cancelled it. Disconnections are not
   * reported: the transport resumes after the last delivered revision.
   */
  onEnd(reason: { compacted: boolean; error: Error }): void;
}

/** One call: its description for messages ("get IPPool x") and its deadline. */
export interface CallContext {
  what: string;
  timeoutMs: number;
}

/** Every method rejects with a DatastoreError whose message names `ctx.what`. */
export interface KV {
  readonly transport: 'grpc' | 'http';
  range(req: RangeRequest, ctx: CallContext): Promise<RangeResponse>;
  txn(req: TxnRequest, ctx: CallContext): Promise<TxnResponse>;
  watch(req: WatchRequest, cb: WatchCallbacks): { cancel(): void };
  close(): void;
}

export interface TlsMaterial {
  ca?: Buffer;
  cert?: Buffer;
  key?: Buffer;
  caFile?: string;
  certFile?: string;
  keyFile?: string;
}

export interface KVOptions {
  endpoints: string[];
  tls: TlsMaterial;
  /** Default deadline, for the transport's own calls (watch resumption checks). */
  timeoutMs: number;
}

/** A TCP or TLS failure of one endpoint, worded as the fix the operator has to make. */
export function classifySocketError(endpoint: string, err: NodeJS.ErrnoException, tls: TlsMaterial): DatastoreError {
  const code = err.code ?? '';
  const kind = (k: DatastoreErrorKind, msg: string) => new DatastoreError(k, msg, { cause: err });
  if (code === 'ECONNREFUSED')
    return kind(
      'Unavailable',
      `etcd at ${endpoint} is unreachable: connection refused (ECONNREFUSED); check etcd_endpoints and that etcd is ` +
        `running`,
    );
  if (code === 'ENOTFOUND' || code === 'EAI_AGAIN')
    return kind(
      'Unavailable',
      `etcd at ${endpoint} is unreachable: host name does not resolve (${code}); check etcd_endpoints`,
    );
  if (['EHOSTUNREACH', 'ENETUNREACH', 'ETIMEDOUT', 'ECONNRESET', 'EPIPE'].includes(code))
    return kind(
      'Unavailable',
      `etcd at ${endpoint} is unreachable: ${err.message} (${code}); check etcd_endpoints and the network path`,
    );
  if (isUnknownCa(code)) {
    const fix = tls.caFile
      ? `etcd_ca_cert_file=${tls.caFile} does not hold the CA that issued the server certificate`
      : 'set etcd_ca_cert_file to the CA that issued the server certificate';
    return kind(
      'Unauthorized',
      `TLS handshake with ${endpoint} failed: certificate signed by unknown authority (${code}); ${fix}`,
    );
  }
  if (code === 'ERR_TLS_CERT_ALTNAME_INVALID')
    return kind(
      'Unauthorized',
      `TLS handshake with ${endpoint} failed: the server certificate is not valid for this host name ` +
        `(${err.message}); use the host name or IP address the certificate names in etcd_endpoints`,
    );
  if (code === 'CERT_HAS_EXPIRED' || code === 'CERT_NOT_YET_VALID')
    return kind(
      'Unauthorized',
      `TLS handshake with ${endpoint} failed: the server certificate ` +
        `${code === 'CERT_HAS_EXPIRED' ? 'has expired' : 'is not yet valid'}; renew it (or check the clock)`,
    );
  const msg = `${err.message} ${code}`;
  // Go's TLS server answers a missing client certificate with bad_certificate
  // (TLS 1.2) or certificate_required (TLS 1.3).
  if (/CERTIFICATE_REQUIRED|BAD_CERTIFICATE|alert handshake failure|ALERT_HANDSHAKE_FAILURE/i.test(msg) && !tls.cert) {
    return kind(
      'Unauthorized',
      `TLS handshake with ${endpoint} failed: the server requires a client certificate: set etcd_cert_file and ` +
        `etcd_key_file`,
    );
  }
  if (
    /BAD_CERTIFICATE|UNKNOWN_CA|CERTIFICATE_UNKNOWN|UNSUPPORTED_CERTIFICATE/i.test(msg) ||
    /alert handshake failure|ALERT_HANDSHAKE_FAILURE|ALERT_DECRYPT_ERROR/i.test(msg)
  ) {
    return kind(
      'Unauthorized',
      `TLS handshake with ${endpoint} failed: the server rejected the client certificate ` +
        `etcd_cert_file=${tls.certFile ?? '(none)'} (${code || err.message}); use a certificate issued by a CA the ` +
        `etcd server trusts (its --trusted-ca-file)`,
    );
  }
  if (/wrong version number|WRONG_VERSION_NUMBER|packet length too long/i.test(msg)) {
    return kind(
      'Unavailable',
      `TLS handshake with ${endpoint} failed: the server does not speak TLS (${code}); use http:// in etcd_endpoints ` +
        `or enable TLS on etcd`,
    );
  }
  if (/ERR_OSSL|PEM|KEY_VALUES_MISMATCH/i.test(code))
    return kind(
      'Invalid',
      `TLS client material is unusable (${err.message}); check etcd_cert_file=${tls.certFile} and ` +
        `etcd_key_file=${tls.keyFile} are a matching PEM certificate and key`,
    );
  return kind('Unavailable', `etcd at ${endpoint} failed: ${err.message}${code ? ` (${code})` : ''}`);
}

/** TLS alerts: the server refused the handshake, so it never saw a request. */
export function isTlsRejection(err: NodeJS.ErrnoException): boolean {
  return /^ERR_SSL_|^ERR_TLS_|CERT|SSL alert|alert/i.test(`${err.code ?? ''} ${err.message}`) || isUnknownCa(err.code);
}

/**
 * An error etcd itself returned (a gRPC status: code and message), worded as
 * before the transports were split: auth, throttling, unavailability, other.
 */
export function classifyServerError(
  endpoints: string[],
  what: string,
  code: number | undefined,
  msg: string,
  cause: unknown,
): DatastoreError {
  const eps = endpoints.join(',');
  // gRPC codes: 7 PermissionDenied, 16 Unauthenticated, 8 ResourceExhausted,
  // 14 Unavailable, 4 DeadlineExceeded, 1 Cancelled, 13 Internal, 2 Unknown.
  if (
    code === 7 ||
    code === 16 ||
    /permission denied|authentication failed|user name is empty|invalid auth token/i.test(msg)
  ) {
    return new DatastoreError('Unauthorized', `etcd at ${eps} refused ${what}: ${msg}`, { cause });
  }
  if (code === 8 || /too many requests/i.test(msg)) {
    return new DatastoreError('Unavailable', `etcd at ${eps} is throttling (${msg}); ${what} can be retried later`, {
      cause,
    });
  }
  if (
    (code !== undefined && [1, 2, 4, 13, 14].includes(code)) ||
    /unavailable|no connection|timeout|timed out|leader|deadline/i.test(msg)
  ) {
    return new DatastoreError('Unavailable', `${what}: etcd at ${eps} is unavailable: ${msg}`, { cause });
  }
  return new DatastoreError('Unavailable', `${what}: etcd at ${eps} failed: ${msg}`, { cause });
}

/**
 * etcd's JSON gateway forwards each request to etcd's own gRPC server over a
 * client connection of its own, which with --client-cert-auth presents the
 * server's certificate (--cert-file) as a client certificate. When that
 * certificate lacks extendedKeyUsage clientAuth the gateway can never reach
 * gRPC and answers every call "connection closed" (gRPC Unavailable without
 * etcd's "etcdserver:" prefix), while gRPC clients work. The datastore then
 * switches to the grpc transport unless http was asked for explicitly.
 */
export class GatewayUnusableError extends DatastoreError {
  override name = 'GatewayUnusableError';
}

export function gatewayUnusable(
  endpoint: string,
  what: string,
  code: number | undefined,
  msg: string,
): GatewayUnusableError | undefined {
  if (code !== 14 || /^etcdserver:/.test(msg)) return undefined;
  return new GatewayUnusableError(
    'Unavailable',
    `${what}: etcd at ${endpoint} cannot serve its JSON gateway: the gateway's own connection to etcd's gRPC server ` +
      `fails (${msg}); with --client-cert-auth, etcd's server certificate (--cert-file) must also allow client ` +
      `authentication (extendedKeyUsage clientAuth)`,
  );
}

/** etcd's "all keys with this prefix" range end: the prefix with its last byte incremented. */
export function prefixEnd(prefix: Buffer): Buffer {
  const end = Buffer.from(prefix);
  for (let i = end.length - 1; i >= 0; i--) {
    if (end[i]! < 0xff) {
      end[i]!++;
      return end.subarray(0, i + 1);
    }
  }
  return Buffer.from([0]);
}
