// Pods on three simulated nodes (test/support/topology.ts): A and B share a
// subnet, C is behind a router. One agent per node programs routes to the
// other nodes' blocks; real pings and real datagrams prove the paths.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { API_VERSION, type IPPoolSpec } from '../../src/model/resources.js';
import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { DIST } from '../support/cni.js';
import { Topology, type Pod } from '../support/topology.js';

let topo: Topology;
let pa: Pod;
let pb: Pod;
let pc: Pod;

const V4 = '10.65.0.0/16';
const V6 = 'fd00:65::/48';

async function setPool(name: string, patch: Partial<IPPoolSpec>): Promise<void> {
  const cur = await topo.ds.get('IPPool', name);
  await topo.ds.update({ ...cur, spec: { ...cur.spec, ...patch } });
}

function blockOf(ip: string): string {
  // blockSize 26 in 10.65.0.0/16
  const o = ip.split('.').map(Number);
  return `${o[0]}.${o[1]}.${o[2]}.${o[3]! & 0xc0}/26`;
}

beforeAll(async () => {
  topo = await Topology.create();
  await topo.ds.create({
    apiVersion: API_VERSION,
    kind: 'IPPool',
    metadata: { name: 'p4' },
    spec: { cidr: V4, blockSize: 26, vxlanMode: 'Always', ipipMode: 'Never', natOutgoing: true },
  });
  await topo.ds.create({
    apiVersion: API_VERSION,
    kind: 'IPPool',
    metadata: { name: 'p6' },
    spec: { cidr: V6, blockSize: 122, vxlanMode: 'Always' },
  });
  await Promise.all([topo.startAgent('a'), topo.startAgent('b'), topo.startAgent('c')]);
  // Pods read the pod MTU the agent writes after its first reconcile with the
  // pools in place: add them only once every node's file is there.
  const mtuOf = (n: 'a' | 'b' | 'c') =>
    existsSync(topo.nodes[n].mtuFile) ? readFileSync(topo.nodes[n].mtuFile, 'utf8').trim() : '';
  await topo.waitFor(
    () => (['a', 'b', 'c'] as const).every((n) => mtuOf(n) !== ''),
    30_000,
    () => `no pod MTU file written: a=${mtuOf('a')} b=${mtuOf('b')} c=${mtuOf('c')}`,
  );
  const dual = { ipam: { type: 'netplugin-ipam', assign_ipv4: 'true', assign_ipv6: 'true' } };
  pa = await topo.addPod('a', dual);
  pb = await topo.addPod('b', dual);
  pc = await topo.addPod('c', dual);
}, 300_000);

afterAll(async () => {
  await topo?.destroy();
}, 60_000);

describe('node registration', () => {
  it('registers each node with its address and a VXLAN tunnel address/MAC from the pool', async () => {
    await topo.waitFor(
      async () => {
        const { items } = await topo.ds.list('Node');
        return items.filter((n) => n.spec.vxlanTunnelAddress && n.spec.vxlanTunnelAddressV6).length === 3;
      },
      30_000,
      () => 'nodes did not get tunnel addresses',
    );
    const a = await topo.ds.get('Node', 'node-a');
    expect(a.spec.ipv4Address).toBe('10.200.1.1/24');
    expect(a.spec.ipv6Address).toBe('fd00:200:1::1/64');
    expect(a.spec.vxlanTunnelAddress).toMatch(/^10\.65\./);
    expect(a.spec.vxlanTunnelMACAddr).toMatch(/^66(:[0-9a-f]{2}){5}$/);
    const held = await topo.ds.get('IPAMHandle', 'vxlan-tunnel-addr-node-a');
    expect(Object.keys(held.spec.block).length).toBe(1);
  });
});

describe('node registration: repair', () => {
  it('re-allocates tunnel data removed from its Node, and the peers follow', async () => {
    const b = await topo.ds.get('Node', 'node-b');
    const { vxlanTunnelAddress: _a, vxlanTunnelMACAddr: _m, ...rest } = b.spec;
    await topo.ds.update({ ...b, spec: rest });
    await topo.waitFor(
      async () => !!(await topo.ds.get('Node', 'node-b')).spec.vxlanTunnelAddress,
      20_000,
      () => `node-b got no tunnel address back:\n${topo.nodes.b.agentLog.slice(-2000)}`,
    );
    expect(await topo.reachable(pa, pb.ip4!)).toBe(true);
  });
});

