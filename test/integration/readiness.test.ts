// Readiness gates against a real HTTP server on 127.0.0.1 (the default
// node:http client, no injected fetch), with small back-off values.
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { parseReadinessGates, waitForReadinessGates } from '../../src/workload/readiness.js';
import { CniError, ErrorCodes } from '../../src/errors.js';

const servers: Server[] = [];

afterEach(async () => {
  // closeAllConnections: a handler that never answers must not keep close() waiting.
  await Promise.all(
    servers.splice(0).map(
      (s) =>
        new Promise<void>((r) => {
          s.close(() => r());
          s.closeAllConnections();
        }),
    ),
  );
});

async function serve(
  handler: (req: IncomingMessage, res: ServerResponse) => void,
): Promise<{ url: string; hits: () => number }> {
  let hits = 0;
  const srv = createServer((req, res) => {
    hits++;
    handler(req, res);
  });
  servers.push(srv);
  await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
  return { url: `http://127.0.0.1:${(srv.address() as AddressInfo).port}/readiness`, hits: () => hits };
}

const fast = { backoff: { initialMs: 20, factor: 2, maxMs: 80 }, perRequestTimeoutMs: 300 };

async function failure(p: Promise<unknown>): Promise<CniError> {
  const e = await p.then(
    () => undefined,
    (x: unknown) => x,
  );
  expect(e).toBeInstanceOf(CniError);
  return e as CniError;
}

describe('readiness gates (real HTTP on 127.0.0.1)', () => {
  it('a gate that is ready at once is probed once', async () => {
    const g = await serve((req, res) => {
      expect(req.method).toBe('GET');
      res.end('ok');
    });
    await waitForReadinessGates([g.url], { ...fast, deadlineMs: 5000 });
    expect(g.hits()).toBe(1);
  });

  it('a gate that answers 503 twice then 200 is ready after 3 probes', async () => {
    const g = await serve((_req, res) => {
      if (g.hits() < 3) {
        res.statusCode = 503;
        res.end('starting');
      } else res.end('ready');
    });
    await waitForReadinessGates([g.url], { ...fast, deadlineMs: 10_000 });
    expect(g.hits()).toBe(3);
  });

  it('a gate that never becomes ready fails with code 11 naming the URL and the last answer', async () => {
    const g = await serve((_req, res) => {
      res.statusCode = 503;
      res.end('starting\n');
    });
    const e = await failure(waitForReadinessGates([g.url], { ...fast, deadlineMs: 400 }));
    expect(e.code).toBe(ErrorCodes.TryAgainLater);
    expect(e.message).toContain(`readiness gate ${g.url} not ready after 400 ms`);
    expect(e.message).toContain(`last answer HTTP 503 'starting'`);
    // Polled repeatedly, not once and not a fixed sleep.
    expect(g.hits()).toBeGreaterThan(2);
  });

  it('connection refused is reported as the last answer', async () => {
    const g = await serve((_req, res) => res.end());
    const closed = servers.pop()!;
    await new Promise<void>((r) => closed.close(() => r()));
    const e = await failure(waitForReadinessGates([g.url], { ...fast, deadlineMs: 300 }));
    expect(e.code).toBe(ErrorCodes.TryAgainLater);
    expect(e.message).toContain(g.url);
    expect(e.message).toContain('ECONNREFUSED');
  });

  it('a gate that never answers hits the per-request timeout', async () => {
    const g = await serve(() => {
      /* never answers; the server's close() below ends the socket */
    });
    const e = await failure(waitForReadinessGates([g.url], { ...fast, perRequestTimeoutMs: 100, deadlineMs: 350 }));
    // The last probe's timeout is cut to what is left of the deadline.
    expect(e.message).toMatch(/last answer no answer within \d+ ms/);
  });

  it('gates are polled in parallel and only the failing one is named', async () => {
    const ok = await serve((_req, res) => res.end('ok'));
    const bad = await serve((_req, res) => {
      res.statusCode = 500;
      res.end('boom');
    });
    const e = await failure(waitForReadinessGates([ok.url, bad.url], { ...fast, deadlineMs: 300 }));
    expect(e.message).toContain(bad.url);
    expect(e.message).not.toContain(ok.url);
    expect(ok.hits()).toBe(1);
  });

  it('a malformed gate URL is a netconf error (7) naming the element', () => {
    expect(() => parseReadinessGates(['http://ok', 'ftp://x'])).toThrow(
      /readiness_gates\[1\]: "ftp:\/\/x" is not an http:\/\/ or https:\/\/ URL/,
    );
    const e = (() => {
      try {
        parseReadinessGates('http://x');
      } catch (x) {
        return x as CniError;
      }
      throw new Error('no error');
    })();
    expect(e.code).toBe(ErrorCodes.InvalidNetworkConfig);
  });
});
