// Repeated failures logged once per interval, with a count. A long-running
// process (the node agent) meets the same failure over and over: a watch that
// keeps breaking, a netconf the runtime sends every few seconds that is wrong.
// The first line of a kind is written; the same line again within the interval
// is suppressed and counted; the first one after it is written with
// `repeated=N` (the lines suppressed since the last one written). A line's
// kind is its level, its logger's context, its message, its `error` field and
// its string fields, so distinct failures (another pod, another object,
// another error) are never folded together.
// Only WARNING and ERROR lines are throttled.

/** Default interval: one line per kind per minute. */
const DEFAULT_THROTTLE_INTERVAL_MS = 60_000;
/** Kinds remembered at most; beyond it the oldest are forgotten (and logged again when they recur). */
const MAX_KINDS = 1000;

interface KindState {
  /** When the last line of this kind was written. */
  writtenAt: number;
  suppressed: number;
}

interface LogThrottleOptions {
  intervalMs?: number;
  /** Told of every suppressed line (the process's metric). */
  onSuppressed?: (level: string) => void;
  now?: () => number;
}

export class LogThrottle {
  readonly intervalMs: number;
  private readonly kinds = new Map<string, KindState>();
  private readonly now: () => number;
  private readonly listeners: Array<(level: string) => void> = [];

  constructor(opts: LogThrottleOptions = {}) {
    this.intervalMs = opts.intervalMs ?? DEFAULT_THROTTLE_INTERVAL_MS;
    this.now = opts.now ?? Date.now;
    if (opts.onSuppressed) this.listeners.push(opts.onSuppressed);
  }

  /** Also tell `fn` of every suppressed line (the process's metric, registered after its logger exists). */
  onSuppressed(fn: (level: string) => void): void {
    this.listeners.push(fn);
  }

  /**
   * Whether a line of this kind is written now: undefined to suppress it, else the number of lines
   * of its kind suppressed since the last one written (0 the first time).
   */
  admit(level: string, kind: string): number | undefined {
    if (level !== 'WARNING' && level !== 'ERROR') return 0;
    const key = `${level}\u0000${kind}`;
    const t = this.now();
    const st = this.kinds.get(key);
    if (st && t - st.writtenAt < this.intervalMs) {
      st.suppressed++;
      for (const l of this.listeners) l(level);
      return undefined;
    }
    const repeated = st?.suppressed ?? 0;
    // Re-inserted: the map's order is the order of last writes, so the oldest go first.
    this.kinds.delete(key);
    this.kinds.set(key, { writtenAt: t, suppressed: 0 });
    if (this.kinds.size > MAX_KINDS) this.kinds.delete(this.kinds.keys().next().value!);
    return repeated;
  }
}

/**
 * The kind of a line, as LogThrottle compares lines: its logger's context, its message, its `error`
 * and every other field holding a string (what names the object, pod or file: two malformed objects
 * are two kinds). Numbers (durations, counts) vary between repeats of one failure and are left out.
 */
export function throttleKind(context: string, msg: string, fields: Record<string, unknown> | undefined): string {
  const err = fields?.['error'];
  const named = Object.entries(fields ?? {})
    .filter(([k, v]) => k !== 'error' && typeof v === 'string')
    .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
    .map(([k, v]) => `${k}=${v as string}`)
    .join('\u0001');
  const errText = typeof err === 'string' ? err : err === undefined ? '' : JSON.stringify(err);
  return `${context}\u0000${msg}\u0000${errText}\u0000${named}`;
}
