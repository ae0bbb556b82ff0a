// The per-exec entry: wires the real process to the dispatcher and exits with its code.
import { readSync, writeSync } from 'node:fs';
import { isatty } from 'node:tty';
import { MAX_STDIN, dispatch } from './dispatch.js';
import { redactString } from '../log/redact.js';
import type { PluginSpec } from './types.js';

/**
 * Environment for plugins we exec (host-local, portmap, ...). Node reads
 * NODE_EXTRA_CA_CERTS at every start (~34 ms measured here); a delegate never
 * needs it, and a Node-based delegate would pay it on every pod.
 */
export function cleanEnv(env: Record<string, string | undefined>): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(env)) {
    if (v !== undefined && k !== 'NODE_EXTRA_CA_CERTS') out[k] = v;
  }
  return out;
}

/** Reads stdin up to one byte past the cap (dispatch refuses anything larger), so a huge input never fills memory. */
function readStdin(): Buffer {
  try {
    const cap = MAX_STDIN + 1;
    const buf = Buffer.allocUnsafe(cap);
    let n = 0;
    for (;;) {
      const got = readSync(0, buf, n, cap - n, null);
      if (got === 0) break;
      n += got;
      if (n >= cap) break;
    }
    return buf.subarray(0, n);
  } catch (e) {
    // A closed, terminal or non-blocking stdin (someone running VERSION by
    // hand) is "no input", which VERSION and the errors handle.
    const code = (e as NodeJS.ErrnoException).code;
    if (code === 'EAGAIN' || code === 'EOF' || code === 'EBADF' || code === 'EINVAL' || code === 'ENXIO')
      return Buffer.alloc(0);
    throw e;
  }
}

/** Blocking write that survives a non-blocking pipe (EAGAIN) so the JSON result is never cut short. */
function writeAll(fd: number, s: string): void {
  const buf = Buffer.from(s);
  let off = 0;
  while (off < buf.length) {
    try {
      off += writeSync(fd, buf, off, buf.length - off);
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'EAGAIN') throw e;
      Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 1);
    }
  }
}

export async function runPlugin<Conf, Rt>(plugin: PluginSpec<Conf, Rt>): Promise<never> {
  // isatty instead of process.stdin: the stream object costs a module load per exec.
  const stdin = isatty(0) ? Buffer.alloc(0) : readStdin();
  let code: number;
  try {
    code = await dispatch(
      {
        env: process.env,
        stdin,
        stdout: (s) => writeAll(1, s),
        stderr: (s) => {
          try {
            writeAll(2, s);
          } catch {
            /* stderr closed by the runtime: logging must not fail the call */
          }
        },
      },
      plugin,
    );
  } catch (e) {
    // dispatch reports everything itself; this is a bug in the reporting.
    writeAll(2, `${plugin.name}: ${redactString((e as Error)?.stack ?? String(e))}\n`);
    writeAll(
      1,
      JSON.stringify({ cniVersion: '1.0.0', code: 999, msg: 'internal error: failed to report a result' }) + '\n',
    );
    code = 1;
  }
  // Exit explicitly: datastore clients may hold sockets open that would keep
  // the process (and the runtime waiting on it) alive.
  process.exit(code);
}
