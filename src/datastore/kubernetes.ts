// Kubernetes API backend: every kind is a custom resource in netplugin.org/v3
// (deploy/crds), versioned by metadata.resourceVersion, except WorkloadEndpoint,
// which is derived from its Pod plus the annotations the plugin writes on it
// (so RBAC needs only get/list/watch/patch on pods, and the endpoint's
// lifetime is the pod's). Loaded only by dynamic import from ./index.ts.
import { DatastoreError } from '../errors.js';
import {
  createKubeClient,
  type KubeClient,
  type KubeList,
  type KubeObject,
  type KubePod,
  type WatchHandle,
} from '../k8s/client.js';
import { parseSelector } from '../selector/index.js';
import { PLURALS, checkName, onNode } from './keys.js';
import { parseWorkloadEndpointName, workloadEndpointName } from '../model/names.js';
import { podEndpointAttributes } from '../workload/workload.js';
import { resourceProblem, validateResource } from './schemas.js';
import {
  InvalidObjectError,
  invalidObjects,
  invalidTombstone,
  rawText,
  type InvalidObject,
  type ListScope,
} from './invalid.js';
import {
  API_GROUP,
  API_VERSION,
  NAMESPACED_KINDS,
  type Kind,
  type ObjectMeta,
  type Resource,
  type WorkloadEndpointSpec,
} from '../model/resources.js';
import type * as ds from './types.js';
import type { DatastoreConfig } from './settings.js';
import { orderedTxn, type TxnOp } from './txn.js';

import { ANNOTATION_PREFIX, ENDPOINT_ANNOTATIONS as WEP_ANNOTATIONS } from '../model/annotations.js';

const ORCHESTRATOR = 'k8s';

/** Kinds with objects derived from Kubernetes ones (./k8s-derived.ts, loaded only for these). */
const hasDerived = (kind: Kind) => kind === 'NetworkPolicy' || kind === 'Profile';
const derived = () => import('./k8s-derived.js');
const MAX_CREATE_RETRIES = 5;

function label(kind: Kind, name: string, namespace?: string): string {
  return `${kind} ${NAMESPACED_KINDS.has(kind) ? `${namespace || 'default'}/` : ''}${name}`;
}

function crdPath(kind: Kind, namespace?: string, name?: string): string {
  const ns =
    NAMESPACED_KINDS.has(kind) && namespace !== undefined ? `/namespaces/${encodeURIComponent(namespace)}` : '';
  return `/apis/${API_GROUP}/v3${ns}/${PLURALS[kind]}${name !== undefined ? `/${encodeURIComponent(name)}` : ''}`;
}

function podsPath(namespace?: string, name?: string): string {
  const ns = namespace !== undefined ? `/namespaces/${encodeURIComponent(namespace)}` : '';
  return `/api/v1${ns}/pods${name !== undefined ? `/${encodeURIComponent(name)}` : ''}`;
}

/** The subset of Kubernetes ObjectMeta our resources carry (no managedFields etc.). */
function ourMeta(m: KubeObject['metadata'], namespaced: boolean): ObjectMeta {
  const meta: ObjectMeta = { name: m.name };
  if (namespaced && m.namespace) meta.namespace = m.namespace;
  for (const k of ['resourceVersion', 'uid', 'creationTimestamp'] as const)
    if (typeof m[k] === 'string') meta[k] = m[k] as string;
  if (m.labels && Object.keys(m.labels).length) meta.labels = m.labels;
  if (m.annotations && Object.keys(m.annotations).length) meta.annotations = m.annotations;
  if (Array.isArray(m.ownerReferences) && m.ownerReferences.length)
    meta.ownerReferences = m.ownerReferences as NonNullable<ObjectMeta['ownerReferences']>;
  return meta;
}

/** The annotation each field of a pod's endpoint is stored in: errors name what to fix. */
const ANNOTATION_OF: Readonly<Record<string, string>> = {
  containerID: WEP_ANNOTATIONS.containerID,
  ipNetworks: WEP_ANNOTATIONS.podIPs,
  interfaceName: WEP_ANNOTATIONS.interfaceName,
  mac: WEP_ANNOTATIONS.mac,
  endpoint: WEP_ANNOTATIONS.endpoint,
  ipNATs: WEP_ANNOTATIONS.ipNATs,
};

