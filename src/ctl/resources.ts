// apply / create / replace / get / delete of v3 resources.
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { DatastoreError } from '../errors.js';
import { NAMESPACED_KINDS, type Kind, type Resource } from '../model/resources.js';
import type { Datastore, InvalidObject } from '../datastore/types.js';
import { InvalidObjectError, invalidLabel } from '../datastore/invalid.js';
import { casRetry, getIfExists } from '../datastore/cas.js';
import {
  bool,
  cannotRead,
  CtlError,
  suggestFlag,
  DRY_RUN,
  dryRun,
  parseCommand,
  printHelp,
  readStdin,
  str,
  table,
  type CtlCommand,
  type CtlGroup,
  type CtlIO,
} from './io.js';
import { fromKubectlSelector, parseSelector } from '../selector/index.js';
import { resolveKind } from './kinds.js';
import { deleteNode } from './node.js';
import { convertLabelSelector, k8sPolicyTypes } from '../model/k8s-networkpolicy.js';
import { parseJsonPath, printValue, relaxedPath, type JsonPathTemplate } from './jsonpath.js';
import { describeRef, parseManifest, poolAllocations, poolDefaults, validatePool } from './validate.js';

type OutputFormat =
  | 'table'
  | 'wide'
  | 'json'
  | 'yaml'
  | 'name'
  | { jsonpath: JsonPathTemplate }
  | { columns: Array<{ header: string; path: JsonPathTemplate }> };

const FORMATS = 'yaml, json, wide, name, jsonpath=TEMPLATE or custom-columns=HEADER:PATH,...';

function outputFormat(v: string | undefined): OutputFormat {
  if (v === undefined || v === 'table') return 'table';
  if (v === 'wide' || v === 'json' || v === 'yaml' || v === 'name') return v;
  const m = /^(jsonpath|custom-columns)(?:=([\s\S]*))?$/.exec(v);
  if (m?.[1] === 'jsonpath') {
    if (!m[2]) throw new CtlError(`-o jsonpath needs a template, e.g. -o jsonpath='{.items[*].metadata.name}'`);
    return { jsonpath: parseJsonPath(m[2]) };
  }
  if (m?.[1] === 'custom-columns') {
    if (!m[2])
      throw new CtlError(`-o custom-columns needs columns, e.g. -o custom-columns=NAME:.metadata.name,CIDR:.spec.cidr`);
    return {
      columns: m[2].split(',').map((c) => {
        const colon = c.indexOf(':');
        if (colon <= 0)
          throw new CtlError(`-o custom-columns: ${JSON.stringify(c)} is not HEADER:PATH (e.g. CIDR:.spec.cidr)`);
        return { header: c.slice(0, colon), path: parseJsonPath(relaxedPath(c.slice(colon + 1))) };
      }),
    };
  }
  throw new CtlError(
    `-o ${JSON.stringify(v)} is not supported; use ${FORMATS}${suggestFlag(v, ['jsonpath', 'custom-columns'])}`,
  );
}

const MANIFEST_FILE = /\.(ya?ml|json)$/;

/** -f DIR: every YAML and JSON file in it (not recursive), in name order. */
function manifestFiles(file: string, io: CtlIO): string[] {
  if (file === '-') return [file];
  const abs = resolve(io.cwd ?? process.cwd(), file);
  let dir = false;
  try {
    dir = statSync(abs).isDirectory();
  } catch {
    return [file];
  }
  if (!dir) return [file];
  const files = readdirSync(abs)
    .filter((f) => MANIFEST_FILE.test(f) && !f.startsWith('.'))
    .sort();
  if (!files.length) throw new CtlError(`-f ${file}: the directory holds no .yaml, .yml or .json files`);
  return files.map((f) => join(file, f));
}

/** yaml takes tens of milliseconds to load: only a command that reads or writes YAML pays for it. */
async function loadYaml(): Promise<typeof import('yaml')> {
  return import('yaml');
}

/**
 * Reads every document of `-f FILE` (or `-` for stdin): YAML or JSON, `---`-separated, `kind: List` and JSON arrays
 * expanded.
 */
export async function readManifests(file: string, io: CtlIO): Promise<Array<{ res: Resource; where: string }>> {
  return (await readDocuments(file, io)).map((d) => ({ res: parseManifest(d.doc, d.where), where: d.where }));
}

/** The documents of `-f FILE|DIR` as plain objects (any kind), each with where it came from. */
export async function readDocuments(file: string, io: CtlIO): Promise<Array<{ doc: unknown; where: string }>> {
  const files = manifestFiles(file, io);
  if (files.length > 1 || files[0] !== file) {
    const all: Array<{ doc: unknown; where: string }> = [];
    for (const f of files) all.push(...(await readDocumentFile(f, io)));
    return all;
  }
  return readDocumentFile(file, io);
}

async function readDocumentFile(file: string, io: CtlIO): Promise<Array<{ doc: unknown; where: string }>> {
  let text: string;
  const label = file === '-' ? 'stdin' : file;
  if (file === '-') text = await readStdin(io);
  else {
    try {
      text = readFileSync(resolve(io.cwd ?? process.cwd(), file), 'utf8');
    } catch (e) {
      throw cannotRead(`-f ${file}`, e);
    }
  }
  const raw: Array<{ doc: unknown; where: string }> = [];
  const trimmed = text.trim();
  let json: unknown;
  if (trimmed.startsWith('{') || trimmed.startsWith('[')) {
    // A plain JSON document needs no YAML parser; anything else (several
    // documents, YAML that starts with a flow mapping) goes to the YAML parser.
    try {
      json = JSON.parse(trimmed);
    } catch {
      json = undefined;
    }
  }
  if (json !== undefined) raw.push({ doc: json, where: label });
  else {
    const YAML = await loadYaml();
    const docs = YAML.parseAllDocuments(text);
    let i = 0;
    for (const d of docs) {
      i++;
      if (d.errors.length) {
        const e = d.errors[0]!;
        const pos = e.linePos?.[0];
        throw new CtlError(
          `${label}: invalid YAML in document ${i}${pos ? ` at line ${pos.line}, column ${pos.col}` : ''}: ` +
            `${e.message.split('\n')[0]}`,
        );
      }
      const v = d.toJSON() as unknown;
      if (v === null || v === undefined) continue;
      raw.push({ doc: v, where: `${label} document ${i}` });
    }
  }
  const out: Array<{ doc: unknown; where: string }> = [];
  const expand = (doc: unknown, where: string) => {
    if (Array.isArray(doc)) {
      doc.forEach((d, j) => expand(d, `${where} item ${j + 1}`));
      return;
    }
    const o = doc as Record<string, unknown> | null;
    if (o && typeof o === 'object' && typeof o.kind === 'string' && /List$/.test(o.kind) && Array.isArray(o.items)) {
      o.items.forEach((d, j) => expand(d, `${where} item ${j + 1}`));
      return;
    }
    out.push({ doc, where });
  };
  for (const r of raw) expand(r.doc, r.where);
  if (out.length === 0) throw new CtlError(`${label}: no resources found`);
  return out;
}

