// The aggregator's HTTP API and web UI (one listener, loopback by default):
//   GET /api/v1/flows[?watch=true]     flows, paged and sorted, or new/updated ones as Server-Sent Events
//   GET /api/v1/flows/hints?type=T     the values a filter can take
//   GET /api/v1/statistics?groupBy=G   counters per policy or rule, with a series per bucket
//   GET /                              the web UI (static files shipped in the package)
// With a token file, every /api/ request needs `Authorization: Bearer TOKEN`.
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { readFileSync, existsSync } from 'node:fs';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { timingSafeEqual, createHash } from 'node:crypto';
import { parseListenAddr } from '../observe/health.js';
import { ACTIONS, REPORTERS, type Flow } from './record.js';
import {
  GROUP_BYS,
  HINT_TYPES,
  SORT_FIELDS,
  type SortField,
  type FlowFilter,
  type FlowQuery,
  type FlowStore,
  type GroupBy,
  type HintType,
} from './store.js';
import { serve, type Listening } from './listen.js';

const MAX_PAGE_SIZE = 10_000;
/** Bytes a watch (SSE) connection may have unsent before it is closed. */
const MAX_SSE_BACKLOG = 8 << 20;

/** A request the API cannot answer as asked: 400 with this message. */
export class ParamError extends Error {
  override name = 'ParamError';
}

const FILTER_PARAMS = [
  'startTimeGte',
  'startTimeLt',
  'action',
  'sourceNamespace',
  'sourceName',
  'destNamespace',
  'destName',
  'destPort',
  'protocol',
  'reporter',
  'policy',
  'namespace',
  'endpoint',
] as const;
const LIST_PARAMS = [...FILTER_PARAMS, 'sortBy', 'pageSize', 'page', 'watch'];

function single(q: URLSearchParams, name: string): string | undefined {
  const all = q.getAll(name);
  if (all.length > 1) throw new ParamError(`parameter ${name} is given ${all.length} times; give it once`);
  return all[0];
}

function checkKnown(q: URLSearchParams, allowed: readonly string[]): void {
  for (const k of new Set(q.keys())) {
    if (!allowed.includes(k))
      throw new ParamError(`unknown parameter ${JSON.stringify(k)}; accepted: ${allowed.join(', ')}`);
  }
}

function int(q: URLSearchParams, name: string, min: number, max: number, what: string): number | undefined {
  const v = single(q, name);
  if (v === undefined) return undefined;
  if (!/^\d+$/.test(v) || Number(v) < min || Number(v) > max)
    throw new ParamError(`parameter ${name}=${JSON.stringify(v)}: expected ${what} (an integer ${min}-${max})`);
  return Number(v);
}

function choice<T extends string>(q: URLSearchParams, name: string, allowed: readonly T[]): T | undefined {
  const v = single(q, name);
  if (v === undefined) return undefined;
  if (!(allowed as readonly string[]).includes(v))
    throw new ParamError(`parameter ${name}=${JSON.stringify(v)}: accepted values are ${allowed.join(', ')}`);
  return v as T;
}

function text(q: URLSearchParams, name: string): string | undefined {
  const v = single(q, name);
  if (v !== undefined && (v === '' || v.length > 253))
    throw new ParamError(`parameter ${name}: expected a value of 1-253 characters`);
  return v;
}

/** The filters of a query string (shared by flows, watch, hints and statistics). */
function parseFilter(q: URLSearchParams): FlowFilter {
  const f: FlowFilter = {};
  const set = <K extends keyof FlowFilter>(k: K, v: FlowFilter[K] | undefined) => {
    if (v !== undefined) f[k] = v;
  };
  set('startTimeGte', int(q, 'startTimeGte', 0, 1e11, 'unix seconds'));
  set('startTimeLt', int(q, 'startTimeLt', 0, 1e11, 'unix seconds'));
  set('action', choice(q, 'action', ACTIONS));
  set('reporter', choice(q, 'reporter', REPORTERS));
  set('destPort', int(q, 'destPort', 0, 65535, 'a port'));
  for (const k of [
    'sourceNamespace',
    'sourceName',
    'destNamespace',
    'destName',
    'protocol',
    'policy',
    'namespace',
    'endpoint',
  ] as const)
    set(k, text(q, k));
  return f;
}

