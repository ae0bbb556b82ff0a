// ClusterInformation "default": the marker that a datastore has been set up
// for netplugin, and the cluster version `netpluginctl version` reports. Called
// by `netpluginctl datastore init`, `install-cni --init-datastore` and the node
// agent at start, so every step is idempotent and safe to race.
import { randomBytes } from 'node:crypto';
import { casRetry } from '../datastore/cas.js';
import { API_VERSION, type ClusterInformationSpec, type Resource } from '../model/resources.js';
import type { Datastore } from '../datastore/types.js';
import { compareVersions, NETPLUGIN_VERSION } from './version.js';

interface InitDatastoreOptions {
  /** Cluster types to record (e.g. "k8s,bgp" or ["k8s","bgp"]); merged with those already stored. */
  clusterType?: string | string[] | undefined;
  /** Version to record as netpluginVersion (default: this package's version); a newer recorded one is kept. */
  version?: string;
  /** Record `version` even when the datastore records a newer one (an operator's explicit downgrade). */
  allowDowngrade?: boolean;
  /**
   * Sets datastoreReady. When omitted, a new ClusterInformation gets `true` and
   * an existing one keeps its value: an operator who set it to false (maintenance)
   * must not be overridden by an agent restarting.
   */
  datastoreReady?: boolean;
}

interface InitDatastoreResult {
  action: 'created' | 'updated' | 'unchanged';
  clusterInformation: Resource<'ClusterInformation'>;
}

function splitTypes(t: string | string[] | undefined): string[] {
  const raw = Array.isArray(t) ? t : (t ?? '').split(',');
  return raw.map((s) => s.trim()).filter(Boolean);
}

function mergeTypes(existing: string | undefined, add: string[]): string | undefined {
  const out = splitTypes(existing);
  for (const t of add) if (!out.includes(t)) out.push(t);
  return out.length ? out.join(',') : undefined;
}

export async function initDatastore(ds: Datastore, opts: InitDatastoreOptions = {}): Promise<InitDatastoreResult> {
  const version = opts.version ?? NETPLUGIN_VERSION;
  const types = splitTypes(opts.clusterType);
  // Two agents starting at once: the loser re-reads and merges again.
  const r = await casRetry(
    ds,
    { kind: 'ClusterInformation', name: 'default' },
    (cur) => {
      if (!cur) {
        const clusterType = mergeTypes(undefined, types);
        const spec: ClusterInformationSpec = {
          clusterGUID: randomBytes(16).toString('hex'),
          ...(clusterType !== undefined ? { clusterType } : {}),
          netpluginVersion: version,
          datastoreReady: opts.datastoreReady ?? true,
        };
        return { apiVersion: API_VERSION, kind: 'ClusterInformation', metadata: { name: 'default' }, spec };
      }
      const spec: ClusterInformationSpec = { ...cur.spec };
      spec.clusterGUID ||= randomBytes(16).toString('hex');
      const ct = mergeTypes(spec.clusterType, types);
      if (ct !== undefined) spec.clusterType = ct;
      // Never lower the recorded version: during a rolling upgrade an agent of
      // the old release restarting would otherwise set the cluster back, and
      // new clients would see an "older" cluster. Only an explicit downgrade does.
      const cmp = spec.netpluginVersion ? compareVersions(version, spec.netpluginVersion) : undefined;
      if (cmp === undefined || cmp > 0 || opts.allowDowngrade) spec.netpluginVersion = version;
      if (opts.datastoreReady !== undefined) spec.datastoreReady = opts.datastoreReady;
      else spec.datastoreReady ??= true;
      if (JSON.stringify(spec) === JSON.stringify(cur.spec)) return undefined;
      return { ...cur, spec };
    },
    { attempts: 6 },
  );
  if ('unchanged' in r) return { action: 'unchanged', clusterInformation: r.stored! };
  return { action: r.prev ? 'updated' : 'created', clusterInformation: r.stored };
}