/** An annotation's value in an error: quoted, bounded. */
function shown(v: string | undefined): string {
  const q = JSON.stringify(v ?? '');
  return q.length > 120 ? `${q.slice(0, 117)}..."` : q;
}

/**
 * A pod's WorkloadEndpoint: the resource, or why the endpoint annotations are
 * malformed (named by the annotation and its value), or undefined when the
 * plugin has not written one. Tenants can edit their pods' annotations, so a
 * malformed one is expected data, never an exception.
 */
function podEndpoint(pod: KubePod): { wep: Resource<'WorkloadEndpoint'> } | { invalid: InvalidObject } | undefined {
  const a = pod.metadata.annotations ?? {};
  const containerID = a[WEP_ANNOTATIONS.containerID];
  if (!containerID) return undefined;
  const ns = pod.metadata.namespace ?? 'default';
  const node = pod.spec?.nodeName ?? '';
  const endpoint = a[WEP_ANNOTATIONS.endpoint] || 'eth0';
  const name = workloadEndpointName(node, ORCHESTRATOR, pod.metadata.name, endpoint);
  const invalid = (reason: string): { invalid: InvalidObject } => {
    const ours = Object.fromEntries(
      Object.entries(a)
        .filter(([k]) => k.startsWith(ANNOTATION_PREFIX))
        .map(([k, v]) => [k, rawText(String(v))]),
    );
    return {
      invalid: {
        kind: 'WorkloadEndpoint',
        name,
        namespace: ns,
        ...(pod.metadata.resourceVersion ? { revision: pod.metadata.resourceVersion } : {}),
        where: `pod ${ns}/${pod.metadata.name} (annotations ${ANNOTATION_PREFIX}*)`,
        reason,
        raw: { pod: `${ns}/${pod.metadata.name}`, node, annotations: ours },
      },
    };
  };
  // Labels, profiles and ports exactly as the plugin builds them (workload/workload.ts),
  // so an endpoint reads back the same from either datastore.
  let attrs: ReturnType<typeof podEndpointAttributes>;
  try {
    attrs = podEndpointAttributes(pod);
  } catch (e) {
    return invalid(`the pod's labels, service account or ports cannot be read (${(e as Error).message})`);
  }
  const ipsFrom = a[WEP_ANNOTATIONS.podIPs] !== undefined ? WEP_ANNOTATIONS.podIPs : WEP_ANNOTATIONS.podIP;
  const ips = (a[ipsFrom] ?? '')
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean);
  const spec: WorkloadEndpointSpec = {
    orchestrator: ORCHESTRATOR,
    node,
    containerID,
    pod: pod.metadata.name,
    endpoint,
    serviceAccountName: attrs.serviceAccountName,
    ipNetworks: ips,
    profiles: attrs.profiles,
    interfaceName: a[WEP_ANNOTATIONS.interfaceName] ?? '',
  };
  const mac = a[WEP_ANNOTATIONS.mac];
  if (mac) spec.mac = mac;
  const ipNATs = a[WEP_ANNOTATIONS.ipNATs];
  if (ipNATs) {
    try {
      spec.ipNATs = JSON.parse(ipNATs) as NonNullable<WorkloadEndpointSpec['ipNATs']>;
    } catch (e) {
      return invalid(
        `annotation ${WEP_ANNOTATIONS.ipNATs}=${shown(ipNATs)} is not JSON (${(e as Error).message}); it must be a ` +
          `JSON array of {internalIP, externalIP}`,
      );
    }
  }
  if (attrs.ports.length) spec.ports = attrs.ports;
  if (attrs.generateName) spec.generateName = attrs.generateName;
  const metadata: ObjectMeta = {
    name,
    namespace: ns,
    resourceVersion: pod.metadata.resourceVersion,
    labels: attrs.labels,
  };
  if (pod.metadata.uid) metadata.uid = pod.metadata.uid;
  if (pod.metadata.creationTimestamp) metadata.creationTimestamp = pod.metadata.creationTimestamp;
  const wep: Resource<'WorkloadEndpoint'> = { apiVersion: API_VERSION, kind: 'WorkloadEndpoint', metadata, spec };
  const problem = resourceProblem('WorkloadEndpoint', wep, (path) => {
    const ann =
      path[0] === 'spec' && typeof path[1] === 'string'
        ? path[1] === 'ipNetworks'
          ? ipsFrom
          : ANNOTATION_OF[path[1]]
        : undefined;
    if (!ann) return `pod ${path.join('.')}`;
    const entry = path.length > 2 ? ` (entry ${path.slice(2).join('.')})` : '';
    return `annotation ${ann}=${shown(a[ann])}${entry}`;
  });
  return problem === undefined ? { wep } : invalid(problem);
}

