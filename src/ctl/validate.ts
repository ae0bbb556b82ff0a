// Validation of resources given by the operator. Structural checks come from
// the shared zod schemas (src/datastore/schemas.ts); IP pools get the semantic
// checks the allocator relies on (masked CIDR, no overlap, sane block size).
import { bgpConfigurationNameProblems } from '../model/bgp.js';
import { API_VERSION, NAMESPACED_KINDS, type BGPConfigurationSpec, type IPPoolSpec, type Kind, type Resource } from '../model/resources.js';
import { type Datastore } from '../datastore/types.js';
import { objectMetaSchema, specSchemas } from '../datastore/schemas.js';
import { parseSelector } from '../selector/index.js';
import { CtlError } from './io.js';
import { manifestKind } from './kinds.js';
import { containsCidr, formatCidr, overlaps, parseCidr, tryParseCidr, type Cidr } from '../net/cidr.js';

export const BLOCK_SIZE = {
  4: { min: 20, max: 32, def: 26 },
  6: { min: 116, max: 128, def: 122 },
} as const;

// Link-local ranges: the plugin routes pods through 169.254.1.1 and IPv6
// link-local next hops, so pool addresses there would collide with them.
const RESERVED: Array<{ text: string; cidr: Cidr }> = ['169.254.0.0/16', 'fe80::/10'].map((text) => ({ text, cidr: parseCidr(text) }));


const POOL_FIELDS = new Set(['cidr', 'blockSize', 'ipipMode', 'vxlanMode', 'natOutgoing', 'disabled', 'nodeSelector', 'allowedUses']);

export function describeRef(kind: Kind, name: string, namespace?: string): string {
  return `${kind} ${JSON.stringify(namespace ? `${namespace}/${name}` : name)}`;
}

function zodMessage(issues: Array<{ path: Array<string | number>; message: string }>, prefix: string): string {
  return issues
    .slice(0, 3)
    .map((i) => `${[prefix, ...i.path].filter((p) => p !== '').join('.')}: ${i.message}`)
    .join('; ');
}

/**
 * Turns one decoded manifest document into a typed resource, or throws a
 * CtlError naming the document, the field and the fix.
 */
