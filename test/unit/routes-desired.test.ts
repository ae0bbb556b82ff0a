// The routing state the agent computes from the datastore (pure): per pool
// mode and peer location, the routes, neighbours and FDB entries, the devices
// needed and the pod MTU overhead; the natOutgoing nft script; the node address
// autodetection forms.
import { describe, expect, it } from 'vitest';
import { computeDesired, poolViews, type ClusterView } from '../../src/agent/routes/desired.js';
import { natScript } from '../../src/agent/nat/index.js';
import { detectAddress, parseAutodetect, vtepMac } from '../../src/agent/node-registration.js';
import type { IPPoolSpec, NodeSpec } from '../../src/model/resources.js';
import { parseCidr } from '../../src/net/cidr.js';
import type { AddrInfo, LinkInfo } from '../../src/native/index.js';

const nodes = new Map<string, NodeSpec>([
  ['a', { ipv4Address: '10.200.1.1/24', vxlanTunnelAddress: '10.65.0.0', vxlanTunnelMACAddr: '66:00:00:00:00:0a' }],
  ['b', { ipv4Address: '10.200.1.2/24', vxlanTunnelAddress: '10.65.0.64', vxlanTunnelMACAddr: '66:00:00:00:00:0b' }],
  ['c', { ipv4Address: '10.200.2.3/24', vxlanTunnelAddress: '10.65.0.128', vxlanTunnelMACAddr: '66:00:00:00:00:0c' }],
]);
const subnets = [parseCidr('10.200.1.0/24')];

function view(spec: Partial<IPPoolSpec>, extra: Partial<ClusterView> = {}): ClusterView {
  return {
    me: 'a',
    nodes,
    pools: poolViews([{ metadata: { name: 'p' }, spec: { cidr: '10.65.0.0/16', ...spec } }]),
    blocks: [
      { cidr: '10.65.0.0/26', node: 'a' },
      { cidr: '10.65.0.64/26', node: 'b' },
      { cidr: '10.65.0.128/26', node: 'c' },
      { cidr: '10.65.1.0/26', node: undefined },
    ],
    ...extra,
  };
}

