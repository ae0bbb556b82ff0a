// node: Kubernetes Nodes -> our datastore.
// - Labels: each Kubernetes Node's labels are kept on the datastore Node of the
//   same name (created when missing), so IPPool nodeSelectors match what
//   operators put on their nodes.
// - Deletion: when a Kubernetes Node goes, everything IPAM recorded for it is
//   released (nothing runs on a deleted node), its blocks and affinities are
//   handed back, then its auto host endpoint and datastore Node are deleted.
//   A node counts as ours once we synced it (annotation below), so a node
//   deleted while we were down is cleaned up by the start-up resync, and a
//   datastore Node of a non-Kubernetes host is never touched.
// - IPAM garbage collection: see gcScan().
// - Automatic host endpoints: `<node>-auto-hep` per Node while
//   spec.controllers.node.hostEndpoint.autoCreate is Enabled.
import type { KubeObject, KubePod } from '../k8s/client.js';
import { API_VERSION, type Resource } from '../model/resources.js';
import { DatastoreError } from '../errors.js';
import { getIfExists } from '../datastore/cas.js';
import { allocationsIn, createIpam, releaseNodeIpam } from '../ipam/index.js';
import { addressOf as bareAddress, canonicalIP } from '../net/cidr.js';
import { Informer } from '../watch/informer.js';
import { datastoreSource } from '../datastore/list-watch.js';
import { kubeSource } from '../k8s/list-watch.js';
import {
  applyMirror,
  controllerMetrics,
  controllerQueue,
  describeError,
  watchErrors,
  type Controller,
  type ControllerContext,
} from './framework.js';
import { formatDuration } from '../model/kube-controllers-config.js';
import { ipamStateMetrics } from './ipam-metrics.js';
import {
  AUTO_HEP_SUFFIX,
  CREATED_BY,
  CREATED_BY_LABEL,
  DEFAULT_ALLOW_PROFILE,
  autoHostEndpoint,
  autoHostEndpointName,
  defaultAllowProfile,
} from '../model/host-endpoints.js';

/** Set on a datastore Node whose labels we sync from a Kubernetes Node of that name. */
const K8S_NODE_ANNOTATION = 'netplugin.org/kubernetes-node';
const OWN_PREFIX = 'netplugin.org/';

type DsNode = Resource<'Node'>;
type Hep = Resource<'HostEndpoint'>;

/** The addresses of a Kubernetes Node that a host endpoint expects (internal and external IPs). */
function nodeAddresses(kn: KubeObject): string[] {
  const addrs = ((kn.status?.addresses ?? []) as Array<{ type?: string; address?: string }>)
    .filter((a) => (a.type === 'InternalIP' || a.type === 'ExternalIP') && a.address)
    .map((a) => a.address!);
  return [...new Set(addrs)].sort();
}

/** The datastore Node's labels: the Kubernetes Node's, plus our own `netplugin.org/*` ones it already had. */
export function syncedNodeLabels(
  k8sLabels: Record<string, string> | undefined,
  current: Record<string, string> | undefined,
): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(current ?? {})) if (k.startsWith(OWN_PREFIX)) out[k] = v;
  return { ...out, ...(k8sLabels ?? {}) };
}

/** Why an allocation with Kubernetes attributes looks leaked, or undefined while its pod holds it. */
export function leakReason(attrs: Record<string, string>, ip: string, pod: KubePod | undefined): string | undefined {
  if (!pod) return `pod ${attrs.namespace}/${attrs.pod} does not exist`;
  if (attrs.podUID && pod.metadata.uid && attrs.podUID !== pod.metadata.uid)
    return (
      `pod ${attrs.namespace}/${attrs.pod} was re-created (uid ${pod.metadata.uid}, the address was given to ` +
      `uid ${attrs.podUID})`
    );
  const nodeName = pod.spec?.nodeName;
  if (nodeName && attrs.node && nodeName !== attrs.node)
    return `pod ${attrs.namespace}/${attrs.pod} runs on node ${nodeName}, the address was given on ${attrs.node}`;
  const st = (pod.status ?? {}) as { podIP?: string; podIPs?: Array<{ ip?: string }> };
  const ips = (st.podIPs?.length ? st.podIPs.map((p) => p.ip ?? '') : st.podIP ? [st.podIP] : [])
    .filter(Boolean)
    .map(canonicalIP);
  if (ips.length && !ips.includes(ip))
    return `pod ${attrs.namespace}/${attrs.pod} has addresses ${ips.join(', ')}, not ${ip}`;
  return undefined;
}

