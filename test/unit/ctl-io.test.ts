// ctl's one message for a file the user named that cannot be read
// (src/ctl/io.ts cannotRead), as the commands that read files report it.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { cannotRead, CtlError, readJsonFile, type CtlIO } from '../../src/ctl/io.js';
import { readCtlConfig } from '../../src/ctl/cluster-config.js';
import { datastoreConfig } from '../../src/ctl/session.js';

const dir = mkdtempSync(join(tmpdir(), 'ctl-io-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const io: CtlIO = { env: {}, cwd: dir, stdout: () => undefined, stderr: () => undefined };

describe('cannotRead', () => {
  it('says "no such file" for a missing file and the reason otherwise, as a CtlError', () => {
    const missing = (() => {
      try {
        readCtlConfig(join(dir, 'absent.cfg'), io);
      } catch (e) {
        return e;
      }
    })();
    expect(missing).toBeInstanceOf(CtlError);
    expect((missing as Error).message).toBe(`cannot read --config ${join(dir, 'absent.cfg')}: no such file`);
    // A directory is not readable as a file: the system's reason is kept.
    expect(() => readCtlConfig(dir, io)).toThrow(new RegExp(`^cannot read --config ${dir}: EISDIR`));
    expect(cannotRead('report r.json', new SyntaxError('Unexpected token')).message).toBe(
      'cannot read report r.json: Unexpected token',
    );
  });

  it('datastoreConfig reports a missing or unparsable --config the same way', () => {
    expect(() => datastoreConfig('nope.json', io)).toThrow('cannot read --config nope.json: no such file');
    writeFileSync(join(dir, 'bad.json'), '{');
    expect(() => datastoreConfig('bad.json', io)).toThrow(/^cannot read --config bad\.json: .*JSON/);
  });
});

describe('readJsonFile', () => {
  it("reads a file relative to the caller's directory, and names the file when it is missing or not JSON", () => {
    writeFileSync(join(dir, 'report.json'), '{"version":1}');
    expect(readJsonFile(io, 'report.json', 'report')).toEqual({ version: 1 });
    expect(() => readJsonFile(io, 'gone.json', '-f')).toThrow('cannot read -f gone.json: no such file');
    writeFileSync(join(dir, 'half.json'), '{"version":');
    expect(() => readJsonFile(io, 'half.json', '-f')).toThrow(/^cannot read -f half\.json: .*JSON/);
  });
});