/**
 * A pod's WorkloadEndpoint, or undefined when the plugin has not written one; a malformed one throws
 * InvalidObjectError.
 */
function podToWorkloadEndpoint(pod: KubePod): Resource<'WorkloadEndpoint'> | undefined {
  const ep = podEndpoint(pod);
  if (ep && 'invalid' in ep) throw new InvalidObjectError(ep.invalid);
  return ep?.wep;
}

/** The annotations that store `spec` (null removes one: JSON merge patch). */
function wepAnnotations(spec: WorkloadEndpointSpec | undefined): Record<string, string | null> {
  const a: Record<string, string | null> = {};
  for (const k of Object.values(WEP_ANNOTATIONS)) a[k] = null;
  if (!spec) return a;
  a[WEP_ANNOTATIONS.containerID] = spec.containerID;
  const first = spec.ipNetworks[0];
  if (first !== undefined) {
    a[WEP_ANNOTATIONS.podIP] = first;
    a[WEP_ANNOTATIONS.podIPs] = spec.ipNetworks.join(',');
  }
  if (spec.interfaceName) a[WEP_ANNOTATIONS.interfaceName] = spec.interfaceName;
  if (spec.mac) a[WEP_ANNOTATIONS.mac] = spec.mac;
  if (spec.endpoint && spec.endpoint !== 'eth0') a[WEP_ANNOTATIONS.endpoint] = spec.endpoint;
  if (spec.ipNATs?.length) a[WEP_ANNOTATIONS.ipNATs] = JSON.stringify(spec.ipNATs);
  return a;
}

export class KubernetesDatastore implements ds.Datastore {
  readonly type = 'kubernetes' as const;
  private readonly watches = new Set<ds.Watch>();

  private constructor(readonly client: KubeClient) {}

  static async open(conf: DatastoreConfig): Promise<KubernetesDatastore> {
    return new KubernetesDatastore(await createKubeClient({ ...conf.kubernetes, timeoutMs: conf.timeoutMs }));
  }

  /** This API server in the process's record of malformed objects (invalid.ts). */
  private get storeId(): string {
    return `kubernetes ${this.client.server}`;
  }

  /** One custom resource as read: the resource, or why it is malformed. */
  private convert<K extends Kind>(
    kind: K,
    obj: KubeObject,
    path: string,
  ): { res: Resource<K> } | { invalid: InvalidObject } {
    const namespaced = NAMESPACED_KINDS.has(kind);
    const res = {
      apiVersion: API_VERSION,
      kind,
      metadata: ourMeta(obj.metadata, namespaced),
      spec: obj.spec,
    } as Resource<K>;
    const problem = resourceProblem(kind, res);
    if (problem === undefined) return { res };
    const m = obj.metadata ?? {};
    const invalid: InvalidObject = {
      kind,
      name: String(m.name ?? ''),
      ...(namespaced && m.namespace ? { namespace: m.namespace } : {}),
      ...(m.resourceVersion ? { revision: m.resourceVersion } : {}),
      where: `${this.client.server}${path}`,
      reason: problem,
      raw: { apiVersion: obj.apiVersion, kind: obj.kind, metadata: res.metadata, spec: obj.spec },
    };
    return { invalid };
  }

  /** A custom resource read on its own (get): a malformed one fails naming it, its path and the field. */
  private toResource<K extends Kind>(kind: K, obj: KubeObject, path: string): Resource<K> {
    const c = this.convert(kind, obj, path);
    if ('invalid' in c) {
      invalidObjects.seen(this.storeId, c.invalid);
      throw new InvalidObjectError(c.invalid);
    }
    invalidObjects.cleared(this.storeId, kind, c.res.metadata.name, c.res.metadata.namespace);
    return c.res;
  }

