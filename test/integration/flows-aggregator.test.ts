// netplugin-flows as it runs in a cluster: the built executable, agents
// streaming over HTTP/2 with mTLS (src/flows/client.ts, the module the node
// agent uses), the HTTP API, SSE, the export file and `netpluginctl flows`.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connect as h2connect } from 'node:http2';
import { createServer, Socket, type Server } from 'node:net';
import { mkdtempSync, readFileSync, rmSync, writeFileSync, existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { spawn } from 'node:child_process';
import {
  agentClient,
  deniedRecord,
  flowsPki,
  record,
  startFlows,
  type FlowsPki,
  type FlowsProcess,
} from '../support/flows.js';
import { CTL, requireBuiltCtl } from '../support/ctl.js';
import { makeCert } from '../support/certs.js';
import { freePort } from '../support/etcd.js';
import type { FlowClient } from '../../src/flows/client.js';
import type { Flow } from '../../src/flows/record.js';

let pki: FlowsPki;
let tmp: string;
const procs: FlowsProcess[] = [];
const clients: FlowClient[] = [];

beforeAll(() => {
  requireBuiltCtl();
  pki = flowsPki();
  tmp = mkdtempSync(join(tmpdir(), 'netplugin-flows-test-'));
});
afterAll(async () => {
  for (const c of clients) await c.close();
  for (const p of procs) await p.stop();
  pki?.remove();
  if (tmp) rmSync(tmp, { recursive: true, force: true });
});

async function flows(p: FlowsProcess): Promise<{ items: Flow[]; total: number }> {
  return (await fetch(`${p.apiUrl}/api/v1/flows?pageSize=10000`)).json() as Promise<{ items: Flow[]; total: number }>;
}
async function until<T>(what: string, fn: () => Promise<T | undefined | false>, ms = 20_000): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}
const sum = (items: Flow[], k: keyof Flow) => items.reduce((a, f) => a + (f[k] as number), 0);
const now = () => Math.floor(Date.now() / 1000);

/**
 * A TCP proxy in front of the collector that can swallow the aggregator's answers (lost acks) and cut every connection.
 */
async function proxy(
  target: number,
): Promise<{ port: number; blackholeAcks: boolean; cut(): void; close(): Promise<void> }> {
  const socks = new Set<Socket>();
  const port = await freePort();
  const state = { blackholeAcks: false };
  const server: Server = createServer((c) => {
    const u = new Socket();
    u.connect(target, '127.0.0.1');
    socks.add(c).add(u);
    c.on('data', (d) => u.write(d));
    u.on('data', (d) => {
      if (!state.blackholeAcks) c.write(d);
    });
    const done = () => (c.destroy(), u.destroy(), socks.delete(c), socks.delete(u));
    c.on('close', done).on('error', done);
    u.on('close', done).on('error', done);
  });
  await new Promise<void>((r) => server.listen(port, '127.0.0.1', () => r()));
  return Object.assign(state, {
    port,
    cut: () => {
      for (const s of socks) s.destroy();
    },
    close: () =>
      new Promise<void>((r) => {
        for (const s of socks) s.destroy();
        server.close(() => r());
      }),
  });
}

