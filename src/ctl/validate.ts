// Validation of resources given by the operator. Structural checks come from
// the shared zod schemas (src/datastore/schemas.ts); IP pools get the semantic
// checks the allocator relies on (masked CIDR, no overlap, sane block size).
import type { z } from 'zod';
import { bgpConfigurationNameProblems } from '../model/bgp.js';
import { agentConfigurationNameProblems } from '../model/agent-config.js';
import {
  API_VERSION,
  NAMESPACED_KINDS,
  type BGPConfigurationSpec,
  type IPPoolSpec,
  type Kind,
  type ObjectMeta,
  type Resource,
} from '../model/resources.js';
import { labelKeyProblem, labelValueProblem, objectNameProblem } from '../model/names.js';
import { closest } from '../config/netconf.js';
import type { Datastore } from '../datastore/types.js';
import { objectMetaSchema, specSchemas } from '../datastore/schemas.js';
import { parseSelector } from '../selector/index.js';
import { CtlError } from './io.js';
import { manifestKind } from './kinds.js';
import { containsCidr, formatCidr, overlaps, parseCidr, tryParseCidr, type Cidr } from '../net/cidr.js';

const BLOCK_SIZE = {
  4: { min: 20, max: 32, def: 26 },
  6: { min: 116, max: 128, def: 122 },
} as const;

// Link-local ranges: the plugin routes pods through 169.254.1.1 and IPv6
// link-local next hops, so pool addresses there would collide with them.
const RESERVED: Array<{ text: string; cidr: Cidr }> = ['169.254.0.0/16', 'fe80::/10'].map((text) => ({
  text,
  cidr: parseCidr(text),
}));

export function describeRef(kind: Kind, name: string, namespace?: string): string {
  return `${kind} ${JSON.stringify(namespace ? `${namespace}/${name}` : name)}`;
}

/**
 * Kubernetes ObjectMeta fields a manifest may carry (e.g. from kubectl get -o yaml); those we do not store are ignored.
 */
const K8S_META_FIELDS = new Set([
  'name',
  'generateName',
  'namespace',
  'selfLink',
  'uid',
  'resourceVersion',
  'generation',
  'creationTimestamp',
  'deletionTimestamp',
  'deletionGracePeriodSeconds',
  'labels',
  'annotations',
  'ownerReferences',
  'finalizers',
  'managedFields',
]);

function isPlainObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** The object schemas `schema` accepts at this level (through optional, nullable, default, effects, unions). */
function objectShapes(schema: z.ZodTypeAny): Array<Record<string, z.ZodTypeAny>> | 'open' | undefined {
  const def = schema._def as {
    typeName?: string;
    innerType?: z.ZodTypeAny;
    schema?: z.ZodTypeAny;
    options?: z.ZodTypeAny[];
    left?: z.ZodTypeAny;
    right?: z.ZodTypeAny;
    getter?: () => z.ZodTypeAny;
  };
  switch (def.typeName) {
    case 'ZodObject': {
      const shape = (schema as z.AnyZodObject).shape as Record<string, z.ZodTypeAny>;
      // An object schema without fields is open (its content is not modelled here).
      return Object.keys(shape).length ? [shape] : 'open';
    }
    case 'ZodOptional':
    case 'ZodNullable':
    case 'ZodDefault':
    case 'ZodCatch':
    case 'ZodBranded':
    case 'ZodReadonly':
      return objectShapes(def.innerType ?? (schema as z.ZodOptional<z.ZodTypeAny>).unwrap());
    case 'ZodEffects':
      return objectShapes(def.schema!);
    case 'ZodLazy':
      return objectShapes(def.getter!());
    case 'ZodRecord':
    case 'ZodAny':
    case 'ZodUnknown':
      return 'open';
    case 'ZodUnion':
    case 'ZodDiscriminatedUnion': {
      const all: Array<Record<string, z.ZodTypeAny>> = [];
      for (const o of def.options ?? []) {
        const sh = objectShapes(o);
        if (sh === 'open') return 'open';
        if (sh) all.push(...sh);
      }
      return all.length ? all : undefined;
    }
    case 'ZodIntersection': {
      const l = objectShapes(def.left!);
      const r = objectShapes(def.right!);
      if (l === 'open' || r === 'open') return 'open';
      return [...(l ?? []), ...(r ?? [])];
    }
    default:
      return undefined;
  }
}

