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
 * One rule of the layering, over module paths relative to the root (a folder
 * ends in '/', a file is named whole):
 * - `only-from`: modules under `target` may be imported only from modules under `allowedFrom`;
 * - `imports-only`: modules under `from` may import only modules under `allowed`;
 * - `never`: modules under `from` never import modules under `target`.
 */
export type LayerRule =
  | { kind: 'only-from'; target: string; allowedFrom: string[]; why: string }
  | { kind: 'imports-only'; from: string; allowed: string[]; why: string }
  | { kind: 'never'; from: string; target: string; why: string };

const under = (path: string, prefix: string) => (prefix.endsWith('/') ? path.startsWith(prefix) : path === prefix);

function breaks(a: ImportArrow, rule: LayerRule): boolean {
  switch (rule.kind) {
    case 'only-from':
      return under(a.to, rule.target) && !rule.allowedFrom.some((p) => under(a.from, p));
    case 'imports-only':
      return under(a.from, rule.from) && !rule.allowed.some((p) => under(a.to, p));
    case 'never':
      return under(a.from, rule.from) && under(a.to, rule.target);
  }
}

/** The arrows a rule forbids, as `from:line imports spec` lines (empty: the rule holds). */
export function violations(arrows: ImportArrow[], rule: LayerRule): string[] {
  return arrows.filter((a) => breaks(a, rule)).map((a) => `${a.from}:${a.line} imports ${a.spec}`);
}

/** A rule in a line, for test names. */
export function describeRule(rule: LayerRule): string {
  switch (rule.kind) {
    case 'only-from':
      return `${rule.target} is imported only from ${rule.allowedFrom.join(', ')}`;
    case 'imports-only':
      return `${rule.from} imports only ${rule.allowed.join(', ')}`;
    case 'never':
      return `${rule.from} never imports ${rule.target}`;
  }
}

/** src/ of this repository. */
export const SRC_ROOT = join(dirname(new URL(import.meta.url).pathname), '..', '..', 'src');