describe('netplugin-flows', () => {
  let agg: FlowsProcess;
  beforeAll(async () => {
    agg = await startFlows(pki, { args: [`--export-file=${join(tmp, 'export.jsonl')}`] });
    procs.push(agg);
  });

  it('refuses an agent without a certificate, or with one of another CA', async () => {
    const err = await new Promise<string>((resolve) => {
      const s = h2connect(`https://127.0.0.1:${agg.collectorPort}`, { ca: readFileSync(pki.ca.cert) });
      s.on('error', (e) => resolve(e.message));
      s.on('connect', () => {
        const r = s.request({ ':method': 'POST', ':path': '/v1/flows' });
        r.on('error', (e) => resolve(e.message));
        r.on('response', () => resolve('answered'));
        r.end('{}\n');
      });
    });
    expect(err).not.toBe('answered');
    const stranger = agentClient(pki, agg.collectorPort, { as: pki.stranger, node: 'stranger' });
    clients.push(stranger);
    stranger.push([record(now(), { source: { type: 'wep', namespace: 'evil', name: 'x', labels: {} } })]);
    await new Promise((r) => setTimeout(r, 1500));
    expect(stranger.stats()).toMatchObject({ connected: false, connects: 0, acked: 0, buffered: 1 });
    expect((await flows(agg)).items.filter((f) => f.sourceNamespace === 'evil')).toEqual([]);
    expect(agg.stderr()).toMatch(/refused a collector connection/);
  });

  it('refuses a batch for another node than its client certificate names, takes one for a SAN DNS name', async () => {
    // pki.agent names node-1: its key must not write flows in node-2's name.
    const liar = agentClient(pki, agg.collectorPort, { as: pki.agent, node: 'node-2' });
    clients.push(liar);
    liar.push([record(now(), { source: { type: 'wep', namespace: 'spoofed', name: 'x', labels: {} } })]);
    expect(await liar.drained(3000)).toBe(false);
    expect(liar.stats()).toMatchObject({ acked: 0, buffered: 1 });
    expect((await flows(agg)).items.filter((f) => f.sourceNamespace === 'spoofed')).toEqual([]);
    expect(agg.stderr()).toMatch(/batch node \\?"node-2\\?" is not a name of the client certificate \(node-1\)/);
    // A certificate whose subjectAltName has DNS:localhost reports as localhost.
    const sanCert = makeCert(pki.dir, pki.ca, 'san-agent', 'both');
    const san = agentClient(pki, agg.collectorPort, { as: sanCert, node: 'localhost' });
    clients.push(san);
    san.push([record(now(), { source: { type: 'wep', namespace: 'by-san', name: 'x', labels: {} } })]);
    expect(await san.drained(10_000)).toBe(true);
    expect((await flows(agg)).items.filter((f) => f.sourceNamespace === 'by-san')).toHaveLength(1);
  });

  it('takes records from an agent, acknowledges them, and serves them with their trace', async () => {
    const c = agentClient(pki, agg.collectorPort);
    clients.push(c);
    const t = now();
    c.push([record(t), deniedRecord(t)]);
    expect(await c.drained(10_000)).toBe(true);
    expect(c.stats()).toMatchObject({ connected: true, acked: 2, buffered: 0, dropped: 0 });
    const r = await flows(agg);
    const deny = r.items.find((f) => f.action === 'Deny')!;
    expect(deny).toMatchObject({
      sourceNamespace: 'ns-c',
      sourceName: 'pod-c',
      destName: 'pod-b',
      destPort: 80,
      protocol: 'TCP',
      reporter: 'Dst',
      packetsIn: 10,
    });
    expect(deny.policies.enforced).toEqual([
      { kind: 'EndOfTier', namespace: '', name: 'default', tier: 'default', action: 'Deny', ruleIndex: -1 },
    ]);
    expect(deny.policies.pending[0]).toMatchObject({ kind: 'StagedNetworkPolicy', name: 'staged-allow-c' });
  });

  it('counts a batch once when its ack was lost and the agent re-sent it', async () => {
    const px = await proxy(agg.collectorPort);
    const c = agentClient(pki, px.port, { node: 'node-dedup', batchRecords: 10 });
    clients.push(c);
    try {
      await until('the first connection', async () => c.stats().connected);
      const t = now();
      const mine = (o = {}) =>
        record(t, { source: { type: 'wep', namespace: 'dedup', name: 'pod-d', labels: {} }, packetsIn: 1, ...o });
      px.blackholeAcks = true;
      c.push(Array.from({ length: 50 }, () => mine()));
      // The aggregator takes all 5 batches; their acks never arrive.
      await until(
        'the batches to arrive',
        async () =>
          sum(
            (await flows(agg)).items.filter((f) => f.sourceNamespace === 'dedup'),
            'packetsIn',
          ) === 50,
      );
      expect(c.stats()).toMatchObject({ acked: 0, buffered: 50 });
      px.blackholeAcks = false;
      px.cut();
      expect(await c.drained(15_000)).toBe(true);
      expect(c.stats()).toMatchObject({ acked: 50, buffered: 0 });
      expect(c.stats().connects).toBeGreaterThanOrEqual(2);
      expect(
        sum(
          (await flows(agg)).items.filter((f) => f.sourceNamespace === 'dedup'),
          'packetsIn',
        ),
      ).toBe(50);
      const metrics = await (await fetch(`${agg.healthUrl}/metrics`)).text();
      expect(metrics).toMatch(/netplugin_flows_batches_total\{result="duplicate"\} [1-9]/);
    } finally {
      await px.close();
    }
  });

  it('serves the API: filters, paging, sorting, hints, statistics, and 400 for bad parameters', async () => {
    const c = agentClient(pki, agg.collectorPort, { node: 'node-api' });
    clients.push(c);
    const t = now() - 120;
    const api = (ns: string) => ({ type: 'wep' as const, namespace: ns, name: 'web', labels: { app: 'web' } });
    c.push(
      Array.from({ length: 6 }, (_, i) =>
        record(t + i * 15, { source: api('api-src'), dest: api(`api-dst-${i % 2}`), destPort: 8000 + i }),
      ),
    );
    c.push([deniedRecord(t, { source: api('api-src'), dest: api('api-dst-9'), destPort: 9999 })]);
    expect(await c.drained()).toBe(true);
    const get = async (q: string) => {
      const res = await fetch(`${agg.apiUrl}${q}`);
      return {
        status: res.status,
        body: (await res.json()) as { items: Flow[]; total: number; error?: string } & Record<string, unknown>,
      };
    };
    const all = await get('/api/v1/flows?sourceNamespace=api-src');
    expect(all.body.total).toBe(7);
    expect((await get('/api/v1/flows?sourceNamespace=api-src&action=Deny')).body.items.map((f) => f.destPort)).toEqual([
      9999,
    ]);
    expect((await get('/api/v1/flows?sourceNamespace=api-src&destNamespace=api-dst-1')).body.total).toBe(3);
    expect((await get('/api/v1/flows?sourceNamespace=api-src&destPort=8002')).body.total).toBe(1);
    expect(
      (await get(`/api/v1/flows?sourceNamespace=api-src&startTimeGte=${t + 30}&startTimeLt=${t + 60}`)).body.items
        .map((f) => f.destPort)
        .sort(),
    ).toEqual([8002, 8003]);
    const asc = await get('/api/v1/flows?sourceNamespace=api-src&action=Allow&sortBy=startTime&pageSize=2&page=1');
    expect(asc.body).toMatchObject({ total: 6 });
    expect(asc.body.items.map((f) => f.destPort)).toEqual([8002, 8003]);
    const desc = await get('/api/v1/flows?sourceNamespace=api-src&action=Allow&sortBy=-startTime&pageSize=2');
    expect(desc.body.items.map((f) => f.destPort)).toEqual([8005, 8004]);
    expect(
      (await get('/api/v1/flows?sourceNamespace=api-src&sortBy=-destName&pageSize=1')).body.items[0]!.destName,
    ).toBe('web');
    const hints = await get('/api/v1/flows/hints?type=destNamespace&sourceNamespace=api-src');
    expect(hints.body.items).toEqual(['api-dst-0', 'api-dst-1', 'api-dst-9']);
    const stats = await get('/api/v1/statistics?groupBy=policy&sourceNamespace=api-src');
    const allow = (stats.body.items as unknown as Array<Record<string, unknown>>).find((i) => i.name === 'allow-a')!;
    expect(allow).toMatchObject({
      kind: 'NetworkPolicy',
      namespace: 'ns-b',
      allowedPackets: 6 * 18,
      allowedBytes: 6 * 1800,
      deniedPackets: 0,
      connections: 12,
    });
    expect((allow.series as unknown[]).length).toBe(6);
    const rules = await get('/api/v1/statistics?groupBy=rule&sourceNamespace=api-src');
    expect(
      (rules.body.items as unknown as Array<Record<string, unknown>>).find((i) => i.kind === 'EndOfTier'),
    ).toMatchObject({ ruleIndex: -1, deniedPackets: 10 });
    for (const [q, msg] of [
      ['/api/v1/flows?action=deny', /parameter action="deny": accepted values are Allow, Deny, Pass/],
      ['/api/v1/flows?sortBy=port', /sortBy="port": accepted values are startTime, action, sourceName, destName/],
      ['/api/v1/flows?pageSize=abc', /pageSize/],
      ['/api/v1/flows?nmespace=x', /unknown parameter "nmespace"; accepted: /],
      [
        '/api/v1/flows/hints?type=color',
        /type="color": accepted values are sourceNamespace, destNamespace, sourceName, destName, policy/,
      ],
      ['/api/v1/flows/hints', /parameter type is required/],
      ['/api/v1/statistics?groupBy=node', /groupBy="node": accepted values are policy, rule/],
    ] as const) {
      const r = await get(q);
      expect(r.status, q).toBe(400);
      expect(r.body.error, q).toMatch(msg);
    }
  });

  it('streams a new flow over SSE (watch=true), filtered', async () => {
    const ac = new AbortController();
    const res = await fetch(`${agg.apiUrl}/api/v1/flows?watch=true&sourceNamespace=sse`, { signal: ac.signal });
    expect(res.headers.get('content-type')).toBe('text/event-stream');
    const got: Flow[] = [];
    const reading = (async () => {
      const dec = new TextDecoder();
      let buf = '';
      try {
        for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
          buf += dec.decode(chunk);
          for (const m of buf.matchAll(/^data: (.*)$/gm)) got.push(JSON.parse(m[1]!));
          buf = buf.slice(buf.lastIndexOf('\n') + 1);
        }
      } catch {
        /* aborted */
      }
    })();
    const c = agentClient(pki, agg.collectorPort, { node: 'node-sse' });
    clients.push(c);
    c.push([
      record(now(), { destPort: 7 }),
      record(now(), { source: { type: 'wep', namespace: 'sse', name: 'pod-s', labels: {} }, destPort: 8080 }),
    ]);
    await until('an SSE event', async () => got.length > 0);
    ac.abort();
    await reading;
    expect(got.map((f) => [f.sourceNamespace, f.destPort])).toEqual([['sse', 8080]]);
  });

  it('netpluginctl flows prints flows like hubble observe, and --follow prints new ones', async () => {
    const c = agentClient(pki, agg.collectorPort, { node: 'node-ctl' });
    clients.push(c);
    const ctl = spawn(
      process.execPath,
      [CTL, 'flows', '--server', agg.apiUrl, '--follow', '--last', '0', '--namespace', 'ctl-ns', '-o', 'wide'],
      { stdio: ['ignore', 'pipe', 'pipe'] },
    );
    let out = '';
    ctl.stdout.on('data', (d: Buffer) => (out += d.toString()));
    try {
      // A flow pushed before the command's watch is open is not streamed to it: the agent reports
      // again each second (each report updates the flow, which the watch then streams).
      let pushes = 0;
      await until('a followed flow', async () => {
        if (out.includes('\n')) return true;
        c.push([
          deniedRecord(now(), {
            source: { type: 'wep', namespace: 'ctl-ns', name: 'pod-x', labels: {} },
            dest: { type: 'net', namespace: '', name: 'pub', labels: {} },
            destPort: 443,
          }),
        ]);
        pushes++;
        await new Promise((r) => setTimeout(r, 1000));
        return false;
      });
      expect(pushes).toBeGreaterThan(0);
      expect(out).toMatch(
        /^[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d\.\d{3}: ctl-ns\/pod-x -> world \(net\/pub\):443 TCP DENIED \(Dst\) EndOfTier default:default packets=\d+0\/0 .*pending=StagedNetworkPolicy default:ns-b\/staged-allow-c\[1\]:Allow\n/,
      );
    } finally {
      ctl.kill('SIGINT');
      await new Promise((r) => ctl.once('exit', r));
    }
    const once = await runCtl(['flows', '--server', agg.apiUrl, '--pod', 'ctl-ns/pod-x', '-o', 'json']);
    expect(once.code).toBe(0);
    expect(JSON.parse(once.stdout.trim())).toMatchObject({ sourceName: 'pod-x', destType: 'net', destName: 'pub' });
    const bad = await runCtl(['flows', '--server', agg.apiUrl, '--action', 'Drop']);
    expect(bad).toMatchObject({ code: 1 });
    expect(bad.stderr).toMatch(/--action "Drop": use Allow, Deny or Pass/);
    const down = await runCtl(['flows', '--server', `http://127.0.0.1:${await freePort()}`]);
    expect(down.stderr).toMatch(/cannot reach the flow aggregator at http:\/\/127\.0\.0\.1:\d+: ECONNREFUSED/);
  });

  it('writes each closed bucket to the export file, one flow per line', async () => {
    const c = agentClient(pki, agg.collectorPort, { node: 'node-export' });
    clients.push(c);
    c.push([record(now() - 90, { source: { type: 'wep', namespace: 'export', name: 'pod-e', labels: {} } })]);
    expect(await c.drained()).toBe(true);
    const line = await until('the export', async () => {
      const f = join(tmp, 'export.jsonl');
      return (
        existsSync(f) &&
        readFileSync(f, 'utf8')
          .split('\n')
          .find((l) => l.includes('"sourceNamespace":"export"'))
      );
    });
    expect(JSON.parse(line)).toMatchObject({ sourceName: 'pod-e', packetsIn: 10, action: 'Allow' });
  });
});

