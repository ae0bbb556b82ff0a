import { describe, it, expect, afterEach } from 'vitest';
import { Registry, startHealthServer, parseListenAddr, type HealthServer } from '../../src/observe/index.js';

describe('metrics registry', () => {
  it('renders counters with labels and escapes label values', () => {
    const r = new Registry();
    const c = r.counter('netplugin_cni_requests_total', 'CNI requests by verb and result.', ['verb', 'code']);
    c.inc({ verb: 'ADD', code: 0 });
    c.inc({ verb: 'ADD', code: 0 }, 2);
    c.inc({ verb: 'DEL', code: 'a"b\\c\nd' });
    const text = r.render();
    expect(text).toContain('# TYPE netplugin_cni_requests_total counter');
    expect(text).toContain('netplugin_cni_requests_total{verb="ADD",code="0"} 3');
    expect(text).toContain('netplugin_cni_requests_total{verb="DEL",code="a\\"b\\\\c\\nd"} 1');
    expect(c.get({ verb: 'ADD', code: 0 })).toBe(3);
    expect(() => c.inc(undefined, -1)).toThrow(/cannot decrease/);
  });

  it('renders cumulative histogram buckets, sum and count', () => {
    const r = new Registry();
    const h = r.histogram('lat_seconds', 'Latency.', ['verb'], [0.1, 1]);
    h.observe({ verb: 'ADD' }, 0.05);
    h.observe({ verb: 'ADD' }, 0.5);
    h.observe({ verb: 'ADD' }, 5);
    const lines = r.render().split('\n');
    expect(lines).toContain('lat_seconds_bucket{verb="ADD",le="0.1"} 1');
    expect(lines).toContain('lat_seconds_bucket{verb="ADD",le="1"} 2');
    expect(lines).toContain('lat_seconds_bucket{verb="ADD",le="+Inf"} 3');
    expect(lines).toContain('lat_seconds_sum{verb="ADD"} 5.55');
    expect(lines).toContain('lat_seconds_count{verb="ADD"} 3');
  });

  it('returns the registered metric for a repeated name and refuses a type clash or a bad name', () => {
    const r = new Registry();
    const a = r.gauge('queue_depth', 'Depth.');
    expect(r.gauge('queue_depth', 'Depth.')).toBe(a);
    expect(() => r.counter('queue_depth', 'x')).toThrow(/registered as a gauge/);
    expect(() => r.counter('bad-name', 'x')).toThrow(/not a valid Prometheus name/);
    let n = 0;
    r.onCollect(() => a.set(undefined, ++n));
    expect(r.render()).toContain('queue_depth 1');
    expect(r.render()).toContain('queue_depth 2');
  });
});

describe('health server', () => {
  let s: HealthServer | undefined;
  afterEach(async () => {
    await s?.close();
    s = undefined;
  });

  it('parses listen addresses and names the expected form on error', () => {
    expect(parseListenAddr('127.0.0.1:9099')).toEqual({ host: '127.0.0.1', port: 9099 });
    expect(parseListenAddr('[::1]:80')).toEqual({ host: '::1', port: 80 });
    expect(parseListenAddr(':9094')).toEqual({ host: '::', port: 9094 });
    expect(() => parseListenAddr('localhost')).toThrow(/HOST:PORT/);
    expect(() => parseListenAddr('1.2.3.4:99999')).toThrow(/HOST:PORT/);
  });

  it('serves /healthz, /readyz with the checks result, /metrics, and 404 elsewhere', async () => {
    let ready = false;
    const r = new Registry();
    r.counter('things_total', 'Things.').inc();
    s = await startHealthServer({
      addr: '127.0.0.1:0',
      registry: r,
      healthz: () => true,
      readyz: () => ({ ok: ready, detail: { datastore: ready ? 'ok' : 'unreachable' } }),
    });
    const base = `http://127.0.0.1:${s.port}`;
    expect((await fetch(`${base}/healthz`)).status).toBe(200);
    const notReady = await fetch(`${base}/readyz`);
    expect(notReady.status).toBe(503);
    expect(await notReady.json()).toEqual({ status: 'failing', detail: { datastore: 'unreachable' } });
    ready = true;
    expect((await fetch(`${base}/readyz`)).status).toBe(200);
    const m = await fetch(`${base}/metrics`);
    expect(m.headers.get('content-type')).toMatch(/^text\/plain; version=0\.0\.4/);
    expect(await m.text()).toContain('things_total 1');
    expect((await fetch(`${base}/nope`)).status).toBe(404);
    expect((await fetch(`${base}/healthz`, { method: 'POST' })).status).toBe(405);
  });

  it('fails a check that throws or hangs instead of hanging the probe', async () => {
    s = await startHealthServer({
      addr: '127.0.0.1:0',
      healthz: () => {
        throw new Error('watch loop stopped');
      },
      readyz: () => new Promise(() => {}),
      checkTimeoutMs: 200,
    });
    const h = await fetch(`http://127.0.0.1:${s.port}/healthz`);
    expect(h.status).toBe(503);
    expect(((await h.json()) as { detail: string }).detail).toBe('watch loop stopped');
    const r = await fetch(`http://127.0.0.1:${s.port}/readyz`);
    expect(r.status).toBe(503);
    expect(((await r.json()) as { detail: string }).detail).toMatch(/did not answer within 200 ms/);
  });

  it('reports a taken port with the address', async () => {
    s = await startHealthServer({ addr: '127.0.0.1:0' });
    await expect(startHealthServer({ addr: `127.0.0.1:${s.port}` })).rejects.toThrow(
      new RegExp(`cannot listen on 127.0.0.1:${s.port}.*EADDRINUSE`),
    );
  });
});