function arrayElement(schema: z.ZodTypeAny): z.ZodTypeAny | undefined {
  const def = schema._def as {
    typeName?: string;
    innerType?: z.ZodTypeAny;
    schema?: z.ZodTypeAny;
    type?: z.ZodTypeAny;
    options?: z.ZodTypeAny[];
  };
  if (def.typeName === 'ZodArray') return def.type;
  if (def.typeName === 'ZodOptional' || def.typeName === 'ZodNullable' || def.typeName === 'ZodDefault')
    return arrayElement(def.innerType!);
  if (def.typeName === 'ZodEffects') return arrayElement(def.schema!);
  if (def.typeName === 'ZodUnion')
    for (const o of def.options ?? []) {
      const e = arrayElement(o);
      if (e) return e;
    }
  return undefined;
}

/** Fields of `value` the schema does not know, with their path and the field the user probably meant. */
function unknownFields(schema: z.ZodTypeAny, value: unknown, path: string): string[] {
  const out: string[] = [];
  if (Array.isArray(value)) {
    const el = arrayElement(schema);
    if (el) value.forEach((v, i) => out.push(...unknownFields(el, v, `${path}[${i}]`)));
    return out;
  }
  if (!isPlainObject(value)) return out;
  const shapes = objectShapes(schema);
  if (!shapes || shapes === 'open') return out;
  const known = [...new Set(shapes.flatMap((sh) => Object.keys(sh)))];
  for (const [k, v] of Object.entries(value)) {
    const inShape = shapes.find((sh) => Object.hasOwn(sh, k));
    if (!inShape) {
      const guess = closest(k, known);
      out.push(
        `${path}.${k}: unknown field${guess ? `; did you mean ${guess}?` : `; known fields: ${known.join(', ')}`}`,
      );
      continue;
    }
    out.push(...unknownFields(inShape[k]!, v, `${path}.${k}`));
  }
  return out;
}

function at(value: unknown, path: Array<string | number>): unknown {
  let cur = value;
  for (const p of path) {
    if (cur === null || typeof cur !== 'object') return undefined;
    cur = (cur as Record<string | number, unknown>)[p];
  }
  return cur;
}

const TYPE_WORDS: Record<string, string> = {
  string: 'a string',
  number: 'a number',
  integer: 'a whole number',
  boolean: 'true or false',
  array: 'a list',
  object: 'a mapping',
  null: 'null',
  undefined: 'nothing',
};

function shown(v: unknown): string {
  const t = JSON.stringify(v);
  return t === undefined ? String(v) : t.length > 60 ? `${t.slice(0, 57)}...` : t;
}

function fieldPath(prefix: string, path: Array<string | number>): string {
  return path.reduce<string>((acc, p) => (typeof p === 'number' ? `${acc}[${p}]` : acc ? `${acc}.${p}` : p), prefix);
}

/** A schema issue in the project's words: the field, the value given and what is expected. */
function issueText(i: z.ZodIssue, input: unknown, prefix: string): string {
  const where = fieldPath(prefix, i.path);
  const v = at(input, i.path);
  switch (i.code) {
    case 'invalid_type':
      if (i.received === 'undefined')
        return `${where}: required field is missing (${TYPE_WORDS[i.expected] ?? i.expected})`;
      return (
        `${where}: expected ${TYPE_WORDS[i.expected] ?? i.expected}, got ${TYPE_WORDS[i.received] ?? i.received}` +
        ` ${shown(v)}`
      );
    case 'invalid_enum_value': {
      const opts = i.options.map(String);
      const guess = typeof v === 'string' ? closest(v, opts) : undefined;
      return `${where}: ${shown(v)} is not one of ${opts.join(', ')}${guess ? `; did you mean ${guess}?` : ''}`;
    }
    case 'invalid_literal':
      return `${where}: must be ${shown(i.expected)}, not ${shown(v)}`;
    case 'too_small':
      if (i.type === 'string') return `${where}: must not be empty`;
      if (i.type === 'array') return `${where}: needs at least ${String(i.minimum)} item(s)`;
      return `${where}: ${shown(v)} is below the minimum ${String(i.minimum)}`;
    case 'too_big':
      if (i.type === 'string') return `${where}: must be at most ${String(i.maximum)} characters`;
      if (i.type === 'array') return `${where}: takes at most ${String(i.maximum)} item(s)`;
      return `${where}: ${shown(v)} is above the maximum ${String(i.maximum)}`;
    case 'invalid_union': {
      // The branch that got furthest says the most; else a generic line.
      const inner = i.unionErrors.map((e) => e.issues).sort((x, y) => x.length - y.length)[0]?.[0];
      if (inner && inner.code !== 'invalid_type') return issueText(inner, input, prefix);
      const types = [
        ...new Set(
          i.unionErrors.flatMap((e) =>
            e.issues
              .filter((x) => x.code === 'invalid_type')
              .map((x) => TYPE_WORDS[(x as z.ZodInvalidTypeIssue).expected] ?? (x as z.ZodInvalidTypeIssue).expected),
          ),
        ),
      ];
      return `${where}: ${shown(v)} is not valid here${types.length ? ` (expected ${types.join(' or ')})` : ''}`;
    }
    case 'not_multiple_of':
      return `${where}: must be a multiple of ${String(i.multipleOf)}`;
    case 'invalid_string':
      return `${where}: ${shown(v)}: ${i.message === 'Invalid' ? 'has the wrong format' : i.message}`;
    default:
      return `${where}: ${i.message}`;
  }
}

