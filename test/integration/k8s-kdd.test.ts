// Issue 8 with datastore_type kubernetes: everything (pools, IPAM blocks,
// ClusterInformation) lives in the fake API server as netplugin.org/v3 custom
// resources, the pod is read because the datastore needs it (no policy.type),
// and the workload endpoint is written as annotations on the pod.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { openDatastore } from '../../src/datastore/index.js';
import { createKubeClient } from '../../src/k8s/client.js';
import type { Datastore } from '../../src/datastore/types.js';
import { assertThrowawayHostNetns } from '../support/cni.js';
import { createNetns, removeAllNetns } from '../support/netns.js';
import {
  NET_NAME,
  NODE,
  addrs,
  cleanupAttachments,
  clusterInfo,
  cni,
  ensureBuilt,
  expectCniError,
  expectOk,
  hostLinksWithPrefix,
  hostPoolRoutes,
  ipamState,
  k8sArgs,
  link,
  poolResource,
  wepNames,
  type PoolDef,
} from '../support/plugin-harness.js';
import { putNamespace, putPod, startApi, type Api } from '../support/k8s-harness.js';

const PREFIX = 'npq';
const P1: PoolDef = { name: 'kdd-a', cidr: '10.77.26.0/26', blockSize: 28 };
const P2: PoolDef = { name: 'kdd-b', cidr: '10.77.26.64/26', blockSize: 28 };
let api: Api;
let ds: Datastore;
let tmp: string;

beforeAll(async () => {
  assertThrowawayHostNetns();
  ensureBuilt();
  tmp = mkdtempSync(join(tmpdir(), `k8s-kdd-${process.pid}-`));
  api = await startApi();
  ds = await openDatastore({ datastore_type: 'kubernetes', kubernetes: { kubeconfig: api.kubeconfig } });
  await ds.create(clusterInfo(true));
  for (const p of [P1, P2]) await ds.create(poolResource(p));
});
afterEach(async () => {
  await cleanupAttachments();
  removeAllNetns();
});
afterAll(async () => {
  removeAllNetns();
  await ds?.close().catch(() => undefined);
  await api?.server.stop();
  if (tmp) rmSync(tmp, { recursive: true, force: true });
});

const conf = (extra: Record<string, unknown> = {}) => ({
  cniVersion: '1.0.0',
  name: NET_NAME,
  type: 'netplugin',
  nodename: NODE,
  datastore_type: 'kubernetes',
  kubernetes: { kubeconfig: api.kubeconfig },
  ipam: { type: 'netplugin-ipam', ipv4_pools: [P1.name] },
  ipam_lock_file: join(tmp, 'ipam.lock'),
  host_veth_prefix: PREFIX,
  log_level: 'debug',
  ...extra,
});

async function expectNothingLeft(): Promise<void> {
  expect(hostLinksWithPrefix(PREFIX), 'host veths left behind').toEqual([]);
  expect(hostPoolRoutes([P1, P2]), 'host routes left behind').toEqual([]);
  const st = await ipamState(ds);
  expect(st.handles, 'IPAM handles left behind').toEqual([]);
  expect(st.allocations, 'IPAM allocations left behind').toEqual([]);
  expect(await wepNames(ds), 'workload endpoints left behind').toEqual([]);
}

/** The pod's annotations as the API server holds them. */
async function podAnnotations(ns: string, name: string): Promise<Record<string, string>> {
  const k = await createKubeClient({ kubeconfig: api.kubeconfig });
  try {
    return (await k.getPod(ns, name)).metadata.annotations ?? {};
  } finally {
    k.close();
  }
}

