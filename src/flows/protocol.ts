// The collector protocol between node agents and the aggregator.
//
// One HTTP/2 connection over TLS with client certificates (mTLS), one
// long-lived request per agent: `POST /v1/flows`, content type
// application/x-ndjson. Both directions are newline-delimited JSON:
//
//   agent -> aggregator, one line per batch:
//     {"node":"node-1","stream":"<id of this agent process>","seq":7,
//      "endpoints":[FlowEndpoint, ...], "traces":[PolicyTrace, ...], "records":[WireRecord, ...]}
//   where each endpoint and policy trace of the batch is written once and a record is an array
//   (WIRE_FIELDS) naming them by index: JSON for 1000 records stays small and cheap to parse,
//   and the aggregator checks each endpoint and trace once per batch.
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
import {
  ACTIONS,
  checkChoice,
  checkCount,
  checkNumbers,
  COUNTERS,
  FlowRecordError,
  parseEndpoint,
  parsePolicyTrace,
  parseProtocol,
  REPORTERS,
  type FlowEndpoint,
  type FlowRecord,
  type PolicyTrace,
} from './record.js';

export const COLLECTOR_PATH = '/v1/flows';
export const NDJSON = 'application/x-ndjson';
/** A batch line longer than this ends the request (an agent splits larger batches). */
export const MAX_LINE_BYTES = 8 << 20;
/** At most this many records per batch. */
export const MAX_BATCH_RECORDS = 5000;
/** At most this many rejected records are named in an ack. */
const MAX_ERRORS = 5;

/** The fields of a WireRecord, in order. */
const WIRE_FIELDS = [
  'reporter',
  'action',
  'source', // index into endpoints
  'dest', // index into endpoints
  'destPort',
  'protocol',
  'policies', // index into traces
  'startTime',
  'endTime',
  ...COUNTERS,
] as const;

type WireRecord = [
  string,
  string,
  number,
  number,
  number,
  string,
  number,
  number,
  number,
  number,
  number,
  number,
  number,
  number,
  number,
  number,
];

/** A batch's records as sent: endpoints and traces once, records referring to them. */
interface WireRecords {
  endpoints: FlowEndpoint[];
  traces: PolicyTrace[];
  records: WireRecord[];
}

interface Batch {
  node: string;
  stream: string;
  seq: number;
  endpoints: unknown[];
  traces: unknown[];
  records: unknown[];
}

/** The agent's side: records -> their wire form (each distinct endpoint and trace once). */
export function encodeRecords(records: readonly FlowRecord[]): WireRecords {
  const out: WireRecords = { endpoints: [], traces: [], records: [] };
  const eps = new Map<unknown, number>();
  const trs = new Map<unknown, number>();
  const index = <T>(map: Map<unknown, number>, list: T[], v: T): number => {
    let i = map.get(v);
    if (i !== undefined) return i;
    const k = JSON.stringify(v);
    i = map.get(k);
    if (i === undefined) {
      i = list.push(v) - 1;
      map.set(k, i);
    }
    map.set(v, i);
    return i;
  };
  for (const r of records) {
    out.records.push([
      r.reporter,
      r.action,
      index(eps, out.endpoints, r.source),
      index(eps, out.endpoints, r.dest),
      r.destPort,
      r.protocol,
      index(trs, out.traces, r.policies),
      r.startTime,
      r.endTime,
      r.packetsIn,
      r.packetsOut,
      r.bytesIn,
      r.bytesOut,
      r.connectionsStarted,
      r.connectionsCompleted,
      r.connectionsLive,
    ]);
  }
  return out;
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
  if (typeof o.node !== 'string' || !ID_RE.test(o.node))
    throw new ProtocolError(`node: expected a node name, got ${JSON.stringify(o.node)}`);
  if (typeof o.stream !== 'string' || !ID_RE.test(o.stream))
    throw new ProtocolError(`stream: expected an id of letters, digits and ._:-, got ${JSON.stringify(o.stream)}`);
  if (typeof o.seq !== 'number' || !Number.isSafeInteger(o.seq) || o.seq < 1)
    throw new ProtocolError(`seq: expected an integer >= 1, got ${JSON.stringify(o.seq)}`);
  if (!Array.isArray(o.records) || o.records.length > MAX_BATCH_RECORDS)
    throw new ProtocolError(`records: expected a list of at most ${MAX_BATCH_RECORDS} records`);
  if (!Array.isArray(o.endpoints) || o.endpoints.length > 2 * MAX_BATCH_RECORDS)
    throw new ProtocolError(`endpoints: expected a list of at most ${2 * MAX_BATCH_RECORDS} endpoints`);
  if (!Array.isArray(o.traces) || o.traces.length > MAX_BATCH_RECORDS)
    throw new ProtocolError(`traces: expected a list of at most ${MAX_BATCH_RECORDS} policy traces`);
  return { node: o.node, stream: o.stream, seq: o.seq, endpoints: o.endpoints, traces: o.traces, records: o.records };
}