interface NodeController extends Controller {
  /** Runs one GC scan now (tests, `--gc-now`); resolves with the addresses released. */
  gcScan(): Promise<string[]>;
}

export function nodeController(ctx: ControllerContext): NodeController {
  return new NodeSync(ctx);
}

type Metrics = ReturnType<typeof controllerMetrics>;
type Ipam = ReturnType<typeof createIpam>;

/** The informers the controller reads. */
interface NodeInputs {
  kubeNodes: Informer<KubeObject>;
  dsNodes: Informer<DsNode>;
  heps: Informer<Hep>;
  pods: Informer<KubePod>;
}

/**
 * Kubernetes Nodes onto datastore Nodes: labels, automatic host endpoints, and the clean-up of a
 * deleted node; the IPAM garbage collection (IpamGc) runs beside, on the same informers.
 */
class NodeSync implements NodeController {
  readonly name = 'node';
  private readonly m: Metrics;
  private readonly ipam: Ipam;
  /** Nodes whose DELETED event we saw: cleaned up even without our annotation. */
  private readonly deleted = new Set<string>();
  private readonly queue: ReturnType<typeof controllerQueue>;
  private readonly inputs: NodeInputs;
  private readonly ipamState: ReturnType<typeof ipamStateMetrics>;
  private readonly informers: Array<Informer<unknown>>;
  private readonly gc: IpamGc;
  private resynced = false;
  private started = false;

  constructor(private readonly ctx: ControllerContext) {
    this.m = controllerMetrics(ctx.registry);
    this.ipam = createIpam(ctx.ds, { lock: 'none', log: ctx.log });
    this.queue = controllerQueue(
      ctx,
      this.name,
      (key) => `node ${key}`,
      (node) => this.reconcile(node),
    );
    const onError = watchErrors(ctx, this.name);
    const enqueue = (key: string) => {
      if (this.resynced) this.queue.add(key);
    };
    const kubeNodes = new Informer<KubeObject>(
      kubeSource(ctx.kube, '/api/v1/nodes'),
      {
        onChange: (key, obj) => {
          if (!obj) this.deleted.add(key);
          enqueue(key);
        },
      },
      { onError },
    );
    const dsNodes = new Informer<DsNode>(datastoreSource(ctx.ds, 'Node'), { onChange: enqueue }, { onError });
    const heps = new Informer<Hep>(
      datastoreSource(ctx.ds, 'HostEndpoint'),
      {
        onChange: (key, obj, old) => {
          const h = obj ?? old!;
          if (isAutoHep(h) && key.endsWith(AUTO_HEP_SUFFIX)) enqueue(h.spec.node);
        },
      },
      { onError },
    );
    const pods = new Informer<KubePod>(
      kubeSource<KubePod>(ctx.kube, '/api/v1/pods'),
      {
        onChange: (key, obj) => {
          if (obj || !this.resynced) return; // before the first sync the start-up scan looks at everything
          this.gc.podDeleted(key);
        },
      },
      { onError },
    );
    this.inputs = { kubeNodes, dsNodes, heps, pods };
    // IPAM state gauges (pools, blocks, GC candidates) from caches of their own.
    this.ipamState = ipamStateMetrics(ctx, onError);
    this.informers = [kubeNodes, dsNodes, heps, pods, ...this.ipamState.informers] as Array<Informer<unknown>>;
    this.gc = new IpamGc(ctx, pods, this.ipam, this.m, this.ipamState);
    ctx.onSettings(() => {
      if (!this.resynced) return;
      this.resyncAll(); // autoCreate may have changed
      this.gc.reschedule(); // and the period and the grace period
    });
  }

  start(): void {
    if (this.started) return;
    this.started = true;
    for (const i of this.informers) i.start();
    void Promise.all(this.informers.map((i) => i.whenSynced())).then(() => {
      if (!this.started) return;
      this.resynced = true;
      this.resyncAll();
      this.gc.start();
    });
  }

  get synced(): boolean {
    return this.resynced;
  }

  get watching(): boolean {
    return this.informers.every((i) => i.watching);
  }

  gcScan(): Promise<string[]> {
    return this.gc.scan();
  }

  async stop(): Promise<void> {
    this.started = false;
    this.gc.stop();
    this.ipamState.stop();
    for (const i of this.informers) i.stop();
    await this.queue.stop();
    await this.gc.idle();
  }