  private body(res: Resource, withVersion: boolean): KubeObject {
    const m = res.metadata;
    const metadata: KubeObject['metadata'] = { name: m.name };
    if (NAMESPACED_KINDS.has(res.kind)) metadata.namespace = m.namespace || 'default';
    if (m.labels) metadata.labels = m.labels;
    if (m.annotations) metadata.annotations = m.annotations;
    if (m.ownerReferences) metadata.ownerReferences = m.ownerReferences;
    if (withVersion) {
      if (m.resourceVersion !== undefined) metadata.resourceVersion = m.resourceVersion;
      if (m.uid) metadata.uid = m.uid;
    }
    return { apiVersion: API_VERSION, kind: res.kind, metadata, spec: res.spec as Record<string, unknown> };
  }

  private check(res: Resource): void {
    if (!res || typeof res !== 'object' || !res.metadata || typeof res.metadata.name !== 'string')
      throw new DatastoreError('Invalid', 'a resource needs metadata.name');
    checkName(res.kind, res.metadata.name);
    validateResource(res.kind, res, `${res.kind} ${res.metadata.name} (to be written)`);
  }

  /** Re-labels a backend NotFound/Conflict with the object the caller asked about. */
  private rethrow(e: unknown, what: string): never {
    if (e instanceof DatastoreError && (e.kind === 'NotFound' || e.kind === 'AlreadyExists' || e.kind === 'Conflict')) {
      const msg =
        e.kind === 'NotFound'
          ? `${what} not found`
          : e.kind === 'AlreadyExists'
            ? `${what} already exists`
            : `${what} was modified concurrently; re-read and retry`;
      throw new DatastoreError(e.kind, `${msg} (${e.message})`, { cause: e });
    }
    throw e;
  }

  async get<K extends Kind>(kind: K, name: string, namespace?: string, opts?: ds.CallOptions): Promise<Resource<K>> {
    checkName(kind, name);
    if (kind === 'WorkloadEndpoint') return (await this.getWep(name, namespace || 'default', opts)) as Resource<K>;
    if (hasDerived(kind)) {
      const d = await derived();
      if (d.isDerived(kind, name)) {
        try {
          return await d.derivedGet(this.client, kind, name, namespace);
        } catch (e) {
          if (e instanceof InvalidObjectError) invalidObjects.seen(this.storeId, e.invalid);
          throw e;
        }
      }
    }
    const path = crdPath(kind, namespace || 'default', name);
    try {
      return this.toResource(kind, await this.client.request<KubeObject>('GET', path, undefined, opts), path);
    } catch (e) {
      this.rethrow(e, label(kind, name, namespace));
    }
  }

  async list<K extends Kind>(kind: K, opts: ds.ListOptions & ds.CallOptions = {}): Promise<ds.ListResult<K>> {
    const sel = opts.labelSelector ? parseSelector(opts.labelSelector) : undefined;
    const mine = onNode(kind, opts.node);
    let items: Array<Resource<K>> = [];
    // Each object is converted on its own: a malformed one is named here, never fails the list (invalid.ts).
    const invalid: InvalidObject[] = [];
    let revision: string;
    if (kind === 'WorkloadEndpoint') {
      // A node's endpoints are its pods': the API server filters them (spec.nodeName is a pod field selector).
      const onlyNode =
        opts.node !== undefined ? `?fieldSelector=${encodeURIComponent(`spec.nodeName=${opts.node}`)}` : '';
      const l = await this.client.request<KubeList<KubePod>>(
        'GET',
        podsPath(opts.namespace) + onlyNode,
        undefined,
        opts,
      );
      for (const p of l.items) {
        const ep = podEndpoint(p);
        if (ep && 'wep' in ep) items.push(ep.wep as Resource<K>);
        else if (ep) invalid.push(ep.invalid);
      }
      revision = l.metadata.resourceVersion ?? '';
    } else {
      const path = crdPath(kind, opts.namespace);
      const l = await this.client.request<KubeList>('GET', path, undefined, opts);
      for (const o of l.items) {
        const c = this.convert(kind, o, `${path}/${o.metadata.name}`);
        if ('res' in c) items.push(c.res);
        else invalid.push(c.invalid);
      }
      revision = l.metadata.resourceVersion ?? '';
      if (hasDerived(kind)) {
        const d = await derived();
        const more = await d.derivedList(this.client, kind, opts.namespace);
        items.push(...more.items);
        invalid.push(...more.invalid);
        revision = d.minRevision(revision, more.revision) ?? '';
      }
    }
    const named = (name: string) => !opts.namePrefix || name.startsWith(opts.namePrefix);
    items = items.filter((o) => named(o.metadata.name) && (!sel || sel.matches(o.metadata.labels ?? {})) && mine(o));
    const inScope = invalid.filter((o) => named(o.name));
    const scope: ListScope =
      !opts.namePrefix && !opts.labelSelector && opts.node === undefined
        ? { complete: true, namespace: opts.namespace }
        : { complete: false };
    invalidObjects.listed(this.storeId, kind, scope, inScope);
    items.sort(
      (a, b) =>
        (a.metadata.namespace ?? '').localeCompare(b.metadata.namespace ?? '') ||
        a.metadata.name.localeCompare(b.metadata.name),
    );
    return { items, revision, ...(inScope.length ? { invalid: inScope } : {}) };
  }

