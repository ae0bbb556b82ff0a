// Logging for the plugin (one short process per CNI call) and the agent (long
// running): always stderr, plus a rotating file when a path is configured.
import type { Logger } from '../log/types.js';
import { RotatingFile } from './file.js';
import { redact, redactString } from './redact.js';
import { throttleKind, type LogThrottle } from './throttle.js';

type LogLevel = 'ERROR' | 'WARNING' | 'INFO' | 'DEBUG';
const LOG_LEVELS: readonly LogLevel[] = ['ERROR', 'WARNING', 'INFO', 'DEBUG'];
const RANK: Record<LogLevel, number> = { ERROR: 0, WARNING: 1, INFO: 2, DEBUG: 3 };

// The CNI arguments these come from may be absent (a runtime that is not Kubernetes).
export interface LogContext {
  containerId?: string | undefined;
  podNamespace?: string | undefined;
  podName?: string | undefined;
  /** Anything else worth repeating on every line (e.g. command, plugin name). */
  [k: string]: string | undefined;
}

export interface LoggerOptions {
  /** ERROR, WARNING, INFO (default) or DEBUG, any case; WARN is accepted for WARNING. */
  level?: string | undefined;
  /** Also append to this file ('' or undefined: stderr only). */
  filePath?: string | undefined;
  maxSizeMB?: number;
  /** Overrides maxSizeMB with an exact byte count (tests exercise rotation with tiny files). */
  maxSizeBytes?: number;
  maxAgeDays?: number;
  maxCount?: number;
  context?: LogContext;
  /** Where stderr lines go (the agent hands the caller's stderr here). Default: nothing. */
  stderr?: ((s: string) => void) | undefined;
  /**
   * Batch file writes per event-loop turn (one write per batch) instead of one
   * synchronous write per line. For the long-running agent; call flush() or
   * close() before exiting.
   */
  buffered?: boolean;
  /**
   * text (default): `time LEVEL [pid] ctx msg key=value`, for people and grep.
   * json: one object per line (time, level, pid, msg, context, fields) for log
   * collectors; stacks stay in a "stack" field.
   */
  format?: LogFormat;
  /**
   * Repeated WARNING and ERROR lines written once per interval with a count (src/log/throttle.ts);
   * shared by every logger of a process that takes the same one (the agent's, its requests').
   */
  throttle?: LogThrottle | undefined;
}

export type LogFormat = 'text' | 'json';
export const LOG_FORMATS: readonly LogFormat[] = ['text', 'json'];

export interface AppLogger extends Logger {
  readonly level: LogLevel;
  child(ctx: LogContext): AppLogger;
  enabled(level: LogLevel): boolean;
  /** Writes buffered lines now (no-op when not buffered). */
  flush(): void;
  /** Flushes and closes the file. */
  close(): void;
}

export function normalizeLevel(level: string | undefined): LogLevel | undefined {
  if (level === undefined || level === '') return 'INFO';
  const up = level.toUpperCase();
  if (up === 'WARN') return 'WARNING';
  return (LOG_LEVELS as readonly string[]).includes(up) ? (up as LogLevel) : undefined;
}

