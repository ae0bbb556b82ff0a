// RFC 6902 JSON patch (patch --type json): add, remove, replace, move, copy,
// test, with RFC 6901 pointers. The whole patch applies or none of it: it
// works on a copy, and the first failing operation is reported by number.
import { CtlError } from './io.js';

interface JsonPatchOp {
  op: string;
  path: string;
  value?: unknown;
  from?: string;
}

const OPS = ['add', 'remove', 'replace', 'move', 'copy', 'test'];

type Container = Record<string, unknown> | unknown[];

function isContainer(v: unknown): v is Container {
  return typeof v === 'object' && v !== null;
}

/** "/a/b~1c" -> ["a", "b/c"] (RFC 6901). */
function parsePointer(p: string): string[] {
  if (p === '') return [];
  if (!p.startsWith('/'))
    throw new Error(`${JSON.stringify(p)} is not a JSON pointer (it starts with "/", e.g. /spec/disabled)`);
  return p
    .slice(1)
    .split('/')
    .map((s) => s.replace(/~1/g, '/').replace(/~0/g, '~'));
}

/** Checks the ops' shape: an array of {op, path, ...} with the fields each op needs. */
export function parseJsonPatch(v: unknown): JsonPatchOp[] {
  if (!Array.isArray(v))
    throw new CtlError(
      'patch --type json: -p must be a JSON array of operations, e.g. ' +
        '[{"op":"replace","path":"/spec/disabled","value":true}]',
    );
  return v.map((o, i) => {
    const at = `patch --type json: operation ${i + 1}`;
    if (!isContainer(o) || Array.isArray(o)) throw new CtlError(`${at} is not an object`);
    const op = (o as Record<string, unknown>).op;
    if (typeof op !== 'string' || !OPS.includes(op))
      throw new CtlError(`${at}: "op" must be one of ${OPS.join(', ')}; got ${JSON.stringify(op ?? null)}`);
    const path = (o as Record<string, unknown>).path;
    if (typeof path !== 'string') throw new CtlError(`${at} (${op}): "path" is missing`);
    if ((op === 'add' || op === 'replace' || op === 'test') && !('value' in o))
      throw new CtlError(`${at} (${op} ${path}): "value" is missing`);
    const from = (o as Record<string, unknown>).from;
    if ((op === 'move' || op === 'copy') && typeof from !== 'string')
      throw new CtlError(`${at} (${op} ${path}): "from" is missing`);
    return o as unknown as JsonPatchOp;
  });
}

function arrayIndex(arr: unknown[], token: string, forAdd: boolean): number {
  if (forAdd && token === '-') return arr.length;
  if (!/^(0|[1-9]\d*)$/.test(token)) throw new Error(`${JSON.stringify(token)} is not an array index`);
  const i = Number(token);
  if (i > arr.length || (!forAdd && i === arr.length))
    throw new Error(`index ${i} is out of range (the array has ${arr.length} items)`);
  return i;
}

export function applyJsonPatch(doc: unknown, ops: JsonPatchOp[]): unknown {
  const root = structuredClone(doc);
  const parent = (path: string): [Container, string] => {
    const tokens = parsePointer(path);
    const last = tokens.pop();
    if (last === undefined) throw new Error('the whole object cannot be replaced; patch a field under it');
    let cur: unknown = root;
    for (const t of tokens) {
      if (Array.isArray(cur)) cur = cur[arrayIndex(cur, t, false)];
      else if (isContainer(cur) && Object.hasOwn(cur, t)) cur = (cur as Record<string, unknown>)[t];
      else throw new Error(`${path} does not exist`);
    }
    if (!isContainer(cur)) throw new Error(`${path} does not exist (its parent is not an object or array)`);
    return [cur, last];
  };
  const get = (path: string): unknown => {
    if (path === '') return root;
    const [c, k] = parent(path);
    if (Array.isArray(c)) return c[arrayIndex(c, k, false)];
    if (!Object.hasOwn(c, k)) throw new Error(`${path} does not exist`);
    return c[k];
  };
  const remove = (path: string): void => {
    const [c, k] = parent(path);
    if (Array.isArray(c)) c.splice(arrayIndex(c, k, false), 1);
    else {
      if (!Object.hasOwn(c, k)) throw new Error(`${path} does not exist`);
      delete c[k];
    }
  };
  const add = (path: string, v: unknown): void => {
    const [c, k] = parent(path);
    if (Array.isArray(c)) c.splice(arrayIndex(c, k, true), 0, v);
    else c[k] = v;
  };
  ops.forEach((o, i) => {
    try {
      switch (o.op) {
        case 'add':
          add(o.path, structuredClone(o.value));
          break;
        case 'remove':
          remove(o.path);
          break;
        case 'replace': {
          const [c, k] = parent(o.path);
          if (Array.isArray(c)) c[arrayIndex(c, k, false)] = structuredClone(o.value);
          else {
            if (!Object.hasOwn(c, k)) throw new Error(`${o.path} does not exist (use "add" to create it)`);
            c[k] = structuredClone(o.value);
          }
          break;
        }
        case 'move': {
          if (o.path.startsWith(`${o.from}/`)) throw new Error(`cannot move ${o.from} into its own child ${o.path}`);
          const v = get(o.from!);
          remove(o.from!);
          add(o.path, v);
          break;
        }
        case 'copy':
          add(o.path, structuredClone(get(o.from!)));
          break;
        case 'test':
          if (!deepEqual(get(o.path), o.value))
            throw new Error(`test failed: ${o.path} is ${JSON.stringify(get(o.path))}, not ${JSON.stringify(o.value)}`);
          break;
      }
    } catch (e) {
      if (e instanceof CtlError) throw e;
      throw new CtlError(
        `patch --type json: operation ${i + 1} (${o.op} ${o.path}): ${(e as Error).message}; nothing was changed`,
      );
    }
  });
  return root;
}

function deepEqual(a: unknown, b: unknown): boolean {
  if (a === b) return true;
  if (!isContainer(a) || !isContainer(b) || Array.isArray(a) !== Array.isArray(b)) return false;
  const ka = Object.keys(a);
  const kb = Object.keys(b);
  if (ka.length !== kb.length) return false;
  return ka.every(
    (k) => Object.hasOwn(b, k) && deepEqual((a as Record<string, unknown>)[k], (b as Record<string, unknown>)[k]),
  );
}

/** RFC 7386 JSON merge patch: objects merge, null deletes, anything else replaces. */
export function mergePatch(target: unknown, patch: unknown): unknown {
  if (patch === null || typeof patch !== 'object' || Array.isArray(patch)) return patch;
  const out: Record<string, unknown> =
    target && typeof target === 'object' && !Array.isArray(target) ? { ...(target as Record<string, unknown>) } : {};
  for (const [k, v] of Object.entries(patch as Record<string, unknown>)) {
    if (v === null) delete out[k];
    else out[k] = mergePatch(out[k], v);
  }
  return out;
}
