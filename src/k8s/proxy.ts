// Reaching the Kubernetes API through an HTTP proxy, as kubectl does: the
// kubeconfig cluster's proxy-url, else (for netpluginctl) HTTPS_PROXY /
// HTTP_PROXY with NO_PROXY, by Go's rules (golang.org/x/net/http/httpproxy):
// lower-case variables first, loopback and localhost never proxied, NO_PROXY
// entries are `*`, host names (also matching subdomains; a leading dot too),
// IP addresses and CIDRs, each with an optional port. The connection is a
// CONNECT tunnel; TLS to the API server runs inside it.
import type { Agent as HttpAgent, AgentOptions } from 'node:http';
import type { Socket } from 'node:net';
import { DatastoreError } from '../errors.js';
import { containsIP, tryParseCidr, tryParseIP } from '../net/cidr.js';

/** The proxy for `server` from the environment, or undefined for a direct connection. */
export function proxyFromEnv(server: URL, env: Record<string, string | undefined>): string | undefined {
  const get = (n: string) => env[n.toLowerCase()] || env[n] || undefined;
  const proxy = server.protocol === 'https:' ? get('HTTPS_PROXY') : get('HTTP_PROXY');
  if (!proxy) return undefined;
  const host = server.hostname.replace(/^\[|\]$/g, '').toLowerCase();
  const port = server.port || (server.protocol === 'https:' ? '443' : '80');
  if (host === 'localhost' || /^127\./.test(host) || host === '::1') return undefined;
  if (bypassed(host, port, get('NO_PROXY') ?? '')) return undefined;
  return proxy;
}

function bypassed(host: string, port: string, noProxy: string): boolean {
  for (let entry of noProxy
    .split(',')
    .map((e) => e.trim().toLowerCase())
    .filter(Boolean)) {
    if (entry === '*') return true;
    const cidr = tryParseCidr(entry, { strict: false });
    if (cidr && entry.includes('/')) {
      const ip = tryParseIP(host);
      if (ip && containsIP(cidr, ip)) return true;
      continue;
    }
    let entryPort: string | undefined;
    const m = /^(\[[^\]]+\]|[^:]+):(\d+)$/.exec(entry);
    if (m) {
      entry = m[1]!;
      entryPort = m[2];
    }
    entry = entry.replace(/^\[|\]$/g, '');
    if (entryPort && entryPort !== port) continue;
    if (entry.startsWith('*.')) entry = entry.slice(1);
    if (
      entry.startsWith('.')
        ? host.endsWith(entry) || host === entry.slice(1)
        : host === entry || host.endsWith(`.${entry}`)
    )
      return true;
  }
  return false;
}

/** A proxy URL from a kubeconfig or the environment, checked: only http:// proxies (CONNECT) are supported. */
export function parseProxyUrl(text: string, source: string): URL {
  let u: URL;
  try {
    u = new URL(/^[a-z][a-z0-9+.-]*:\/\//i.test(text) ? text : `http://${text}`);
  } catch {
    throw new DatastoreError(
      'Invalid',
      `${source}: proxy ${JSON.stringify(text)} is not a URL; use e.g. http://proxy.example.com:3128`,
    );
  }
  if (u.protocol !== 'http:')
    throw new DatastoreError(
      'Invalid',
      `${source}: proxy ${text}: only http:// proxies (HTTP CONNECT) are supported, not ` +
        `${u.protocol.replace(/:$/, '')}`,
    );
  return u;
}

/**
 * Makes `agent` open its connections through a CONNECT tunnel at `proxy`
 * (TLS, for an https agent, then runs inside the tunnel with the agent's own
 * CA, client certificate and server name).
 */
export function tunnelThrough(agent: HttpAgent, proxy: URL, secure: boolean, timeoutMs: number): void {
  type Cb = (err: Error | null, socket?: Socket) => void;
  const a = agent as unknown as {
    createConnection: (opts: AgentOptions & Record<string, unknown>, cb: Cb) => Socket | undefined;
  };
  a.createConnection = (opts: AgentOptions & Record<string, unknown>, cb: Cb) => {
    void (async () => {
      // Builtins stay dynamic: the ESM bundles hoist static ones into every start (node:tls is costly).
      const { request } = await import('node:http');
      const target =
        `${String(opts.host).includes(':') ? `[${String(opts.host)}]` : String(opts.host)}:` + `${String(opts.port)}`;
      const headers: Record<string, string> = { Host: target };
      if (proxy.username)
        headers['Proxy-Authorization'] = `Basic ${Buffer.from(
          `${decodeURIComponent(proxy.username)}:${decodeURIComponent(proxy.password)}`,
        ).toString('base64')}`;
      const req = request({
        host: proxy.hostname.replace(/^\[|\]$/g, ''),
        port: proxy.port || 80,
        method: 'CONNECT',
        path: target,
        headers,
        timeout: timeoutMs,
      });
      req.on('timeout', () =>
        req.destroy(new Error(`proxy ${proxy.host} did not answer CONNECT ${target} within ${timeoutMs} ms`)),
      );
      req.on('error', (e) => cb(new Error(`proxy ${proxy.host}: ${e.message}`)));
      req.on('connect', (res, socket) => {
        if (res.statusCode !== 200) {
          socket.destroy();
          cb(
            new Error(
              `proxy ${proxy.host} refused CONNECT ${target}: ${res.statusCode} ${res.statusMessage ?? ''}`.trim(),
            ),
          );
          return;
        }
        if (!secure) return cb(null, socket);
        // As above: node:tls only for a TLS API server behind the proxy.
        void import('node:tls').then(({ connect }) => {
          const o = opts as Record<string, unknown>;
          const tls = connect({
            socket,
            servername:
              (o.servername as string | undefined) ||
              (/^[\d.:]+$/.test(String(opts.host)) ? undefined : String(opts.host)),
            ca: o.ca as Buffer | undefined,
            cert: o.cert as Buffer | undefined,
            key: o.key as Buffer | undefined,
            rejectUnauthorized: o.rejectUnauthorized !== false,
          } as import('node:tls').ConnectionOptions);
          // The agent reports TLS errors (unknown CA...) from the socket as for a direct connection.
          cb(null, tls as unknown as Socket);
        });
      });
      req.end();
    })();
    return undefined;
  };
}
