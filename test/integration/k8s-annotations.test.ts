// Issue 8 through the built executable: every row of docs/addresses-and-annotations.md's annotation table,
// each documented address-selection error, malformed values, pool fall-through, and docs/addresses-and-annotations.md
// behaviour 7 (a running pod's address never changes). IPAM and endpoints in a
// throwaway etcd; pods and namespaces on the fake API server; policy.type k8s.
// Every failing ADD must leave nothing behind.
import { describe, expect, it } from 'vitest';
import { API_VERSION } from '../../src/model/resources.js';
import { containsIP, parseCidr, parseIP } from '../../src/net/cidr.js';
import { createNetns } from '../support/netns.js';
import {
  NODE,
  addrs,
  cni,
  expectCniError,
  expectNothingLeft,
  expectOk,
  hostLinksWithPrefix,
  ipamState,
  k8sArgs,
  link,
  routes,
  why,
  type Cluster,
  type PoolDef,
  useCluster,
} from '../support/plugin-harness.js';
import { k8sNetconf, logLines, putNamespace, putPod, startApi, type Api, type PodDef } from '../support/k8s-harness.js';

const PREFIX = 'npa';
const A: PoolDef = { name: 'ann-a', cidr: '10.77.21.0/26', blockSize: 28 };
const B: PoolDef = { name: 'ann-b', cidr: '10.77.21.64/26', blockSize: 28 };
const C: PoolDef = { name: 'ann-c', cidr: '10.77.21.128/26', blockSize: 28 };
const FLOAT: PoolDef = { name: 'ann-float', cidr: '10.77.22.0/28', blockSize: 28 };
const TINY: PoolDef = { name: 'ann-tiny', cidr: '10.77.22.16/31', blockSize: 31 };
const V6A: PoolDef = { name: 'ann-v6a', cidr: 'fd77:21::/116', blockSize: 122 };
const V6B: PoolDef = { name: 'ann-v6b', cidr: 'fd77:21::1000/116', blockSize: 122 };
/** Created later by the behaviour-7 test (listed here so "nothing left" covers its routes). */
const NEW: PoolDef = { name: 'ann-new', cidr: '10.77.23.0/28', blockSize: 28 };
const VX = { name: 'ann-vxlan', cidr: '10.77.24.0/28' };
/** Outside every pool (TEST-NET-2). */
const OUTSIDE = '198.51.100.7';

let c: Cluster;
let api: Api;

useCluster([A, B, C, FLOAT, TINY, V6A, V6B], (x) => (c = x), {
  setup: async (x) => {
    await x.ds.create({
      apiVersion: API_VERSION,
      kind: 'IPPool',
      metadata: { name: VX.name },
      spec: { cidr: VX.cidr, blockSize: 28, vxlanMode: 'Always' },
    });
    x.pools.push(NEW, { ...VX, blockSize: 28 });
    api = await startApi();
  },
  teardown: async () => api?.server.stop(),
});

let seq = 0;
/** Netconf of this file: without annotations, pods get addresses from pool A only. */
const conf = (extra: Record<string, unknown> = {}, ipam: Record<string, unknown> = {}) =>
  k8sNetconf(c, api, PREFIX, { ipam: { type: 'netplugin-ipam', ipv4_pools: [A.name], ...ipam }, ...extra });

interface Attempt {
  r: Awaited<ReturnType<typeof cni>>;
  call: { containerId: string; netns: string; args: string };
  netns: string;
  podName: string;
  ns: string;
}

/** Seeds a pod with these annotations and runs ADD for it. */
async function addPod(
  annotations: Record<string, string>,
  confObj = conf(),
  opts: { ns?: string; pod?: PodDef; podName?: string } = {},
): Promise<Attempt> {
  const ns = opts.ns ?? 'default';
  const podName = opts.podName ?? `p${++seq}-${process.pid}`;
  putPod(api, ns, podName, { ...opts.pod, annotations });
  const netns = createNetns('pod');
  const call = { containerId: `${podName}-c`, netns: netns.path, args: k8sArgs(ns, podName) };
  const r = await cni('ADD', confObj, call);
  return { r, call, netns: netns.name, podName, ns };
}

