// The node's host locks, owned by the plugins: the IPAM lock (one per node,
// taken around every IPAM step of a plugin process; createIpam receives it
// from the plugins as an IpamHostLock) and the per-veth lock of ADD/DEL/CHECK.
//
// Correctness never depends on these locks: every datastore write is a
// compare-and-swap. They stop a node's concurrent ADD/DEL processes from
// fighting over the same block (each conflict costs a re-read and a retry)
// and the same pod's commands from interleaving on its veth.
//
// A lock is flock(2) on a file (native/bind/flock.cc: why flock, how a blocked
// wait sleeps in the kernel's queue and how it is bounded). The kernel queues
// waiters in arrival order, they cost no CPU, and the lock goes when the
// holder's last fd closes, including on SIGKILL or OOM kill: nothing goes
// stale. Files are opened O_CLOEXEC (Node always adds it), so plugins a
// holder execs do not inherit the lock.
//
// Who can take it: the files live in a directory of root's (of this user's)
// that nobody else can write, are opened without following symlinks, and are
// root's with mode 0600. A process of another user can neither open a lock
// file (and flock needs an open file) nor plant or swap one, so it can
// neither take nor squat the lock. A bounded wait (60 s) ends in a
// HostLockError naming the holder the kernel reports in /proc/locks (flock
// records the pid of the process that took it).
import { createHash } from 'node:crypto';
import {
  closeSync,
  constants,
  fchmodSync,
  fstatSync,
  ftruncateSync,
  lstatSync,
  mkdirSync,
  openSync,
  readSync,
  unlinkSync,
  writeSync,
} from 'node:fs';
import { basename, dirname, join } from 'node:path';
import { flockTry, flockWait } from '../dataplane/syscalls.js';
import { HostLockError } from './errors.js';
import { describeHolder, lockHolder } from './holder.js';

export { HostLockError } from './errors.js';

export const DEFAULT_LOCK_PATH = '/var/run/netplugin/ipam.lock';

/** Environment override of the host lock path (tests run several simulated nodes on one host). */
export const LOCK_ENV = 'NETPLUGIN_IPAM_LOCK_FILE';

/**
 * The node's IPAM lock, decided here only: the netconf's `ipam_lock_file`,
 * else $NETPLUGIN_IPAM_LOCK_FILE, else DEFAULT_LOCK_PATH.
 */
export function hostLockPath(file: string | undefined, env: Record<string, string | undefined>): string {
  return file || env[LOCK_ENV] || DEFAULT_LOCK_PATH;
}

interface HostLockOptions {
  /** Give up after this long (absent or undefined: 60 s); a CNI runtime's own deadline is usually a few minutes. */
  timeoutMs?: number | undefined;
  /** Lock a sub-key (e.g. one pod's veth) in the same directory instead of the path itself. */
  key?: string;
  /**
   * Called when this acquisition (of the path itself, not a key) finds that
   * another process held the lock since this one last did: what this process
   * remembers of the node's IPAM state may be older than that holder's
   * writes (the agent's read cache then reads the store for a while).
   */
  onTakeover?: (() => void) | undefined;
  /** Told how long an acquisition that had to wait waited (ms), once it has the lock. */
  onWaited?: ((ms: number) => void) | undefined;
}

const DEFAULT_TIMEOUT_MS = 60_000;

const uid = () => process.geteuid?.() ?? 0;

const verifiedDirs = new Set<string>();

/**
 * The lock directory must be ours: a real directory (not a symlink) owned by
 * this user that nobody else can write to (so nobody else can plant, swap or
 * remove a lock file). Created 0700 when missing; anything else is refused,
 * never re-moded (it may be a shared directory like /tmp).
 */
function secureDir(dir: string): void {
  // Once per process: the agent takes locks all day, and a directory of root's
  // that nobody else can write cannot be swapped under us meanwhile.
  if (verifiedDirs.has(dir)) return;
  try {
    mkdirSync(dir, { recursive: true, mode: 0o700 });
  } catch (e) {
    throw new HostLockError('unusable', `cannot create the lock directory ${dir}: ${(e as Error).message}`);
  }
  const st = lstatSync(dir);
  if (!st.isDirectory() || st.uid !== uid() || st.mode & 0o022) {
    const what = !st.isDirectory()
      ? 'not a directory'
      : st.uid !== uid()
        ? `owned by uid ${st.uid}`
        : `writable by others (mode ${(st.mode & 0o777).toString(8)})`;
    throw new HostLockError(
      'unusable',
      `the lock directory ${dir} is ${what}; it must be a directory of uid ${uid()} that only it can write ` +
        `(netplugin creates ${dir} with mode 0700 when it is missing; ` +
        'ipam_lock_file must not point into a shared directory)',
    );
  }
  verifiedDirs.add(dir);
}

/** The file of a sub-key: beside the path, named by a hash (keys may hold any character). */
function keyFile(path: string, key: string): string {
  return join(dirname(path), `${basename(path)}.${createHash('sha256').update(key).digest('hex').slice(0, 24)}`);
}

