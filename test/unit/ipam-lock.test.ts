// The host-wide IPAM lock (abstract Unix socket) and the in-process queue.
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { build } from 'esbuild';
import { ErrorCodes } from '../../src/errors.js';
import { IpamError } from '../../src/ipam/errors.js';
import { toCniError } from '../../src/cni/errors.js';
import { acquireHostLock, serialize, withHostLock } from '../../src/ipam/lock.js';
import { createIpam } from '../../src/ipam/service.js';
import { MemoryDatastore } from '../../src/datastore/memory.js';
import { createPool } from '../support/builders.js';
import { startLockSquatter } from '../support/squatter.js';

let dir: string;
let holderScript: string;
const children = new Set<ChildProcess>();

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'netplugin-lock-test-'));
  // The child runs the real lock module, bundled (Node 20 cannot run .ts).
  await build({ entryPoints: [join(__dirname, '../../src/ipam/lock.ts')], outfile: join(dir, 'lock.mjs'), bundle: true, platform: 'node', format: 'esm', logLevel: 'error' });
  holderScript = join(dir, 'holder.mjs');
  writeFileSync(
    holderScript,
    `import { acquireHostLock } from './lock.mjs';
     await acquireHostLock(process.argv[2]);
     process.stdout.write('held\\n');
     setInterval(() => {}, 1000);`,
  );
});

afterAll(() => {
  for (const c of children) if (c.exitCode === null) c.kill('SIGKILL');
  rmSync(dir, { recursive: true, force: true });
});

function holdInChild(path: string): Promise<ChildProcess> {
  const c = spawn(process.execPath, [holderScript, path], { stdio: ['ignore', 'pipe', 'inherit'] });
  children.add(c);
  return new Promise((resolve, reject) => {
    c.stdout!.on('data', (d: Buffer) => d.toString().includes('held') && resolve(c));
    c.once('exit', (code) => reject(new Error(`holder exited early (${code})`)));
  });
}

describe('host lock', () => {
  it('is exclusive between processes and released when the holder is SIGKILLed', async () => {
    const path = join(dir, `ipam-${process.pid}.lock`);
    const child = await holdInChild(path);
    const e = await acquireHostLock(path, { timeoutMs: 150 }).then(
      () => undefined,
      (err: unknown) => err,
    );
    expect(e).toBeInstanceOf(IpamError);
    expect((e as IpamError).kind).toBe('lock-timeout');
    expect(toCniError(e).code).toBe(ErrorCodes.TryAgainLater);
    expect((e as IpamError).message).toContain(`waiting for the IPAM host lock ${path}`);
    const exited = new Promise((r) => child.once('exit', r));
    child.kill('SIGKILL');
    await exited;
    const release = await acquireHostLock(path, { timeoutMs: 5000 });
    await release();
  });

  it('serialises holders in one process too, and different paths do not block each other', async () => {
    const path = join(dir, `inproc-${process.pid}.lock`);
    const events: string[] = [];
    const releaseA = await acquireHostLock(path);
    const b = withHostLock(path, async () => {
      events.push('B acquired');
    });
    // another path is independent
    await withHostLock(path + '.other', async () => {
      events.push('other path');
    });
    await new Promise((r) => setTimeout(r, 30));
    events.push('A releasing');
    await releaseA();
    await b;
    expect(events).toEqual(['other path', 'A releasing', 'B acquired']);
  });

  it('stays exclusive when holders let go while waiters are checking who holds it (a refused check is not a squatter)', async () => {
    // Holders keep the lock past the 200 ms holder check, so waiters ask the
    // kernel who holds it; a release racing that check once made a waiter
    // rotate the secret and take a new name while another held the old one.
    const path = join(dir, `churn-${process.pid}.lock`);
    let inside = 0;
    let most = 0;
    let rounds = 0;
    await Promise.all(
      Array.from({ length: 6 }, async () => {
        for (let i = 0; i < 3; i++) {
          await withHostLock(path, async () => {
            inside++;
            most = Math.max(most, inside);
            await new Promise((r) => setTimeout(r, 205 + Math.random() * 10));
            inside--;
            rounds++;
          }, { timeoutMs: 30_000 });
        }
      }),
    );
    expect(rounds).toBe(18);
    expect(most).toBe(1);
  });

  it('is released when the function throws', async () => {
    const path = join(dir, `throw-${process.pid}.lock`);
    await expect(withHostLock(path, async () => Promise.reject(new Error('boom')))).rejects.toThrow('boom');
    await withHostLock(path, async () => undefined, { timeoutMs: 1000 });
  });

  it('tells the caller that asks (onTakeover) when another process held the lock since this one did, and only then', async () => {
    const path = join(dir, `takeover-${process.pid}.lock`);
    let seen = 0;
    const onTakeover = () => seen++;
    await withHostLock(path, async () => undefined, { onTakeover });
    await withHostLock(path, async () => undefined, { onTakeover });
    expect(seen).toBe(0);
    // Another process takes the lock (and writes its pid), then goes.
    const child = await holdInChild(path);
    const exited = new Promise((r) => child.once('exit', r));
    child.kill('SIGKILL');
    await exited;
    // A caller that does not ask leaves the news for the next that does.
    await withHostLock(path, async () => undefined, { timeoutMs: 5000 });
    expect(seen).toBe(0);
    await withHostLock(path, async () => undefined, { timeoutMs: 5000, onTakeover });
    expect(seen).toBe(1);
    await withHostLock(path, async () => undefined, { onTakeover });
    expect(seen).toBe(1);
    expect(readFileSync(path, 'utf8').trim()).toBe(String(process.pid));
  });

  it("an Ipam's onLockTakeover (the agent's hook for its read caches) is called by the step that takes the lock after another process held it", async () => {
    const path = join(dir, `ipam-takeover-${process.pid}.lock`);
    const ds = new MemoryDatastore();
    await createPool(ds, 'p', '10.72.0.0/24', { blockSize: 26 });
    let seen = 0;
    const ipam = createIpam(ds, { lock: { file: path, env: {} }, onLockTakeover: () => seen++ });
    const req = (id: string) => ({ handleID: `net.${id}`, node: 'n1', attrs: {}, assignIPv4: true, assignIPv6: false });
    await ipam.assign(req('a'));
    await ipam.assign(req('b'));
    expect(seen).toBe(0);
    const child = await holdInChild(path);
    const exited = new Promise((r) => child.once('exit', r));
    child.kill('SIGKILL');
    await exited;
    await ipam.assign(req('c'));
    expect(seen).toBe(1);
    await ipam.releaseByHandle('net.a');
    expect(seen).toBe(1);
  });

  it('long paths still work (hashed abstract name)', async () => {
    const path = join(dir, 'x'.repeat(200) + '.lock');
    await withHostLock(path, async () => undefined);
  });
});

