// The agent's side of the collector protocol (src/flows/protocol.ts): a client
// that keeps one HTTP/2 + mTLS request open to the aggregator, sends batches of
// flow records and drops them from its buffer only when acknowledged. While the
// aggregator is away the buffer holds up to a bound (oldest batches dropped and
// counted beyond it) and is re-sent, in order, after the reconnect; the
// aggregator's per-stream sequence makes a re-sent batch count once.
//
// push() never blocks and never throws for the network: pod setup and policy
// programming must not wait for flow logs.
import { connect, constants, type ClientHttp2Session, type ClientHttp2Stream } from 'node:http2';
import { randomUUID } from 'node:crypto';
import type { FlowRecord } from './record.js';
import {
  COLLECTOR_PATH,
  encodeRecords,
  LineReader,
  MAX_BATCH_RECORDS,
  MAX_LINE_BYTES,
  NDJSON,
  type Ack,
} from './protocol.js';

export interface FlowClientOptions {
  /** The aggregator's collector: https://HOST:PORT. */
  url: string;
  /** This node's name, sent with every batch. */
  node: string;
  /** PEM: the agent's certificate and key, and the CA that signed the aggregator's certificate. */
  cert: string | Buffer;
  key: string | Buffer;
  ca: string | Buffer;
  /** The name the aggregator's certificate must carry, when not the URL's host. */
  servername?: string;
  /** Records kept (sent or not) until acknowledged; beyond it the oldest batches are dropped. Default 100,000. */
  maxBufferedRecords?: number;
  /** Records per batch (default 1000). */
  batchRecords?: number;
  /** Reconnect delay: doubles from min to max after each failed attempt (defaults 250 ms, 10 s). */
  reconnectMinMs?: number;
  reconnectMaxMs?: number;
  /** The stream id (default: random per client); a new agent process is a new stream. */
  stream?: string;
  log?: (level: 'info' | 'warn', msg: string, fields?: Record<string, unknown>) => void;
}

interface FlowClientStats {
  /** Records held: not yet acknowledged. */
  buffered: number;
  /** Records dropped because the buffer was full. */
  dropped: number;
  /** Records the aggregator acknowledged. */
  acked: number;
  /** Records the aggregator acknowledged but rejected as invalid. */
  rejected: number;
  connected: boolean;
  /** Connections made (the first included). */
  connects: number;
}

interface PendingBatch {
  records: FlowRecord[];
  /** Assigned when first sent, with the line. */
  seq: number;
  line?: string;
}

export class FlowClient {
  readonly stream: string;
  private readonly o: FlowClientOptions;
  private readonly max: number;
  private readonly batchSize: number;
  private batches: PendingBatch[] = [];
  /** Batches of `batches` written on the current request. */
  private written = 0;
  private nextSeq = 1;
  private buffered = 0;
  private counts = { dropped: 0, acked: 0, rejected: 0, connects: 0 };
  private session: ClientHttp2Session | undefined;
  private req: ClientHttp2Stream | undefined;
  private ready = false;
  private waitingDrain = false;
  private closed = false;
  private retryMs: number;
  private timer: NodeJS.Timeout | undefined;
  private pumpQueued = false;
  private idleWaiters: Array<() => void> = [];

  constructor(o: FlowClientOptions) {
    const u = new URL(o.url);
    if (u.protocol !== 'https:')
      throw new Error(
        `flow aggregator ${JSON.stringify(o.url)}: expected https://HOST:PORT (the collector requires TLS with a ` +
          `client certificate)`,
      );
    this.o = o;
    this.stream = o.stream ?? randomUUID();
    this.max = o.maxBufferedRecords ?? 100_000;
    this.batchSize = Math.max(1, Math.min(o.batchRecords ?? 1000, MAX_BATCH_RECORDS));
    this.retryMs = o.reconnectMinMs ?? 250;
    this.connect();
  }

  /** Queues records for the aggregator and returns at once. */
  push(records: readonly FlowRecord[]): void {
    if (this.closed || !records.length) return;
    for (let i = 0; i < records.length; i += this.batchSize) {
      const part = records.slice(i, i + this.batchSize);
      this.batches.push({ records: part, seq: 0 });
      this.buffered += part.length;
    }
    while (this.buffered > this.max && this.batches.length) {
      const old = this.batches.shift()!;
      this.buffered -= old.records.length;
      this.counts.dropped += old.records.length;
      if (this.written > 0) this.written--;
    }
    this.schedulePump();
  }

  stats(): FlowClientStats {
    return { buffered: this.buffered, ...this.counts, connected: this.ready };
  }

  /** Resolves when every record pushed so far was acknowledged (or dropped), or after timeoutMs with false. */
  drained(timeoutMs = 30_000): Promise<boolean> {
    if (!this.batches.length) return Promise.resolve(true);
    return new Promise((resolve) => {
      const t = setTimeout(() => {
        this.idleWaiters = this.idleWaiters.filter((w) => w !== done);
        resolve(false);
      }, timeoutMs);
      const done = () => (clearTimeout(t), resolve(true));
      this.idleWaiters.push(done);
    });
  }

