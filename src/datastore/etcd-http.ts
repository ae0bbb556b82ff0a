// The KV seam over etcd's JSON gateway (grpc-gateway, served on the client port
// next to gRPC since etcd 3.3, at /v3/ since 3.4): POST /v3/kv/range, /v3/kv/txn
// and a streamed /v3/watch, with bytes as base64 and int64 as decimal strings.
// node:http(s) with a keep-alive agent loads in a few ms, where etcd3's
// grpc-js + protobufjs costs ~180 ms before the first call: this is the
// per-exec plugin's transport.
//
// Semantics kept from the grpc transport: fail over to the next endpoint when
// one cannot be reached (never after a request may have been applied), one
// deadline per call, and the same classified messages (etcd-kv.ts).
import type { Agent, ClientRequest, IncomingMessage, RequestOptions } from 'node:http';
import { DatastoreError } from '../errors.js';
import { classifyServerError, classifySocketError, gatewayUnusable, isTlsRejection } from './etcd-kv.js';
import type * as kv from './etcd-kv.js';

type RequestFn = (url: URL, opts: RequestOptions, cb: (res: IncomingMessage) => void) => ClientRequest;

/** Sockets whose TCP (and TLS) handshake completed: a request handed one of them is past connecting. */
const upSockets = new WeakSet<object>();

/**
 * Concurrent calls per endpoint. HTTP/1.1 has no multiplexing, so a burst
 * (the agent serves up to 64 CNI requests at once) would otherwise open a
 * connection per call; beyond this they queue for a kept-alive one.
 */
const MAX_SOCKETS = 32;

/** How long a watch stream may be silent before we check its endpoint still answers. */
const WATCH_IDLE_CHECK_MS = 20_000;
const WATCH_BACKOFF_MIN_MS = 100;
const WATCH_BACKOFF_MAX_MS = 1000;

/** A failed attempt on one endpoint, and how far it got (decides whether failing over is safe). */
class AttemptError extends Error {
  constructor(
    /** connect: no request reached etcd; sent: it may have been applied. */
    readonly phase: 'connect' | 'sent',
    readonly err: NodeJS.ErrnoException,
    readonly reusedSocket: boolean,
    /** Set for our own deadline, with the budget that ran out. */
    readonly timedOutMs?: number,
  ) {
    super(err.message);
  }
}

interface RawKV {
  key?: string;
  value?: string;
  create_revision?: string;
  mod_revision?: string;
}

const b64 = (b: Buffer) => b.toString('base64');

// proto3 JSON omits fields at their default value: an absent value is empty,
// an absent revision 0, an absent event type PUT, an absent `succeeded` false.
function decodeKV(o: RawKV): kv.KeyValue {
  return {
    key: Buffer.from(o.key ?? '', 'base64'),
    value: Buffer.from(o.value ?? '', 'base64'),
    createRevision: o.create_revision ?? '0',
    modRevision: o.mod_revision ?? '0',
  };
}

function encodeOp(op: kv.TxnOp): Record<string, unknown> {
  if ('put' in op) return { request_put: { key: b64(op.put.key), value: b64(op.put.value) } };
  if ('deleteRange' in op) return { request_delete_range: { key: b64(op.deleteRange.key) } };
  return { request_range: { key: b64(op.range.key), keys_only: !!op.range.keysOnly } };
}

export class HttpKV implements kv.KV {
  readonly transport = 'http' as const;
  private readonly endpoints: string[];
  private readonly tls: kv.TlsMaterial;
  private readonly secure: boolean;
  /** `agent` for calls (kept alive, capped); `watchAgent` for watch streams, which hold their socket. */
  private lib: Promise<{ request: RequestFn; agent: Agent; watchAgent: Agent }> | undefined;
  /** The endpoint that answered last: tried first. */
  private preferred = 0;
  private closed = false;
  private readonly watches = new Set<() => void>();

  constructor(o: kv.KVOptions) {
    this.endpoints = o.endpoints;
    this.tls = o.tls;
    this.secure = o.endpoints[0]!.startsWith('https:');
  }

