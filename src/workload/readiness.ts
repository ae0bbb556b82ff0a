// Readiness gates (docs/addresses-and-annotations.md): before IPAM and
// networking, every URL in netconf `readiness_gates` is polled with GET until it
// answers 2xx. First probe at once, then exponential back-off with a cap, a
// per-request timeout and one overall deadline; all gates in parallel.
//
// HTTP goes through node:http/https loaded on first use. Measured on these
// machines: the first request through global fetch (undici, lazily
// initialised) costs ~32-47 ms, through node:http ~7-10 ms (including the
// local server's side), and importing node:http ~3 ms.
import type { Logger } from '../log/types.js';
import { WorkloadError } from './errors.js';

interface GateAnswer {
  status: number;
  /** The start of the body (at most ~1 KiB), for the error message. */
  body: string;
}

/** One GET; rejects on connection errors and on timeout. Injected by unit tests. */
type GateFetch = (url: URL, opts: { timeoutMs: number }) => Promise<GateAnswer>;

interface ReadinessOptions {
  /** Delay before the first probe (default 0: probe at once). */
  firstDelayMs?: number;
  /** Delay after the first failed probe, multiplied by `factor` after each further one, capped at `maxMs`. */
  backoff?: { initialMs?: number; factor?: number; maxMs?: number };
  /** Per-request timeout (default 2000 ms). */
  perRequestTimeoutMs?: number;
  /** Overall deadline across all gates (default 30000 ms). */
  deadlineMs?: number;
  log?: Logger;
  fetch?: GateFetch;
  /** Aborts the wait (the agent cancels an ADD the runtime gave up on). */
  signal?: AbortSignal;
}

const READINESS_DEFAULTS = {
  firstDelayMs: 0,
  backoff: { initialMs: 100, factor: 2, maxMs: 2000 },
  perRequestTimeoutMs: 2000,
  deadlineMs: 30_000,
} as const;

/** Parse and check the netconf's `readiness_gates`; code 7 naming the element, value and fix. */
export function parseReadinessGates(urls: unknown): URL[] {
  if (urls === undefined || urls === null) return [];
  if (!Array.isArray(urls)) {
    throw new WorkloadError(
      'malformed',
      `readiness_gates: expected an array of http(s) URLs, got ${JSON.stringify(urls)}`,
    );
  }
  return urls.map((u, i) => parseGate(u, i));
}

function parseGate(u: unknown, i: number): URL {
  let url: URL | undefined;
  if (typeof u === 'string') {
    try {
      url = new URL(u);
    } catch {
      url = undefined;
    }
  }
  if (!url || (url.protocol !== 'http:' && url.protocol !== 'https:')) {
    throw new WorkloadError(
      'malformed',
      `readiness_gates[${i}]: ${JSON.stringify(u)} is not an http:// or https:// URL; write a full URL such as ` +
        `"http://127.0.0.1:9099/readiness"`,
    );
  }
  return url;
}

function formatDuration(ms: number): string {
  return ms < 1000 ? `${Math.round(ms)} ms` : `${Number((ms / 1000).toFixed(1))} s`;
}

function describeAnswer(a: GateAnswer): string {
  const body = a.body.replace(/\s+/g, ' ').trim();
  return `HTTP ${a.status}${body ? ` '${body.length > 200 ? body.slice(0, 200) + '...' : body}'` : ''}`;
}

function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const t = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    const onAbort = (): void => {
      clearTimeout(t);
      reject(signal!.reason);
    };
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}

/** GET through node:http(s), no keep-alive, body truncated to ~1 KiB. */
const httpGet: GateFetch = async (url, { timeoutMs }) => {
  // node:https pulls in node:tls: only an https gate pays for it on the ADD.
  const mod = url.protocol === 'https:' ? await import('node:https') : await import('node:http');
  return new Promise<GateAnswer>((resolve, reject) => {
    let done = false;
    const finish = (err: Error | undefined, ans?: GateAnswer): void => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      if (err) reject(err);
      else resolve(ans!);
    };
    const req = mod.get(
      url,
      { agent: false, headers: { 'user-agent': 'netplugin-readiness', accept: '*/*' } },
      (res) => {
        const chunks: Buffer[] = [];
        let size = 0;
        const complete = (): void =>
          finish(undefined, { status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString('utf8') });
        res.on('data', (c: Buffer) => {
          if (size < 1024) {
            chunks.push(c);
            size += c.length;
          }
          if (size >= 1024) {
            complete();
            res.destroy();
          }
        });
        res.on('end', complete);
        res.on('error', (e) => finish(e));
      },
    );
    req.on('error', (e) => finish(e));
    const timer = setTimeout(() => {
      const e = new Error(`no answer within ${formatDuration(timeoutMs)}`);
      finish(e);
      req.destroy(e);
    }, timeoutMs);
  });
};

