import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { build } from 'esbuild';
import { createWorkerPool, type WorkerPool } from '../../src/agent/worker-pool.js';

// Worker threads run plain JS (no vitest transform), so the test module is
// written out as .mjs; the real worker entry is bundled as scripts/build.mjs does.
const TEST_MODULE = `
import { threadId } from 'node:worker_threads';
export function add(a, b) { return a + b; }
export async function echo(v) { return v; }
export function tid() { return threadId; }
class NetlinkError extends Error {
  constructor(code, subject) { super('RTM_DELLINK ' + subject + ': ' + code); this.name = 'NetlinkError'; this.code = code; this.errno = 19; this.op = 'RTM_DELLINK'; this.subject = subject; this.extack = undefined; }
}
export function netlinkFail(subject) { throw new NetlinkError('ENODEV', subject); }
export function typeErr() { throw new TypeError('vethAdd: opts.name must be a string'); }
export function throwString() { throw 'plain string'; }
export function unclonable() { return () => 1; }
// Blocks this thread until n threads arrived: only completes if n calls run at once.
export function rendezvous(sab, n) {
  const a = new Int32Array(sab);
  Atomics.add(a, 0, 1);
  Atomics.notify(a, 0);
  const end = Date.now() + 20000;
  for (let v = Atomics.load(a, 0); v < n; v = Atomics.load(a, 0)) {
    if (Date.now() > end) throw new Error('rendezvous: only ' + v + ' of ' + n + ' threads arrived');
    Atomics.wait(a, 0, v, 100);
  }
  return threadId;
}
// Blocks until the main thread sets the flag: proves the caller's loop keeps running.
export function waitForMain(sab) {
  const a = new Int32Array(sab);
  Atomics.wait(a, 0, 0, 20000);
  return Atomics.load(a, 0);
}
export function exitThread() { process.exit(3); }
`;

let dir: string;
let moduleUrl: URL;
const pools: WorkerPool[] = [];
const pool = (size: number, extra: Partial<Parameters<typeof createWorkerPool>[0]> = {}) => {
  const p = createWorkerPool({ module: moduleUrl, size, ...extra });
  pools.push(p);
  return p;
};

beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'np-wpool-'));
  writeFileSync(join(dir, 'mod.mjs'), TEST_MODULE);
  moduleUrl = pathToFileURL(join(dir, 'mod.mjs'));
});
afterEach(async () => {
  await Promise.all(pools.splice(0).map((p) => p.close()));
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('createWorkerPool', () => {
  it('runs exported functions and returns structured-clone results', async () => {
    const p = pool(2);
    expect(await p.call('add', 2, 3)).toBe(5);
    const v = { m: new Map([['a', 1]]), d: new Date(0), b: new Uint8Array([1, 2]), n: 10n };
    expect(await p.call('echo', v)).toEqual(v);
    expect(await p.call<number>('tid')).toBeGreaterThan(0);
  });

  it('accepts an absolute path as the module', async () => {
    const p = pool(1, { module: join(dir, 'mod.mjs') });
    expect(await p.call('add', 1, 1)).toBe(2);
  });

  it('rebuilds thrown errors with their netlink fields', async () => {
    const p = pool(1);
    const e = (await p.call('netlinkFail', 'veth1234').catch((x: unknown) => x)) as Record<string, unknown>;
    expect(e).toBeInstanceOf(Error);
    expect(e).toMatchObject({
      name: 'NetlinkError',
      message: 'RTM_DELLINK veth1234: ENODEV',
      code: 'ENODEV',
      errno: 19,
      op: 'RTM_DELLINK',
      subject: 'veth1234',
    });
    expect(String(e['stack'])).toContain('netlinkFail');
    const t = await p.call('typeErr').catch((x: unknown) => x);
    expect(t).toBeInstanceOf(TypeError);
    expect((t as Error).message).toBe('vethAdd: opts.name must be a string');
    await expect(p.call('throwString')).rejects.toThrow('non-Error thrown: plain string');
    await expect(p.call('unclonable')).rejects.toThrow(/could not be cloned/);
  });

  it('hands errors to a custom reviver', async () => {
    class MyErr extends Error {
      constructor(readonly fields: Record<string, unknown>) {
        super(String(fields['message']));
      }
    }
    const p = pool(1, { reviveError: (f) => new MyErr(f) });
    const e = await p.call('netlinkFail', 'eth0').catch((x: unknown) => x);
    expect(e).toBeInstanceOf(MyErr);
    expect((e as MyErr).fields).toMatchObject({ name: 'NetlinkError', subject: 'eth0', code: 'ENODEV' });
  });

  it('names a function the module does not export', async () => {
    const p = pool(1);
    await expect(p.call('nope')).rejects.toThrow(/exports no function "nope"/);
    await expect(p.call('constructor')).rejects.toThrow(/exports no function "constructor"/);
  });

  it('runs calls on several threads at once', async () => {
    const p = pool(3);
    const sab = new SharedArrayBuffer(4);
    const ids = await Promise.all([1, 2, 3].map(() => p.call<number>('rendezvous', sab, 3)));
    expect(new Set(ids).size).toBe(3);
  });

  it('keeps the calling event loop free while a worker blocks', async () => {
    const p = pool(1);
    const sab = new SharedArrayBuffer(4);
    const call = p.call<number>('waitForMain', sab);
    // Only a running event loop gets here; a pool on this thread would deadlock.
    setImmediate(() => {
      Atomics.store(new Int32Array(sab), 0, 7);
      Atomics.notify(new Int32Array(sab), 0);
    });
    expect(await call).toBe(7);
  });

  it('fails the calls of a thread that exits and replaces the thread', async () => {
    const p = pool(1);
    await expect(p.call('exitThread')).rejects.toThrow(/worker thread exited with code 3/);
    expect(await p.call('add', 4, 4)).toBe(8);
  });

  it('rejects pending and later calls once closed', async () => {
    const p = pool(1);
    const pending = p.call('waitForMain', new SharedArrayBuffer(4));
    await p.close();
    await expect(pending).rejects.toThrow(/closed|exited/);
    await expect(p.call('add', 1, 2)).rejects.toThrow('worker pool is closed');
  });

  it('rejects a bad size naming it', () => {
    expect(() => createWorkerPool({ module: moduleUrl, size: 0 })).toThrow(/worker pool size must be a positive integer, got 0/);
  });

  it('serves the registry of the bundled worker entry (dist/netplugin-worker.mjs)', async () => {
    const out = join(dir, 'netplugin-worker.mjs');
    await build({
      entryPoints: [fileURLToPath(new URL('../../src/bin/netplugin-worker.ts', import.meta.url))],
      outfile: out,
      bundle: true,
      platform: 'node',
      format: 'esm',
      logLevel: 'error',
    });
    const p = pool(1, { module: pathToFileURL(out) });
    expect(await p.call('ping')).toBe('pong');
    // Registry names only: module exports other than the registry are not callable.
    await expect(p.call('workerFunctions')).rejects.toThrow(/exports no function/);
  });
});
