// Serialising one node's IPAM writers.
//
// Correctness never depends on these locks: every datastore write is a
// compare-and-swap. The locks only stop a node's concurrent ADD/DEL processes
// from fighting over the same block (each conflict costs a re-read and a retry).
//
// Host-wide lock: Node has no flock(), and a pid file needs stale-lock
// stealing, which races (two waiters both see the dead pid; one steals, the
// other then "steals" the live lock). Instead we bind a Linux *abstract* Unix
// socket. bind() on an abstract name is atomic, fails with EADDRINUSE while
// another socket holds the name, and the kernel frees the name when the
// holder's last fd closes, including on SIGKILL or OOM kill; there is no file
// to go stale. Node creates sockets with O_CLOEXEC, so plugins a holder execs
// do not inherit the lock.
// Caveat: abstract names are per network namespace. CNI plugins run in the
// runtime's (host) namespace, so all of one node's invocations meet there.
//
// Abstract names have no permission check: any local user could bind a
// predictable one and stall every ADD (issue 11). So the name is derived from
// a random secret in a root-only file next to the lock path (directory 0700,
// file 0600, both opened without following symlinks): only root can compute
// it. A name becomes visible in /proc/net/unix while held, so a local user
// could still learn it and bind it after a release; a waiter therefore asks
// the kernel who holds the name (SO_PEERCRED) and, when it is not root (nor
// our own user), rotates the secret, which moves every netplugin process to a
// new name. Correctness never depends on the lock (every write is a
// compare-and-swap), so the short overlap a rotation can cause costs at most
// a retry.
// The lock path itself holds the holder's pid for operators (informational
// only; a bounded wait's error names the holder the kernel reports).
import { createHash, randomBytes } from 'node:crypto';
import { closeSync, constants, fstatSync, lstatSync, mkdirSync, openSync, readSync, renameSync, writeSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { createConnection, createServer, type Server } from 'node:net';
import { IpamError } from './errors.js';
import { openNoFollow } from '../safe-open.js';
import { createKeyedQueue } from '../keyed-queue.js';

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
const SECRET_FILE = 'lock-secret';

/**
 * The lock directory must be ours: a real directory (not a symlink) owned by
 * this user that nobody else can write to (so nobody else can plant or swap
 * the secret file). Created 0700 when missing; anything else is refused,
 * never re-moded (it may be a shared directory like /tmp).
 */
const verifiedDirs = new Set<string>();

function secureDir(dir: string): void {
  // Once per process: the agent takes locks all day, and a directory of root's
  // that nobody else can write cannot be swapped under us meanwhile.
  if (verifiedDirs.has(dir)) return;
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  const st = lstatSync(dir);
  const uid = process.geteuid?.() ?? 0;
  if (!st.isDirectory() || st.uid !== uid || st.mode & 0o022) {
    const what = !st.isDirectory() ? 'not a directory' : st.uid !== uid ? `owned by uid ${st.uid}` : `writable by others (mode ${(st.mode & 0o777).toString(8)})`;
    throw new IpamError(
      'lock-unusable',
      `the IPAM lock directory ${dir} is ${what}; it must be a directory of uid ${uid} that only it can write (netplugin creates ${dir} with mode 0700 when it is missing; ipam_lock_file must not point into a shared directory)`,
    );
  }
  verifiedDirs.add(dir);
}

function readSecret(file: string): string | undefined {
  let fd: number;
  try {
    fd = openSync(file, constants.O_RDONLY | constants.O_NOFOLLOW);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw e;
  }
  try {
    const st = fstatSync(fd);
    if (!st.isFile() || st.uid !== (process.geteuid?.() ?? 0) || st.mode & 0o077) return undefined;
    const buf = Buffer.alloc(64);
    const n = readSync(fd, buf, 0, 64, 0);
    const s = buf.toString('utf8', 0, n).trim();
    return /^[0-9a-f]{32,64}$/.test(s) ? s : undefined;
  } finally {
    closeSync(fd);
  }
}

/** Writes a fresh secret atomically (tmp file + rename, so readers never see half of one). */
function writeSecret(file: string): string {
  const secret = randomBytes(24).toString('hex');
  const tmp = `${file}.${process.pid}.${randomBytes(4).toString('hex')}`;
  const fd = openNoFollow(tmp, 'exclusive', 0o600);
  try {
    writeSync(fd, secret + '\n');
  } finally {
    closeSync(fd);
  }
  renameSync(tmp, file);
  return secret;
}

/** The node's lock secret for `path`; created on first use. A bad or foreign file is replaced. */
function lockSecret(path: string): string {
  const dir = dirname(path);
  secureDir(dir);
  const file = join(dir, SECRET_FILE);
  return readSecret(file) ?? writeSecret(file);
}

function abstractName(secret: string, key: string): string {
  // sun_path holds 108 bytes including the leading NUL; 40 hex chars fit easily.
  return '\0netplugin-lock:' + createHash('sha256').update(secret).update('\0').update(key).digest('hex').slice(0, 40);
}

function tryBind(name: string): Promise<Server | undefined> {
  return new Promise((resolve, reject) => {
    const srv = createServer((c) => c.destroy());
    srv.once('error', (e: NodeJS.ErrnoException) => {
      srv.close();
      if (e.code === 'EADDRINUSE') resolve(undefined);
      else reject(e);
    });
    srv.listen({ path: name, backlog: 8 }, () => {
      // Holding the lock must not keep a finished process alive.
      srv.unref();
      resolve(srv);
    });
  });
}

export interface Holder {
  pid?: number;
  uid?: number;
  /** false: a process of another (non-root) user, or a socket not listening as ours do. */
  trusted: boolean;
  /** The connection was refused: the name is bound but not listening, or nobody holds it any more. */
  refused?: boolean;
}

/** Who holds abstract `name`, by SO_PEERCRED of a connection to it; undefined when nobody does any more. */
async function holderOf(name: string): Promise<Holder | undefined> {
  const { peerCred } = await import('../native/index.js');
  return new Promise((resolve) => {
    const c = createConnection({ path: name });
    const done = (h: Holder | undefined) => {
      c.destroy();
      resolve(h);
    };
    c.once('connect', () => {
      const fd = (c as unknown as { _handle?: { fd?: number } })._handle?.fd;
      try {
        const cred = peerCred(fd ?? -1);
        const uid = process.geteuid?.() ?? 0;
        done({ pid: cred.pid, uid: cred.uid, trusted: cred.uid === 0 || cred.uid === uid });
      } catch {
        done({ trusted: true });
      }
    });
    c.once('error', (e: NodeJS.ErrnoException) => {
      // An abstract name refuses both when it is bound without listening
      // (never one of ours: we always listen) and when nobody holds it any
      // more; the caller tells the two apart by trying the bind again.
      if (e.code === 'ECONNREFUSED') done({ trusted: false, refused: true });
      else done(undefined);
    });
  });
}

function describeHolder(h: Holder | undefined): string {
  if (!h) return 'a process that has since let go';
  let comm = '';
  try {
    if (h.pid) {
      const fd = openSync(`/proc/${h.pid}/comm`, constants.O_RDONLY);
      const buf = Buffer.alloc(64);
      comm = buf.toString('utf8', 0, readSync(fd, buf, 0, 64, 0)).trim();
      closeSync(fd);
    }
  } catch {
    /* exited meanwhile */
  }
  return h.pid ? `pid ${h.pid}${comm ? ` (${comm})` : ''}, uid ${h.uid}` : 'a process the kernel did not name';
}

export interface HostLockOptions {
  /** Give up after this long (absent or undefined: 60 s); a CNI runtime's own deadline is usually a few minutes. */
  timeoutMs?: number | undefined;
  /** Lock a sub-key under the same directory and secret (e.g. one pod) instead of the path itself. */
  key?: string;
  /**
   * Called when this acquisition (of the path itself, not a key) finds that
   * another process held the lock since this one last did: what this process
   * remembers of the node's IPAM state may be older than that holder's
   * writes (the agent's read cache then reads the store for a while).
   */
  onTakeover?: (() => void) | undefined;
}

/** How long a waiter polls before asking the kernel who holds the name (then again at this interval). */
const HOLDER_CHECK_MS = 200;

// Lock path -> this process's pid once it wrote the path's pid file (the file
// is the process's, so this memory is too).
const lastWriter = new Map<string, number>();

/** The pid the lock path's file names (undefined: unreadable). */
function pidFileOwner(path: string): number | undefined {
  try {
    const fd = openSync(path, constants.O_RDONLY | constants.O_NOFOLLOW);
    try {
      const buf = Buffer.alloc(16);
      return Number(buf.toString('latin1', 0, readSync(fd, buf, 0, 16, 0)).trim());
    } finally {
      closeSync(fd);
    }
  } catch {
    return undefined;
  }
}

/** Acquire the host-wide lock for `path`, returning the release function. */
export async function acquireHostLock(path: string, opts: HostLockOptions = {}): Promise<() => Promise<void>> {
  const timeoutMs = opts.timeoutMs ?? 60_000;
  const key = opts.key === undefined ? path : `${path}\0${opts.key}`;
  const started = Date.now();
  const deadline = started + timeoutMs;
  let nextCheck = started + HOLDER_CHECK_MS;
  let lastHolder: Holder | undefined;
  // A refused connection seen once: bind again before calling it a squatter.
  let refusedOnce = false;
  for (;;) {
    let srv: Server | undefined;
    let name: string;
    try {
      name = abstractName(lockSecret(path), key);
      srv = await tryBind(name);
    } catch (e) {
      if (e instanceof IpamError) throw e;
      throw new IpamError('lock-unusable', `cannot take the IPAM host lock ${path}: ${(e as Error).message}`);
    }
    if (srv) {
      // The pid file is informational, so a resident agent writes it once, not
      // on every acquisition (a synchronous write per ADD showed in its profile).
      // Reading it back tells the agent that another process (a per-exec
      // plugin) held the lock since: its writes may not be in our caches yet.
      // Only a caller that asks is told; one that does not leaves the news
      // for the next that does.
      if (opts.key === undefined && opts.onTakeover && lastWriter.get(path) === process.pid && pidFileOwner(path) !== process.pid) {
        lastWriter.delete(path);
        opts.onTakeover();
      }
      if (opts.key === undefined && lastWriter.get(path) !== process.pid) {
        try {
          const fd = openNoFollow(path, 'truncate', 0o644);
          writeSync(fd, `${process.pid}\n`);
          closeSync(fd);
          lastWriter.set(path, process.pid);
        } catch {
          // informational only (read-only /var/run in some test setups, or a planted symlink)
        }
      }
      const held = srv;
      return () => new Promise<void>((resolve) => held.close(() => resolve()));
    }
    const now = Date.now();
    if (refusedOnce || now >= nextCheck || now > deadline) {
      nextCheck = now + HOLDER_CHECK_MS;
      lastHolder = await holderOf(name).catch(() => undefined);
      if (lastHolder?.refused && !refusedOnce) {
        // The holder may have let go between our bind and our connect (an
        // abstract name nobody holds refuses too). Rotating the secret then
        // would let us take a new name while another waiter, which bound the
        // old one meanwhile, holds the lock: two holders. Bind again first;
        // only a name that stays bound and still refuses is a squatter's.
        refusedOnce = true;
        continue;
      }
      refusedOnce = false;
      if (lastHolder && !lastHolder.trusted) {
        // Squatted by an unprivileged process: move every netplugin process to a new name.
        writeSecret(join(dirname(path), SECRET_FILE));
        continue;
      }
    }
    if (now > deadline) {
      throw new IpamError(
        'lock-timeout',
        `timed out after ${timeoutMs} ms waiting for the IPAM host lock ${path}${opts.key === undefined ? '' : ` (${opts.key})`}; it is held by ${describeHolder(lastHolder)}`,
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
