// `netpluginctl upgrade ...`: every step of the documented (docs/upgrade.md) upgrade procedures that
// software can do, each with a dry run. check: what an upgrade to this release
// needs; owner-refs save|strip|restore: the owner references to
// netplugin.org/v3 objects, whose UIDs change across 3.28 (the orchestrator
// would garbage-collect what they own); auto-hep: the three-step migration to
// automatic host endpoints; finish: delete the temporary allow-all-upgrade
// policy and record the new cluster version. Walkthrough: docs/upgrade.md.
import { createInterface } from 'node:readline/promises';
import { DatastoreError } from '../errors.js';
import { API_VERSION, NAMESPACED_KINDS, type OwnerReference, type Resource } from '../model/resources.js';
import type { Datastore } from '../datastore/types.js';
import { casRetry, getIfExists } from '../datastore/cas.js';
import { isKind } from '../datastore/keys.js';
import type { KubeClient, KubeObject } from '../k8s/client.js';
import { OPERATOR_GROUP } from '../model/installation.js';
import { initDatastore } from '../datastore/init.js';
import { resolvePath } from './install-cni.js';
import { writeFileAtomic } from '../atomic-write.js';
import {
  bool,
  CtlError,
  parseCommand,
  readJsonFile,
  str,
  type CtlIO,
  type CtlSession,
  DRY_RUN,
  dryRun,
  printHelp,
} from './io.js';
import { clusterVersion, compareVersions, NETPLUGIN_VERSION, parseVersion } from './version.js';

/** docs/upgrade.md: the procedures lead to this release line from v3.15 or later. */
const OLDEST_UPGRADABLE = '3.15.0';
const ALLOW_ALL_UPGRADE = 'allow-all-upgrade';
import { AUTO_HEP_SUFFIX, CREATED_BY_LABEL } from '../model/host-endpoints.js';
import { parseSelector } from '../selector/index.js';
export { AUTO_HEP_SUFFIX, CREATED_BY_LABEL };

export const UPGRADE_HELP: Record<string, string> = {
  upgrade: `Usage: netpluginctl upgrade check [--to vX.Y.Z] [-o json]
       netpluginctl upgrade owner-refs save -o FILE | strip [--dry-run] | restore -f FILE [--dry-run]
       netpluginctl upgrade auto-hep [--dry-run] [--timeout SECONDS]
       netpluginctl upgrade finish [--dry-run] [--yes]

The upgrade procedures step by step: docs/upgrade.md.
`,
  'upgrade check': `Usage: netpluginctl upgrade check [--to vX.Y.Z] [-o json]

Inspects the datastore (and the Kubernetes API when one is configured) and lists, per upgrade
procedure that applies, what is needed: owner references to netplugin.org/v3 objects, a leftover
allow-all-upgrade policy, all-interfaces host endpoints the automatic host endpoints would
replace, the datastore type, the cluster version. Exit 1 when something blocks the upgrade
(owner references not yet stripped, a client older than the cluster, a cluster older than
v${OLDEST_UPGRADABLE}, --to another release line); 0 otherwise.
`,
  'upgrade owner-refs': `Usage: netpluginctl upgrade owner-refs save -o FILE
       netpluginctl upgrade owner-refs strip [--dry-run]
       netpluginctl upgrade owner-refs restore -f FILE [--dry-run]

save records every object in the Kubernetes API (all kinds the account can list) whose
ownerReferences name apiVersion netplugin.org/v3; strip removes those entries (run it before
the upgrade); restore re-adds them after the upgrade with each owner's current UID, found by
kind, namespace and name. An owner that no longer exists is reported (exit 1), never guessed.
`,
  'upgrade auto-hep': `Usage: netpluginctl upgrade auto-hep [--dry-run] [--timeout SECONDS]

Migration to automatic host endpoints: copies the labels of each all-interfaces host endpoint
(interfaceName "*") onto its node, sets KubeControllersConfiguration default
spec.controllers.node.hostEndpoint.autoCreate to Enabled, waits (default 60 s) until the
controller has created <node>-auto-hep for each of those nodes, then deletes the old endpoints.
Managed endpoints (label ${CREATED_BY_LABEL} or a name ending in ${AUTO_HEP_SUFFIX}) are kept.
`,
  'upgrade finish': `Usage: netpluginctl upgrade finish [--dry-run] [--yes]

Shows the temporary allow-all-upgrade policy and the host endpoints it selects, deletes it
(asking first on a terminal unless --yes), and sets the cluster version
(ClusterInformation netpluginVersion) to this client's, ${NETPLUGIN_VERSION}.
`,
};