  private resyncAll(): void {
    const { kubeNodes, dsNodes, heps } = this.inputs;
    const keys = new Set<string>([...kubeNodes.keys(), ...dsNodes.keys()]);
    for (const h of heps.list()) if (isAutoHep(h)) keys.add(h.spec.node);
    for (const k of keys) this.queue.add(k);
  }

  private async reconcile(node: string): Promise<void> {
    const kn = this.inputs.kubeNodes.get(node);
    if (kn) {
      this.deleted.delete(node);
      await this.syncLabels(node, kn);
      if (this.ctx.settings().autoHostEndpoints) await this.applyAutoHep(node, kn);
      else await this.removeAutoHep(node);
    } else {
      const dn = await getIfExists(this.ctx.ds, 'Node', node);
      if (this.deleted.has(node) || dn?.metadata.annotations?.[K8S_NODE_ANNOTATION] === node) {
        await this.cleanupNode(node);
        this.deleted.delete(node);
      } else {
        await this.removeAutoHep(node);
      }
    }
    this.m.synced.inc({ controller: this.name });
  }

  /** The datastore Node of `node`, created when missing, carries the Kubernetes Node's labels. */
  private async syncLabels(node: string, kn: KubeObject): Promise<void> {
    const { ds, log } = this.ctx;
    const cur = await getIfExists(ds, 'Node', node);
    if (!cur) {
      await ds.create<'Node'>({
        apiVersion: API_VERSION,
        kind: 'Node',
        metadata: {
          name: node,
          labels: { ...(kn.metadata.labels ?? {}) },
          annotations: { [K8S_NODE_ANNOTATION]: node },
        },
        spec: {},
      });
      log.info('node controller: created the datastore Node with the Kubernetes Node labels', { node });
      return;
    }
    const labels = syncedNodeLabels(kn.metadata.labels, cur.metadata.labels);
    const same =
      JSON.stringify(Object.entries(labels).sort()) ===
      JSON.stringify(Object.entries(cur.metadata.labels ?? {}).sort());
    if (same && cur.metadata.annotations?.[K8S_NODE_ANNOTATION] === node) return;
    await ds.update({
      ...cur,
      metadata: {
        ...cur.metadata,
        labels,
        annotations: { ...(cur.metadata.annotations ?? {}), [K8S_NODE_ANNOTATION]: node },
      },
    });
    log.info('node controller: synced the Kubernetes Node labels onto the datastore Node', { node });
  }

  private async applyAutoHep(node: string, kn: KubeObject): Promise<void> {
    const { ds, log } = this.ctx;
    const hepName = autoHostEndpointName(node);
    await applyMirror(ds, 'Profile', DEFAULT_ALLOW_PROFILE, defaultAllowProfile());
    const hep = autoHostEndpoint(node, kn.metadata.labels, nodeAddresses(kn));
    const did = await applyMirror(ds, 'HostEndpoint', hepName, hep);
    if (did !== 'unchanged') log.info(`node controller: ${did} automatic host endpoint ${hepName}`, { node });
  }

  private async removeAutoHep(node: string): Promise<void> {
    const hep = await getIfExists(this.ctx.ds, 'HostEndpoint', autoHostEndpointName(node));
    if (!hep || !isAutoHep(hep)) return;
    await applyMirror(this.ctx.ds, 'HostEndpoint', hep.metadata.name, undefined);
    this.ctx.log.info('node controller: deleted automatic host endpoint', { node, hostEndpoint: hep.metadata.name });
  }

  /** Everything of a deleted node, in an order a retry can resume: addresses, blocks, host endpoint, Node. */
  private async cleanupNode(node: string): Promise<void> {
    const { ds, log } = this.ctx;
    const released = await this.releaseNodeAddresses(node);
    // Then its blocks: empty ones back to the pool, the others unaffined; its affinities deleted.
    await releaseNodeIpam(ds, node, { log });
    if (ds.type !== 'kubernetes') {
      // On etcd the plugin's endpoints outlive a node that never ran DEL.
      const { items: weps } = await ds.list('WorkloadEndpoint');
      for (const w of weps) if (w.spec.node === node) await deleteEndpoint(this.ctx, w, 'its node was deleted');
    }
    await this.removeAutoHep(node);
    try {
      await ds.delete('Node', node);
      log.info('node controller: deleted the datastore Node of a deleted Kubernetes Node', {
        node,
        addressesReleased: released.length,
      });
    } catch (e) {
      if (!DatastoreError.is(e, 'NotFound')) throw e;
    }
  }

