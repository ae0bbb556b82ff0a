// Issue 8 through the built executable: with policy.type k8s the plugin reads
// the pod and its namespace from the API server (the fake one, via
// kubernetes.kubeconfig) and writes their identity into the workload endpoint;
// API failures are transient (11) or clear (102) and leave nothing behind;
// without policy.type (etcd datastore) no pod is read and annotations are ignored.
import { describe, expect, it } from 'vitest';
import { hostVethName } from '../../src/model/names.js';
import { createNetns } from '../support/netns.js';
import {
  NODE,
  cni,
  expectCniError,
  expectNothingLeft,
  expectOk,
  ipamState,
  k8sArgs,
  link,
  netconf,
  type Cluster,
  useCluster,
} from '../support/plugin-harness.js';
import { k8sNetconf, putNamespace, putPod, startApi, type Api } from '../support/k8s-harness.js';

const PREFIX = 'npk';
const POOL = { name: 'k8sctx-v4', cidr: '10.77.20.0/24', blockSize: 28 };
let c: Cluster;
let api: Api;

useCluster([POOL], (x) => (c = x), {
  setup: async () => void (api = await startApi()),
  teardown: async () => api?.server.stop(),
});

const wepName = (pod: string) => `${NODE}-k8s-${pod.replace(/-/g, '--')}-eth0`;

describe('pod context', () => {
  it("the endpoint carries the pod's labels, our identity labels, the kns/ksa profiles, named ports and generateName", async () => {
    const ns = 'shop';
    const podName = `web-${process.pid}-x7k2p`;
    putNamespace(api, ns);
    putPod(api, ns, podName, {
      generateName: `web-${process.pid}-`,
      serviceAccountName: 'frontend',
      // A pod cannot claim another namespace through its own labels.
      labels: { app: 'web', tier: 'front', 'netplugin.org/namespace': 'kube-system' },
      containers: [
        {
          name: 'main',
          ports: [
            { name: 'http', containerPort: 8080 },
            { containerPort: 9000 },
            { name: 'dns', containerPort: 53, protocol: 'udp' },
          ],
        },
        { name: 'side', ports: [{ name: 'metrics', containerPort: 9100, protocol: 'TCP', hostPort: 19100 }] },
      ],
    });
    const pod = createNetns('pod');
    const call = { containerId: `ctx-${process.pid}`, netns: pod.path, args: k8sArgs(ns, podName) };
    const conf = k8sNetconf(c, api, PREFIX);
    const add = await cni('ADD', conf, call);
    expectOk(add);
    expect(add.json.interfaces[0].name).toBe(hostVethName(PREFIX, `${ns}.${podName}`));

    const wep = await c.ds.get('WorkloadEndpoint', wepName(podName), ns);
    expect(wep.metadata.labels).toEqual({
      app: 'web',
      tier: 'front',
      'netplugin.org/namespace': ns,
      'netplugin.org/orchestrator': 'k8s',
      'netplugin.org/serviceaccount': 'frontend',
    });
    expect(wep.spec.profiles).toEqual([`kns.${ns}`, `ksa.${ns}.frontend`]);
    expect(wep.spec.serviceAccountName).toBe('frontend');
    expect(wep.spec.ports).toEqual([
      { name: 'http', protocol: 'TCP', port: 8080 },
      { name: 'dns', protocol: 'UDP', port: 53 },
      { name: 'metrics', protocol: 'TCP', port: 9100, hostPort: 19100 },
    ]);
    expect(wep.spec.generateName).toBe(`web-${process.pid}-`);
    expect(wep.spec).toMatchObject({
      orchestrator: 'k8s',
      pod: podName,
      containerID: call.containerId,
      node: NODE,
      endpoint: 'eth0',
    });
    expect(wep.spec.ipNetworks).toEqual([add.json.ips[0].address]);

    expectOk(await cni('DEL', conf, call));
    await expectNothingLeft(c, PREFIX);
  });

  it('a pod without a service account name gets the default one in labels and profiles', async () => {
    const podName = `plain-${process.pid}`;
    putPod(api, 'default', podName, { serviceAccountName: '' });
    const pod = createNetns('pod');
    const call = { containerId: `plain-${process.pid}`, netns: pod.path, args: k8sArgs('default', podName) };
    const conf = k8sNetconf(c, api, PREFIX);
    expectOk(await cni('ADD', conf, call));
    const wep = await c.ds.get('WorkloadEndpoint', wepName(podName), 'default');
    expect(wep.metadata.labels?.['netplugin.org/serviceaccount']).toBe('default');
    expect(wep.spec.profiles).toEqual(['kns.default', 'ksa.default.default']);
    expect(wep.spec.ports).toBeUndefined();
    expectOk(await cni('DEL', conf, call));
    await expectNothingLeft(c, PREFIX);
  });
});