const ipsOf = (a: Attempt) => (a.r.json.ips as Array<{ address: string }>).map((i) => i.address);
/** Whether an address (with or without prefix) lies in the pool. */
const inPool = (ip: string, p: PoolDef) => containsIP(parseCidr(p.cidr), parseIP(ip.split('/')[0]!));

async function del(a: Attempt, confObj = conf()): Promise<void> {
  expectOk(await cni('DEL', confObj, a.call));
}

/** A failed ADD: the error, then nothing of it anywhere. */
async function expectFailed(a: Attempt, code: number): Promise<{ msg: string }> {
  const e = expectCniError(a.r, code);
  expect(link('eth0', a.netns), 'no interface in the pod').toBeUndefined();
  await expectNothingLeft(c, PREFIX);
  return e;
}

describe('annotation table', () => {
  it("ipv4pools on the pod: the address comes from that pool, not the netconf's", async () => {
    const a = await addPod({ 'cni.netplugin.org/ipv4pools': JSON.stringify([B.name]) });
    expectOk(a.r);
    expect(ipsOf(a)).toHaveLength(1);
    expect(inPool(ipsOf(a)[0]!, B), ipsOf(a)[0]).toBe(true);
    await del(a);
    await expectNothingLeft(c, PREFIX);
  });

  it('ipv4pools on the namespace (by CIDR): applies to a pod without annotations', async () => {
    const ns = `nsb-${process.pid}`;
    putNamespace(api, ns, { 'cni.netplugin.org/ipv4pools': JSON.stringify([B.cidr]) });
    const a = await addPod({}, conf(), { ns });
    expectOk(a.r);
    expect(inPool(ipsOf(a)[0]!, B), ipsOf(a)[0]).toBe(true);
    await del(a);
    await expectNothingLeft(c, PREFIX);
  });

  it("Errors 8: the pod's pool annotation wins over its namespace's; other pods in the namespace get the namespace's", async () => {
    const ns = `nsprec-${process.pid}`;
    putNamespace(api, ns, { 'cni.netplugin.org/ipv4pools': JSON.stringify([B.name]) });
    const withOwn = await addPod({ 'cni.netplugin.org/ipv4pools': JSON.stringify([C.name]) }, conf(), { ns });
    expectOk(withOwn.r);
    expect(inPool(ipsOf(withOwn)[0]!, C), ipsOf(withOwn)[0]).toBe(true);
    const plain = await addPod({}, conf(), { ns });
    expectOk(plain.r);
    expect(inPool(ipsOf(plain)[0]!, B), ipsOf(plain)[0]).toBe(true);
    await del(withOwn);
    await del(plain);
    await expectNothingLeft(c, PREFIX);
  });

  it('ipv6pools with ipv4pools, assign_ipv6 "true": dual stack from the annotated pools', async () => {
    const dual = conf({}, { assign_ipv6: 'true', ipv6_pools: [V6A.name] });
    const a = await addPod(
      {
        'cni.netplugin.org/ipv4pools': JSON.stringify([B.name]),
        'cni.netplugin.org/ipv6pools': JSON.stringify([V6B.name]),
      },
      dual,
    );
    expectOk(a.r);
    const [v4, v6] = ipsOf(a);
    expect(inPool(v4!, B), v4).toBe(true);
    // fd77:21::1000/116 holds fd77:21::1000 .. fd77:21::1fff.
    expect(v6).toMatch(/^fd77:21::1[0-9a-f]{3}\/128$/);
    const inPod = addrs('eth0', a.netns)
      .filter((x) => x.scope === 'global')
      .map((x) => `${x.local}/${x.prefixlen}`);
    expect(inPod.sort()).toEqual([v4, v6].sort());
    await del(a, dual);
    await expectNothingLeft(c, PREFIX);
  });

  it('ipAddrs: exactly that address, recorded in IPAM; a second pod asking for it fails and the first is untouched', async () => {
    const want = '10.77.21.77';
    const first = await addPod({ 'cni.netplugin.org/ipAddrs': JSON.stringify([want]) });
    expectOk(first.r);
    expect(ipsOf(first)).toEqual([`${want}/32`]);
    const st = await ipamState(c.ds);
    expect(st.handles).toEqual([`k8s-pod-network.${first.call.containerId}`]);
    expect(st.allocations).toHaveLength(1);
    expect(st.allocations[0]).toMatch(
      new RegExp(`^10\\.77\\.21\\.64/28#13 k8s-pod-network\\.${first.call.containerId}$`),
    );

    const second = await addPod({ 'cni.netplugin.org/ipAddrs': JSON.stringify([want]) });
    const e = expectCniError(second.r);
    expect(e.msg).toContain(want);
    expect(e.msg).toMatch(/in use|already|taken|allocated/i);
    expect(link('eth0', second.netns)).toBeUndefined();
    // The first pod keeps its address, allocation, endpoint and route.
    expect(await ipamState(c.ds)).toEqual(st);
    expect(addrs('eth0', first.netns).map((x) => x.local)).toContain(want);
    expect(routes(4).some((r) => r.dst === want)).toBe(true);
    expect(hostLinksWithPrefix(PREFIX)).toHaveLength(1);
    await del(first);
    await expectNothingLeft(c, PREFIX);
  });

  it('ipAddrsNoIpam with feature_control.ip_addrs_no_ipam on: the address is configured, IPAM records nothing, a warning says it is outside every pool', async () => {
    const on = conf({ feature_control: { ip_addrs_no_ipam: true } });
    const a = await addPod({ 'cni.netplugin.org/ipAddrsNoIpam': JSON.stringify([OUTSIDE]) }, on);
    expectOk(a.r);
    expect(ipsOf(a)).toEqual([`${OUTSIDE}/32`]);
    expect(addrs('eth0', a.netns).map((x) => x.local)).toContain(OUTSIDE);
    expect(routes(4).some((r) => r.dst === OUTSIDE)).toBe(true);
    expect(await ipamState(c.ds)).toEqual({ handles: [], allocations: [] });
    // docs/addresses-and-annotations.md: routes are not distributed for it.
    const warn = logLines(a.r.stderr, 'WARNING').join('\n');
    expect(warn).toContain(OUTSIDE);
    expect(warn).toContain('outside every IP pool');
    await del(a, on);
    expect(
      routes(4).some((r) => r.dst === OUTSIDE),
      'host route removed',
    ).toBe(false);
    await expectNothingLeft(c, PREFIX);
  });

  it('floatingIPs with feature_control.floating_ips on: the endpoint NATs the floating IP to the pod address', async () => {
    const on = conf({ feature_control: { floating_ips: true } });
    const a = await addPod({ 'cni.netplugin.org/floatingIPs': JSON.stringify(['10.77.22.5']) }, on);
    expectOk(a.r);
    const ip = ipsOf(a)[0]!.split('/')[0]!;
    expect(inPool(ip, A), ip).toBe(true);
    const wep = await c.ds.get('WorkloadEndpoint', `${NODE}-k8s-${a.podName.replace(/-/g, '--')}-eth0`, 'default');
    expect(wep.spec.ipNATs).toEqual([{ internalIP: ip, externalIP: '10.77.22.5' }]);
    // The floating IP is not allocated to the pod.
    expect((await ipamState(c.ds)).allocations).toHaveLength(1);
    await del(a, on);
    await expectNothingLeft(c, PREFIX);
  });
});