  /** The addresses allocated on `node` (by handle, and those without one), released. */
  private async releaseNodeAddresses(node: string): Promise<string[]> {
    const { items: blocks } = await this.ctx.ds.list('IPAMBlock');
    const handles = new Set<string>();
    const unowned: string[] = [];
    for (const b of blocks) {
      const affine = b.spec.affinity === `host:${node}`;
      for (const { ip, attr } of allocationsIn(b.spec)) {
        const onNode = attr?.secondary?.node;
        if (onNode !== node && !(affine && !onNode)) continue;
        if (attr?.handle_id) handles.add(attr.handle_id);
        else unowned.push(ip);
      }
    }
    const released: string[] = [];
    for (const h of handles) released.push(...(await this.ipam.releaseByHandle(h)));
    if (unowned.length) released.push(...(await this.ipam.releaseIPs(unowned)).map((r) => r.ip));
    for (const ip of released)
      this.ctx.log.info('node controller: released an address of a deleted node', { node, ip });
    if (released.length) this.m.released.inc({ reason: 'node-deleted' }, released.length);
    return released;
  }
}

function isAutoHep(h: Hep): boolean {
  return h.metadata.labels?.[CREATED_BY_LABEL] === CREATED_BY;
}

/** An endpoint whose workload is gone for good (etcd: the plugin's DEL never ran). */
async function deleteEndpoint(ctx: ControllerContext, w: Resource<'WorkloadEndpoint'>, why: string): Promise<void> {
  try {
    await ctx.ds.delete('WorkloadEndpoint', w.metadata.name, {
      namespace: w.metadata.namespace ?? 'default',
      revision: w.metadata.resourceVersion!,
    });
    ctx.log.info('node controller: deleted a stale workload endpoint', {
      endpoint: `${w.metadata.namespace}/${w.metadata.name}`,
      why,
    });
  } catch (e) {
    // Gone or rewritten meanwhile (a new ADD): either way not ours to delete now.
    if (!DatastoreError.is(e, 'NotFound') && !DatastoreError.is(e, 'Conflict')) throw e;
  }
}

/** The pod of namespace/name from the API server, undefined when it does not exist. */
async function readPod(ctx: ControllerContext, namespace: string, name: string): Promise<KubePod | undefined> {
  try {
    return await ctx.kube.getPod(namespace, name);
  } catch (e) {
    if (!DatastoreError.is(e, 'NotFound')) throw e;
    return undefined;
  }
}

/**
 * IPAM garbage collection: an allocation with Kubernetes attributes
 * (namespace and pod) whose pod no longer exists (or exists with another
 * UID, on another node, or without that address), and that no live
 * workload endpoint holds, is released once it has looked leaked for
 * leakGracePeriod. The pod is read from the API server once more right
 * before the release, so a stale cache never frees a live pod's address.
 * Allocations without those attributes (podman, plain CNI) are never touched.
 * On etcd, endpoints of pods that are gone are deleted by the same rule.
 * Runs every reconcilerPeriod (the safety net) and leakGracePeriod after a
 * pod deletion the watch reported (podGone: the leak counts from then).
 */
class IpamGc {
  /** `<handle>|<ip>` (and `wep|<namespace>/<name>|<revision>`) -> when GC first saw it leaked. */
  private readonly firstLeaked = new Map<string, number>();
  /**
   * `<namespace>/<pod>` -> when its pod's deletion was seen (watch event): an allocation or endpoint
   * of that pod counts as leaked from then, and a scan runs once the grace period has passed since.
   */
  private readonly podGone = new Map<string, number>();
  private readonly scans: ReturnType<ControllerContext['registry']['counter']>;
  private started = false;
  private gcTimer: NodeJS.Timeout | undefined;
  private dueTimer: NodeJS.Timeout | undefined;
  private lastDueScan = 0;
  private running: Promise<string[]> | undefined;

  constructor(
    private readonly ctx: ControllerContext,
    private readonly pods: Informer<KubePod>,
    private readonly ipam: Ipam,
    private readonly m: Metrics,
    private readonly ipamState: ReturnType<typeof ipamStateMetrics>,
  ) {
    this.scans = ctx.registry.counter(
      'netplugin_kube_controllers_ipam_gc_scans_total',
      'IPAM garbage-collection scans completed',
    );
  }

  /** After the informers' first sync: a scan now, then every reconcilerPeriod. */
  start(): void {
    this.started = true;
    void this.scan().catch((e) =>
      this.ctx.log.warn('ipam gc: scan failed; trying again next period', { error: describeError(e) }),
    );
    this.scheduleGc();
  }

