// kubectl's JSONPath templates (-o jsonpath=, -o custom-columns=, --sort-by):
// text outside braces is printed as is; inside braces a path (`.a.b`,
// `.items[*].metadata.name`, `[0]`, `[-1:]`, `['a.b']`, `..name`, `.*`,
// `[?(@.x=="y")]`), a string literal (`"\n"`) or `range PATH` ... `end`.
// The semantics are kubectl's: the results of one expression are printed
// separated by spaces, strings raw, everything else as JSON; a missing key
// prints nothing (kubectl get's --allow-missing-template-keys=true); inside a
// range a path starting with `.` is relative to the current item, `$` is the
// root.
import { CtlError } from './io.js';

type Seg =
  | { t: 'field'; name: string }
  | { t: 'all' }
  | { t: 'recurse'; name: string | undefined }
  | { t: 'slice'; start?: number | undefined; end?: number | undefined; step?: number | undefined }
  | { t: 'index'; i: number }
  | { t: 'filter'; left: Path; op: string | undefined; right: Path | unknown };

interface Path {
  root: boolean;
  segs: Seg[];
}

type Node =
  | { t: 'text'; s: string }
  | { t: 'path'; p: Path }
  | { t: 'lit'; s: string }
  | { t: 'range'; p: Path; body: Node[] };

/** A parsed template; evaluate() runs it against one object. */
export interface JsonPathTemplate {
  evaluate(obj: unknown): string;
  /** The raw results of a template that is one path (custom-columns, --sort-by). */
  values(obj: unknown): unknown[];
}

function fail(template: string, why: string): never {
  throw new CtlError(`jsonpath ${JSON.stringify(template)}: ${why}`);
}

/** kubectl's relaxed form: `.a.b`, `a.b` and `{.a.b}` are the same path (custom-columns, --sort-by). */
export function relaxedPath(expr: string): string {
  const e = expr.trim();
  if (e.startsWith('{') && e.endsWith('}')) return e;
  if (e.startsWith('.') || e.startsWith('[') || e.startsWith('$')) return `{${e}}`;
  return `{.${e}}`;
}

export function parseJsonPath(template: string): JsonPathTemplate {
  const nodes: Node[] = [];
  const stack: Node[][] = [nodes];
  const ranges: Array<Node & { t: 'range' }> = [];
  let i = 0;
  while (i < template.length) {
    const open = template.indexOf('{', i);
    if (open < 0) {
      stack[stack.length - 1]!.push({ t: 'text', s: template.slice(i) });
      break;
    }
    if (open > i) stack[stack.length - 1]!.push({ t: 'text', s: template.slice(i, open) });
    const close = findClose(template, open + 1);
    if (close < 0) fail(template, `unclosed "{" at position ${open + 1}`);
    const inner = template.slice(open + 1, close).trim();
    i = close + 1;
    const cur = stack[stack.length - 1]!;
    if (inner === 'end') {
      if (!ranges.length) fail(template, '{end} without {range ...}');
      ranges.pop();
      stack.pop();
      continue;
    }
    const rm = /^range\s+(.*)$/.exec(inner);
    if (rm) {
      const node: Node & { t: 'range' } = { t: 'range', p: parsePath(rm[1]!, template), body: [] };
      cur.push(node);
      ranges.push(node);
      stack.push(node.body);
      continue;
    }
    if (inner.startsWith('"') || inner.startsWith("'")) {
      cur.push({ t: 'lit', s: parseLiteral(inner, template) });
      continue;
    }
    if (inner === '') fail(template, 'empty expression "{}"');
    cur.push({ t: 'path', p: parsePath(inner, template) });
  }
  if (ranges.length) fail(template, '{range ...} without {end}');
  return {
    evaluate: (obj) => run(nodes, obj, obj),
    values: (obj) => {
      const paths = nodes.filter((n) => n.t !== 'text' || n.s.trim() !== '');
      const only = paths[0];
      if (paths.length !== 1 || only?.t !== 'path') fail(template, 'expected one path, e.g. {.metadata.name}');
      return evalPath(only.p, obj, obj);
    },
  };
}