type GateOutcome =
  | { url: string; ready: true; attempts: number }
  | { url: string; ready: false; attempts: number; last: string };

/**
 * Resolve when every gate answered 2xx; otherwise throw WorkloadError 'not-ready' (CNI code 11) naming each
 * gate that never became ready and its last answer. Code 11 ("try again later")
 * because a gate that is not ready means a node component is still starting: the
 * condition is transient and the runtime retries the sandbox, which is what
 * the gate exists for. Malformed URLs are code 7 (parseReadinessGates).
 */
export async function waitForReadinessGates(urls: Array<string | URL>, opts: ReadinessOptions = {}): Promise<void> {
  const gates = urls.map((u, i) => (u instanceof URL ? u : parseGate(u, i)));
  if (gates.length === 0) return;
  const log = opts.log;
  const get = opts.fetch ?? httpGet;
  const firstDelay = opts.firstDelayMs ?? READINESS_DEFAULTS.firstDelayMs;
  const initial = opts.backoff?.initialMs ?? READINESS_DEFAULTS.backoff.initialMs;
  const factor = opts.backoff?.factor ?? READINESS_DEFAULTS.backoff.factor;
  const cap = opts.backoff?.maxMs ?? READINESS_DEFAULTS.backoff.maxMs;
  const perRequest = opts.perRequestTimeoutMs ?? READINESS_DEFAULTS.perRequestTimeoutMs;
  const deadlineMs = opts.deadlineMs ?? READINESS_DEFAULTS.deadlineMs;
  const start = Date.now();
  const deadline = start + deadlineMs;

  const poll = async (url: URL): Promise<GateOutcome> => {
    const name = url.href;
    let attempts = 0;
    let last = 'no answer yet';
    let delay = initial;
    if (firstDelay > 0) await sleep(Math.min(firstDelay, Math.max(0, deadline - Date.now())), opts.signal);
    for (;;) {
      const remaining = deadline - Date.now();
      if (remaining <= 0) return { url: name, ready: false, attempts, last };
      attempts++;
      const timeoutMs = Math.min(perRequest, remaining);
      try {
        const ans = await get(url, { timeoutMs });
        if (ans.status >= 200 && ans.status < 300) {
          log?.debug('readiness gate ready', { url: name, attempts, status: ans.status });
          return { url: name, ready: true, attempts };
        }
        last = describeAnswer(ans);
      } catch (e) {
        if (opts.signal?.aborted) throw opts.signal.reason;
        // A probe whose timeout the deadline cut short proves little; keep the
        // earlier real answer ("HTTP 503 'starting'") for the message.
        if (timeoutMs >= perRequest || attempts === 1) last = e instanceof Error ? e.message : String(e);
      }
      log?.debug('readiness gate not ready', { url: name, attempts, last });
      const left = deadline - Date.now();
      if (left <= 0) return { url: name, ready: false, attempts, last };
      await sleep(Math.min(delay, left), opts.signal);
      delay = Math.min(delay * factor, cap);
    }
  };

  const outcomes = await Promise.all(gates.map(poll));
  const failed = outcomes.filter((o): o is Extract<GateOutcome, { ready: false }> => !o.ready);
  if (failed.length) {
    const msg = failed
      .map(
        (f) =>
          `readiness gate ${f.url} not ready after ${formatDuration(deadlineMs)} (${f.attempts} ` +
          `${f.attempts === 1 ? 'probe' : 'probes'}): last answer ${f.last}`,
      )
      .join('; ');
    throw new WorkloadError('not-ready', msg);
  }
  log?.info('readiness gates ready', { gates: gates.length, elapsedMs: Date.now() - start });
}