describe('computeDesired', () => {
  it('VXLAN Always: onlink routes via tunnel addresses, neighbour and FDB per peer, blackhole for our block', () => {
    const d = computeDesired(view({ vxlanMode: 'Always' }), subnets);
    expect(d.routes).toEqual([
      { family: 4, dst: '10.65.0.0/26', type: 'blackhole' },
      { family: 4, dst: '10.65.0.64/26', type: 'unicast', gateway: '10.65.0.64', dev: 'vxlan.netplugin', onlink: true },
      {
        family: 4,
        dst: '10.65.0.128/26',
        type: 'unicast',
        gateway: '10.65.0.128',
        dev: 'vxlan.netplugin',
        onlink: true,
      },
    ]);
    expect(d.neighbours.get('vxlan.netplugin')).toEqual([
      { dst: '10.65.0.64', lladdr: '66:00:00:00:00:0b' },
      { dst: '10.65.0.128', lladdr: '66:00:00:00:00:0c' },
    ]);
    expect(d.fdb.get('vxlan.netplugin')).toEqual([
      { lladdr: '66:00:00:00:00:0b', dst: '10.200.1.2' },
      { lladdr: '66:00:00:00:00:0c', dst: '10.200.2.3' },
    ]);
    expect(d.devices).toEqual({ vxlan4: true, vxlan6: false, ipip: false });
    expect(d.overhead).toBe(50);
  });

  it('VXLANCrossSubnet: direct to the same subnet, VXLAN across', () => {
    const d = computeDesired(view({ vxlanMode: 'CrossSubnet' }), subnets);
    expect(d.routes.find((r) => r.dst === '10.65.0.64/26')).toEqual({
      family: 4,
      dst: '10.65.0.64/26',
      type: 'unicast',
      gateway: '10.200.1.2',
    });
    expect(d.routes.find((r) => r.dst === '10.65.0.128/26')).toMatchObject({
      dev: 'vxlan.netplugin',
      gateway: '10.65.0.128',
    });
    expect(d.fdb.get('vxlan.netplugin')).toEqual([{ lladdr: '66:00:00:00:00:0c', dst: '10.200.2.3' }]);
  });

  it('Never: direct on-link, and a warning (no route) for a peer in another subnet', () => {
    const d = computeDesired(view({}), subnets);
    expect(d.routes.map((r) => r.dst)).toEqual(['10.65.0.0/26', '10.65.0.64/26']);
    expect(d.warnings.join('\n')).toMatch(/node c \(10\.200\.2\.3\) is not on a directly connected subnet/);
    expect(d.devices).toEqual({ vxlan4: false, vxlan6: false, ipip: false });
    expect(d.overhead).toBe(0);
  });

  it('IPIP Always and CrossSubnet: routes via the node IP on tunl.netplugin, overhead 20', () => {
    let d = computeDesired(view({ ipipMode: 'Always' }), subnets);
    expect(d.routes.find((r) => r.dst === '10.65.0.64/26')).toEqual({
      family: 4,
      dst: '10.65.0.64/26',
      type: 'unicast',
      gateway: '10.200.1.2',
      dev: 'tunl.netplugin',
      onlink: true,
    });
    expect(d.devices.ipip).toBe(true);
    expect(d.overhead).toBe(20);
    d = computeDesired(view({ ipipMode: 'CrossSubnet' }), subnets);
    expect(d.routes.find((r) => r.dst === '10.65.0.64/26')).toEqual({
      family: 4,
      dst: '10.65.0.64/26',
      type: 'unicast',
      gateway: '10.200.1.2',
    });
    expect(d.routes.find((r) => r.dst === '10.65.0.128/26')).toMatchObject({
      dev: 'tunl.netplugin',
      gateway: '10.200.2.3',
    });
  });

  it("BGP on: no routes to other nodes' blocks of a pool without encapsulation (BIRD has them); our blackhole, VXLAN and IPIP stay", () => {
    const never = computeDesired(view({ vxlanMode: 'Never', ipipMode: 'Never' }, { bgp: true }), subnets);
    expect(never.routes).toEqual([{ family: 4, dst: '10.65.0.0/26', type: 'blackhole' }]);
    expect(computeDesired(view({ vxlanMode: 'Never', ipipMode: 'Never' }), subnets).routes).toContainEqual({
      family: 4,
      dst: '10.65.0.64/26',
      type: 'unicast',
      gateway: '10.200.1.2',
    });
    for (const spec of [{ vxlanMode: 'Always' as const }, { ipipMode: 'Always' as const }]) {
      expect(computeDesired(view(spec, { bgp: true }), subnets).routes).toEqual(
        computeDesired(view(spec), subnets).routes,
      );
    }
  });

  it('no routes for blocks of a deleted pool or a deleted node, nor for unaffine blocks', () => {
    expect(computeDesired({ ...view({ vxlanMode: 'Always' }), pools: [] }, subnets).routes).toEqual([]);
    const without = new Map(nodes);
    without.delete('b');
    const d = computeDesired(view({ vxlanMode: 'Always' }, { nodes: without }), subnets);
    expect(d.routes.map((r) => r.dst)).toEqual(['10.65.0.0/26', '10.65.0.128/26']);
  });

  it('IPv6 VXLAN uses vx6.netplugin and the v6 tunnel data; overhead 70', () => {
    const v6nodes = new Map<string, NodeSpec>([
      [
        'a',
        {
          ipv6Address: 'fd00:200:1::1/64',
          vxlanTunnelAddressV6: 'fd00:65::',
          vxlanTunnelMACAddrV6: '66:00:00:00:01:0a',
        },
      ],
      [
        'b',
        {
          ipv6Address: 'fd00:200:1::2/64',
          vxlanTunnelAddressV6: 'fd00:65::40',
          vxlanTunnelMACAddrV6: '66:00:00:00:01:0b',
        },
      ],
    ]);
    const d = computeDesired(
      {
        me: 'a',
        nodes: v6nodes,
        pools: poolViews([{ metadata: { name: 'p6' }, spec: { cidr: 'fd00:65::/48', vxlanMode: 'Always' } }]),
        blocks: [{ cidr: 'fd00:65::40/122', node: 'b' }],
      },
      [parseCidr('fd00:200:1::/64')],
    );
    expect(d.routes).toEqual([
      {
        family: 6,
        dst: 'fd00:65::40/122',
        type: 'unicast',
        gateway: 'fd00:65::40',
        dev: 'vx6.netplugin',
        onlink: true,
      },
    ]);
    expect(d.fdb.get('vx6.netplugin')).toEqual([{ lladdr: '66:00:00:00:01:0b', dst: 'fd00:200:1::2' }]);
    expect(d.overhead).toBe(70);
  });
});

