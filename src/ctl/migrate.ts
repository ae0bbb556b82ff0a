// `netpluginctl datastore migrate lock|export|import|unlock`: moving a cluster
// from the etcd datastore to the Kubernetes datastore, as docs/upgrade.md recommends.
// lock sets ClusterInformation datastoreReady false, so nothing changes under
// the export; export writes every stored object in dependency order, leaving
// out what the Kubernetes datastore derives itself (workload endpoints come
// from pods; knp.default.* policies and kns.*/ksa.* profiles mirror Kubernetes
// objects); import writes them into an empty Kubernetes datastore unchanged,
// keeping the cluster GUID and every IPAM block, handle and affinity, so running
// pods keep their addresses; unlock sets datastoreReady back to true.
import { DatastoreError } from '../errors.js';
import type { Kind, Resource } from '../model/resources.js';
import type { Datastore } from '../datastore/types.js';
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
import { getIfExists } from '../datastore/cas.js';
import { NETPLUGIN_VERSION } from './version.js';

/** Dependency order: what others refer to first (pools before blocks, blocks before affinities and handles). */
export const EXPORT_ORDER: readonly Kind[] = [
  'ClusterInformation',
  'IPAMConfig',
  'IPPool',
  'Node',
  'Profile',
  'GlobalNetworkPolicy',
  'NetworkPolicy',
  'StagedGlobalNetworkPolicy',
  'StagedNetworkPolicy',
  'StagedKubernetesNetworkPolicy',
  'HostEndpoint',
  'KubeControllersConfiguration',
  'BGPConfiguration',
  'BGPPeer',
  'IPAMBlock',
  'BlockAffinity',
  'IPAMHandle',
];

export const EXPORT_FORMAT = 'NetpluginDatastoreExport';

export interface DatastoreExport {
  kind: typeof EXPORT_FORMAT;
  exportedAt: string;
  exportedBy: string;
  clusterGUID?: string;
  items: Resource[];
}

/**
 * Objects the Kubernetes datastore derives from Kubernetes objects itself: copying them would duplicate or conflict.
 */
export function isDerived(r: Resource): string | undefined {
  if (r.kind === 'WorkloadEndpoint') return 'derived from its pod';
  if (r.kind === 'NetworkPolicy' && r.metadata.name.startsWith('knp.default.'))
    return 'mirrors a Kubernetes NetworkPolicy';
  if (r.kind === 'Profile' && (r.metadata.name.startsWith('kns.') || r.metadata.name.startsWith('ksa.')))
    return 'mirrors a Kubernetes namespace or service account';
  return undefined;
}

/** What a new store assigns itself. */
function portable(r: Resource): Resource {
  const metadata = { ...r.metadata };
  delete metadata.resourceVersion;
  delete metadata.uid;
  delete metadata.creationTimestamp;
  return { ...r, metadata };
}

async function readyState(ds: Datastore): Promise<boolean | undefined> {
  return (await getIfExists(ds, 'ClusterInformation', 'default'))?.spec.datastoreReady;
}

export const MIGRATE_HELP = `Usage:
       netpluginctl datastore migrate lock [--dry-run]            (etcd: datastoreReady false)
       netpluginctl datastore migrate export -o FILE [--allow-unlocked]   (etcd)
       netpluginctl datastore migrate import -f FILE [--dry-run]          (Kubernetes datastore)
       netpluginctl datastore migrate unlock [--dry-run]                  (Kubernetes datastore)

Moves netplugin's data from etcd to the Kubernetes datastore. Run lock, export and the
import's preparations with the etcd settings (ETCD_ENDPOINTS), then import and unlock with
DATASTORE_TYPE=kubernetes and KUBECONFIG. While locked, the plugin answers new pods with
CNI code 11 (try again later), so nothing changes under the export. export leaves out workload endpoints,
knp.default.* policies and kns.*/ksa.* profiles, which the Kubernetes datastore derives from
pods, NetworkPolicies, namespaces and service accounts. import refuses a target that already
holds netplugin objects, and keeps the cluster GUID and all IPAM blocks, handles and
affinities, so running pods keep their addresses. Walkthrough: docs/upgrade.md.
`;

