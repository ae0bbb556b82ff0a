// Pod -> workload endpoint: labels, profiles, named ports, endpoint names, the
// pod-lookup decision and the mapping of API client failures.
import { describe, expect, it } from 'vitest';
import {
  buildWorkloadEndpoint,
  needsPodLookup,
  podEndpointAttributes,
  podLookupError,
  readPodContext,
  readWorkloadContext,
  type NamespaceLike,
  type PodLike,
  type PodSource,
} from '../../src/workload/workload.js';
import { workloadEndpointName } from '../../src/model/names.js';
import { CniError, DatastoreError, ErrorCodes } from '../../src/errors.js';
import type { Logger } from '../../src/log/types.js';
import type { KubeClient } from '../../src/k8s/client.js';
import { ANNOTATIONS } from '../../src/model/annotations.js';
import type { PoolInfo } from '../../src/workload/annotations.js';

// Compile-time check (tsc): the real API client can be passed where a PodSource is expected.
const clientIsPodSource = (c: KubeClient): PodSource => c;
void clientIsPodSource;

const pod: PodLike = {
  metadata: {
    name: 'web-7d9f-abcde',
    namespace: 'shop',
    generateName: 'web-7d9f-',
    labels: { app: 'web', 'netplugin.org/namespace': 'kube-system', 'netplugin.org/serviceaccount': 'admin' },
  },
  spec: {
    serviceAccountName: 'frontend',
    containers: [
      {
        name: 'app',
        ports: [
          { name: 'http', containerPort: 8080 },
          { containerPort: 9090 },
          { name: 'dns', containerPort: 53, protocol: 'UDP', hostPort: 5353, hostIP: '0.0.0.0' },
        ],
      },
      { name: 'sidecar', ports: [{ name: 'metrics', containerPort: 9100, protocol: 'TCP' }] },
      { name: 'noports' },
    ],
  },
};

function recLog(): Logger & { lines: string[] } {
  const lines: string[] = [];
  const push = (m: string): void => {
    lines.push(m);
  };
  return { lines, error: push, warn: push, info: push, debug: push };
}

describe('podEndpointAttributes', () => {
  const a = podEndpointAttributes(pod);

  it('labels: the pod labels plus ours, ours winning so a pod cannot claim another namespace', () => {
    expect(a.labels).toEqual({
      app: 'web',
      'netplugin.org/namespace': 'shop',
      'netplugin.org/orchestrator': 'k8s',
      'netplugin.org/serviceaccount': 'frontend',
    });
  });

  it('profiles: kns.<namespace> and ksa.<namespace>.<serviceaccount>', () => {
    expect(a.profiles).toEqual(['kns.shop', 'ksa.shop.frontend']);
  });

  it('ports: only the named ones, with protocol (TCP default) and hostPort', () => {
    expect(a.ports).toEqual([
      { name: 'http', protocol: 'TCP', port: 8080 },
      { name: 'dns', protocol: 'UDP', port: 53, hostPort: 5353, hostIP: '0.0.0.0' },
      { name: 'metrics', protocol: 'TCP', port: 9100 },
    ]);
  });

  it('generateName is carried over', () => {
    expect(a.generateName).toBe('web-7d9f-');
  });

  it('a pod without a service account or labels gets the default service account', () => {
    const b = podEndpointAttributes({ metadata: { name: 'p', namespace: 'n' } });
    expect(b.labels).toEqual({
      'netplugin.org/namespace': 'n',
      'netplugin.org/orchestrator': 'k8s',
      'netplugin.org/serviceaccount': 'default',
    });
    expect(b.profiles).toEqual(['kns.n', 'ksa.n.default']);
    expect(b.ports).toEqual([]);
    expect(b.generateName).toBeUndefined();
  });
});