describe('netplugin-flows restarted', () => {
  it('loses nothing the agent buffered and duplicates nothing', async () => {
    const first = await startFlows(pki);
    procs.push(first);
    const c = agentClient(pki, first.collectorPort, { node: 'node-restart', batchRecords: 7 });
    clients.push(c);
    const t = now();
    const mine = () =>
      record(t, { source: { type: 'wep', namespace: 'restart', name: 'pod-r', labels: {} }, packetsIn: 1 });
    c.push(Array.from({ length: 20 }, mine));
    expect(await c.drained()).toBe(true);
    await first.stop();
    // While the aggregator is away the agent keeps buffering.
    c.push(Array.from({ length: 33 }, mine));
    await new Promise((r) => setTimeout(r, 500));
    expect(c.stats()).toMatchObject({ connected: false, buffered: 33 });
    const second = await startFlows(pki, { collectorPort: first.collectorPort });
    procs.push(second);
    expect(await c.drained(15_000)).toBe(true);
    c.push(Array.from({ length: 4 }, mine));
    expect(await c.drained()).toBe(true);
    const got = (await flows(second)).items.filter((f) => f.sourceNamespace === 'restart');
    // The first aggregator's memory is gone; everything sent since is there exactly once.
    expect(sum(got, 'packetsIn')).toBe(37);
    expect(c.stats()).toMatchObject({ acked: 57, dropped: 0, buffered: 0 });
  });

  it('keeps at most its bound while the aggregator is away, dropping the oldest and counting them', async () => {
    const port = await freePort();
    const c = agentClient(pki, port, { node: 'node-bound', batchRecords: 5, maxBufferedRecords: 10 });
    clients.push(c);
    const t = now();
    for (let i = 1; i <= 5; i++)
      c.push(
        Array.from({ length: 5 }, () =>
          record(t, { source: { type: 'wep', namespace: 'bound', name: `batch-${i}`, labels: {} } }),
        ),
      );
    expect(c.stats()).toMatchObject({ connected: false, buffered: 10, dropped: 15 });
    const p = await startFlows(pki, { collectorPort: port });
    procs.push(p);
    expect(await c.drained(15_000)).toBe(true);
    const got = (await flows(p)).items.filter((f) => f.sourceNamespace === 'bound');
    expect(got.map((f) => [f.sourceName, f.connectionsStarted]).sort()).toEqual([
      ['batch-4', 10],
      ['batch-5', 10],
    ]);
  });

  it('asks for the bearer token when started with --api-token-file', async () => {
    const tokenFile = join(tmp, 'token');
    writeFileSync(tokenFile, 's3cret\n', { mode: 0o600 });
    const p = await startFlows(pki, { args: [`--api-token-file=${tokenFile}`] });
    procs.push(p);
    expect((await fetch(`${p.apiUrl}/api/v1/flows`)).status).toBe(401);
    expect((await fetch(`${p.apiUrl}/api/v1/flows`, { headers: { authorization: 'Bearer nope' } })).status).toBe(401);
    expect((await fetch(`${p.apiUrl}/api/v1/flows`, { headers: { authorization: 'Bearer s3cret' } })).status).toBe(200);
    const ctl = await runCtl(['flows', '--server', p.apiUrl, '--token-file', tokenFile]);
    expect(ctl).toMatchObject({ code: 0 });
    expect((await runCtl(['flows', '--server', p.apiUrl])).stderr).toMatch(/HTTP 401: .*--token-file/);
  });
});

async function runCtl(args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  const p = spawn(process.execPath, [CTL, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  p.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
  p.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
  const code = await new Promise<number>((r) => p.once('exit', (c) => r(c ?? -1)));
  return { code, stdout, stderr };
}
