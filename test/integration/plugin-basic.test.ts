// ADD / CHECK / DEL of the netplugin binary in every supported CNI version: the
// result's shape per version, and the kernel and datastore state it leaves.
import { describe, expect, it } from 'vitest';
import { SUPPORTED_VERSIONS } from '../../src/cni/types.js';
import { hostVethName } from '../../src/model/names.js';
import { createNetns } from '../support/netns.js';
import {
  HOST_MAC,
  NODE,
  addrs,
  cni,
  expectNothingLeft,
  expectOk,
  ipamState,
  k8sArgs,
  link,
  linkAfterDel,
  netconf,
  poolResource,
  routes,
  sysctl,
  why,
  type Cluster,
  useCluster,
} from '../support/plugin-harness.js';

const POOL = { name: 'basic-v4', cidr: '10.77.1.0/24', blockSize: 28 };
const POOL6 = { name: 'basic-v6', cidr: 'fd77:1::/116', blockSize: 122 };
const GW6 = 'fe80::ecee:eeff:feee:eeee';
let c: Cluster;

useCluster([POOL, POOL6], (x) => (c = x));

const withIpVersion = (v: string) => v.startsWith('0.');

describe.each(SUPPORTED_VERSIONS)('cniVersion %s', (v) => {
  it("ADD sets up the pod, the result has this version's shape, CHECK passes, DEL removes everything", async () => {
    const pod = createNetns('pod');
    const cid = `basic-${v.replace(/\./g, '')}-${process.pid}`;
    const conf = netconf(c, v);
    const add = await cni('ADD', conf, { containerId: cid, netns: pod.path, ifname: 'eth0' });
    expectOk(add);
    const res = add.json;
    const hostIf = hostVethName('npi', cid);
    expect(hostIf).toMatch(/^npi[0-9a-f]{11}$/);

    // Result shape.
    expect(res.cniVersion).toBe(v);
    expect(res.interfaces).toHaveLength(2);
    expect(res.interfaces[0]).toMatchObject({ name: hostIf, mac: HOST_MAC });
    expect(res.interfaces[0].sandbox).toBeUndefined();
    const contMac = link('eth0', pod.name)!.address;
    expect(res.interfaces[1]).toMatchObject({ name: 'eth0', mac: contMac, sandbox: pod.path });
    expect(res.ips).toHaveLength(1);
    const ip = res.ips[0];
    expect(ip.address).toMatch(/^10\.77\.1\.\d+\/32$/);
    expect(ip.gateway).toBe('169.254.1.1');
    expect(ip.interface).toBe(1);
    if (withIpVersion(v)) expect(ip.version).toBe('4');
    else expect(ip.version).toBeUndefined();
    expect(res.routes).toEqual([{ dst: '0.0.0.0/0', gw: '169.254.1.1' }]);
    // mtu on interfaces exists only from 1.1.0 on.
    if (v !== '1.1.0') expect(res.interfaces[1].mtu).toBeUndefined();
    const bare = ip.address.split('/')[0];

    // Kernel: the pair, the container's address and routes, the host's route.
    const h = link(hostIf)!;
    expect(h, 'host veth').toBeDefined();
    expect(h.linkinfo?.info_kind).toBe('veth');
    expect(h.address).toBe(HOST_MAC);
    expect(h.flags).toContain('UP');
    const e0 = link('eth0', pod.name)!;
    expect(e0.linkinfo?.info_kind).toBe('veth');
    expect(e0.flags).toContain('UP');
    expect(
      addrs('eth0', pod.name)
        .filter((a) => a.family === 'inet')
        .map((a) => `${a.local}/${a.prefixlen}`),
    ).toEqual([ip.address]);
    const r4 = routes(4, pod.name);
    expect(r4).toContainEqual(expect.objectContaining({ dst: '169.254.1.1', dev: 'eth0', scope: 'link' }));
    expect(r4).toContainEqual(expect.objectContaining({ dst: 'default', gateway: '169.254.1.1', dev: 'eth0' }));
    expect(routes(4)).toContainEqual(expect.objectContaining({ dst: bare, dev: hostIf, scope: 'link' }));
    expect(sysctl(`net.ipv4.conf.${hostIf}.proxy_arp`)).toBe('1');
    expect(sysctl(`net.ipv4.neigh.${hostIf}.proxy_delay`)).toBe('0');
    expect(sysctl(`net.ipv4.conf.${hostIf}.forwarding`)).toBe('1');
    expect(sysctl(`net.ipv4.conf.${hostIf}.route_localnet`)).toBe('1');
    expect(sysctl('net.ipv4.ip_forward', pod.name)).toBe('0');

    // Datastore: the endpoint (dashes doubled in its name) and the allocation.
    const wepName = `${NODE}-cni-${cid.replace(/-/g, '--')}-eth0`;
    const wep = await c.ds.get('WorkloadEndpoint', wepName, 'default');
    expect(wep.spec).toMatchObject({
      orchestrator: 'cni',
      node: NODE,
      containerID: cid,
      endpoint: 'eth0',
      interfaceName: hostIf,
      ipNetworks: [ip.address],
      mac: contMac,
    });
    const st = await ipamState(c.ds);
    expect(st.handles).toEqual([`k8s-pod-network.${cid}`]);
    expect(st.allocations).toHaveLength(1);

    if (v !== '0.3.0' && v !== '0.3.1') {
      const chk = await cni(
        'CHECK',
        { ...conf, prevResult: res },
        { containerId: cid, netns: pod.path, ifname: 'eth0' },
      );
      expectOk(chk);
    }

    const del = await cni('DEL', { ...conf, prevResult: res }, { containerId: cid, netns: pod.path, ifname: 'eth0' });
    expectOk(del);
    expect(del.stdout.trim()).toBe('');
    expect(await linkAfterDel('eth0', pod.name)).toBeUndefined();
    await expectNothingLeft(c, 'npi');
  });
});