/**
 * The valid records of a batch, and what was wrong with the others: a bad record, or one naming a
 * bad endpoint or trace, is rejected alone; the rest of its batch is taken.
 */
export function parseRecords(b: Pick<Batch, 'endpoints' | 'traces' | 'records'>): {
  records: FlowRecord[];
  rejected: number;
  errors: string[];
} {
  const records: FlowRecord[] = [];
  const errors: string[] = [];
  let rejected = 0;
  const checked = <T>(list: unknown[], parse: (path: string, v: unknown) => T, what: string) =>
    list.map((v, i): T | FlowRecordError => {
      try {
        return parse(`${what}[${i}]`, v);
      } catch (e) {
        if (e instanceof FlowRecordError) return e;
        throw e;
      }
    });
  const endpoints = checked(b.endpoints, parseEndpoint, 'endpoints');
  const traces = checked(b.traces, parsePolicyTrace, 'traces');
  const ref = <T>(list: Array<T | FlowRecordError>, v: unknown, path: string, what: string): T => {
    const x = typeof v === 'number' ? list[v] : undefined;
    if (x === undefined)
      throw new FlowRecordError(
        `${path}: expected the index of one of the batch's ${list.length} ${what} (got ${JSON.stringify(v)})`,
      );
    if (x instanceof FlowRecordError) throw x;
    return x;
  };
  b.records.forEach((raw, i) => {
    const path = `records[${i}]`;
    try {
      if (!Array.isArray(raw) || raw.length !== WIRE_FIELDS.length)
        throw new FlowRecordError(
          `${path}: expected an array of ${WIRE_FIELDS.length} fields (${WIRE_FIELDS.join(', ')})`,
        );
      const r = raw as unknown[];
      checkNumbers(path, r[4], r[7], r[8]);
      const rec: FlowRecord = {
        reporter: checkChoice(`${path}.reporter`, r[0], REPORTERS),
        action: checkChoice(`${path}.action`, r[1], ACTIONS),
        source: ref(endpoints, r[2], `${path}.source`, 'endpoints'),
        dest: ref(endpoints, r[3], `${path}.dest`, 'endpoints'),
        destPort: r[4] as number,
        protocol: parseProtocol(`${path}.protocol`, r[5]),
        policies: ref(traces, r[6], `${path}.policies`, 'traces'),
        startTime: r[7] as number,
        endTime: r[8] as number,
        packetsIn: checkCount(`${path}.packetsIn`, r[9]),
        packetsOut: checkCount(`${path}.packetsOut`, r[10]),
        bytesIn: checkCount(`${path}.bytesIn`, r[11]),
        bytesOut: checkCount(`${path}.bytesOut`, r[12]),
        connectionsStarted: checkCount(`${path}.connectionsStarted`, r[13]),
        connectionsCompleted: checkCount(`${path}.connectionsCompleted`, r[14]),
        connectionsLive: checkCount(`${path}.connectionsLive`, r[15]),
      };
      records.push(rec);
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