  stop(): void {
    this.started = false;
    clearTimeout(this.gcTimer);
    clearTimeout(this.dueTimer);
    this.podGone.clear();
  }

  /** Settles once a running scan ended. */
  async idle(): Promise<void> {
    await this.running?.catch(() => undefined);
  }

  /** The settings changed: the period and the grace period may have. */
  reschedule(): void {
    this.scheduleGc();
    this.scheduleDue();
  }

  /** The watch saw pod `key` deleted: its leaks count from now. */
  podDeleted(key: string): void {
    this.podGone.set(key, Date.now());
    this.scheduleDue();
  }

  /** One scan at a time; a caller during a scan waits for it. */
  scan(): Promise<string[]> {
    this.running ??= this.scanOnce().finally(() => {
      this.running = undefined;
    });
    return this.running;
  }

  private scheduleGc(): void {
    clearTimeout(this.gcTimer);
    if (!this.started) return;
    this.gcTimer = setTimeout(() => {
      this.scan()
        .catch((e) => {
          this.m.errors.inc({ controller: 'node' });
          this.ctx.log.warn('ipam gc: scan failed; trying again next period', { error: describeError(e) });
        })
        .finally(() => this.scheduleGc());
    }, this.ctx.settings().reconcilerPeriodMs);
  }

  /**
   * The next scan a pod deletion asks for: when the earliest recorded deletion is leakGracePeriod
   * old, at most one such scan a second (a scan lists every block; a burst of deletions shares one).
   */
  private scheduleDue(): void {
    clearTimeout(this.dueTimer);
    this.dueTimer = undefined;
    if (!this.started || !this.podGone.size) return;
    let earliest = Infinity;
    for (const t of this.podGone.values()) earliest = Math.min(earliest, t);
    const at = Math.max(earliest + this.ctx.settings().leakGracePeriodMs, this.lastDueScan + 1000);
    this.dueTimer = setTimeout(
      () => {
        this.lastDueScan = Date.now();
        this.scan()
          .catch((e) => {
            this.m.errors.inc({ controller: 'node' });
            this.ctx.log.warn('ipam gc: scan after a pod deletion failed; the periodic pass retries', {
              error: describeError(e),
            });
            // Do not spin on a failing datastore: the periodic pass is the safety net.
            this.podGone.clear();
          })
          .finally(() => this.scheduleDue());
      },
      Math.max(0, at - Date.now()),
    );
  }

  /** When the leak of `key` (of pod `podKey`) started: first seen, or the pod's deletion if earlier. */
  private leakedSince(key: string, podKey: string, now: number): number {
    const first = Math.min(this.firstLeaked.get(key) ?? now, this.podGone.get(podKey) ?? now);
    this.firstLeaked.set(key, first);
    return first;
  }

  private async scanOnce(): Promise<string[]> {
    if (!this.pods.synced) return [];
    const { ds } = this.ctx;
    const grace = this.ctx.settings().leakGracePeriodMs;
    const now = Date.now();
    const [{ items: blocks }, { items: weps }] = await Promise.all([ds.list('IPAMBlock'), ds.list('WorkloadEndpoint')]);
    const { live, stale } = this.classifyEndpoints(weps);
    const ripe = this.ripeAllocations(blocks, live, grace, now);
    const released = await this.releaseRipe(ripe, grace);
    // Endpoints the plugin wrote on etcd for pods that are gone (no DEL ran), by the same rule:
    // stale for the grace period, confirmed by a GET. On the kubernetes datastore endpoints are
    // the pods themselves.
    await this.deleteStaleEndpoints(ds.type === 'kubernetes' ? [] : stale, grace, now);
    // Deletions whose grace period had passed when this scan started are settled: what they leaked
    // was released here, or is kept (the pod read said otherwise) and left to the periodic pass.
    for (const [k, t] of this.podGone) if (t + grace <= now) this.podGone.delete(k);
    const stillLeaked = [...this.firstLeaked].filter(([k]) => !k.startsWith('wep|'));
    this.ipamState.scanned(
      stillLeaked.map(([k, t]) => ({ ip: k.slice(k.lastIndexOf('|') + 1), ageMs: now - t })),
      grace,
    );
    this.scans.inc();
    return released;
  }

