// ADD failures: each leaves nothing behind (no host veth, no host route, no IPAM
// handle or allocation, no workload endpoint) and says what failed and how to fix it.
import { execFileSync } from 'node:child_process';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { hostVethName } from '../../src/model/names.js';
import { RESOURCE_PREFIX } from '../../src/datastore/keys.js';
import { createNetns } from '../support/netns.js';
import {
  NODE,
  clusterInfo,
  cleanupAttachments,
  cni,
  expectCniError,
  expectNothingLeft,
  expectOk,
  hostLinksWithPrefix,
  hostPoolRoutes,
  ipamState,
  link,
  linkAfterDel,
  netconf,
  startCluster,
  wepNames,
  type Cluster,
  useCluster,
} from '../support/plugin-harness.js';

const PREFIX = 'npf';
const POOL = { name: 'fail-v4', cidr: '10.77.2.0/24', blockSize: 28 };
let c: Cluster;

useCluster([POOL], (x) => (c = x));

const conf = (extra: Record<string, unknown> = {}) => netconf(c, '1.0.0', { host_veth_prefix: PREFIX, ...extra });

describe('ClusterInformation', () => {
  let u: Cluster;
  beforeAll(async () => {
    u = await startCluster([{ name: 'unready', cidr: '10.77.3.0/28', blockSize: 28 }], { clusterInfo: 'missing' });
  });
  afterAll(async () => {
    await u?.close();
  });

  it('missing, then datastoreReady false: code 11 saying how to fix it; once ready, ADD works', async () => {
    const pod = createNetns('pod');
    const uconf = netconf(u, '1.0.0', { host_veth_prefix: PREFIX });
    const call = { containerId: `ci-${process.pid}`, netns: pod.path };

    const status = expectCniError(await cni('STATUS', { ...uconf, cniVersion: '1.1.0' }), 50);
    expect(status.msg).toContain("ClusterInformation 'default' is missing");
    const missing = expectCniError(await cni('ADD', uconf, call), 11);
    expect(missing.msg).toContain("ClusterInformation 'default' is missing");
    expect(missing.msg).toContain('netpluginctl');
    await expectNothingLeft(u, PREFIX);
    expect(await linkAfterDel('eth0', pod.name)).toBeUndefined();

    await u.ds.create(clusterInfo(false));
    expect(expectCniError(await cni('STATUS', { ...uconf, cniVersion: '1.1.0' }), 50).msg).toContain('datastoreReady');
    const notReady = expectCniError(await cni('ADD', uconf, call), 11);
    expect(notReady.msg).toContain('datastoreReady');
    expect(notReady.msg).toContain('netpluginctl');
    await expectNothingLeft(u, PREFIX);

    const ci = await u.ds.get('ClusterInformation', 'default');
    await u.ds.update({ ...ci, spec: { ...ci.spec, datastoreReady: true } });
    const ok = await cni('ADD', uconf, call);
    expectOk(ok);
    expectOk(await cni('DEL', uconf, call));
    await expectNothingLeft(u, PREFIX);
  });
});