  private async checkWritable(kind: Kind, name: string, namespace?: string): Promise<void> {
    if (!hasDerived(kind)) return;
    const d = await derived();
    if (d.isDerived(kind, name)) throw d.readOnlyError(kind, name, namespace);
  }

  async create<K extends Kind>(res: Resource<K>, opts?: ds.CallOptions): Promise<Resource<K>> {
    this.check(res);
    await this.checkWritable(res.kind, res.metadata.name, res.metadata.namespace);
    if (res.kind === 'WorkloadEndpoint')
      return (await this.createWep(res as Resource<'WorkloadEndpoint'>, opts)) as Resource<K>;
    const path = crdPath(res.kind, res.metadata.namespace || 'default');
    try {
      const o = await this.client.request<KubeObject>('POST', path, this.body(res, false), opts);
      return this.toResource(res.kind, o, `${path}/${res.metadata.name}`);
    } catch (e) {
      this.rethrow(e, label(res.kind, res.metadata.name, res.metadata.namespace));
    }
  }

  async update<K extends Kind>(res: Resource<K>, opts?: ds.CallOptions): Promise<Resource<K>> {
    this.check(res);
    const what = label(res.kind, res.metadata.name, res.metadata.namespace);
    await this.checkWritable(res.kind, res.metadata.name, res.metadata.namespace);
    if (!res.metadata.resourceVersion)
      throw new DatastoreError('Invalid', `update of ${what} needs metadata.resourceVersion from a previous read`);
    if (res.kind === 'WorkloadEndpoint')
      return (await this.updateWep(res as Resource<'WorkloadEndpoint'>, opts)) as Resource<K>;
    const path = crdPath(res.kind, res.metadata.namespace || 'default', res.metadata.name);
    try {
      return this.toResource(
        res.kind,
        await this.client.request<KubeObject>('PUT', path, this.body(res, true), opts),
        path,
      );
    } catch (e) {
      this.rethrow(e, what);
    }
  }

  async delete<K extends Kind>(kind: K, name: string, opts: ds.DeleteOptions & ds.CallOptions = {}): Promise<void> {
    checkName(kind, name);
    const what = label(kind, name, opts.namespace);
    await this.checkWritable(kind, name, opts.namespace);
    if (kind === 'WorkloadEndpoint') return this.deleteWep(name, opts.namespace || 'default', opts.revision, opts);
    const body =
      opts.revision !== undefined
        ? { apiVersion: 'v1', kind: 'DeleteOptions', preconditions: { resourceVersion: opts.revision } }
        : undefined;
    try {
      await this.client.request('DELETE', crdPath(kind, opts.namespace || 'default', name), body, opts);
    } catch (e) {
      this.rethrow(e, what);
    }
  }

  /**
   * The Kubernetes API has no multi-object transaction: the ops are written in
   * order and the first failure stops the rest (callers order them so that
   * every prefix is crash-safe; docs/ipam.md).
   */
  txn(ops: TxnOp[], opts?: ds.CallOptions): Promise<Array<Resource | undefined>> {
    return orderedTxn(this, ops, opts);
  }

  // ---- WorkloadEndpoint <-> Pod ----

  /** A workload endpoint's namespace, its name in errors and the pod it is stored on. */
  private wepTarget(res: Resource<'WorkloadEndpoint'>): { ns: string; what: string; podName: string } {
    const ns = res.metadata.namespace || 'default';
    return { ns, what: label('WorkloadEndpoint', res.metadata.name, ns), podName: this.podOf(res.metadata.name, ns) };
  }