export function parseManifest(doc: unknown, where: string): Resource {
  if (typeof doc !== 'object' || doc === null || Array.isArray(doc)) throw new CtlError(`${where}: expected a mapping with apiVersion, kind, metadata and spec`);
  const o = doc as Record<string, unknown>;
  const info = manifestKind(o.kind, where);
  const kind = info.kind;
  if (o.apiVersion !== API_VERSION) {
    throw new CtlError(`${where}: apiVersion ${JSON.stringify(o.apiVersion ?? null)} is not supported; use "${API_VERSION}"`);
  }
  const meta = objectMetaSchema.safeParse(o.metadata);
  if (!meta.success) throw new CtlError(`${where}: ${zodMessage(meta.error.issues, 'metadata')} (metadata.name is required)`);
  const name = meta.data.name;
  const at = `${where} (${describeRef(kind, name, meta.data.namespace)})`;
  if (/[/\s]/.test(name)) throw new CtlError(`${at}: metadata.name ${JSON.stringify(name)} must not contain "/" or whitespace`);
  if (!NAMESPACED_KINDS.has(kind) && meta.data.namespace) {
    throw new CtlError(`${at}: ${kind} is cluster-scoped; remove metadata.namespace`);
  }
  const rawSpec = (o.spec ?? {}) as Record<string, unknown>;
  // The pool's block size range depends on its family: validatePool checks it with a better message than the schema's 20-128.
  const poolBlockSize = kind === 'IPPool' && typeof rawSpec.blockSize === 'number' ? rawSpec.blockSize : undefined;
  const spec = specSchemas[kind].safeParse(poolBlockSize === undefined ? rawSpec : { ...rawSpec, blockSize: undefined });
  if (!spec.success) throw new CtlError(`${at}: ${zodMessage(spec.error.issues, 'spec')}`);
  if (poolBlockSize !== undefined) (spec.data as Record<string, unknown>).blockSize = poolBlockSize;
  else if (kind === 'IPPool') delete (spec.data as Record<string, unknown>).blockSize;
  const metadata = { ...meta.data };
  if (NAMESPACED_KINDS.has(kind)) metadata.namespace ??= 'default';
  if (kind === 'IPPool') {
    for (const k of Object.keys(spec.data)) {
      if (!POOL_FIELDS.has(k)) throw new CtlError(`${at}: unknown field spec.${k}; IPPool fields are ${[...POOL_FIELDS].join(', ')}`);
    }
  }
  if ((kind === 'IPAMConfig' || kind === 'ClusterInformation' || kind === 'KubeControllersConfiguration') && name !== 'default') {
    throw new CtlError(`${at}: ${kind} is a singleton; set metadata.name to "default"`);
  }
  if (kind === 'BGPConfiguration') {
    const [p] = bgpConfigurationNameProblems(name, spec.data as BGPConfigurationSpec);
    if (p) throw new CtlError(`${at}: ${p.path}: ${p.message}`);
  }
  return { apiVersion: API_VERSION, kind, metadata, spec: spec.data } as Resource;
}

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
export function validatePool(pool: Resource<'IPPool'>, others: Array<Resource<'IPPool'>>, existing?: Resource<'IPPool'>): void {
  const name = pool.metadata.name;
  const at = `IPPool ${JSON.stringify(name)}`;
  const s = pool.spec;
  const c = tryParseCidr(s.cidr, { strict: false });
  if (!c) throw new CtlError(`${at}: spec.cidr ${JSON.stringify(s.cidr)} is not a valid CIDR; use e.g. "10.244.0.0/16" or "fd00:10:244::/64"`);
  if (!tryParseCidr(s.cidr)) throw new CtlError(`${at}: spec.cidr ${JSON.stringify(s.cidr)} has host bits set; use ${JSON.stringify(formatCidr(c))}`);
  const lim = BLOCK_SIZE[c.family];
  const bs = s.blockSize ?? lim.def;
  if (!Number.isInteger(bs) || bs < lim.min || bs > lim.max) {
    throw new CtlError(`${at}: spec.blockSize ${bs} is out of range for an IPv${c.family} pool; use ${lim.min}-${lim.max} (default ${lim.def})`);
  }
  if (bs < c.prefix) {
    throw new CtlError(`${at}: spec.blockSize ${bs} makes blocks larger than the pool ${s.cidr}; use a block size of at least ${c.prefix}`);
  }
  for (const r of RESERVED) {
    if (overlaps(c, r.cidr)) throw new CtlError(`${at}: spec.cidr ${s.cidr} overlaps the link-local range ${r.text}, which the plugin uses for pod routing; choose another range`);
  }
  if (c.family === 6 && s.ipipMode && s.ipipMode !== 'Never') {
    throw new CtlError(`${at}: spec.ipipMode ${JSON.stringify(s.ipipMode)} is not supported for IPv6 pools (IP-in-IP carries IPv4 only); use "Never" or vxlanMode`);
  }
  if (s.ipipMode && s.ipipMode !== 'Never' && s.vxlanMode && s.vxlanMode !== 'Never') {
    throw new CtlError(`${at}: spec.ipipMode ${JSON.stringify(s.ipipMode)} and spec.vxlanMode ${JSON.stringify(s.vxlanMode)} are both enabled; set one of them to "Never"`);
  }
  if (s.nodeSelector !== undefined) {
    try {
      parseSelector(s.nodeSelector);
    } catch (e) {
      // SelectorParseError's first line reads "<what> at <position>: expected <token>".
      const first = String((e as Error).message).split('\n')[0];
      throw new CtlError(`${at}: spec.nodeSelector ${JSON.stringify(s.nodeSelector)} is invalid: ${first}; e.g. "all()" or "zone == 'a'"`);
    }
  }
  if (existing) {
    const old = existing.spec;
    const oc = tryParseCidr(old.cidr, { strict: false });
    if (!oc || formatCidr(oc) !== formatCidr(c)) {
      throw new CtlError(`${at}: spec.cidr cannot change (stored ${old.cidr}, given ${s.cidr}); create a new pool, disable this one and recreate its workloads`);
    }
    const obs = old.blockSize ?? BLOCK_SIZE[c.family].def;
    if (obs !== bs) throw new CtlError(`${at}: spec.blockSize cannot change (stored ${obs}, given ${bs}); create a new pool with the new block size instead`);
  }
  for (const o of others) {
    if (o.metadata.name === name) continue;
    const oc = tryParseCidr(o.spec.cidr, { strict: false });
    if (oc && overlaps(c, oc)) {
      const rel = containsCidr(oc, c) ? 'lies inside' : containsCidr(c, oc) ? 'contains' : 'overlaps';
      throw new CtlError(`${at}: spec.cidr ${s.cidr} ${rel} IPPool ${JSON.stringify(o.metadata.name)} (${o.spec.cidr}); pools must not overlap`);
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
