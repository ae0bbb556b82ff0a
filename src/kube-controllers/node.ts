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
  const name = 'node';
  const m = controllerMetrics(ctx.registry);
  const ipam = createIpam(ctx.ds, { lock: 'none', log: ctx.log });
  const scans = ctx.registry.counter(
    'netplugin_kube_controllers_ipam_gc_scans_total',
    'IPAM garbage-collection scans completed',
  );
  /** Nodes whose DELETED event we saw: cleaned up even without our annotation. */
  const deleted = new Set<string>();
  /** `<handle>|<ip>` -> when GC first saw it leaked. */
  const firstLeaked = new Map<string, number>();
  /**
   * `<namespace>/<pod>` -> when its pod's deletion was seen (watch event): an allocation or endpoint
   * of that pod counts as leaked from then, and a scan runs once the grace period has passed since.
   */
  const podGone = new Map<string, number>();
  let resynced = false;
  let started = false;
  let gcTimer: NodeJS.Timeout | undefined;
  let dueTimer: NodeJS.Timeout | undefined;
  let lastDueScan = 0;
  let gcRunning: Promise<string[]> | undefined;

  const queue = controllerQueue(
    ctx,
    name,
    (key) => `node ${key}`,
    (node) => reconcile(node),
  );
  const onError = watchErrors(ctx, name);
  const enqueue = (key: string) => {
    if (resynced) queue.add(key);
  };

  const kubeNodes = new Informer<KubeObject>(
    kubeSource(ctx.kube, '/api/v1/nodes'),
    {
      onChange: (key, obj) => {
        if (!obj) deleted.add(key);
        enqueue(key);
      },
    },
    { onError },
  );
  const dsNodes = new Informer<DsNode>(
    datastoreSource(ctx.ds, 'Node'),
    { onChange: (key) => enqueue(key) },
    { onError },
  );
  const heps = new Informer<Hep>(
    datastoreSource(ctx.ds, 'HostEndpoint'),
    {
      onChange: (key, obj, old) => {
        const h = obj ?? old!;
        if (h.metadata.labels?.[CREATED_BY_LABEL] === CREATED_BY && key.endsWith(AUTO_HEP_SUFFIX)) enqueue(h.spec.node);
      },
    },
    { onError },
  );
  const pods = new Informer<KubePod>(
    kubeSource<KubePod>(ctx.kube, '/api/v1/pods'),
    {
      onChange: (key, obj) => {
        if (obj || !resynced) return; // before the first sync the start-up scan looks at everything
        podGone.set(key, Date.now());
        scheduleDue();
      },
    },
    { onError },
  );
  // IPAM state gauges (pools, blocks, GC candidates) from caches of their own.
  const ipamState = ipamStateMetrics(ctx, onError);
  const informers = [kubeNodes, dsNodes, heps, pods, ...ipamState.informers] as Array<Informer<unknown>>;

  async function reconcile(node: string): Promise<void> {
    const kn = kubeNodes.get(node);
    const hepName = autoHostEndpointName(node);
    if (kn) {
      deleted.delete(node);
      const cur = await getIfExists(ctx.ds, 'Node', node);
      if (!cur) {
        await ctx.ds.create<'Node'>({
          apiVersion: API_VERSION,
          kind: 'Node',
          metadata: {
            name: node,
            labels: { ...(kn.metadata.labels ?? {}) },
            annotations: { [K8S_NODE_ANNOTATION]: node },
          },
          spec: {},
        });
        ctx.log.info('node controller: created the datastore Node with the Kubernetes Node labels', { node });
      } else {
        const labels = syncedNodeLabels(kn.metadata.labels, cur.metadata.labels);
        const same =
          JSON.stringify(Object.entries(labels).sort()) ===
          JSON.stringify(Object.entries(cur.metadata.labels ?? {}).sort());
        if (!same || cur.metadata.annotations?.[K8S_NODE_ANNOTATION] !== node) {
          await ctx.ds.update({
            ...cur,
            metadata: {
              ...cur.metadata,
              labels,
              annotations: { ...(cur.metadata.annotations ?? {}), [K8S_NODE_ANNOTATION]: node },
            },
          });
          ctx.log.info('node controller: synced the Kubernetes Node labels onto the datastore Node', { node });
        }
      }
      if (ctx.settings().autoHostEndpoints) {
        await applyMirror(ctx.ds, 'Profile', DEFAULT_ALLOW_PROFILE, defaultAllowProfile());
        const did = await applyMirror(
          ctx.ds,
          'HostEndpoint',
          hepName,
          autoHostEndpoint(node, kn.metadata.labels, nodeAddresses(kn)),
        );
        if (did !== 'unchanged') ctx.log.info(`node controller: ${did} automatic host endpoint ${hepName}`, { node });
      } else {
        await removeAutoHep(node);
      }
      m.synced.inc({ controller: name });
      return;
    }
    const dn = await getIfExists(ctx.ds, 'Node', node);
    if (deleted.has(node) || dn?.metadata.annotations?.[K8S_NODE_ANNOTATION] === node) {
      await cleanupNode(node);
      deleted.delete(node);
    } else {
      await removeAutoHep(node);
    }
    m.synced.inc({ controller: name });
  }

  /** An endpoint whose workload is gone for good (etcd: the plugin's DEL never ran). */
  async function deleteEndpoint(w: Resource<'WorkloadEndpoint'>, why: string): Promise<void> {
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

  async function removeAutoHep(node: string): Promise<void> {
    const hep = await getIfExists(ctx.ds, 'HostEndpoint', autoHostEndpointName(node));
    if (hep?.metadata.labels?.[CREATED_BY_LABEL] !== CREATED_BY) return;
    await applyMirror(ctx.ds, 'HostEndpoint', hep.metadata.name, undefined);
    ctx.log.info('node controller: deleted automatic host endpoint', { node, hostEndpoint: hep.metadata.name });
  }

  /** Everything of a deleted node, in an order a retry can resume: addresses, blocks, host endpoint, Node. */
  async function cleanupNode(node: string): Promise<void> {
    const { items: blocks } = await ctx.ds.list('IPAMBlock');
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
    for (const h of handles) released.push(...(await ipam.releaseByHandle(h)));
    if (unowned.length) released.push(...(await ipam.releaseIPs(unowned)).map((r) => r.ip));
    for (const ip of released) ctx.log.info('node controller: released an address of a deleted node', { node, ip });
    if (released.length) m.released.inc({ reason: 'node-deleted' }, released.length);
    // Then its blocks: empty ones back to the pool, the others unaffined; its affinities deleted.
    await releaseNodeIpam(ctx.ds, node, { log: ctx.log });
    if (ctx.ds.type !== 'kubernetes') {
      // On etcd the plugin's endpoints outlive a node that never ran DEL.
      const { items: weps } = await ctx.ds.list('WorkloadEndpoint');
      for (const w of weps) if (w.spec.node === node) await deleteEndpoint(w, 'its node was deleted');
    }
    await removeAutoHep(node);
    try {
      await ctx.ds.delete('Node', node);
      ctx.log.info('node controller: deleted the datastore Node of a deleted Kubernetes Node', {
        node,
        addressesReleased: released.length,
      });
    } catch (e) {
      if (!DatastoreError.is(e, 'NotFound')) throw e;
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
  async function gcScanOnce(): Promise<string[]> {
    if (!pods.synced) return [];
    const grace = ctx.settings().leakGracePeriodMs;
    const now = Date.now();
    const [{ items: blocks }, { items: weps }] = await Promise.all([
      ctx.ds.list('IPAMBlock'),
      ctx.ds.list('WorkloadEndpoint'),
    ]);
    // A live endpoint: its pod exists on the endpoint's node.
    const live = new Set<string>();
    const stale: Array<Resource<'WorkloadEndpoint'>> = []; // endpoints whose pod is gone (or elsewhere)
    for (const w of weps) {
      const pod = w.spec.pod ? pods.get(`${w.metadata.namespace ?? 'default'}/${w.spec.pod}`) : undefined;
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
    const seen = new Set<string>();
    const ripe = new Map<string, { attrs: Record<string, string>; ips: string[] }>();
    for (const b of blocks) {
      for (const { ip, attr } of allocationsIn(b.spec)) {
        const sec = attr?.secondary ?? {};
        if (!attr?.handle_id || !sec.namespace || !sec.pod) continue;
        const why = live.has(ip) ? undefined : leakReason(sec, ip, pods.get(`${sec.namespace}/${sec.pod}`));
        const key = `${attr.handle_id}|${ip}`;
        if (!why) continue;
        seen.add(key);
        const first = Math.min(firstLeaked.get(key) ?? now, podGone.get(`${sec.namespace}/${sec.pod}`) ?? now);
        firstLeaked.set(key, first);
        if (now - first < grace) continue;
        const r = ripe.get(attr.handle_id) ?? { attrs: sec, ips: [] };
        r.ips.push(ip);
        ripe.set(attr.handle_id, r);
      }
    }
    for (const k of [...firstLeaked.keys()]) if (!k.startsWith('wep|') && !seen.has(k)) firstLeaked.delete(k);
    ctx.log.debug('ipam gc: scan', { leaked: seen.size, ripe: ripe.size, leakGracePeriod: formatDuration(grace) });
    const released: string[] = [];
    for (const [handle, r] of ripe) {
      let pod: KubePod | undefined;
      try {
        pod = await ctx.kube.getPod(r.attrs.namespace!, r.attrs.pod!);
      } catch (e) {
        if (!DatastoreError.is(e, 'NotFound')) throw e;
      }
      const why = r.ips.map((ip) => leakReason(r.attrs, ip, pod)).find((x) => x !== undefined);
      if (!why || r.ips.some((ip) => !leakReason(r.attrs, ip, pod))) continue;
      const ips = await ipam.releaseByHandle(handle);
      for (const ip of ips) {
        firstLeaked.delete(`${handle}|${ip}`);
        ctx.log.info('ipam gc: released a leaked address', {
          ip,
          handle,
          namespace: r.attrs.namespace,
          pod: r.attrs.pod,
          node: r.attrs.node,
          why,
          leakGracePeriod: formatDuration(grace),
        });
      }
      if (ips.length) m.released.inc({ reason: 'leaked' }, ips.length);
      released.push(...ips);
    }
    // Endpoints the plugin wrote on etcd for pods that are gone (no DEL ran), by
    // the same rule: stale for the grace period, confirmed by a GET. On the
    // kubernetes datastore endpoints are the pods themselves.
    const staleNow = new Set<string>();
    for (const w of ctx.ds.type === 'kubernetes' ? [] : stale) {
      const key = `wep|${w.metadata.namespace}/${w.metadata.name}|${w.metadata.resourceVersion}`;
      staleNow.add(key);
      const first = Math.min(
        firstLeaked.get(key) ?? now,
        podGone.get(`${w.metadata.namespace ?? 'default'}/${w.spec.pod}`) ?? now,
      );
      firstLeaked.set(key, first);
      if (now - first < grace) continue;
      let pod: KubePod | undefined;
      try {
        pod = await ctx.kube.getPod(w.metadata.namespace ?? 'default', w.spec.pod!);
      } catch (e) {
        if (!DatastoreError.is(e, 'NotFound')) throw e;
      }
      if (pod && (!pod.spec?.nodeName || pod.spec.nodeName === w.spec.node)) continue;
      await deleteEndpoint(
        w,
        pod
          ? `pod ${w.metadata.namespace}/${w.spec.pod} runs on node ${pod.spec?.nodeName}`
          : `pod ${w.metadata.namespace}/${w.spec.pod} does not exist`,
      );
      firstLeaked.delete(key);
    }
    for (const k of [...firstLeaked.keys()]) if (k.startsWith('wep|') && !staleNow.has(k)) firstLeaked.delete(k);
    // Deletions whose grace period had passed when this scan started are settled: what they leaked
    // was released here, or is kept (the pod read said otherwise) and left to the periodic pass.
    for (const [k, t] of podGone) if (t + grace <= now) podGone.delete(k);
    const stillLeaked = [...firstLeaked].filter(([k]) => !k.startsWith('wep|'));
    ipamState.scanned(
      stillLeaked.map(([k, t]) => ({ ip: k.slice(k.lastIndexOf('|') + 1), ageMs: now - t })),
      grace,
    );
    scans.inc();
    return released;
  }

  const gcScan = (): Promise<string[]> => {
    // One scan at a time; a caller during a scan waits for it.
    if (!gcRunning) {
      gcRunning = gcScanOnce().finally(() => {
        gcRunning = undefined;
      });
    }
    return gcRunning;
  };

  const scheduleGc = () => {
    clearTimeout(gcTimer);
    if (!started) return;
    gcTimer = setTimeout(() => {
      gcScan()
        .catch((e) => {
          m.errors.inc({ controller: name });
          ctx.log.warn('ipam gc: scan failed; trying again next period', { error: describeError(e) });
        })
        .finally(scheduleGc);
    }, ctx.settings().reconcilerPeriodMs);
  };

  /**
   * The next scan a pod deletion asks for: when the earliest recorded deletion is leakGracePeriod
   * old, at most one such scan a second (a scan lists every block; a burst of deletions shares one).
   */
  function scheduleDue(): void {
    clearTimeout(dueTimer);
    dueTimer = undefined;
    if (!started || !podGone.size) return;
    let earliest = Infinity;
    for (const t of podGone.values()) earliest = Math.min(earliest, t);
    const at = Math.max(earliest + ctx.settings().leakGracePeriodMs, lastDueScan + 1000);
    dueTimer = setTimeout(
      () => {
        lastDueScan = Date.now();
        gcScan()
          .catch((e) => {
            m.errors.inc({ controller: name });
            ctx.log.warn('ipam gc: scan after a pod deletion failed; the periodic pass retries', {
              error: describeError(e),
            });
            // Do not spin on a failing datastore: the periodic pass is the safety net.
            podGone.clear();
          })
          .finally(scheduleDue);
      },
      Math.max(0, at - Date.now()),
    );
  }

  const resyncAll = () => {
    const keys = new Set<string>([...kubeNodes.keys(), ...dsNodes.keys()]);
    for (const h of heps.list()) if (h.metadata.labels?.[CREATED_BY_LABEL] === CREATED_BY) keys.add(h.spec.node);
    for (const k of keys) queue.add(k);
  };

  ctx.onSettings(() => {
    if (!resynced) return;
    resyncAll(); // autoCreate may have changed
    scheduleGc(); // and the period
    scheduleDue(); // and the grace period
  });

  return {
    name,
    start() {
      if (started) return;
      started = true;
      for (const i of informers) i.start();
      void Promise.all(informers.map((i) => i.whenSynced())).then(() => {
        if (!started) return;
        resynced = true;
        resyncAll();
        void gcScan().catch((e) =>
          ctx.log.warn('ipam gc: scan failed; trying again next period', { error: describeError(e) }),
        );
        scheduleGc();
      });
    },
    get synced() {
      return resynced;
    },
    get watching() {
      return informers.every((i) => i.watching);
    },
    gcScan,
    async stop() {
      started = false;
      clearTimeout(gcTimer);
      clearTimeout(dueTimer);
      podGone.clear();
      ipamState.stop();
      for (const i of informers) i.stop();
      await queue.stop();
      await gcRunning?.catch(() => undefined);
    },
  };
}