  private podOf(name: string, namespace: string): string {
    const p = parseWorkloadEndpointName(name);
    if (!p || p.orchestrator !== ORCHESTRATOR) {
      throw new DatastoreError(
        'Invalid',
        `WorkloadEndpoint name ${JSON.stringify(name)} is not <node>-k8s-<pod>-<endpoint> (names.ts ` +
          `workloadEndpointName); in kubernetes mode endpoints belong to pods (namespace ${namespace})`,
      );
    }
    return p.workload;
  }

  /** The pod of endpoint `name` and what it carries: the endpoint, or why its annotations are malformed. */
  private async readWep(
    name: string,
    namespace: string,
    opts?: ds.CallOptions,
  ): Promise<{ pod: KubePod; ep: { wep: Resource<'WorkloadEndpoint'> } | { invalid: InvalidObject } }> {
    const what = label('WorkloadEndpoint', name, namespace);
    const podName = this.podOf(name, namespace);
    let pod: KubePod;
    try {
      pod = await this.client.getPod(namespace, podName, opts);
    } catch (e) {
      this.rethrow(e, what);
    }
    const ep = podEndpoint(pod);
    const epName = ep && ('wep' in ep ? ep.wep.metadata.name : ep.invalid.name);
    if (!ep || epName !== name)
      throw new DatastoreError(
        'NotFound',
        `${what} not found (pod ${namespace}/${podName} carries no endpoint by that name)`,
      );
    return { pod, ep };
  }

  private async getWep(name: string, namespace: string, opts?: ds.CallOptions): Promise<Resource<'WorkloadEndpoint'>> {
    const { ep } = await this.readWep(name, namespace, opts);
    if ('invalid' in ep) {
      invalidObjects.seen(this.storeId, ep.invalid);
      throw new InvalidObjectError(ep.invalid);
    }
    invalidObjects.cleared(this.storeId, 'WorkloadEndpoint', name, namespace);
    return ep.wep;
  }

  private async patchPodEndpoint(
    namespace: string,
    podName: string,
    rv: string | undefined,
    spec: WorkloadEndpointSpec | undefined,
    opts?: ds.CallOptions,
  ): Promise<KubePod> {
    const metadata: Record<string, unknown> = { annotations: wepAnnotations(spec) };
    // A resourceVersion inside a merge patch is a precondition: the API server
    // answers 409 when the pod moved on, which makes this a compare-and-swap.
    if (rv !== undefined) metadata.resourceVersion = rv;
    return this.client.patchPod(namespace, podName, { metadata }, 'merge', opts);
  }

  private checkWepMatchesPod(res: Resource<'WorkloadEndpoint'>, pod: KubePod, namespace: string): void {
    const expect = workloadEndpointName(
      pod.spec?.nodeName ?? '',
      ORCHESTRATOR,
      pod.metadata.name,
      res.spec.endpoint || 'eth0',
    );
    if (expect !== res.metadata.name) {
      throw new DatastoreError(
        'Invalid',
        `WorkloadEndpoint ${namespace}/${res.metadata.name} does not match pod ${namespace}/${pod.metadata.name} on ` +
          `node ${JSON.stringify(pod.spec?.nodeName ?? '')} (expected name ${expect})`,
      );
    }
  }

  private async createWep(
    res: Resource<'WorkloadEndpoint'>,
    opts?: ds.CallOptions,
  ): Promise<Resource<'WorkloadEndpoint'>> {
    const { ns, what, podName } = this.wepTarget(res);
    for (let attempt = 0; ; attempt++) {
      let pod: KubePod;
      try {
        pod = await this.client.getPod(ns, podName, opts);
      } catch (e) {
        if (DatastoreError.is(e, 'NotFound'))
          throw new DatastoreError(
            'NotFound',
            `cannot create ${what}: pod ${ns}/${podName} not found (in kubernetes mode an endpoint is stored on its ` +
              `pod)`,
            { cause: e },
          );
        throw e;
      }
      this.checkWepMatchesPod(res, pod, ns);
      if (pod.metadata.annotations?.[WEP_ANNOTATIONS.containerID])
        throw new DatastoreError(
          'AlreadyExists',
          `${what} already exists (pod ${ns}/${podName} has ${WEP_ANNOTATIONS.containerID})`,
        );
      try {
        const patched = await this.patchPodEndpoint(ns, podName, pod.metadata.resourceVersion, res.spec, opts);
        return podToWorkloadEndpoint(patched)!;
      } catch (e) {
        // The kubelet updates pod status concurrently; that is not a conflict on the endpoint.
        if (DatastoreError.is(e, 'Conflict') && attempt < MAX_CREATE_RETRIES) continue;
        this.rethrow(e, what);
      }
    }
  }

