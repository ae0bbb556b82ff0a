// The layer rules of docs/architecture.md, checked on the import graph of src/
// (static imports, `export … from`, dynamic import() and type-only imports all
// count: a type arrow is still an arrow a reader follows). What it keeps:
// - no import cycle between files;
// - a folder imports only the folders its row of LAYERS allows (every folder
//   below it), so the folder graph has no cycle and no upward arrow;
// - other layers reach IPAM only through src/ipam/index.ts.
// The few arrows still against the rules are listed one file arrow at a time
// in EXCEPTIONS, so no new one of their kind can slip in beside them.
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, normalize, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '../..');
const SRC = join(ROOT, 'src');

/**
 * Folders of src/ from top to bottom (docs/architecture.md "Layers"): a folder
 * may import any folder of a lower row, never one of its own row or above.
 * `.` is src/'s own modules (errors.ts, keyed-queue.ts, safe-open.ts, ...).
 */
const LAYERS: string[][] = [
  ['bin'],
  ['agent', 'kube-controllers', 'ctl'],
  ['plugins'],
  ['cni'],
  ['config', 'policy-status', 'flows', 'bird'],
  ['ipam', 'hostlock'],
  ['datastore'],
  ['k8s'],
  ['workload'],
  ['model'],
  ['dataplane'],
  ['watch'],
  ['selector', 'observe', 'native', 'log', 'net'],
  ['.'],
];

/** File arrows against the rules that are still there (each names why it is not gone yet). */
const EXCEPTIONS = new Set<string>([]);

const SPEC = /(?:\bfrom\s*|\bimport\s*\(\s*|\bimport\s+)['"](\.{1,2}\/[^'"]+)['"]/g;

function sourceFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((d) => {
    const p = join(dir, d.name);
    if (d.isDirectory()) return sourceFiles(p);
    return d.name.endsWith('.ts') && !d.name.endsWith('.d.ts') ? [p] : [];
  });
}

/** src-relative file -> the src-relative files it imports. */
function importGraph(): Map<string, string[]> {
  const graph = new Map<string, string[]>();
  for (const abs of sourceFiles(SRC)) {
    const text = readFileSync(abs, 'utf8').replace(/^\s*\/\/.*$/gm, '');
    const targets = new Set<string>();
    for (const m of text.matchAll(SPEC)) {
      const target = normalize(join(dirname(abs), m[1]!)).replace(/\.js$/, '.ts');
      if (target.startsWith(SRC + '/') && target.endsWith('.ts')) targets.add(relative(SRC, target));
    }
    graph.set(relative(SRC, abs), [...targets]);
  }
  return graph;
}

const folderOf = (file: string) => (file.includes('/') ? file.slice(0, file.indexOf('/')) : '.');

/** Strongly connected components with more than one member (Tarjan). */
function cycles(graph: Map<string, string[]>): string[][] {
  let next = 0;
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const out: string[][] = [];
  const visit = (v: string): void => {
    index.set(v, next);
    low.set(v, next++);
    stack.push(v);
    onStack.add(v);
    for (const w of graph.get(v) ?? []) {
      if (!index.has(w)) {
        visit(w);
        low.set(v, Math.min(low.get(v)!, low.get(w)!));
      } else if (onStack.has(w)) low.set(v, Math.min(low.get(v)!, index.get(w)!));
    }
    if (low.get(v) === index.get(v)) {
      const scc: string[] = [];
      let w: string;
      do {
        w = stack.pop()!;
        onStack.delete(w);
        scc.push(w);
      } while (w !== v);
      if (scc.length > 1) out.push(scc.sort());
    }
  };
  for (const v of graph.keys()) if (!index.has(v)) visit(v);
  return out;
}

function withoutExceptions(graph: Map<string, string[]>): Map<string, string[]> {
  return new Map([...graph].map(([f, ts]) => [f, ts.filter((t) => !EXCEPTIONS.has(`${f} -> ${t}`))]));
}

const rowOf = new Map(LAYERS.flatMap((row, i) => row.map((f) => [f, i] as const)));

describe('layer rules (docs/architecture.md)', () => {
  const graph = importGraph();

  it('the cycle finder finds a cycle and leaves a chain alone', () => {
    const g = new Map([
      ['a.ts', ['b.ts']],
      ['b.ts', ['c.ts']],
      ['c.ts', ['a.ts']],
      ['d.ts', ['a.ts']],
    ]);
    expect(cycles(g)).toEqual([['a.ts', 'b.ts', 'c.ts']]);
    expect(
      cycles(
        new Map([
          ['a.ts', ['b.ts']],
          ['b.ts', []],
        ]),
      ),
    ).toEqual([]);
  });

  it('sees the source tree (the graph is not empty)', () => {
    expect(graph.get('ipam/allocator.ts')).toContain('ipam/core.ts');
    expect(graph.get('plugins/main/add.ts')?.length).toBeGreaterThan(3);
  });

  it('has no import cycle between files', () => {
    expect(cycles(withoutExceptions(graph))).toEqual([]);
  });

  it('every folder of src/ has its row', () => {
    const folders = new Set([...graph.keys()].map(folderOf));
    expect([...folders].filter((f) => !rowOf.has(f))).toEqual([]);
  });

  it('imports go only down the layers', () => {
    const upward: string[] = [];
    for (const [file, targets] of graph) {
      for (const t of targets) {
        const [from, to] = [folderOf(file), folderOf(t)];
        if (from === to || EXCEPTIONS.has(`${file} -> ${t}`)) continue;
        if (!(rowOf.get(from)! < rowOf.get(to)!)) upward.push(`${file} -> ${t}`);
      }
    }
    expect(upward).toEqual([]);
  });

  it('other layers reach IPAM only through ipam/index.ts', () => {
    const past = [...graph].flatMap(([file, targets]) =>
      folderOf(file) === 'ipam'
        ? []
        : targets.filter((t) => t.startsWith('ipam/') && t !== 'ipam/index.ts').map((t) => `${file} -> ${t}`),
    );
    expect(past).toEqual([]);
  });

  it('no layer below cni/ throws a CniError or picks a CNI code (they throw kinds cni/errors.ts maps)', () => {
    const below = [...graph.keys()].filter((f) => rowOf.get(folderOf(f))! > rowOf.get('cni')! && f !== 'errors.ts');
    const code = (f: string) =>
      readFileSync(join(SRC, f), 'utf8')
        .replace(/\/\*[\s\S]*?\*\//g, '')
        .replace(/^\s*\/\/.*$/gm, '');
    expect(below.filter((f) => /\b(CniError|ErrorCodes)\b/.test(code(f)))).toEqual([]);
  });

  it('lists no exception that is gone', () => {
    const present = new Set([...graph].flatMap(([f, ts]) => ts.map((t) => `${f} -> ${t}`)));
    expect([...EXCEPTIONS].filter((e) => !present.has(e))).toEqual([]);
  });
});