export async function cmdMigrate(rest: string[], io: CtlIO, s: CtlSession): Promise<number> {
  const sub = rest[0];
  if (!sub || sub === '--help' || sub === '-h') return (io.stdout(MIGRATE_HELP), 0);
  const p = parseCommand(
    rest.slice(1),
    [
      { name: 'output', short: 'o', type: 'string' },
      { name: 'filename', short: 'f', type: 'string' },
      { name: 'allow-unlocked', type: 'bool' },
      DRY_RUN,
    ],
    `datastore migrate ${sub}`,
    s,
  );
  if (bool(p, 'help')) return printHelp(io, MIGRATE_HELP);
  const dry = dryRun(p);
  const setReady = async (ds: Datastore, ready: boolean): Promise<string> => {
    if (dry) return `would be set (now ${await readyState(ds)})`;
    const version =
      (await getIfExists(ds, 'ClusterInformation', 'default'))?.spec.netpluginVersion ?? NETPLUGIN_VERSION;
    return (await initDatastore(ds, { datastoreReady: ready, version })).action;
  };
  switch (sub) {
    case 'lock': {
      const ds = await s.writable();
      if (ds.type !== 'etcdv3')
        io.stderr(
          `warning: locking the ${ds.type} datastore; the migration locks the etcd datastore it exports from\n`,
        );
      io.stdout(
        `clusterinformation/default datastoreReady=false ${await setReady(ds, false)}: new pods are retried (CNI ` +
          `code 11) until 'datastore migrate unlock'\n`,
      );
      return 0;
    }
    case 'export': {
      const out = str(p, 'output');
      if (!out) throw new CtlError('datastore migrate export needs -o FILE');
      const ds = await s.datastore();
      if (ds.type !== 'etcdv3')
        throw new CtlError(
          `datastore migrate export reads the etcd datastore, but this one is ${ds.type}; set ETCD_ENDPOINTS (and ` +
            `unset DATASTORE_TYPE=kubernetes)`,
        );
      const ready = await readyState(ds);
      if (ready !== false && !bool(p, 'allow-unlocked')) {
        throw new CtlError(
          "the datastore is not locked (ClusterInformation datastoreReady is not false): run 'netpluginctl datastore " +
            "migrate lock' first so nothing changes under the export, or pass --allow-unlocked",
        );
      }
      const items: Resource[] = [];
      const skipped = new Map<string, number>();
      for (const kind of EXPORT_ORDER) {
        for (const r of (await ds.list(kind)).items) {
          const why = isDerived(r);
          if (why) skipped.set(`${kind} (${why})`, (skipped.get(`${kind} (${why})`) ?? 0) + 1);
          else items.push(portable(r));
        }
      }
      const weps = (await ds.list('WorkloadEndpoint')).items.length;
      if (weps) skipped.set('WorkloadEndpoint (derived from its pod)', weps);
      const guid = items.find((r) => r.kind === 'ClusterInformation')?.spec as { clusterGUID?: string } | undefined;
      const doc: DatastoreExport = {
        kind: EXPORT_FORMAT,
        exportedAt: new Date().toISOString(),
        exportedBy: NETPLUGIN_VERSION,
        ...(guid?.clusterGUID ? { clusterGUID: guid.clusterGUID } : {}),
        items,
      };
      writeFileAtomic(resolvePath(io, out), JSON.stringify(doc, null, 2) + '\n', 0o600);
      const counts = new Map<string, number>();
      for (const r of items) counts.set(r.kind, (counts.get(r.kind) ?? 0) + 1);
      io.stdout(
        `exported ${items.length} object(s) to ${out}: ${[...counts].map(([k, n]) => `${n} ${k}`).join(', ')}\n`,
      );
      for (const [k, n] of skipped) io.stdout(`left out ${n} ${k}\n`);
      return 0;
    }
    case 'import': {
      const file = str(p, 'filename');
      if (!file) throw new CtlError('datastore migrate import needs -f FILE (written by datastore migrate export)');
      const doc = readJsonFile(io, file, '-f') as DatastoreExport;
      if (doc?.kind !== EXPORT_FORMAT || !Array.isArray(doc.items))
        throw new CtlError(`-f ${file} is not a file written by 'netpluginctl datastore migrate export'`);
      const ds = await s.writable();
      if (ds.type !== 'kubernetes')
        throw new CtlError(
          `datastore migrate import writes the Kubernetes datastore, but this one is ${ds.type}; set ` +
            `DATASTORE_TYPE=kubernetes and KUBECONFIG`,
        );
      // An empty target: a ClusterInformation an agent created there is replaced (the GUID must be the source's);
      // anything else means someone already uses it.
      const found: string[] = [];
      for (const kind of EXPORT_ORDER) {
        if (kind === 'ClusterInformation') continue;
        const n = (await ds.list(kind)).items.filter((r) => !isDerived(r)).length;
        if (n) found.push(`${n} ${kind}`);
      }
      if (found.length)
        throw new CtlError(
          `the target datastore is not empty (${found.join(', ')}); import only into a fresh Kubernetes datastore, ` +
            `so no address can be handed out twice`,
        );
      // Namespaced objects need their namespace in the cluster: check all before writing anything.
      const namespaces = [
        ...new Set(doc.items.filter((r) => !isDerived(r) && r.metadata.namespace).map((r) => r.metadata.namespace!)),
      ];
      if (namespaces.length) {
        const client = await s.kube();
        const missing: string[] = [];
        for (const ns of namespaces) {
          await client.getNamespace(ns).catch((e: unknown) => {
            if (DatastoreError.is(e, 'NotFound')) missing.push(ns);
            else throw e;
          });
        }
        if (missing.length)
          throw new CtlError(
            `namespace(s) ${missing.join(', ')} do not exist in the cluster, but the export holds objects in them; ` +
              `create them (or delete those objects from the file) and import again`,
          );
      }
      if (dry) {
        io.stdout(
          `would import ${doc.items.filter((r) => !isDerived(r)).length} object(s) from ${file} (dry run: the target ` +
            `is empty and every namespace exists)\n`,
        );
        return 0;
      }
      let n = 0;
      for (const r of doc.items) {
        if (isDerived(r)) continue;
        if (r.kind === 'ClusterInformation') {
          const cur = await getIfExists(ds, 'ClusterInformation', 'default');
          if (cur) await ds.update({ ...cur, spec: { ...r.spec } as typeof cur.spec });
          else await ds.create(portable(r));
        } else {
          try {
            await ds.create(portable(r));
          } catch (e) {
            throw new CtlError(
              `import stopped at ${r.kind} ${r.metadata.namespace ? `${r.metadata.namespace}/` : ''}` +
                `${r.metadata.name} after ${n} object(s): ${(e as Error).message}. The target is now partly filled: ` +
                `delete the netplugin custom resources there and import again`,
            );
          }
        }
        n++;
      }
      const ready = await readyState(ds);
      io.stdout(
        `imported ${n} object(s) from ${file}${doc.clusterGUID ? `; cluster GUID ${doc.clusterGUID} kept` : ''}\n`,
      );
      if (ready === false)
        io.stdout(
          "the Kubernetes datastore is locked (datastoreReady=false): switch the nodes to it, then run 'netpluginctl " +
            "datastore migrate unlock'\n",
        );
      return 0;
    }
    case 'unlock': {
      const ds = await s.writable();
      if (ds.type !== 'kubernetes')
        io.stderr(
          `warning: unlocking the ${ds.type} datastore (this abandons the migration; the Kubernetes datastore is ` +
            `unlocked with DATASTORE_TYPE=kubernetes)\n`,
        );
      io.stdout(`clusterinformation/default datastoreReady=true ${await setReady(ds, true)}\n`);
      return 0;
    }
    default:
      throw new CtlError(
        `unknown datastore migrate command ${JSON.stringify(sub)}; use lock, export, import or unlock`,
      );
  }
}
