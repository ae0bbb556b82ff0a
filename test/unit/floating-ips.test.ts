// Floating IPs as every node computes them from the datastore (pure): which
// endpoint holds each address (validation of the tenant-written ipNATs, the
// oldest claim winning), the routes to the holder's node, and the nft table
// the holder's node loads (checked by nft itself in a throwaway namespace in
// test/integration/floating-ips.test.ts; here its exact text).
import { describe, expect, it } from 'vitest';
import { floatingScript, heldBy, parseTranslations, resolveFloatingIPs } from '../../src/agent/nat/floating.js';
import { computeDesired, poolViews, type ClusterView } from '../../src/agent/routes/desired.js';
import type { IPPoolSpec, NodeSpec } from '../../src/model/resources.js';
import { parseCidr } from '../../src/net/cidr.js';

const pools = poolViews([
  { metadata: { name: 'pods' }, spec: { cidr: '10.172.0.0/24', vxlanMode: 'Always' } },
  { metadata: { name: 'fip' }, spec: { cidr: '10.172.200.0/24', vxlanMode: 'Always', disabled: true } },
  { metadata: { name: 'pods6' }, spec: { cidr: 'fd72::/64', vxlanMode: 'Always' } },
]);

function wep(
  name: string,
  node: string,
  ips: string[],
  nats: unknown,
  created = '2026-11-27T10:00:00Z',
): {
  metadata: { name: string; namespace: string; creationTimestamp: string };
  spec: { node: string; ipNetworks: string[]; ipNATs: never; pod: string };
} {
  return {
    metadata: { name, namespace: 'ns', creationTimestamp: created },
    spec: { node, ipNetworks: ips, ipNATs: nats as never, pod: name },
  };
}

