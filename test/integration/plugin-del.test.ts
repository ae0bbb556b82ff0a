// DEL is idempotent (CNI spec: it must succeed when what it would remove is
// already gone), never tears down what a newer sandbox of the same pod owns, and
// still does the local teardown when the datastore is down (then code 11).
import { execFileSync } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { hostVethName } from '../../src/model/names.js';
import { createNetns, deleteNetns } from '../support/netns.js';
import {
  NODE,
  cni,
  expectCniError,
  expectNothingLeft,
  expectOk,
  hostLinksWithPrefix,
  hostPoolRoutes,
  ipamState,
  k8sArgs,
  link,
  linkAfterDel,
  netconf,
  wepNames,
  type Call,
  type Cluster,
  useCluster,
} from '../support/plugin-harness.js';

const PREFIX = 'npd';
const POOL = { name: 'del-v4', cidr: '10.77.5.0/24', blockSize: 28 };
let c: Cluster;

useCluster([POOL], (x) => (c = x));

const conf = (v = '1.0.0') => netconf(c, v, { host_veth_prefix: PREFIX });

async function addPod(
  tag: string,
): Promise<{ pod: { name: string; path: string }; call: Call; hostIf: string; result: any }> {
  const pod = createNetns('pod');
  const call = { containerId: `${tag}-${process.pid}`, netns: pod.path, ifname: 'eth0' };
  const r = await cni('ADD', conf(), call);
  expectOk(r);
  return { pod, call, hostIf: hostVethName(PREFIX, call.containerId), result: r.json };
}

describe('DEL is idempotent', () => {
  it('a second DEL succeeds and changes nothing', async () => {
    const { call } = await addPod('twice');
    expectOk(await cni('DEL', conf(), call));
    await expectNothingLeft(c, PREFIX);
    expectOk(await cni('DEL', conf(), call));
    await expectNothingLeft(c, PREFIX);
  });

  it('DEL of a container never added succeeds', async () => {
    const pod = createNetns('pod');
    expectOk(await cni('DEL', conf(), { containerId: `never-${process.pid}`, netns: pod.path }));
    await expectNothingLeft(c, PREFIX);
  });

  it('the netns is already gone: DEL succeeds and releases the address and the endpoint', async () => {
    const { pod, call, hostIf } = await addPod('nsgone');
    deleteNetns(pod.name);
    // The kernel removes the pair with the namespace (asynchronously).
    for (let i = 0; i < 100 && link(hostIf); i++) await new Promise((r) => setTimeout(r, 20));
    expectOk(await cni('DEL', conf(), call));
    await expectNothingLeft(c, PREFIX);
  });

  it('CNI_NETNS empty (the runtime lost it): the host end is removed by name since this container owns the endpoint', async () => {
    const { pod, call, hostIf } = await addPod('nonetns');
    expect(link(hostIf)).toBeDefined();
    expectOk(await cni('DEL', conf(), { ...call, netns: '' }));
    expect(link(hostIf)).toBeUndefined();
    expect(await linkAfterDel('eth0', pod.name)).toBeUndefined();
    await expectNothingLeft(c, PREFIX);
  });

  it('the interface is already gone from the pod: DEL succeeds', async () => {
    const { pod, call } = await addPod('ifgone');
    execFileSync('ip', ['-n', pod.name, 'link', 'del', 'eth0']);
    expectOk(await cni('DEL', conf(), call));
    await expectNothingLeft(c, PREFIX);
  });

  it('the endpoint is already gone from the datastore: DEL succeeds, the veth and the address go', async () => {
    const { call } = await addPod('wepgone');
    const [name] = await wepNames(c.ds);
    await c.ds.delete('WorkloadEndpoint', name!.split('/')[1]!, { namespace: 'default' });
    expectOk(await cni('DEL', conf(), call));
    await expectNothingLeft(c, PREFIX);
  });

  it('the allocation is already released: DEL succeeds, the veth and the endpoint go', async () => {
    const { call } = await addPod('ipgone');
    const { createIpam } = await import('../../src/ipam/index.js');
    await createIpam(c.ds, { lock: 'none' }).releaseByHandle(`k8s-pod-network.${call.containerId}`);
    expect((await ipamState(c.ds)).allocations).toEqual([]);
    expectOk(await cni('DEL', conf(), call));
    await expectNothingLeft(c, PREFIX);
  });

  it('DEL with prevResult in each version that has one', async () => {
    for (const v of ['0.4.0', '1.0.0', '1.1.0']) {
      const pod = createNetns('pod');
      const call = { containerId: `prev${v.replace(/\./g, '')}-${process.pid}`, netns: pod.path };
      const add = await cni('ADD', conf(v), call);
      expectOk(add);
      expectOk(await cni('DEL', { ...conf(v), prevResult: add.json }, call));
    }
    await expectNothingLeft(c, PREFIX);
  });
});

