// The per-exec entry dist/netplugin.cjs runs the bundle through a V8 code cache
// (src/bin/common/code-cache.cjs). These run the real built entry, from a copy
// of the package in a temp dir (the cache is written beside the bundle), with
// the cache missing, current, for another build, and corrupt: every start must
// give the same CNI answer, and only a cache of this very build may be used.
import { spawnSync } from 'node:child_process';
import {
  copyFileSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

const ROOT = join(import.meta.dirname, '../..');
const DIST = join(ROOT, 'dist');
const VERSION_ANSWER = { cniVersion: '1.1.0', supportedVersions: ['0.3.0', '0.3.1', '0.4.0', '1.0.0', '1.1.0'] };

let tmp: string;
let pkg: string;
let bundle: string;
let cache: string;
let original: string;

beforeAll(() => {
  if (!existsSync(join(DIST, 'netplugin.bundle.cjs'))) {
    const r = spawnSync(process.execPath, [join(ROOT, 'scripts/build.mjs')], { cwd: ROOT, encoding: 'utf8' });
    if (r.status !== 0) throw new Error(`build failed: ${r.stderr}`);
  }
  tmp = mkdtempSync(join(tmpdir(), `np-code-cache-${process.pid}-`));
  pkg = join(tmp, 'pkg');
  mkdirSync(join(pkg, 'dist'), { recursive: true });
  for (const f of ['netplugin.cjs', 'netplugin.mjs', 'code-cache.cjs', 'netplugin.bundle.cjs'])
    copyFileSync(join(DIST, f), join(pkg, 'dist', f));
  copyFileSync(join(ROOT, 'package.json'), join(pkg, 'package.json'));
  symlinkSync(join(ROOT, 'node_modules'), join(pkg, 'node_modules'));
  bundle = join(pkg, 'dist/netplugin.bundle.cjs');
  cache = `${bundle}.cache`;
  original = readFileSync(bundle, 'utf8');
});
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

interface Run {
  code: number | null;
  out: string;
  /** What the loader reported (NETPLUGIN_CODE_CACHE_DEBUG). */
  cacheLog: string[];
}

/** Runs the entry; command undefined: no CNI_COMMAND at all (how people run `netplugin --version`). */
function run(command: string | undefined, stdin = '', entry = 'netplugin.cjs', args: string[] = []): Run {
  const r = spawnSync(process.execPath, [join(pkg, 'dist', entry), ...args], {
    env: {
      PATH: process.env.PATH ?? '',
      ...(command === undefined ? {} : { CNI_COMMAND: command }),
      CNI_CONTAINERID: 'code-cache-test',
      CNI_NETNS: '/var/run/netns/absent',
      CNI_IFNAME: 'eth0',
      NETPLUGIN_CODE_CACHE_DEBUG: '1',
    },
    input: stdin,
    encoding: 'utf8',
    timeout: 60_000,
  });
  const cacheLog = r.stderr
    .split('\n')
    .filter((l) => l.startsWith('netplugin code cache: '))
    .map((l) => l.slice('netplugin code cache: '.length).replace(/ \(.*\)$/, ''));
  return { code: r.status, out: r.stdout, cacheLog };
}

const header = () => {
  const buf = readFileSync(cache);
  return buf.toString('latin1', 0, buf.indexOf(10));
};
const buildIdOf = (text: string) => /\/\/# netplugin-build ([0-9a-f]+)\n$/.exec(text)?.[1];

// The netconf is wrong in a way the plugin reports before it touches a datastore or a namespace.
const BAD_MTU = JSON.stringify({
  cniVersion: '1.0.0',
  name: 'net',
  type: 'netplugin',
  mtu: 'big',
  etcd_endpoints: 'http://127.0.0.1:1',
  ipam: { type: 'netplugin-ipam' },
});

describe('per-exec code cache', () => {
  it('compiles without a cache, writes one for this build, and uses it from then on', () => {
    rmSync(cache, { force: true });
    const first = run('VERSION');
    expect(first.code).toBe(0);
    expect(JSON.parse(first.out)).toEqual(VERSION_ANSWER);
    expect(first.cacheLog).toEqual(['missing', 'written for VERSION']);
    expect(header()).toBe(`netplugin-code-cache 1 ${buildIdOf(original)} VERSION`);
    const second = run('VERSION');
    expect(JSON.parse(second.out)).toEqual(VERSION_ANSWER);
    expect(second.cacheLog).toEqual(['hit']);
  });

  it('rewrites the cache once for each command it has not seen succeed, and gives the same answers from it', () => {
    rmSync(cache, { force: true });
    run('VERSION');
    // A failed ADD stopped early: it does not train the cache for ADD.
    const add = run('ADD', BAD_MTU);
    expect(add.cacheLog).toEqual(['hit']);
    expect(add.code).not.toBe(0);
    const err = JSON.parse(add.out);
    expect(err.msg).toMatch(/mtu/);
    // A new command that succeeds does (no CNI_COMMAND counts as 'none').
    const version = run(undefined, '', 'netplugin.cjs', ['--version']);
    expect(version.out).toMatch(/^netplugin \d+\.\d+\.\d+/);
    expect(version.cacheLog).toEqual(['hit', 'written for VERSION,none']);
    expect(header()).toBe(`netplugin-code-cache 1 ${buildIdOf(original)} VERSION,none`);
    const ino = statSync(cache).ino;
    expect(run(undefined, '', 'netplugin.cjs', ['--version']).cacheLog).toEqual(['hit']);
    const again = run('ADD', BAD_MTU);
    expect(again.cacheLog).toEqual(['hit']);
    expect(again.code).toBe(add.code);
    expect(JSON.parse(again.out)).toEqual(err);
    expect(statSync(cache).ino).toBe(ino);
    // The ES module entry runs the same program through the same cache.
    const esm = run('ADD', BAD_MTU, 'netplugin.mjs');
    expect(esm.cacheLog).toEqual(['hit']);
    expect(JSON.parse(esm.out)).toEqual(err);
  });

  it('never uses a cache made for another build, even one of the same length', () => {
    // Another build: the same length, one answer key changed, another build id.
    const otherId = buildIdOf(original)!.replace(/./g, (c) => (c === '0' ? '1' : '0'));
    const other = original
      .replaceAll('supportedVersions', 'supportedVersionX')
      .replace(/netplugin-build [0-9a-f]+\n$/, `netplugin-build ${otherId}\n`);
    expect(other.length).toBe(original.length);
    writeFileSync(bundle, other);
    rmSync(cache, { force: true });
    expect(JSON.parse(run('VERSION').out)).toHaveProperty('supportedVersionX');
    const otherCache = readFileSync(cache);
    writeFileSync(bundle, original);

    const r = run('VERSION');
    expect(r.cacheLog).toEqual(['stale', 'written for VERSION']);
    expect(JSON.parse(r.out)).toEqual(VERSION_ANSWER);
    expect(header()).toBe(`netplugin-code-cache 1 ${buildIdOf(original)} VERSION`);

    // Why the build id: V8 alone takes the other build's cache (it checks the source's
    // length, not its text) and runs that build's code.
    const nl = otherCache.indexOf(10);
    writeFileSync(
      cache,
      Buffer.concat([
        Buffer.from(`netplugin-code-cache 1 ${buildIdOf(original)} VERSION\n`),
        otherCache.subarray(nl + 1),
      ]),
    );
    const forged = run('VERSION');
    expect(forged.cacheLog).toEqual(['hit']);
    expect(JSON.parse(forged.out)).toHaveProperty('supportedVersionX');
    rmSync(cache);
  });

  it('answers right, and replaces the cache, when V8 rejects it or it is not a cache at all', () => {
    run('VERSION');
    const good = readFileSync(cache);
    const nl = good.indexOf(10);
    // A header for this build over data V8 cannot use (a truncated write, a disk error).
    writeFileSync(cache, Buffer.concat([good.subarray(0, nl + 1), Buffer.alloc(4096, 0x5a)]));
    const rejected = run('VERSION');
    expect(rejected.cacheLog).toEqual(['rejected', 'written for VERSION']);
    expect(JSON.parse(rejected.out)).toEqual(VERSION_ANSWER);
    expect(run('VERSION').cacheLog).toEqual(['hit']);

    writeFileSync(cache, 'not a cache\n');
    const garbage = run('ADD', BAD_MTU);
    // Replaced even by a failed command (anything beats no usable cache), which trains nothing.
    expect(garbage.cacheLog).toEqual(['stale', 'written for nothing yet']);
    expect(header()).toBe(`netplugin-code-cache 1 ${buildIdOf(original)} `);
    expect(run('VERSION').cacheLog).toEqual(['hit', 'written for VERSION']);
    expect(JSON.parse(garbage.out).msg).toMatch(/mtu/);
  });

  it('runs a bundle without a build id uncached and writes nothing', () => {
    writeFileSync(bundle, original.replace(/\/\/# netplugin-build [0-9a-f]+\n$/, ''));
    rmSync(cache, { force: true });
    try {
      const r = run('VERSION');
      expect(JSON.parse(r.out)).toEqual(VERSION_ANSWER);
      expect(r.cacheLog).toEqual(['missing']);
      expect(existsSync(cache)).toBe(false);
    } finally {
      writeFileSync(bundle, original);
    }
  });
});
