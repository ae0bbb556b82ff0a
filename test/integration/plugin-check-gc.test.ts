// CHECK names each drift between the ADD's result and the system; GC removes
// what this network holds for attachments the runtime no longer knows.
import { execFileSync } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { hostVethName } from '../../src/model/names.js';
import { API_VERSION } from '../../src/model/resources.js';
import { createIpam } from '../../src/ipam/index.js';
import { createNetns } from '../support/netns.js';
import {
  NET_NAME,
  NODE,
  cni,
  expectCniError,
  expectNothingLeft,
  expectOk,
  hostLinksWithPrefix,
  ipamState,
  link,
  linkAfterDel,
  netconf,
  wepNames,
  type Call,
  type Cluster,
  useCluster,
} from '../support/plugin-harness.js';

const PREFIX = 'npg';
const POOL = { name: 'check-v4', cidr: '10.77.6.0/24', blockSize: 28 };
let c: Cluster;

useCluster([POOL], (x) => (c = x));

const conf = (v = '1.0.0', extra: Record<string, unknown> = {}) =>
  netconf(c, v, { host_veth_prefix: PREFIX, ...extra });

// eslint-disable-next-line @typescript-eslint/no-explicit-any
async function addPod(
  tag: string,
  v = '1.0.0',
): Promise<{ pod: { name: string; path: string }; call: Call; hostIf: string; result: any }> {
  const pod = createNetns('pod');
  const call = { containerId: `${tag}-${process.pid}`, netns: pod.path, ifname: 'eth0' };
  const r = await cni('ADD', conf(v), call);
  expectOk(r);
  return { pod, call, hostIf: hostVethName(PREFIX, call.containerId), result: r.json };
}

async function check(call: Call, result: unknown, v = '1.0.0') {
  return cni('CHECK', { ...conf(v), prevResult: result }, call);
}

describe('CHECK', () => {
  it('passes right after ADD (0.4.0, 1.0.0, 1.1.0)', async () => {
    for (const v of ['0.4.0', '1.0.0', '1.1.0']) {
      const { call, result } = await addPod(`ok${v.replace(/\./g, '')}`, v);
      expectOk(await check(call, result, v));
      expectOk(await cni('DEL', conf(v), call));
    }
    await expectNothingLeft(c, PREFIX);
  });

  it('is refused for 0.3.x netconfs (code 1) and without prevResult (code 7)', async () => {
    const { call, result } = await addPod('refuse');
    const old = expectCniError(
      await cni('CHECK', { ...conf('0.3.1'), prevResult: { ...result, cniVersion: '0.3.1' } }, call),
      1,
    );
    expect(old.msg).toContain('CHECK');
    const noPrev = expectCniError(await cni('CHECK', conf(), call), 7);
    expect(noPrev.msg).toContain('prevResult');
    expectOk(await cni('DEL', conf(), call));
  });

  it('a route deleted in the pod', async () => {
    const { pod, call, result } = await addPod('noroute');
    execFileSync('ip', ['-n', pod.name, 'route', 'del', 'default']);
    const r = expectCniError(await check(call, result), 104);
    expect(r.msg).toContain('default route via 169.254.1.1 dev eth0 is missing');
    expectOk(await cni('DEL', conf(), call));
  });

  it('the container MAC changed', async () => {
    const { pod, call, result } = await addPod('newmac');
    execFileSync('ip', ['-n', pod.name, 'link', 'set', 'eth0', 'address', '02:00:00:aa:bb:cc']);
    const r = expectCniError(await check(call, result), 104);
    expect(r.msg).toContain('eth0 MAC is "02:00:00:aa:bb:cc"');
    expect(r.msg).toContain(result.interfaces[1].mac);
    expectOk(await cni('DEL', conf(), call));
  });

  it('the address was released behind its back', async () => {
    const { call, result } = await addPod('released');
    await createIpam(c.ds, { lock: 'none' }).releaseByHandle(`${NET_NAME}.${call.containerId}`);
    const r = expectCniError(await check(call, result), 104);
    expect(r.msg).toContain(`IPAM no longer holds ${result.ips[0].address.split('/')[0]}`);
    expectOk(await cni('DEL', conf(), call));
  });

  it('the address removed from the interface, the host route removed, the endpoint deleted: all named at once', async () => {
    const { pod, call, hostIf, result } = await addPod('many');
    const ip = result.ips[0].address as string;
    execFileSync('ip', ['-n', pod.name, 'addr', 'del', ip, 'dev', 'eth0']);
    execFileSync('ip', ['route', 'del', ip.split('/')[0]!, 'dev', hostIf]);
    const [wep] = await wepNames(c.ds);
    await c.ds.delete('WorkloadEndpoint', wep!.split('/')[1]!, { namespace: 'default' });
    const r = expectCniError(await check(call, result), 104);
    expect(r.msg).toContain(`address ${ip} is missing on eth0`);
    expect(r.msg).toContain(`host route ${ip} dev ${hostIf} is missing`);
    expect(r.msg).toMatch(/workload endpoint .* is missing/);
    expectOk(await cni('DEL', conf(), call));
    await expectNothingLeft(c, PREFIX);
  });

  it('the host veth is gone', async () => {
    const { call, hostIf, result } = await addPod('nohost');
    execFileSync('ip', ['link', 'del', hostIf]);
    const r = expectCniError(await check(call, result), 104);
    expect(r.msg).toMatch(/eth0 is missing|host veth .* is missing/);
    expectOk(await cni('DEL', conf(), call));
    await expectNothingLeft(c, PREFIX);
  });
});

