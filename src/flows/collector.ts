// The aggregator's collector: an HTTP/2 server over TLS that requires a client
// certificate signed by the configured CA (an agent without one fails the
// handshake), taking the batch stream of src/flows/protocol.ts into the store.
// An agent reports as the node its certificate names (its CN or a DNS name of
// its subjectAltName): a batch for another node ends the request, so that one
// node's key cannot write flows in another's name.
import {
  createSecureServer,
  constants,
  type Http2SecureServer,
  type ServerHttp2Session,
  type ServerHttp2Stream,
} from 'node:http2';
import type { PeerCertificate, TLSSocket } from 'node:tls';
import { parseListenAddr } from '../observe/health.js';
import type { FlowStore } from './store.js';
import { COLLECTOR_PATH, LineReader, NDJSON, parseBatch, parseRecords, ProtocolError, type Ack } from './protocol.js';
import { serve, type Listening } from './listen.js';

interface CollectorOptions {
  addr: string;
  /** PEM: the server certificate and key; the CA agents' certificates must be signed by. */
  cert: string | Buffer;
  key: string | Buffer;
  clientCa: string | Buffer;
  store: FlowStore;
  /**
   * How long a (node, stream) sequence is remembered after its last batch (default: the store's retention + 10 min).
   */
  streamMemoryMs?: number;
  now?: () => number;
  log?: (level: 'info' | 'warn', msg: string, fields?: Record<string, unknown>) => void;
  /** Called once per batch taken (not for a repeat): for metrics. */
  onBatch?: (b: { node: string; accepted: number; rejected: number; duplicate: boolean }) => void;
}

interface Collector extends Listening {
  /** Agent requests open now. */
  connections(): number;
}

/** The names a client certificate vouches for: its CN and its subjectAltName DNS names, lower case. */
function certNames(cert: PeerCertificate | undefined): Set<string> {
  const out = new Set<string>();
  const cn = cert?.subject?.CN;
  // A subject with several CNs comes as an array: each is one of its names.
  for (const n of Array.isArray(cn) ? cn : cn ? [cn] : []) out.add(String(n).toLowerCase());
  for (const part of cert?.subjectaltname?.split(', ') ?? []) {
    if (part.startsWith('DNS:')) out.add(part.slice(4).toLowerCase());
  }
  return out;
}

export async function startCollector(o: CollectorOptions): Promise<Collector> {
  const { host, port } = parseListenAddr(o.addr);
  const now = o.now ?? Date.now;
  const memoryMs = o.streamMemoryMs ?? o.store.retentionMs + 600_000;
  // (node, stream) -> the last sequence taken and when.
  const streams = new Map<string, { seq: number; at: number }>();
  const open = new Set<ServerHttp2Stream>();
  const log = o.log ?? (() => undefined);

  const server: Http2SecureServer = createSecureServer({
    cert: o.cert,
    key: o.key,
    ca: o.clientCa,
    requestCert: true,
    rejectUnauthorized: true,
    allowHTTP1: false,
    minVersion: 'TLSv1.2',
  });
  server.on('stream', (stream, headers) => {
    const cert = (stream.session?.socket as TLSSocket | undefined)?.getPeerCertificate?.();
    const peer = cert?.subject?.CN ?? '?';
    const names = certNames(cert);
    if (headers[':path'] !== COLLECTOR_PATH || headers[':method'] !== 'POST') {
      stream.respond({ ':status': 404, 'content-type': 'text/plain' });
      stream.end(`not found: agents POST ${COLLECTOR_PATH}\n`);
      return;
    }
    open.add(stream);
    stream.on('close', () => open.delete(stream));
    stream.on('error', () => undefined);
    stream.respond({ ':status': 200, 'content-type': NDJSON });
    const reader = new LineReader();
    let lineNo = 0;
    const reply = (v: Ack | { error: string }) => {
      if (!stream.destroyed && !stream.writableEnded) stream.write(JSON.stringify(v) + '\n');
    };
    stream.on('data', (chunk: Buffer) => {
      try {
        reader.push(chunk, (line) => {
          lineNo++;
          const batch = parseBatch(line);
          if (!names.has(batch.node.toLowerCase())) {
            throw new ProtocolError(
              `batch node ${JSON.stringify(batch.node)} is not a name of the client certificate ` +
                `(${[...names].join(', ') || 'none'}): an agent reports as the node its certificate names`,
            );
          }
          const id = `${batch.node}\u0000${batch.stream}`;
          const last = streams.get(id);
          if (last && batch.seq <= last.seq) {
            last.at = now();
            o.onBatch?.({ node: batch.node, accepted: 0, rejected: 0, duplicate: true });
            reply({ stream: batch.stream, ack: batch.seq, accepted: 0, rejected: 0 });
            return;
          }
          const r = parseRecords(batch);
          o.store.ingest(r.records);
          streams.set(id, { seq: batch.seq, at: now() });
          if (r.rejected)
            log('warn', 'flows: rejected records from an agent', {
              node: batch.node,
              peer,
              rejected: r.rejected,
              first: r.errors[0],
            });
          o.onBatch?.({ node: batch.node, accepted: r.records.length, rejected: r.rejected, duplicate: false });
          reply({
            stream: batch.stream,
            ack: batch.seq,
            accepted: r.records.length,
            rejected: r.rejected,
            ...(r.errors.length ? { errors: r.errors } : {}),
          });
        });
      } catch (e) {
        if (!(e instanceof ProtocolError)) throw e;
        log('warn', 'flows: protocol error from an agent; ending its request', {
          peer,
          line: lineNo,
          error: e.message,
        });
        reply({ error: `line ${lineNo}: ${e.message}` });
        stream.close(constants.NGHTTP2_PROTOCOL_ERROR);
      }
    });
    stream.on('end', () => {
      if (!stream.writableEnded) stream.end();
    });
  });
  server.on('tlsClientError', (e: Error, socket: TLSSocket) =>
    log('warn', 'flows: refused a collector connection', { remote: socket.remoteAddress, error: e.message }),
  );
  server.on('sessionError', () => undefined);
  const sessions = new Set<ServerHttp2Session>();
  server.on('session', (s) => {
    sessions.add(s);
    s.on('close', () => sessions.delete(s));
  });
  const sweep = setInterval(() => {
    const cut = now() - memoryMs;
    for (const [id, s] of streams) if (s.at < cut) streams.delete(id);
  }, 60_000);
  sweep.unref();
  const listening = await serve(server, host, port, o.addr, 'agents (--collector-addr)', () => {
    clearInterval(sweep);
    // The agents' connections stay open otherwise, and close() with them.
    for (const s of sessions) s.destroy();
  });
  return { ...listening, connections: () => open.size };
}