// ---- owner references ----

/** One object that has owner references to netplugin.org/v3 objects. */
export interface OwnedObject {
  apiVersion: string;
  kind: string;
  namespace?: string;
  name: string;
  /** The object's API path. */
  path: string;
  ownerReferences: OwnerReference[];
}

const isOurs = (r: { apiVersion?: string }) => r.apiVersion === API_VERSION;

interface ApiResource {
  name: string;
  namespaced: boolean;
  kind: string;
  verbs?: string[];
}

/** Every listable resource type the API server offers, by collection path. */
async function discover(client: KubeClient): Promise<Array<{ groupVersion: string; r: ApiResource }>> {
  const out: Array<{ groupVersion: string; r: ApiResource }> = [];
  const add = (gv: string, list: { resources?: ApiResource[] }) => {
    for (const r of list.resources ?? [])
      if (!r.name.includes('/') && (r.verbs ?? ['list']).includes('list')) out.push({ groupVersion: gv, r });
  };
  add('v1', await client.request<{ resources?: ApiResource[] }>('GET', '/api/v1'));
  const groups = await client.request<{ groups?: Array<{ preferredVersion?: { groupVersion: string } }> }>(
    'GET',
    '/apis',
  );
  for (const g of groups.groups ?? []) {
    const gv = g.preferredVersion?.groupVersion;
    if (!gv) continue;
    try {
      add(gv, await client.request<{ resources?: ApiResource[] }>('GET', `/apis/${gv}`));
    } catch (e) {
      // An aggregated API that is down must not hide the rest.
      if (!(e instanceof DatastoreError)) throw e;
    }
  }
  return out;
}

function collectionPath(gv: string, plural: string): string {
  return gv === 'v1' ? `/api/v1/${plural}` : `/apis/${gv}/${plural}`;
}
function objectPath(gv: string, plural: string, ns: string | undefined, name: string): string {
  const base = gv === 'v1' ? '/api/v1' : `/apis/${gv}`;
  return `${base}${ns ? `/namespaces/${encodeURIComponent(ns)}` : ''}/${plural}/${encodeURIComponent(name)}`;
}

/**
 * Finds every object with an owner reference to a netplugin.org/v3 object; `skipped` names kinds that could not be
 * listed.
 */
export async function findOwnedObjects(client: KubeClient): Promise<{ objects: OwnedObject[]; skipped: string[] }> {
  const objects: OwnedObject[] = [];
  const skipped: string[] = [];
  for (const { groupVersion, r } of await discover(client)) {
    let cont: string | undefined;
    do {
      let list: { items?: KubeObject[]; metadata?: { continue?: string } };
      try {
        list = await client.request('GET', collectionPath(groupVersion, r.name), undefined, {
          query: { limit: '500', continue: cont },
        });
      } catch (e) {
        if (e instanceof DatastoreError && e.kind !== 'Unavailable') {
          skipped.push(`${r.name}.${groupVersion} (${e.kind})`);
          break;
        }
        throw e;
      }
      for (const o of list.items ?? []) {
        const refs = (o.metadata.ownerReferences as OwnerReference[] | undefined) ?? [];
        const ours = refs.filter(isOurs);
        if (!ours.length) continue;
        const ns = r.namespaced ? o.metadata.namespace : undefined;
        objects.push({
          apiVersion: groupVersion,
          kind: r.kind,
          ...(ns ? { namespace: ns } : {}),
          name: o.metadata.name,
          path: objectPath(groupVersion, r.name, ns, o.metadata.name),
          ownerReferences: ours,
        });
      }
      cont = list.metadata?.continue || undefined;
    } while (cont);
  }
  return { objects, skipped };
}

function objText(o: { kind: string; namespace?: string; name: string }): string {
  return `${o.kind.toLowerCase()}/${o.namespace ? `${o.namespace}/` : ''}${o.name}`;
}
function refText(r: OwnerReference): string {
  return `${r.kind}/${r.name} (uid ${r.uid})`;
}