function fmtValue(v: unknown): string {
  if (typeof v === 'string') return /^[^\s"=]+$/.test(v) && v !== '' ? v : JSON.stringify(v);
  if (typeof v === 'number' || typeof v === 'boolean' || v === null) return String(v);
  if (v === undefined) return 'undefined';
  try {
    return JSON.stringify(v) ?? String(v);
  } catch {
    return String(v);
  }
}

interface Sink {
  /** Set to undefined when a write fails (the file is given up). */
  file?: RotatingFile | undefined;
  stderr?: ((s: string) => void) | undefined;
  pending: string[];
  scheduled: boolean;
  buffered: boolean;
  json: boolean;
  throttle?: LogThrottle | undefined;
}

function flushSink(sink: Sink): void {
  sink.scheduled = false;
  if (!sink.file || sink.pending.length === 0) return;
  const chunk = sink.pending.join('');
  sink.pending.length = 0;
  writeFileSafely(sink, chunk);
}

function writeFileSafely(sink: Sink, chunk: string): void {
  try {
    sink.file!.write(chunk);
  } catch (e) {
    // A full disk or unwritable directory must not fail the CNI call; say so once on stderr.
    const file = sink.file;
    sink.file = undefined;
    sink.stderr?.(`${new Date().toISOString()} WARNING [${process.pid}] log file disabled: ${(e as Error).message}\n`);
    file?.close();
  }
}

class LoggerImpl implements AppLogger {
  constructor(
    readonly level: LogLevel,
    private readonly sink: Sink,
    private readonly ctx: LogContext,
    private readonly prefix: string,
  ) {}

  enabled(level: LogLevel): boolean {
    return RANK[level] <= RANK[this.level];
  }

  private log(level: LogLevel, msg: string, fields?: Record<string, unknown>): void {
    if (!this.enabled(level)) return;
    if (this.sink.throttle) {
      const repeated = this.sink.throttle.admit(level, throttleKind(this.prefix, msg, fields));
      if (repeated === undefined) return;
      if (repeated > 0) fields = { ...fields, repeated, repeatedWithinSeconds: this.sink.throttle.intervalMs / 1000 };
    }
    const line = this.sink.json ? this.jsonLine(level, msg, fields) : this.textLine(level, msg, fields);
    this.sink.stderr?.(line);
    if (!this.sink.file) return;
    if (this.sink.buffered) {
      this.sink.pending.push(line);
      if (!this.sink.scheduled) {
        this.sink.scheduled = true;
        setImmediate(() => flushSink(this.sink));
      }
    } else {
      writeFileSafely(this.sink, line);
    }
  }

  private jsonLine(level: LogLevel, msg: string, fields?: Record<string, unknown>): string {
    const obj: Record<string, unknown> = {
      time: new Date().toISOString(),
      level,
      pid: process.pid,
      msg: redactString(msg),
      ...this.ctx,
    };
    if (fields) {
      const safe = redact(fields) as Record<string, unknown>;
      // Fields never overwrite the line's own keys.
      for (const [k, v] of Object.entries(safe)) obj[k in obj ? `field_${k}` : k] = v;
    }
    try {
      return JSON.stringify(obj) + '\n';
    } catch {
      return JSON.stringify({ time: obj.time, level, pid: process.pid, msg: obj.msg, fields: fmtValue(fields) }) + '\n';
    }
  }

  private textLine(level: LogLevel, msg: string, fields?: Record<string, unknown>): string {
    let line = `${new Date().toISOString()} ${level.padEnd(7)} [${process.pid}]${this.prefix} ${redactString(msg)}`;
    if (fields) {
      const safe = redact(fields) as Record<string, unknown>;
      for (const [k, v] of Object.entries(safe)) {
        if (k === 'stack' && typeof v === 'string') continue;
        line += ` ${k}=${fmtValue(v)}`;
      }
      // Stacks go on their own lines so the key=value line stays greppable.
      if (typeof safe['stack'] === 'string') line += '\n    ' + safe['stack'].split('\n').join('\n    ');
    }
    return line + '\n';
  }

  error(msg: string, fields?: Record<string, unknown>): void {
    this.log('ERROR', msg, fields);
  }
  warn(msg: string, fields?: Record<string, unknown>): void {
    this.log('WARNING', msg, fields);
  }
  info(msg: string, fields?: Record<string, unknown>): void {
    this.log('INFO', msg, fields);
  }
  debug(msg: string, fields?: Record<string, unknown>): void {
    this.log('DEBUG', msg, fields);
  }
  child(ctx: LogContext): AppLogger {
    const merged = { ...this.ctx };
    for (const [k, v] of Object.entries(ctx)) if (v !== undefined && v !== '') merged[k] = v;
    return new LoggerImpl(this.level, this.sink, merged, contextPrefix(merged));
  }
  flush(): void {
    flushSink(this.sink);
  }
  close(): void {
    flushSink(this.sink);
    this.sink.file?.close();
  }
}

function contextPrefix(ctx: LogContext): string {
  let s = '';
  if (ctx.containerId) s += ` cid=${ctx.containerId}`;
  if (ctx.podNamespace || ctx.podName) s += ` pod=${ctx.podNamespace ?? ''}/${ctx.podName ?? ''}`;
  for (const [k, v] of Object.entries(ctx)) {
    if (k === 'containerId' || k === 'podNamespace' || k === 'podName' || v === undefined || v === '') continue;
    s += ` ${k}=${fmtValue(v)}`;
  }
  return s;
}

export function createLogger(opts: LoggerOptions = {}): AppLogger {
  const level = normalizeLevel(opts.level) ?? 'INFO';
  const sink: Sink = {
    stderr: opts.stderr,
    pending: [],
    scheduled: false,
    buffered: !!opts.buffered,
    json: opts.format === 'json',
    throttle: opts.throttle,
  };
  if (opts.filePath) {
    sink.file = new RotatingFile({
      path: opts.filePath,
      maxBytes: opts.maxSizeBytes ?? Math.max(1, opts.maxSizeMB ?? 100) * 1024 * 1024,
      maxAgeDays: opts.maxAgeDays ?? 30,
      maxCount: opts.maxCount ?? 10,
    });
  }
  const ctx: LogContext = {};
  for (const [k, v] of Object.entries(opts.context ?? {})) if (v !== undefined && v !== '') ctx[k] = v;
  return new LoggerImpl(level, sink, ctx, contextPrefix(ctx));
}

/**
 * Logger options from a raw (not yet validated) netconf. Lenient on purpose:
 * the strict schema reports bad values as a code-7 error; until then a bad
 * log option must not stop us from logging that error.
 */
export function loggerOptionsFromConf(
  raw: Record<string, unknown>,
): Pick<LoggerOptions, 'level' | 'filePath' | 'maxSizeMB' | 'maxAgeDays' | 'maxCount' | 'format'> {
  const num = (v: unknown, dflt: number) => (typeof v === 'number' && Number.isInteger(v) && v >= 0 ? v : dflt);
  return {
    level: typeof raw['log_level'] === 'string' && normalizeLevel(raw['log_level']) ? raw['log_level'] : 'INFO',
    filePath:
      typeof raw['log_file_path'] === 'string' && raw['log_file_path'].startsWith('/')
        ? raw['log_file_path']
        : undefined,
    maxSizeMB: Math.max(1, num(raw['log_file_max_size'], 100)),
    maxAgeDays: num(raw['log_file_max_age'], 30),
    maxCount: num(raw['log_file_max_count'], 10),
    format: raw['log_format'] === 'json' ? 'json' : 'text',
  };
}