describe('VXLAN Always', () => {
  it('pods reach each other across nodes, on the same subnet and across the router, encapsulated', async () => {
    const before = topo.txPackets('a', 'vxlan.netplugin');
    expect(await topo.reachable(pa, pb.ip4!)).toBe(true);
    expect(await topo.reachable(pa, pc.ip4!)).toBe(true);
    expect(await topo.reachable(pc, pb.ip4!)).toBe(true);
    expect(topo.txPackets('a', 'vxlan.netplugin')).toBeGreaterThan(before);
  });

  it('IPv6 pods reach each other across nodes through vx6.netplugin', async () => {
    const before = topo.txPackets('a', 'vx6.netplugin');
    expect(await topo.reachable(pa, pb.ip6!)).toBe(true);
    expect(await topo.reachable(pa, pc.ip6!)).toBe(true);
    expect(topo.txPackets('a', 'vx6.netplugin')).toBeGreaterThan(before);
  });

  it('writes the pod MTU (underlay 1500 minus the VXLAN/IPv6 overhead of 70) and pods get it', () => {
    expect(readFileSync(topo.nodes.a.mtuFile, 'utf8').trim()).toBe('1430');
    expect(execFileSync('ip', ['-n', pa.ns, '-j', 'link', 'show', 'eth0'], { encoding: 'utf8' })).toContain(
      '"mtu":1430',
    );
    expect(topo.exec('a', 'ip', ['-j', 'link', 'show', 'vxlan.netplugin'])).toContain('"mtu":1450');
  });

  it('has a blackhole route for its own block and VXLAN routes to the others', () => {
    const r = topo.routes('a');
    expect(r).toContainEqual(expect.objectContaining({ type: 'blackhole', dst: blockOf(pa.ip4!) }));
    expect(r).toContainEqual(expect.objectContaining({ dst: blockOf(pb.ip4!), dev: 'vxlan.netplugin' }));
    expect(r).toContainEqual(expect.objectContaining({ dst: blockOf(pc.ip4!), dev: 'vxlan.netplugin' }));
  });
});

describe('VXLANCrossSubnet', () => {
  it('goes direct to B (same subnet) and encapsulates to C (behind the router)', async () => {
    await setPool('p4', { vxlanMode: 'CrossSubnet' });
    await topo.waitFor(
      () => topo.routes('a').some((r) => r.dst === blockOf(pb.ip4!) && r.gateway === '10.200.1.2' && r.dev === 'eth0'),
      15_000,
      () => `no direct route to B's block: ${JSON.stringify(topo.routes('a'))}\n${topo.nodes.a.agentLog.slice(-3000)}`,
    );
    let before = topo.txPackets('a', 'vxlan.netplugin');
    expect(topo.ping(pa, pb.ip4!, 3)).toBe(true);
    expect(topo.txPackets('a', 'vxlan.netplugin')).toBe(before);
    before = topo.txPackets('a', 'vxlan.netplugin');
    expect(await topo.reachable(pa, pc.ip4!)).toBe(true);
    expect(topo.txPackets('a', 'vxlan.netplugin')).toBeGreaterThan(before);
  });
});

describe('Never (no encapsulation)', () => {
  it('routes B directly and gives C (another subnet) no route', async () => {
    await setPool('p4', { vxlanMode: 'Never' });
    await topo.waitFor(
      () => !topo.routes('a').some((r) => r.dst === blockOf(pc.ip4!)),
      15_000,
      () => `route to C's block still there: ${JSON.stringify(topo.routes('a'))}`,
    );
    expect(topo.routes('a')).toContainEqual(expect.objectContaining({ dst: blockOf(pb.ip4!), gateway: '10.200.1.2' }));
    expect(await topo.reachable(pa, pb.ip4!)).toBe(true);
    // The v4 VXLAN device goes once no IPv4 pool uses VXLAN.
    await topo.waitFor(
      () => topo.txPackets('a', 'vxlan.netplugin') === 0,
      15_000,
      () => 'vxlan.netplugin is still there',
    );
    await setPool('p4', { vxlanMode: 'Always' });
    expect(await topo.reachable(pa, pc.ip4!)).toBe(true);
  });
});

