// Serialising one node's IPAM writers.
//
// Correctness never depends on these locks: every datastore write is a
// compare-and-swap. The locks only stop a node's concurrent ADD/DEL processes
// from fighting over the same block (each conflict costs a re-read and a retry).
//
// Host-wide lock: Node has no flock(), and a pid file needs stale-lock
// stealing, which races (two waiters both see the dead pid; one steals, the
// other then "steals" the live lock). Instead we bind a Linux *abstract* Unix
// socket whose name is derived from the lock path. bind() on an abstract name
// is atomic, fails with EADDRINUSE while another socket holds the name, and the
// kernel frees the name when the holder's last fd closes, including on SIGKILL
// or OOM kill; there is no file to go stale. Node creates sockets with
// O_CLOEXEC, so plugins a holder execs do not inherit the lock.
// Caveat: abstract names are per network namespace. CNI plugins run in the
// runtime's (host) namespace, so all of one node's invocations meet there.
// The lock path itself is written with the holder's pid for operators
// (informational only; `ss -xlp | grep netplugin-lock` shows the real holder).
import { createHash } from 'node:crypto';
import { mkdirSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';
import { createServer, type Server } from 'node:net';
import { CniError, ErrorCodes } from '../errors.js';
import { createKeyedQueue } from '../keyed-queue.js';

export const DEFAULT_LOCK_PATH = '/var/run/netplugin/ipam.lock';

function abstractName(path: string): string {
  const base = `netplugin-lock:${path}`;
  // sun_path holds 108 bytes including the leading NUL.
  return '\0' + (Buffer.byteLength(base) <= 100 ? base : `netplugin-lock:sha1:${createHash('sha1').update(path).digest('hex')}`);
}

function tryBind(name: string): Promise<Server | undefined> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.once('error', (e: NodeJS.ErrnoException) => {
      srv.close();
      if (e.code === 'EADDRINUSE') resolve(undefined);
      else reject(e);
    });
    srv.listen({ path: name, backlog: 1 }, () => {
      // Holding the lock must not keep a finished process alive.
      srv.unref();
      resolve(srv);
    });
  });
}

export interface HostLockOptions {
  /** Give up after this long (default 60 s); a CNI runtime's own deadline is usually a few minutes. */
  timeoutMs?: number;
}

const lastWriter = new Map<string, number>();

/** Acquire the host-wide lock for `path`, returning the release function. */
export async function acquireHostLock(path: string, opts: HostLockOptions = {}): Promise<() => Promise<void>> {
  const name = abstractName(path);
  const deadline = Date.now() + (opts.timeoutMs ?? 60_000);
  for (;;) {
    let srv: Server | undefined;
    try {
      srv = await tryBind(name);
    } catch (e) {
      throw new CniError(ErrorCodes.IpamFailure, `cannot take the IPAM host lock ${path}: ${(e as Error).message}`);
    }
    if (srv) {
      // The pid file is informational, so a resident agent writes it once, not
      // on every acquisition (a synchronous write per ADD showed in its profile).
      if (lastWriter.get(path) !== process.pid) {
        try {
          mkdirSync(dirname(path), { recursive: true });
          writeFileSync(path, `${process.pid}\n`);
          lastWriter.set(path, process.pid);
        } catch {
          // informational only (read-only /var/run in some test setups)
        }
      }
      const held = srv;
      return () => new Promise<void>((resolve) => held.close(() => resolve()));
    }
    if (Date.now() > deadline) {
      throw new CniError(
        ErrorCodes.TryAgainLater,
        `timed out after ${opts.timeoutMs ?? 60_000} ms waiting for the IPAM host lock ${path}; another netplugin process on this node holds it (see: ss -xlp | grep netplugin-lock)`,
      );
    }
    // Every waiter polls at the same short, jittered interval. (An
    // exponential backoff favours newcomers, which poll fastest, and starved
    // long waiters for a minute under load.) A failed bind is one syscall.
    await new Promise((r) => setTimeout(r, 2 + Math.random() * 6));
  }
}

/** Run `fn` holding the host-wide lock for `path`. */
export async function withHostLock<T>(path: string, fn: () => Promise<T>, opts: HostLockOptions = {}): Promise<T> {
  const release = await acquireHostLock(path, opts);
  try {
    return await fn();
  } finally {
    await release();
  }
}

const queue = createKeyedQueue();

/**
 * In-process serialisation: calls with the same key run one after another, in
 * call order; different keys run concurrently. (A resident agent uses this in
 * front of withHostLock so its own requests queue instead of polling the socket.)
 */
export function serialize<T>(key: string, fn: () => Promise<T>): Promise<T> {
  return queue.run(key, fn);
}