/** The first index from `from` on where `stop` holds, outside quoted strings; -1 when none. */
function findUnquoted(s: string, from: number, stop: (c: string) => boolean): number {
  let q: string | undefined;
  for (let j = from; j < s.length; j++) {
    const c = s[j]!;
    if (q) {
      if (c === '\\') j++;
      else if (c === q) q = undefined;
    } else if (c === '"' || c === "'") q = c;
    else if (stop(c)) return j;
  }
  return -1;
}

/** The "}" closing the expression opened before `from`. */
function findClose(s: string, from: number): number {
  return findUnquoted(s, from, (c) => c === '}');
}

function parseLiteral(s: string, template: string): string {
  const q = s[0]!;
  if (s.length < 2 || s[s.length - 1] !== q) fail(template, `unterminated string ${s}`);
  const body = s.slice(1, -1);
  return body.replace(
    /\\(.)/g,
    (_, c: string) => ({ n: '\n', t: '\t', r: '\r', '\\': '\\', '"': '"', "'": "'" })[c] ?? c,
  );
}

function parsePath(src: string, template: string): Path {
  let s = src.trim();
  const path: Path = { root: false, segs: [] };
  if (s.startsWith('$')) {
    path.root = true;
    s = s.slice(1);
  } else if (s.startsWith('@')) s = s.slice(1);
  let i = 0;
  const ident = () => {
    const m = /^[A-Za-z0-9_\-/]+/.exec(s.slice(i));
    return m ? ((i += m[0].length), m[0]) : undefined;
  };
  while (i < s.length) {
    if (s.startsWith('..', i)) {
      i += 2;
      path.segs.push({ t: 'recurse', name: ident() });
      continue;
    }
    if (s[i] === '.') {
      i++;
      if (s[i] === '*') {
        i++;
        path.segs.push({ t: 'all' });
        continue;
      }
      const name = ident();
      if (name !== undefined) path.segs.push({ t: 'field', name });
      continue;
    }
    if (s[i] === '[') {
      const close = matchBracket(s, i);
      if (close < 0) fail(template, `unclosed "[" in ${src}`);
      path.segs.push(parseBracket(s.slice(i + 1, close).trim(), template));
      i = close + 1;
      continue;
    }
    const name = ident();
    if (name === undefined) fail(template, `unexpected ${JSON.stringify(s.slice(i))} in ${src}`);
    path.segs.push({ t: 'field', name });
  }
  return path;
}

/** The "]" matching the "[" at `open` (nested brackets counted). */
function matchBracket(s: string, open: number): number {
  let depth = 0;
  return findUnquoted(s, open, (c) => {
    if (c === '[') depth++;
    return c === ']' && --depth === 0;
  });
}

function parseBracket(b: string, template: string): Seg {
  if (b === '*') return { t: 'all' };
  if (b.startsWith("'") || b.startsWith('"')) return { t: 'field', name: parseLiteral(b, template) };
  if (b.startsWith('?')) {
    const m = /^\?\(\s*(.*?)\s*\)$/.exec(b);
    if (!m) fail(template, `bad filter [${b}]; e.g. [?(@.name=="x")]`);
    const cmp = /^(.*?)\s*(==|!=|<=|>=|<|>)\s*(.*)$/.exec(m[1]!);
    if (!cmp) return { t: 'filter', left: parsePath(m[1]!, template), op: undefined, right: undefined };
    const rhs = cmp[3]!.trim();
    let right: Path | unknown;
    if (rhs.startsWith('"') || rhs.startsWith("'")) right = parseLiteral(rhs, template);
    else if (rhs.startsWith('@') || rhs.startsWith('$')) right = parsePath(rhs, template);
    else if (rhs === 'true' || rhs === 'false') right = rhs === 'true';
    else if (rhs !== '' && Number.isFinite(Number(rhs))) right = Number(rhs);
    else fail(template, `bad filter value ${rhs}`);
    return { t: 'filter', left: parsePath(cmp[1]!, template), op: cmp[2], right };
  }
  if (/^-?\d+$/.test(b)) return { t: 'index', i: Number(b) };
  const sl = /^(-?\d+)?\s*:\s*(-?\d+)?\s*(?::\s*(-?\d+))?$/.exec(b);
  if (sl) {
    const n = (x: string | undefined) => (x === undefined ? undefined : Number(x));
    return { t: 'slice', start: n(sl[1]), end: n(sl[2]), step: n(sl[3]) };
  }
  fail(template, `unsupported [${b}]`);
}

