// The label-selector language used by IPPool.nodeSelector, list label filters
// and (later) policy selectors:
//
//   expr    := or
//   or      := and ('||' and)*
//   and     := unary ('&&' unary)*
//   unary   := '!' unary | primary
//   primary := '(' expr ')' | 'all()' | 'has(' key ')' | key '==' str | key '!=' str
//            | key 'in' set | key 'not' 'in' set
//   set     := '{' [str (',' str)*] '}'
//
// `!=` and `not in` match when the label is absent (a pod without `env` is not
// `env == 'prod'`, so it is `env != 'prod'`), which keeps `!(k == v)` and
// `k != v` equivalent.

export interface Selector {
  matches(labels: Record<string, string>): boolean;
  /** Canonical text: re-parses to an equivalent selector. */
  toString(): string;
}

export class SelectorParseError extends Error {
  override name = 'SelectorParseError';
  constructor(
    /** The selector text as given. */
    public readonly expr: string,
    /** 0-based character offset of the offending token. */
    public readonly position: number,
    /** Short description of what the parser wanted there. */
    public readonly expected: string,
    found: string,
  ) {
    super(`${found} at ${position}: expected ${expected}\n  ${expr}\n  ${' '.repeat(position)}^`);
  }
}

type TokKind = 'key' | 'str' | '(' | ')' | '{' | '}' | ',' | '==' | '!=' | '!' | '&&' | '||' | 'eof';
interface Token {
  kind: TokKind;
  text: string;
  pos: number;
}

// Label keys follow Kubernetes: an optional DNS-subdomain prefix and '/', then
// alphanumerics with '-', '_', '.'. We accept the union of those characters and
// leave finer validation to the API server that stored the labels.
const KEY_CHAR = /[A-Za-z0-9_.\-/]/;

function describe(t: Token): string {
  if (t.kind === 'eof') return 'unexpected end of selector';
  return `unexpected '${t.text}'`;
}

function tokenize(src: string): Token[] {
  const out: Token[] = [];
  let i = 0;
  while (i < src.length) {
    const c = src[i]!;
    if (c === ' ' || c === '\t' || c === '\n' || c === '\r') {
      i++;
      continue;
    }
    const two = src.slice(i, i + 2);
    if (two === '==' || two === '!=' || two === '&&' || two === '||') {
      out.push({ kind: two, text: two, pos: i });
      i += 2;
      continue;
    }
    if (c === '&' || c === '|') {
      throw new SelectorParseError(src, i, `'${c}${c}'`, `unexpected '${c}'`);
    }
    if (c === '=') throw new SelectorParseError(src, i, "'=='", "unexpected '='");
    if ('(){},!'.includes(c)) {
      out.push({ kind: c as TokKind, text: c, pos: i });
      i++;
      continue;
    }
    if (c === '"' || c === "'") {
      const end = src.indexOf(c, i + 1);
      if (end < 0) throw new SelectorParseError(src, i, `a closing ${c}`, 'unterminated string');
      out.push({ kind: 'str', text: src.slice(i + 1, end), pos: i });
      i = end + 1;
      continue;
    }
    if (KEY_CHAR.test(c)) {
      const start = i;
      while (i < src.length && KEY_CHAR.test(src[i]!)) i++;
      out.push({ kind: 'key', text: src.slice(start, i), pos: start });
      continue;
    }
    throw new SelectorParseError(src, i, 'a label key, operator or quoted value', `unexpected '${c}'`);
  }
  out.push({ kind: 'eof', text: '', pos: src.length });
  return out;
}

type Node =
  | { op: 'all' }
  | { op: 'has'; key: string }
  | { op: 'eq' | 'ne'; key: string; value: string }
  | { op: 'in' | 'notin'; key: string; values: string[] }
  | { op: 'not'; arg: Node }
  | { op: 'and' | 'or'; args: Node[] };

class Parser {
  private i = 0;
  constructor(
    private readonly src: string,
    private readonly toks: Token[],
  ) {}

  private peek(off = 0): Token {
    return this.toks[Math.min(this.i + off, this.toks.length - 1)]!;
  }
  private next(): Token {
    const t = this.peek();
    if (t.kind !== 'eof') this.i++;
    return t;
  }
  private fail(t: Token, expected: string): never {
    throw new SelectorParseError(this.src, t.pos, expected, describe(t));
  }
  private expect(kind: TokKind, expected: string): Token {
    const t = this.peek();
    if (t.kind !== kind) this.fail(t, expected);
    return this.next();
  }