function lower(kind: Kind): string {
  return kind.toLowerCase();
}

function refText(r: Resource): string {
  return (
    `${lower(r.kind)}/${NAMESPACED_KINDS.has(r.kind) ? `${r.metadata.namespace ?? 'default'}/` : ''}` +
    `${r.metadata.name}`
  );
}

function checkWritable(res: Resource, where: string): void {
  if (resolveKind(res.kind).readOnly) {
    throw new CtlError(
      `${where}: ${res.kind} resources are written by the plugin only; they cannot be applied or deleted with ` +
        `netpluginctl`,
    );
  }
}

/** Prepares a resource for storage: pool defaults + validation against the store. */
async function prepare(ds: Datastore, res: Resource, existing: Resource | undefined): Promise<Resource> {
  if (res.kind !== 'IPPool') return res;
  const pool = { ...res, spec: poolDefaults((res as Resource<'IPPool'>).spec) } as Resource<'IPPool'>;
  const pools = await ds.list('IPPool');
  validatePool(pool, pools.items, existing as Resource<'IPPool'> | undefined);
  return pool;
}

function sameContent(a: Resource, b: Resource): boolean {
  const norm = (r: Resource) => JSON.stringify([r.spec, r.metadata.labels ?? {}, r.metadata.annotations ?? {}]);
  return norm(a) === norm(b);
}

type WriteMode = 'apply' | 'create' | 'replace';

/** One resource through apply/create/replace, retrying compare-and-swap conflicts (another writer raced us). */
export async function writeResource(
  ds: Datastore,
  input: Resource,
  mode: WriteMode,
  dryRun = false,
): Promise<'created' | 'configured' | 'unchanged' | 'replaced'> {
  const { name, namespace } = input.metadata;
  let action: 'created' | 'configured' | 'unchanged' | 'replaced' = 'unchanged';
  // Another writer racing us: read again and redo the step (a create that lost finds the object, then create/replace
  // decide).
  await casRetry(
    ds,
    { kind: input.kind, name, ...(namespace !== undefined ? { namespace } : {}) },
    async (existing) => {
      if (!existing) {
        if (mode === 'replace')
          throw new CtlError(
            `${describeRef(input.kind, name, namespace)} does not exist; use 'netpluginctl create' or 'apply'`,
          );
        const res = await prepare(ds, input, undefined);
        const meta = { ...res.metadata };
        delete meta.resourceVersion;
        delete meta.uid;
        delete meta.creationTimestamp;
        action = 'created';
        return dryRun ? undefined : { ...res, metadata: meta };
      }
      if (mode === 'create')
        throw new CtlError(
          `${describeRef(input.kind, name, namespace)} already exists; use 'netpluginctl apply' or 'replace' to ` +
            `update it`,
        );
      const res = await prepare(ds, input, existing);
      action = 'unchanged';
      if (sameContent(res, existing)) return undefined;
      // replace honours a resourceVersion given in the file (optimistic concurrency for the operator); apply always
      // writes over the latest.
      if (
        mode === 'replace' &&
        input.metadata.resourceVersion &&
        input.metadata.resourceVersion !== existing.metadata.resourceVersion
      ) {
        throw new CtlError(
          `${describeRef(input.kind, name, namespace)} was modified since resourceVersion ` +
            `${input.metadata.resourceVersion}; get it again and re-apply your change`,
        );
      }
      action = mode === 'replace' ? 'replaced' : 'configured';
      return dryRun
        ? undefined
        : {
            ...res,
            metadata: { ...existing.metadata, labels: res.metadata.labels, annotations: res.metadata.annotations },
          };
    },
    { attempts: 5 },
  );
  return action;
}

async function cmdWrite(ds: Datastore, io: CtlIO, file: string, mode: WriteMode, dryRun = false): Promise<number> {
  const docs = await readManifests(file, io);
  for (const d of docs) checkWritable(d.res, d.where);
  let failed = 0;
  for (const d of docs) {
    try {
      const r = await writeResource(ds, d.res, mode, dryRun);
      io.stdout(`${refText(d.res)} ${r}${dryRun ? ' (dry run)' : ''}\n`);
    } catch (e) {
      // Keep going: with several documents, the operator wants every error at once.
      failed++;
      io.stderr(`error: ${errText(e)}\n`);
    }
  }
  return failed ? 1 : 0;
}

export function errText(e: unknown): string {
  if (e instanceof CtlError) return e.message;
  if (e instanceof DatastoreError) return `datastore (${e.kind}): ${e.message}`;
  return e instanceof Error ? e.message : String(e);
}

