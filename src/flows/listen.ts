// Binding the aggregator's listeners (the agents' collector, the API): one way, one error wording.
import type { Server } from 'node:net';

/** A bound listener: the address it answers on, and close() to stop it. */
export interface Listening {
  host: string;
  port: number;
  close(): Promise<void>;
}

/**
 * Listens on host:port (port 0 picks a free one); a failure names the address and what it is for (the flag that
 * sets it). close() runs `stop` (the caller's timers, and ending the connections it keeps open, which
 * server.close() alone would wait for) and resolves once the server has closed.
 */
export async function serve(
  server: Server,
  host: string,
  port: number,
  addr: string,
  what: string,
  stop: () => void,
): Promise<Listening> {
  await new Promise<void>((resolve, reject) => {
    server.once('error', (e: NodeJS.ErrnoException) =>
      reject(new Error(`cannot listen on ${addr} for ${what}: ${e.code ?? e.message}`)),
    );
    server.listen(port, host, () => resolve());
  });
  const a = server.address();
  const close = () =>
    new Promise<void>((resolve) => {
      stop();
      server.close(() => resolve());
    });
  return { host, port: typeof a === 'object' && a ? a.port : port, close };
}