describe('address-selection errors (docs/addresses-and-annotations.md)', () => {
  it("1: the netconf's ipv4_pools names a pool that does not exist: code 7 naming the field and the pool", async () => {
    const a = await addPod({}, conf({}, { ipv4_pools: ['no-such-pool'] }));
    const e = await expectFailed(a, 7);
    expect(e.msg).toContain('ipam.ipv4_pools');
    expect(e.msg).toContain('no-such-pool');
    expect(e.msg).toContain('does not exist');
    expect(e.msg).toContain(A.name);
  });

  it('2: an annotation naming a pool that does not exist: code 102 naming the annotation, the pod and the pool', async () => {
    const a = await addPod({ 'cni.netplugin.org/ipv4pools': '["purple"]' });
    const e = await expectFailed(a, 102);
    expect(e.msg).toContain(`annotation cni.netplugin.org/ipv4pools on pod default/${a.podName}`);
    expect(e.msg).toContain('IP pool "purple" does not exist');
  });

  it('2: an annotation naming a subset of a pool: "requesting a subset of a pool is not supported"', async () => {
    const a = await addPod({ 'cni.netplugin.org/ipv4pools': '["10.77.21.64/28"]' });
    const e = await expectFailed(a, 102);
    expect(e.msg).toContain('requesting a subset of a pool is not supported');
    expect(e.msg).toContain(B.name);
  });

  it('3: ipAddrs and ipAddrsNoIpam together: code 7, they cannot be used together', async () => {
    const a = await addPod(
      { 'cni.netplugin.org/ipAddrs': '["10.77.21.10"]', 'cni.netplugin.org/ipAddrsNoIpam': `["${OUTSIDE}"]` },
      conf({ feature_control: { ip_addrs_no_ipam: true } }),
    );
    const e = await expectFailed(a, 7);
    expect(e.msg).toContain('cni.netplugin.org/ipAddrs');
    expect(e.msg).toContain('cni.netplugin.org/ipAddrsNoIpam');
    expect(e.msg).toContain('cannot be used together');
  });

  it('4: two IPv4 addresses in ipAddrs: code 7 quoting the value', async () => {
    const value = '["10.77.21.10", "10.77.21.11"]';
    const a = await addPod({ 'cni.netplugin.org/ipAddrs': value });
    const e = await expectFailed(a, 7);
    expect(e.msg).toContain(`'${value}'`);
    expect(e.msg).toContain('more than one IPv4 address');
  });

  it('4: one IPv4 and one IPv6 address in ipAddrs is allowed (dual stack)', async () => {
    const dual = conf({}, { assign_ipv6: 'true' });
    const a = await addPod({ 'cni.netplugin.org/ipAddrs': '["10.77.21.12", "fd77:21::12"]' }, dual);
    expectOk(a.r);
    expect(ipsOf(a)).toEqual(['10.77.21.12/32', 'fd77:21::12/128']);
    await del(a, dual);
    await expectNothingLeft(c, PREFIX);
  });

  it('5: ipAddrs with ipv4pools (pod and namespace): the address wins', async () => {
    const ns = `nsprio-${process.pid}`;
    putNamespace(api, ns, { 'cni.netplugin.org/ipv4pools': JSON.stringify([C.name]) });
    const a = await addPod(
      { 'cni.netplugin.org/ipAddrs': '["10.77.21.20"]', 'cni.netplugin.org/ipv4pools': JSON.stringify([B.name]) },
      conf(),
      { ns },
    );
    expectOk(a.r);
    expect(ipsOf(a)).toEqual(['10.77.21.20/32']);
    expect(a.r.stderr).toMatch(/ipv4pools .*is ignored: cni\.netplugin\.org\/ipAddrs takes priority/);
    await del(a);
    await expectNothingLeft(c, PREFIX);
  });

  it('5: ipAddrsNoIpam with ipv4pools: the address wins', async () => {
    const on = conf({ feature_control: { ip_addrs_no_ipam: true } });
    const a = await addPod(
      { 'cni.netplugin.org/ipAddrsNoIpam': `["${OUTSIDE}"]`, 'cni.netplugin.org/ipv4pools': JSON.stringify([B.name]) },
      on,
    );
    expectOk(a.r);
    expect(ipsOf(a)).toEqual([`${OUTSIDE}/32`]);
    expect(await ipamState(c.ds)).toEqual({ handles: [], allocations: [] });
    await del(a, on);
    await expectNothingLeft(c, PREFIX);
  });

  it('6: ipAddrsNoIpam inside a VXLAN pool: configured, with a warning that no routes are distributed', async () => {
    const on = conf({ feature_control: { ip_addrs_no_ipam: true } });
    const a = await addPod({ 'cni.netplugin.org/ipAddrsNoIpam': '["10.77.24.3"]' }, on);
    expectOk(a.r);
    expect(ipsOf(a)).toEqual(['10.77.24.3/32']);
    const warn = logLines(a.r.stderr, 'WARNING').join('\n');
    expect(warn).toContain(VX.name);
    expect(warn).toContain('VXLAN');
    expect(warn).toContain('no routes will be distributed');
    await del(a, on);
    await expectNothingLeft(c, PREFIX);
  });

  it('7: ipAddrsNoIpam while feature_control.ip_addrs_no_ipam is off: fails naming the flag', async () => {
    const a = await addPod({ 'cni.netplugin.org/ipAddrsNoIpam': `["${OUTSIDE}"]` });
    const e = await expectFailed(a, 102);
    expect(e.msg).toContain('feature_control.ip_addrs_no_ipam');
    expect(e.msg).toContain('the feature is disabled');
    expect(e.msg).toContain('"ip_addrs_no_ipam": true');
  });

  it('7: floatingIPs while feature_control.floating_ips is off: fails naming the flag', async () => {
    const a = await addPod({ 'cni.netplugin.org/floatingIPs': '["10.77.22.5"]' });
    const e = await expectFailed(a, 102);
    expect(e.msg).toContain('feature_control.floating_ips');
    expect(e.msg).toContain('the feature is disabled');
  });

  it('8: a malformed namespace annotation is not even read when the pod carries its own', async () => {
    const ns = `nsbad-${process.pid}`;
    putNamespace(api, ns, { 'cni.netplugin.org/ipv4pools': 'not json' });
    const a = await addPod({ 'cni.netplugin.org/ipv4pools': JSON.stringify([B.name]) }, conf(), { ns });
    expectOk(a.r);
    expect(inPool(ipsOf(a)[0]!, B)).toBe(true);
    await del(a);
    // Without its own annotation, a pod of that namespace fails on the namespace's value.
    const b = await addPod({}, conf(), { ns });
    const e = await expectFailed(b, 7);
    expect(e.msg).toContain(`annotation cni.netplugin.org/ipv4pools on namespace ${ns}`);
    expect(e.msg).toContain("'not json'");
  });
});