describe('ADD failures leave nothing behind', () => {
  it('datastore down (etcd stopped): code 11, no veth; nothing in the store once it is back', async () => {
    const pod = createNetns('pod');
    const call = { containerId: `down-${process.pid}`, netns: pod.path };
    await c.etcd.pause();
    try {
      const r = expectCniError(await cni('ADD', conf(), call), 11);
      expect(r.msg).toMatch(/etcd|datastore/i);
      expect(expectCniError(await cni('STATUS', netconf(c, '1.1.0')), 50).msg).toContain('unreachable');
      expect(hostLinksWithPrefix(PREFIX)).toEqual([]);
      expect(hostPoolRoutes(c.pools)).toEqual([]);
      expect(await linkAfterDel('eth0', pod.name)).toBeUndefined();
    } finally {
      await c.etcd.start();
    }
    await expectNothingLeft(c, PREFIX);
  });

  it('pool exhausted: the failing ADD leaves nothing, the others keep theirs', async () => {
    const x = await startCluster([{ name: 'tiny', cidr: '10.77.4.0/31', blockSize: 31 }]);
    try {
      const xconf = netconf(x, '1.0.0', { host_veth_prefix: PREFIX });
      const pods = [0, 1, 2].map(() => createNetns('pod'));
      const calls = pods.map((p, i) => ({ containerId: `tiny${i}-${process.pid}`, netns: p.path }));
      expectOk(await cni('ADD', xconf, calls[0]!));
      expectOk(await cni('ADD', xconf, calls[1]!));
      const r = expectCniError(await cni('ADD', xconf, calls[2]!));
      expect(r.code).not.toBe(0);
      expect(r.msg).toMatch(/assigning addresses/);
      expect(r.msg).toMatch(/no free|exhausted|full|no .*address/i);
      expect(await linkAfterDel('eth0', pods[2]!.name)).toBeUndefined();
      expect(hostLinksWithPrefix(PREFIX).sort()).toEqual(
        calls
          .slice(0, 2)
          .map((cl) => hostVethName(PREFIX, cl.containerId))
          .sort(),
      );
      const st = await ipamState(x.ds);
      expect(st.handles).toEqual(
        calls
          .slice(0, 2)
          .map((cl) => `k8s-pod-network.${cl.containerId}`)
          .sort(),
      );
      expect(st.allocations).toHaveLength(2);
      expect(await wepNames(x.ds)).toHaveLength(2);
      // STATUS reports the full pool (code 50).
      const status = expectCniError(await cni('STATUS', netconf(x, '1.1.0')), 50);
      expect(status.msg).toContain('tiny');
      for (const cl of calls.slice(0, 2)) expectOk(await cni('DEL', xconf, cl));
      await expectNothingLeft(x, PREFIX);
      expectOk(await cni('STATUS', netconf(x, '1.1.0')));
    } finally {
      await cleanupAttachments();
      await x.close();
    }
  });

  it('a netns path that does not exist: an error naming the path, the address released', async () => {
    const missing = `/var/run/netns/no-such-pod-${process.pid}`;
    const r = expectCniError(await cni('ADD', conf(), { containerId: `nons-${process.pid}`, netns: missing }));
    expect(r.msg).toContain(missing);
    expect(r.msg).toContain('creating the veth pair');
    await expectNothingLeft(c, PREFIX);
  });

  it('a path that is not a network namespace: an error, nothing left', async () => {
    const r = expectCniError(await cni('ADD', conf(), { containerId: `notns-${process.pid}`, netns: c.tmp }));
    expect(r.msg).toContain(c.tmp);
    await expectNothingLeft(c, PREFIX);
  });

  it('the interface name is already taken in the pod: an error, the existing interface untouched, nothing left', async () => {
    const pod = createNetns('pod');
    // (A veth pair: this kernel may lack the dummy driver.)
    execFileSync('ip', ['-n', pod.name, 'link', 'add', 'eth0', 'type', 'veth', 'peer', 'name', 'other0']);
    const before = link('eth0', pod.name)!;
    const r = expectCniError(await cni('ADD', conf(), { containerId: `taken-${process.pid}`, netns: pod.path }));
    expect(r.msg).toContain('creating the veth pair');
    expect(r.msg).toMatch(/EEXIST|exists/);
    const after = link('eth0', pod.name)!;
    expect(after.linkinfo?.info_kind).toBe('veth');
    expect(link('other0', pod.name)).toBeDefined();
    expect(after.address).toBe(before.address);
    await expectNothingLeft(c, PREFIX);
  });

  it('the workload endpoint cannot be written (corrupt value in etcd): veth removed, address released', async () => {
    const pod = createNetns('pod');
    const cid = `corrupt-${process.pid}`;
    const key = `${RESOURCE_PREFIX}workloadendpoints/default/${NODE}-cni-corrupt--${process.pid}-eth0`;
    execFileSync('etcdctl', ['--endpoints', c.etcd.endpoint, 'put', key, 'not json'], { stdio: 'ignore' });
    try {
      const r = expectCniError(await cni('ADD', conf(), { containerId: cid, netns: pod.path }));
      expect(r.msg).toContain('writing the workload endpoint');
      expect(await linkAfterDel('eth0', pod.name)).toBeUndefined();
      expect(hostLinksWithPrefix(PREFIX)).toEqual([]);
      expect(hostPoolRoutes(c.pools)).toEqual([]);
      const st = await ipamState(c.ds);
      expect(st.handles).toEqual([]);
      expect(st.allocations).toEqual([]);
    } finally {
      execFileSync('etcdctl', ['--endpoints', c.etcd.endpoint, 'del', key], { stdio: 'ignore' });
    }
    await expectNothingLeft(c, PREFIX);
  });

  it('an IP pool named in the netconf that does not exist: an error naming it, nothing left', async () => {
    const pod = createNetns('pod');
    const r = expectCniError(
      await cni('ADD', conf({ ipam: { type: 'netplugin-ipam', ipv4_pools: ['no-such-pool'] } }), {
        containerId: `nopool-${process.pid}`,
        netns: pod.path,
      }),
    );
    expect(r.msg).toContain('no-such-pool');
    await expectNothingLeft(c, PREFIX);
  });

  it('CNI_NETNS missing: code 4 naming it', async () => {
    const r = expectCniError(await cni('ADD', conf(), { containerId: `nonetns-${process.pid}` }), 4);
    expect(r.msg).toContain('CNI_NETNS');
    await expectNothingLeft(c, PREFIX);
  });
});
