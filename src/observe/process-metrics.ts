// The metrics every netplugin process serves besides its own: what build runs
// (netplugin_build_info) and the process and Node.js runtime (the standard
// process_* names Prometheus client libraries export, and nodejs_* ones),
// read from /proc and the runtime at scrape time only.
import { readdirSync, readFileSync } from 'node:fs';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import type { Registry } from './metrics.js';

export function registerProcessMetrics(registry: Registry, build: { component: string; version: string }): void {
  registry
    .gauge(
      'netplugin_build_info',
      'Always 1: the running build, by component, netplugin version and Node.js version.',
      ['component', 'version', 'nodejs'],
    )
    .set({ component: build.component, version: build.version, nodejs: process.version }, 1);
  const cpu = registry.counter('process_cpu_seconds_total', 'Total user and system CPU time spent in seconds.');
  const rss = registry.gauge('process_resident_memory_bytes', 'Resident memory size in bytes.');
  const vsize = registry.gauge('process_virtual_memory_bytes', 'Virtual memory size in bytes.');
  const start = registry.gauge('process_start_time_seconds', 'Start time of the process since unix epoch in seconds.');
  const fds = registry.gauge('process_open_fds', 'Number of open file descriptors.');
  const maxFds = registry.gauge('process_max_fds', 'Maximum number of open file descriptors.');
  const heapUsed = registry.gauge('nodejs_heap_size_used_bytes', 'Process heap size used from Node.js in bytes.');
  const heapTotal = registry.gauge('nodejs_heap_size_total_bytes', 'Process heap size from Node.js in bytes.');
  const external = registry.gauge('nodejs_external_memory_bytes', 'Node.js external memory size in bytes.');
  const lag = registry.gauge(
    'nodejs_eventloop_lag_p99_seconds',
    'The 99th percentile of event loop delay since the previous scrape, in seconds.',
  );
  const handles = registry.gauge(
    'nodejs_active_handles',
    'Number of active libuv handles (sockets, timers, servers...).',
  );
  start.set(undefined, Math.round(Date.now() / 1000 - process.uptime()));
  const delay = monitorEventLoopDelay({ resolution: 20 });
  delay.enable();
  let lastCpu = 0;
  registry.onCollect(() => {
    const u = process.cpuUsage();
    const total = (u.user + u.system) / 1e6;
    if (total > lastCpu) cpu.inc(undefined, total - lastCpu);
    lastCpu = Math.max(lastCpu, total);
    const m = process.memoryUsage();
    rss.set(undefined, m.rss);
    heapUsed.set(undefined, m.heapUsed);
    heapTotal.set(undefined, m.heapTotal);
    external.set(undefined, m.external);
    try {
      // /proc/self/stat: fields after the command name; vsize is field 23 (bytes).
      const stat = readFileSync('/proc/self/stat', 'utf8');
      const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      vsize.set(undefined, Number(f[20]));
    } catch {
      // not Linux: the series keeps its last value
    }
    try {
      fds.set(undefined, readdirSync('/proc/self/fd').length);
      const lim = /^Max open files\s+(\d+|unlimited)/m.exec(readFileSync('/proc/self/limits', 'utf8'));
      if (lim) maxFds.set(undefined, lim[1] === 'unlimited' ? Infinity : Number(lim[1]));
    } catch {
      // not Linux
    }
    const p99 = delay.percentile(99);
    lag.set(undefined, Number.isFinite(p99) ? p99 / 1e9 : 0);
    delay.reset();
    const active = (process as unknown as { getActiveResourcesInfo?: () => string[] }).getActiveResourcesInfo?.();
    if (active) handles.set(undefined, active.length);
  });
}

/** The lines a process's log throttle suppressed (repeats of a failure within its interval), by level. */
export function registerLogThrottleMetrics(
  registry: Registry,
  throttle: { intervalMs: number; onSuppressed(fn: (level: string) => void): void },
): void {
  const suppressed = registry.counter(
    'netplugin_log_repeats_suppressed_total',
    `Log lines not written because the same failure was logged less than ${throttle.intervalMs / 1000} s before ` +
      '(the next line written carries their count as repeated=N), by level.',
    ['level'],
  );
  throttle.onSuppressed((level) => suppressed.inc({ level }));
}
