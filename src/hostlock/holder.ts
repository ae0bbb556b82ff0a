// Who holds a host lock, as the kernel reports it: /proc/locks lists every
// lock by device and inode with the pid of the process that took it (flock
// locks do; OFD locks would show -1), blocked requests marked "->". Read only
// when a bounded wait gives up, never on the hot path.
import { closeSync, constants, fstatSync, openSync, readFileSync, readSync } from 'node:fs';

interface LockHolder {
  pid: number;
  /** /proc/<pid>/comm; undefined when the process went meanwhile. */
  command?: string | undefined;
  /** Real uid from /proc/<pid>/status. */
  uid?: number | undefined;
}

/** "maj:min:ino" as /proc/locks prints it (hex device numbers, decimal inode). */
function lockId(fd: number): string {
  const st = fstatSync(fd, { bigint: true });
  const dev = st.dev;
  const major = ((dev >> 8n) & 0xfffn) | ((dev >> 32n) & ~0xfffn);
  const minor = (dev & 0xffn) | ((dev >> 12n) & ~0xffn);
  return `${major.toString(16).padStart(2, '0')}:${minor.toString(16).padStart(2, '0')}:${st.ino}`;
}

function readSmall(path: string): string | undefined {
  try {
    const fd = openSync(path, constants.O_RDONLY);
    try {
      const buf = Buffer.alloc(4096);
      return buf.toString('utf8', 0, readSync(fd, buf, 0, buf.length, 0));
    } finally {
      closeSync(fd);
    }
  } catch {
    return undefined;
  }
}

/** Who holds the flock on the file `fd` is open on; undefined when nobody does (or the kernel does not say). */
export function lockHolder(fd: number): LockHolder | undefined {
  let locks: string;
  try {
    locks = readFileSync('/proc/locks', 'utf8');
  } catch {
    return undefined; // no /proc: the timeout is still reported, without a name
  }
  const id = lockId(fd);
  for (const line of locks.split('\n')) {
    // "3: FLOCK  ADVISORY  WRITE 5973 fe:00:2162834 0 EOF"; waiters read "3: -> FLOCK ...".
    const f = line.trim().split(/\s+/);
    if (f[1] !== 'FLOCK' || f[5] !== id) continue;
    const pid = Number(f[4]);
    if (!Number.isInteger(pid) || pid <= 0) return undefined;
    const command = readSmall(`/proc/${pid}/comm`)?.trim();
    const uid = /^Uid:\s+(\d+)/m.exec(readSmall(`/proc/${pid}/status`) ?? '')?.[1];
    return { pid, command, uid: uid === undefined ? undefined : Number(uid) };
  }
  return undefined;
}

export function describeHolder(h: LockHolder | undefined): string {
  if (!h) return 'a process the kernel did not name (it may have let go just now)';
  return `pid ${h.pid}${h.command ? ` (${h.command})` : ''}${h.uid === undefined ? '' : `, uid ${h.uid}`}`;
}