/**
 * Replaces an object's ownerReferences, guarded by a JSON patch test of the current list (a concurrent change fails as
 * a conflict).
 */
async function setOwnerReferences(
  client: KubeClient,
  path: string,
  current: OwnerReference[] | undefined,
  next: OwnerReference[],
): Promise<void> {
  const ops: unknown[] = [];
  if (current === undefined) ops.push({ op: 'add', path: '/metadata/ownerReferences', value: next });
  else {
    ops.push({ op: 'test', path: '/metadata/ownerReferences', value: current });
    ops.push(
      next.length
        ? { op: 'replace', path: '/metadata/ownerReferences', value: next }
        : { op: 'remove', path: '/metadata/ownerReferences' },
    );
  }
  await client.request('PATCH', path, ops, { contentType: 'application/json-patch+json' });
}

export interface SavedOwnerReferences {
  kind: 'NetpluginOwnerReferenceerences';
  savedAt: string;
  clusterVersion?: string | undefined;
  objects: OwnedObject[];
}

async function cmdOwnerReferences(args: string[], io: CtlIO, s: CtlSession): Promise<number> {
  const sub = args[0];
  const topic = 'upgrade owner-refs';
  if (!sub || sub === '--help' || sub === '-h') return printHelp(io, UPGRADE_HELP[topic]!);
  const p = parseCommand(
    args.slice(1),
    [{ name: 'output', short: 'o', type: 'string' }, { name: 'filename', short: 'f', type: 'string' }, DRY_RUN],
    `${topic} ${sub}`,
    s,
  );
  if (bool(p, 'help')) return printHelp(io, UPGRADE_HELP[topic]!);
  const dry = dryRun(p);
  if (sub === 'save') {
    const out = str(p, 'output');
    if (!out) throw new CtlError('upgrade owner-refs save needs -o FILE (where to record the owner references)');
    const client = await s.kube();
    const { objects, skipped } = await findOwnedObjects(client);
    const ds = s.config() ? await s.datastore().catch(() => undefined) : undefined;
    const saved: SavedOwnerReferences = {
      kind: 'NetpluginOwnerReferenceerences',
      savedAt: new Date().toISOString(),
      ...(ds ? { clusterVersion: await clusterVersion(ds).catch(() => undefined) } : {}),
      objects,
    };
    writeFileAtomic(resolvePath(io, out), JSON.stringify(saved, null, 2) + '\n', 0o600);
    for (const o of objects) io.stdout(`${objText(o)}: ${o.ownerReferences.map(refText).join(', ')}\n`);
    for (const k of skipped) io.stderr(`warning: could not list ${k}; objects of that kind are not recorded\n`);
    io.stdout(`saved ${objects.length} object(s) with owner references to ${API_VERSION} objects to ${out}\n`);
    return 0;
  }
  if (sub === 'strip') {
    const client = await s.kube();
    const { objects, skipped } = await findOwnedObjects(client);
    for (const k of skipped) io.stderr(`warning: could not list ${k}; its objects are not checked\n`);
    for (const o of objects) {
      if (!dry) {
        const cur = await client.request<KubeObject>('GET', o.path);
        const refs = (cur.metadata.ownerReferences as OwnerReference[] | undefined) ?? [];
        await setOwnerReferences(
          client,
          o.path,
          refs,
          refs.filter((r) => !isOurs(r)),
        );
      }
      io.stdout(`${objText(o)}: ${dry ? 'would strip' : 'stripped'} ${o.ownerReferences.map(refText).join(', ')}\n`);
    }
    io.stdout(
      objects.length
        ? `${objects.length} object(s) ${dry ? 'would be changed (dry run)' : 'changed'}; restore after the upgrade ` +
            `with 'netpluginctl upgrade owner-refs restore -f FILE'\n`
        : `no owner references to ${API_VERSION} objects\n`,
    );
    return 0;
  }
  if (sub === 'restore') {
    const file = str(p, 'filename');
    if (!file) throw new CtlError('upgrade owner-refs restore needs -f FILE (written by upgrade owner-refs save)');
    const saved = readJsonFile(io, file, '-f') as SavedOwnerReferences;
    if (saved?.kind !== 'NetpluginOwnerReferenceerences' || !Array.isArray(saved.objects))
      throw new CtlError(`-f ${file} is not a file written by 'netpluginctl upgrade owner-refs save'`);
    const client = await s.kube();
    const ds = await s.datastore();
    let missing = 0;
    let changed = 0;
    for (const o of saved.objects) {
      let cur: KubeObject;
      try {
        cur = await client.request<KubeObject>('GET', o.path);
      } catch (e) {
        if (DatastoreError.is(e, 'NotFound')) {
          io.stderr(`${objText(o)}: the object no longer exists; nothing to restore\n`);
          continue;
        }
        throw e;
      }
      const refs = [...((cur.metadata.ownerReferences as OwnerReference[] | undefined) ?? [])];
      const before = JSON.stringify(refs);
      for (const ref of o.ownerReferences) {
        const kind = ref.kind;
        const owner = isKind(kind)
          ? await getIfExists(ds, kind, ref.name, NAMESPACED_KINDS.has(kind) ? o.namespace : undefined)
          : undefined;
        if (!owner?.metadata.uid) {
          missing++;
          io.stderr(
            `${objText(o)}: owner ${kind}/${ref.name} no longer exists; its reference is not restored (recreate the ` +
              `owner, then run restore again)\n`,
          );
          continue;
        }
        const next: OwnerReference = { ...ref, uid: owner.metadata.uid };
        const i = refs.findIndex((r) => isOurs(r) && r.kind === ref.kind && r.name === ref.name);
        if (i >= 0) refs[i] = next;
        else refs.push(next);
      }
      if (JSON.stringify(refs) === before) {
        io.stdout(`${objText(o)}: unchanged\n`);
        continue;
      }
      changed++;
      if (!dry)
        await setOwnerReferences(client, o.path, cur.metadata.ownerReferences as OwnerReference[] | undefined, refs);
      io.stdout(
        `${objText(o)}: ${dry ? 'would restore' : 'restored'} ${refs.filter(isOurs).map(refText).join(', ')}\n`,
      );
    }
    io.stdout(
      `${changed} object(s) ` +
        `${dry ? 'would be changed (dry run)' : 'changed'}${missing ? `; ${missing} owner(s) not found` : ''}\n`,
    );
    return missing ? 1 : 0;
  }
  throw new CtlError(`unknown upgrade owner-refs command ${JSON.stringify(sub)}; use save, strip or restore`);
}