async function cmdDelete(
  ds: Datastore,
  io: CtlIO,
  args: {
    kind?: string | undefined;
    names: string[];
    file?: string | undefined;
    namespace?: string | undefined;
    force?: boolean | undefined;
    ignoreNotFound?: boolean | undefined;
    dryRun?: boolean | undefined;
  },
): Promise<number> {
  const dry = args.dryRun ? ' (dry run)' : '';
  const targets: Array<{ kind: Kind; name: string; namespace?: string | undefined }> = [];
  if (args.file) {
    if (args.kind || args.names.length) throw new CtlError(`delete takes either -f FILE or <kind> <name>, not both`);
    for (const d of await readManifests(args.file, io)) {
      checkWritable(d.res, d.where);
      targets.push({ kind: d.res.kind, name: d.res.metadata.name, namespace: d.res.metadata.namespace });
    }
  } else {
    if (!args.kind || args.names.length === 0)
      throw new CtlError(
        `delete needs <kind> <name> or -f FILE; e.g. 'netpluginctl delete ippool default-ipv4-ippool'`,
      );
    const info = resolveKind(args.kind);
    if (info.readOnly)
      throw new CtlError(`${info.kind} resources are managed by the plugin; delete the workload instead`);
    for (const n of args.names)
      targets.push({
        kind: info.kind,
        name: n,
        namespace: NAMESPACED_KINDS.has(info.kind) ? (args.namespace ?? 'default') : undefined,
      });
  }
  let failed = 0;
  for (const t of targets) {
    const ref = `${lower(t.kind)}/${t.namespace ? t.namespace + '/' : ''}${t.name}`;
    try {
      if (t.kind === 'IPPool') {
        const pool = await getIfExists(ds, 'IPPool', t.name);
        if (pool) {
          const used = await poolAllocations(ds, pool.spec.cidr);
          if (used.length && !args.force) {
            const n = used.reduce((a, [, c]) => a + c, 0);
            throw new CtlError(
              `IPPool ${JSON.stringify(t.name)} (${pool.spec.cidr}) still has ${n} allocated address` +
                `${n === 1 ? '' : 'es'} in ${used.length} block${used.length === 1 ? '' : 's'}; ` +
                `recreate those workloads from another pool first (set spec.disabled: true to stop new allocations), ` +
                `or pass --force to delete it anyway`,
            );
          }
          // The revision guard keeps us from deleting a pool someone changed after we checked it.
          if (!args.dryRun) await ds.delete('IPPool', t.name, { revision: pool.metadata.resourceVersion });
          if (used.length)
            io.stderr(
              `warning: ${ref} had allocations; those addresses stay in use until their workloads are deleted\n`,
            );
          io.stdout(`${ref} deleted${dry}\n`);
          continue;
        }
      }
      if (t.kind === 'Node' && !args.dryRun) {
        await deleteNode(ds, io, t.name);
        continue;
      }
      if (args.dryRun) await ds.get(t.kind, t.name, t.namespace);
      else await ds.delete(t.kind, t.name, { namespace: t.namespace });
      io.stdout(`${ref} deleted${dry}\n`);
    } catch (e) {
      if (DatastoreError.is(e, 'NotFound')) {
        if (args.ignoreNotFound) continue;
        failed++;
        io.stderr(`error: ${describeRef(t.kind, t.name, t.namespace)} not found\n`);
        continue;
      }
      failed++;
      io.stderr(`error: ${errText(e)}\n`);
    }
  }
  return failed ? 1 : 0;
}

function age(ts: string | undefined, now = Date.now()): string {
  if (!ts) return '';
  const s = Math.max(0, Math.floor((now - Date.parse(ts)) / 1000));
  if (!Number.isFinite(s)) return '';
  if (s < 120) return `${s}s`;
  if (s < 7200) return `${Math.floor(s / 60)}m`;
  if (s < 172800) return `${Math.floor(s / 3600)}h`;
  return `${Math.floor(s / 86400)}d`;
}