describe('API server failures', () => {
  it('API server unreachable (stopped): code 11 naming the server, nothing left behind', async () => {
    const down = await startApi(c.tmp);
    const podName = `down-${process.pid}`;
    putPod(down, 'default', podName);
    const url = down.server.url;
    await down.server.stop();
    const pod = createNetns('pod');
    const call = { containerId: `down-${process.pid}`, netns: pod.path, args: k8sArgs('default', podName) };
    const r = expectCniError(await cni('ADD', k8sNetconf(c, down, PREFIX), call), 11);
    expect(r.msg).toContain(`pod default/${podName}`);
    expect(r.msg).toContain(url);
    expect(r.msg).toMatch(/unreachable|ECONNREFUSED/);
    expect(link('eth0', pod.name)).toBeUndefined();
    await expectNothingLeft(c, PREFIX);
  });

  it('API server throttling (429): code 11, nothing left behind; the retry succeeds', async () => {
    const podName = `thr-${process.pid}`;
    putPod(api, 'default', podName);
    const pod = createNetns('pod');
    const call = { containerId: `thr-${process.pid}`, netns: pod.path, args: k8sArgs('default', podName) };
    const conf = k8sNetconf(c, api, PREFIX);
    // The pod and the namespace are read in parallel: both answers are 429.
    api.server.failNext(2, 429);
    const r = expectCniError(await cni('ADD', conf, call), 11);
    expect(r.msg).toMatch(/429|throttl/i);
    expect(r.msg).toContain('try again later');
    expect(link('eth0', pod.name)).toBeUndefined();
    await expectNothingLeft(c, PREFIX);
    // What code 11 promises: the runtime's retry works.
    expectOk(await cni('ADD', conf, call));
    expectOk(await cni('DEL', conf, call));
    await expectNothingLeft(c, PREFIX);
  });

  it('a pod that does not exist: code 102 naming the pod and the API server, nothing left behind', async () => {
    const pod = createNetns('pod');
    const call = {
      containerId: `ghost-${process.pid}`,
      netns: pod.path,
      args: k8sArgs('default', `ghost-${process.pid}`),
    };
    const r = expectCniError(await cni('ADD', k8sNetconf(c, api, PREFIX), call), 102);
    expect(r.msg).toContain(`pod default/ghost-${process.pid} not found`);
    expect(r.msg).toContain(api.server.url);
    await expectNothingLeft(c, PREFIX);
  });

  it('a namespace that does not exist: code 102 naming the namespace', async () => {
    // Seeded directly: the fake server (like a real one) refuses pods in a missing namespace otherwise.
    const podName = `orphan-${process.pid}`;
    putPod(api, `gone-${process.pid}`, podName);
    const pod = createNetns('pod');
    const call = {
      containerId: `orphan-${process.pid}`,
      netns: pod.path,
      args: k8sArgs(`gone-${process.pid}`, podName),
    };
    const r = expectCniError(await cni('ADD', k8sNetconf(c, api, PREFIX), call), 102);
    expect(r.msg).toContain(`namespace gone-${process.pid}`);
    expect(r.msg).toContain('not found');
    await expectNothingLeft(c, PREFIX);
  });
});

describe('without policy.type (etcd datastore)', () => {
  it('does not read the pod and ignores its annotations, even one that would fail', async () => {
    const podName = `nopol-${process.pid}`;
    // Would fail with code 7 if it were read, and names a pool that does not exist.
    putPod(api, 'default', podName, {
      labels: { app: 'x' },
      annotations: { 'cni.netplugin.org/ipv4pools': 'not json', 'cni.netplugin.org/ipAddrs': '["192.0.2.7"]' },
    });
    const pod = createNetns('pod');
    const call = { containerId: `nopol-${process.pid}`, netns: pod.path, args: k8sArgs('default', podName) };
    // kubernetes.kubeconfig is set, yet with no policy.type it must not be used.
    const conf = netconf(c, '1.0.0', { host_veth_prefix: PREFIX, kubernetes: { kubeconfig: api.kubeconfig } });
    const add = await cni('ADD', conf, call);
    expectOk(add);
    expect(add.json.ips[0].address).toMatch(/^10\.77\.20\.\d+\/32$/);
    expect(add.stderr).toContain('annotations are ignored');
    const wep = await c.ds.get('WorkloadEndpoint', wepName(podName), 'default');
    // Not read: no pod labels, no service account claimed.
    expect(wep.metadata.labels).toEqual({ 'netplugin.org/namespace': 'default', 'netplugin.org/orchestrator': 'k8s' });
    expect(wep.spec.profiles).toBeUndefined();
    expect((await ipamState(c.ds)).allocations).toHaveLength(1);
    expectOk(await cni('DEL', conf, call));
    await expectNothingLeft(c, PREFIX);
  });

  it('makes no API call at all: a stopped API server does not matter', async () => {
    const down = await startApi(c.tmp);
    await down.server.stop();
    const pod = createNetns('pod');
    const call = {
      containerId: `noapi-${process.pid}`,
      netns: pod.path,
      args: k8sArgs('default', `noapi-${process.pid}`),
    };
    const conf = netconf(c, '1.0.0', { host_veth_prefix: PREFIX, kubernetes: { kubeconfig: down.kubeconfig } });
    expectOk(await cni('ADD', conf, call));
    expectOk(await cni('DEL', conf, call));
    await expectNothingLeft(c, PREFIX);
  });
});