// ---- upgrade check ----

export interface Finding {
  procedure: string;
  item: string;
  blocking: boolean;
}

async function installationPresent(client: KubeClient): Promise<boolean> {
  try {
    await client.request('GET', `/apis/${OPERATOR_GROUP}/v1/installations/default`);
    return true;
  } catch (e) {
    if (e instanceof DatastoreError && (e.kind === 'NotFound' || e.kind === 'Unauthorized')) return false;
    throw e;
  }
}

export function allInterfaceHostEndpoints(heps: Array<Resource<'HostEndpoint'>>): Array<Resource<'HostEndpoint'>> {
  return heps.filter(
    (h) =>
      h.spec.interfaceName === '*' &&
      !h.metadata.labels?.[CREATED_BY_LABEL] &&
      !h.metadata.name.endsWith(AUTO_HEP_SUFFIX),
  );
}

async function allowAllUpgrade(
  ds: Datastore,
): Promise<Array<Resource<'GlobalNetworkPolicy'> | Resource<'NetworkPolicy'>>> {
  const out: Array<Resource<'GlobalNetworkPolicy'> | Resource<'NetworkPolicy'>> = [];
  const g = await getIfExists(ds, 'GlobalNetworkPolicy', ALLOW_ALL_UPGRADE);
  if (g) out.push(g);
  for (const np of (await ds.list('NetworkPolicy')).items) if (np.metadata.name === ALLOW_ALL_UPGRADE) out.push(np);
  return out;
}

