// House habits the formatter cannot keep on its own: source lines of src/ fit in 120 columns
// (the formatter's width; it does not break strings or comments), and no export of src/ is
// unused (an export nobody imports widens a module's surface and hides dead code from
// noUnusedLocals). Each failure names the file and line or the export.
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { deadExports } from '../support/dead-exports.js';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '../..');
const WIDTH = 120;

function sources(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((d) => {
    const p = join(dir, d.name);
    if (d.isDirectory()) return sources(p);
    return d.name.endsWith('.ts') ? [p] : [];
  });
}

describe('house habits', () => {
  it(`every line of src/ fits in ${WIDTH} columns`, () => {
    const long: string[] = [];
    for (const f of sources(join(ROOT, 'src'))) {
      readFileSync(f, 'utf8')
        .split('\n')
        .forEach((line, i) => {
          if (line.length > WIDTH) long.push(`${relative(ROOT, f)}:${i + 1} (${line.length} columns)`);
        });
    }
    expect(long).toEqual([]);
  });

  it('every export of src/ is imported somewhere (src/, test/ or scripts/)', () => {
    expect(deadExports(ROOT)).toEqual([]);
  });
});