describe('IPIP on a kernel without the ipip module', () => {
  it('allocates the IPIP tunnel address, reports the missing module once, and keeps serving the rest', async () => {
    await setPool('p4', { vxlanMode: 'Never', ipipMode: 'Always' });
    await topo.waitFor(
      () => /cannot set up tunl\.netplugin: .*no 'ipip' module/.test(topo.nodes.a.agentLog),
      15_000,
      () => `no ipip error reported:\n${topo.nodes.a.agentLog.slice(-2000)}`,
    );
    await topo.waitFor(
      async () => !!(await topo.ds.get('Node', 'node-a')).spec.ipv4IPIPTunnelAddr,
      15_000,
      () => 'no IPIP tunnel address',
    );
    const held = await topo.ds.get('IPAMHandle', 'ipip-tunnel-addr-node-a');
    expect(Object.keys(held.spec.block)).toHaveLength(1);
    // Routes through the missing device are skipped; our own block keeps its blackhole route.
    expect(topo.routes('a').filter((r) => r.dev === 'tunl.netplugin')).toEqual([]);
    expect(topo.routes('a')).toContainEqual(expect.objectContaining({ type: 'blackhole', dst: blockOf(pa.ip4!) }));
    // The IPv6 pool (VXLAN) is still served.
    expect(await topo.reachable(pa, pb.ip6!)).toBe(true);
    expect(topo.nodes.a.agentLog.match(/cannot set up tunl\.netplugin/g)).toHaveLength(1);
    await setPool('p4', { vxlanMode: 'Always', ipipMode: 'Never' });
    await topo.waitFor(
      async () => !(await topo.ds.get('Node', 'node-a')).spec.ipv4IPIPTunnelAddr,
      15_000,
      () => 'IPIP tunnel address not released',
    );
    await expect(topo.ds.get('IPAMHandle', 'ipip-tunnel-addr-node-a')).rejects.toThrow();
    expect(await topo.reachable(pa, pc.ip4!)).toBe(true);
  });
});

describe('natOutgoing', () => {
  beforeAll(async () => {
    await topo.startInternetServer();
  });

  it('masquerades a natOutgoing pool to the node address, and keeps the pod address otherwise', async () => {
    await topo.waitFor(
      async () => (await topo.sourceSeenFrom(pa)) === '10.200.1.1',
      15_000,
      () => 'pod A was not masqueraded to 10.200.1.1',
    );
    expect(await topo.sourceSeenFrom(pc)).toBe('10.200.2.3');
    await setPool('p4', { natOutgoing: false });
    await topo.waitFor(
      async () => (await topo.sourceSeenFrom(pa)) === pa.ip4,
      15_000,
      () => `pod A still masqueraded after natOutgoing was turned off`,
    );
    await setPool('p4', { natOutgoing: true });
    await topo.waitFor(
      async () => (await topo.sourceSeenFrom(pa)) === '10.200.1.1',
      15_000,
      () => 'natOutgoing back on did not masquerade',
    );
  });

  it('never masquerades pod-to-pod traffic across nodes', async () => {
    const srv = topo.spawnIn(
      pb.ns,
      `const s=require('dgram').createSocket('udp4');s.on('message',(m,r)=>console.log(r.address));s.bind(9998,()=>console.log('listening'));`,
    );
    await topo.waitFor(
      () => srv.lines.includes('listening'),
      15_000,
      () => 'pod server did not start',
    );
    for (const from of [pa, pc]) {
      const n = srv.lines.length;
      await topo.waitFor(
        () => {
          topo.exec(from.node, 'ip', ['netns', 'exec', from.ns, 'bash', '-c', `echo hi > /dev/udp/${pb.ip4}/9998`]);
          return srv.lines.length > n;
        },
        15_000,
        () => 'no datagram reached pod B',
      );
      expect(srv.lines[srv.lines.length - 1]).toBe(from.ip4);
    }
    srv.proc.kill();
  });
});