describe('GC', () => {
  it('removes endpoints, host veths and allocations of attachments not in cni.dev/valid-attachments, and nothing else', async () => {
    const keep = await addPod('keep');
    const drop = await addPod('drop');
    // Addresses without an endpoint (a crashed ADD), of this network and of another one.
    const ipam = createIpam(c.ds, { lock: 'none' });
    await ipam.assign({
      handleID: `${NET_NAME}.orphan-${process.pid}`,
      node: NODE,
      attrs: {},
      assignIPv4: true,
      assignIPv6: false,
    });
    await ipam.assign({
      handleID: `other-net.foreign-${process.pid}`,
      node: NODE,
      attrs: {},
      assignIPv4: true,
      assignIPv6: false,
    });
    // An endpoint of another node is that node's business.
    await c.ds.create({
      apiVersion: API_VERSION,
      kind: 'WorkloadEndpoint',
      metadata: { name: 'node2-cni-elsewhere-eth0', namespace: 'default' },
      spec: {
        orchestrator: 'cni',
        node: 'node2',
        containerID: 'elsewhere',
        endpoint: 'eth0',
        interfaceName: `${PREFIX}elsewhere`,
        ipNetworks: ['10.77.6.250/32'],
      },
    });

    // An endpoint on this node whose addresses come from another network only: that network's GC decides.
    await c.ds.create({
      apiVersion: API_VERSION,
      kind: 'WorkloadEndpoint',
      metadata: { name: `node1-cni-foreign--${process.pid}-net1`, namespace: 'default' },
      spec: {
        orchestrator: 'cni',
        node: NODE,
        containerID: `foreign-${process.pid}`,
        endpoint: 'net1',
        interfaceName: `${PREFIX}foreign`,
        ipNetworks: ['10.77.6.251/32'],
      },
    });

    const gc = await cni('GC', {
      ...conf('1.1.0'),
      'cni.dev/valid-attachments': [{ containerID: keep.call.containerId, ifname: 'eth0' }],
    });
    expectOk(gc);

    expect(link(drop.hostIf)).toBeUndefined();
    expect(await linkAfterDel('eth0', drop.pod.name)).toBeUndefined();
    expect(hostLinksWithPrefix(PREFIX)).toEqual([keep.hostIf]);
    expect(await wepNames(c.ds)).toEqual(
      [
        `default/node1-cni-foreign--${process.pid}-net1`,
        `default/node1-cni-keep--${process.pid}-eth0`,
        'default/node2-cni-elsewhere-eth0',
      ].sort(),
    );
    expect((await ipamState(c.ds)).handles).toEqual(
      [`${NET_NAME}.${keep.call.containerId}`, `other-net.foreign-${process.pid}`].sort(),
    );
    expectOk(await check(keep.call, keep.result));

    // Cleanup of what GC rightly left alone.
    await c.ds.delete('WorkloadEndpoint', 'node2-cni-elsewhere-eth0', { namespace: 'default' });
    await c.ds.delete('WorkloadEndpoint', `node1-cni-foreign--${process.pid}-net1`, { namespace: 'default' });
    await ipam.releaseByHandle(`other-net.foreign-${process.pid}`);
    expectOk(await cni('DEL', conf(), keep.call));
    expectOk(await cni('DEL', conf(), drop.call));
    await expectNothingLeft(c, PREFIX);
  });

  it('with no valid attachments removes everything of this node and network', async () => {
    await addPod('all1');
    await addPod('all2');
    expectOk(await cni('GC', { ...conf('1.1.0'), 'cni.dev/valid-attachments': [] }));
    await expectNothingLeft(c, PREFIX);
  });

  // Issue 11, finding 4: endpoint fields (tenant-editable on the Kubernetes
  // datastore) never name a link to delete, and GC of one network leaves other
  // networks (a network named `<name>.x`, a host-local network) alone.
  it('never deletes a link an endpoint names, nor what other networks hold', async () => {
    const uplink = `upl${process.pid % 100000}`;
    execFileSync('ip', ['link', 'add', uplink, 'type', 'veth', 'peer', 'name', `${uplink}p`]);
    try {
      const ipam = createIpam(c.ds, { lock: 'none' });
      const stale = `stale-${process.pid}`;
      await ipam.assign({
        handleID: `${NET_NAME}.${stale}`,
        node: NODE,
        attrs: {},
        assignIPv4: true,
        assignIPv6: false,
      });
      // A stale endpoint of ours whose interfaceName was pointed at the node's uplink.
      await c.ds.create({
        apiVersion: API_VERSION,
        kind: 'WorkloadEndpoint',
        metadata: { name: `node1-cni-stale--${process.pid}-eth0`, namespace: 'default' },
        spec: {
          orchestrator: 'cni',
          node: NODE,
          containerID: stale,
          endpoint: 'eth0',
          interfaceName: uplink,
          ipNetworks: ['10.77.6.252/32'],
        },
      });
      // Network `<name>.x`, container `y`: its handle used to read as container `x.y` of ours.
      const other = {
        handleID: `${NET_NAME}.x.y${process.pid}`,
        node: NODE,
        attrs: {},
        assignIPv4: true,
        assignIPv6: false,
      };
      await ipam.assign(other);
      // A host-local network's endpoint: no handle anywhere.
      await c.ds.create({
        apiVersion: API_VERSION,
        kind: 'WorkloadEndpoint',
        metadata: { name: `node1-cni-hl--${process.pid}-net2`, namespace: 'default' },
        spec: {
          orchestrator: 'cni',
          node: NODE,
          containerID: `hl-${process.pid}`,
          endpoint: 'net2',
          interfaceName: `${PREFIX}hl`,
          ipNetworks: ['10.99.0.5/32'],
        },
      });

      expectOk(await cni('GC', { ...conf('1.1.0'), 'cni.dev/valid-attachments': [] }));

      expect(link(uplink)).toBeDefined();
      expect(await wepNames(c.ds)).toEqual([`default/node1-cni-hl--${process.pid}-net2`]);
      expect((await ipamState(c.ds)).handles).toEqual([other.handleID]);

      await c.ds.delete('WorkloadEndpoint', `node1-cni-hl--${process.pid}-net2`, { namespace: 'default' });
      await ipam.releaseByHandle(other.handleID);
    } finally {
      execFileSync('ip', ['link', 'del', uplink]);
    }
    await expectNothingLeft(c, PREFIX);
  });

  it('is refused before cniVersion 1.1.0', async () => {
    const r = expectCniError(await cni('GC', { ...conf('1.0.0'), 'cni.dev/valid-attachments': [] }), 1);
    expect(r.msg).toContain('GC');
  });
});