/**
 * Turns one decoded manifest document into a typed resource, or throws a
 * CtlError naming the document and every problem at once, each with its
 * field path: unknown fields (with a "did you mean"), wrong types and values,
 * object names and labels Kubernetes would refuse.
 */
export function parseManifest(doc: unknown, where: string, opts: { stored?: boolean } = {}): Resource {
  if (typeof doc !== 'object' || doc === null || Array.isArray(doc))
    throw new CtlError(`${where}: expected a mapping with apiVersion, kind, metadata and spec`);
  const o = doc as Record<string, unknown>;
  const info = manifestKind(o.kind, where);
  const kind = info.kind;
  if (o.apiVersion !== API_VERSION) {
    throw new CtlError(
      `${where}: apiVersion ${JSON.stringify(o.apiVersion ?? null)} is not supported; use "${API_VERSION}"`,
    );
  }
  const errors: string[] = [];
  for (const k of Object.keys(o)) {
    if (!['apiVersion', 'kind', 'metadata', 'spec', 'status'].includes(k)) {
      const guess = closest(k, ['apiVersion', 'kind', 'metadata', 'spec']);
      errors.push(
        `${k}: unknown field` +
          `${guess ? `; did you mean ${guess}?` : '; a resource has apiVersion, kind, metadata and spec'}`,
      );
    }
  }
  const rawMeta = o.metadata;
  const meta = objectMetaSchema.safeParse(rawMeta);
  const name = isPlainObject(rawMeta) && typeof rawMeta.name === 'string' ? rawMeta.name : '';
  const ns = isPlainObject(rawMeta) && typeof rawMeta.namespace === 'string' ? rawMeta.namespace : undefined;
  const atRef = name ? `${where} (${describeRef(kind, name, ns)})` : where;
  if (!isPlainObject(rawMeta)) errors.push('metadata: required, with at least metadata.name');
  else {
    if (!meta.success) errors.push(...meta.error.issues.map((i) => issueText(i, rawMeta, 'metadata')));
    for (const k of Object.keys(rawMeta)) {
      if (!K8S_META_FIELDS.has(k)) {
        const guess = closest(k, [...K8S_META_FIELDS]);
        errors.push(`metadata.${k}: unknown field${guess ? `; did you mean ${guess}?` : ''}`);
      }
    }
    // A stored object's name cannot change: a change to it (patch, edit) is not refused for an older name.
    if (name && !opts.stored) {
      const problem = objectNameProblem(name);
      if (problem) errors.push(`metadata.name: ${JSON.stringify(name)} is not a valid name: it ${problem}`);
    }
    if (ns !== undefined && ns !== '' && !opts.stored) {
      const problem = objectNameProblem(ns);
      if (problem || ns.length > 63 || ns.includes('.'))
        errors.push(
          `metadata.namespace: ${JSON.stringify(ns)} is not a valid namespace: lower-case letters, digits and '-', ` +
            `at most 63`,
        );
    }
    for (const field of ['labels', 'annotations'] as const) {
      const m = rawMeta[field];
      if (!isPlainObject(m)) continue;
      for (const [k, v] of Object.entries(m)) {
        const kp = labelKeyProblem(k);
        if (kp) errors.push(`metadata.${field}: key ${JSON.stringify(k)} is not valid: ${kp}`);
        if (field === 'labels' && typeof v === 'string') {
          const vp = labelValueProblem(v);
          if (vp) errors.push(`metadata.labels.${k}: value ${JSON.stringify(v)} is not valid: it ${vp}`);
        }
      }
    }
    if (!NAMESPACED_KINDS.has(kind) && ns)
      errors.push(`metadata.namespace: ${kind} is cluster-scoped; remove metadata.namespace`);
  }
  const rawSpec = (o.spec ?? {}) as Record<string, unknown>;
  if (o.spec !== undefined && !isPlainObject(o.spec)) errors.push(`spec: expected a mapping, got ${shown(o.spec)}`);
  // The pool's block size range depends on its family: validatePool checks it with a better message than the schema's
  // 20-128.
  const poolBlockSize = kind === 'IPPool' && typeof rawSpec.blockSize === 'number' ? rawSpec.blockSize : undefined;
  const specInput = poolBlockSize === undefined ? rawSpec : { ...rawSpec, blockSize: undefined };
  const spec = isPlainObject(o.spec ?? {}) ? specSchemas[kind].safeParse(specInput) : undefined;
  if (spec && !spec.success) errors.push(...spec.error.issues.map((i) => issueText(i, specInput, 'spec')));
  if (isPlainObject(o.spec)) errors.push(...unknownFields(specSchemas[kind], rawSpec, 'spec'));
  if (
    (kind === 'IPAMConfig' || kind === 'ClusterInformation' || kind === 'KubeControllersConfiguration') &&
    name &&
    name !== 'default'
  ) {
    errors.push(`metadata.name: ${kind} is a singleton; set metadata.name to "default"`);
  }
  if (kind === 'AgentConfiguration' && name) {
    for (const p of agentConfigurationNameProblems(name)) errors.push(`${p.path}: ${p.message}`);
  }
  if (kind === 'BGPConfiguration' && name) {
    for (const p of bgpConfigurationNameProblems(name, rawSpec as BGPConfigurationSpec))
      errors.push(`${p.path}: ${p.message}`);
  }
  if (errors.length) {
    const uniq = [...new Set(errors)];
    throw new CtlError(`${atRef}: ${uniq.length > 1 ? `${uniq.length} problems: ` : ''}${uniq.join('; ')}`);
  }
  const data = spec!.success ? (spec!.data as Record<string, unknown>) : {};
  if (poolBlockSize !== undefined) data.blockSize = poolBlockSize;
  else if (kind === 'IPPool') delete data.blockSize;
  const metadata = { ...(meta.data as ObjectMeta) };
  for (const k of Object.keys(metadata)) if (!STORED_META.has(k)) delete (metadata as Record<string, unknown>)[k];
  if (NAMESPACED_KINDS.has(kind)) metadata.namespace ??= 'default';
  return { apiVersion: API_VERSION, kind, metadata, spec: data } as Resource;
}