/** GET /api/v1/flows's query string; unknown or bad parameters are a ParamError naming them. */
export function parseFlowQuery(q: URLSearchParams): FlowQuery & { watch: boolean } {
  checkKnown(q, LIST_PARAMS);
  const query: FlowQuery & { watch: boolean } = { ...parseFilter(q), watch: false };
  const watch = choice(q, 'watch', ['true', 'false'] as const);
  query.watch = watch === 'true';
  const sortBy = single(q, 'sortBy');
  if (sortBy !== undefined) {
    const desc = sortBy.startsWith('-');
    const field = desc ? sortBy.slice(1) : sortBy;
    if (!(SORT_FIELDS as readonly string[]).includes(field)) {
      throw new ParamError(
        `parameter sortBy=${JSON.stringify(sortBy)}: accepted values are ${SORT_FIELDS.join(', ')}, each with - in ` +
          `front for descending`,
      );
    }
    query.sortBy = { field: field as SortField, desc };
  }
  const pageSize = int(q, 'pageSize', 1, MAX_PAGE_SIZE, 'the page size');
  if (pageSize !== undefined) query.pageSize = pageSize;
  const page = int(q, 'page', 0, 1e9, 'the page number, from 0');
  if (page !== undefined) query.page = page;
  return query;
}

interface ApiOptions {
  addr: string;
  store: FlowStore;
  /** When set, /api/ requests need this bearer token. */
  token?: string;
  /** Serve the web UI at / (default true). */
  ui?: boolean;
  /** Where the UI's files are (default: flows-ui beside the bundle, else src/flows/ui). */
  uiDir?: string;
  /** Interval of SSE comments that keep idle connections open through proxies (default 15 s). */
  keepAliveMs?: number;
}

interface ApiServer extends Listening {
  /** Open watch (SSE) connections. */
  watchers(): number;
}

const UI_TYPES: Record<string, string> = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.png': 'image/png',
  '.svg': 'image/svg+xml',
};
const UI_FILES = ['index.html', 'app.js', 'style.css'];

/** The UI's files: dist/flows-ui beside the bundle (the package), or the sources (tests run from src/). */
function defaultUiDir(): string {
  const here = dirname(fileURLToPath(import.meta.url));
  for (const d of [join(here, 'flows-ui'), join(here, 'ui'), join(here, '../src/flows/ui')])
    if (existsSync(join(d, 'index.html'))) return d;
  return join(here, 'flows-ui');
}

function sendJson(res: ServerResponse, status: number, body: unknown): void {
  res
    .writeHead(status, { 'content-type': 'application/json', 'cache-control': 'no-store' })
    .end(JSON.stringify(body) + '\n');
}

function digest(s: string): Buffer {
  return createHash('sha256').update(s).digest();
}