function columns(kind: Kind, wide: boolean): { header: string[]; row: (r: Resource) => string[] } {
  const labels = (r: Resource) =>
    Object.entries(r.metadata.labels ?? {})
      .map(([k, v]) => `${k}=${v}`)
      .join(',');
  const blankIfUnset = (n: number | undefined) => (n === undefined ? '' : String(n));
  switch (kind) {
    case 'IPPool':
      return {
        header: wide
          ? ['NAME', 'CIDR', 'BLOCKSIZE', 'IPIP', 'VXLAN', 'NAT', 'DISABLED', 'SELECTOR']
          : ['NAME', 'CIDR', 'SELECTOR'],
        row: (r) => {
          const s = (r as Resource<'IPPool'>).spec;
          return wide
            ? [
                r.metadata.name,
                s.cidr,
                String(s.blockSize ?? ''),
                s.ipipMode ?? 'Never',
                s.vxlanMode ?? 'Never',
                String(s.natOutgoing ?? false),
                String(s.disabled ?? false),
                s.nodeSelector ?? 'all()',
              ]
            : [r.metadata.name, s.cidr, s.nodeSelector ?? 'all()'];
        },
      };
    case 'Node':
      return {
        header: wide ? ['NAME', 'ADDRESSES', 'PODCIDRS', 'LABELS'] : ['NAME', 'ADDRESSES'],
        row: (r) => {
          const s = (r as Resource<'Node'>).spec;
          const addrs = (s.addresses ?? []).map((a) => a.address).join(',');
          return wide ? [r.metadata.name, addrs, (s.podCIDRs ?? []).join(','), labels(r)] : [r.metadata.name, addrs];
        },
      };
    case 'WorkloadEndpoint':
      return {
        header: wide
          ? ['NAMESPACE', 'NAME', 'WORKLOAD', 'NODE', 'NETWORKS', 'INTERFACE', 'CONTAINER']
          : ['NAMESPACE', 'NAME', 'WORKLOAD', 'NODE', 'NETWORKS', 'INTERFACE'],
        row: (r) => {
          const s = (r as Resource<'WorkloadEndpoint'>).spec;
          const base = [
            r.metadata.namespace ?? '',
            r.metadata.name,
            s.workload ?? s.pod ?? '',
            s.node,
            s.ipNetworks.join(','),
            s.interfaceName,
          ];
          return wide ? [...base, s.containerID] : base;
        },
      };
    case 'HostEndpoint':
      return {
        header: ['NAME', 'NODE', 'INTERFACE', 'EXPECTEDIPS'],
        row: (r) => {
          const s = (r as Resource<'HostEndpoint'>).spec;
          return [r.metadata.name, s.node, s.interfaceName ?? '*', (s.expectedIPs ?? []).join(',')];
        },
      };
    case 'ClusterInformation':
      return {
        header: ['NAME', 'VERSION', 'TYPE', 'READY', 'GUID'],
        row: (r) => {
          const s = (r as Resource<'ClusterInformation'>).spec;
          return [
            r.metadata.name,
            s.netpluginVersion ?? '',
            s.clusterType ?? '',
            String(s.datastoreReady ?? false),
            s.clusterGUID ?? '',
          ];
        },
      };
    case 'IPAMConfig':
      return {
        header: ['NAME', 'STRICTAFFINITY', 'MAXBLOCKSPERHOST', 'AUTOALLOCATEBLOCKS'],
        row: (r) => {
          const s = (r as Resource<'IPAMConfig'>).spec;
          return [
            r.metadata.name,
            String(s.strictAffinity ?? false),
            String(s.maxBlocksPerHost ?? 0),
            String(s.autoAllocateBlocks ?? true),
          ];
        },
      };
    case 'BGPPeer':
      return {
        header: ['NAME', 'PEERIP', 'ASN', 'NODE', 'PEERSELECTOR'],
        row: (r) => {
          const s = (r as Resource<'BGPPeer'>).spec;
          const node = s.node ?? (s.nodeSelector !== undefined ? `selector: ${s.nodeSelector}` : '(global)');
          return [r.metadata.name, s.peerIP ?? '', blankIfUnset(s.asNumber), node, s.peerSelector ?? ''];
        },
      };
    case 'BGPConfiguration':
      return {
        header: ['NAME', 'ASN', 'MESH', 'LISTENPORT'],
        row: (r) => {
          const s = (r as Resource<'BGPConfiguration'>).spec;
          const mesh = r.metadata.name === 'default' ? String(s.nodeToNodeMeshEnabled ?? true) : '';
          return [r.metadata.name, blankIfUnset(s.asNumber), mesh, blankIfUnset(s.listenPort)];
        },
      };
    case 'NetworkPolicy':
    case 'GlobalNetworkPolicy':
      return {
        header: [...(kind === 'NetworkPolicy' ? ['NAMESPACE'] : []), 'NAME', 'ORDER', 'SELECTOR'],
        row: (r) => {
          const s = (r as Resource<'NetworkPolicy'>).spec;
          return [
            ...(kind === 'NetworkPolicy' ? [r.metadata.namespace ?? ''] : []),
            r.metadata.name,
            blankIfUnset(s.order),
            String(s.selector ?? 'all()'),
          ];
        },
      };
    case 'StagedNetworkPolicy':
    case 'StagedGlobalNetworkPolicy':
      return {
        header: [...(kind === 'StagedNetworkPolicy' ? ['NAMESPACE'] : []), 'NAME', 'ACTION', 'ORDER', 'SELECTOR'],
        row: (r) => {
          const s = (r as Resource<'StagedNetworkPolicy'>).spec;
          const set = s.stagedAction !== 'Delete';
          return [
            ...(kind === 'StagedNetworkPolicy' ? [r.metadata.namespace ?? ''] : []),
            r.metadata.name,
            s.stagedAction ?? 'Set',
            blankIfUnset(s.order),
            set ? String(s.selector ?? 'all()') : '',
          ];
        },
      };
    case 'StagedKubernetesNetworkPolicy':
      return {
        header: ['NAMESPACE', 'NAME', 'ACTION', 'POD-SELECTOR', 'POLICY-TYPES'],
        row: (r) => {
          const s = (r as Resource<'StagedKubernetesNetworkPolicy'>).spec;
          if (s.stagedAction === 'Delete') return [r.metadata.namespace ?? '', r.metadata.name, 'Delete', '', ''];
          const pods = convertLabelSelector(s.podSelector, 'spec.podSelector');
          return [r.metadata.namespace ?? '', r.metadata.name, 'Set', pods, k8sPolicyTypes(s).join(',')];
        },
      };
    default:
      return {
        header: wide ? ['NAME', 'AGE', 'LABELS'] : ['NAME', 'AGE'],
        row: (r) =>
          wide
            ? [r.metadata.name, age(r.metadata.creationTimestamp), labels(r)]
            : [r.metadata.name, age(r.metadata.creationTimestamp)],
      };
  }
}

interface FormatOptions {
  /** One object asked for by name: printed as itself, not as a List. */
  single?: boolean | undefined;
  allNamespaces?: boolean | undefined;
  noHeaders?: boolean | undefined;
  /** --show-labels: a LABELS column at the end of a table. */
  showLabels?: boolean | undefined;
  /** --sort-by PATH (kubectl's relaxed JSONPath). */
  sortBy?: string | undefined;
}

/** --sort-by: items ordered by the first value PATH yields (numbers numerically, missing ones first). */
function sortItems(items: Resource[], sortBy: string | undefined): Resource[] {
  if (!sortBy) return items;
  const path = parseJsonPath(relaxedPath(sortBy));
  const keyed = items.map((r) => ({ r, k: path.values(r)[0] }));
  const rank = (k: unknown) => (k === undefined || k === null ? 0 : typeof k === 'number' ? 1 : 2);
  keyed.sort((x, y) => {
    const d = rank(x.k) - rank(y.k);
    if (d) return d;
    if (typeof x.k === 'number' && typeof y.k === 'number') return x.k - y.k;
    const a = printValue(x.k);
    const b = printValue(y.k);
    return a < b ? -1 : a > b ? 1 : 0;
  });
  return keyed.map((e) => e.r);
}

