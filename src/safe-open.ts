// Opening files root writes in directories others may control (log files,
// lock and pid files): never through a symlink planted at the path, which
// would let whoever can write the directory aim root's write anywhere.
import { constants, openSync } from 'node:fs';

/** Opens `path` for writing without following a symlink there (ELOOP instead). */
export function openNoFollow(path: string, flags: 'append' | 'truncate' | 'exclusive', mode = 0o600): number {
  const base = constants.O_WRONLY | constants.O_CREAT | constants.O_NOFOLLOW;
  const extra = flags === 'append' ? constants.O_APPEND : flags === 'truncate' ? constants.O_TRUNC : constants.O_EXCL;
  return openSync(path, base | extra, mode);
}
