// workloadendpoint: a pod's label changes are copied onto its
// WorkloadEndpoints (the plugin wrote the labels of the moment at ADD). Our own
// `netplugin.org/*` labels (namespace, orchestrator, service account) stay as
// the plugin wrote them: a pod cannot relabel itself into another namespace or
// service account and slip past policy. Only on etcd: the kubernetes datastore
// derives endpoints from pods on read.
import type { KubeObject } from '../k8s/client.js';
import type { Resource } from '../model/resources.js';
import { DatastoreError } from '../errors.js';
import { Informer } from '../watch/informer.js';
import { datastoreSource } from '../datastore/list-watch.js';
import { kubeSource } from '../k8s/list-watch.js';
import {
  controllerMetrics,
  controllerQueue,
  watchErrors,
  type Controller,
  type ControllerContext,
} from './framework.js';

const OWN_PREFIX = 'netplugin.org/';
type Wep = Resource<'WorkloadEndpoint'>;

/** The endpoint's labels after the pod's change. */
export function endpointLabels(
  podLabels: Record<string, string> | undefined,
  current: Record<string, string> | undefined,
): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(podLabels ?? {})) if (!k.startsWith(OWN_PREFIX)) out[k] = v;
  for (const [k, v] of Object.entries(current ?? {})) if (k.startsWith(OWN_PREFIX)) out[k] = v;
  return out;
}

const sameLabels = (a: Record<string, string>, b: Record<string, string>) => {
  const ka = Object.keys(a);
  return ka.length === Object.keys(b).length && ka.every((k) => b[k] === a[k]);
};

export function workloadEndpointController(ctx: ControllerContext): Controller {
  const m = controllerMetrics(ctx.registry);
  const name = 'workloadendpoint';
  /** pod key (`ns/pod`) -> endpoint keys (`ns/wep`). */
  const byPod = new Map<string, Set<string>>();
  const podKeyOf = (w: Wep) =>
    w.spec.orchestrator === 'k8s' && w.spec.pod ? `${w.metadata.namespace ?? 'default'}/${w.spec.pod}` : undefined;
  let resynced = false;

  const queue = controllerQueue(
    ctx,
    name,
    (key) => `WorkloadEndpoint ${key}`,
    async (key) => {
      const [ns, wepName] = key.split('/', 2) as [string, string];
      let wep: Wep;
      try {
        wep = await ctx.ds.get('WorkloadEndpoint', wepName, ns);
      } catch (e) {
        if (DatastoreError.is(e, 'NotFound')) return;
        throw e;
      }
      const podKey = podKeyOf(wep);
      const pod = podKey ? pods.get(podKey) : undefined;
      if (!pod) return; // not a pod's endpoint, or the pod is gone (DEL / GC clean up)
      const labels = endpointLabels(pod.metadata.labels, wep.metadata.labels);
      m.synced.inc({ controller: name });
      if (sameLabels(labels, wep.metadata.labels ?? {})) return;
      await ctx.ds.update({ ...wep, metadata: { ...wep.metadata, labels } });
      ctx.log.info('workloadendpoint controller: copied pod labels onto the endpoint', { endpoint: key, pod: podKey });
    },
  );
  const onError = watchErrors(ctx, name);

  const pods = new Informer<KubeObject>(
    kubeSource(ctx.kube, '/api/v1/pods'),
    {
      onChange: (key) => {
        if (resynced) for (const w of byPod.get(key) ?? []) queue.add(w);
      },
    },
    { onError },
  );
  const weps = new Informer<Wep>(
    datastoreSource(ctx.ds, 'WorkloadEndpoint'),
    {
      onChange: (key, obj, old) => {
        const before = old && podKeyOf(old);
        const after = obj && podKeyOf(obj);
        if (before && before !== after) {
          byPod.get(before)?.delete(key);
          if (!byPod.get(before)?.size) byPod.delete(before);
        }
        if (after) {
          let s = byPod.get(after);
          if (!s) byPod.set(after, (s = new Set()));
          s.add(key);
        }
        if (resynced && obj) queue.add(key);
      },
    },
    { onError },
  );

  let started = false;
  return {
    name,
    start() {
      if (started) return;
      started = true;
      pods.start();
      weps.start();
      void Promise.all([pods.whenSynced(), weps.whenSynced()]).then(() => {
        if (!started) return;
        resynced = true;
        for (const k of weps.keys()) queue.add(k);
      });
    },
    get synced() {
      return resynced;
    },
    get watching() {
      return pods.watching && weps.watching;
    },
    async stop() {
      started = false;
      pods.stop();
      weps.stop();
      await queue.stop();
    },
  };
}