describe('Kubernetes pod', () => {
  it('names the veth after <namespace>.<pod>, the endpoint after the pod, and a repeated ADD returns the same result without a new allocation', async () => {
    const pod = createNetns('pod');
    const cid = `basick8s-${process.pid}`;
    const podName = `web-${process.pid}`;
    const conf = netconf(c, '1.0.0');
    const call = { containerId: cid, netns: pod.path, ifname: 'eth0', args: k8sArgs('my-ns', podName) };
    const add = await cni('ADD', conf, call);
    expectOk(add);
    const hostIf = hostVethName('npi', `my-ns.${podName}`);
    expect(add.json.interfaces[0].name).toBe(hostIf);
    expect(link(hostIf)).toBeDefined();
    const wep = await c.ds.get('WorkloadEndpoint', `${NODE}-k8s-web--${process.pid}-eth0`, 'my-ns');
    expect(wep.spec).toMatchObject({ orchestrator: 'k8s', pod: podName, containerID: cid });

    const again = await cni('ADD', conf, call);
    expectOk(again);
    expect(again.json).toEqual(add.json);
    expect((await ipamState(c.ds)).allocations).toHaveLength(1);

    expectOk(await cni('DEL', conf, call));
    await expectNothingLeft(c, 'npi');
  });

  it('replaces a stale host veth of the same name (left by an earlier sandbox)', async () => {
    const pod = createNetns('pod');
    const podName = `stale-${process.pid}`;
    const hostIf = hostVethName('npi', `ns1.${podName}`);
    // A leftover pair of ours (our host MAC) whose far end sits in a namespace that is still alive.
    const old = createNetns('old');
    const { execFileSync } = await import('node:child_process');
    execFileSync('ip', [
      'link',
      'add',
      hostIf,
      'address',
      HOST_MAC,
      'type',
      'veth',
      'peer',
      'name',
      'eth0',
      'netns',
      old.name,
    ]);
    const staleIndex = (link(hostIf) as unknown as { ifindex: number }).ifindex;
    const conf = netconf(c, '1.0.0');
    const call = {
      containerId: `stale-${process.pid}`,
      netns: pod.path,
      ifname: 'eth0',
      args: k8sArgs('ns1', podName),
    };
    const add = await cni('ADD', conf, call);
    expectOk(add);
    const now = link(hostIf) as unknown as { ifindex: number; address: string };
    expect(now.ifindex).not.toBe(staleIndex);
    expect(now.address).toBe(HOST_MAC);
    expect(await linkAfterDel('eth0', old.name), 'the stale pair is gone with its host end').toBeUndefined();
    expectOk(await cni('CHECK', { ...conf, prevResult: add.json }, call));
    expectOk(await cni('DEL', conf, call));
    await expectNothingLeft(c, 'npi');
  });
});