describe('natScript', () => {
  it('masquerades natOutgoing pools to destinations outside every pool and node address; replaces the table atomically', () => {
    const s = natScript({
      pools: poolViews([
        { metadata: { name: 'nat' }, spec: { cidr: '10.65.0.0/16', natOutgoing: true } },
        { metadata: { name: 'plain' }, spec: { cidr: '10.66.0.0/16' } },
      ]),
      nodeIPs: ['10.200.1.1', '10.200.1.2', 'fd00::1'],
    });
    expect(s).toContain('table ip netplugin-nat {}\ndelete table ip netplugin-nat\ntable ip netplugin-nat {');
    expect(s).toContain(
      'set pools { type ipv4_addr; flags interval; auto-merge; elements = { 10.65.0.0/16, 10.66.0.0/16 }; }',
    );
    expect(s).toContain('set nat-pools { type ipv4_addr; flags interval; auto-merge; elements = { 10.65.0.0/16 }; }');
    expect(s).toContain('set nodes { type ipv4_addr; elements = { 10.200.1.1, 10.200.1.2 }; }');
    expect(s).toContain('ip saddr @nat-pools ip daddr != @pools ip daddr != @nodes masquerade');
    // No IPv6 natOutgoing pool: the ip6 table is only removed.
    expect(s).toContain('table ip6 netplugin-nat {}\ndelete table ip6 netplugin-nat\n');
    expect(s).not.toContain('table ip6 netplugin-nat {\n');
  });

  it('a disabled natOutgoing pool masquerades nothing', () => {
    const s = natScript({
      pools: poolViews([
        { metadata: { name: 'nat' }, spec: { cidr: '10.65.0.0/16', natOutgoing: true, disabled: true } },
      ]),
      nodeIPs: [],
    });
    expect(s).not.toContain('masquerade');
  });
});

describe('node address autodetection', () => {
  const links: LinkInfo[] = [
    { index: 1, name: 'lo', kind: 'loopback', mtu: 65536, mac: '', up: true, flags: 0, operState: 0 },
    { index: 2, name: 'docker0', kind: 'bridge', mtu: 1500, mac: '', up: true, flags: 0, operState: 0 },
    { index: 3, name: 'ens3', kind: '', mtu: 1500, mac: '', up: true, flags: 0, operState: 0 },
    { index: 4, name: 'vxlan.netplugin', kind: 'vxlan', mtu: 1450, mac: '', up: true, flags: 0, operState: 0 },
    { index: 5, name: 'ens4', kind: '', mtu: 1500, mac: '', up: true, flags: 0, operState: 0 },
  ];
  const addr = (index: number, address: string, prefixLen: number, scope = 0): AddrInfo => ({
    index,
    family: address.includes(':') ? 6 : 4,
    cidr: `${address}/${prefixLen}`,
    address,
    prefixLen,
    scope,
    flags: 0,
  });
  const addrs = [
    addr(1, '127.0.0.1', 8, 254),
    addr(2, '172.17.0.1', 16),
    addr(4, '10.65.0.1', 32),
    addr(3, '192.0.2.10', 24),
    addr(5, '198.51.100.7', 24),
    addr(3, '2001:db8::10', 64),
  ];
  const nl = {
    linkList: () => links,
    addrList: (o?: { family?: 4 | 6 }) => addrs.filter((a) => !o?.family || a.family === o.family),
  };

  it('first-found skips loopback, bridges and our own devices', async () => {
    expect(await detectAddress(nl, 4, parseAutodetect('first-found'))).toBe('192.0.2.10/24');
    expect(await detectAddress(nl, 6, parseAutodetect('first-found'))).toBe('2001:db8::10/64');
  });

  it('interface=REGEX and cidr=CIDR pick the matching address', async () => {
    expect(await detectAddress(nl, 4, parseAutodetect('interface=ens4'))).toBe('198.51.100.7/24');
    expect(await detectAddress(nl, 4, parseAutodetect('interface=eth.*'))).toBeUndefined();
    expect(await detectAddress(nl, 4, parseAutodetect('cidr=198.51.100.0/24,203.0.113.0/24'))).toBe('198.51.100.7/24');
  });

  it('rejects malformed methods with a message naming the forms', () => {
    expect(() => parseAutodetect('nearest')).toThrow(
      /expected first-found, interface=REGEX, can-reach=ADDR or cidr=CIDR/,
    );
    expect(() => parseAutodetect('can-reach=example')).toThrow(/can-reach=example: give an IP address/);
    expect(() => parseAutodetect('cidr=10.0.0.0/99')).toThrow(/'10\.0\.0\.0\/99' is not a CIDR/);
  });

  it('derives a stable locally administered VTEP MAC per node and family', () => {
    expect(vtepMac('node-a', 4)).toBe(vtepMac('node-a', 4));
    expect(vtepMac('node-a', 4)).not.toBe(vtepMac('node-a', 6));
    expect(vtepMac('node-a', 4)).toMatch(/^66(:[0-9a-f]{2}){5}$/);
  });
});
