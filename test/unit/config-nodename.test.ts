import { mkdtempSync, rmSync, writeFileSync, mkdirSync, chmodSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { resolveNodename } from '../../src/config/nodename.js';
import { CniError } from '../../src/errors.js';

const dir = mkdtempSync(join(tmpdir(), `nodename-${process.pid}-`));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('resolveNodename', () => {
  const hostname = () => 'Worker-1.Example.COM';
  it('prefers nodename from the netconf', () => {
    const file = join(dir, 'a');
    writeFileSync(file, 'from-file\n');
    expect(resolveNodename({ nodename: 'from-conf', nodename_file: file }, { hostname })).toBe('from-conf');
  });
  it('reads and trims the nodename file (real file)', () => {
    const file = join(dir, 'b');
    writeFileSync(file, '  node-b \n');
    expect(resolveNodename({ nodename_file: file }, { hostname })).toBe('node-b');
  });
  it('falls back to the lower-cased hostname when the file is missing', () => {
    expect(resolveNodename({ nodename_file: join(dir, 'missing') }, { hostname })).toBe('worker-1.example.com');
  });
  it('falls back when the file is empty', () => {
    const file = join(dir, 'empty');
    writeFileSync(file, '\n');
    expect(resolveNodename({ nodename_file: file }, { hostname })).toBe('worker-1.example.com');
  });
  it('uses the default path when nodename_file is not given', () => {
    const seen: string[] = [];
    const name = resolveNodename(
      {},
      {
        hostname,
        readFile: (p) => {
          seen.push(p);
          return 'default-node';
        },
      },
    );
    expect(name).toBe('default-node');
    expect(seen).toEqual(['/var/lib/netplugin/nodename']);
  });
  it('reports an unreadable file instead of guessing', () => {
    const sub = join(dir, 'isdir');
    mkdirSync(sub);
    chmodSync(sub, 0o755);
    try {
      resolveNodename({ nodename_file: sub }, { hostname });
      throw new Error('expected failure');
    } catch (e) {
      expect(e).toBeInstanceOf(CniError);
      expect((e as CniError).message).toContain(`nodename_file ${sub}: cannot read it (EISDIR)`);
    }
  });
});
