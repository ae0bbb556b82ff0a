import { describe, expect, it } from 'vitest';
import { assertCommandAllowed, compareVersions, negotiateVersion } from '../../src/cni/version.js';
import { SUPPORTED_VERSIONS, type CniCommand } from '../../src/cni/types.js';
import { CniError } from '../../src/errors.js';

function err(f: () => unknown): CniError {
  try {
    f();
  } catch (e) {
    expect(e).toBeInstanceOf(CniError);
    return e as CniError;
  }
  throw new Error('expected an error');
}

describe('negotiateVersion', () => {
  it.each(SUPPORTED_VERSIONS)('accepts cniVersion %s', (v) => expect(negotiateVersion({ cniVersion: v })).toBe(v));
  it.each(['0.1.0', '0.2.0', '1.2.0', '2.0.0', 'banana'])(
    'rejects cniVersion %s with code 1 naming it and the list',
    (v) => {
      const e = err(() => negotiateVersion({ cniVersion: v }));
      expect(e.code).toBe(1);
      expect(e.message).toContain(`"${v}"`);
      expect(e.message).toContain(SUPPORTED_VERSIONS.join(', '));
    },
  );
  it('rejects a missing cniVersion with code 1', () => {
    const e = err(() => negotiateVersion({}));
    expect(e.code).toBe(1);
    expect(e.message).toContain('no cniVersion');
  });
  it('rejects a numeric cniVersion with code 7 asking for quotes', () => {
    const e = err(() => negotiateVersion({ cniVersion: 1.0 }));
    expect(e.code).toBe(7);
    expect(e.message).toContain('(quoted)');
  });
  it('picks the highest supported of cniVersions', () => {
    expect(negotiateVersion({ cniVersion: '1.0.0', cniVersions: ['1.0.0', '1.1.0', '1.2.0'] })).toBe('1.1.0');
    expect(negotiateVersion({ cniVersions: ['0.3.1', '0.4.0'] })).toBe('0.4.0');
  });
  it('falls back to cniVersion when cniVersions has none we support', () => {
    expect(negotiateVersion({ cniVersion: '1.0.0', cniVersions: ['2.0.0'] })).toBe('1.0.0');
    expect(err(() => negotiateVersion({ cniVersions: ['2.0.0'] })).code).toBe(1);
  });
  it('rejects a malformed cniVersions with code 7', () => {
    expect(err(() => negotiateVersion({ cniVersions: '1.0.0' })).code).toBe(7);
    expect(err(() => negotiateVersion({ cniVersions: [1] })).code).toBe(7);
  });
});

describe('command gating', () => {
  const table: Array<[CniCommand, string, boolean]> = [];
  for (const v of SUPPORTED_VERSIONS) {
    table.push(['ADD', v, true], ['DEL', v, true], ['VERSION', v, true]);
    table.push(['CHECK', v, compareVersions(v, '0.4.0') >= 0]);
    table.push(['STATUS', v, v === '1.1.0'], ['GC', v, v === '1.1.0']);
  }
  it.each(table)('%s at %s allowed=%s', (cmd, v, allowed) => {
    if (allowed) expect(() => assertCommandAllowed(cmd, v as never)).not.toThrow();
    else {
      const e = err(() => assertCommandAllowed(cmd, v as never));
      expect(e.code).toBe(1);
      expect(e.message).toContain(`config version does not allow ${cmd}`);
      expect(e.message).toContain(v);
    }
  });
});
