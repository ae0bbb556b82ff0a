// The node's host locks (src/hostlock): flock on root-only files, waited for in
// the kernel's queue on a thread of their own, bounded, naming the holder.
import { execFileSync } from 'node:child_process';
import {
  chmodSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  readdirSync,
  rmSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { Worker } from 'node:worker_threads';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ErrorCodes } from '../../src/errors.js';
import { toCniError } from '../../src/cni/errors.js';
import {
  DEFAULT_LOCK_PATH,
  HostLockError,
  LOCK_ENV,
  acquireHostLock,
  hostLockPath,
  ipamHostLock,
  withHostLock,
} from '../../src/hostlock/index.js';
import { createIpam } from '../../src/ipam/index.js';
import { nodeIpamLock } from '../../src/plugins/node-lock.js';
import { MemoryDatastore } from '../../src/datastore/memory.js';
import { createPool } from '../support/builders.js';
import { flockState, lockChildren, untilBlocked, type LockChildren } from '../support/hostlock-child.js';
import { startLockSquatter } from '../support/squatter.js';

let dir: string;
let kids: LockChildren;
const CLK_TCK = Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim());

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'netplugin-hostlock-test-'));
  kids = await lockChildren();
}, 60_000);

afterAll(async () => {
  await kids?.close();
  rmSync(dir, { recursive: true, force: true });
});

const failure = (p: Promise<unknown>) =>
  p.then(
    () => undefined,
    (e: unknown) => e,
  );

/** utime + stime of a live process, in clock ticks. */
function cpuTicks(pid: number): number {
  const s = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const f = s.slice(s.lastIndexOf(')') + 2).split(' ');
  return Number(f[11]) + Number(f[12]);
}

describe('hostLockPath', () => {
  it("takes the netconf's ipam_lock_file, else $NETPLUGIN_IPAM_LOCK_FILE, else the default", () => {
    expect(hostLockPath('/run/a.lock', { [LOCK_ENV]: '/run/b.lock' })).toBe('/run/a.lock');
    expect(hostLockPath(undefined, { [LOCK_ENV]: '/run/b.lock' })).toBe('/run/b.lock');
    expect(hostLockPath('', { [LOCK_ENV]: '' })).toBe(DEFAULT_LOCK_PATH);
  });
});