  private load(): Promise<{ request: RequestFn; agent: Agent; watchAgent: Agent }> {
    // node:https pulls in node:tls; only TLS endpoints pay for it.
    return (this.lib ??= (async () => {
      if (this.secure) {
        const https = await import('node:https');
        const tls = { ca: this.tls.ca, cert: this.tls.cert, key: this.tls.key };
        return {
          request: https.request as RequestFn,
          agent: new https.Agent({ keepAlive: true, maxSockets: MAX_SOCKETS, ...tls }),
          watchAgent: new https.Agent(tls),
        };
      }
      const http = await import('node:http');
      return {
        request: http.request as RequestFn,
        agent: new http.Agent({ keepAlive: true, maxSockets: MAX_SOCKETS }),
        watchAgent: new http.Agent(),
      };
    })());
  }

  /** One POST to one endpoint; resolves with whatever HTTP answer came back. */
  private async attempt(
    endpoint: string,
    path: string,
    body: string,
    timeoutMs: number,
    connectMs: number,
  ): Promise<{ status: number; text: string }> {
    const { request, agent } = await this.load();
    return new Promise((resolve, reject) => {
      let connected = false;
      let settled = false;
      const fail = (phase: 'connect' | 'sent', err: NodeJS.ErrnoException, timedOutMs?: number) => {
        if (settled) return;
        settled = true;
        clearTimeout(deadline);
        clearTimeout(connectDeadline);
        req.destroy();
        reject(new AttemptError(phase, err, req.reusedSocket, timedOutMs));
      };
      const deadline = setTimeout(
        () =>
          fail(
            connected ? 'sent' : 'connect',
            Object.assign(new Error('deadline exceeded'), { code: 'ETIMEDOUT' }),
            timeoutMs,
          ),
        timeoutMs,
      );
      const connectDeadline = setTimeout(
        () => {
          if (!connected)
            fail('connect', Object.assign(new Error('connect timeout'), { code: 'ETIMEDOUT' }), connectMs);
        },
        Math.min(connectMs, timeoutMs),
      );
      const req = request(
        new URL(path, endpoint),
        {
          method: 'POST',
          agent,
          headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) },
        },
        (res) => {
          const chunks: Buffer[] = [];
          res.on('data', (c: Buffer) => chunks.push(c));
          res.on('error', (e: NodeJS.ErrnoException) => fail('sent', e));
          res.on('aborted', () => fail('sent', Object.assign(new Error('response aborted'), { code: 'ECONNRESET' })));
          res.on('end', () => {
            if (settled) return;
            settled = true;
            clearTimeout(deadline);
            clearTimeout(connectDeadline);
            resolve({ status: res.statusCode ?? 0, text: Buffer.concat(chunks).toString('utf8') });
          });
        },
      );
      req.on('socket', (s) => {
        const up = () => {
          connected = true;
          clearTimeout(connectDeadline);
        };
        // The agent hands out a kept-alive socket, one that just finished
        // another request (queued behind maxSockets), or one it began to dial.
        if (req.reusedSocket || upSockets.has(s)) return up();
        const ev = this.secure ? 'secureConnect' : 'connect';
        s.once(ev, () => {
          upSockets.add(s);
          up();
        });
      });
      req.on('error', (e: NodeJS.ErrnoException) => fail(connected && !isTlsRejection(e) ? 'sent' : 'connect', e));
      req.end(body);
    });
  }

  private describeAttempt(endpoint: string, e: AttemptError): DatastoreError {
    if (e.timedOutMs !== undefined) {
      return e.phase === 'connect'
        ? new DatastoreError(
            'Unavailable',
            `etcd at ${endpoint} is unreachable: no answer within ${e.timedOutMs} ms; check etcd_endpoints and the ` +
              `network path`,
            { cause: e.err },
          )
        : new DatastoreError(
            'Unavailable',
            `etcd at ${endpoint} did not answer within ${e.timedOutMs} ms (it accepts connections, so it may be ` +
              `overloaded or without quorum)`,
            { cause: e.err },
          );
    }
    return classifySocketError(endpoint, e.err, this.tls);
  }

  /** A non-200 answer, or a 200 that is not etcd's JSON. */
  private describeAnswer(endpoint: string, path: string, what: string, status: number, text: string): DatastoreError {
    let o: { error?: unknown; message?: unknown; code?: unknown } | undefined;
    try {
      o = JSON.parse(text) as typeof o;
    } catch {
      // not JSON: a proxy, a non-etcd server, or an etcd without the gateway
    }
    if (o && typeof o === 'object' && (typeof o.message === 'string' || typeof o.error === 'string')) {
      const code = typeof o.code === 'number' ? o.code : undefined;
      const msg = String(o.message ?? o.error);
      return (
        gatewayUnusable(endpoint, what, code, msg) ?? classifyServerError([endpoint], what, code, msg, new Error(text))
      );
    }
    if (/HTTP request to an HTTPS server/i.test(text)) {
      return new DatastoreError(
        'Unavailable',
        `${what}: etcd at ${endpoint} speaks TLS; use https:// in etcd_endpoints (and etcd_ca_cert_file, ` +
          `etcd_cert_file, etcd_key_file as the server requires)`,
      );
    }
    if (status === 404) {
      return new DatastoreError(
        'Unavailable',
        `${what}: etcd at ${endpoint} has no v3 JSON gateway at ${path} (HTTP 404); netplugin needs etcd 3.4 or ` +
          `newer at etcd_endpoints`,
      );
    }
    return new DatastoreError(
      'Unavailable',
      `${what}: etcd at ${endpoint} failed: HTTP ${status}: ${text.slice(0, 200).trim()}`,
    );
  }

  /**
   * POSTs to the preferred endpoint and, while no request can have reached
   * etcd (refused, unresolvable, TLS refused, connect timeout), to the next.
   * A reset on a reused keep-alive socket (etcd closed it as we sent) is retried
   * once when the call is a read.
   */
  private async call<T>(path: string, payload: unknown, ctx: kv.CallContext, idempotent: boolean): Promise<T> {
    if (this.closed) throw new DatastoreError('Unavailable', 'the etcd datastore is closed');
    const body = JSON.stringify(payload);
    const end = Date.now() + ctx.timeoutMs;
    const n = this.endpoints.length;
    const failures: DatastoreError[] = [];
    for (let i = 0; i < n; i++) {
      const idx = (this.preferred + i) % n;
      const ep = this.endpoints[idx]!;
      let retried = false;
      for (;;) {
        const left = end - Date.now();
        if (left <= 0) break;
        // A black-holed endpoint must not eat the whole deadline when others remain.
        const connectMs = Math.max(Math.floor(left / (n - i)), Math.min(left, 1000));
        let answer: { status: number; text: string };
        try {
          answer = await this.attempt(ep, path, body, left, connectMs);
        } catch (e) {
          if (!(e instanceof AttemptError)) throw e;
          if (e.phase === 'sent' && e.reusedSocket && idempotent && !retried && e.timedOutMs === undefined) {
            retried = true;
            continue;
          }
          const d = this.describeAttempt(ep, e);
          if (e.phase === 'sent') throw new DatastoreError(d.kind, `${ctx.what}: ${d.message}`, { cause: e.err });
          failures.push(d);
          break;
        }
        this.preferred = idx;
        if (answer.status !== 200) throw this.describeAnswer(ep, path, ctx.what, answer.status, answer.text);
        try {
          return JSON.parse(answer.text) as T;
        } catch {
          throw this.describeAnswer(ep, path, ctx.what, answer.status, answer.text);
        }
      }
      if (Date.now() >= end) break;
    }
    const [first, ...rest] = failures;
    if (!first) {
      throw new DatastoreError(
        'Unavailable',
        `${ctx.what}: etcd at ${this.endpoints.join(',')} did not answer within ${ctx.timeoutMs} ms`,
      );
    }
    const also = rest.length ? `; also failed: ${rest.map((r) => r.message).join('; ')}` : '';
    throw new DatastoreError(first.kind, `${ctx.what}: ${first.message}${also}`, { cause: first.cause });
  }

  async range(req: kv.RangeRequest, ctx: kv.CallContext): Promise<kv.RangeResponse> {
    const r = await this.call<{ header?: { revision?: string }; kvs?: RawKV[] }>(
      '/v3/kv/range',
      {
        key: b64(req.key),
        ...(req.rangeEnd ? { range_end: b64(req.rangeEnd) } : {}),
        ...(req.revision !== undefined ? { revision: req.revision } : {}),
        ...(req.keysOnly ? { keys_only: true } : {}),
        ...(req.limit !== undefined ? { limit: String(req.limit) } : {}),
      },
      ctx,
      true,
    );
    return { revision: r.header?.revision ?? '0', kvs: (r.kvs ?? []).map(decodeKV) };
  }

  async txn(req: kv.TxnRequest, ctx: kv.CallContext): Promise<kv.TxnResponse> {
    const r = await this.call<{
      header?: { revision?: string };
      succeeded?: boolean;
      responses?: Array<{ response_range?: { kvs?: RawKV[] } }>;
    }>(
      '/v3/kv/txn',
      {
        compare: req.compare.map((c) => ({
          key: b64(c.key),
          target: c.target === 'Create' ? 'CREATE' : 'MOD',
          result: c.result === 'Equal' ? 'EQUAL' : 'GREATER',
          [c.target === 'Create' ? 'create_revision' : 'mod_revision']: c.revision,
        })),
        success: req.success.map(encodeOp),
        failure: req.failure.map(encodeOp),
      },
      ctx,
      false,
    );
    return {
      succeeded: r.succeeded === true,
      revision: r.header?.revision ?? '0',
      responses: (r.responses ?? []).map((x) =>
        x.response_range ? { kvs: (x.response_range.kvs ?? []).map(decodeKV) } : {},
      ),
    };
  }

  /**
   * A streamed POST /v3/watch (newline-separated {"result": WatchResponse}).
   * HTTP/1.1 to etcd is half-duplex, so there is no in-band keepalive as on
   * gRPC: after a silent stretch we check that the stream's endpoint still
   * answers a read, and re-open the stream when it does not. Any disconnection
   * resumes after the last delivered revision, on the next endpoint.
   */
  watch(req: kv.WatchRequest, cb: kv.WatchCallbacks): { cancel(): void } {
    let stopped = false;
    let lastRev: bigint | undefined = req.startRevision !== undefined ? BigInt(req.startRevision) - 1n : undefined;
    let backoff = WATCH_BACKOFF_MIN_MS;
    let epIdx = this.preferred;
    let current: ClientRequest | undefined;
    let retryTimer: NodeJS.Timeout | undefined;
    let idleTimer: NodeJS.Timeout | undefined;
    let generation = 0;

    const teardown = () => {
      clearTimeout(idleTimer);
      current?.destroy();
      current = undefined;
    };
    const stop = () => {
      stopped = true;
      clearTimeout(retryTimer);
      teardown();
      this.watches.delete(stop);
    };
    const end = (reason: { compacted: boolean; error: Error }) => {
      if (stopped) return;
      stop();
      cb.onEnd(reason);
    };
    const reconnect = (gen: number) => {
      if (stopped || gen !== generation) return;
      generation++;
      teardown();
      epIdx = (epIdx + 1) % this.endpoints.length;
      retryTimer = setTimeout(() => void open(), backoff);
      backoff = Math.min(backoff * 2, WATCH_BACKOFF_MAX_MS);
    };
    const armIdleCheck = (gen: number, ep: string) => {
      clearTimeout(idleTimer);
      idleTimer = setTimeout(() => {
        const probe = JSON.stringify({ key: b64(req.key), keys_only: true, limit: '1' });
        this.attempt(ep, '/v3/kv/range', probe, 5000, 5000).then(
          (a) => (a.status === 200 ? armIdleCheck(gen, ep) : reconnect(gen)),
          () => reconnect(gen),
        );
      }, WATCH_IDLE_CHECK_MS);
      idleTimer.unref();
    };
    const onResult = (
      gen: number,
      res: {
        header?: { revision?: string };
        created?: boolean;
        canceled?: boolean;
        compact_revision?: string;
        cancel_reason?: string;
        events?: Array<{ type?: string; kv?: RawKV; prev_kv?: RawKV }>;
      },
    ) => {
      if (res.created && lastRev === undefined && res.header?.revision) lastRev = BigInt(res.header.revision);
      if (res.canceled) {
        const compacted = !!res.compact_revision && res.compact_revision !== '0';
        const why =
          res.cancel_reason ||
          (compacted
            ? `etcdserver: mvcc: required revision has been compacted (compacted up to ${res.compact_revision})`
            : 'the server cancelled the watch');
        end({ compacted, error: new Error(why) });
        return;
      }
      if (res.events?.length) {
        const evs = res.events.map(
          (e): kv.KVEvent => ({
            type: e.type === 'DELETE' ? 'Delete' : 'Put',
            kv: decodeKV(e.kv ?? {}),
            ...(e.prev_kv ? { prevKv: decodeKV(e.prev_kv) } : {}),
          }),
        );
        lastRev = BigInt(evs[evs.length - 1]!.kv.modRevision);
        backoff = WATCH_BACKOFF_MIN_MS;
        if (gen === generation && !stopped) cb.onEvents(evs);
      }
    };
    const open = async () => {
      if (stopped) return;
      const gen = generation;
      const ep = this.endpoints[epIdx]!;
      let request: RequestFn;
      let agent: Agent;
      try {
        ({ request, watchAgent: agent } = await this.load());
      } catch (e) {
        return end({ compacted: false, error: e as Error });
      }
      if (stopped || gen !== generation) return;
      const create = {
        key: b64(req.key),
        range_end: b64(req.rangeEnd),
        prev_kv: true,
        ...(lastRev !== undefined ? { start_revision: String(lastRev + 1n) } : {}),
      };
      const body = JSON.stringify({ create_request: create });
      const r = request(
        new URL('/v3/watch', ep),
        {
          method: 'POST',
          agent,
          headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) },
        },
        (res) => {
          if (res.statusCode !== 200) {
            let text = '';
            res.setEncoding('utf8');
            res.on('data', (c: string) => (text += c));
            res.on('end', () => {
              if (gen !== generation) return;
              // A gateway that is missing, refuses us or cannot reach gRPC will not get better by retrying.
              const d = this.describeAnswer(ep, '/v3/watch', 'open the watch stream', res.statusCode ?? 0, text);
              if (
                res.statusCode === 404 ||
                res.statusCode === 401 ||
                res.statusCode === 403 ||
                d.name === 'GatewayUnusableError' ||
                d.kind === 'Unauthorized'
              ) {
                end({ compacted: false, error: d });
              } else reconnect(gen);
            });
            return;
          }
          armIdleCheck(gen, ep);
          res.setEncoding('utf8');
          let buf = '';
          res.on('data', (chunk: string) => {
            if (gen !== generation) return;
            armIdleCheck(gen, ep);
            buf += chunk;
            for (let nl = buf.indexOf('\n'); nl >= 0; nl = buf.indexOf('\n')) {
              const line = buf.slice(0, nl).trim();
              buf = buf.slice(nl + 1);
              if (!line) continue;
              let msg: { result?: Parameters<typeof onResult>[1]; error?: { message?: string; grpc_code?: number } };
              try {
                msg = JSON.parse(line) as typeof msg;
              } catch {
                reconnect(gen);
                return;
              }
              if (msg.result) onResult(gen, msg.result);
              // grpc-gateway reports a failed stream in-band; compaction is final, the rest (no leader, ...) is
              // retried.
              else if (msg.error) {
                if (/compacted/i.test(msg.error.message ?? ''))
                  end({ compacted: true, error: new Error(msg.error.message) });
                else reconnect(gen);
              }
              if (stopped || gen !== generation) return;
            }
          });
          res.on('end', () => reconnect(gen));
          res.on('error', () => reconnect(gen));
          res.on('aborted', () => reconnect(gen));
        },
      );
      r.on('socket', (s) => s.setKeepAlive(true, 15_000));
      r.on('error', (e: NodeJS.ErrnoException) => {
        // The server refused our TLS material: retrying would only repeat it.
        const d = classifySocketError(ep, e, this.tls);
        if (d.kind === 'Unauthorized' || d.kind === 'Invalid') end({ compacted: false, error: d });
        else reconnect(gen);
      });
      current = r;
      r.end(body);
    };
    this.watches.add(stop);
    void open();
    return { cancel: stop };
  }

  close(): void {
    this.closed = true;
    for (const stop of [...this.watches]) stop();
    void this.lib?.then(({ agent, watchAgent }) => {
      agent.destroy();
      watchAgent.destroy();
    });
  }
}