describe('workloadEndpointName', () => {
  it('joins node, orchestrator, workload and ifname with single dashes', () => {
    expect(workloadEndpointName('node1', 'k8s', 'web', 'eth0')).toBe('node1-k8s-web-eth0');
  });

  it('doubles dashes inside each part so the name splits back unambiguously', () => {
    expect(workloadEndpointName('worker-1', 'k8s', 'web-7d9f-abcde', 'eth0')).toBe(
      'worker--1-k8s-web--7d9f--abcde-eth0',
    );
    // Without doubling these two would collide.
    expect(workloadEndpointName('a-b', 'k8s', 'c', 'eth0')).not.toBe(workloadEndpointName('a', 'k8s', 'b-c', 'eth0'));
  });

  it('uses the container ID for plain CNI workloads', () => {
    expect(workloadEndpointName('n', 'cni', 'f00d', 'net-1')).toBe('n-cni-f00d-net--1');
  });
});

describe('buildWorkloadEndpoint', () => {
  it('readPodContext fills a namespace the API answer lacks', async () => {
    const src: PodSource = {
      getPod: async () => ({ metadata: { name: 'p' } }),
      getNamespace: async (n) => ({ metadata: { name: n } }),
    };
    const { pod: p } = await readPodContext(src, { namespace: 'shop', name: 'p' });
    expect(p.metadata.namespace).toBe('shop');
    expect(podEndpointAttributes(p).profiles).toEqual(['kns.shop', 'ksa.shop.default']);
  });

  it('a Kubernetes pod endpoint carries labels, profiles, ports, generateName and NATs', () => {
    const wep = buildWorkloadEndpoint({
      node: 'worker-1',
      containerId: 'abc123',
      ifname: 'eth0',
      hostIfname: 'npi0123456789a',
      ipNetworks: ['10.244.1.5/32'],
      ipNATs: [{ internalIP: '10.244.1.5', externalIP: '10.10.0.200' }],
      mac: '02:00:00:00:00:01',
      pod,
    });
    expect(wep.metadata).toMatchObject({ name: 'worker--1-k8s-web--7d9f--abcde-eth0', namespace: 'shop' });
    expect(wep.metadata.labels?.['netplugin.org/orchestrator']).toBe('k8s');
    expect(wep.spec).toEqual({
      orchestrator: 'k8s',
      node: 'worker-1',
      containerID: 'abc123',
      endpoint: 'eth0',
      ipNetworks: ['10.244.1.5/32'],
      interfaceName: 'npi0123456789a',
      pod: 'web-7d9f-abcde',
      serviceAccountName: 'frontend',
      profiles: ['kns.shop', 'ksa.shop.frontend'],
      ports: podEndpointAttributes(pod).ports,
      generateName: 'web-7d9f-',
      ipNATs: [{ internalIP: '10.244.1.5', externalIP: '10.10.0.200' }],
      mac: '02:00:00:00:00:01',
    });
  });

  it('a plain CNI endpoint is named by container ID and carries no pod fields', () => {
    const wep = buildWorkloadEndpoint({
      node: 'n1',
      containerId: 'cid-1',
      ifname: 'eth0',
      hostIfname: 'npiX',
      ipNetworks: ['10.0.0.2/32'],
    });
    expect(wep.metadata).toEqual({ name: 'n1-cni-cid--1-eth0', namespace: 'default' });
    expect(wep.spec).toEqual({
      orchestrator: 'cni',
      workload: 'cid-1',
      node: 'n1',
      containerID: 'cid-1',
      endpoint: 'eth0',
      ipNetworks: ['10.0.0.2/32'],
      interfaceName: 'npiX',
    });
  });
});

describe('needsPodLookup', () => {
  const args = { K8S_POD_NAMESPACE: 'shop', K8S_POD_NAME: 'web-0' };

  it('reads the pod with policy.type k8s', () => {
    expect(needsPodLookup({ policy: { type: 'k8s' } }, args)).toBe(true);
  });

  it('reads the pod with the kubernetes datastore', () => {
    expect(needsPodLookup({ datastore_type: 'kubernetes' }, args)).toBe(true);
  });

  it('does not read the pod otherwise, and says so at DEBUG', () => {
    const log = recLog();
    expect(needsPodLookup({ datastore_type: 'etcdv3' }, args, log)).toBe(false);
    expect(log.lines[0]).toContain('annotations are ignored');
  });

  it('does not read a pod the runtime did not name', () => {
    const log = recLog();
    expect(needsPodLookup({ policy: { type: 'k8s' } }, { K8S_POD_NAMESPACE: 'shop' }, log)).toBe(false);
    expect(log.lines[0]).toContain('K8S_POD_NAME');
  });
});