describe('host lock between processes', () => {
  it('is exclusive, and released when the holder is SIGKILLed', async () => {
    const path = join(dir, 'kill.lock');
    const child = kids.start(path);
    await child.until('held');
    const e = await failure(acquireHostLock(path, { timeoutMs: 150 }));
    expect(e).toBeInstanceOf(HostLockError);
    expect((e as HostLockError).kind).toBe('timeout');
    await child.kill();
    const release = await acquireHostLock(path, { timeoutMs: 5000 });
    await release();
  });

  it('a bounded wait ends in code 11 naming the holder the kernel reports (pid, command, uid)', async () => {
    const path = join(dir, 'named.lock');
    const child = kids.start(path);
    await child.until('held');
    expect(flockState(path).holder).toBe(child.pid);
    const e = toCniError(await failure(acquireHostLock(path, { timeoutMs: 300 })));
    expect(e.code).toBe(ErrorCodes.TryAgainLater);
    expect(e.message).toContain(`timed out after 300 ms waiting for the host lock ${path}`);
    expect(e.message).toContain(`held by pid ${child.pid} (node), uid 0`);
    await child.kill();
  });

  it('a waiting process uses no CPU while another holds the lock', async () => {
    const path = join(dir, 'cpu.lock');
    const release = await acquireHostLock(path);
    try {
      const waiter = kids.start(path, { holdMs: 0 });
      await waiter.until('acquiring');
      // The kernel has it queued: from here on it only sleeps (once Node's
      // start-up work, which runs on after the first line, has settled).
      await untilBlocked(path, waiter.pid);
      await new Promise((r) => setTimeout(r, 500));
      const before = cpuTicks(waiter.pid);
      await new Promise((r) => setTimeout(r, 1000));
      const used = cpuTicks(waiter.pid) - before;
      // The abstract-socket lock it replaces polled every 2-8 ms: ~10 ticks per second of waiting.
      expect(used, `${used} ticks of CPU in 1 s of waiting (CLK_TCK ${CLK_TCK})`).toBeLessThanOrEqual(2);
      expect(flockState(path).blocked).toContain(waiter.pid);
      await release();
      await waiter.until('released');
    } finally {
      await release();
    }
  });

  it('waiters take the lock in the order they came (the kernel queues them)', async () => {
    const path = join(dir, 'order.lock');
    const release = await acquireHostLock(path);
    const waiters = [];
    for (let i = 0; i < 5; i++) {
      const w = kids.start(path, { holdMs: 30 });
      await untilBlocked(path, w.pid);
      waiters.push(w);
    }
    expect(flockState(path).blocked.sort()).toEqual(waiters.map((w) => w.pid).sort());
    const order: number[] = [];
    const watch = waiters.map((w, i) => w.until('held').then(() => order.push(i)));
    await release();
    await Promise.all(watch);
    expect(order).toEqual([0, 1, 2, 3, 4]);
    await Promise.all(waiters.map((w) => w.until('released')));
  });

  it('tells the caller that asks (onTakeover) when another process held the lock since this one did, and only then', async () => {
    const path = join(dir, 'takeover.lock');
    let seen = 0;
    const onTakeover = () => seen++;
    await withHostLock(path, async () => undefined, { onTakeover });
    await withHostLock(path, async () => undefined, { onTakeover });
    expect(seen).toBe(0);
    const child = kids.start(path, { holdMs: 0 });
    await child.until('released');
    // A caller that does not ask leaves the news for the next that does.
    await withHostLock(path, async () => undefined);
    expect(seen).toBe(0);
    await withHostLock(path, async () => undefined, { onTakeover });
    expect(seen).toBe(1);
    await withHostLock(path, async () => undefined, { onTakeover });
    expect(seen).toBe(1);
    expect(readFileSync(path, 'utf8').trim()).toBe(String(process.pid));
  });

  it("an Ipam given the node's lock takes it for its steps, and its takeover hook fires for the step after another process held it", async () => {
    const path = join(dir, 'ipam-takeover.lock');
    const ds = new MemoryDatastore();
    await createPool(ds, 'p', '10.72.0.0/24', { blockSize: 26 });
    let seen = 0;
    const ipam = createIpam(ds, { lock: ipamHostLock(path, { onTakeover: () => seen++, timeoutMs: 300 }) });
    const req = (id: string) => ({ handleID: `net.${id}`, node: 'n1', attrs: {}, assignIPv4: true, assignIPv6: false });
    await ipam.assign(req('a'));
    await ipam.assign(req('b'));
    expect(seen).toBe(0);
    const child = kids.start(path);
    await child.until('held');
    // Held elsewhere: the step waits for it (and gives up, bounded).
    expect(toCniError(await failure(ipam.assign(req('c')))).code).toBe(ErrorCodes.TryAgainLater);
    await child.kill();
    await ipam.assign(req('c'));
    expect(seen).toBe(1);
    await ipam.releaseByHandle('net.a');
    expect(seen).toBe(1);
  });

  it("the plugins' node IPAM lock: the netconf's ipam_lock_file, the runtime's takeover hook, and the wait logged", async () => {
    const path = join(dir, 'plugins.lock');
    const ds = new MemoryDatastore();
    await createPool(ds, 'p', '10.73.0.0/24', { blockSize: 26 });
    const logged: string[] = [];
    const log = { error() {}, warn() {}, info() {}, debug: (m: string) => logged.push(m) };
    let seen = 0;
    const ctx = { conf: { ipam_lock_file: path }, env: { [LOCK_ENV]: join(dir, 'not-this.lock') }, log };
    const ipam = () => createIpam(ds, { lock: nodeIpamLock(ctx, () => seen++) });
    const req = (id: string) => ({ handleID: `net.${id}`, node: 'n1', attrs: {}, assignIPv4: true, assignIPv6: false });
    await ipam().assign(req('a'));
    const child = kids.start(path, { holdMs: 300 });
    await child.until('held');
    await ipam().assign(req('b'));
    expect(seen).toBe(1);
    expect(logged.some((m) => /^waited \d+ ms for the host lock /.test(m) && m.endsWith(path))).toBe(true);
    expect(existsSync(join(dir, 'not-this.lock'))).toBe(false);
  });
});

describe('host lock in one process', () => {
  it('serialises holders, and different paths do not block each other', async () => {
    const path = join(dir, 'inproc.lock');
    const events: string[] = [];
    const releaseA = await acquireHostLock(path);
    const b = withHostLock(path, async () => {
      events.push('B acquired');
    });
    await withHostLock(join(dir, 'inproc-other.lock'), async () => {
      events.push('other path');
    });
    await new Promise((r) => setTimeout(r, 30));
    events.push('A releasing');
    await releaseA();
    await b;
    expect(events).toEqual(['other path', 'A releasing', 'B acquired']);
  });

  it('is released when the function throws', async () => {
    const path = join(dir, 'throw.lock');
    await expect(withHostLock(path, async () => Promise.reject(new Error('boom')))).rejects.toThrow('boom');
    await withHostLock(path, async () => undefined, { timeoutMs: 1000 });
  });

  it('keys are locks of their own, exclusive while their files come and go (a released key removes its file)', async () => {
    const path = join(dir, 'keys.lock');
    const inside = new Map<string, number>();
    let most = 0;
    let rounds = 0;
    await Promise.all(
      Array.from({ length: 8 }, async (_, w) => {
        const key = `veth:k${w % 2}`;
        for (let i = 0; i < 6; i++) {
          await withHostLock(
            path,
            async () => {
              inside.set(key, (inside.get(key) ?? 0) + 1);
              most = Math.max(most, inside.get(key)!);
              await new Promise((r) => setTimeout(r, Math.random() * 4));
              inside.set(key, inside.get(key)! - 1);
              rounds++;
            },
            { key, timeoutMs: 30_000 },
          );
        }
      }),
    );
    expect(rounds).toBe(48);
    expect(most).toBe(1);
    // Nothing piles up: only the path's own file (if any) stays.
    expect(readdirSync(dir).filter((f) => f.startsWith('keys.lock.'))).toEqual([]);
    // A key held by another process blocks the same key only.
    const child = kids.start(path, { key: 'veth:x' });
    await child.until('held');
    expect(
      ((await failure(acquireHostLock(path, { key: 'veth:x', timeoutMs: 100 }))) as HostLockError).message,
    ).toContain(`(veth:x); it is held by pid ${child.pid}`);
    await withHostLock(path, async () => undefined, { key: 'veth:y', timeoutMs: 100 });
    await child.kill();
  });

  it('many waiters blocked in the kernel at once each give up on their own deadline, and the lock still works after', async () => {
    const path = join(dir, 'many.lock');
    const child = kids.start(path);
    await child.until('held');
    const errs = await Promise.all(
      Array.from({ length: 8 }, (_, i) => failure(acquireHostLock(path, { timeoutMs: 100 + 50 * i }))),
    );
    expect(errs.map((e) => e instanceof HostLockError && e.kind)).toEqual(Array(8).fill('timeout'));
    // None is left queued in the kernel behind the holder.
    expect(flockState(path).blocked).toEqual([]);
    await child.kill();
    await withHostLock(path, async () => undefined, { timeoutMs: 1000 });
  });
});