describe('allowedUses', () => {
  it('a [Tunnel]-only pool gives no pod address through IP= or the netconf pools: a clear CNI error, nothing left behind', async () => {
    await topo.ds.create({
      apiVersion: API_VERSION,
      kind: 'IPPool',
      metadata: { name: 'tun-only' },
      spec: { cidr: '10.66.0.0/24', blockSize: 26, allowedUses: ['Tunnel'] },
    });
    try {
      for (const [extra, args] of [
        [{}, 'IgnoreUnknown=1;IP=10.66.0.5'],
        [{ ipam: { type: 'netplugin-ipam', ipv4_pools: ['tun-only'] } }, undefined],
      ] as const) {
        const podNs = `xnode-au-${process.pid}`;
        execFileSync('ip', ['netns', 'add', podNs]);
        try {
          const r = await topo.cni('a', 'ADD', `au${process.pid}`, podNs, extra, args);
          expect(r.code, r.stdout + r.stderr).not.toBe(0);
          expect(r.json.msg).toMatch(
            /pool 'tun-only' \(10\.66\.0\.0\/24\).* allowedUses (is )?\[Tunnel\]: it gives no Workload addresses/,
          );
          expect(execFileSync('ip', ['-n', podNs, '-j', 'link', 'show'], { encoding: 'utf8' })).not.toContain('eth0');
        } finally {
          execFileSync('ip', ['netns', 'del', podNs]);
        }
      }
      expect((await topo.ds.list('IPAMBlock')).items.filter((b) => b.spec.cidr.startsWith('10.66.'))).toEqual([]);
    } finally {
      await topo.ds.delete('IPPool', 'tun-only');
    }
  });
});

describe('agent restart', () => {
  it('keeps an established TCP connection between pods on two nodes, and leaves routes that are right untouched', async () => {
    const server = topo.spawnIn(
      pb.ns,
      `require('net').createServer((s)=>s.on('data',(d)=>s.write(d))).listen(7000,'${pb.ip4}',()=>console.log('listening'));`,
    );
    await topo.waitFor(
      () => server.lines.includes('listening'),
      15_000,
      () => 'echo server did not start',
    );
    const client = topo.spawnIn(
      pa.ns,
      `const s=require('net').connect(7000,'${pb.ip4}');let n=0;s.on('connect',()=>{console.log('connected');setInterval(()=>s.write('x'+(n++)+'\\n'),100)});` +
        `s.on('data',(d)=>console.log('echo '+d.toString().trim().split('\\n').pop()));s.on('error',(e)=>console.log('error '+e.code));s.on('close',()=>console.log('closed'));`,
    );
    await topo.waitFor(
      () => client.lines.includes('connected'),
      15_000,
      () => `client did not connect: ${client.lines.join(' ')}`,
    );
    const routesBefore = topo.exec('a', 'ip', ['-d', 'route', 'show', 'proto', '80']);
    await topo.stopAgent('a');
    await topo.stopAgent('b');
    await Promise.all([topo.startAgent('a'), topo.startAgent('b')]);
    await topo.waitFor(
      () =>
        /routes reconciled|pod MTU/.test(topo.nodes.a.agentLog) ||
        topo.nodes.a.agentLog.includes('pod network controllers started'),
      15_000,
      () => 'agent a did not come back',
    );
    // Give the restarted agents time to reconcile, then check the connection kept echoing throughout.
    const echoes = client.lines.filter((l) => l.startsWith('echo')).length;
    await topo.waitFor(
      () => client.lines.filter((l) => l.startsWith('echo')).length > echoes + 10,
      15_000,
      () => `no echoes after restart: ${client.lines.slice(-5).join(' ')}`,
    );
    expect(client.lines.filter((l) => l.startsWith('error') || l === 'closed')).toEqual([]);
    expect(topo.exec('a', 'ip', ['-d', 'route', 'show', 'proto', '80'])).toBe(routesBefore);
    expect(topo.nodes.a.agentLog).not.toMatch(/routes reconciled/);
    client.proc.kill();
    server.proc.kill();
  });

  it('removes stale routes, neighbours and FDB entries of ours at start, and nothing else', async () => {
    await topo.stopAgent('a');
    topo.exec('a', 'ip', ['route', 'add', '10.99.0.0/24', 'via', '10.200.1.2', 'proto', '80']);
    topo.exec('a', 'ip', ['route', 'add', '10.98.0.0/24', 'via', '10.200.1.2', 'proto', 'static']);
    topo.exec('a', 'ip', [
      'neigh',
      'add',
      '10.65.255.1',
      'lladdr',
      '66:00:00:00:99:99',
      'dev',
      'vxlan.netplugin',
      'nud',
      'permanent',
    ]);
    topo.exec('a', 'bridge', [
      'fdb',
      'add',
      '66:00:00:00:99:99',
      'dev',
      'vxlan.netplugin',
      'dst',
      '10.200.1.99',
      'self',
      'permanent',
    ]);
    await topo.startAgent('a');
    await topo.waitFor(
      () => !topo.routes('a').some((r) => r.dst === '10.99.0.0/24'),
      15_000,
      () => `stale route kept: ${JSON.stringify(topo.routes('a'))}`,
    );
    expect(topo.exec('a', 'ip', ['route', 'show', '10.98.0.0/24'])).toMatch(/10\.98\.0\.0\/24 via 10\.200\.1\.2/);
    await topo.waitFor(
      () => !topo.exec('a', 'ip', ['neigh', 'show', 'dev', 'vxlan.netplugin']).includes('10.65.255.1'),
      15_000,
      () => 'stale neighbour kept',
    );
    expect(topo.exec('a', 'bridge', ['fdb', 'show', 'dev', 'vxlan.netplugin'])).not.toMatch(/10\.200\.1\.99/);
    expect(await topo.reachable(pa, pb.ip4!)).toBe(true);
    topo.exec('a', 'ip', ['route', 'del', '10.98.0.0/24']);
  });
});