describe('podLookupError', () => {
  const ref = { namespace: 'shop', name: 'web-0' };

  it('Unavailable (unreachable or throttling) is code 11 naming the API server and the cause', () => {
    const e = podLookupError(
      new DatastoreError('Unavailable', 'connect ECONNREFUSED 10.96.0.1:443'),
      ref,
      'https://10.96.0.1:443',
    );
    expect(e.code).toBe(ErrorCodes.TryAgainLater);
    expect(e.message).toContain('https://10.96.0.1:443');
    expect(e.message).toContain('ECONNREFUSED');
    expect(e.message).toContain('pod shop/web-0');
  });

  it('NotFound is a clear error (102)', () => {
    const e = podLookupError(new DatastoreError('NotFound', 'pods "web-0" not found'), ref);
    expect(e.code).toBe(ErrorCodes.OrchestratorFailure);
    expect(e.message).toBe('pod shop/web-0 not found in the API server (was it deleted?)');
  });

  it('Unauthorized points at the RBAC manifest', () => {
    const e = podLookupError(new DatastoreError('Unauthorized', 'forbidden'), ref);
    expect(e.code).toBe(ErrorCodes.OrchestratorFailure);
    expect(e.message).toContain('deploy/rbac.yaml');
  });

  it('a CniError passes through unchanged', () => {
    const orig = new CniError(7, 'x');
    expect(podLookupError(orig, ref)).toBe(orig);
  });
});

describe('readPodContext', () => {
  const ns: NamespaceLike = { metadata: { name: 'shop', annotations: { a: 'b' } } };

  it('returns the pod and its namespace from a PodSource', async () => {
    const calls: string[] = [];
    const src: PodSource = {
      getPod: async (n, name) => {
        calls.push(`pod ${n}/${name}`);
        return pod;
      },
      getNamespace: async (name) => {
        calls.push(`ns ${name}`);
        return ns;
      },
    };
    await expect(readPodContext(src, { namespace: 'shop', name: 'web-0' })).resolves.toEqual({ pod, namespace: ns });
    expect(calls.sort()).toEqual(['ns shop', 'pod shop/web-0']);
  });

  it('maps the pod error first when both reads fail', async () => {
    const src: PodSource = {
      getPod: async () => {
        throw new DatastoreError('NotFound', 'nope');
      },
      getNamespace: async () => {
        throw new DatastoreError('Unavailable', 'down');
      },
    };
    const e = await readPodContext(src, { namespace: 'shop', name: 'web-0' }).catch((x: unknown) => x);
    expect(e).toBeInstanceOf(CniError);
    expect((e as CniError).message).toContain('pod shop/web-0 not found');
  });

  it('an unreachable API server on the namespace read is code 11', async () => {
    const src: PodSource = {
      getPod: async () => pod,
      getNamespace: async () => {
        throw new DatastoreError('Unavailable', 'HTTP 429 Too Many Requests');
      },
    };
    const e = (await readPodContext(src, { namespace: 'shop', name: 'web-0' }, 'https://api:6443').catch(
      (x: unknown) => x,
    )) as CniError;
    expect(e.code).toBe(ErrorCodes.TryAgainLater);
    expect(e.message).toContain('namespace shop');
    expect(e.message).toContain('429');
  });
});

