// Kubernetes Events on a Pod whose ADD failed for a reason its owner can fix:
// no address left in its pools (CNI code 100), an invalid annotation or a
// missing pod (102), a network configuration the plugin rejects (7). They
// show in `kubectl describe pod` next to kubelet's own "FailedCreatePodSandBox",
// with netplugin's message. Throttled: kubelet retries a failing sandbox every
// few seconds, and one event per pod and reason per interval (plus a cap on
// all events per minute) is enough to tell the story without flooding etcd.
// The policy agent reports through warn() what it refuses to take from a pod's
// annotations (a recorded host interface that is not the pod's own).
import type { Logger } from '../log/types.js';
import type { KubeClient } from '../k8s/client.js';
import { parseCniArgs } from '../cni/env.js';
import { cniErrorCode, type ServedRequest } from './metrics.js';

/** CNI code -> Event reason, for the failures a pod's owner can act on. */
const EVENT_REASONS: Readonly<Record<string, string>> = {
  '100': 'NetpluginIPAMFailed',
  '102': 'NetpluginPodConfigInvalid',
  '7': 'NetpluginNetworkConfigInvalid',
};

interface PodEventOptions {
  client: Pick<KubeClient, 'request'>;
  node: string;
  log: Logger;
  /** At most one event per pod and reason in this window (default 60 s). */
  perPodIntervalMs?: number;
  /** At most this many events per minute in total (default 30). */
  maxPerMinute?: number;
  now?: () => number;
}

export interface PodEvents {
  /** The CNI server's onServed hook: records an event for a qualifying failed ADD. */
  served(r: ServedRequest & { cniArgs?: string | undefined }): void;
  /** A Warning Event on pod `namespace/pod` (throttled as the ADD failures are). */
  warn(namespace: string, pod: string, reason: string, message: string): void;
  /** Resolves when every event started so far was sent (for tests and shutdown). */
  idle(): Promise<void>;
}

export function createPodEvents(o: PodEventOptions): PodEvents {
  const perPod = o.perPodIntervalMs ?? 60_000;
  const maxPerMinute = o.maxPerMinute ?? 30;
  const now = o.now ?? Date.now;
  const last = new Map<string, number>();
  let window = { start: 0, count: 0 };
  const pending = new Set<Promise<void>>();

  function send(ns: string, pod: string, reason: string, message: string): void {
    const t = new Date(now()).toISOString();
    // The pod's uid: `kubectl describe pod` finds events by the full object reference.
    const uid = o.client
      .request<{ metadata?: { uid?: string } }>(
        'GET',
        `/api/v1/namespaces/${encodeURIComponent(ns)}/pods/${encodeURIComponent(pod)}`,
      )
      .then(
        (p) => p?.metadata?.uid,
        () => undefined,
      );
    const p = uid
      .then((podUid) =>
        o.client.request('POST', `/api/v1/namespaces/${encodeURIComponent(ns)}/events`, {
          apiVersion: 'v1',
          kind: 'Event',
          metadata: {
            name: `${pod}.${now().toString(16)}${Math.floor(Math.random() * 0xfff).toString(16)}`,
            namespace: ns,
          },
          involvedObject: {
            apiVersion: 'v1',
            kind: 'Pod',
            namespace: ns,
            name: pod,
            ...(podUid ? { uid: podUid } : {}),
          },
          reason,
          message,
          type: 'Warning',
          source: { component: 'netplugin-node', host: o.node },
          reportingComponent: 'netplugin.org/netplugin-node',
          reportingInstance: o.node,
          firstTimestamp: t,
          lastTimestamp: t,
          count: 1,
        }),
      )
      .then(
        () => undefined,
        (e: Error) =>
          o.log.warn('cannot record a Kubernetes Event on the pod', { pod: `${ns}/${pod}`, reason, error: e.message }),
      );
    pending.add(p);
    void p.finally(() => pending.delete(p));
  }

  function warn(ns: string, pod: string, reason: string, message: string): void {
    const key = `${ns}/${pod}\0${reason}`;
    const t = now();
    const prev = last.get(key);
    if (prev !== undefined && t - prev < perPod) return;
    if (t - window.start >= 60_000) window = { start: t, count: 0 };
    if (window.count >= maxPerMinute) return;
    window.count++;
    last.set(key, t);
    // Forget old keys so the map stays as small as the set of pods with events.
    if (last.size > 10_000) for (const [k, v] of last) if (t - v >= perPod) last.delete(k);
    send(ns, pod, reason, message.slice(0, 1024));
  }

  return {
    served(r) {
      if (r.exitCode === 0 || r.command !== 'ADD') return;
      const code = cniErrorCode(r.stdout);
      const reason = EVENT_REASONS[code];
      if (!reason) return;
      const args = parseCniArgs(r.cniArgs, []);
      const ns = args.K8S_POD_NAMESPACE;
      const pod = args.K8S_POD_NAME;
      if (!ns || !pod) return;
      let message: string;
      try {
        const e = JSON.parse(r.stdout) as { msg?: string; details?: string };
        message = [e.msg, e.details].filter(Boolean).join(': ');
      } catch {
        message = r.stdout.trim();
      }
      warn(ns, pod, reason, `CNI ADD failed (code ${code}): ${message}`);
    },
    warn,
    async idle() {
      await Promise.allSettled([...pending]);
    },
  };
}
