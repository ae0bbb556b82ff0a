// Delegated IPAM: the real host-local plugin from CNI_PATH, with `usePodCidr` /
// `usePodCidrIPv6` resolved to the node's pod CIDRs (datastore Node resource,
// or the Kubernetes Node through the fake API server), IP= passed through.
import { existsSync, mkdirSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { hostVethName } from '../../src/model/names.js';
import { API_VERSION } from '../../src/model/resources.js';
import { assertThrowawayHostNetns } from '../support/cni.js';
import { createNetns, removeAllNetns } from '../support/netns.js';
import {
  NET_NAME,
  NODE,
  cleanupAttachments,
  cni,
  ensureBuilt,
  expectCniError,
  expectNothingLeft,
  expectOk,
  hostLinksWithPrefix,
  link,
  linkAfterDel,
  netconf,
  startCluster,
  wepNames,
  type Cluster,
} from '../support/plugin-harness.js';

const PREFIX = 'nph';
// No IP pools: host-local allocates from the node's pod CIDR; the pools here only scope the route assertions.
const CIDR4 = '10.77.8.0/28';
const CIDR6 = 'fd77:8::/120';
let c: Cluster;
let dataDir: string;

beforeAll(async () => {
  assertThrowawayHostNetns();
  ensureBuilt();
  c = await startCluster([]);
  c.pools.push(
    { name: 'hl-v4', cidr: '10.77.8.0/24', blockSize: 28 },
    { name: 'hl-v6', cidr: 'fd77:8::/116', blockSize: 122 },
  );
  dataDir = join(c.tmp, 'host-local');
  await c.ds.create({
    apiVersion: API_VERSION,
    kind: 'Node',
    metadata: { name: NODE },
    spec: { podCIDRs: [CIDR4, CIDR6] },
  });
});
afterEach(async () => {
  await cleanupAttachments();
  removeAllNetns();
});
afterAll(async () => {
  removeAllNetns();
  await c?.close();
});

function hostLocalConf(v: string, ranges: unknown[], extra: Record<string, unknown> = {}) {
  return netconf(c, v, { host_veth_prefix: PREFIX, ipam: { type: 'host-local', ranges, dataDir }, ...extra });
}

/** host-local's reservations: one file per address in <dataDir>/<network name>/. */
function reservations(): string[] {
  const dir = join(dataDir, NET_NAME);
  if (!existsSync(dir)) return [];
  return readdirSync(dir)
    .filter((f) => /^[0-9a-f.:]+$/.test(f) && f.length > 4)
    .sort();
}

async function expectClean(): Promise<void> {
  await expectNothingLeft(c, PREFIX);
  expect(reservations(), 'host-local reservations left behind').toEqual([]);
}

describe('host-local with usePodCidr from the datastore Node', () => {
  it.each(['0.3.1', '1.0.0'])(
    'cniVersion %s: ADD gets an address from the pod CIDR, CHECK (>= 0.4.0) passes, DEL releases it',
    async (v) => {
      const pod = createNetns('pod');
      const call = { containerId: `hl${v.replace(/\./g, '')}-${process.pid}`, netns: pod.path };
      const conf = hostLocalConf(v, [[{ subnet: 'usePodCidr' }]]);
      const add = await cni('ADD', conf, call);
      expectOk(add);
      expect(add.json.ips).toHaveLength(1);
      const ip = add.json.ips[0].address as string;
      expect(ip).toMatch(/^10\.77\.8\.\d+\/32$/);
      expect(add.json.ips[0]).toMatchObject({ gateway: '169.254.1.1', interface: 1 });
      expect(reservations()).toEqual([ip.split('/')[0]]);
      expect(link(hostVethName(PREFIX, call.containerId))).toBeDefined();
      expect(await wepNames(c.ds)).toHaveLength(1);
      if (v !== '0.3.1') expectOk(await cni('CHECK', { ...conf, prevResult: add.json }, call));
      expectOk(await cni('DEL', conf, call));
      await expectClean();
    },
  );

  it('dual stack: usePodCidr and usePodCidrIPv6', async () => {
    const pod = createNetns('pod');
    const call = { containerId: `hldual-${process.pid}`, netns: pod.path };
    const conf = hostLocalConf('1.0.0', [[{ subnet: 'usePodCidr' }], [{ subnet: 'usePodCidrIPv6' }]]);
    const add = await cni('ADD', conf, call);
    expectOk(add);
    const got = (add.json.ips as Array<{ address: string }>).map((i) => i.address);
    expect(got).toHaveLength(2);
    expect(got[0]).toMatch(/^10\.77\.8\.\d+\/32$/);
    expect(got[1]).toMatch(/^fd77:8::[0-9a-f]+\/128$/);
    expectOk(await cni('CHECK', { ...conf, prevResult: add.json }, call));
    expectOk(await cni('DEL', conf, call));
    await expectClean();
  });

  it('IP= in CNI_ARGS reaches host-local', async () => {
    const pod = createNetns('pod');
    const call = { containerId: `hlip-${process.pid}`, netns: pod.path, args: 'IgnoreUnknown=1;IP=10.77.8.9' };
    const conf = hostLocalConf('1.0.0', [[{ subnet: 'usePodCidr' }]]);
    const add = await cni('ADD', conf, call);
    expectOk(add);
    expect(add.json.ips[0].address).toBe('10.77.8.9/32');
    expectOk(await cni('DEL', conf, call));
    await expectClean();
  });

  it('a repeated ADD returns the same result and keeps the reservation', async () => {
    const pod = createNetns('pod');
    const call = { containerId: `hlrep-${process.pid}`, netns: pod.path };
    const conf = hostLocalConf('1.0.0', [[{ subnet: 'usePodCidr' }]]);
    const add = await cni('ADD', conf, call);
    expectOk(add);
    const again = await cni('ADD', conf, call);
    expectOk(again);
    expect(again.json).toEqual(add.json);
    expect(reservations()).toEqual([add.json.ips[0].address.split('/')[0]]);
    expectOk(await cni('CHECK', { ...conf, prevResult: again.json }, call));
    expectOk(await cni('DEL', conf, call));
    await expectClean();
  });

  it('CHECK names an address host-local no longer holds', async () => {
    const pod = createNetns('pod');
    const call = { containerId: `hlchk-${process.pid}`, netns: pod.path };
    const conf = hostLocalConf('1.0.0', [[{ subnet: 'usePodCidr' }]]);
    const add = await cni('ADD', conf, call);
    expectOk(add);
    const { rmSync } = await import('node:fs');
    rmSync(join(dataDir, NET_NAME, add.json.ips[0].address.split('/')[0]));
    const r = expectCniError(await cni('CHECK', { ...conf, prevResult: add.json }, call), 104);
    expect(r.msg).toContain('host-local');
    expectOk(await cni('DEL', conf, call));
    await expectClean();
  });

  it('range exhausted: the failing ADD leaves nothing behind', async () => {
    // A /30 has one usable address for host-local (network, gateway and broadcast excluded).
    const node = `tiny-${process.pid}`;
    await c.ds.create({
      apiVersion: API_VERSION,
      kind: 'Node',
      metadata: { name: node },
      spec: { podCIDRs: ['10.77.8.16/30'] },
    });
    try {
      const conf = hostLocalConf('1.0.0', [[{ subnet: 'usePodCidr' }]], { nodename: node });
      const p1 = createNetns('pod');
      const p2 = createNetns('pod');
      const first = { containerId: `hlx1-${process.pid}`, netns: p1.path };
      const second = { containerId: `hlx2-${process.pid}`, netns: p2.path };
      expectOk(await cni('ADD', conf, first));
      const r = expectCniError(await cni('ADD', conf, second));
      expect(r.msg).toContain('host-local');
      expect(r.msg).toMatch(/no IP addresses available/);
      expect(await linkAfterDel('eth0', p2.name)).toBeUndefined();
      expect(hostLinksWithPrefix(PREFIX)).toEqual([hostVethName(PREFIX, first.containerId)]);
      expect(reservations()).toHaveLength(1);
      expect(await wepNames(c.ds)).toHaveLength(1);
      expectOk(await cni('DEL', conf, first));
      await expectClean();
    } finally {
      await c.ds.delete('Node', node);
    }
  });

  it('DEL releases the reservation when the node (and its pod CIDR) is gone meanwhile', async () => {
    const node = `gone-${process.pid}`;
    await c.ds.create({
      apiVersion: API_VERSION,
      kind: 'Node',
      metadata: { name: node },
      spec: { podCIDRs: ['10.77.8.48/28'] },
    });
    const conf = hostLocalConf('1.0.0', [[{ subnet: 'usePodCidr' }]], { nodename: node });
    const pod = createNetns('pod');
    const call = { containerId: `hlgone-${process.pid}`, netns: pod.path };
    expectOk(await cni('ADD', conf, call));
    expect(reservations()).toHaveLength(1);
    await c.ds.delete('Node', node);
    expectOk(await cni('DEL', conf, call));
    await expectClean();
  });

  it('a node without pod CIDRs: an error naming the node and the fix, nothing left', async () => {
    const pod = createNetns('pod');
    const conf = hostLocalConf('1.0.0', [[{ subnet: 'usePodCidr' }]], { nodename: `nocidr-${process.pid}` });
    const r = expectCniError(await cni('ADD', conf, { containerId: `hlnone-${process.pid}`, netns: pod.path }), 7);
    expect(r.msg).toContain(`nocidr-${process.pid}`);
    expect(r.msg).toContain('podCIDRs');
    await expectClean();
  });

  it('host-local missing from CNI_PATH: an error naming the path', async () => {
    const pod = createNetns('pod');
    const empty = join(c.tmp, 'empty-bin');
    mkdirSync(empty, { recursive: true });
    const conf = hostLocalConf('1.0.0', [[{ subnet: 'usePodCidr' }]]);
    const r = expectCniError(
      await cni('ADD', conf, { containerId: `hlnobin-${process.pid}`, netns: pod.path, path: empty }),
      7,
    );
    expect(r.msg).toContain('host-local');
    expect(r.msg).toContain(empty);
    await expectClean();
  });
});

describe('host-local with usePodCidr from the Kubernetes Node (fake API server)', () => {
  it('reads spec.podCIDRs of the node from the API server', async () => {
    const { startFakeApiServer, writeKubeconfig } = await import('../support/fake-apiserver.js');
    const api = await startFakeApiServer({ tls: true, auth: { tokens: ['t0ken'] } });
    try {
      api.put(`/api/v1/nodes/${NODE}`, {
        apiVersion: 'v1',
        kind: 'Node',
        metadata: { name: NODE },
        spec: { podCIDR: '10.77.8.32/28', podCIDRs: ['10.77.8.32/28'] },
      });
      const kubeconfig = writeKubeconfig(api.dir, api, { token: 't0ken' });
      const pod = createNetns('pod');
      const call = { containerId: `hlk8s-${process.pid}`, netns: pod.path };
      const conf = hostLocalConf('1.0.0', [[{ subnet: 'usePodCidr' }]], { kubernetes: { kubeconfig } });
      const add = await cni('ADD', conf, call);
      expectOk(add);
      expect(add.json.ips[0].address).toMatch(/^10\.77\.8\.(3[3-9]|4[0-6])\/32$/);
      expectOk(await cni('DEL', conf, call));
      await expectClean();
    } finally {
      await api.stop();
    }
  });
});