describe('requested address', () => {
  it('IP= in CNI_ARGS assigns exactly that address from the pool', async () => {
    const pod = createNetns('pod');
    const call = { containerId: `ipreq-${process.pid}`, netns: pod.path, args: 'IgnoreUnknown=1;IP=10.77.1.200' };
    const conf = netconf(c, '1.0.0');
    const add = await cni('ADD', conf, call);
    expectOk(add);
    expect(add.json.ips.map((i: { address: string }) => i.address)).toEqual(['10.77.1.200/32']);
    expect(
      addrs('eth0', pod.name)
        .filter((a) => a.family === 'inet')
        .map((a) => a.local),
    ).toEqual(['10.77.1.200']);
    expectOk(await cni('DEL', conf, call));
    await expectNothingLeft(c, 'npi');
  });
});

describe('interface options', () => {
  it('applies mtu and num_queues to both ends, and ip_forward=1 with allow_ip_forwarding', async () => {
    const pod = createNetns('pod');
    const cid = `opts-${process.pid}`;
    const conf = netconf(c, '1.1.0', { mtu: 1400, num_queues: 3, container_settings: { allow_ip_forwarding: true } });
    const call = { containerId: cid, netns: pod.path, ifname: 'net1' };
    const add = await cni('ADD', conf, call);
    expectOk(add);
    const hostIf = hostVethName('npi', cid);
    for (const l of [link(hostIf)!, link('net1', pod.name)!]) {
      expect(l.mtu, l.ifname).toBe(1400);
      expect(l.num_rx_queues, l.ifname).toBe(3);
      expect(l.num_tx_queues, l.ifname).toBe(3);
    }
    expect(add.json.interfaces[1]).toMatchObject({ name: 'net1', mtu: 1400 });
    expect(sysctl('net.ipv4.ip_forward', pod.name)).toBe('1');
    expectOk(await cni('CHECK', { ...conf, prevResult: add.json }, call));
    expectOk(await cni('DEL', conf, call));
    await expectNothingLeft(c, 'npi');
  });

  it('writes ip_forward=0 explicitly when the namespace came with forwarding on', async () => {
    const pod = createNetns('pod');
    const { execFileSync } = await import('node:child_process');
    execFileSync('ip', ['netns', 'exec', pod.name, 'sysctl', '-qw', 'net.ipv4.ip_forward=1']);
    const cid = `fwd0-${process.pid}`;
    const conf = netconf(c, '1.0.0');
    const add = await cni('ADD', conf, { containerId: cid, netns: pod.path });
    expectOk(add);
    expect(sysctl('net.ipv4.ip_forward', pod.name)).toBe('0');
    expectOk(await cni('DEL', conf, { containerId: cid, netns: pod.path }));
    await expectNothingLeft(c, 'npi');
  });
});