/** The header and the rows of a table format (table, wide, custom-columns). */
function tableRows(
  kind: Kind,
  format: OutputFormat,
  opts: FormatOptions,
): { header: string[]; row: (r: Resource) => string[] } {
  if (typeof format === 'object' && 'columns' in format) {
    return {
      header: format.columns.map((c) => c.header),
      row: (r) =>
        format.columns.map((c) => {
          const v = c.path.values(r);
          return v.length ? v.map(printValue).join(',') : '<none>';
        }),
    };
  }
  const { header, row } = columns(kind, format === 'wide');
  let h = header;
  let rowOf = row;
  // Namespace column only matters when listing across namespaces.
  if (NAMESPACED_KINDS.has(kind) && !opts.allNamespaces && h[0] === 'NAMESPACE') {
    h = h.slice(1);
    rowOf = (r) => row(r).slice(1);
  }
  if (opts.showLabels && h[h.length - 1] !== 'LABELS') {
    const base = rowOf;
    h = [...h, 'LABELS'];
    rowOf = (r) => [...base(r), labelText(r)];
  }
  return { header: h, row: rowOf };
}

function labelText(r: Resource): string {
  const l = Object.entries(r.metadata.labels ?? {}).map(([k, v]) => `${k}=${v}`);
  return l.length ? l.join(',') : '<none>';
}

async function formatResources(
  items: Resource[],
  kind: Kind,
  format: OutputFormat,
  opts: FormatOptions = {},
): Promise<string> {
  items = sortItems(items, opts.sortBy);
  const obj = opts.single ? items[0] : { apiVersion: 'netplugin.org/v3', kind: `${kind}List`, items };
  if (format === 'name') return items.map((r) => `${lower(kind)}/${r.metadata.name}\n`).join('');
  if (format === 'json') return JSON.stringify(obj, null, 2) + '\n';
  if (format === 'yaml') return (await loadYaml()).stringify(obj);
  if (typeof format === 'object' && 'jsonpath' in format) return format.jsonpath.evaluate(obj);
  const { header, row } = tableRows(kind, format, opts);
  const text = table(header, items.map(row));
  return opts.noHeaders ? text.slice(text.indexOf('\n') + 1) : text;
}

/** The named resources of one kind; each missing one is reported on stderr and counted. */
async function getNamed(
  ds: Datastore,
  io: CtlIO,
  kind: Kind,
  names: string[],
  ns: string | undefined,
): Promise<{ items: Resource[]; failed: number }> {
  const items: Resource[] = [];
  let failed = 0;
  for (const name of names) {
    try {
      items.push(await ds.get(kind, name, ns));
    } catch (e) {
      if (!DatastoreError.is(e, 'NotFound')) throw e;
      failed++;
      io.stderr(`error: ${describeRef(kind, name, ns)} not found\n`);
    }
  }
  return { items, failed };
}

interface GetArgs {
  kind: string;
  names: string[];
  namespace?: string | undefined;
  allNamespaces?: boolean | undefined;
  output?: string | undefined;
  selector?: string | undefined;
  noHeaders?: boolean | undefined;
  showLabels?: boolean | undefined;
  sortBy?: string | undefined;
  /** -w: after the list, print each change until io.signal aborts (SIGINT). */
  watch?: boolean | undefined;
  /** --watch-only: the changes, not the list first. */
  watchOnly?: boolean | undefined;
  /** --output-watch-events: an EVENT column (tables) or {type, object} (json, yaml). */
  watchEvents?: boolean | undefined;
}

async function cmdGet(ds: Datastore, io: CtlIO, args: GetArgs): Promise<number> {
  const info = resolveKind(args.kind);
  const format = outputFormat(args.output);
  if (args.sortBy) sortItems([], args.sortBy);
  const namespaced = NAMESPACED_KINDS.has(info.kind);
  const opts: FormatOptions = {
    allNamespaces: args.allNamespaces,
    noHeaders: args.noHeaders,
    showLabels: args.showLabels,
    sortBy: args.sortBy,
  };
  const watching = Boolean(args.watch || args.watchOnly);
  if (args.names.length) {
    if (args.allNamespaces) throw new CtlError(`-A cannot be combined with a name; give the namespace with -n`);
    const ns = namespaced ? (args.namespace ?? 'default') : undefined;
    if (watching) return watchGet(ds, io, info.kind, format, opts, args, { ns, names: new Set(args.names) });
    const { items, failed } = await getNamed(ds, io, info.kind, args.names, ns);
    if (items.length)
      io.stdout(await formatResources(items, info.kind, format, { ...opts, single: args.names.length === 1 }));
    return failed ? 1 : 0;
  }
  const ns = namespaced && !args.allNamespaces ? (args.namespace ?? 'default') : undefined;
  const labelSelector = args.selector === undefined ? undefined : await labelSelectorArg(args.selector);
  if (watching) return watchGet(ds, io, info.kind, format, opts, args, { ns, labelSelector });
  const list = await ds.list(info.kind, { namespace: ns, labelSelector });
  warnInvalid(io, list.invalid);
  if (format === 'table' || format === 'wide') {
    if (list.items.length === 0) {
      io.stderr(`no ${info.kind} resources found${ns ? ` in namespace ${ns}` : ''}\n`);
      return 0;
    }
  }
  io.stdout(await formatResources(list.items, info.kind, format, opts));
  return 0;
}

/** A list leaves malformed objects out: say so on stderr, naming each and where to look. */
function warnInvalid(io: CtlIO, invalid: InvalidObject[] | undefined): void {
  for (const o of invalid ?? []) {
    io.stderr(
      `warning: ${invalidLabel(o)} is malformed and not shown (${o.reason}); see 'netpluginctl describe ` +
        `${lower(o.kind)} ${o.name}${o.namespace !== undefined ? ` -n ${o.namespace}` : ''}'\n`,
    );
  }
}

/**
 * get -w: the list (unless --watch-only), then one row (or document) per
 * change, as kubectl prints them, until io.signal aborts. A watch the store
 * cut off (compacted revision, 410) is resumed from a fresh list.
 */
