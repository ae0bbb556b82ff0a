// The KV seam over the etcd3 package (grpc-js + protobufjs). Loading and
// connecting it costs ~180 ms (more under load), so only a long-lived process
// that asks for etcd_transport "grpc" gets here; etcd3 itself is imported on
// the first call.
import { DatastoreError } from '../errors.js';
import { classifyServerError, classifySocketError } from './etcd-kv.js';
import type * as kv from './etcd-kv.js';

type Etcd3Module = typeof import('etcd3');
type Etcd3 = import('etcd3').Etcd3;
type IKeyValue = import('etcd3').IKeyValue;

let etcd3Module: Promise<Etcd3Module> | undefined;
function loadEtcd3(): Promise<Etcd3Module> {
  return (etcd3Module ??= import('etcd3'));
}

/**
 * grpc reports every connection failure as "UNAVAILABLE: No connection
 * established"; to tell the operator what is wrong we redo the TCP/TLS
 * handshake ourselves with the same material and classify its outcome.
 */
export async function probeEndpoint(
  endpoint: string,
  tls: kv.TlsMaterial,
  timeoutMs: number,
): Promise<DatastoreError | undefined> {
  // Dynamic: the ESM bundles would hoist static builtins into every start (node:tls is costly).
  const [{ connect: netConnect }, { connect: tlsConnect }] = await Promise.all([
    import('node:net'),
    import('node:tls'),
  ]);
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
    const timer = setTimeout(
      () =>
        finish(
          new DatastoreError(
            'Unavailable',
            `etcd at ${endpoint} is unreachable: no answer within ${timeoutMs} ms; check etcd_endpoints and the ` +
              `network path`,
          ),
        ),
      timeoutMs,
    );
    const sock = secure
      ? tlsConnect({
          host,
          port,
          servername: /^[\d.:]+$/.test(host) ? undefined : host,
          ca: tls.ca,
          cert: tls.cert,
          key: tls.key,
          ALPNProtocols: ['h2'],
        })
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

/** A cockatiel-compatible policy that runs the call once: we own retries and deadlines. */
// (async: etcd3's markFailed() passes a function that throws synchronously and
// only catches a rejected promise.)
const noRetry = {
  execute: async <T>(fn: (ctx: { signal: AbortSignal }) => PromiseLike<T> | T) =>
    fn({ signal: new AbortController().signal }),
};

/** grpc-js could not reach the host: the request was never sent, so another host may take it. */
const NOT_SENT = /No connection established|ECONNREFUSED|EHOSTUNREACH|ENETUNREACH|ENOTFOUND|marked down/;

/**
 * Per-host policy: a host that just refused a connection is skipped for a
 * second. etcd3 moves on to the next host only when a host's policy refuses to
 * run the call, so this is what makes it fail over (run() retries the call).
 */
function hostPolicy() {
  let downUntil = 0;
  return {
    execute: async <T>(fn: (ctx: { signal: AbortSignal }) => PromiseLike<T> | T) => {
      if (Date.now() < downUntil)
        throw new Error('No connection established (host marked down after a failed connection)');
      try {
        return await fn({ signal: new AbortController().signal });
      } catch (e) {
        if (NOT_SENT.test(String((e as Error)?.message))) downUntil = Date.now() + 1000;
        throw e;
      }
    },
  };
}

/** etcd3's error classes map to gRPC codes by name. */
const GRPC_CODE_BY_NAME: Array<[RegExp, number]> = [
  [/PermissionDenied|RoleNotGranted|UserNotFound/, 7],
  [/Unauthenticated|AuthenticationFailed|InvalidAuthToken/, 16],
  [/ResourceExhausted/, 8],
  [/Unavailable|GRPCGenericError|ClientClosed/, 14],
  [/DeadlineExceeded/, 4],
  [/Cancelled/, 1],
  [/Internal/, 13],
  [/Unknown/, 2],
];

function toKV(raw: IKeyValue): kv.KeyValue {
  return {
    key: raw.key,
    value: raw.value,
    createRevision: String(raw.create_revision),
    modRevision: String(raw.mod_revision),
  };
}

function toOp(op: kv.TxnOp) {
  if ('put' in op) return { request_put: { key: op.put.key, value: op.put.value } };
  if ('deleteRange' in op) return { request_delete_range: { key: op.deleteRange.key } };
  return { request_range: { key: op.range.key, keys_only: !!op.range.keysOnly } };
}

export class GrpcKV implements kv.KV {
  readonly transport = 'grpc' as const;
  private client: Etcd3 | undefined;
  private clientP: Promise<Etcd3> | undefined;
  private readonly endpoints: string[];
  private readonly tls: kv.TlsMaterial;
  private readonly timeoutMs: number;

  constructor(o: kv.KVOptions) {
    this.endpoints = o.endpoints;
    this.tls = o.tls;
    this.timeoutMs = o.timeoutMs;
  }

  private getClient(): Promise<Etcd3> {
    return (this.clientP ??= loadEtcd3().then((m) => {
      const secure = this.endpoints[0]!.startsWith('https:');
      this.client = new m.Etcd3({
        hosts: this.endpoints,
        // etcd3's type demands a CA, but grpc takes none as "the system's roots".
        ...(secure
          ? {
              credentials: {
                rootCertificate: this.tls.ca ?? (undefined as unknown as Buffer),
                ...(this.tls.key ? { privateKey: this.tls.key } : {}),
                ...(this.tls.cert ? { certChain: this.tls.cert } : {}),
              },
            }
          : {}),
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
        faultHandling: {
          host: () => (this.endpoints.length > 1 ? hostPolicy() : noRetry) as never,
          global: noRetry as never,
        },
      });
      return this.client;
    }));
  }

  /** Runs one RPC under the deadline and maps every failure to a DatastoreError. */
  private async run<T>(ctx: kv.CallContext, fn: (c: Etcd3, deadline: Date) => Promise<T>): Promise<T> {
    const deadline = new Date(Date.now() + ctx.timeoutMs);
    const client = await this.getClient();
    let timer: NodeJS.Timeout | undefined;
    const attempt = async (): Promise<T> => {
      for (let i = 1; ; i++) {
        try {
          return await fn(client, deadline);
        } catch (e) {
          // Never sent: the host that failed is now skipped, so a retry lands on another one.
          if (
            i >= this.endpoints.length ||
            Date.now() >= deadline.getTime() ||
            !NOT_SENT.test(String((e as Error)?.message))
          )
            throw e;
        }
      }
    };
    try {
      return await Promise.race([
        attempt(),
        new Promise<never>((_, reject) => {
          timer = setTimeout(
            () => reject(Object.assign(new Error('deadline exceeded'), { code: 4 })),
            ctx.timeoutMs + 50,
          );
        }),
      ]);
    } catch (e) {
      throw await this.classify(e, ctx);
    } finally {
      clearTimeout(timer);
    }
  }

  private async classify(e: unknown, { what, timeoutMs }: kv.CallContext): Promise<DatastoreError> {
    if (e instanceof DatastoreError) return e;
    const err = e as Error & { code?: number };
    const name = err?.constructor?.name ?? '';
    const msg = String(err?.message ?? e);
    const code =
      GRPC_CODE_BY_NAME.find(([re]) => re.test(name))?.[1] ?? (typeof err?.code === 'number' ? err.code : undefined);
    const connectionLike =
      code === 14 ||
      code === 4 ||
      code === 1 ||
      code === 13 ||
      code === 2 ||
      /deadline|unavailable|no connection|connect|timeout|leader/i.test(msg);
    if (connectionLike && code !== 7 && code !== 16 && code !== 8 && !/too many requests/i.test(msg)) {
      // Find out why: probe each endpoint with the same TLS material (bounded by a short timeout).
      const probes = await Promise.all(
        this.endpoints.map((ep) =>
          probeEndpoint(ep, this.tls, Math.min(2000, Math.max(250, timeoutMs / 2))).catch(() => undefined),
        ),
      );
      const first = probes.find((p) => p !== undefined);
      if (first) return new DatastoreError(first.kind, `${what}: ${first.message}`, { cause: e });
      if (/deadline/i.test(name + msg)) {
        return new DatastoreError(
          'Unavailable',
          `${what}: etcd at ${this.endpoints.join(',')} did not answer within ${timeoutMs} ms (it accepts ` +
            `connections, so it may be overloaded or without quorum)`,
          { cause: e },
        );
      }
    }
    return classifyServerError(this.endpoints, what, code, msg, e);
  }

  async range(req: kv.RangeRequest, ctx: kv.CallContext): Promise<kv.RangeResponse> {
    const r = await this.run(ctx, (c, deadline) =>
      c.kv.range(
        {
          key: req.key,
          ...(req.rangeEnd ? { range_end: req.rangeEnd } : {}),
          ...(req.revision !== undefined ? { revision: req.revision } : {}),
          ...(req.keysOnly ? { keys_only: true } : {}),
          ...(req.limit !== undefined ? { limit: req.limit } : {}),
        },
        { deadline },
      ),
    );
    return { revision: String(r.header.revision), kvs: r.kvs.map(toKV) };
  }

  async txn(req: kv.TxnRequest, ctx: kv.CallContext): Promise<kv.TxnResponse> {
    const r = await this.run(ctx, (c, deadline) =>
      c.kv.txn(
        {
          compare: req.compare.map((cmp) => ({
            key: cmp.key,
            target: cmp.target,
            result: cmp.result,
            ...(cmp.target === 'Create' ? { create_revision: cmp.revision } : { mod_revision: cmp.revision }),
          })),
          success: req.success.map(toOp),
          failure: req.failure.map(toOp),
        },
        { deadline },
      ),
    );
    return {
      succeeded: r.succeeded,
      revision: String(r.header.revision),
      responses: r.responses.map((x) => (x.response_range ? { kvs: x.response_range.kvs.map(toKV) } : {})),
    };
  }

  watch(req: kv.WatchRequest, cb: kv.WatchCallbacks): { cancel(): void } {
    let cancelled = false;
    let watcher: import('etcd3').Watcher | undefined;
    void this.getClient()
      .then((c) => {
        if (cancelled) return;
        let b = c.watch().inRange({ start: req.key, end: req.rangeEnd }).withPreviousKV();
        if (req.startRevision !== undefined) b = b.startRevision(req.startRevision);
        watcher = b.watcher();
        watcher.on('data', (res) => {
          if (cancelled) return;
          cb.onEvents(
            res.events.map(
              (ev): kv.KVEvent => ({
                type: ev.type === 'Put' ? 'Put' : 'Delete',
                kv: toKV(ev.kv),
                ...(ev.prev_kv ? { prevKv: toKV(ev.prev_kv) } : {}),
              }),
            ),
          );
        });
        watcher.on('error', async (err: Error) => {
          // etcd 3.4 cancels a watch on a compacted revision without a reason
          // text: ask for that revision directly to find out.
          let compacted = /compacted/i.test(err.message);
          if (!compacted && req.startRevision !== undefined) {
            compacted = await c.kv
              .range(
                { key: req.key, revision: req.startRevision, keys_only: true, limit: 1 },
                { deadline: new Date(Date.now() + this.timeoutMs) },
              )
              .then(
                () => false,
                (e: Error) => /compacted/i.test(e.message),
              );
          }
          if (!cancelled) cb.onEnd({ compacted, error: err });
        });
      })
      .catch((e: Error) => {
        if (!cancelled) cb.onEnd({ compacted: false, error: e });
      });
    return {
      cancel: () => {
        cancelled = true;
        void watcher?.cancel().catch(() => undefined);
      },
    };
  }

  close(): void {
    this.client?.close();
    this.client = undefined;
  }
}
