// One HTTP listener per long-running executable (node agent, kube-controllers):
// /healthz (the process is alive and its loops run: a liveness probe restarts it
// otherwise), /readyz (it can do its job: datastore reachable, caches synced,
// leader or standby), /metrics (Prometheus text). Loopback by default: the
// probes run on the node itself (hostNetwork pods); metrics are scraped through
// a second, metrics-only listener on an address the operator chooses (--metrics-addr).
import { createServer, type Server } from 'node:http';
import { PROMETHEUS_CONTENT_TYPE, type Registry } from './metrics.js';

export interface CheckResult {
  ok: boolean;
  /** Shown in the response body: what is (not) working, for a person reading the probe. */
  detail?: string | Record<string, unknown>;
}

type Check = () => CheckResult | boolean | Promise<CheckResult | boolean>;

interface HealthServerOptions {
  /** `host:port`, `[v6]:port` or `:port` (all addresses). Port 0 picks a free one. */
  addr: string;
  registry?: Registry;
  healthz?: Check;
  readyz?: Check;
  /** A check that takes longer than this fails (a hung datastore must not hang the probe). Default 2 s. */
  checkTimeoutMs?: number;
  /**
   * Serve /metrics only (--metrics-addr): a listener open to the cluster for Prometheus, where a
   * probe path would let anyone make the process read its datastore.
   */
  metricsOnly?: boolean;
}

export interface HealthServer {
  readonly host: string;
  readonly port: number;
  close(): Promise<void>;
}

/** Parses `host:port`; the error names the flag value and the expected form. */
export function parseListenAddr(addr: string): { host: string; port: number } {
  const m = /^(?:\[([0-9a-fA-F:.]+)\]|([^:[\]]*)):(\d{1,5})$/.exec(addr.trim());
  const port = m ? Number(m[3]) : NaN;
  if (!m || !(port >= 0 && port <= 65535)) {
    throw new Error(
      `invalid listen address ${JSON.stringify(addr)}: expected HOST:PORT such as 127.0.0.1:9099, [::1]:9099 or :9099`,
    );
  }
  return { host: m[1] ?? (m[2] || '::'), port };
}

async function runCheck(check: Check | undefined, timeoutMs: number): Promise<CheckResult> {
  if (!check) return { ok: true };
  let timer: NodeJS.Timeout | undefined;
  try {
    const r = await Promise.race([
      Promise.resolve().then(check),
      new Promise<CheckResult>((resolve) => {
        timer = setTimeout(
          () => resolve({ ok: false, detail: `check did not answer within ${timeoutMs} ms` }),
          timeoutMs,
        );
      }),
    ]);
    return typeof r === 'boolean' ? { ok: r } : r;
  } catch (e) {
    return { ok: false, detail: e instanceof Error ? e.message : String(e) };
  } finally {
    if (timer) clearTimeout(timer);
  }
}

export async function startHealthServer(o: HealthServerOptions): Promise<HealthServer> {
  const { host, port } = parseListenAddr(o.addr);
  const timeoutMs = o.checkTimeoutMs ?? 2000;
  const server: Server = createServer((req, res) => {
    const path = (req.url ?? '/').split('?')[0];
    if (req.method !== 'GET' && req.method !== 'HEAD') {
      res.writeHead(405, { allow: 'GET, HEAD', 'content-type': 'text/plain' }).end('method not allowed\n');
      return;
    }
    if (path === '/metrics' && o.registry) {
      res
        .writeHead(200, { 'content-type': PROMETHEUS_CONTENT_TYPE })
        .end(req.method === 'HEAD' ? undefined : o.registry.render());
      return;
    }
    if (!o.metricsOnly && (path === '/healthz' || path === '/livez' || path === '/readyz')) {
      void runCheck(path === '/readyz' ? o.readyz : o.healthz, timeoutMs).then((r) => {
        const body =
          JSON.stringify({ status: r.ok ? 'ok' : 'failing', ...(r.detail !== undefined ? { detail: r.detail } : {}) }) +
          '\n';
        res
          .writeHead(r.ok ? 200 : 503, { 'content-type': 'application/json', 'cache-control': 'no-store' })
          .end(req.method === 'HEAD' ? undefined : body);
      });
      return;
    }
    res
      .writeHead(404, { 'content-type': 'text/plain' })
      .end(o.metricsOnly ? 'not found: try /metrics\n' : 'not found: try /healthz, /readyz or /metrics\n');
  });
  // Probes are short requests: a client that holds a connection open must not
  // keep the agent's listener busy.
  server.requestTimeout = 5000;
  server.headersTimeout = 5000;
  server.keepAliveTimeout = 1000;
  server.maxHeadersCount = 50;
  await new Promise<void>((resolve, reject) => {
    server.once('error', (e: NodeJS.ErrnoException) =>
      reject(
        new Error(
          `cannot listen on ${o.addr} for ${o.metricsOnly ? '/metrics' : '/healthz, /readyz and /metrics'}: ` +
            `${e.code ?? e.message}`,
        ),
      ),
    );
    server.listen(port, host, () => resolve());
  });
  server.unref();
  const addr = server.address();
  const actualPort = typeof addr === 'object' && addr ? addr.port : port;
  return {
    host,
    port: actualPort,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections?.();
        server.close(() => resolve());
      }),
  };
}