async function watchGet(
  ds: Datastore,
  io: CtlIO,
  kind: Kind,
  format: OutputFormat,
  opts: FormatOptions,
  args: GetArgs,
  filter: { ns: string | undefined; names?: Set<string>; labelSelector?: string | undefined },
): Promise<number> {
  const sel = filter.labelSelector === undefined ? undefined : parseSelector(filter.labelSelector);
  const wanted = (r: Resource) =>
    (!filter.names || filter.names.has(r.metadata.name)) &&
    (filter.ns === undefined || (r.metadata.namespace ?? 'default') === filter.ns) &&
    (!sel || sel.matches(r.metadata.labels ?? {}));
  const events = Boolean(args.watchEvents);
  const tabular = format === 'table' || format === 'wide' || (typeof format === 'object' && 'columns' in format);
  const { header, row } = tabular ? tableRows(kind, format, opts) : { header: [], row: () => [] };
  const fullHeader = events ? ['EVENT', ...header] : header;
  // Columns at least as wide as the header, so rows printed one at a time still line up under it.
  const widths = fullHeader.map((h) => h.length);
  let headerShown = Boolean(opts.noHeaders);
  const line = (cells: string[]) => {
    cells.forEach((c, i) => (widths[i] = Math.max(widths[i] ?? 0, c.length)));
    return (
      cells
        .map((c, i) => (i === cells.length - 1 ? c : c.padEnd(widths[i]!)))
        .join('   ')
        .trimEnd() + '\n'
    );
  };
  const YAML = format === 'yaml' ? await loadYaml() : undefined;
  let docs = 0;
  const print = (type: string, r: Resource) => {
    if (tabular) {
      let out = '';
      const cells = [...(events ? [type] : []), ...row(r)];
      if (!headerShown) {
        fullHeader.forEach((_h, i) => (widths[i] = Math.max(widths[i]!, cells[i]?.length ?? 0)));
        out += line(fullHeader);
        headerShown = true;
      }
      io.stdout(out + line(cells));
      return;
    }
    const obj = events ? { type, object: r } : r;
    if (format === 'name') io.stdout(`${events ? `${type} ` : ''}${lower(kind)}/${r.metadata.name}\n`);
    else if (format === 'json') io.stdout(JSON.stringify(obj, null, 2) + '\n');
    else if (YAML) io.stdout(`${docs++ ? '---\n' : ''}${YAML.stringify(obj)}`);
    else if (typeof format === 'object' && 'jsonpath' in format) io.stdout(format.jsonpath.evaluate(obj));
  };
  const signal = io.signal;
  let first = true;
  for (;;) {
    const list = await ds.list(kind, {
      namespace: filter.ns,
      ...(filter.labelSelector !== undefined ? { labelSelector: filter.labelSelector } : {}),
    });
    if (first && !args.watchOnly) for (const r of sortItems(list.items.filter(wanted), opts.sortBy)) print('ADDED', r);
    first = false;
    const again = await new Promise<boolean>((resolveWatch) => {
      if (signal?.aborted) return resolveWatch(false);
      const w = ds.watch(kind, { revision: list.revision, namespace: filter.ns }, (ev) => {
        if (ev.type === 'ERROR') {
          w.stop();
          signal?.removeEventListener('abort', onAbort);
          resolveWatch(true);
          return;
        }
        if (wanted(ev.object)) print(ev.type, ev.object);
      });
      const onAbort = () => {
        w.stop();
        resolveWatch(false);
      };
      signal?.addEventListener('abort', onAbort, { once: true });
    });
    if (!again) return 0;
  }
}

/** -l: our selector syntax, or kubectl's (`zone=a,!legacy`) translated to it. */
async function labelSelectorArg(sel: string): Promise<string> {
  try {
    parseSelector(sel);
    return sel;
  } catch (e) {
    const translated = fromKubectlSelector(sel);
    if (translated !== undefined) return translated;
    throw new CtlError(
      `-l ${JSON.stringify(sel)}: ${(e as Error).message} (kubectl's form works too: key=value,key!=value,key in ` +
        `(a,b),!key)`,
    );
  }
}

// ---------------------------------------------------------------- commands

const RESOURCES_HELP: Record<string, string> = {
  apply: `Usage: netpluginctl apply -f FILE|DIR|- [--dry-run]

Creates each resource in FILE (or stdin with -), or updates it when it exists. FILE holds
YAML or JSON: one document, several separated by ---, a JSON array, or a kind: List.
IPPools are validated (masked CIDR, no overlap, block size, selector); cidr and
blockSize cannot change once created. -f DIR reads every .yaml, .yml and .json file in DIR
(not recursive, in name order). --dry-run (or --dry-run=client) checks everything against the
datastore and writes nothing.

Example:
  cat <<EOF | netpluginctl apply -f -
  apiVersion: netplugin.org/v3
  kind: IPPool
  metadata: {name: default-ipv4-ippool}
  spec: {cidr: 10.244.0.0/16, natOutgoing: true, nodeSelector: all()}
  EOF
`,
  create: `Usage: netpluginctl create -f FILE|-

Like apply, but fails for resources that already exist.
`,
  replace: `Usage: netpluginctl replace -f FILE|-

Updates existing resources. When a document carries metadata.resourceVersion (as printed by
get -o yaml), the update only succeeds if nobody changed the resource since.
`,
  get: `Usage: netpluginctl get <kind> [name...] [-o FORMAT] [-n NAMESPACE | -A] [-l SELECTOR] [-w]
       netpluginctl get <kind>/<name> [<kind>/<name>...]

  -o, --output FORMAT      yaml, json, wide, name (kind/name per line), jsonpath=TEMPLATE
                           (kubectl's: '{.items[*].metadata.name}', '{range .items[*]}{.spec.cidr}{"\\n"}{end}')
                           or custom-columns=HEADER:PATH,... (default: a table)
  --no-headers             tables without the header line
  --show-labels            a LABELS column with each resource's labels
  --sort-by PATH           order by a field, e.g. --sort-by=.spec.cidr or '{.metadata.creationTimestamp}'
  -w, --watch              after the list, print each change as it happens until Ctrl-C
  --watch-only             print the changes only, not the list first
  --output-watch-events    with -w: an EVENT column (ADDED, MODIFIED, DELETED), or {type, object} documents
  -n, --namespace NS       namespace of namespaced kinds (networkpolicy, workloadendpoint); default "default"
  -A, --all-namespaces     list namespaced kinds across all namespaces
  -l, --selector EXPR      label selector, e.g. "zone == 'a'", or kubectl's form: zone=a,tier!=db

Examples:
  netpluginctl get ippools -o wide
  netpluginctl get pool default-ipv4-ippool -o yaml
  netpluginctl get wep -A
  netpluginctl get ippools -o jsonpath='{range .items[*]}{.metadata.name}{"\\t"}{.spec.cidr}{"\\n"}{end}'
  netpluginctl get ippools -o custom-columns=NAME:.metadata.name,CIDR:.spec.cidr --sort-by=.spec.cidr
  netpluginctl get wep -A -w
`,
  describe: `Usage: netpluginctl describe <kind> [name...] [-n NAMESPACE | -A] [-l SELECTOR]
       netpluginctl describe <kind>/<name>

Shows each resource for a person: name, namespace, labels, annotations, owner references,
creation time and resource version, where it comes from (objects mirrored or derived from
Kubernetes: knp.default.* from a NetworkPolicy, kns.* from a Namespace, ksa.* from a
ServiceAccount, *-auto-hep from a Node; read-only, change the source instead), then its spec.

Examples:
  netpluginctl describe networkpolicy knp.default.allow-web -n shop
  netpluginctl describe profile kns.shop
`,
  delete: `Usage: netpluginctl delete <kind> <name...> [-n NAMESPACE] [--force] [--ignore-not-found] [--dry-run]
       netpluginctl delete -f FILE|DIR|-

Deleting a node also releases its IPAM state: its tunnel addresses and block
affinities (empty blocks go back to their pool), and says what it released.
An IPPool that still has allocated addresses is not deleted unless --force is given
(the addresses then stay allocated until their workloads are deleted).
`,
};

