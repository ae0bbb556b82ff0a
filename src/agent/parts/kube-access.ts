// The agent's own Kubernetes API access (--kubeconfig, or in a pod its service account), and what
// it serves: the plugin's kubeconfig (TokenRequest) and Warning Events on pods.
import { hostname } from 'node:os';
import { createKubeClient, ownNamespace, type KubeClient } from '../../k8s/client.js';
import type { Logger } from '../../log/types.js';
import { startPluginKubeconfig, type PluginKubeconfig } from '../kubeconfig-writer.js';
import type { AgentPart } from '../part.js';
import { createPodEvents, type PodEvents } from '../pod-events.js';

interface KubeAccessInputs {
  log: Logger;
  /** --kubeconfig; without it the in-cluster service account, when the agent runs in a pod. */
  kubeconfig?: string | undefined;
  /** Whether the agent runs in a pod (its service account is mounted). */
  inCluster: boolean;
  /** --pod-events on. */
  podEvents: boolean;
  nodename?: string | undefined;
}

export class KubeAccessPart implements AgentPart {
  readonly name = 'kube-access';
  /** Undefined without API access (or before start). */
  client: KubeClient | undefined;
  /** Events on pods whose ADD failed for a reason their owner can fix; undefined without API access or --pod-events. */
  podEvents: PodEvents | undefined;

  constructor(private readonly o: KubeAccessInputs) {}

  async start(): Promise<void> {
    const { o } = this;
    if (!o.kubeconfig && !o.inCluster) return;
    try {
      this.client = await createKubeClient(o.kubeconfig ? { kubeconfig: o.kubeconfig } : {});
    } catch (e) {
      o.log.error(`no Kubernetes API access for the plugin kubeconfig and pod Events: ${(e as Error).message}`);
      return;
    }
    if (o.podEvents)
      this.podEvents = createPodEvents({ client: this.client, node: o.nodename ?? hostname(), log: o.log });
  }

  async stop(): Promise<void> {
    this.client?.close();
  }
}

interface PluginKubeconfigInputs {
  log: Logger;
  api: KubeAccessPart;
  path: string;
  serviceAccount: string;
  tokenSeconds: number;
}

/**
 * The CNI plugin's kubeconfig (--plugin-kubeconfig), with tokens for its service account in the
 * agent's own namespace. Started before the CNI server: with the kubernetes datastore the plugin
 * needs this file for every ADD.
 */
export class PluginKubeconfigPart implements AgentPart {
  readonly name = 'plugin-kubeconfig';
  private writer: PluginKubeconfig | undefined;

  constructor(private readonly o: PluginKubeconfigInputs) {}

  async start(): Promise<void> {
    const { o } = this;
    const client = o.api.client;
    if (!client) {
      o.log.error(
        `cannot write the plugin kubeconfig ${o.path}: no Kubernetes API access (run in a pod, or pass --kubeconfig)`,
      );
      return;
    }
    // The CA the agent trusts for this server, so the plugin trusts the same one. Outside a pod
    // (--kubeconfig) kube-system, where deploy/rbac.yaml puts the account.
    this.writer = startPluginKubeconfig({
      path: o.path,
      serviceAccount: o.serviceAccount,
      namespace: ownNamespace(),
      client,
      ...(client.ca ? { ca: client.ca } : {}),
      expirationSeconds: o.tokenSeconds,
      log: o.log,
    });
  }

  async stop(): Promise<void> {
    this.writer?.stop();
  }
}