describe('two sandboxes of one pod', () => {
  it("the old sandbox's DEL after the new ADD keeps the new endpoint and veth, and releases only the old addresses", async () => {
    const podName = `restart-${process.pid}`;
    const args = k8sArgs('shop', podName);
    const hostIf = hostVethName(PREFIX, `shop.${podName}`);
    const oldNs = createNetns('old');
    const newNs = createNetns('new');
    const oldCall = { containerId: `old-${process.pid}`, netns: oldNs.path, args };
    const newCall = { containerId: `new-${process.pid}`, netns: newNs.path, args };
    const wepName = `${NODE}-k8s-restart--${process.pid}-eth0`;

    const oldAdd = await cni('ADD', conf(), oldCall);
    expectOk(oldAdd);
    const newAdd = await cni('ADD', conf(), newCall);
    expectOk(newAdd);
    expect(newAdd.json.interfaces[0].name).toBe(hostIf);
    // The new ADD replaced the stale host veth; the old pair is gone with it.
    expect(await linkAfterDel('eth0', oldNs.name)).toBeUndefined();
    expect((await c.ds.get('WorkloadEndpoint', wepName, 'shop')).spec.containerID).toBe(newCall.containerId);
    expect((await ipamState(c.ds)).handles).toEqual(
      [`k8s-pod-network.${newCall.containerId}`, `k8s-pod-network.${oldCall.containerId}`].sort(),
    );

    // Old sandbox's DEL, with its netns, and again without one (a runtime retrying after losing it).
    expectOk(await cni('DEL', conf(), oldCall));
    expectOk(await cni('DEL', conf(), { ...oldCall, netns: '' }));
    const wep = await c.ds.get('WorkloadEndpoint', wepName, 'shop');
    expect(wep.spec.containerID).toBe(newCall.containerId);
    expect(link(hostIf), 'the new sandbox keeps its host veth').toBeDefined();
    expect(link('eth0', newNs.name)).toBeDefined();
    expect((await ipamState(c.ds)).handles).toEqual([`k8s-pod-network.${newCall.containerId}`]);
    expect((await ipamState(c.ds)).allocations).toHaveLength(1);
    expectOk(await cni('CHECK', { ...conf(), prevResult: newAdd.json }, newCall));

    expectOk(await cni('DEL', conf(), newCall));
    await expectNothingLeft(c, PREFIX);
  });

  it("the old sandbox's DEL after its netns is gone does not delete the new sandbox's host veth (same name)", async () => {
    const podName = `gone-${process.pid}`;
    const args = k8sArgs('shop', podName);
    const hostIf = hostVethName(PREFIX, `shop.${podName}`);
    const oldNs = createNetns('old');
    const newNs = createNetns('new');
    const oldCall = { containerId: `oldg-${process.pid}`, netns: oldNs.path, args };
    const newCall = { containerId: `newg-${process.pid}`, netns: newNs.path, args };
    expectOk(await cni('ADD', conf(), oldCall));
    const newAdd = await cni('ADD', conf(), newCall);
    expectOk(newAdd);
    deleteNetns(oldNs.name);
    expectOk(await cni('DEL', conf(), oldCall));
    expect(link(hostIf), "the new sandbox's host veth").toBeDefined();
    expect(link('eth0', newNs.name)).toBeDefined();
    expectOk(await cni('CHECK', { ...conf(), prevResult: newAdd.json }, newCall));
    expect((await ipamState(c.ds)).handles).toEqual([`k8s-pod-network.${newCall.containerId}`]);
    expectOk(await cni('DEL', conf(), newCall));
    await expectNothingLeft(c, PREFIX);
  });
});

describe('datastore unreachable', () => {
  it('DEL still removes the interface, then fails with code 11; a retry once it is back cleans the datastore', async () => {
    const { pod, call, hostIf } = await addPod('dsdown');
    await c.etcd.pause();
    try {
      const r = expectCniError(await cni('DEL', conf(), call), 11);
      expect(r.msg).toContain('local teardown done');
      expect(await linkAfterDel('eth0', pod.name)).toBeUndefined();
      expect(link(hostIf)).toBeUndefined();
      expect(hostLinksWithPrefix(PREFIX)).toEqual([]);
      expect(hostPoolRoutes(c.pools)).toEqual([]);
    } finally {
      await c.etcd.start();
    }
    expect((await ipamState(c.ds)).handles).toHaveLength(1);
    expectOk(await cni('DEL', conf(), call));
    await expectNothingLeft(c, PREFIX);
  });
});