const write =
  (cmd: WriteMode): CtlCommand =>
  async (rest, io, s) => {
    const p = parseCommand(rest, [{ name: 'filename', short: 'f', type: 'string' }, DRY_RUN], cmd, s);
    if (bool(p, 'help')) return printHelp(io, RESOURCES_HELP[cmd]!);
    const file = str(p, 'filename');
    if (!file) throw new CtlError(`${cmd} needs -f FILE (or -f - for stdin)`);
    if (p.positional.length)
      throw new CtlError(`${cmd} takes no arguments besides -f FILE; got ${p.positional.join(' ')}`);
    return cmdWrite(await s.writable(), io, file, cmd, dryRun(p));
  };

const runGet: CtlCommand = async (rest, io, s) => {
  const p = parseCommand(
    rest,
    [
      { name: 'output', short: 'o', type: 'string' },
      { name: 'namespace', short: 'n', type: 'string' },
      { name: 'all-namespaces', short: 'A', type: 'bool' },
      { name: 'selector', short: 'l', type: 'string' },
      { name: 'no-headers', type: 'bool' },
      { name: 'show-labels', type: 'bool' },
      { name: 'sort-by', type: 'string' },
      { name: 'watch', short: 'w', type: 'bool' },
      { name: 'watch-only', type: 'bool' },
      { name: 'output-watch-events', type: 'bool' },
    ],
    'get',
    s,
  );
  if (bool(p, 'help')) return printHelp(io, RESOURCES_HELP.get!);
  let [kind, ...names] = p.positional;
  // get KIND/NAME [KIND/NAME...], as kubectl takes them.
  if (kind?.includes('/')) {
    const refs = p.positional.map((r) => r.split('/', 2) as [string, string | undefined]);
    const kinds = new Set(refs.map(([k]) => resolveKind(k).kind));
    if (kinds.size > 1 || refs.some(([, n]) => !n))
      throw new CtlError(`get KIND/NAME: give names of one kind, each as KIND/NAME (got ${p.positional.join(' ')})`);
    kind = refs[0]![0];
    names = refs.map(([, n]) => n!);
  }
  if (!kind) throw new CtlError(`get needs a kind, e.g. 'netpluginctl get ippools'`);
  // Resolve the kind and the output format before connecting so a typo fails fast.
  resolveKind(kind);
  outputFormat(str(p, 'output'));
  return cmdGet(await s.datastore(), io, {
    kind,
    names,
    namespace: str(p, 'namespace'),
    allNamespaces: bool(p, 'all-namespaces'),
    output: str(p, 'output'),
    selector: str(p, 'selector'),
    noHeaders: bool(p, 'no-headers'),
    showLabels: bool(p, 'show-labels'),
    sortBy: str(p, 'sort-by'),
    watch: bool(p, 'watch'),
    watchOnly: bool(p, 'watch-only'),
    watchEvents: bool(p, 'output-watch-events'),
  });
};

const runDelete: CtlCommand = async (rest, io, s) => {
  const p = parseCommand(
    rest,
    [
      { name: 'filename', short: 'f', type: 'string' },
      { name: 'namespace', short: 'n', type: 'string' },
      { name: 'force', type: 'bool' },
      { name: 'ignore-not-found', type: 'bool' },
      DRY_RUN,
    ],
    'delete',
    s,
  );
  if (bool(p, 'help')) return printHelp(io, RESOURCES_HELP.delete!);
  const [kind, ...names] = p.positional;
  if (kind && !str(p, 'filename')) resolveKind(kind);
  return cmdDelete(await s.writable(), io, {
    kind,
    names,
    file: str(p, 'filename'),
    namespace: str(p, 'namespace'),
    force: bool(p, 'force'),
    ignoreNotFound: bool(p, 'ignore-not-found'),
    dryRun: dryRun(p),
  });
};