  private async updateWep(
    res: Resource<'WorkloadEndpoint'>,
    opts?: ds.CallOptions,
  ): Promise<Resource<'WorkloadEndpoint'>> {
    const { ns, what, podName } = this.wepTarget(res);
    try {
      const patched = await this.patchPodEndpoint(ns, podName, res.metadata.resourceVersion, res.spec, opts);
      const wep = podToWorkloadEndpoint(patched);
      if (!wep) throw new DatastoreError('NotFound', `${what} not found`);
      return wep;
    } catch (e) {
      this.rethrow(e, what);
    }
  }

  private async deleteWep(
    name: string,
    namespace: string,
    revision: string | undefined,
    opts?: ds.CallOptions,
  ): Promise<void> {
    const what = label('WorkloadEndpoint', name, namespace);
    // A malformed endpoint can be deleted too: removing its annotations is the repair (and a DEL must not fail on it).
    const { pod } = await this.readWep(name, namespace, opts);
    if (revision !== undefined && pod.metadata.resourceVersion !== revision) {
      throw new DatastoreError(
        'Conflict',
        `${what} was modified concurrently (have ${revision}, pod has ${pod.metadata.resourceVersion}); re-read and ` +
          `retry`,
      );
    }
    try {
      await this.patchPodEndpoint(
        namespace,
        pod.metadata.name,
        revision ?? pod.metadata.resourceVersion,
        undefined,
        opts,
      );
    } catch (e) {
      this.rethrow(e, what);
    }
    invalidObjects.cleared(this.storeId, 'WorkloadEndpoint', name, namespace);
  }

  // ---- watch ----

