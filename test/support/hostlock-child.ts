// Other processes taking the host lock (src/hostlock): the real module, bundled
// (Node 20 cannot run .ts) under node_modules/.cache so that it finds the
// package's addon, run as a child that holds, waits or reports.
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { build } from 'esbuild';

const root = join(dirname(fileURLToPath(import.meta.url)), '../..');

const SCRIPT = `
import { acquireHostLock } from './hostlock-entry.mjs';
const [path, holdMs, timeoutMs, key] = process.argv.slice(2);
process.stdout.write('acquiring\\n');
try {
  const release = await acquireHostLock(path, { timeoutMs: Number(timeoutMs), ...(key ? { key } : {}) });
  process.stdout.write('held\\n');
  if (Number(holdMs) < 0) setInterval(() => {}, 1000);
  else setTimeout(async () => { await release(); process.stdout.write('released\\n'); }, Number(holdMs));
} catch (e) {
  process.stdout.write('error ' + e.kind + ' ' + e.message + '\\n');
  process.exitCode = 1;
}
`;

export interface LockChild {
  readonly proc: ChildProcess;
  readonly pid: number;
  /** Everything it printed. */
  readonly out: string;
  /** Resolves once it printed `line` (rejects if it exits first). */
  until(line: string): Promise<void>;
  kill(): Promise<void>;
}

export interface LockChildren {
  /** The bundled src/hostlock module (for worker threads). */
  readonly lib: string;
  /** A child that takes the lock of `path` (`key`), holds it `holdMs` (< 0: until killed) and releases it. */
  start(path: string, o?: { holdMs?: number; timeoutMs?: number; key?: string }): LockChild;
  /** Kills every child still running and removes the bundle. */
  close(): Promise<void>;
}

export async function lockChildren(): Promise<LockChildren> {
  const dir = join(root, 'node_modules/.cache/netplugin-test', `hostlock-${process.pid}-${Date.now()}`);
  mkdirSync(dir, { recursive: true });
  await build({
    stdin: { contents: SCRIPT, resolveDir: dir, sourcefile: 'child-source.mjs', loader: 'js' },
    outfile: join(dir, 'child.mjs'),
    bundle: true,
    platform: 'node',
    format: 'esm',
    target: 'node20',
    external: ['node-gyp-build'],
    banner: { js: "import { createRequire as __cr } from 'node:module'; const require = __cr(import.meta.url);" },
    plugins: [
      {
        name: 'entry',
        setup(b) {
          b.onResolve({ filter: /hostlock-entry\.mjs$/ }, () => ({ path: join(root, 'src/hostlock/index.ts') }));
        },
      },
    ],
    logLevel: 'error',
  });
  await build({
    entryPoints: [join(root, 'src/hostlock/index.ts')],
    outfile: join(dir, 'lib.mjs'),
    bundle: true,
    platform: 'node',
    format: 'esm',
    target: 'node20',
    external: ['node-gyp-build'],
    banner: { js: "import { createRequire as __cr } from 'node:module'; const require = __cr(import.meta.url);" },
    logLevel: 'error',
  });
  const children = new Set<LockChild>();
  return {
    lib: join(dir, 'lib.mjs'),
    start(path, o = {}) {
      const args = [
        join(dir, 'child.mjs'),
        path,
        String(o.holdMs ?? -1),
        String(o.timeoutMs ?? 60_000),
        ...(o.key ? [o.key] : []),
      ];
      const proc = spawn(process.execPath, args, { stdio: ['ignore', 'pipe', 'inherit'] });
      let out = '';
      proc.stdout!.on('data', (d: Buffer) => (out += d.toString()));
      const exited = new Promise<void>((r) => proc.once('exit', () => r()));
      const child: LockChild = {
        proc,
        pid: proc.pid!,
        get out() {
          return out;
        },
        until: (line) =>
          new Promise((resolve, reject) => {
            const check = () => {
              if (out.split('\n').some((l) => l.startsWith(line))) return resolve();
              if (proc.exitCode !== null || proc.signalCode !== null)
                return reject(new Error(`lock child exited before '${line}': ${out}`));
              setTimeout(check, 5);
            };
            check();
          }),
        kill: async () => {
          if (proc.exitCode === null && proc.signalCode === null) proc.kill('SIGKILL');
          await exited;
        },
      };
      children.add(child);
      return child;
    },
    async close() {
      await Promise.all([...children].map((c) => c.kill()));
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** "maj:min:ino" of `path` as /proc/locks prints it. */
function lockId(path: string): string {
  const st = statSync(path, { bigint: true });
  const major = ((st.dev >> 8n) & 0xfffn) | ((st.dev >> 32n) & ~0xfffn);
  const minor = (st.dev & 0xffn) | ((st.dev >> 12n) & ~0xffn);
  return `${major.toString(16).padStart(2, '0')}:${minor.toString(16).padStart(2, '0')}:${st.ino}`;
}

/** The kernel's view of `path`'s flock: the holder's pid and the pids blocked on it, in /proc/locks order. */
export function flockState(path: string): { holder?: number; blocked: number[] } {
  const id = lockId(path);
  const out: { holder?: number; blocked: number[] } = { blocked: [] };
  for (const line of readFileSync('/proc/locks', 'utf8').split('\n')) {
    const f = line.trim().split(/\s+/);
    if (f[1] === '->' && f[2] === 'FLOCK' && f[6] === id) out.blocked.push(Number(f[5]));
    else if (f[1] === 'FLOCK' && f[5] === id) out.holder = Number(f[4]);
  }
  return out;
}

/** Waits until the kernel shows `pid` blocked on `path`'s lock. */
export async function untilBlocked(path: string, pid: number, ms = 20_000): Promise<void> {
  const end = Date.now() + ms;
  for (;;) {
    try {
      if (flockState(path).blocked.includes(pid)) return;
    } catch {
      /* the file is not there yet */
    }
    if (Date.now() > end) throw new Error(`pid ${pid} never blocked on ${path}'s lock`);
    await new Promise((r) => setTimeout(r, 5));
  }
}
