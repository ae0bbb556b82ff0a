// Shared set-up for the k8s-*.test.ts suites (issue 8): the plugin binary run as
// a runtime runs it, IPAM in a throwaway etcd (plugin-harness), and pods and
// namespaces served by the fake Kubernetes API server through
// `kubernetes.kubeconfig`. Every file uses its own pool CIDRs (10.77.2x.0/24,
// fd77:2x::/116) and host veth prefix so the files may run side by side.
import { expect } from 'vitest';
import { startFakeApiServer, writeKubeconfig, type FakeApiServer } from './fake-apiserver.js';
import { netconf, type Cluster } from './plugin-harness.js';

export interface Api {
  server: FakeApiServer;
  kubeconfig: string;
}

/**
 * A fake API server over HTTPS with token auth, and a kubeconfig for it. The
 * kubeconfig carries the CA inline and lives in `dir` (default: the server's
 * own temp dir), so it outlives a stopped server when `dir` is elsewhere.
 */
export async function startApi(dir?: string): Promise<Api> {
  const server = await startFakeApiServer({ tls: true, auth: { tokens: ['k8s-test-token'] } });
  return { server, kubeconfig: writeKubeconfig(dir ?? server.dir, server, { token: 'k8s-test-token', inline: true }) };
}

export function putNamespace(
  api: Api,
  name: string,
  annotations: Record<string, string> = {},
  labels: Record<string, string> = {},
): void {
  api.server.put(`/api/v1/namespaces/${name}`, {
    apiVersion: 'v1',
    kind: 'Namespace',
    metadata: { name, annotations, labels },
  });
}

export interface PodDef {
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
  serviceAccountName?: string;
  generateName?: string;
  nodeName?: string;
  containers?: Array<{
    name: string;
    ports?: Array<{ name?: string; containerPort: number; protocol?: string; hostPort?: number }>;
  }>;
}

export function putPod(api: Api, namespace: string, name: string, d: PodDef = {}): void {
  api.server.put(`/api/v1/namespaces/${namespace}/pods/${name}`, {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: {
      name,
      namespace,
      uid: `uid-${namespace}-${name}`,
      ...(d.generateName ? { generateName: d.generateName } : {}),
      ...(d.labels ? { labels: d.labels } : {}),
      ...(d.annotations ? { annotations: d.annotations } : {}),
    },
    spec: {
      nodeName: d.nodeName ?? 'node1',
      serviceAccountName: d.serviceAccountName ?? 'default',
      containers: d.containers ?? [{ name: 'main' }],
    },
  });
}

/** The netconf of these suites: etcd for IPAM and endpoints, pods from the fake API server, policy.type k8s. */
export function k8sNetconf(
  c: Cluster,
  api: Api,
  prefix: string,
  extra: Record<string, unknown> = {},
): Record<string, unknown> {
  return netconf(c, '1.0.0', {
    host_veth_prefix: prefix,
    policy: { type: 'k8s' },
    kubernetes: { kubeconfig: api.kubeconfig },
    ...extra,
  });
}

/** The log lines of one level in a plugin's stderr. */
export function logLines(stderr: string, level: 'WARNING' | 'INFO' | 'DEBUG' | 'ERROR'): string[] {
  return stderr.split('\n').filter((l) => l.includes(level));
}

/** An annotation-caused failure quotes the key and the value as written. */
export function expectNames(msg: string, ...parts: string[]): void {
  for (const p of parts) expect(msg).toContain(p);
}
