// Rotation with many writers: 20 real processes append numbered lines to one
// log with a tiny size limit, so rotation happens many times while others write.
import { spawn } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync, utimesSync, existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { build } from 'esbuild';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { RotatingFile } from '../../src/log/file.js';

const dir = mkdtempSync(join(tmpdir(), `log-rot-${process.pid}-`));
const bundle = join(dir, 'log.mjs');
const writer = join(dir, 'writer.mjs');

beforeAll(async () => {
  await build({
    entryPoints: [join(__dirname, '../../src/log/index.ts')],
    bundle: true,
    platform: 'node',
    format: 'esm',
    outfile: bundle,
    logLevel: 'warning',
  });
  writeFileSync(
    writer,
    `import { createLogger } from ${JSON.stringify(bundle)};
const [file, id, n, maxBytes] = process.argv.slice(2);
const log = createLogger({ filePath: file, maxSizeBytes: Number(maxBytes), maxCount: 0, maxAgeDays: 0, level: 'INFO' });
for (let i = 0; i < Number(n); i++) log.info('line', { w: id, i });
log.close();
`,
  );
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function runWriter(file: string, id: number, n: number, maxBytes: number): Promise<void> {
  return new Promise((resolve, reject) => {
    const p = spawn(process.execPath, [writer, file, String(id), String(n), String(maxBytes)], {
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    let err = '';
    p.stderr.on('data', (d) => (err += d));
    p.on('error', reject);
    p.on('exit', (code) => (code === 0 ? resolve() : reject(new Error(`writer ${id} exited ${code}: ${err}`))));
  });
}

function allLines(logDir: string, base: string): { lines: string[]; files: string[] } {
  const files = readdirSync(logDir).filter((f) => f.startsWith(base) && !f.endsWith('.lock'));
  const lines = files.flatMap((f) =>
    readFileSync(join(logDir, f), 'utf8')
      .split('\n')
      .filter((l) => l !== ''),
  );
  return { lines, files };
}

describe('rotation under concurrency', () => {
  it('20 processes x 300 lines across many rotations: every line exactly once', async () => {
    const logDir = join(dir, 'concurrent');
    const file = join(logDir, 'cni.log');
    const WRITERS = 20;
    const N = 300;
    await Promise.all(Array.from({ length: WRITERS }, (_, id) => runWriter(file, id, N, 4096)));
    const { lines, files } = allLines(logDir, 'cni.log');
    // Many rotations happened (a file passes 4 KB after ~45 lines; rotations skipped while another writer holds the
    // lock make files larger).
    expect(files.length).toBeGreaterThan(20);
    const seen = new Map<string, number>();
    for (const l of lines) {
      const m = / line w=(\d+) i=(\d+)$/.exec(l);
      expect(m, `malformed or interleaved line: ${l}`).not.toBeNull();
      const key = `${m![1]}:${m![2]}`;
      seen.set(key, (seen.get(key) ?? 0) + 1);
    }
    const dupes = [...seen].filter(([, c]) => c !== 1);
    expect(dupes).toEqual([]);
    expect(seen.size).toBe(WRITERS * N);
    expect(existsSync(file + '.lock')).toBe(false);
  });
});

describe('retention', () => {
  it('keeps at most max_count rotated files, newest ones', () => {
    const logDir = join(dir, 'count');
    const f = new RotatingFile({ path: join(logDir, 'cni.log'), maxBytes: 100, maxAgeDays: 0, maxCount: 3 });
    for (let i = 0; i < 40; i++) f.write(`line ${String(i).padStart(3, '0')} ${'x'.repeat(60)}\n`);
    f.close();
    const rotated = f.rotatedFiles();
    expect(rotated).toHaveLength(3);
    // The survivors are the latest rotations: the last lines written are in them or in the live file.
    const text = rotated.map((p) => readFileSync(p, 'utf8')).join('') + readFileSync(join(logDir, 'cni.log'), 'utf8');
    expect(text).toContain('line 039');
    expect(text).not.toContain('line 000');
  });
  it('keeps the newest files when every rotation falls in the same millisecond', () => {
    vi.useFakeTimers({ toFake: ['Date'] });
    vi.setSystemTime(new Date('2026-11-22T03:30:00.123Z'));
    try {
      const logDir = join(dir, 'frozen');
      const f = new RotatingFile({ path: join(logDir, 'cni.log'), maxBytes: 100, maxAgeDays: 0, maxCount: 3 });
      for (let i = 0; i < 40; i++) f.write(`line ${String(i).padStart(3, '0')} ${'x'.repeat(60)}\n`);
      f.close();
      const text =
        f
          .rotatedFiles()
          .map((p) => readFileSync(p, 'utf8'))
          .join('') + readFileSync(join(logDir, 'cni.log'), 'utf8');
      expect(text).toContain('line 039');
      expect(text).toContain('line 036');
      expect(text).not.toContain('line 030');
    } finally {
      vi.useRealTimers();
    }
  });
  it('orders rotations of the same millisecond numerically (.2 before .10)', () => {
    const logDir = join(dir, 'same-ms');
    const f = new RotatingFile({ path: join(logDir, 'cni.log'), maxBytes: 1 << 20, maxAgeDays: 0, maxCount: 0 });
    f.write('live\n');
    const stamp = '20261122T033000123Z';
    for (const suffix of ['', '.1', '.2', '.10', '.11'])
      writeFileSync(join(logDir, `cni.log.${stamp}.4242${suffix}`), suffix + '\n');
    writeFileSync(join(logDir, 'cni.log.20261122T032959999Z.4242.3'), 'older\n');
    f.close();
    expect(f.rotatedFiles().map((p) => p.slice(p.lastIndexOf('cni.log.') + 8))).toEqual([
      '20261122T032959999Z.4242.3',
      `${stamp}.4242`,
      `${stamp}.4242.1`,
      `${stamp}.4242.2`,
      `${stamp}.4242.10`,
      `${stamp}.4242.11`,
    ]);
  });
  it('removes rotated files older than max_age days', () => {
    const logDir = join(dir, 'age');
    const path = join(logDir, 'cni.log');
    const f = new RotatingFile({ path, maxBytes: 50, maxAgeDays: 2, maxCount: 0 });
    f.write('a'.repeat(60) + '\n'); // rotates once
    const [old] = f.rotatedFiles();
    expect(old).toBeDefined();
    const threeDaysAgo = (Date.now() - 3 * 86_400_000) / 1000;
    utimesSync(old!, threeDaysAgo, threeDaysAgo);
    f.write('b'.repeat(60) + '\n'); // rotates again and cleans up
    f.close();
    const now = f.rotatedFiles();
    expect(now).toHaveLength(1);
    expect(now).not.toContain(old);
  });
  it('breaks a stale lock left by a dead process', () => {
    const logDir = join(dir, 'stale');
    const path = join(logDir, 'cni.log');
    const f = new RotatingFile({ path, maxBytes: 50, maxAgeDays: 0, maxCount: 0 });
    f.write('start\n');
    // A pid that cannot exist (above pid_max) holds the lock.
    writeFileSync(path + '.lock', '4194305\n');
    f.write('c'.repeat(60) + '\n');
    f.close();
    expect(f.rotatedFiles()).toHaveLength(1);
    expect(existsSync(path + '.lock')).toBe(false);
  });
  it('does not rotate while a live process holds the lock, and loses nothing', () => {
    const logDir = join(dir, 'held');
    const path = join(logDir, 'cni.log');
    const f = new RotatingFile({ path, maxBytes: 50, maxAgeDays: 0, maxCount: 0 });
    f.write('start\n');
    writeFileSync(path + '.lock', `${process.pid}\n`);
    f.write('d'.repeat(60) + '\n');
    expect(f.rotatedFiles()).toHaveLength(0);
    rmSync(path + '.lock');
    f.write('e\n');
    f.close();
    expect(f.rotatedFiles()).toHaveLength(1);
    const { lines } = allLines(logDir, 'cni.log');
    expect(lines.sort()).toEqual(['d'.repeat(60), 'e', 'start'].sort());
  });
});

// Issue 11, finding 8: root never appends to wherever a planted symlink points.
describe('log file and symlinks', () => {
  it('a symlink at the log path is not followed; the file is created 0640', async () => {
    const { symlinkSync, statSync } = await import('node:fs');
    const { createLogger } = await import('../../src/log/index.js');
    const victim = join(dir, 'victim');
    writeFileSync(victim, 'precious\n');
    const path = join(dir, 'linked.log');
    symlinkSync(victim, path);
    let err = '';
    const log = createLogger({ filePath: path, level: 'INFO', stderr: (s) => (err += s) });
    log.info('should not land in the victim');
    log.close();
    expect(readFileSync(victim, 'utf8')).toBe('precious\n');
    expect(err).toContain('log file disabled');

    const plain = join(dir, 'plain.log');
    const l2 = createLogger({ filePath: plain, level: 'INFO' });
    l2.info('x');
    l2.close();
    expect(statSync(plain).mode & 0o777).toBe(0o640);
  });
});
