// A log file shared by many short-lived plugin processes (and the agent).
//
// Lines are never lost or duplicated across rotation because:
// - every line is one write(2) on an O_APPEND fd, so the kernel positions each
//   line atomically at the end of whichever inode the fd refers to;
// - rotation only ever renames (moves an inode to a new name, never truncates
//   or copies), and the rotated name is unique, so a rename never replaces a
//   file;
// - a writer still holding the renamed inode may append a few lines to the
//   rotated file; they land there exactly once. It notices the rename (the
//   inode at `path` differs from its fd's) and reopens.
// An exclusive lock file keeps concurrent writers from all rotating at once;
// the size is re-checked by path after taking it. A crashed holder leaves a
// stale lock, which is broken after STALE_MS or when its pid is gone.
import {
  closeSync,
  fstatSync,
  mkdirSync,
  openSync,
  readdirSync,
  readFileSync,
  renameSync,
  statSync,
  unlinkSync,
  writeSync,
  existsSync,
  type Stats,
} from 'node:fs';
import { openNoFollow } from '../safe-open.js';
import { basename, dirname, join } from 'node:path';

const STALE_MS = 10_000;
const DAY_MS = 86_400_000;

interface RotatingFileOptions {
  path: string;
  /** Rotate once the file reaches this many bytes. */
  maxBytes: number;
  /** Remove rotated files older than this (0: keep regardless of age). */
  maxAgeDays: number;
  /** Keep at most this many rotated files (0: no limit). */
  maxCount: number;
}

/** `cni.log.20240131T235959123Z.4242` (plus `.N` if that name was taken). Sorts by time. */
let rotationSeq = 0;
const ROTATED = /^\.(\d{8}T\d{9}Z)\.\d+(\.\d+)?$/;

export class RotatingFile {
  private fd = -1;
  private ino = -1;
  private readonly dir: string;
  private readonly base: string;

  constructor(private readonly opts: RotatingFileOptions) {
    this.dir = dirname(opts.path);
    this.base = basename(opts.path);
  }

  private open(): void {
    if (this.fd >= 0) closeSync(this.fd);
    this.fd = -1;
    // Not through a symlink (root would append wherever it points), and not
    // world-readable (log lines name pods and addresses).
    try {
      this.fd = openNoFollow(this.opts.path, 'append', 0o640);
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'ENOENT') throw e;
      mkdirSync(this.dir, { recursive: true, mode: 0o755 });
      this.fd = openNoFollow(this.opts.path, 'append', 0o640);
    }
    this.ino = fstatSync(this.fd).ino;
  }

  /** Appends one chunk (one or more whole lines) in a single write. */
  write(chunk: string): void {
    if (this.fd < 0) this.open();
    const buf = Buffer.from(chunk);
    let off = 0;
    // A regular-file write is complete unless the disk is full; the loop only
    // guards against a short write, which would split the line otherwise.
    while (off < buf.length) off += writeSync(this.fd, buf, off, buf.length - off);
    const size = fstatSync(this.fd).size;
    let atPath: Stats | undefined;
    try {
      atPath = statSync(this.opts.path);
    } catch {
      atPath = undefined;
    }
    if (!atPath || atPath.ino !== this.ino) {
      // Someone rotated: further lines belong in the new file.
      this.open();
      return;
    }
    if (size >= this.opts.maxBytes) this.rotate();
  }

  close(): void {
    if (this.fd >= 0) closeSync(this.fd);
    this.fd = -1;
  }

  private lockPath(): string {
    return this.opts.path + '.lock';
  }

  private tryLock(): boolean {
    const lock = this.lockPath();
    for (let attempt = 0; attempt < 2; attempt++) {
      try {
        const fd = openSync(lock, 'wx', 0o644);
        writeSync(fd, `${process.pid}\n`);
        closeSync(fd);
        return true;
      } catch (e) {
        if ((e as NodeJS.ErrnoException).code !== 'EEXIST') return false;
        if (!this.isStale(lock)) return false;
        try {
          unlinkSync(lock);
        } catch {
          return false;
        }
      }
    }
    return false;
  }

  private isStale(lock: string): boolean {
    try {
      const st = statSync(lock);
      if (Date.now() - st.mtimeMs > STALE_MS) return true;
      const pid = Number(readFileSync(lock, 'utf8').trim());
      if (!Number.isInteger(pid) || pid <= 0) return false;
      try {
        process.kill(pid, 0);
        return false;
      } catch (e) {
        return (e as NodeJS.ErrnoException).code === 'ESRCH';
      }
    } catch {
      return false;
    }
  }

  private rotate(): void {
    // Whoever holds the lock rotates; the others carry on appending.
    if (!this.tryLock()) return;
    try {
      let st: Stats;
      try {
        st = statSync(this.opts.path);
      } catch {
        return;
      }
      if (st.size < this.opts.maxBytes) return; // rotated by another writer meanwhile
      const stamp = new Date().toISOString().replace(/[-:.]/g, '');
      // A counter, not "first free name": pruning may already have deleted an
      // earlier rotation of this millisecond, and reusing its name would sort the
      // newest file as the oldest (and prune it at once).
      let target: string;
      do target = `${this.opts.path}.${stamp}.${process.pid}.${++rotationSeq}`;
      while (existsSync(target));
      renameSync(this.opts.path, target);
      this.cleanup();
    } finally {
      try {
        unlinkSync(this.lockPath());
      } catch {
        /* broken as stale by another writer: nothing to release */
      }
    }
    this.open();
  }

  /** Rotated files of this log, oldest first. */
  rotatedFiles(): string[] {
    let names: string[];
    try {
      names = readdirSync(this.dir);
    } catch {
      return [];
    }
    return names
      .filter((n) => n.startsWith(this.base) && ROTATED.test(n.slice(this.base.length)))
      .sort((a, b) => {
        const ma = ROTATED.exec(a.slice(this.base.length))!;
        const mb = ROTATED.exec(b.slice(this.base.length))!;
        if (ma[1] !== mb[1]) return ma[1]! < mb[1]! ? -1 : 1;
        // Several rotations within one millisecond get .1, .2, ... .10: numeric
        // order, not text order (".10" < ".2"), or pruning would keep old files.
        const na = Number(ma[2]?.slice(1) ?? 0);
        const nb = Number(mb[2]?.slice(1) ?? 0);
        return na !== nb ? na - nb : a < b ? -1 : 1;
      })
      .map((n) => join(this.dir, n));
  }

  private cleanup(): void {
    const files = this.rotatedFiles();
    const doomed = new Set<string>();
    if (this.opts.maxCount > 0)
      for (const f of files.slice(0, Math.max(0, files.length - this.opts.maxCount))) doomed.add(f);
    if (this.opts.maxAgeDays > 0) {
      const cutoff = Date.now() - this.opts.maxAgeDays * DAY_MS;
      for (const f of files) {
        try {
          if (statSync(f).mtimeMs < cutoff) doomed.add(f);
        } catch {
          /* already gone */
        }
      }
    }
    for (const f of doomed) {
      try {
        unlinkSync(f);
      } catch {
        /* removed concurrently */
      }
    }
  }
}