/** Where a mirrored or derived object comes from (docs/kube-controllers.md), or undefined for a user's own. */
function sourceOf(r: Resource): string | undefined {
  const n = r.metadata.name;
  const ns = r.metadata.namespace;
  if (r.kind === 'NetworkPolicy' && n.startsWith('knp.default.'))
    return `Kubernetes NetworkPolicy ${ns ?? 'default'}/${n.slice('knp.default.'.length)} (networking.k8s.io/v1)`;
  if (r.kind === 'Profile' && n.startsWith('kns.')) return `Kubernetes Namespace ${n.slice(4)}`;
  if (r.kind === 'Profile' && n.startsWith('ksa.')) {
    const rest = n.slice(4);
    const dot = rest.indexOf('.');
    return dot > 0
      ? `Kubernetes ServiceAccount ${rest.slice(0, dot)}/${rest.slice(dot + 1)}`
      : `Kubernetes ServiceAccount ${rest}`;
  }
  if (r.kind === 'HostEndpoint' && n.endsWith('-auto-hep'))
    return `Kubernetes Node ${n.slice(0, -'-auto-hep'.length)} (automatic host endpoint)`;
  if (r.kind === 'WorkloadEndpoint') return 'a pod or container, written by the CNI plugin at ADD';
  return undefined;
}

async function cmdDescribe(
  ds: Datastore,
  io: CtlIO,
  args: {
    kind: string;
    names: string[];
    namespace?: string | undefined;
    allNamespaces?: boolean | undefined;
    selector?: string | undefined;
  },
): Promise<number> {
  const info = resolveKind(args.kind);
  const namespaced = NAMESPACED_KINDS.has(info.kind);
  const items: Resource[] = [];
  // Malformed objects are described as stored, with why they are refused, rather than failing the command.
  const invalid: InvalidObject[] = [];
  let failed = 0;
  if (args.names.length) {
    const ns = namespaced ? (args.namespace ?? 'default') : undefined;
    for (const name of args.names) {
      try {
        items.push(await ds.get(info.kind, name, ns));
      } catch (e) {
        if (e instanceof InvalidObjectError) {
          invalid.push(e.invalid);
          failed++;
          continue;
        }
        if (!DatastoreError.is(e, 'NotFound')) throw e;
        failed++;
        io.stderr(`error: ${describeRef(info.kind, name, ns)} not found\n`);
      }
    }
  } else {
    const ns = namespaced && !args.allNamespaces ? (args.namespace ?? 'default') : undefined;
    const list = await ds.list(info.kind, {
      namespace: ns,
      labelSelector: args.selector === undefined ? undefined : await labelSelectorArg(args.selector),
    });
    items.push(...list.items);
    invalid.push(...(list.invalid ?? []));
    if (!items.length && !invalid.length)
      io.stderr(`no ${info.kind} resources found${ns ? ` in namespace ${ns}` : ''}\n`);
  }
  const { stringify } = await loadYaml();
  const kv = (m: Record<string, string> | undefined) =>
    m && Object.keys(m).length
      ? Object.entries(m)
          .map(([k, v]) => `${k}=${v}`)
          .join('\n' + ' '.repeat(18))
      : '<none>';
  const blocks = items.map((r) => {
    const m = r.metadata;
    const src = sourceOf(r);
    const lines = [
      `Name:             ${m.name}`,
      ...(namespaced ? [`Namespace:        ${m.namespace ?? 'default'}`] : []),
      `Kind:             ${r.kind} (${r.apiVersion})`,
      `Labels:           ${kv(m.labels)}`,
      `Annotations:      ${kv(m.annotations)}`,
      ...(m.ownerReferences?.length
        ? [
            `Owner references: ` +
              `${m.ownerReferences.map((o) => `${o.kind}/${o.name} (${o.apiVersion}, uid ${o.uid})`).join(', ')}`,
          ]
        : []),
      `Created:          ${m.creationTimestamp ?? '<unknown>'}`,
      `Resource version: ${m.resourceVersion ?? '<none>'}`,
      ...(src ? [`Source:           ${src}; read-only here: change the source instead`] : []),
      'Spec:',
      ...stringify(r.spec ?? {})
        .trimEnd()
        .split('\n')
        .map((l) => `  ${l}`),
    ];
    return lines.join('\n');
  });
  for (const o of invalid) {
    blocks.push(
      [
        `Name:             ${o.name}`,
        ...(namespaced ? [`Namespace:        ${o.namespace ?? 'default'}`] : []),
        `Kind:             ${o.kind}`,
        `Status:           MALFORMED: skipped by every list and watch (agents, controllers) until it is fixed or ` +
          `deleted`,
        `Reason:           ${o.reason}`,
        `Stored at:        ${o.where}`,
        `Resource version: ${o.revision ?? '<none>'}`,
        'As stored:',
        ...(typeof o.raw === 'string' ? o.raw : stringify(o.raw ?? null))
          .trimEnd()
          .split('\n')
          .map((l) => `  ${l}`),
      ].join('\n'),
    );
  }
  if (blocks.length) io.stdout(blocks.join('\n\n') + '\n');
  return failed ? 1 : 0;
}

const runDescribe: CtlCommand = async (rest, io, s) => {
  const p = parseCommand(
    rest,
    [
      { name: 'namespace', short: 'n', type: 'string' },
      { name: 'all-namespaces', short: 'A', type: 'bool' },
      { name: 'selector', short: 'l', type: 'string' },
    ],
    'describe',
    s,
  );
  if (bool(p, 'help')) return printHelp(io, RESOURCES_HELP.describe!);
  let [kind, ...names] = p.positional;
  if (kind?.includes('/')) {
    const [k, n] = kind.split('/', 2);
    kind = k;
    names = [n ?? '', ...names].filter(Boolean);
  }
  if (!kind) throw new CtlError(`describe needs a kind, e.g. 'netpluginctl describe profile kns.default'`);
  resolveKind(kind);
  if (bool(p, 'all-namespaces') && names.length)
    throw new CtlError(`-A cannot be combined with a name; give the namespace with -n`);
  return cmdDescribe(await s.datastore(), io, {
    kind,
    names,
    namespace: str(p, 'namespace'),
    allNamespaces: bool(p, 'all-namespaces'),
    selector: str(p, 'selector'),
  });
};

/** apply, create, replace, get, describe, delete. */
export const resourcesGroup: CtlGroup = {
  commands: {
    apply: write('apply'),
    create: write('create'),
    replace: write('replace'),
    get: runGet,
    describe: runDescribe,
    delete: runDelete,
  },
  help: RESOURCES_HELP,
};