  /** Stops: the connection is closed and what is not acknowledged is dropped. */
  async close(): Promise<void> {
    this.closed = true;
    if (this.timer) clearTimeout(this.timer);
    const s = this.session;
    this.disconnect();
    if (s && !s.destroyed) await new Promise<void>((r) => s.close(() => r()));
  }

  private log(level: 'info' | 'warn', msg: string, fields?: Record<string, unknown>): void {
    this.o.log?.(level, msg, fields);
  }

  private connect(): void {
    if (this.closed) return;
    this.timer = undefined;
    const session = connect(this.o.url, {
      cert: this.o.cert,
      key: this.o.key,
      ca: this.o.ca,
      ...(this.o.servername ? { servername: this.o.servername } : {}),
      minVersion: 'TLSv1.2',
    });
    this.session = session;
    session.on('error', (e) => this.lost(session, e.message));
    session.on('close', () => this.lost(session, 'connection closed'));
    session.on('goaway', () => this.lost(session, 'aggregator going away'));
    const req = session.request(
      { ':method': 'POST', ':path': COLLECTOR_PATH, 'content-type': NDJSON },
      { endStream: false },
    );
    this.req = req;
    req.on('error', (e) => this.lost(session, e.message));
    req.on('close', () => this.lost(session, 'request closed'));
    req.on('drain', () => {
      this.waitingDrain = false;
      this.schedulePump();
    });
    req.on('response', (h) => {
      if (session !== this.session) return;
      if (h[':status'] !== 200) return this.lost(session, `aggregator answered HTTP ${h[':status']}`);
      this.ready = true;
      this.counts.connects++;
      this.written = 0;
      this.log('info', 'flows: connected to the aggregator', { url: this.o.url, buffered: this.buffered });
      this.schedulePump();
    });
    const reader = new LineReader();
    req.on('data', (chunk: Buffer) => {
      try {
        reader.push(chunk, (line) => this.onLine(line));
      } catch (e) {
        this.lost(session, (e as Error).message);
      }
    });
  }

  private onLine(line: string): void {
    let m: Partial<Ack> & { error?: string };
    try {
      m = JSON.parse(line);
    } catch {
      return;
    }
    if (m.error) {
      this.log('warn', 'flows: the aggregator refused the stream', { error: m.error });
      return;
    }
    if (m.stream !== this.stream || typeof m.ack !== 'number') return;
    this.retryMs = this.o.reconnectMinMs ?? 250;
    if (m.rejected) {
      this.counts.rejected += m.rejected;
      this.log('warn', 'flows: the aggregator rejected records', { rejected: m.rejected, errors: m.errors });
    }
    let n = 0;
    while (n < this.batches.length && this.batches[n]!.seq !== 0 && this.batches[n]!.seq <= m.ack) n++;
    for (const b of this.batches.slice(0, n)) {
      this.buffered -= b.records.length;
      this.counts.acked += b.records.length;
    }
    this.batches = this.batches.slice(n);
    this.written = Math.max(0, this.written - n);
    if (!this.batches.length) for (const w of this.idleWaiters.splice(0)) w();
  }

  private schedulePump(): void {
    if (this.pumpQueued) return;
    this.pumpQueued = true;
    setImmediate(() => {
      this.pumpQueued = false;
      this.pump();
    });
  }

  private pump(): void {
    const req = this.req;
    if (!this.ready || !req || this.waitingDrain) return;
    while (this.written < this.batches.length) {
      const b = this.batches[this.written]!;
      if (!b.line) {
        let line = this.serialize(b);
        // A batch too long for the collector's line limit is halved before it gets its sequence.
        while (line.length > MAX_LINE_BYTES / 2 && b.records.length > 1) {
          const rest = b.records.splice(Math.ceil(b.records.length / 2));
          this.batches.splice(this.written + 1, 0, { records: rest, seq: 0 });
          line = this.serialize(b);
        }
        b.seq = this.nextSeq++;
        b.line = line.replace('"seq":0', `"seq":${b.seq}`);
      }
      this.written++;
      if (!req.write(b.line)) {
        this.waitingDrain = true;
        return;
      }
    }
  }

  private serialize(b: PendingBatch): string {
    return JSON.stringify({ node: this.o.node, stream: this.stream, seq: 0, ...encodeRecords(b.records) }) + '\n';
  }

  private disconnect(): void {
    this.ready = false;
    this.waitingDrain = false;
    this.written = 0;
    const req = this.req;
    const s = this.session;
    this.req = undefined;
    this.session = undefined;
    if (req && !req.destroyed) req.close(constants.NGHTTP2_CANCEL);
    if (s && !s.destroyed) s.destroy();
  }

  /** The connection failed or ended: everything unacknowledged is sent again on the next one. */
  private lost(session: ClientHttp2Session, why: string): void {
    if (session !== this.session) return;
    const was = this.ready;
    this.disconnect();
    if (this.closed) return;
    this.log(was ? 'warn' : 'info', 'flows: no connection to the aggregator; buffering', {
      url: this.o.url,
      error: why,
      buffered: this.buffered,
      retryMs: this.retryMs,
    });
    this.timer = setTimeout(() => this.connect(), this.retryMs);
    this.timer.unref();
    this.retryMs = Math.min(this.retryMs * 2, this.o.reconnectMaxMs ?? 10_000);
  }
}