function isObj(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function evalPath(p: Path, cur: unknown, root: unknown): unknown[] {
  let vals: unknown[] = [p.root ? root : cur];
  for (const seg of p.segs) {
    const next: unknown[] = [];
    for (const v of vals) step(seg, v, root, next);
    vals = next;
  }
  return vals;
}

function step(seg: Seg, v: unknown, root: unknown, out: unknown[]): void {
  switch (seg.t) {
    case 'field':
      if (isObj(v) && Object.hasOwn(v, seg.name)) out.push(v[seg.name]);
      return;
    case 'all':
      if (Array.isArray(v)) out.push(...v);
      else if (isObj(v)) out.push(...Object.values(v));
      return;
    case 'index': {
      if (!Array.isArray(v)) return;
      const i = seg.i < 0 ? v.length + seg.i : seg.i;
      if (i >= 0 && i < v.length) out.push(v[i]);
      return;
    }
    case 'slice': {
      if (!Array.isArray(v)) return;
      const len = v.length;
      const norm = (x: number | undefined, d: number) =>
        x === undefined ? d : x < 0 ? Math.max(0, len + x) : Math.min(x, len);
      const stepBy = seg.step ?? 1;
      if (stepBy <= 0) return;
      for (let i = norm(seg.start, 0); i < norm(seg.end, len); i += stepBy) out.push(v[i]);
      return;
    }
    case 'recurse': {
      const walk = (x: unknown) => {
        if (seg.name === undefined) out.push(x);
        else if (isObj(x) && Object.hasOwn(x, seg.name)) out.push(x[seg.name]);
        if (Array.isArray(x)) x.forEach(walk);
        else if (isObj(x)) Object.values(x).forEach(walk);
      };
      walk(v);
      return;
    }
    case 'filter': {
      const items = Array.isArray(v) ? v : isObj(v) ? Object.values(v) : [];
      for (const item of items) {
        const left = evalPath(seg.left, item, root);
        if (seg.op === undefined) {
          if (left.length && left[0] !== false && left[0] !== null) out.push(item);
          continue;
        }
        const rv = isPath(seg.right) ? evalPath(seg.right, item, root)[0] : seg.right;
        if (left.length && compare(left[0], seg.op, rv)) out.push(item);
      }
      return;
    }
  }
}

function isPath(x: unknown): x is Path {
  return isObj(x) && Array.isArray((x as { segs?: unknown }).segs);
}

function compare(a: unknown, op: string, b: unknown): boolean {
  const scalar = (x: unknown) => x !== null && typeof x !== 'object';
  if (op === '==') return a === b || (scalar(a) && scalar(b) && String(a) === String(b));
  if (op === '!=') return !compare(a, '==', b);
  const x = typeof a === 'number' ? a : Number(a);
  const y = typeof b === 'number' ? b : Number(b);
  if (Number.isNaN(x) || Number.isNaN(y)) return false;
  return op === '<' ? x < y : op === '>' ? x > y : op === '<=' ? x <= y : x >= y;
}

/** How kubectl prints one result: strings raw, the rest as JSON. */
export function printValue(v: unknown): string {
  if (typeof v === 'string') return v;
  if (v === undefined) return '';
  return JSON.stringify(v);
}

function run(nodes: Node[], cur: unknown, root: unknown): string {
  let out = '';
  for (const n of nodes) {
    if (n.t === 'text' || n.t === 'lit') out += n.s;
    else if (n.t === 'path') out += evalPath(n.p, cur, root).map(printValue).join(' ');
    else {
      for (const r of evalPath(n.p, cur, root)) {
        // kubectl ranges over each result, and over the items of a result that is a list.
        for (const item of Array.isArray(r) ? r : [r]) out += run(n.body, item, root);
      }
    }
  }
  return out;
}
