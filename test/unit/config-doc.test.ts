import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { renderNetconfDoc } from '../../src/config/doc.js';
import { NETCONF_FIELDS } from '../../src/config/fields.js';

const root = join(__dirname, '..', '..');

describe('docs/netconf.md', () => {
  it('is in sync with the field table (regenerate: node scripts/gen-netconf-doc.mjs)', () => {
    expect(readFileSync(join(root, 'docs/netconf.md'), 'utf8')).toBe(renderNetconfDoc());
  });
  it('documents every field of the table', () => {
    const doc = renderNetconfDoc();
    for (const f of NETCONF_FIELDS) expect(doc, f.path).toContain(`| \`${f.path}\` |`);
  });
  it('the generator script agrees (--check)', () => {
    expect(() =>
      execFileSync(process.execPath, [join(root, 'scripts/gen-netconf-doc.mjs'), '--check'], { stdio: 'pipe' }),
    ).not.toThrow();
  });
  it('its example conflist parses', async () => {
    const { parseNetconf } = await import('../../src/config/netconf.js');
    const m = /```json\n([\s\S]*?)```/.exec(renderNetconfDoc());
    const list = JSON.parse(m![1]!);
    expect(() =>
      parseNetconf({ cniVersion: list.cniVersion, name: list.name, ...list.plugins[0] }, { pluginType: 'netplugin' }),
    ).not.toThrow();
  });
});