describe('malformed annotation values: code 7 quoting the value', () => {
  const cases: Array<[string, string, string, RegExp]> = [
    ['not JSON', 'cni.netplugin.org/ipv4pools', '[ann-b]', /not valid JSON/],
    ['not an array', 'cni.netplugin.org/ipAddrs', '"10.77.21.30"', /a JSON string, not an array/],
    ['an object', 'cni.netplugin.org/ipv6pools', '{"pool":"ann-v6a"}', /a JSON object, not an array/],
    ['not strings', 'cni.netplugin.org/ipAddrs', '[10, 77]', /element 0 is a number, not a string/],
    ['empty list', 'cni.netplugin.org/ipv4pools', '[]', /the list is empty/],
    ['not an address', 'cni.netplugin.org/ipAddrs', '["10.77.21.300"]', /is not an IP address/],
    ['address with a prefix', 'cni.netplugin.org/floatingIPs', '["10.77.22.5/32"]', /without a prefix length/],
  ];
  it.each(cases)('%s', async (_what, key, value, why_) => {
    const a = await addPod({ [key]: value }, conf({ feature_control: { floating_ips: true } }));
    const e = await expectFailed(a, 7);
    expect(e.msg).toContain(`annotation ${key} on pod default/${a.podName}`);
    expect(e.msg).toContain(`has value '${value}'`);
    expect(e.msg).toMatch(why_);
    expect(e.msg, 'says what to do').toMatch(/write|give|list|remove|must be/);
  });
});