/** The metadata fields netplugin stores; other Kubernetes ones a manifest carries are dropped. */
const STORED_META = new Set([
  'name',
  'namespace',
  'resourceVersion',
  'uid',
  'creationTimestamp',
  'labels',
  'annotations',
  'ownerReferences',
]);

/** Fills IPPool defaults so stored pools are explicit (what `get -o yaml` shows is what IPAM uses). */
export function poolDefaults(spec: IPPoolSpec): IPPoolSpec {
  const c = tryParseCidr(spec.cidr, { strict: false });
  const fam = c?.family ?? 4;
  return {
    ...spec,
    blockSize: spec.blockSize ?? BLOCK_SIZE[fam].def,
    ipipMode: spec.ipipMode ?? 'Never',
    vxlanMode: spec.vxlanMode ?? 'Never',
    natOutgoing: spec.natOutgoing ?? false,
    nodeSelector: spec.nodeSelector ?? 'all()',
  };
}

/**
 * Semantic checks of an IP pool against the others in the store. `existing` is
 * the stored version when this is an update (cidr and blockSize are immutable:
 * blocks already carved from the pool would no longer line up).
 */
export function validatePool(
  pool: Resource<'IPPool'>,
  others: Array<Resource<'IPPool'>>,
  existing?: Resource<'IPPool'>,
): void {
  const name = pool.metadata.name;
  const at = `IPPool ${JSON.stringify(name)}`;
  const s = pool.spec;
  const c = tryParseCidr(s.cidr, { strict: false });
  if (!c)
    throw new CtlError(
      `${at}: spec.cidr ${JSON.stringify(s.cidr)} is not a valid CIDR; use e.g. "10.244.0.0/16" or "fd00:10:244::/64"`,
    );
  if (!tryParseCidr(s.cidr))
    throw new CtlError(
      `${at}: spec.cidr ${JSON.stringify(s.cidr)} has host bits set; use ${JSON.stringify(formatCidr(c))}`,
    );
  const lim = BLOCK_SIZE[c.family];
  const bs = s.blockSize ?? lim.def;
  if (!Number.isInteger(bs) || bs < lim.min || bs > lim.max) {
    throw new CtlError(
      `${at}: spec.blockSize ${bs} is out of range for an IPv${c.family} pool; use ${lim.min}-${lim.max} (default ` +
        `${lim.def})`,
    );
  }
  if (bs < c.prefix) {
    throw new CtlError(
      `${at}: spec.blockSize ${bs} makes blocks larger than the pool ${s.cidr}; use a block size of at least ` +
        `${c.prefix}`,
    );
  }
  for (const r of RESERVED) {
    if (overlaps(c, r.cidr))
      throw new CtlError(
        `${at}: spec.cidr ${s.cidr} overlaps the link-local range ${r.text}, which the plugin uses for pod routing; ` +
          `choose another range`,
      );
  }
  if (c.family === 6 && s.ipipMode && s.ipipMode !== 'Never') {
    throw new CtlError(
      `${at}: spec.ipipMode ${JSON.stringify(s.ipipMode)} is not supported for IPv6 pools (IP-in-IP carries IPv4 ` +
        `only); use "Never" or vxlanMode`,
    );
  }
  if (s.ipipMode && s.ipipMode !== 'Never' && s.vxlanMode && s.vxlanMode !== 'Never') {
    throw new CtlError(
      `${at}: spec.ipipMode ${JSON.stringify(s.ipipMode)} and spec.vxlanMode ${JSON.stringify(s.vxlanMode)} are both ` +
        `enabled; set one of them to "Never"`,
    );
  }
  if (s.nodeSelector !== undefined) {
    try {
      parseSelector(s.nodeSelector);
    } catch (e) {
      // SelectorParseError's first line reads "<what> at <position>: expected <token>".
      const first = String((e as Error).message).split('\n')[0];
      throw new CtlError(
        `${at}: spec.nodeSelector ${JSON.stringify(s.nodeSelector)} is invalid: ${first}; e.g. "all()" or "zone == ` +
          `'a'"`,
      );
    }
  }
  if (existing) {
    const old = existing.spec;
    const oc = tryParseCidr(old.cidr, { strict: false });
    if (!oc || formatCidr(oc) !== formatCidr(c)) {
      throw new CtlError(
        `${at}: spec.cidr cannot change (stored ${old.cidr}, given ${s.cidr}); create a new pool, disable this one ` +
          `and recreate its workloads`,
      );
    }
    const obs = old.blockSize ?? BLOCK_SIZE[c.family].def;
    if (obs !== bs)
      throw new CtlError(
        `${at}: spec.blockSize cannot change (stored ${obs}, given ${bs}); create a new pool with the new block size ` +
          `instead`,
      );
  }
  for (const o of others) {
    if (o.metadata.name === name) continue;
    const oc = tryParseCidr(o.spec.cidr, { strict: false });
    if (oc && overlaps(c, oc)) {
      const rel = containsCidr(oc, c) ? 'lies inside' : containsCidr(c, oc) ? 'contains' : 'overlaps';
      throw new CtlError(
        `${at}: spec.cidr ${s.cidr} ${rel} IPPool ${JSON.stringify(o.metadata.name)} (${o.spec.cidr}); pools must ` +
          `not overlap`,
      );
    }
  }
}

/** Blocks of the pool that hold allocations: [block cidr, allocated count]. */
export async function poolAllocations(ds: Datastore, cidr: string): Promise<Array<[string, number]>> {
  const pc = tryParseCidr(cidr, { strict: false });
  if (!pc) return [];
  const blocks = await ds.list('IPAMBlock');
  const out: Array<[string, number]> = [];
  for (const b of blocks.items) {
    const bc = tryParseCidr(b.spec.cidr, { strict: false });
    if (!bc || !containsCidr(pc, bc)) continue;
    const n = b.spec.allocations.filter((a) => a !== null).length;
    if (n > 0) out.push([b.spec.cidr, n]);
  }
  return out;
}