async function cmdCheck(args: string[], io: CtlIO, s: CtlSession): Promise<number> {
  const p = parseCommand(
    args,
    [
      { name: 'to', type: 'string' },
      { name: 'output', short: 'o', type: 'string' },
    ],
    'upgrade check',
    s,
  );
  if (bool(p, 'help')) return printHelp(io, UPGRADE_HELP['upgrade check']!);
  const findings: Finding[] = [];
  const add = (procedure: string, item: string, blocking = false) => findings.push({ procedure, item, blocking });
  const to = str(p, 'to') ?? `v${NETPLUGIN_VERSION}`;
  const target = parseVersion(to.replace(/\.x$/, '.0'));
  const mine = parseVersion(NETPLUGIN_VERSION)!;
  if (!target) throw new CtlError(`--to ${JSON.stringify(to)} is not a version; use e.g. v3.32.x`);
  if (target[0] !== mine[0] || target[1] !== mine[1])
    add(
      'general',
      `this netpluginctl (${NETPLUGIN_VERSION}) upgrades to v${mine[0]}.${mine[1]}.x, not ${to}: use the ` +
        `netpluginctl of the target release`,
      true,
    );

  const ds = await s.datastore();
  const conf = s.config()!;
  const cluster = await clusterVersion(ds);
  const upgradePending = !cluster || (compareVersions(cluster, NETPLUGIN_VERSION) ?? -1) < 0;
  if (!cluster)
    add(
      'general',
      'cluster version: unknown (no ClusterInformation; run netpluginctl datastore init after installing)',
    );
  else {
    add(
      'general',
      `cluster version ${cluster}, client ${NETPLUGIN_VERSION}${upgradePending ? '' : ' (already upgraded)'}`,
    );
    const c = compareVersions(NETPLUGIN_VERSION, cluster);
    if (c !== undefined && c < 0)
      add(
        'general',
        `this client (${NETPLUGIN_VERSION}) is older than the cluster (${cluster}): install netpluginctl ${cluster}`,
        true,
      );
    if ((compareVersions(cluster, OLDEST_UPGRADABLE) ?? 0) < 0)
      add(
        'general',
        `the cluster runs ${cluster}; the procedures upgrade from v3.15 or later: upgrade to an intermediate release ` +
          `first`,
        true,
      );
  }

  // docs/upgrade.md.
  const deprecated = (['etcd_authority', 'etcd_scheme'] as const).filter((k) => conf[k] !== undefined);
  if (deprecated.length)
    add(
      'general',
      `the configuration uses deprecated option(s) ${deprecated.join(', ')}: replace them with etcd_endpoints (e.g. ` +
        `"https://10.0.0.1:2379")`,
    );

  let client: KubeClient | undefined;
  if (conf.datastore_type === 'kubernetes' || conf.kubernetes) {
    try {
      client = await s.kube();
    } catch (e) {
      add('general', `Kubernetes API not reachable (${(e as Error).message}); owner references were not checked`);
    }
  }
  if (conf.datastore_type === 'etcdv3') {
    add(
      'manifest install with the etcd datastore',
      'datastore: etcd. Apply the v3.32 etcd manifest with server-side apply (kubectl apply --server-side ' +
        '--force-conflicts); node pods then show 1/2 ready, which is expected',
    );
    add(
      'manifest install with the etcd datastore',
      'recommended: move to the Kubernetes datastore (netpluginctl datastore migrate lock|export|import|unlock; ' +
        'docs/upgrade.md)',
    );
  } else if (client && (await installationPresent(client))) {
    add(
      'operator install',
      'Installation "default" found: apply the v3.32 CRD and operator manifests with server-side apply (kubectl ' +
        'apply --server-side --force-conflicts), or for a chart install apply the CRDs that way and upgrade the ' +
        'chart',
    );
    add(
      'operator install',
      'optional (3.30+): apply the FlowLogAggregator and FlowUI resources, each named default, for the flow logs API ' +
        'and flow UI',
    );
  } else {
    add(
      'manifest install with the Kubernetes datastore',
      'datastore: Kubernetes API. Apply the v3.32 manifest matching the original install with server-side apply; ' +
        'node pods then show 2/2 ready',
    );
  }

  if (client) {
    const { objects, skipped } = await findOwnedObjects(client);
    if (objects.length) {
      const list = objects
        .map((o) => `${objText(o)} -> ${o.ownerReferences.map((r) => `${r.kind}/${r.name}`).join(', ')}`)
        .join('; ');
      add(
        'owner references',
        upgradePending
          ? `${objects.length} object(s) have owner references to ${API_VERSION} objects, whose UIDs change in the ` +
              `upgrade (they would be garbage-collected): ${list}. Run 'netpluginctl upgrade owner-refs save -o ` +
              `FILE' ` +
              `and 'strip' before, 'restore -f FILE' after`
          : `${objects.length} object(s) have owner references to ${API_VERSION} objects (${list}); check they carry ` +
              `the owners' current UIDs ('upgrade owner-refs restore -f FILE')`,
        upgradePending,
      );
    } else add('owner references', `no owner references to ${API_VERSION} objects: nothing to do`);
    for (const k of skipped) add('owner references', `could not list ${k}: its objects were not checked`);
  }

  const allow = await allowAllUpgrade(ds);
  for (const a of allow)
    add(
      'temporary policy',
      `leftover ${a.kind} ${a.metadata.namespace ? `${a.metadata.namespace}/` : ''}${ALLOW_ALL_UPGRADE}: review its ` +
        `traffic, add the policies you need, then 'netpluginctl upgrade finish'`,
    );
  const heps = allInterfaceHostEndpoints((await ds.list('HostEndpoint')).items);
  if (heps.length)
    add(
      'automatic host endpoints',
      `${heps.length} all-interfaces host endpoint(s) the automatic ones would replace: ` +
        `${heps.map((h) => `${h.metadata.name} (node ${h.spec.node})`).join(', ')}; run 'netpluginctl upgrade ` +
        `auto-hep --dry-run'`,
    );
  add(
    'application layer policy sidecar',
    'if application layer policy is enabled: apply the injector configuration map for your service mesh version, ' +
      'then roll each service deployment',
  );

  const blocked = findings.some((f) => f.blocking);
  if (str(p, 'output') === 'json')
    io.stdout(
      JSON.stringify(
        {
          clientVersion: NETPLUGIN_VERSION,
          clusterVersion: cluster ?? null,
          datastoreType: conf.datastore_type,
          blocked,
          findings,
        },
        null,
        2,
      ) + '\n',
    );
  else {
    let last = '';
    for (const f of findings) {
      if (f.procedure !== last) io.stdout(`${f.procedure}:\n`);
      last = f.procedure;
      io.stdout(`  ${f.blocking ? 'BLOCKING ' : ''}${f.item}\n`);
    }
    io.stdout(blocked ? 'upgrade blocked: fix the BLOCKING items first\n' : 'nothing blocks the upgrade\n');
  }
  return blocked ? 1 : 0;
}

