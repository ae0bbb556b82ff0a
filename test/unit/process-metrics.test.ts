// netplugin_build_info and the process / Node.js runtime metrics every
// netplugin process serves, read at scrape time from /proc and the runtime.
import { describe, expect, it } from 'vitest';
import { Registry } from '../../src/observe/metrics.js';
import { registerProcessMetrics } from '../../src/observe/process-metrics.js';

function samples(text: string): Map<string, number> {
  const out = new Map<string, number>();
  for (const line of text.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*(?:\{[^}]*\})?) (\S+)$/.exec(line);
    expect(m, `not a sample line: ${line}`).not.toBeNull();
    out.set(m![1]!, Number(m![2]));
  }
  return out;
}

describe('registerProcessMetrics', () => {
  it('serves build info and live process and runtime values in the text format', async () => {
    const r = new Registry();
    registerProcessMetrics(r, { component: 'netplugin-node', version: '9.8.7' });
    // Some CPU time to count, and a scrape interval for the event loop delay.
    let x = 0;
    for (let i = 0; i < 2e6; i++) x += i;
    expect(x).toBeGreaterThan(0);
    await new Promise((res) => setTimeout(res, 50));
    const text = r.render();
    const s = samples(text);
    expect(s.get(`netplugin_build_info{component="netplugin-node",version="9.8.7",nodejs="${process.version}"}`)).toBe(
      1,
    );
    expect(text).toContain('# TYPE process_cpu_seconds_total counter');
    expect(s.get('process_cpu_seconds_total')).toBeGreaterThan(0);
    expect(s.get('process_resident_memory_bytes')).toBeGreaterThan(1e6);
    expect(s.get('process_virtual_memory_bytes')).toBeGreaterThanOrEqual(s.get('process_resident_memory_bytes')!);
    expect(s.get('process_open_fds')).toBeGreaterThan(2);
    expect(s.get('process_max_fds')).toBeGreaterThanOrEqual(s.get('process_open_fds')!);
    const started = s.get('process_start_time_seconds')!;
    expect(Math.abs(started - (Date.now() / 1000 - process.uptime()))).toBeLessThan(2);
    expect(s.get('nodejs_heap_size_used_bytes')).toBeGreaterThan(0);
    expect(s.get('nodejs_heap_size_total_bytes')).toBeGreaterThanOrEqual(s.get('nodejs_heap_size_used_bytes')!);
    expect(s.has('nodejs_eventloop_lag_p99_seconds')).toBe(true);
    // The CPU counter only grows between scrapes.
    const first = s.get('process_cpu_seconds_total')!;
    for (let i = 0; i < 2e6; i++) x += i;
    expect(samples(r.render()).get('process_cpu_seconds_total')!).toBeGreaterThanOrEqual(first);
  });
});