  /** Addresses of live endpoints (their pod exists on the endpoint's node), and endpoints whose pod is gone. */
  private classifyEndpoints(weps: Array<Resource<'WorkloadEndpoint'>>) {
    const live = new Set<string>();
    const stale: Array<Resource<'WorkloadEndpoint'>> = [];
    for (const w of weps) {
      const pod = w.spec.pod ? this.pods.get(`${w.metadata.namespace ?? 'default'}/${w.spec.pod}`) : undefined;
      if (
        w.spec.orchestrator === 'k8s' &&
        w.spec.pod &&
        (!pod || (pod.spec?.nodeName && pod.spec.nodeName !== w.spec.node))
      ) {
        stale.push(w);
        continue;
      }
      for (const n of w.spec.ipNetworks) live.add(canonicalIP(bareAddress(n)));
    }
    return { live, stale };
  }

  /** The leaked allocations, by handle, that have looked leaked for the grace period. */
  private ripeAllocations(blocks: Array<Resource<'IPAMBlock'>>, live: Set<string>, grace: number, now: number) {
    const seen = new Set<string>();
    const ripe = new Map<string, { attrs: Record<string, string>; ips: string[] }>();
    for (const b of blocks) {
      for (const { ip, attr } of allocationsIn(b.spec)) {
        const sec = attr?.secondary ?? {};
        if (!attr?.handle_id || !sec.namespace || !sec.pod) continue;
        const why = live.has(ip) ? undefined : leakReason(sec, ip, this.pods.get(`${sec.namespace}/${sec.pod}`));
        const key = `${attr.handle_id}|${ip}`;
        if (!why) continue;
        seen.add(key);
        if (now - this.leakedSince(key, `${sec.namespace}/${sec.pod}`, now) < grace) continue;
        const r = ripe.get(attr.handle_id) ?? { attrs: sec, ips: [] };
        r.ips.push(ip);
        ripe.set(attr.handle_id, r);
      }
    }
    for (const k of [...this.firstLeaked.keys()]) if (!k.startsWith('wep|') && !seen.has(k)) this.firstLeaked.delete(k);
    this.ctx.log.debug('ipam gc: scan', { leaked: seen.size, ripe: ripe.size, leakGracePeriod: formatDuration(grace) });
    return ripe;
  }

  /** Each ripe handle released once a fresh read of its pod confirms every address is leaked. */
  private async releaseRipe(
    ripe: Map<string, { attrs: Record<string, string>; ips: string[] }>,
    grace: number,
  ): Promise<string[]> {
    const released: string[] = [];
    for (const [handle, r] of ripe) {
      const pod = await readPod(this.ctx, r.attrs.namespace!, r.attrs.pod!);
      const why = r.ips.map((ip) => leakReason(r.attrs, ip, pod)).find((x) => x !== undefined);
      if (!why || r.ips.some((ip) => !leakReason(r.attrs, ip, pod))) continue;
      const ips = await this.ipam.releaseByHandle(handle);
      for (const ip of ips) {
        this.firstLeaked.delete(`${handle}|${ip}`);
        this.ctx.log.info('ipam gc: released a leaked address', {
          ip,
          handle,
          namespace: r.attrs.namespace,
          pod: r.attrs.pod,
          node: r.attrs.node,
          why,
          leakGracePeriod: formatDuration(grace),
        });
      }
      if (ips.length) this.m.released.inc({ reason: 'leaked' }, ips.length);
      released.push(...ips);
    }
    return released;
  }

  private async deleteStaleEndpoints(stale: Array<Resource<'WorkloadEndpoint'>>, grace: number, now: number) {
    const staleNow = new Set<string>();
    for (const w of stale) {
      const ns = w.metadata.namespace ?? 'default';
      const key = `wep|${w.metadata.namespace}/${w.metadata.name}|${w.metadata.resourceVersion}`;
      staleNow.add(key);
      if (now - this.leakedSince(key, `${ns}/${w.spec.pod}`, now) < grace) continue;
      const pod = await readPod(this.ctx, ns, w.spec.pod!);
      if (pod && (!pod.spec?.nodeName || pod.spec.nodeName === w.spec.node)) continue;
      await deleteEndpoint(
        this.ctx,
        w,
        pod
          ? `pod ${w.metadata.namespace}/${w.spec.pod} runs on node ${pod.spec?.nodeName}`
          : `pod ${w.metadata.namespace}/${w.spec.pod} does not exist`,
      );
      this.firstLeaked.delete(key);
    }
    for (const k of [...this.firstLeaked.keys()])
      if (k.startsWith('wep|') && !staleNow.has(k)) this.firstLeaked.delete(k);
  }
}