  watch<K extends Kind>(kind: K, opts: ds.WatchOptions, onEvent: (ev: ds.WatchEvent<K>) => void): ds.Watch {
    const isWep = kind === 'WorkloadEndpoint';
    const path = isWep ? podsPath(opts.namespace) : crdPath(kind, opts.namespace);
    let stopped = false;
    let current: WatchHandle | undefined;
    let retryTimer: NodeJS.Timeout | undefined;
    let backoff = 250;
    let lastRv = opts.revision;
    /** Pods that carried an endpoint when last seen, with that endpoint (for DELETED). */
    const known = new Map<string, Resource<'WorkloadEndpoint'>>();
    /** Pods whose endpoint was malformed when last seen, with its name (to clear the record when it is repaired). */
    const knownInvalid = new Map<string, string>();
    const emit = (ev: ds.WatchEvent<K>) => {
      if (!stopped) onEvent(ev);
    };
    let derivedWatch: ds.Watch | undefined;
    const handle: ds.Watch = {
      stop: () => {
        stopped = true;
        clearTimeout(retryTimer);
        current?.stop();
        derivedWatch?.stop();
        this.watches.delete(handle);
      },
    };
    this.watches.add(handle);
    if (hasDerived(kind)) {
      // The derived objects' watches run beside the CRD's, into the same stream.
      void derived().then((d) => {
        if (!stopped)
          derivedWatch = d.derivedWatch(this.client, kind, opts, (ev) => {
            if (ev.type === 'DELETED' && ev.invalid) invalidObjects.seen(this.storeId, ev.invalid);
            else if (ev.type !== 'ERROR')
              invalidObjects.cleared(this.storeId, kind, ev.object.metadata.name, ev.object.metadata.namespace);
            emit(ev);
            if (ev.type === 'ERROR') handle.stop();
          });
      });
    }

    const onRaw = (ev: { type: string; object: KubeObject }) => {
      if (ev.object?.metadata?.resourceVersion) lastRv = ev.object.metadata.resourceVersion;
      if (ev.type === 'BOOKMARK') return;
      backoff = 250;
      try {
        const type = ev.type as 'ADDED' | 'MODIFIED' | 'DELETED';
        if (!isWep) {
          const c = this.convert(kind, ev.object, `${path}/${ev.object.metadata.name}`);
          if ('res' in c) {
            invalidObjects.cleared(this.storeId, kind, c.res.metadata.name, c.res.metadata.namespace);
            emit({ type, object: c.res });
            return;
          }
          // Malformed: a delete of the object, so no consumer keeps acting on its last valid state (invalid.ts).
          if (type === 'DELETED') invalidObjects.cleared(this.storeId, kind, c.invalid.name, c.invalid.namespace);
          else invalidObjects.seen(this.storeId, c.invalid);
          emit(
            type === 'DELETED'
              ? { type, object: invalidTombstone<K>(c.invalid) }
              : { type: 'DELETED', object: invalidTombstone<K>(c.invalid), invalid: c.invalid },
          );
          return;
        }
        const pod = ev.object as KubePod;
        const key = `${pod.metadata.namespace}/${pod.metadata.name}`;
        const prev = known.get(key);
        const ep = podEndpoint(pod);
        const wasInvalid = knownInvalid.get(key);
        if (wasInvalid !== undefined && (type === 'DELETED' || !ep || 'wep' in ep || ep.invalid.name !== wasInvalid)) {
          knownInvalid.delete(key);
          invalidObjects.cleared(this.storeId, 'WorkloadEndpoint', wasInvalid, pod.metadata.namespace);
        }
        if (type !== 'DELETED' && ep && 'wep' in ep) {
          known.set(key, ep.wep);
          emit({ type: prev ? 'MODIFIED' : 'ADDED', object: ep.wep as Resource<K> });
        } else if (type !== 'DELETED' && ep && 'invalid' in ep) {
          // Malformed annotations (a tenant can write them): the endpoint is gone for consumers, so
          // its pod is unknown to policy (isolated) rather than kept with stale addresses.
          knownInvalid.set(key, ep.invalid.name);
          invalidObjects.seen(this.storeId, ep.invalid);
          known.delete(key);
          const object = prev ?? invalidTombstone<'WorkloadEndpoint'>(ep.invalid);
          object.metadata.resourceVersion = pod.metadata.resourceVersion;
          emit({ type: 'DELETED', object: object as Resource<K>, invalid: ep.invalid });
        } else if (prev) {
          known.delete(key);
          prev.metadata.resourceVersion = pod.metadata.resourceVersion;
          emit({ type: 'DELETED', object: prev as Resource<K> });
        }
      } catch (e) {
        emit({ type: 'ERROR', error: e as Error });
      }
    };

    const connect = async () => {
      if (stopped) return;
      if (lastRv === undefined) {
        // No revision: start from "now" (as etcd does), not with a synthetic ADDED for everything.
        try {
          const l = await this.client.request<KubeList>('GET', path, undefined, { query: { limit: '1' } });
          lastRv = l.metadata.resourceVersion;
        } catch (e) {
          return retry(e as DatastoreError);
        }
      }
      if (stopped) return;
      current = this.client.watch(path, { resourceVersion: lastRv, allowWatchBookmarks: 'true' }, onRaw, (end) => {
        if (stopped) return;
        if (end.gone) {
          emit({
            type: 'ERROR',
            error: new DatastoreError(
              'Conflict',
              `watch ${kind} from revision ${lastRv}: that revision is too old (410 Gone); re-list and watch from ` +
                `the list's revision`,
              { cause: end.error },
            ),
          });
          handle.stop();
          return;
        }
        if (
          end.error &&
          (end.error.kind === 'Unauthorized' || end.error.kind === 'NotFound' || end.error.kind === 'Invalid')
        ) {
          emit({ type: 'ERROR', error: end.error });
          handle.stop();
          return;
        }
        // The API server ends watches after a while, and outages end them too: resume from the last revision.
        retry(end.error);
      });
    };
    const retry = (_e: DatastoreError | undefined) => {
      if (stopped) return;
      // A normal end (the server's watch timeout) resumes at once, but never in a tight loop.
      retryTimer = setTimeout(() => void connect(), _e ? backoff : 50);
      if (_e) backoff = Math.min(backoff * 2, 5000);
    };
    void connect();
    return handle;
  }

  async close(): Promise<void> {
    for (const w of [...this.watches]) w.stop();
    this.client.close();
  }
}