describe('annotations and node selectors', () => {
  it('an annotated pool whose nodeSelector does not select this node: the IPAM error names the annotation', async () => {
    await c.ds.create({
      apiVersion: API_VERSION,
      kind: 'IPPool',
      metadata: { name: 'ann-elsewhere' },
      spec: { cidr: '10.77.27.0/28', blockSize: 28, nodeSelector: "zone == 'nowhere'" },
    });
    try {
      const a = await addPod({ 'cni.netplugin.org/ipv4pools': '["ann-elsewhere"]' });
      const e = await expectFailed(a, 100);
      expect(e.msg).toContain(`annotation cni.netplugin.org/ipv4pools on pod default/${a.podName}`);
      expect(e.msg).toContain(`selects node '${NODE}'`);
      expect(e.msg).toContain('ann-elsewhere');
    } finally {
      await c.ds.delete('IPPool', 'ann-elsewhere');
    }
  });
});

describe('pool order', () => {
  it('a full first pool falls through to the next pool in the list', async () => {
    const list = JSON.stringify([TINY.name, B.name]);
    const got: Attempt[] = [];
    for (let i = 0; i < 3; i++) {
      const a = await addPod({ 'cni.netplugin.org/ipv4pools': list });
      expect(a.r.code, why(a.r)).toBe(0);
      got.push(a);
    }
    const ips = got.map((a) => ipsOf(a)[0]!);
    expect(ips.slice(0, 2).sort()).toEqual(['10.77.22.16/32', '10.77.22.17/32']);
    expect(inPool(ips[2]!, B), ips[2]).toBe(true);
    for (const a of got) await del(a);
    await expectNothingLeft(c, PREFIX);
  });
});

