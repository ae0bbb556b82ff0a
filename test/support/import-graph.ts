// The import graph of src/, from the import statements themselves (static
// imports, `import type`, `export ... from`, dynamic `import()`), as the
// TypeScript scanner reads them: comments and strings that merely look like an
// import are not arrows. Used by the layer rules of docs/architecture.md.
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, posix, relative, sep } from 'node:path';
import ts from 'typescript';

export interface ImportArrow {
  /** The importing module, relative to the root: `agent/routes/index.ts`. */
  from: string;
  /** The imported module, relative to the root, with its written extension: `native/index.js`. */
  to: string;
  /** The specifier as written. */
  spec: string;
  /** 1-based line of the specifier. */
  line: number;
}

/** The relative imports of one module's source (package imports such as `node:fs` are left out). */
export function importsOf(from: string, source: string): ImportArrow[] {
  const out: ImportArrow[] = [];
  for (const f of ts.preProcessFile(source, true, true).importedFiles) {
    if (!f.fileName.startsWith('.')) continue;
    const to = posix.normalize(posix.join(posix.dirname(from), f.fileName));
    out.push({ from, to, spec: f.fileName, line: source.slice(0, f.pos).split('\n').length });
  }
  return out;
}

/** Every relative import of every .ts module under `root`. */
export function importGraph(root: string): ImportArrow[] {
  const out: ImportArrow[] = [];
  const walk = (dir: string): void => {
    for (const e of readdirSync(dir, { withFileTypes: true })) {
      const p = join(dir, e.name);
      if (e.isDirectory()) walk(p);
      else if (e.name.endsWith('.ts') && !e.name.endsWith('.d.ts')) {
        out.push(...importsOf(relative(root, p).split(sep).join('/'), readFileSync(p, 'utf8')));
      }
    }
  };
  walk(root);
  return out;
}

/**
 * A layer that only some layers may import: modules under `target` may be
 * imported only from modules under one of `allowedFrom` (folders end in '/',
 * a file is named whole).
 */
export interface LayerRule {
  target: string;
  allowedFrom: string[];
  why: string;
}

const under = (path: string, prefix: string) => (prefix.endsWith('/') ? path.startsWith(prefix) : path === prefix);

/** The arrows a rule forbids, as `from:line -> spec` lines (empty: the rule holds). */
export function violations(arrows: ImportArrow[], rule: LayerRule): string[] {
  return arrows
    .filter((a) => under(a.to, rule.target) && !rule.allowedFrom.some((p) => under(a.from, p)))
    .map((a) => `${a.from}:${a.line} imports ${a.spec}`);
}

/** src/ of this repository. */
export const SRC_ROOT = join(dirname(new URL(import.meta.url).pathname), '..', '..', 'src');
