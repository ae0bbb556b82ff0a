// Binding the aggregator's listeners (the agents' collector, the API): one way, one error wording.
import type { Server } from 'node:net';

/**
 * Listens on host:port and returns the port bound (port 0 picks a free one). A failure names the
 * address and what it is for (the flag that sets it).
 */
export async function listen(server: Server, host: string, port: number, addr: string, what: string): Promise<number> {
  await new Promise<void>((resolve, reject) => {
    server.once('error', (e: NodeJS.ErrnoException) =>
      reject(new Error(`cannot listen on ${addr} for ${what}: ${e.code ?? e.message}`)),
    );
    server.listen(port, host, () => resolve());
  });
  const a = server.address();
  return typeof a === 'object' && a ? a.port : port;
}