export async function startApi(o: ApiOptions): Promise<ApiServer> {
  const { host, port } = parseListenAddr(o.addr);
  const tokenDigest = o.token ? digest(o.token) : undefined;
  const uiDir = o.uiDir ?? defaultUiDir();
  const ui = new Map<string, Buffer>();
  if (o.ui !== false) {
    for (const f of UI_FILES) {
      const p = join(uiDir, f);
      if (!existsSync(p))
        throw new Error(`the web UI's ${f} is missing in ${uiDir} (start with --ui=false to serve the API only)`);
      ui.set(f, readFileSync(p));
    }
  }
  const sse = new Set<ServerResponse>();
  const keepAlive = setInterval(() => {
    for (const r of sse) r.write(': keep-alive\n\n');
  }, o.keepAliveMs ?? 15_000);
  keepAlive.unref();

  const authorized = (req: IncomingMessage): boolean => {
    if (!tokenDigest) return true;
    const h = req.headers.authorization ?? '';
    const m = /^Bearer\s+(\S+)$/i.exec(h);
    return !!m && timingSafeEqual(digest(m[1]!), tokenDigest);
  };

  const watch = (req: IncomingMessage, res: ServerResponse, q: FlowQuery) => {
    res.writeHead(200, {
      'content-type': 'text/event-stream',
      'cache-control': 'no-store',
      connection: 'keep-alive',
      'x-accel-buffering': 'no',
    });
    res.write(': watching flows\n\n');
    sse.add(res);
    const stop = o.store.watch((flows: Flow[]) => {
      // A watcher that stops reading is cut off rather than buffered without end.
      if (res.writableLength > MAX_SSE_BACKLOG) return void res.destroy();
      for (const f of flows) res.write(`data: ${JSON.stringify(f)}\n\n`);
    }, q);
    req.on('close', () => {
      stop();
      sse.delete(res);
    });
  };

  const server: Server = createServer((req, res) => {
    const url = new URL(req.url ?? '/', 'http://x');
    const path = url.pathname;
    try {
      if (req.method !== 'GET' && req.method !== 'HEAD') {
        res.writeHead(405, { allow: 'GET, HEAD', 'content-type': 'text/plain' }).end('method not allowed\n');
        return;
      }
      if (path.startsWith('/api/')) {
        if (!authorized(req)) {
          res.writeHead(401, { 'content-type': 'application/json', 'www-authenticate': 'Bearer' }).end(
            JSON.stringify({
              error: 'missing or wrong bearer token (Authorization: Bearer TOKEN, the token of --api-token-file)',
            }) + '\n',
          );
          return;
        }
        if (path === '/api/v1/flows') {
          const q = parseFlowQuery(url.searchParams);
          if (q.watch) return watch(req, res, q);
          return sendJson(res, 200, o.store.query(q));
        }
        if (path === '/api/v1/flows/hints') {
          checkKnown(url.searchParams, ['type', ...FILTER_PARAMS]);
          const type = choice<HintType>(url.searchParams, 'type', HINT_TYPES);
          if (!type) throw new ParamError(`parameter type is required; accepted values are ${HINT_TYPES.join(', ')}`);
          return sendJson(res, 200, { type, items: o.store.hints(type, parseFilter(url.searchParams)) });
        }
        if (path === '/api/v1/statistics') {
          checkKnown(url.searchParams, ['groupBy', ...FILTER_PARAMS]);
          const groupBy = choice<GroupBy>(url.searchParams, 'groupBy', GROUP_BYS) ?? 'policy';
          return sendJson(res, 200, { groupBy, items: o.store.statistics(groupBy, parseFilter(url.searchParams)) });
        }
        return sendJson(res, 404, {
          error: `no such API path ${path}; use /api/v1/flows, /api/v1/flows/hints or /api/v1/statistics`,
        });
      }
      const file = path === '/' ? 'index.html' : path.slice(1);
      const body = ui.get(file);
      if (!body) {
        res
          .writeHead(404, { 'content-type': 'text/plain' })
          .end(o.ui === false ? 'not found: this aggregator serves the API only (/api/v1/flows)\n' : 'not found\n');
        return;
      }
      res.writeHead(200, {
        'content-type': UI_TYPES[file.slice(file.lastIndexOf('.'))] ?? 'application/octet-stream',
        'cache-control': 'no-cache',
        // Everything the page needs comes from here: no CDN, no inline script.
        'content-security-policy': "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'",
        'x-content-type-options': 'nosniff',
      });
      res.end(req.method === 'HEAD' ? undefined : body);
    } catch (e) {
      if (e instanceof ParamError) return sendJson(res, 400, { error: e.message });
      sendJson(res, 500, { error: (e as Error).message });
    }
  });
  server.headersTimeout = 10_000;
  const listening = await serve(server, host, port, o.addr, 'the API (--api-addr)', () => {
    clearInterval(keepAlive);
    for (const r of sse) r.end();
    server.closeAllConnections();
  });
  return { ...listening, watchers: () => sse.size };
}