describe('docs/addresses-and-annotations.md: a running pod keeps its address', () => {
  it('after a new pool and a changed annotation, a repeated ADD returns the old address; a new pod gets the new pool', async () => {
    const podName = `keep-${process.pid}`;
    const first = await addPod({}, conf(), { podName });
    expectOk(first.r);
    const old = ipsOf(first);
    expect(inPool(old[0]!, A)).toBe(true);

    await c.ds.create({
      apiVersion: API_VERSION,
      kind: 'IPPool',
      metadata: { name: NEW.name },
      spec: { cidr: NEW.cidr, blockSize: NEW.blockSize },
    });
    putPod(api, 'default', podName, { annotations: { 'cni.netplugin.org/ipv4pools': JSON.stringify([NEW.name]) } });
    const again = await cni('ADD', conf(), first.call);
    expectOk(again);
    expect(again.json.ips.map((i: { address: string }) => i.address)).toEqual(old);
    expect(again.json).toEqual(first.r.json);
    expect((await ipamState(c.ds)).allocations).toHaveLength(1);

    const fresh = await addPod({ 'cni.netplugin.org/ipv4pools': JSON.stringify([NEW.name]) });
    expectOk(fresh.r);
    expect(ipsOf(fresh)[0]).toMatch(/^10\.77\.23\.([0-9]|1[0-5])\/32$/);
    // The running pod's address is still configured and routed.
    expect(addrs('eth0', first.netns).map((x) => x.local)).toContain(old[0]!.split('/')[0]);

    await del(first);
    await del(fresh);
    await c.ds.delete('IPPool', NEW.name);
    await expectNothingLeft(c, PREFIX);
  });
});