// ---- upgrade finish ----

async function confirm(io: CtlIO, question: string): Promise<boolean> {
  // Only the real CLI (stdin a lazy reader) on a terminal asks; scripts and pipes proceed.
  if (typeof io.stdin !== 'function' || !process.stdin.isTTY) return true;
  const rl = createInterface({ input: process.stdin, output: process.stderr });
  try {
    return /^y(es)?$/i.test((await rl.question(`${question} [y/N] `)).trim());
  } finally {
    rl.close();
  }
}

async function cmdFinish(args: string[], io: CtlIO, s: CtlSession): Promise<number> {
  const p = parseCommand(args, [DRY_RUN, { name: 'yes', short: 'y', type: 'bool' }], 'upgrade finish', s);
  if (bool(p, 'help')) return printHelp(io, UPGRADE_HELP['upgrade finish']!);
  const dry = dryRun(p);
  const ds = dry ? await s.datastore() : await s.writable();
  const allow = await allowAllUpgrade(ds);
  if (allow.length) {
    const heps = (await ds.list('HostEndpoint')).items;
    for (const a of allow) {
      const where =
        `${a.kind.toLowerCase()}/${a.metadata.namespace ? `${a.metadata.namespace}/` : ''}` + `${ALLOW_ALL_UPGRADE}`;
      const selector = (a.spec.selector as string | undefined) ?? 'all()';
      let matched: string[] = [];
      try {
        const sel = parseSelector(selector);
        matched = heps
          .filter((h) => sel.matches(h.metadata.labels ?? {}))
          .map((h) => `${h.metadata.name} (node ${h.spec.node})`);
      } catch {
        matched = [`(selector ${JSON.stringify(selector)} could not be evaluated)`];
      }
      io.stdout(
        `${where}: selector ${selector}; host endpoints it lets all traffic through: ` +
          `${matched.length ? matched.join(', ') : 'none'}\n`,
      );
    }
    if (
      !dry &&
      !bool(p, 'yes') &&
      !(await confirm(
        io,
        `delete ${allow.length} ${ALLOW_ALL_UPGRADE} polic${allow.length === 1 ? 'y' : 'ies'}? Traffic it allowed is ` +
          `then subject to your policies.`,
      ))
    ) {
      io.stdout('nothing changed\n');
      return 1;
    }
    for (const a of allow) {
      if (!dry)
        await ds.delete(a.kind, a.metadata.name, {
          namespace: a.metadata.namespace,
          revision: a.metadata.resourceVersion,
        });
      io.stdout(
        `${a.kind.toLowerCase()}/${a.metadata.namespace ? `${a.metadata.namespace}/` : ''}${ALLOW_ALL_UPGRADE} ` +
          `${dry ? 'would be deleted' : 'deleted'}\n`,
      );
    }
  } else io.stdout(`no ${ALLOW_ALL_UPGRADE} policy\n`);
  const cur = await clusterVersion(ds);
  if (cur === NETPLUGIN_VERSION) io.stdout(`cluster version ${cur} unchanged\n`);
  else if (dry) io.stdout(`cluster version ${cur ?? '(none)'} would be set to ${NETPLUGIN_VERSION}\n`);
  else {
    await initDatastore(ds, { version: NETPLUGIN_VERSION });
    io.stdout(`cluster version ${cur ?? '(none)'} set to ${NETPLUGIN_VERSION}\n`);
  }
  return 0;
}