function openLockFile(file: string): number {
  try {
    // O_NOFOLLOW: a symlink planted at the path is refused (ELOOP), never followed.
    return openSync(file, constants.O_RDWR | constants.O_CREAT | constants.O_NOFOLLOW, 0o600);
  } catch (e) {
    throw new HostLockError('unusable', `cannot open the lock file ${file}: ${(e as Error).message}`);
  }
}

/**
 * Checks the file a held fd locks: ours, a regular file, and still the one at
 * its path (a key's file is unlinked by the holder that releases it, so a
 * waiter that then gets the old file must take the new one). Returns false
 * for a file that was unlinked meanwhile.
 */
function checkHeld(fd: number, file: string): boolean {
  const st = fstatSync(fd);
  if (!st.isFile() || st.uid !== uid()) {
    throw new HostLockError(
      'unusable',
      `the lock file ${file} is ${st.isFile() ? `owned by uid ${st.uid}` : 'not a regular file'}; ` +
        `remove it (netplugin creates it, mode 0600)`,
    );
  }
  // A file of ours with a wider mode (an older netplugin wrote the lock path
  // 0644): nobody else can have opened it through our 0700 directory; narrow it.
  if (st.mode & 0o077) fchmodSync(fd, 0o600);
  return st.nlink > 0;
}

// Lock path -> this process's pid once it wrote its pid into the path's file
// (the file is the process's, so this memory is too).
const lastWriter = new Map<string, number>();

function readPid(fd: number): number | undefined {
  const buf = Buffer.alloc(16);
  const n = readSync(fd, buf, 0, 16, 0);
  const pid = Number(buf.toString('latin1', 0, n).trim());
  return Number.isInteger(pid) && pid > 0 ? pid : undefined;
}

/**
 * The IPAM lock's file holds the pid of the last process that took it for the
 * first time (written once per process: a resident agent does not pay a write
 * per ADD). Reading it back tells the agent that another process (a per-exec
 * plugin) held the lock since: its writes may not be in our caches yet. Only a
 * caller that asks is told; one that does not leaves the news for the next.
 */
function notePid(fd: number, path: string, onTakeover: (() => void) | undefined): void {
  const mine = lastWriter.get(path) === process.pid;
  if (mine && !onTakeover) return;
  if (mine && readPid(fd) === process.pid) return;
  if (mine) {
    lastWriter.delete(path);
    onTakeover!();
  }
  ftruncateSync(fd, 0);
  writeSync(fd, `${process.pid}\n`, 0);
  lastWriter.set(path, process.pid);
}

/** Acquire the host lock for `path` (or its `key`), returning the release function. */
export async function acquireHostLock(path: string, opts: HostLockOptions = {}): Promise<() => Promise<void>> {
  const timeoutMs = opts.timeoutMs ?? DEFAULT_TIMEOUT_MS;
  const deadline = Date.now() + timeoutMs;
  secureDir(dirname(path));
  const file = opts.key === undefined ? path : keyFile(path, opts.key);
  let waitedFrom: number | undefined;
  for (;;) {
    const fd = openLockFile(file);
    try {
      if (!flockTry(fd)) {
        waitedFrom ??= Date.now();
        const left = Math.max(0, deadline - Date.now());
        if (!(await flockWait(fd, left, file))) {
          const holder = describeHolder(lockHolder(fd));
          const what = opts.key === undefined ? '' : ` (${opts.key})`;
          const msg =
            `timed out after ${timeoutMs} ms waiting for the host lock ${path}${what}; ` + `it is held by ${holder}`;
          throw new HostLockError('timeout', msg);
        }
      }
      if (!checkHeld(fd, file)) {
        closeSync(fd);
        continue;
      }
      if (opts.key === undefined) {
        try {
          notePid(fd, path, opts.onTakeover);
        } catch {
          // The pid is for the takeover hook and operators only (a read-only /var/run in some setups).
        }
      }
    } catch (e) {
      closeSync(fd);
      throw e;
    }
    if (waitedFrom !== undefined) opts.onWaited?.(Date.now() - waitedFrom);
    const keyed = opts.key !== undefined;
    let released = false;
    return async () => {
      if (released) return;
      released = true;
      // A key's file goes with its last use (one per pod would pile up);
      // unlinked while still held, so whoever waits on it retries the path.
      if (keyed) {
        try {
          unlinkSync(file);
        } catch {
          /* removed by hand: nothing to clean */
        }
      }
      closeSync(fd);
    };
  }
}

/** Run `fn` holding the host lock for `path`. */
export async function withHostLock<T>(path: string, fn: () => Promise<T>, opts: HostLockOptions = {}): Promise<T> {
  const release = await acquireHostLock(path, opts);
  try {
    return await fn();
  } finally {
    await release();
  }
}

/**
 * The node's IPAM lock as IPAM takes it (src/ipam IpamHostLock): `id` keys the
 * IPAM's in-process queue and batches, `run` holds the lock around a step.
 */
export function ipamHostLock(
  path: string,
  opts: Pick<HostLockOptions, 'timeoutMs' | 'onTakeover' | 'onWaited'> = {},
): { readonly id: string; run<T>(fn: () => Promise<T>): Promise<T> } {
  return { id: path, run: (fn) => withHostLock(path, fn, opts) };
}
