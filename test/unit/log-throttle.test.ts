// Repeated failures logged once per interval with a count (src/log/throttle.ts), through the
// loggers that share one throttle: the agent's own and those of the requests it serves.
import { describe, expect, it } from 'vitest';
import { createLogger, type LoggerOptions } from '../../src/log/logger.js';
import { LogThrottle } from '../../src/log/throttle.js';
import { Registry } from '../../src/observe/metrics.js';
import { registerLogThrottleMetrics } from '../../src/observe/process-metrics.js';

function setup(opts: Partial<LoggerOptions> = {}) {
  let now = 1_000_000;
  const throttle = new LogThrottle({ intervalMs: 60_000, now: () => now });
  const registry = new Registry();
  registerLogThrottleMetrics(registry, throttle);
  const lines: string[] = [];
  const log = createLogger({ ...opts, throttle, stderr: (s) => lines.push(s) });
  const suppressed = (level: string) => {
    const m = new RegExp(`^netplugin_log_repeats_suppressed_total\\{level="${level}"\\} (\\d+)$`, 'm').exec(
      registry.render(),
    );
    return m ? Number(m[1]) : 0;
  };
  return { log, lines, throttle, suppressed, advance: (ms: number) => (now += ms) };
}

describe('log throttle', () => {
  it('writes a repeated failure once per interval, then with the count of the lines it suppressed', () => {
    const t = setup();
    for (let i = 0; i < 890; i++) {
      t.log.warn('routes: watch failed; re-listing', { source: 'IPPool', error: 'connection refused', attempt: i });
      t.advance(1_000);
    }
    // 890 s: the first line, then one a minute (at 60 s, 120 s ... 840 s), each with its count.
    expect(t.lines).toHaveLength(15);
    expect(t.lines[0]).not.toContain('repeated=');
    for (const l of t.lines.slice(1)) expect(l).toMatch(/ attempt=\d+ repeated=59 repeatedWithinSeconds=60\n$/);
    expect(t.suppressed('WARNING')).toBe(890 - 15);
  });

  it('keeps distinct failures apart: another error, another context, another level', () => {
    const t = setup();
    t.log.warn('cannot register the node yet; retrying', { error: 'etcd down' });
    t.log.warn('cannot register the node yet; retrying', { error: 'etcd down' });
    t.log.warn('cannot register the node yet; retrying', { error: 'permission denied' });
    t.log.child({ containerId: 'c1' }).error('netplugin: mtu 5 is out of range', { code: 7 });
    t.log.child({ containerId: 'c2' }).error('netplugin: mtu 5 is out of range', { code: 7 });
    t.log.child({ containerId: 'c1' }).error('netplugin: mtu 5 is out of range', { code: 7 });
    t.log.error('cannot register the node yet; retrying', { error: 'etcd down' });
    expect(t.lines.map((l) => l.replace(/^\S+ /, ''))).toEqual([
      expect.stringMatching(/^WARNING .* error="etcd down"\n$/),
      expect.stringMatching(/^WARNING .* error="permission denied"\n$/),
      expect.stringMatching(/^ERROR .* cid=c1 netplugin: mtu 5/),
      expect.stringMatching(/^ERROR .* cid=c2 netplugin: mtu 5/),
      expect.stringMatching(/^ERROR .* error="etcd down"\n$/),
    ]);
    expect(t.suppressed('WARNING')).toBe(1);
    expect(t.suppressed('ERROR')).toBe(1);
  });

  it('keeps lines about different objects apart (their string fields), but not different numbers', () => {
    const t = setup();
    const skip = 'datastore: skipping a malformed object (it is treated as absent until fixed)';
    t.log.warn(skip, { object: 'WorkloadEndpoint x/evil-ips', reason: 'podIPs' });
    t.log.warn(skip, { object: 'WorkloadEndpoint x/evil-nat', reason: 'ipNATs' });
    t.log.warn(skip, { object: 'WorkloadEndpoint x/evil-ips', reason: 'podIPs' });
    t.log.warn('routes: watch failed; re-listing', { source: 'IPPool', attempt: 1 });
    t.log.warn('routes: watch failed; re-listing', { source: 'IPPool', attempt: 2 });
    expect(t.lines.map((l) => /object="?([^"]+)"? /.exec(l)?.[1] ?? /attempt=(\d)/.exec(l)?.[1])).toEqual([
      'WorkloadEndpoint x/evil-ips',
      'WorkloadEndpoint x/evil-nat',
      '1',
    ]);
    expect(t.suppressed('WARNING')).toBe(2);
  });

  it('never throttles INFO or DEBUG lines', () => {
    const t = setup({ level: 'DEBUG' });
    for (let i = 0; i < 5; i++) {
      t.log.info('policy: table resynced');
      t.log.debug('ipam gc: scan');
    }
    expect(t.lines).toHaveLength(10);
  });

  it('gives the count as a JSON field with --log-format json', () => {
    const t = setup({ format: 'json' });
    for (let i = 0; i < 4; i++) t.log.error('policy: applying the ruleset failed; retrying', { error: 'EPERM' });
    t.advance(60_000);
    t.log.error('policy: applying the ruleset failed; retrying', { error: 'EPERM' });
    expect(t.lines).toHaveLength(2);
    expect(JSON.parse(t.lines[1]!)).toMatchObject({
      level: 'ERROR',
      error: 'EPERM',
      repeated: 3,
      repeatedWithinSeconds: 60,
    });
  });
});