describe('resolveFloatingIPs', () => {
  it('pairs each valid entry with its endpoint and node, in canonical form', () => {
    const v = resolveFloatingIPs(
      [
        wep(
          'p1',
          'a',
          ['10.172.0.5/32', 'fd72::5/128'],
          [
            { internalIP: '10.172.0.5', externalIP: '10.172.200.7' },
            { internalIP: 'fd72:0::5', externalIP: 'fd72:0:0:0::ff' },
          ],
        ),
      ],
      pools,
    );
    expect(v.invalid).toEqual([]);
    expect(v.conflicts).toEqual([]);
    expect([...v.held.values()].map((c) => [c.external, c.internal, c.node, c.endpoint])).toEqual([
      ['10.172.200.7', '10.172.0.5', 'a', 'ns/p1'],
      ['fd72::ff', 'fd72::5', 'a', 'ns/p1'],
    ]);
    expect(heldBy(v, 'a')).toHaveLength(2);
    expect(heldBy(v, 'b')).toEqual([]);
  });

  it("refuses, one entry at a time, what another tenant could abuse: not its own address, outside every pool, another pod's address, bad text", () => {
    const other = wep('victim', 'b', ['10.172.0.9/32'], undefined);
    const bad = wep(
      'bad',
      'a',
      ['10.172.0.5/32'],
      [
        { internalIP: '10.172.0.9', externalIP: '10.172.200.1' }, // DNAT to another pod
        { internalIP: '10.172.0.5', externalIP: '10.200.1.1' }, // a node's address, in no pool
        { internalIP: '10.172.0.5', externalIP: '10.172.0.9' }, // another pod's own address
        { internalIP: '10.172.0.5', externalIP: '10.172.200.2; flush ruleset' },
        { internalIP: '10.172.0.5', externalIP: 'fd72::9' },
        'garbage',
        { internalIP: '10.172.0.5', externalIP: '10.172.200.3' }, // the one good entry
      ],
    );
    const v = resolveFloatingIPs([other, bad], pools);
    expect([...v.held.keys()]).toEqual(['10.172.200.3']);
    const problems = v.invalid.map((i) => i.problem).join('\n');
    expect(problems).toMatch(/internalIP 10\.172\.0\.9 is not one of the endpoint's own addresses/);
    expect(problems).toMatch(/floating IP 10\.200\.1\.1 is not inside any IP pool/);
    expect(problems).toMatch(/floating IP 10\.172\.0\.9 is the address of endpoint ns\/victim/);
    expect(problems).toMatch(/externalIP is not an IP address/);
    expect(problems).toMatch(/floating IP fd72::9 is IPv6 but its internalIP 10\.172\.0\.5 is not/);
    expect(v.invalid).toHaveLength(6);
    expect(v.invalid.every((i) => i.endpoint === 'ns/bad' && i.node === 'a')).toBe(true);
    expect(
      resolveFloatingIPs([wep('x', 'a', ['10.172.0.5/32'], { not: 'a list' })], pools).invalid[0]!.problem,
    ).toMatch(/not a list/);
  });

  it('two endpoints claiming one address: the older holds it whatever the order listed; a tie goes by name; the other is reported', () => {
    const old = wep(
      'old',
      'a',
      ['10.172.0.5/32'],
      [{ internalIP: '10.172.0.5', externalIP: '10.172.200.7' }],
      '2026-11-27T10:00:00Z',
    );
    const young = wep(
      'a-young',
      'c',
      ['10.172.0.6/32'],
      [{ internalIP: '10.172.0.6', externalIP: '10.172.200.7' }],
      '2026-11-27T10:00:01Z',
    );
    for (const order of [
      [old, young],
      [young, old],
    ]) {
      const v = resolveFloatingIPs(order, pools);
      expect(v.held.get('10.172.200.7')).toMatchObject({ endpoint: 'ns/old', node: 'a', internal: '10.172.0.5' });
      expect(v.conflicts).toEqual([
        expect.objectContaining({
          external: '10.172.200.7',
          holder: expect.objectContaining({ endpoint: 'ns/old' }),
          refused: expect.objectContaining({ endpoint: 'ns/a-young', node: 'c' }),
        }),
      ]);
    }
    // The holder gone (DEL), the other takes it over.
    expect(resolveFloatingIPs([young], pools).held.get('10.172.200.7')).toMatchObject({
      endpoint: 'ns/a-young',
      node: 'c',
    });
    const tie = { ...young, metadata: { ...young.metadata, creationTimestamp: old.metadata.creationTimestamp } };
    expect(resolveFloatingIPs([old, tie], pools).held.get('10.172.200.7')!.endpoint).toBe('ns/a-young');
  });
});

const nodes = new Map<string, NodeSpec>([
  ['a', { ipv4Address: '10.200.1.1/24', vxlanTunnelAddress: '10.172.0.0', vxlanTunnelMACAddr: '66:00:00:00:00:0a' }],
  ['b', { ipv4Address: '10.200.1.2/24', vxlanTunnelAddress: '10.172.0.64', vxlanTunnelMACAddr: '66:00:00:00:00:0b' }],
  ['c', { ipv4Address: '10.200.2.3/24', vxlanTunnelAddress: '10.172.0.128', vxlanTunnelMACAddr: '66:00:00:00:00:0c' }],
]);

function view(
  me: string,
  spec: Partial<IPPoolSpec>,
  floating: NonNullable<ClusterView['floating']>,
  extra: Partial<ClusterView> = {},
): ClusterView {
  return {
    me,
    nodes,
    pools: poolViews([{ metadata: { name: 'fip' }, spec: { cidr: '10.172.200.0/24', disabled: true, ...spec } }]),
    blocks: [],
    floating,
    ...extra,
  };
}

describe('computeDesired: floating IPs', () => {
  const held = [{ external: '10.172.200.7', internal: '10.172.0.5', node: 'a' }];

  it("other nodes route the /32 to the holder by the floating pool's mode (disabled pool: the device still comes up)", () => {
    const d = computeDesired(view('b', { vxlanMode: 'Always' }, held), [parseCidr('10.200.1.0/24')]);
    expect(d.routes).toEqual([
      {
        family: 4,
        dst: '10.172.200.7/32',
        type: 'unicast',
        gateway: '10.172.0.0',
        dev: 'vxlan.netplugin',
        onlink: true,
      },
    ]);
    expect(d.neighbours.get('vxlan.netplugin')).toEqual([{ dst: '10.172.0.0', lladdr: '66:00:00:00:00:0a' }]);
    expect(d.fdb.get('vxlan.netplugin')).toEqual([{ lladdr: '66:00:00:00:00:0a', dst: '10.200.1.1' }]);
    expect(d.devices.vxlan4).toBe(true);
    const direct = computeDesired(view('b', {}, held), [parseCidr('10.200.1.0/24')]);
    expect(direct.routes).toEqual([{ family: 4, dst: '10.172.200.7/32', type: 'unicast', gateway: '10.200.1.1' }]);
    const ipip = computeDesired(view('c', { ipipMode: 'Always' }, held), [parseCidr('10.200.2.0/24')]);
    expect(ipip.routes).toEqual([
      {
        family: 4,
        dst: '10.172.200.7/32',
        type: 'unicast',
        gateway: '10.200.1.1',
        dev: 'tunl.netplugin',
        onlink: true,
      },
    ]);
    expect(ipip.devices.ipip).toBe(true);
  });

  it("the holder's node routes it to the pod; it moves with the pod; a floating IP no one holds, or outside every pool, has no route", () => {
    expect(computeDesired(view('a', { vxlanMode: 'Always' }, held), []).routes).toEqual([
      { family: 4, dst: '10.172.200.7/32', type: 'unicast', gateway: '10.172.0.5' },
    ]);
    const moved = [{ external: '10.172.200.7', internal: '10.172.0.130', node: 'c' }];
    expect(computeDesired(view('a', { vxlanMode: 'Always' }, moved), []).routes).toEqual([
      {
        family: 4,
        dst: '10.172.200.7/32',
        type: 'unicast',
        gateway: '10.172.0.128',
        dev: 'vxlan.netplugin',
        onlink: true,
      },
    ]);
    expect(computeDesired(view('b', { vxlanMode: 'Always' }, []), []).routes).toEqual([]);
    expect(computeDesired(view('b', { vxlanMode: 'Always' }, held, { pools: [] }), []).routes).toEqual([]);
  });

  it('BGP on: an enabled pool without encapsulation is left to BIRD (the holder advertises it); a disabled one is not advertised, so routed here', () => {
    expect(
      computeDesired(view('b', { disabled: false }, held, { bgp: true }), [parseCidr('10.200.1.0/24')]).routes,
    ).toEqual([]);
    expect(computeDesired(view('b', {}, held, { bgp: true }), [parseCidr('10.200.1.0/24')]).routes).toEqual([
      { family: 4, dst: '10.172.200.7/32', type: 'unicast', gateway: '10.200.1.1' },
    ]);
    expect(
      computeDesired(view('b', { vxlanMode: 'Always' }, held, { bgp: true }), [parseCidr('10.200.1.0/24')]).routes,
    ).toHaveLength(1);
  });
});

describe('floatingScript', () => {
  it('no claim: only removes the table', () => {
    expect(floatingScript([])).toBe('table inet netplugin-floating {}\ndelete table inet netplugin-floating\n');
  });

  it('DNAT maps and the hairpin SNAT per family, addresses only as typed elements', () => {
    const v = resolveFloatingIPs(
      [
        wep(
          'p1',
          'a',
          ['10.172.0.5/32', 'fd72::5/128'],
          [
            { internalIP: '10.172.0.5', externalIP: '10.172.200.9' },
            { internalIP: '10.172.0.5', externalIP: '10.172.200.7' },
            { internalIP: 'fd72::5', externalIP: 'fd72::ff' },
          ],
        ),
      ],
      pools,
    );
    const s = floatingScript(heldBy(v, 'a'), 'fiptest');
    expect(s).toContain('add chain inet fiptest prerouting { type nat hook prerouting priority -100; policy accept;');
    expect(s).toContain('add chain inet fiptest output { type nat hook output priority -100; policy accept;');
    expect(s).toContain('add chain inet fiptest postrouting { type nat hook postrouting priority 100; policy accept;');
    expect(s).toContain('add rule inet fiptest prerouting dnat ip to ip daddr map @fip4');
    expect(s).toContain('add rule inet fiptest output dnat ip6 to ip6 daddr map @fip6');
    expect(s).toContain(
      'add rule inet fiptest postrouting ct status dnat ip saddr . ip daddr @self4 snat ip to ip saddr map @snat4',
    );
    expect(s).toContain('add element inet fiptest fip4 { 10.172.200.7 : 10.172.0.5, 10.172.200.9 : 10.172.0.5 }');
    expect(s).toContain('add element inet fiptest self4 { 10.172.0.5 . 10.172.0.5 }');
    // Two floating IPs of one pod: hairpin traffic leaves from the first.
    expect(s).toContain('add element inet fiptest snat4 { 10.172.0.5 : 10.172.200.7 }');
    expect(s).toContain('add element inet fiptest fip6 { fd72::ff : fd72::5 }');
    expect(s.startsWith('table inet fiptest {}\ndelete table inet fiptest\nadd table inet fiptest\n')).toBe(true);
  });

  it('a claim that bypassed resolution with a value nft cannot hold is refused before any script exists', () => {
    const c = {
      external: '10.172.200.7 } ; flush ruleset ; {',
      internal: '10.172.0.5',
      family: 4 as const,
      node: 'a',
      endpoint: 'ns/x',
      namespace: 'ns',
      pod: 'x',
      created: '',
    };
    expect(() => floatingScript([c])).toThrow(/is not an IP address/);
  });
});

describe('parseTranslations', () => {
  it('reads the pairs of a listed map (what an earlier run translated); anything else is ignored', () => {
    const listing = [
      'table inet netplugin-floating {',
      '\tmap fip4 {',
      '\t\ttype ipv4_addr : ipv4_addr',
      '\t\tcomment "floating IP -> the address of the pod holding it"',
      '\t\telements = { 10.172.200.7 : 10.172.0.65,',
      '\t\t\t     10.172.200.9 : 10.172.0.66, bogus : 10.1.1.1 }',
      '\t}',
      '}',
    ].join('\n');
    expect([...parseTranslations(listing)]).toEqual([
      ['10.172.200.7', '10.172.0.65'],
      ['10.172.200.9', '10.172.0.66'],
    ]);
    expect(parseTranslations('table inet x {\n\tmap fip6 {\n\t\ttype ipv6_addr : ipv6_addr\n\t}\n}').size).toBe(0);
  });
});
