// The committed prebuilds are what an installed netplugin loads: check they are
// real shared objects for the right machine exporting the N-API entry point,
// and that the x64 one works on its own, without a build/ directory.
import { execFileSync } from 'node:child_process';
import { cpSync, mkdtempSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { NATIVE_ABI_VERSION, packageRoot } from '../../src/native/index.js';

const root = packageRoot();
const ET_DYN = 3;
const EM_X86_64 = 62;
const EM_AARCH64 = 183;
const SHT_DYNSYM = 11;
const STB_GLOBAL = 1;
const STB_WEAK = 2;
const STT_FUNC = 2;

interface ElfInfo {
  type: number;
  machine: number;
  /** Defined global/weak function symbols of .dynsym. */
  exports: string[];
}

/** Minimal ELF64 little-endian reader: header, section table, dynamic symbols. */
function readElf(file: string): ElfInfo {
  const b = readFileSync(file);
  if (b.readUInt32BE(0) !== 0x7f454c46) throw new Error(`${file}: not an ELF file`);
  if (b[4] !== 2 || b[5] !== 1) throw new Error(`${file}: not ELF64 little-endian (class ${b[4]}, data ${b[5]})`);
  const type = b.readUInt16LE(16);
  const machine = b.readUInt16LE(18);
  const shoff = Number(b.readBigUInt64LE(0x28));
  const shentsize = b.readUInt16LE(0x3a);
  const shnum = b.readUInt16LE(0x3c);
  const sec = (i: number) => {
    const o = shoff + i * shentsize;
    return {
      type: b.readUInt32LE(o + 4),
      offset: Number(b.readBigUInt64LE(o + 24)),
      size: Number(b.readBigUInt64LE(o + 32)),
      link: b.readUInt32LE(o + 40),
      entsize: Number(b.readBigUInt64LE(o + 56)),
    };
  };
  const exports: string[] = [];
  for (let i = 0; i < shnum; i++) {
    const s = sec(i);
    if (s.type !== SHT_DYNSYM) continue;
    const strtab = sec(s.link);
    for (let off = s.offset; off + 24 <= s.offset + s.size; off += s.entsize || 24) {
      const nameOff = b.readUInt32LE(off);
      const info = b[off + 4]!;
      const shndx = b.readUInt16LE(off + 6);
      const bind = info >> 4;
      if (shndx === 0 || (bind !== STB_GLOBAL && bind !== STB_WEAK) || (info & 0xf) !== STT_FUNC) continue;
      const start = strtab.offset + nameOff;
      exports.push(b.toString('latin1', start, b.indexOf(0, start)));
    }
  }
  return { type, machine, exports };
}

const tmp: string[] = [];
afterAll(() => {
  for (const d of tmp) rmSync(d, { recursive: true, force: true });
});

describe('prebuilds', () => {
  for (const [dir, machine] of [
    ['linux-x64', EM_X86_64],
    ['linux-arm64', EM_AARCH64],
  ] as const) {
    it(`${dir} is an ELF shared object for machine ${machine} exporting napi_register_module_v1`, () => {
      const files = readdirSync(join(root, 'prebuilds', dir)).filter((f) => f.endsWith('.node'));
      expect(files).toHaveLength(1);
      const elf = readElf(join(root, 'prebuilds', dir, files[0]!));
      expect(elf.type).toBe(ET_DYN);
      expect(elf.machine).toBe(machine);
      expect(elf.exports).toContain('napi_register_module_v1');
    });
  }

  it('the x64 prebuild loads through node-gyp-build with no build/ directory, and works', () => {
    const pkg = mkdtempSync(join(tmpdir(), 'np-prebuild-'));
    tmp.push(pkg);
    cpSync(join(root, 'package.json'), join(pkg, 'package.json'));
    cpSync(join(root, 'prebuilds', 'linux-x64'), join(pkg, 'prebuilds', 'linux-x64'), { recursive: true });
    cpSync(join(root, 'node_modules', 'node-gyp-build'), join(pkg, 'node_modules', 'node-gyp-build'), {
      recursive: true,
    });
    const script = `
      const gyp = require(process.argv[1] + '/node_modules/node-gyp-build');
      const file = gyp.resolve(process.argv[1]);
      const a = gyp(process.argv[1]);
      const nl = a.netlink();
      const lo = nl.linkGet('lo');
      let code = '';
      try { nl.linkGet('np-missing0'); } catch (e) { code = e.code; }
      console.log(JSON.stringify({ file, abi: a.ABI_VERSION, names: nl.linkList().map((l) => l.name), lo: lo.kind, code }));
    `;
    // A child process: the addon must load from a fresh process, with only the prebuild on disk.
    const out = JSON.parse(execFileSync(process.execPath, ['-e', script, pkg], { encoding: 'utf8' }));
    expect(out.file).toBe(join(pkg, 'prebuilds', 'linux-x64', 'netplugin.node'));
    expect(out.abi).toBe(NATIVE_ABI_VERSION);
    expect(out.names).toContain('lo');
    expect(out.lo).toBe('loopback');
    expect(out.code).toBe('ENODEV');
  });
});