  parseAll(): Node {
    const n = this.parseOr();
    const t = this.peek();
    if (t.kind !== 'eof') this.fail(t, "'&&', '||' or the end of the selector");
    return n;
  }

  private parseOr(): Node {
    return this.parseJoined('||', 'or', () => this.parseAnd());
  }

  private parseAnd(): Node {
    return this.parseJoined('&&', 'and', () => this.parseUnary());
  }

  /** `part (token part)*`: one part alone, or all of them under `op`. */
  private parseJoined(token: '||' | '&&', op: 'or' | 'and', part: () => Node): Node {
    const args = [part()];
    while (this.peek().kind === token) {
      this.next();
      args.push(part());
    }
    return args.length === 1 ? args[0]! : { op, args };
  }

  private parseUnary(): Node {
    if (this.peek().kind === '!') {
      this.next();
      return { op: 'not', arg: this.parseUnary() };
    }
    return this.parsePrimary();
  }

  private parsePrimary(): Node {
    const t = this.peek();
    if (t.kind === '(') {
      this.next();
      const n = this.parseOr();
      this.expect(')', "')'");
      return n;
    }
    if (t.kind !== 'key') this.fail(t, 'a label key');
    // `all` and `has` are functions only when followed by '('; otherwise they
    // are ordinary label keys (a label may well be called "has").
    if ((t.text === 'all' || t.text === 'has') && this.peek(1).kind === '(') {
      this.next();
      this.next();
      if (t.text === 'all') {
        this.expect(')', "')' (all() takes no argument)");
        return { op: 'all' };
      }
      const key = this.expect('key', 'a label key').text;
      this.expect(')', "')'");
      return { op: 'has', key };
    }
    const key = this.next().text;
    const op = this.peek();
    if (op.kind === '==' || op.kind === '!=') {
      this.next();
      const v = this.expect('str', 'a quoted value').text;
      return { op: op.kind === '==' ? 'eq' : 'ne', key, value: v };
    }
    if (op.kind === 'key' && op.text === 'in') {
      this.next();
      return { op: 'in', key, values: this.parseSet() };
    }
    if (op.kind === 'key' && op.text === 'not' && this.peek(1).kind === 'key' && this.peek(1).text === 'in') {
      this.next();
      this.next();
      return { op: 'notin', key, values: this.parseSet() };
    }
    if (op.kind === 'key' && op.text === 'not') this.fail(this.peek(1), "'in' after 'not'");
    return this.fail(op, "'==', '!=', 'in' or 'not in'");
  }

  private parseSet(): string[] {
    this.expect('{', "'{'");
    const values: string[] = [];
    if (this.peek().kind === '}') {
      this.next();
      return values;
    }
    for (;;) {
      values.push(this.expect('str', 'a quoted value').text);
      const t = this.peek();
      if (t.kind === ',') {
        this.next();
        continue;
      }
      if (t.kind === '}') {
        this.next();
        return values;
      }
      this.fail(t, "',' or '}'");
    }
  }
}

function evaluate(n: Node, labels: Record<string, string>): boolean {
  switch (n.op) {
    case 'all':
      return true;
    case 'has':
      return Object.hasOwn(labels, n.key);
    case 'eq':
      return Object.hasOwn(labels, n.key) && labels[n.key] === n.value;
    case 'ne':
      return !Object.hasOwn(labels, n.key) || labels[n.key] !== n.value;
    case 'in':
      return Object.hasOwn(labels, n.key) && n.values.includes(labels[n.key]!);
    case 'notin':
      return !Object.hasOwn(labels, n.key) || !n.values.includes(labels[n.key]!);
    case 'not':
      return !evaluate(n.arg, labels);
    case 'and':
      return n.args.every((a) => evaluate(a, labels));
    case 'or':
      return n.args.some((a) => evaluate(a, labels));
  }
}

function quote(v: string): string {
  // The language has no escapes: a value holding ' is written in double quotes.
  return v.includes("'") ? `"${v}"` : `'${v}'`;
}

