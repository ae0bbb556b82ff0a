// Metrics in the Prometheus text exposition format (version 0.0.4), kept small
// on purpose: counters, gauges and histograms with labels, rendered on demand.
// One registry per process; every executable that serves /metrics (the node
// agent, the kube-controllers) builds its own and hands it to the health server.

type Labels = Record<string, string | number>;

interface Series<V> {
  labels: Labels;
  value: V;
}

function labelKey(names: readonly string[], labels: Labels | undefined): string {
  if (!names.length) return '';
  return names.map((n) => String(labels?.[n] ?? '')).join('\u0000');
}

/** Label values escape backslash, double quote and newline, as the text format requires. */
function escapeLabel(v: string): string {
  return v.replace(/\\/g, '\\\\').replace(/"/g, '\\"').replace(/\n/g, '\\n');
}

function formatLabels(labels: Labels, extra?: [string, string]): string {
  const parts = Object.entries(labels).map(([k, v]) => `${k}="${escapeLabel(String(v))}"`);
  if (extra) parts.push(`${extra[0]}="${escapeLabel(extra[1])}"`);
  return parts.length ? `{${parts.join(',')}}` : '';
}

function formatValue(v: number): string {
  if (Number.isNaN(v)) return 'NaN';
  if (v === Infinity) return '+Inf';
  if (v === -Infinity) return '-Inf';
  return String(v);
}

const NAME_RE = /^[a-zA-Z_:][a-zA-Z0-9_:]*$/;

abstract class Metric<V> {
  protected readonly series = new Map<string, Series<V>>();
  constructor(
    readonly name: string,
    readonly help: string,
    readonly labelNames: readonly string[],
  ) {
    if (!NAME_RE.test(name)) throw new TypeError(`metric name ${JSON.stringify(name)} is not a valid Prometheus name`);
    for (const l of labelNames) {
      if (!NAME_RE.test(l) || l.startsWith('__'))
        throw new TypeError(`label name ${JSON.stringify(l)} of ${name} is not valid`);
    }
  }
  abstract readonly type: 'counter' | 'gauge' | 'histogram';
  protected abstract zero(): V;
  protected at(labels: Labels | undefined): Series<V> {
    const key = labelKey(this.labelNames, labels);
    let s = this.series.get(key);
    if (!s) {
      const own: Labels = {};
      for (const n of this.labelNames) own[n] = String(labels?.[n] ?? '');
      s = { labels: own, value: this.zero() };
      this.series.set(key, s);
    }
    return s;
  }
  abstract renderSeries(): string[];
  render(): string {
    return [
      `# HELP ${this.name} ${this.help.replace(/\\/g, '\\\\').replace(/\n/g, '\\n')}`,
      `# TYPE ${this.name} ${this.type}`,
      ...this.renderSeries(),
    ].join('\n');
  }
}

class Counter extends Metric<number> {
  readonly type = 'counter' as const;
  protected zero(): number {
    return 0;
  }
  inc(labels?: Labels, n = 1): void {
    if (n < 0) throw new RangeError(`counter ${this.name} cannot decrease`);
    this.at(labels).value += n;
  }
  get(labels?: Labels): number {
    return this.series.get(labelKey(this.labelNames, labels))?.value ?? 0;
  }
  renderSeries(): string[] {
    // A counter without labels is shown at 0 before its first increment, so
    // dashboards see the series from the start.
    if (!this.series.size && !this.labelNames.length) this.at(undefined);
    return [...this.series.values()].map((s) => `${this.name}${formatLabels(s.labels)} ${formatValue(s.value)}`);
  }
}

class Gauge extends Metric<number> {
  readonly type = 'gauge' as const;
  protected zero(): number {
    return 0;
  }
  set(labels: Labels | undefined, v: number): void {
    this.at(labels).value = v;
  }
  inc(labels?: Labels, n = 1): void {
    this.at(labels).value += n;
  }
  dec(labels?: Labels, n = 1): void {
    this.at(labels).value -= n;
  }
  get(labels?: Labels): number {
    return this.series.get(labelKey(this.labelNames, labels))?.value ?? 0;
  }
  /** Drops every series (for gauges recomputed from scratch, e.g. queue depths per key). */
  reset(): void {
    this.series.clear();
  }
  renderSeries(): string[] {
    if (!this.series.size && !this.labelNames.length) this.at(undefined);
    return [...this.series.values()].map((s) => `${this.name}${formatLabels(s.labels)} ${formatValue(s.value)}`);
  }
}

interface HistogramValue {
  counts: number[];
  sum: number;
  count: number;
}

/** Default buckets in seconds: 0.5 ms to 10 s, for request and programming latencies. */
const LATENCY_BUCKETS = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10];