describe('serialize', () => {
  it('runs same-key calls in call order, one at a time, and a failure does not stop the queue', async () => {
    const log: string[] = [];
    let running = 0;
    const job = (name: string, fail = false) => async () => {
      running++;
      expect(running).toBe(1);
      await new Promise((r) => setTimeout(r, 5));
      log.push(name);
      running--;
      if (fail) throw new Error(name);
      return name;
    };
    const results = await Promise.allSettled([serialize('k', job('a')), serialize('k', job('b', true)), serialize('k', job('c'))]);
    expect(log).toEqual(['a', 'b', 'c']);
    expect(results.map((r) => r.status)).toEqual(['fulfilled', 'rejected', 'fulfilled']);
  });

  it('different keys run concurrently', async () => {
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const first = serialize('k1', () => gate);
    const second = await serialize('k2', async () => 'ran');
    expect(second).toBe('ran');
    release();
    await first;
  });
});

// Issue 11, finding 3: an unprivileged local user cannot stall the node's IPAM.
describe('host lock against an unprivileged squatter', () => {
  it('`nobody` binding the old predictable name, and every lock name it sees in /proc/net/unix, never stalls acquisitions', async () => {
    const path = join(dir, `squat-${process.pid}.lock`);
    const squatter = await startLockSquatter(path, dir);
    try {
      // It cannot plant its own secret: the directory is root's, 0700.
      expect(squatter.out).toMatch(/ready (EACCES|EPERM)/);
      // It squats only when its scan of /proc/net/unix sees the name while we
      // hold it and its bind comes after we let go: hold for varying times so
      // a release falls inside its scan, and go on (bounded by time, not by a
      // cycle count: on a loaded machine its scans are slow) until it has
      // squatted a few times.
      const until = Date.now() + 90_000;
      while (Date.now() < until && squatter.squats < 3) {
        const release = await acquireHostLock(path, { timeoutMs: 30_000 });
        await new Promise((r) => setTimeout(r, 5 + Math.random() * 40));
        await release();
        await new Promise((r) => setTimeout(r, 30));
      }
      expect(squatter.squats).toBeGreaterThanOrEqual(1);
      // And acquisitions still succeed once it holds what it saw.
      for (let i = 0; i < 5; i++) await withHostLock(path, async () => undefined, { timeoutMs: 30_000 });
    } finally {
      await squatter.stop();
    }
  }, 150_000);

  it('a bounded wait names the holder the kernel reports', async () => {
    const path = join(dir, `named-${process.pid}.lock`);
    const child = await holdInChild(path);
    const e = toCniError(await acquireHostLock(path, { timeoutMs: 300 }).catch((err: unknown) => err));
    expect(e.code).toBe(ErrorCodes.TryAgainLater);
    expect(e.message).toContain(`held by pid ${child.pid}`);
    child.kill('SIGKILL');
  });

  it('the pid file is not written through a planted symlink', async () => {
    const target = join(dir, `victim-${process.pid}`);
    writeFileSync(target, 'precious\n');
    const path = join(dir, `link-${process.pid}.lock`);
    symlinkSync(target, path);
    await withHostLock(path, async () => undefined);
    expect(readFileSync(target, 'utf8')).toBe('precious\n');
  });
});