// Precedence: or=1, and=2, operand of '!'=3. Comparisons under '!' get
// parentheses: `!k == 'v'` parses fine but reads ambiguously to humans.
function render(n: Node, prec = 0): string {
  switch (n.op) {
    case 'all':
      return 'all()';
    case 'has':
      return `has(${n.key})`;
    case 'eq':
    case 'ne': {
      const s = `${n.key} ${n.op === 'eq' ? '==' : '!='} ${quote(n.value)}`;
      return prec === 3 ? `(${s})` : s;
    }
    case 'in':
    case 'notin': {
      const s = `${n.key} ${n.op === 'in' ? 'in' : 'not in'} {${n.values.map(quote).join(', ')}}`;
      return prec === 3 ? `(${s})` : s;
    }
    case 'not':
      return `!${render(n.arg, 3)}`;
    case 'and': {
      const s = n.args.map((a) => render(a, 2)).join(' && ');
      return prec > 2 ? `(${s})` : s;
    }
    case 'or': {
      const s = n.args.map((a) => render(a, 1)).join(' || ');
      return prec > 1 ? `(${s})` : s;
    }
  }
}

class ParsedSelector implements Selector {
  private readonly text: string;
  constructor(private readonly root: Node) {
    this.text = render(root);
  }
  matches(labels: Record<string, string>): boolean {
    return evaluate(this.root, labels);
  }
  toString(): string {
    return this.text;
  }
}

const cache = new Map<string, Selector>();

/**
 * Parse a selector expression. An empty or blank string selects everything
 * (the default of IPPool.nodeSelector). Throws SelectorParseError.
 */
export function parseSelector(expr: string): Selector {
  const hit = cache.get(expr);
  if (hit) return hit;
  const root: Node = expr.trim() === '' ? { op: 'all' } : new Parser(expr, tokenize(expr)).parseAll();
  const sel = new ParsedSelector(root);
  // Selectors come from a handful of pools/policies; bound the cache anyway so
  // a long-running agent fed arbitrary input cannot grow it without limit.
  if (cache.size > 1000) cache.clear();
  cache.set(expr, sel);
  return sel;
}

/** The comma-separated terms of a kubectl-syntax label selector (commas inside `in (a,b)` do not split). */
export function kubectlSelectorTerms(s: string): string[] {
  const terms: string[] = [];
  let depth = 0;
  let cur = '';
  for (const ch of s) {
    if (ch === '(') depth++;
    if (ch === ')') depth--;
    if (ch === ',' && depth === 0) {
      terms.push(cur);
      cur = '';
    } else cur += ch;
  }
  terms.push(cur);
  return terms;
}

/**
 * kubectl's label-selector syntax (`-l zone=a,tier!=db,env in (a,b),!legacy`)
 * in ours (`zone == "a" && tier != "db" && ...`), for command-line filters;
 * undefined when `s` is not in kubectl's syntax (the caller then parses it as
 * ours, which reports the error).
 */
export function fromKubectlSelector(s: string): string | undefined {
  const terms = kubectlSelectorTerms(s);
  const key = '([A-Za-z0-9][-A-Za-z0-9_./]*)';
  const val = '([-A-Za-z0-9_.]*)';
  const q = (v: string) => JSON.stringify(v);
  const out: string[] = [];
  for (const raw of terms) {
    const t = raw.trim();
    let m: RegExpExecArray | null;
    if ((m = new RegExp(`^${key}\\s*(==|=|!=)\\s*${val}$`).exec(t)))
      out.push(`${m[1]} ${m[2] === '!=' ? '!=' : '=='} ${q(m[3]!)}`);
    else if ((m = new RegExp(`^${key}\\s+(in|notin)\\s+\\(([^)]*)\\)$`).exec(t))) {
      const vals = m[3]!
        .split(',')
        .map((v) => v.trim())
        .filter(Boolean);
      if (!vals.every((v) => new RegExp(`^${val}$`).test(v))) return undefined;
      out.push(`${m[1]} ${m[2] === 'in' ? 'in' : 'not in'} {${vals.map(q).join(', ')}}`);
    } else if ((m = new RegExp(`^!\\s*${key}$`).exec(t))) out.push(`!has(${m[1]})`);
    else if ((m = new RegExp(`^${key}$`).exec(t))) out.push(`has(${m[1]})`);
    else return undefined;
  }
  return out.join(' && ');
}