describe.each(['0.3.1', '1.0.0'])('dual stack, cniVersion %s', (v) => {
  it('assigns a /32 and a /128 with the IPv6 default via the host veth link-local, and the IPv6 host side', async () => {
    const pod = createNetns('pod');
    const cid = `dual-${v.replace(/\./g, '')}-${process.pid}`;
    const conf = netconf(c, v, { ipam: { type: 'netplugin-ipam', assign_ipv4: 'true', assign_ipv6: 'true' } });
    const call = { containerId: cid, netns: pod.path };
    const add = await cni('ADD', conf, call);
    expectOk(add);
    const hostIf = hostVethName('npi', cid);
    const ips = add.json.ips as Array<{ address: string; gateway: string; interface: number; version?: string }>;
    expect(ips).toHaveLength(2);
    const v4 = ips.find((i) => !i.address.includes(':'))!;
    const v6 = ips.find((i) => i.address.includes(':'))!;
    expect(v4.address).toMatch(/^10\.77\.1\.\d+\/32$/);
    expect(v6.address).toMatch(/^fd77:1::([0-9a-f]+)?\/128$/);
    expect(v6).toMatchObject({ gateway: GW6, interface: 1 });
    if (v.startsWith('0.')) expect([v4.version, v6.version]).toEqual(['4', '6']);
    expect(add.json.routes).toEqual(
      expect.arrayContaining([
        { dst: '0.0.0.0/0', gw: '169.254.1.1' },
        { dst: '::/0', gw: GW6 },
      ]),
    );

    const contAddrs = addrs('eth0', pod.name)
      .filter((a) => a.scope === 'global')
      .map((a) => `${a.local}/${a.prefixlen}`);
    expect(contAddrs.sort()).toEqual([v4.address, v6.address].sort());
    expect(routes(6, pod.name)).toContainEqual(expect.objectContaining({ dst: 'default', gateway: GW6, dev: 'eth0' }));
    expect(
      addrs(hostIf)
        .filter((a) => a.family === 'inet6')
        .map((a) => a.local),
    ).toContain(GW6);
    expect(routes(6)).toContainEqual(expect.objectContaining({ dst: v6.address.split('/')[0], dev: hostIf }));
    expect(sysctl(`net.ipv6.conf.${hostIf}.proxy_ndp`)).toBe('1');
    expect(sysctl(`net.ipv6.conf.${hostIf}.accept_ra`)).toBe('0');
    expect(sysctl(`net.ipv6.conf.${hostIf}.forwarding`)).toBe('1');
    expect(sysctl('net.ipv6.conf.all.forwarding', pod.name)).toBe('0');
    // The pod reaches the host over IPv6 through its default route (proves the link-local gateway works, no DAD wait).
    // `-w5`: one reply within 5 s (a ping a second). Under a load average of 20+ on
    // 2 cores a single 2 s wait was seen to expire; a broken path still fails.
    const { execFileSync } = await import('node:child_process');
    execFileSync('ip', ['addr', 'add', 'fd77:1:ffff::1/128', 'dev', 'lo']);
    try {
      execFileSync('ip', ['netns', 'exec', pod.name, 'ping', '-6', '-c1', '-w5', 'fd77:1:ffff::1'], {
        stdio: 'ignore',
      });
      execFileSync('ip', ['addr', 'add', '10.77.1.254/32', 'dev', 'lo']);
      execFileSync('ip', ['netns', 'exec', pod.name, 'ping', '-c1', '-w5', '10.77.1.254'], { stdio: 'ignore' });
    } finally {
      execFileSync('ip', ['addr', 'del', 'fd77:1:ffff::1/128', 'dev', 'lo'], { stdio: 'ignore' });
      try {
        execFileSync('ip', ['addr', 'del', '10.77.1.254/32', 'dev', 'lo'], { stdio: 'ignore' });
      } catch {
        /* not added */
      }
    }

    if (v !== '0.3.1') expectOk(await cni('CHECK', { ...conf, prevResult: add.json }, call));
    expectOk(await cni('DEL', conf, call));
    await expectNothingLeft(c, 'npi');
  });
});

describe('STATUS', () => {
  it('succeeds with a ready datastore and a pool with free addresses', async () => {
    const r = await cni('STATUS', netconf(c, '1.1.0'));
    expect(r.code, why(r)).toBe(0);
  });

  it('uses the same pool choice as ADD: a missing pool in ipam.ipv4_pools is code 50 naming it', async () => {
    const r = await cni(
      'STATUS',
      netconf(c, '1.1.0', { ipam: { type: 'netplugin-ipam', ipv4_pools: ['no-such-pool'] } }),
    );
    expect(r.json?.code, why(r)).toBe(50);
    expect(r.json.msg).toMatch(/ipam\.ipv4_pools: pool 'no-such-pool' does not exist/);
  });

  it("answers not ready when the requested pool's nodeSelector does not select this node, as ADD would fail", async () => {
    await c.ds.create({
      ...poolResource({ name: 'status-elsewhere', cidr: '10.77.250.0/24', blockSize: 28 }),
      spec: { cidr: '10.77.250.0/24', blockSize: 28, nodeSelector: 'zone == "nowhere"' },
    });
    try {
      const conf = netconf(c, '1.1.0', { ipam: { type: 'netplugin-ipam', ipv4_pools: ['status-elsewhere'] } });
      const r = await cni('STATUS', conf);
      expect(r.json?.code, why(r)).toBe(50);
      expect(r.json.msg).toMatch(/none of the requested pools selects node 'node1'.*status-elsewhere/);
      const pod = createNetns('pod');
      const add = await cni('ADD', conf, { containerId: `status-sel-${process.pid}`, netns: pod.path, ifname: 'eth0' });
      expect(add.code, why(add)).not.toBe(0);
      expectOk(await cni('DEL', conf, { containerId: `status-sel-${process.pid}`, netns: pod.path, ifname: 'eth0' }));
    } finally {
      await c.ds.delete('IPPool', 'status-elsewhere');
    }
  });
});
