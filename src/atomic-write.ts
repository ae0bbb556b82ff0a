// Writing a file that something else may read (or execute) at any moment:
// the CNI binaries and conflist the runtime reads, the plugin's kubeconfig the
// agent renews, the files netpluginctl saves. Shared by the CLI and the agent.
import {
  chmodSync,
  closeSync,
  fsyncSync,
  openSync,
  readFileSync,
  renameSync,
  rmSync,
  statSync,
  writeSync,
} from 'node:fs';
import { basename, dirname, join } from 'node:path';

export interface WrittenFile {
  path: string;
  action: 'written' | 'unchanged' | 'would write';
}

/** True when `path` is a regular file with exactly this content and mode (so writing it again changes nothing). */
export function sameFile(path: string, data: Buffer, mode: number): boolean {
  try {
    const st = statSync(path);
    if (!st.isFile() || (st.mode & 0o7777) !== mode || st.size !== data.length) return false;
    return readFileSync(path).equals(data);
  } catch {
    return false;
  }
}

/**
 * Writes `path` so that readers see either the old or the new content: a temp
 * file in the same directory (same filesystem, so rename is atomic), fsync'd
 * and chmod'ed before the rename. Renaming over a running executable is fine
 * (the old inode lives on), unlike writing into it (ETXTBSY).
 */
export function writeFileAtomic(path: string, data: Buffer | string, mode: number): WrittenFile {
  const buf = typeof data === 'string' ? Buffer.from(data) : data;
  if (sameFile(path, buf, mode)) return { path, action: 'unchanged' };
  const tmp = join(dirname(path), `.${basename(path)}.tmp-${process.pid}-${Math.random().toString(36).slice(2, 8)}`);
  try {
    const fd = openSync(tmp, 'wx', mode);
    try {
      let off = 0;
      while (off < buf.length) off += writeSync(fd, buf, off, buf.length - off);
      fsyncSync(fd);
    } finally {
      closeSync(fd);
    }
    // openSync's mode is filtered by the umask.
    chmodSync(tmp, mode);
    renameSync(tmp, path);
  } catch (e) {
    rmSync(tmp, { force: true });
    throw e;
  }
  return { path, action: 'written' };
}