describe('datastore_type kubernetes', () => {
  it('writes the endpoint as annotations on the pod, with the pod context; DEL removes them and releases the address', async () => {
    const ns = `kdd-${process.pid}`;
    const podName = `api-${process.pid}`;
    putNamespace(api, ns);
    putPod(api, ns, podName, {
      nodeName: NODE,
      serviceAccountName: 'backend',
      labels: { app: 'api' },
      containers: [{ name: 'main', ports: [{ name: 'grpc', containerPort: 50051 }] }],
    });
    const netns = createNetns('pod');
    const call = { containerId: `kdd-${process.pid}-c`, netns: netns.path, args: k8sArgs(ns, podName) };
    const add = await cni('ADD', conf(), call);
    expectOk(add);
    const address = add.json.ips[0].address as string;
    expect(address).toMatch(/^10\.77\.26\.([0-9]|[1-5][0-9]|6[0-3])\/32$/);

    const ann = await podAnnotations(ns, podName);
    expect(ann['cni.netplugin.org/containerID']).toBe(call.containerId);
    expect(ann['cni.netplugin.org/podIP']).toBe(address);
    expect(ann['cni.netplugin.org/podIPs']).toBe(address);
    expect(ann['cni.netplugin.org/interfaceName']).toBe(add.json.interfaces[0].name);
    expect(ann['cni.netplugin.org/mac']).toBe(link('eth0', netns.name)!.address);

    const wep = await ds.get('WorkloadEndpoint', `${NODE}-k8s-${podName.replace(/-/g, '--')}-eth0`, ns);
    expect(wep.spec).toMatchObject({
      orchestrator: 'k8s',
      pod: podName,
      containerID: call.containerId,
      ipNetworks: [address],
      serviceAccountName: 'backend',
    });
    expect(wep.spec.profiles).toEqual([`kns.${ns}`, `ksa.${ns}.backend`]);
    expect(wep.spec.ports).toEqual([{ name: 'grpc', protocol: 'TCP', port: 50051 }]);
    expect(wep.metadata.labels).toMatchObject({
      app: 'api',
      'netplugin.org/namespace': ns,
      'netplugin.org/orchestrator': 'k8s',
      'netplugin.org/serviceaccount': 'backend',
    });
    // IPAM in the custom resources.
    expect((await ipamState(ds)).handles).toEqual([`${NET_NAME}.${call.containerId}`]);

    expectOk(await cni('DEL', conf(), call));
    const after = await podAnnotations(ns, podName);
    expect(Object.keys(after).filter((k) => k.startsWith('cni.netplugin.org/'))).toEqual([]);
    await expectNothingLeft();
  });

  it("reads annotations without policy.type: the pod's ipv4pools is honoured, the endpoint is on the pod", async () => {
    const podName = `ann-${process.pid}`;
    putPod(api, 'default', podName, {
      nodeName: NODE,
      annotations: { 'cni.netplugin.org/ipv4pools': JSON.stringify([P2.name]) },
    });
    const netns = createNetns('pod');
    const call = { containerId: `kddann-${process.pid}-c`, netns: netns.path, args: k8sArgs('default', podName) };
    const add = await cni('ADD', conf(), call);
    expectOk(add);
    expect(add.json.ips[0].address).toMatch(/^10\.77\.26\.(6[4-9]|[7-9][0-9]|1[01][0-9]|12[0-7])\/32$/);
    expect(addrs('eth0', netns.name).map((a) => `${a.local}/32`)).toContain(add.json.ips[0].address);
    const ann = await podAnnotations('default', podName);
    expect(ann['cni.netplugin.org/podIP']).toBe(add.json.ips[0].address);
    // The user's annotation is left as it was.
    expect(ann['cni.netplugin.org/ipv4pools']).toBe(JSON.stringify([P2.name]));
    expectOk(await cni('DEL', conf(), call));
    await expectNothingLeft();
  });

  it('an annotation error fails the ADD and leaves nothing, also no endpoint annotations on the pod', async () => {
    const podName = `bad-${process.pid}`;
    putPod(api, 'default', podName, {
      nodeName: NODE,
      annotations: { 'cni.netplugin.org/ipv4pools': '["no-such-pool"]' },
    });
    const netns = createNetns('pod');
    const call = { containerId: `kddbad-${process.pid}-c`, netns: netns.path, args: k8sArgs('default', podName) };
    const e = expectCniError(await cni('ADD', conf(), call), 102);
    expect(e.msg).toContain('IP pool "no-such-pool" does not exist');
    expect(link('eth0', netns.name)).toBeUndefined();
    const ann = await podAnnotations('default', podName);
    expect(ann['cni.netplugin.org/containerID']).toBeUndefined();
    await expectNothingLeft();
  });

  it('the kubernetes datastore needs the pod: a missing pod is code 102', async () => {
    const netns = createNetns('pod');
    const call = {
      containerId: `kddghost-${process.pid}-c`,
      netns: netns.path,
      args: k8sArgs('default', `ghost-${process.pid}`),
    };
    const e = expectCniError(await cni('ADD', conf(), call), 102);
    expect(e.msg).toContain(`pod default/ghost-${process.pid} not found`);
    await expectNothingLeft();
  });
  it("GC reads only this node's pods: another node's pod, even one whose endpoint annotations do not parse, is never listed", async () => {
    const podName = `gc-${process.pid}`;
    putPod(api, 'default', podName, { nodeName: NODE });
    const netns = createNetns('pod');
    const call = { containerId: `kddgc-${process.pid}-c`, netns: netns.path, args: k8sArgs('default', podName) };
    expectOk(await cni('ADD', conf(), call));
    // Another node's pod with broken endpoint annotations: a list of every
    // node's endpoints names it (and skips it); GC asks the API server for
    // this node's pods alone and never touches it.
    const other = `gc-other-${process.pid}`;
    putPod(api, 'default', other, {
      nodeName: `${NODE}-other`,
      annotations: { 'cni.netplugin.org/containerID': 'someone-else', 'cni.netplugin.org/podIPs': 'not-an-address' },
    });
    try {
      expect((await ds.list('WorkloadEndpoint')).invalid?.map((o) => o.where)).toContain(
        `pod default/${other} (annotations cni.netplugin.org/*)`,
      );
      expectOk(await cni('GC', { ...conf({ cniVersion: '1.1.0' }), 'cni.dev/valid-attachments': [] }));
      // This node's stale attachment is gone: the endpoint annotations, the handle, the host veth.
      const ann = await podAnnotations('default', podName);
      expect(ann['cni.netplugin.org/containerID']).toBeUndefined();
      // The other node's pod is untouched.
      expect((await podAnnotations('default', other))['cni.netplugin.org/containerID']).toBe('someone-else');
    } finally {
      putPod(api, 'default', other, { nodeName: `${NODE}-other` });
    }
    await expectNothingLeft();
  });
});