describe('removal', () => {
  it('removes the routes of a deleted pool, and puts them back when it returns', async () => {
    const p6 = await topo.ds.get('IPPool', 'p6');
    await topo.ds.delete('IPPool', 'p6');
    await topo.waitFor(
      () => topo.routes('a', 6).length === 0,
      15_000,
      () => `v6 routes kept: ${JSON.stringify(topo.routes('a', 6))}`,
    );
    const { resourceVersion: _rv, ...meta } = p6.metadata;
    await topo.ds.create({ ...p6, metadata: meta });
    await topo.waitFor(
      () => topo.routes('a', 6).length >= 3,
      15_000,
      () => `v6 routes not back: ${JSON.stringify(topo.routes('a', 6))}`,
    );
  });

  it('netpluginctl delete node releases its tunnel addresses and affinities; the other nodes drop its routes', async () => {
    expect(await topo.reachable(pa, pc.ip4!)).toBe(true);
    const c = await topo.ds.get('Node', 'node-c');
    await topo.stopAgent('c');
    // Its pod goes first (as a drained node's would), so its block is empty apart from the tunnel address.
    await topo.delPod(pc);
    const out = execFileSync(process.execPath, [join(DIST, 'netpluginctl.mjs'), 'delete', 'node', 'node-c'], {
      encoding: 'utf8',
      env: { ...process.env, ETCD_ENDPOINTS: topo.etcd.endpoint },
    });
    expect(out).toContain('node/node-c deleted');
    expect(out).toContain(`released tunnel address ${c.spec.vxlanTunnelAddress} (handle vxlan-tunnel-addr-node-c)`);
    expect(out).toContain(`released block ${blockOf(pc.ip4!)}`);
    await expect(topo.ds.get('IPAMHandle', 'vxlan-tunnel-addr-node-c')).rejects.toThrow(/not found|NotFound/i);
    expect((await topo.ds.list('BlockAffinity')).items.filter((a) => a.spec.node === 'node-c')).toEqual([]);
    await topo.waitFor(
      () => !topo.routes('a').some((r) => r.dst === blockOf(pc.ip4!)),
      15_000,
      () => `route to C's block still there: ${JSON.stringify(topo.routes('a'))}`,
    );
    expect(topo.routes('a').some((r) => r.dst === blockOf(pb.ip4!))).toBe(true);
  });
});
