// The collector protocol between node agents and the aggregator.
//
// One HTTP/2 connection over TLS with client certificates (mTLS), one
// long-lived request per agent: `POST /v1/flows`, content type
// application/x-ndjson. Both directions are newline-delimited JSON:
//
//   agent -> aggregator, one line per batch:
//     {"node":"node-1","stream":"<id of this agent process>","seq":7,"records":[FlowRecord, ...]}
//   aggregator -> agent, one line per batch received:
//     {"stream":"<id>","ack":7,"accepted":120,"rejected":0}
//     (+ "errors": ["record 3: source.type: ..."] for the first rejected records)
//   aggregator -> agent, before it ends the request on a protocol error:
//     {"error":"line 1: ..."}
//
// `seq` counts batches from 1 within a stream (an agent process: a restarted
// agent starts a new stream). An ack for N acknowledges every batch of the stream
// up to N: the agent drops them from its buffer and re-sends the rest, in order,
// on its next connection. The aggregator remembers the last sequence it took per
// (node, stream) and acknowledges a repeated batch without adding it again, so a
// batch whose ack was lost is counted once.
import { parseFlowRecord, FlowRecordError, type FlowRecord } from './record.js';

export const COLLECTOR_PATH = '/v1/flows';
export const NDJSON = 'application/x-ndjson';
/** A batch line longer than this ends the request (an agent splits larger batches). */
export const MAX_LINE_BYTES = 8 << 20;
/** At most this many records per batch. */
export const MAX_BATCH_RECORDS = 5000;
/** At most this many rejected records are named in an ack. */
const MAX_ERRORS = 5;

export interface Batch {
  node: string;
  stream: string;
  seq: number;
  records: unknown[];
}

export interface Ack {
  stream: string;
  ack: number;
  accepted: number;
  rejected: number;
  errors?: string[];
}

export class ProtocolError extends Error {
  override name = 'ProtocolError';
}

const ID_RE = /^[A-Za-z0-9][A-Za-z0-9._:-]{0,252}$/;

/** Parses one batch line; the records are checked one by one (parseRecords). */
export function parseBatch(line: string): Batch {
  let v: unknown;
  try {
    v = JSON.parse(line);
  } catch (e) {
    throw new ProtocolError(`not JSON: ${(e as Error).message}`);
  }
  const o = (v ?? {}) as Record<string, unknown>;
  if (typeof o.node !== 'string' || !ID_RE.test(o.node)) throw new ProtocolError(`node: expected a node name, got ${JSON.stringify(o.node)}`);
  if (typeof o.stream !== 'string' || !ID_RE.test(o.stream)) throw new ProtocolError(`stream: expected an id of letters, digits and ._:-, got ${JSON.stringify(o.stream)}`);
  if (typeof o.seq !== 'number' || !Number.isSafeInteger(o.seq) || o.seq < 1) throw new ProtocolError(`seq: expected an integer >= 1, got ${JSON.stringify(o.seq)}`);
  if (!Array.isArray(o.records) || o.records.length > MAX_BATCH_RECORDS) throw new ProtocolError(`records: expected a list of at most ${MAX_BATCH_RECORDS} records`);
  return { node: o.node, stream: o.stream, seq: o.seq, records: o.records };
}

/** The valid records of a batch, and what was wrong with the others (a bad record never spoils its batch). */
export function parseRecords(raw: unknown[]): { records: FlowRecord[]; rejected: number; errors: string[] } {
  const records: FlowRecord[] = [];
  const errors: string[] = [];
  let rejected = 0;
  raw.forEach((r, i) => {
    try {
      records.push(parseFlowRecord(r, `records[${i}]`));
    } catch (e) {
      if (!(e instanceof FlowRecordError)) throw e;
      rejected++;
      if (errors.length < MAX_ERRORS) errors.push(e.message);
    }
  });
  return { records, rejected, errors };
}

/** Splits a byte stream into lines; a line over MAX_LINE_BYTES is an error. */
export class LineReader {
  private parts: Buffer[] = [];
  private size = 0;
  constructor(private readonly max = MAX_LINE_BYTES) {}

  push(chunk: Buffer, onLine: (line: string) => void): void {
    let from = 0;
    for (;;) {
      const nl = chunk.indexOf(10, from);
      if (nl < 0) break;
      const piece = chunk.subarray(from, nl);
      if (this.size + piece.length > this.max) throw new ProtocolError(`a line longer than ${this.max} bytes`);
      const line = this.parts.length ? Buffer.concat([...this.parts, piece]).toString('utf8') : piece.toString('utf8');
      this.parts = [];
      this.size = 0;
      from = nl + 1;
      if (line.trim()) onLine(line);
    }
    if (from < chunk.length) {
      const rest = chunk.subarray(from);
      this.size += rest.length;
      if (this.size > this.max) throw new ProtocolError(`a line longer than ${this.max} bytes`);
      this.parts.push(Buffer.from(rest));
    }
  }
}