describe('readWorkloadContext', () => {
  const pools: PoolInfo[] = [
    { name: 'default-ipv4-ippool', cidr: '10.244.0.0/16' },
    { name: 'blue', cidr: '10.99.0.0/24' },
    { name: 'green', cidr: '10.98.0.0/24' },
  ];
  const ref = { namespace: 'shop', name: 'web-0' };
  const source = (podAnn: Record<string, string>, nsAnn: Record<string, string>, calls: string[] = []): PodSource => ({
    getPod: async () => {
      calls.push('pod');
      return { ...pod, metadata: { ...pod.metadata, annotations: podAnn } };
    },
    getNamespace: async () => {
      calls.push('namespace');
      return { metadata: { name: 'shop', annotations: nsAnn } };
    },
  });
  const conf = { ipam: { assign_ipv4: 'true' } };

  it('returns the pod and the options its annotations and its namespace resolve to, in one call', async () => {
    const calls: string[] = [];
    const got = await readWorkloadContext({
      pod: {
        ref,
        open: async () => ({
          source: source({ [ANNOTATIONS.ipv4Pools]: '["blue"]' }, { [ANNOTATIONS.ipv4Pools]: '["green"]' }, calls),
        }),
      },
      resolve: {
        pod: ref,
        conf,
        pools: async () => {
          calls.push('pools');
          return pools;
        },
      },
    });
    expect(got.pod?.metadata.name).toBe(pod.metadata.name);
    expect(got.namespace?.metadata.name).toBe('shop');
    // The pod's annotation wins over its namespace's.
    expect(got.options?.ipv4Pools).toEqual(['blue']);
    expect(got.options?.source.ipv4Pools).toMatchObject({ from: 'pod', key: ANNOTATIONS.ipv4Pools });
    // The pools are asked for only once the pod is read.
    expect(calls.indexOf('pools')).toBeGreaterThan(Math.max(calls.indexOf('pod'), calls.indexOf('namespace')));
  });

  it('takes a namespace annotation the pod does not override', async () => {
    const got = await readWorkloadContext({
      pod: { ref, open: async () => ({ source: source({}, { [ANNOTATIONS.ipv4Pools]: '["green"]' }) }) },
      resolve: { pod: ref, conf, pools: async () => pools },
    });
    expect(got.options?.ipv4Pools).toEqual(['green']);
    expect(got.options?.source.ipv4Pools).toMatchObject({ from: 'namespace' });
  });

  it('without a pod read, only the netconf and CNI_ARGS decide', async () => {
    const got = await readWorkloadContext({
      resolve: { pod: ref, conf, cniArgsIP: '10.99.0.7', pools: async () => pools },
    });
    expect(got.pod).toBeUndefined();
    expect(got.options?.requestedIPs).toEqual(['10.99.0.7']);
    expect(got.options?.source.addresses).toMatchObject({ from: 'cni-args' });
  });

  it('reads only the pod when no options are asked (delegated IPAM)', async () => {
    const got = await readWorkloadContext({
      pod: { ref, open: async () => ({ source: source({ [ANNOTATIONS.ipv4Pools]: 'not json' }, {}) }) },
    });
    expect(got.pod?.metadata.name).toBe(pod.metadata.name);
    expect(got.options).toBeUndefined();
  });

  it('a pod that cannot be read fails as podLookupError says, before any pool is listed', async () => {
    let listed = false;
    const gone: PodSource = {
      getPod: async () => {
        throw new DatastoreError('NotFound', 'nope');
      },
      getNamespace: async () => ({ metadata: { name: 'shop' } }),
    };
    const e = (await readWorkloadContext({
      pod: { ref, open: async () => ({ source: gone, apiServer: 'https://api:6443' }) },
      resolve: { pod: ref, conf, pools: async () => ((listed = true), pools) },
    }).catch((x: unknown) => x)) as CniError;
    expect(e).toBeInstanceOf(CniError);
    expect(e.code).toBe(ErrorCodes.OrchestratorFailure);
    expect(e.message).toContain('pod shop/web-0 not found in the API server at https://api:6443');
    expect(listed).toBe(false);
  });

  it('a malformed annotation fails with code 7 naming the key and the pod', async () => {
    const e = (await readWorkloadContext({
      pod: { ref, open: async () => ({ source: source({ [ANNOTATIONS.ipv4Pools]: 'blue' }, {}) }) },
      resolve: { pod: ref, conf, pools: async () => pools },
    }).catch((x: unknown) => x)) as CniError;
    expect(e.code).toBe(ErrorCodes.InvalidNetworkConfig);
    expect(e.message).toContain(ANNOTATIONS.ipv4Pools);
    expect(e.message).toContain('pod shop/web-0');
  });
});