describe('a wait in a worker thread', () => {
  it('ends when the worker is terminated (its thread is woken and joined, not left to sleep until the deadline)', async () => {
    const path = join(dir, 'worker.lock');
    const release = await acquireHostLock(path);
    try {
      const code = `import { acquireHostLock } from ${JSON.stringify(pathToFileURL(kids.lib).href)};
        import { parentPort } from 'node:worker_threads';
        parentPort.postMessage('waiting');
        await acquireHostLock(${JSON.stringify(path)}, { timeoutMs: 40000 });
        parentPort.postMessage('held');`;
      const w = new Worker(new URL(`data:text/javascript,${encodeURIComponent(code)}`));
      const said: string[] = [];
      w.on('message', (m: string) => said.push(m));
      await untilBlocked(path, process.pid);
      // Terminating it tears its environment down: a teardown that sat out the
      // wait (40 s) would time this test out.
      await w.terminate();
      expect(said).toEqual(['waiting']);
      expect(flockState(path).blocked).toEqual([]);
    } finally {
      await release();
    }
    await withHostLock(path, async () => undefined, { timeoutMs: 1000 });
  }, 20_000);
});

describe('who can take the lock', () => {
  it('refuses a lock directory others can write, and a symlink planted at the lock path', async () => {
    const shared = join(dir, 'shared');
    mkdirSync(shared);
    chmodSync(shared, 0o1777);
    const e = await failure(acquireHostLock(join(shared, 'ipam.lock')));
    expect(e).toBeInstanceOf(HostLockError);
    expect((e as HostLockError).kind).toBe('unusable');
    expect(toCniError(e).code).toBe(ErrorCodes.IpamFailure);
    expect((e as Error).message).toMatch(/writable by others \(mode 777\)/);

    const target = join(dir, 'victim');
    writeFileSync(target, 'precious\n');
    const link = join(dir, 'link.lock');
    symlinkSync(target, link);
    expect(((await failure(acquireHostLock(link))) as HostLockError).kind).toBe('unusable');
    expect(readFileSync(target, 'utf8')).toBe('precious\n');
  });

  it("makes its files root's, mode 0600 (narrowing an older, wider one)", async () => {
    const path = join(dir, 'mode.lock');
    writeFileSync(path, '');
    chmodSync(path, 0o644);
    await withHostLock(path, async () => undefined);
    expect(statSync(path).mode & 0o777).toBe(0o600);
    expect(statSync(path).uid).toBe(process.geteuid!());
  });

  it('an unprivileged user can neither open the lock file (so never flock it) nor plant one, even in a directory it can enter', async () => {
    const open = join(dir, 'open-dir');
    mkdirSync(open, { mode: 0o755 });
    chmodSync(dir, 0o711);
    const path = join(open, 'ipam.lock');
    await withHostLock(path, async () => undefined);
    const squatter = await startLockSquatter(path, open);
    try {
      expect(squatter.out).toMatch(/^ready EACCES EACCES/);
      for (let i = 0; i < 20; i++)
        await withHostLock(path, async () => new Promise((r) => setTimeout(r, 5)), { timeoutMs: 1000 });
      expect(squatter.squats).toBe(0);
      expect(existsSync(join(open, 'squat.lock'))).toBe(false);
    } finally {
      await squatter.stop();
      chmodSync(dir, 0o700);
    }
  });
});

describe('layering', () => {
  it('IPAM never imports the host lock: the plugins pass it in', () => {
    const ipamDir = join(__dirname, '../../src/ipam');
    const offenders = readdirSync(ipamDir).filter((f) =>
      /from '\.\.\/hostlock\//.test(readFileSync(join(ipamDir, f), 'utf8')),
    );
    expect(offenders).toEqual([]);
  });
});
