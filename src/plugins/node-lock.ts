// The node's host locks as both plugins take them (src/hostlock owns the
// mechanism): the IPAM lock they hand to createIpam, and the per-veth lock
// that runs one pod's ADD, DEL and CHECK one at a time.
import type { Logger } from '../log/types.js';
import { hostLockPath, ipamHostLock, withHostLock } from '../hostlock/index.js';
import type { IpamHostLock } from '../ipam/index.js';

interface LockCtx {
  conf: { ipam_lock_file?: string | undefined };
  env: Record<string, string | undefined>;
  log: Logger;
}

/** Debug log of a wait (the burst bench reads these). */
const noteWait = (log: Logger, path: string) => (ms: number) => log.debug(`waited ${ms} ms for the host lock ${path}`);

/**
 * The node's IPAM lock for this invocation: the netconf's `ipam_lock_file`
 * (else the environment's, else the default), telling `onTakeover` (the
 * agent's read caches) when another process held it since this one did.
 */
export function nodeIpamLock(ctx: LockCtx, onTakeover: (() => void) | undefined): IpamHostLock {
  const path = hostLockPath(ctx.conf.ipam_lock_file, ctx.env);
  return ipamHostLock(path, { onTakeover, onWaited: noteWait(ctx.log, path) });
}

/** Runs `fn` holding the lock of host veth `hostIfname` (a key under the node's lock path). */
export function withVethLock<T>(ctx: LockCtx, hostIfname: string, fn: () => Promise<T>): Promise<T> {
  const path = hostLockPath(ctx.conf.ipam_lock_file, ctx.env);
  const key = `veth:${hostIfname}`;
  return withHostLock(path, fn, { key, onWaited: noteWait(ctx.log, `${path} (${key})`) });
}