// ---- migration to automatic host endpoints ----

async function cmdAutoHep(args: string[], io: CtlIO, s: CtlSession): Promise<number> {
  const p = parseCommand(args, [DRY_RUN, { name: 'timeout', type: 'string' }], 'upgrade auto-hep', s);
  if (bool(p, 'help')) return printHelp(io, UPGRADE_HELP['upgrade auto-hep']!);
  const dry = dryRun(p);
  const timeoutText = str(p, 'timeout') ?? '60';
  const timeout = Number(timeoutText.replace(/s$/, ''));
  if (!Number.isFinite(timeout) || timeout <= 0)
    throw new CtlError(`--timeout ${JSON.stringify(timeoutText)} is not a positive number of seconds`);
  const ds = dry ? await s.datastore() : await s.writable();
  const all = (await ds.list('HostEndpoint')).items;
  const old = allInterfaceHostEndpoints(all);
  for (const h of all)
    if (!old.includes(h) && h.spec.interfaceName === '*')
      io.stdout(`hostendpoint/${h.metadata.name}: managed (kept)\n`);
  // Labels go onto the Kubernetes Node when the API is reachable (the controller reads them there), else onto
  // netplugin's Node.
  const conf = s.config()!;
  const client = conf.datastore_type === 'kubernetes' || conf.kubernetes ? await s.kube() : undefined;
  const nodeLabels = async (node: string): Promise<Record<string, string> | undefined> => {
    try {
      if (client) return (await client.getNode(node)).metadata.labels ?? {};
      return (await ds.get('Node', node)).metadata.labels ?? {};
    } catch (e) {
      if (DatastoreError.is(e, 'NotFound')) return undefined;
      throw e;
    }
  };

  // Step 1, checked for every endpoint before anything is written.
  const plan: Array<{ hep: Resource<'HostEndpoint'>; add: Record<string, string> }> = [];
  const problems: string[] = [];
  for (const hep of old) {
    const have = await nodeLabels(hep.spec.node);
    if (!have) {
      problems.push(`hostendpoint/${hep.metadata.name}: its node ${hep.spec.node} does not exist`);
      continue;
    }
    const add: Record<string, string> = {};
    for (const [k, v] of Object.entries(hep.metadata.labels ?? {})) {
      if (have[k] === undefined) add[k] = v;
      else if (have[k] !== v)
        problems.push(
          `hostendpoint/${hep.metadata.name}: label ${k}=${v} conflicts with ${k}=${have[k]} on node ` +
            `${hep.spec.node}; make them agree first`,
        );
    }
    plan.push({ hep, add });
  }
  if (problems.length) throw new CtlError(`auto-hep: nothing changed: ${problems.join('; ')}`);
  if (!old.length) io.stdout('no all-interfaces host endpoints to migrate\n');
  for (const { hep, add } of plan) {
    const text = Object.entries(add)
      .map(([k, v]) => `${k}=${v}`)
      .join(', ');
    if (!Object.keys(add).length)
      io.stdout(`node/${hep.spec.node}: already has the labels of hostendpoint/${hep.metadata.name}\n`);
    else if (dry)
      io.stdout(`node/${hep.spec.node}: would add labels ${text} (from hostendpoint/${hep.metadata.name})\n`);
    else {
      if (client)
        await client.request(
          'PATCH',
          `/api/v1/nodes/${encodeURIComponent(hep.spec.node)}`,
          { metadata: { labels: add } },
          { contentType: 'application/merge-patch+json' },
        );
      else {
        const n = await ds.get('Node', hep.spec.node);
        await ds.update({ ...n, metadata: { ...n.metadata, labels: { ...n.metadata.labels, ...add } } });
      }
      io.stdout(`node/${hep.spec.node}: added labels ${text} (from hostendpoint/${hep.metadata.name})\n`);
    }
  }

  // Step 2.
  const kcc = await getIfExists(ds, 'KubeControllersConfiguration', 'default');
  const enabled = kcc?.spec.controllers?.node?.hostEndpoint?.autoCreate === 'Enabled';
  if (enabled) io.stdout('kubecontrollersconfiguration/default: autoCreate already Enabled\n');
  else if (dry)
    io.stdout(
      'kubecontrollersconfiguration/default: would set spec.controllers.node.hostEndpoint.autoCreate Enabled\n',
    );
  else {
    await casRetry(ds, { kind: 'KubeControllersConfiguration', name: 'default' }, (cur) => {
      const spec = structuredClone(cur?.spec ?? {});
      const controllers = (spec.controllers ??= {});
      const node = (controllers.node ??= {});
      node.hostEndpoint = { ...node.hostEndpoint, autoCreate: 'Enabled' };
      return cur
        ? { ...cur, spec }
        : { apiVersion: API_VERSION, kind: 'KubeControllersConfiguration', metadata: { name: 'default' }, spec };
    });
    io.stdout('kubecontrollersconfiguration/default: set spec.controllers.node.hostEndpoint.autoCreate Enabled\n');
  }

  // Step 3, only once every node has its automatic endpoint: deleting first would leave the node unprotected or cut
  // off.
  const nodes = [...new Set(old.map((h) => h.spec.node))];
  if (dry) {
    for (const h of old)
      io.stdout(`hostendpoint/${h.metadata.name}: would be deleted once ${h.spec.node}${AUTO_HEP_SUFFIX} exists\n`);
    return 0;
  }
  const deadline = Date.now() + timeout * 1000;
  let waiting = nodes;
  for (;;) {
    const names = new Set((await ds.list('HostEndpoint')).items.map((h) => h.metadata.name));
    waiting = nodes.filter((n) => !names.has(`${n}${AUTO_HEP_SUFFIX}`));
    if (!waiting.length || Date.now() >= deadline) break;
    await new Promise((r) => setTimeout(r, 500));
  }
  if (waiting.length) {
    throw new CtlError(
      `auto-hep: after ${timeout} s no automatic host endpoint exists for node(s) ${waiting.join(', ')} (expected ` +
        `${waiting.map((n) => `${n}${AUTO_HEP_SUFFIX}`).join(', ')}); the old endpoints are kept. Check that ` +
        `netplugin-kube-controllers runs, then run this again (or raise --timeout)`,
    );
  }
  for (const h of old) {
    await ds.delete('HostEndpoint', h.metadata.name, { revision: h.metadata.resourceVersion });
    io.stdout(`hostendpoint/${h.metadata.name}: deleted (replaced by ${h.spec.node}${AUTO_HEP_SUFFIX})\n`);
  }
  return 0;
}

export async function cmdUpgrade(rest: string[], io: CtlIO, s: CtlSession): Promise<number> {
  const sub = rest[0];
  if (!sub || sub === '--help' || sub === '-h') return printHelp(io, UPGRADE_HELP.upgrade!);
  const args = rest.slice(1);
  switch (sub) {
    case 'check':
      return cmdCheck(args, io, s);
    case 'owner-refs':
      return cmdOwnerReferences(args, io, s);
    case 'finish':
      return cmdFinish(args, io, s);
    case 'auto-hep':
      return cmdAutoHep(args, io, s);
    default:
      throw new CtlError(`unknown upgrade command ${JSON.stringify(sub)}; use check, owner-refs, auto-hep or finish`);
  }
}
