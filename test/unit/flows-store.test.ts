import { describe, expect, it } from 'vitest';
import { FlowStore } from '../../src/flows/store.js';
import { parseFlowRecord, FlowRecordError } from '../../src/flows/record.js';
import { parseFlowQuery, ParamError } from '../../src/flows/api.js';
import { encodeRecords, LineReader, parseBatch, parseRecords, ProtocolError } from '../../src/flows/protocol.js';
import { deniedRecord, hit, record } from '../support/flows.js';

const T0 = 1_800_000_000; // a multiple of 15
function store(now: { t: number }, retention = 3_600_000) {
  return new FlowStore({ retentionMs: retention, now: () => now.t * 1000 });
}

describe('FlowStore', () => {
  it('aggregates records of one key within a bucket and keeps buckets apart', () => {
    const now = { t: T0 + 100 };
    const s = store(now);
    s.ingest([record(T0), record(T0 + 5, { endTime: T0 + 14, connectionsLive: 3 }), record(T0 + 15)]);
    const r = s.query({ sortBy: { field: 'startTime', desc: false } });
    expect(r.total).toBe(2);
    const [a, b] = r.items;
    expect(a).toMatchObject({
      startTime: '2027-01-15T08:00:00Z',
      endTime: '2027-01-15T08:00:14Z',
      packetsIn: 20,
      bytesOut: 1600,
      connectionsStarted: 4,
      connectionsLive: 3,
    });
    expect(a!.policies.enforced).toEqual([hit('allow-a')]);
    expect(b).toMatchObject({ startTime: '2027-01-15T08:00:15Z', packetsIn: 10, connectionsLive: 1 });
    expect(a).toMatchObject({
      sourceType: 'wep',
      sourceNamespace: 'ns-a',
      sourceName: 'pod-a',
      sourceLabels: { app: 'a' },
      destNamespace: 'ns-b',
      destPort: 80,
      reporter: 'Dst',
      action: 'Allow',
    });
  });

  it('keeps a different trace, reporter or labels as a different flow', () => {
    const now = { t: T0 + 10 };
    const s = store(now);
    s.ingest([
      record(T0),
      record(T0, { reporter: 'Src' }),
      record(T0, { policies: { enforced: [hit('other')], pending: [] } }),
      record(T0, { source: { type: 'wep', namespace: 'ns-a', name: 'pod-a', labels: { app: 'x' } } }),
    ]);
    expect(s.query({}).total).toBe(4);
  });

  it('filters, sorts and pages', () => {
    const now = { t: T0 + 200 };
    const s = store(now);
    for (let i = 0; i < 10; i++) s.ingest([record(T0 + 15 * i), deniedRecord(T0 + 15 * i + 1)]);
    expect(s.query({ action: 'Deny' }).total).toBe(10);
    expect(s.query({ sourceNamespace: 'ns-c', action: 'Allow' }).total).toBe(0);
    expect(s.query({ policy: 'staged-allow-c' }).total).toBe(10);
    expect(s.query({ policy: 'allow-a' }).total).toBe(10);
    expect(s.query({ namespace: 'ns-b' }).total).toBe(20);
    expect(s.query({ endpoint: 'ns-c/pod-c' }).total).toBe(10);
    expect(s.query({ endpoint: 'ns-a/pod-c' }).total).toBe(0);
    expect(s.query({ startTimeGte: T0 + 30, startTimeLt: T0 + 60 }).total).toBe(4);
    const p0 = s.query({ pageSize: 3, page: 0, sortBy: { field: 'startTime', desc: false } });
    const p1 = s.query({ pageSize: 3, page: 1, sortBy: { field: 'startTime', desc: false } });
    expect(p0.total).toBe(20);
    expect(p0.items.map((f) => f.startTime)).toEqual([
      '2027-01-15T08:00:00Z',
      '2027-01-15T08:00:01Z',
      '2027-01-15T08:00:15Z',
    ]);
    expect(p1.items[0]!.startTime).toBe('2027-01-15T08:00:16Z');
    // Default: newest first.
    expect(s.query({ pageSize: 1 }).items[0]!.startTime).toBe('2027-01-15T08:02:16Z');
    expect(s.query({ sortBy: { field: 'sourceName', desc: true }, pageSize: 1 }).items[0]!.sourceName).toBe('pod-c');
    expect(s.query({ sortBy: { field: 'action', desc: false }, pageSize: 1 }).items[0]!.action).toBe('Allow');
    expect(s.query({ page: 7, pageSize: 3 }).items).toEqual([]);
  });

  it('hints list the values present; statistics count per policy and rule over time', () => {
    const now = { t: T0 + 100 };
    const s = store(now);
    s.ingest([
      record(T0),
      record(T0 + 15),
      deniedRecord(T0),
      record(T0, { policies: { enforced: [hit('allow-a', { ruleIndex: 1 })], pending: [] } }),
    ]);
    expect(s.hints('sourceNamespace')).toEqual(['ns-a', 'ns-c']);
    expect(s.hints('policy')).toEqual(['allow-a', 'default', 'staged-allow-c']);
    expect(s.hints('sourceName', { action: 'Deny' })).toEqual(['pod-c']);
    const byPolicy = s.statistics('policy');
    const allow = byPolicy.find((i) => i.name === 'allow-a')!;
    expect(allow).toMatchObject({
      kind: 'NetworkPolicy',
      namespace: 'ns-b',
      allowedPackets: 54,
      allowedBytes: 5400,
      deniedPackets: 0,
      connections: 6,
    });
    expect(allow.series.map((p) => [p.time, p.allowedPackets])).toEqual([
      ['2027-01-15T08:00:00Z', 36],
      ['2027-01-15T08:00:15Z', 18],
    ]);
    expect(byPolicy.find((i) => i.kind === 'EndOfTier')).toMatchObject({
      deniedPackets: 10,
      deniedBytes: 1000,
      allowedPackets: 0,
    });
    const byRule = s.statistics('rule').filter((i) => i.name === 'allow-a');
    expect(byRule.map((i) => [i.ruleIndex, i.allowedPackets]).sort()).toEqual([
      [0, 36],
      [1, 18],
    ]);
  });

  it('drops buckets past the retention, and the keys only they held', () => {
    const now = { t: T0 + 10 };
    const s = store(now, 60_000);
    s.ingest([record(T0), deniedRecord(T0 + 30)]);
    expect(s.stats()).toMatchObject({ flows: 2, keys: 2 });
    now.t = T0 + 75; // the bucket of T0 left a 60 s window
    s.tick();
    expect(s.stats()).toMatchObject({ flows: 1, keys: 1 });
    s.ingest([record(T0)]);
    expect(s.stats()).toMatchObject({ flows: 1, tooOld: 1 });
    expect(s.hints('sourceName')).toEqual(['pod-c']);
    // Equal endpoints and traces in new objects still make the same key after the others were forgotten.
    s.ingest([deniedRecord(T0 + 31)]);
    s.ingest([structuredClone(deniedRecord(T0 + 32))]);
    expect(s.stats()).toMatchObject({ flows: 1, keys: 1 });
    expect(s.query({}).items[0]!.packetsIn).toBe(30);
  });

  it('tells watchers of new and updated flows that pass their filter, and exports closed buckets', () => {
    const now = { t: T0 + 1 };
    const s = store(now);
    const seen: string[] = [];
    const closed: number[] = [];
    const stop = s.watch((flows) => seen.push(...flows.map((f) => `${f.action}:${f.packetsIn}`)), { action: 'Allow' });
    s.onBucketClosed((flows) => closed.push(flows.length));
    s.ingest([record(T0), deniedRecord(T0)]);
    s.tick();
    s.ingest([record(T0)]);
    s.tick();
    expect(seen).toEqual(['Allow:10', 'Allow:20']);
    stop();
    s.ingest([record(T0)]);
    s.tick();
    expect(seen).toHaveLength(2);
    expect(closed).toEqual([]);
    now.t = T0 + 30;
    s.tick();
    expect(closed).toEqual([2]);
    s.tick();
    expect(closed).toEqual([2]);
    // A late record of the closed bucket is exported on its own line, with only its counters.
    const late: number[] = [];
    s.onBucketClosed((flows) => late.push(...flows.map((f) => f.packetsIn)));
    s.ingest([record(T0 + 2, { packetsIn: 7 })]);
    s.tick();
    expect(late).toEqual([7]);
    expect(s.query({ action: 'Allow' }).items[0]!.packetsIn).toBe(37);
  });
});

