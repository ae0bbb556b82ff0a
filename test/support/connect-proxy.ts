// A throwaway HTTP CONNECT proxy on loopback, for the "behind a proxy" tests:
// it records every CONNECT target, and can map host names to 127.0.0.1 (so a
// client can name a host that only the proxy knows, as behind a real proxy).
import { createServer, type Server } from 'node:http';
import { connect, type Socket } from 'node:net';

export interface ConnectProxy {
  url: string;
  /** host:port of each CONNECT, in order. */
  targets: string[];
  stop(): Promise<void>;
}

export async function startConnectProxy(
  opts: { hosts?: Record<string, string>; auth?: string } = {},
): Promise<ConnectProxy> {
  const targets: string[] = [];
  const sockets = new Set<Socket>();
  const server: Server = createServer((_req, res) => {
    res.writeHead(405).end('CONNECT only');
  });
  server.on('connect', (req, client: Socket) => {
    sockets.add(client);
    client.on('close', () => sockets.delete(client));
    const target = req.url ?? '';
    targets.push(target);
    if (opts.auth && req.headers['proxy-authorization'] !== `Basic ${Buffer.from(opts.auth).toString('base64')}`) {
      client.end('HTTP/1.1 407 Proxy Authentication Required\r\n\r\n');
      return;
    }
    const m = /^\[?([^\]]+?)\]?:(\d+)$/.exec(target);
    if (!m) {
      client.end('HTTP/1.1 400 Bad Request\r\n\r\n');
      return;
    }
    const host = opts.hosts?.[m[1]!] ?? m[1]!;
    const upstream = connect(Number(m[2]), host, () => {
      client.write('HTTP/1.1 200 Connection Established\r\n\r\n');
      upstream.pipe(client);
      client.pipe(upstream);
    });
    sockets.add(upstream);
    upstream.on('close', () => sockets.delete(upstream));
    upstream.on('error', () => client.end('HTTP/1.1 502 Bad Gateway\r\n\r\n'));
    client.on('error', () => upstream.destroy());
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const port = (server.address() as { port: number }).port;
  return {
    url: `http://127.0.0.1:${port}`,
    targets,
    stop: () =>
      new Promise((r) => {
        for (const s of sockets) s.destroy();
        server.close(() => r());
      }),
  };
}