class Histogram extends Metric<HistogramValue> {
  readonly type = 'histogram' as const;
  readonly buckets: readonly number[];
  constructor(name: string, help: string, labelNames: readonly string[], buckets: readonly number[] = LATENCY_BUCKETS) {
    super(name, help, labelNames);
    if (labelNames.includes('le')) throw new TypeError(`histogram ${name} cannot use the label "le"`);
    const sorted = [...buckets].sort((a, b) => a - b);
    if (!sorted.length || sorted.some((b, i) => i > 0 && b === sorted[i - 1]))
      throw new TypeError(`histogram ${name} needs distinct buckets`);
    this.buckets = sorted;
  }
  protected zero(): HistogramValue {
    return { counts: this.buckets.map(() => 0), sum: 0, count: 0 };
  }
  observe(labels: Labels | undefined, v: number): void {
    const s = this.at(labels).value;
    for (let i = 0; i < this.buckets.length; i++) if (v <= this.buckets[i]!) s.counts[i]!++;
    s.sum += v;
    s.count++;
  }
  /** Starts a timer; the returned function observes the elapsed seconds. */
  startTimer(labels?: Labels): (more?: Labels) => number {
    const t0 = process.hrtime.bigint();
    return (more) => {
      const secs = Number(process.hrtime.bigint() - t0) / 1e9;
      this.observe({ ...labels, ...more }, secs);
      return secs;
    };
  }
  count(labels?: Labels): number {
    return this.series.get(labelKey(this.labelNames, labels))?.value.count ?? 0;
  }
  renderSeries(): string[] {
    const out: string[] = [];
    for (const s of this.series.values()) {
      this.buckets.forEach((b, i) =>
        out.push(`${this.name}_bucket${formatLabels(s.labels, ['le', formatValue(b)])} ${s.value.counts[i]}`),
      );
      out.push(`${this.name}_bucket${formatLabels(s.labels, ['le', '+Inf'])} ${s.value.count}`);
      out.push(`${this.name}_sum${formatLabels(s.labels)} ${formatValue(s.value.sum)}`);
      out.push(`${this.name}_count${formatLabels(s.labels)} ${s.value.count}`);
    }
    return out;
  }
}

export class Registry {
  private readonly metrics = new Map<string, Metric<unknown>>();
  /** Called before every render, to refresh gauges computed from state (queue depth, cache sizes). */
  private readonly collectors: Array<() => void> = [];

  // biome-ignore lint/suspicious/noExplicitAny: metrics of every label set share one registry
  private add<M extends Metric<any>>(m: M): M {
    const existing = this.metrics.get(m.name);
    if (existing) {
      if (existing.type !== m.type) throw new TypeError(`metric ${m.name} is registered as a ${existing.type}`);
      return existing as M;
    }
    this.metrics.set(m.name, m);
    return m;
  }
  counter(name: string, help: string, labelNames: readonly string[] = []): Counter {
    return this.add(new Counter(name, help, labelNames));
  }
  gauge(name: string, help: string, labelNames: readonly string[] = []): Gauge {
    return this.add(new Gauge(name, help, labelNames));
  }
  histogram(name: string, help: string, labelNames: readonly string[] = [], buckets?: readonly number[]): Histogram {
    return this.add(new Histogram(name, help, labelNames, buckets));
  }
  onCollect(fn: () => void): void {
    this.collectors.push(fn);
  }
  render(): string {
    for (const c of this.collectors) c();
    return [...this.metrics.values()].map((m) => m.render()).join('\n') + '\n';
  }
}

export const PROMETHEUS_CONTENT_TYPE = 'text/plain; version=0.0.4; charset=utf-8';