describe('flow records and the protocol', () => {
  it('rejects a bad record naming the field, and keeps the good ones of its batch', () => {
    expect(() => parseFlowRecord({ ...record(T0), source: { type: 'pod', name: 'x' } })).toThrow(
      /record.source.type: expected one of wep, hep, net \(got "pod"\)/,
    );
    expect(() => parseFlowRecord({ ...record(T0), dest: { type: 'net', name: 'internet' } })).toThrow(
      /dest.name: a net endpoint is pub or pvt/,
    );
    expect(() => parseFlowRecord({ ...record(T0), destPort: 70000 })).toThrow(FlowRecordError);
    expect(() => parseFlowRecord({ ...record(T0), packetsIn: -1 })).toThrow(
      /packetsIn: expected a non-negative integer/,
    );
    expect(() => parseFlowRecord({ ...record(T0), policies: { enforced: [{ ...hit('x'), kind: 'Bogus' }] } })).toThrow(
      /policies.enforced\[0\].kind/,
    );
    const wire = encodeRecords([record(T0), record(T0 + 1), deniedRecord(T0)]);
    // Endpoints and traces travel once per batch: a, b, c and two traces.
    expect([wire.endpoints.length, wire.traces.length]).toEqual([3, 2]);
    expect(parseRecords(wire).records).toEqual([record(T0), record(T0 + 1), deniedRecord(T0)]);
    wire.records[1]![1] = 'Drop';
    const r = parseRecords(wire);
    expect(r.records).toHaveLength(2);
    expect(r.rejected).toBe(1);
    expect(r.errors[0]).toMatch(/records\[1\].action: expected one of Allow, Deny, Pass/);
    // A bad endpoint spoils only the records naming it.
    const w2 = encodeRecords([record(T0), deniedRecord(T0)]);
    (w2.endpoints[2] as { type: string }).type = 'pod';
    const r2 = parseRecords(w2);
    expect(r2.records.map((x) => x.action)).toEqual(['Allow']);
    expect(r2.errors[0]).toMatch(/endpoints\[2\].type: expected one of wep, hep, net/);
    w2.records[0]![6] = 9;
    expect(parseRecords(w2).errors[0]).toMatch(
      /records\[0\].policies: expected the index of one of the batch's 2 traces \(got 9\)/,
    );
  });

  it('parses batches and splits lines across chunks', () => {
    const empty = '"endpoints":[],"traces":[],"records":[]';
    expect(parseBatch(`{"node":"n1","stream":"s-1","seq":3,${empty}}`)).toEqual({
      node: 'n1',
      stream: 's-1',
      seq: 3,
      endpoints: [],
      traces: [],
      records: [],
    });
    expect(() => parseBatch(`{"node":"n1","stream":"s 1","seq":3,${empty}}`)).toThrow(ProtocolError);
    expect(() => parseBatch(`{"node":"n1","stream":"s","seq":0,${empty}}`)).toThrow(/seq/);
    expect(() => parseBatch('{"node":"n1","stream":"s","seq":1,"records":[]}')).toThrow(/endpoints: expected a list/);
    const lines: string[] = [];
    const lr = new LineReader(20);
    lr.push(Buffer.from('abc\nde'), (l) => lines.push(l));
    lr.push(Buffer.from('f\n\n'), (l) => lines.push(l));
    expect(lines).toEqual(['abc', 'def']);
    expect(() => lr.push(Buffer.from('x'.repeat(30)), () => undefined)).toThrow(/longer than 20 bytes/);
  });

  it('the API query string: defaults, and 400s naming the parameter and the accepted values', () => {
    expect(parseFlowQuery(new URLSearchParams('action=Deny&sortBy=-destName&pageSize=5&page=2&destPort=80'))).toEqual({
      action: 'Deny',
      sortBy: { field: 'destName', desc: true },
      pageSize: 5,
      page: 2,
      destPort: 80,
      watch: false,
    });
    const bad = (q: string) => {
      try {
        parseFlowQuery(new URLSearchParams(q));
      } catch (e) {
        expect(e).toBeInstanceOf(ParamError);
        return (e as Error).message;
      }
      throw new Error(`${q} was accepted`);
    };
    expect(bad('action=Drop')).toMatch(/action="Drop": accepted values are Allow, Deny, Pass/);
    expect(bad('sortBy=time')).toMatch(/sortBy="time": accepted values are startTime, action, sourceName, destName/);
    expect(bad('colour=red')).toMatch(/unknown parameter "colour"; accepted: startTimeGte, .*pageSize, page, watch/);
    expect(bad('pageSize=0')).toMatch(/pageSize/);
    expect(bad('page=-1')).toMatch(/page=/);
    expect(bad('destPort=http')).toMatch(/destPort="http": expected a port/);
    expect(bad('action=Allow&action=Deny')).toMatch(/action is given 2 times/);
  });
});
