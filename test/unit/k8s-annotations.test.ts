// Address selection from annotations, netconf and pools: every row of docs/addresses-and-annotations.md's
// annotation table, docs/addresses-and-annotations.md, and the precedence rules of issue 8.
import { describe, expect, it } from 'vitest';
import {
  pairFloatingIPs,
  parseWorkloadAnnotations,
  poolsFromResources,
  resolveWorkloadOptions,
  type PoolInfo,
  type ResolveInput,
} from '../../src/workload/annotations.js';
import { ANNOTATIONS } from '../../src/model/annotations.js';
import { CniError, ErrorCodes } from '../../src/errors.js';
import type { Logger } from '../../src/log/types.js';
import { API_VERSION, type Resource } from '../../src/model/resources.js';

const POOLS: PoolInfo[] = [
  { name: 'default-ipv4', cidr: '10.244.0.0/16' },
  { name: 'blue', cidr: '10.10.0.0/24' },
  { name: 'vx', cidr: '10.20.0.0/24', vxlanMode: 'Always' },
  { name: 'old', cidr: '10.30.0.0/24', disabled: true },
  { name: 'default-ipv6', cidr: 'fd00:10:244::/64' },
  { name: 'green6', cidr: 'fd00:beef::/112' },
];

function recLog(): Logger & { lines: Array<[string, string]> } {
  const lines: Array<[string, string]> = [];
  return {
    lines,
    error: (m) => lines.push(['error', m]),
    warn: (m) => lines.push(['warn', m]),
    info: (m) => lines.push(['info', m]),
    debug: (m) => lines.push(['debug', m]),
  };
}

const POD = { namespace: 'shop', name: 'web-0' };

function resolve(
  over: Omit<Partial<ResolveInput>, 'pod'> & { pod?: Record<string, string>; ns?: Record<string, string> } = {},
) {
  const { pod, ns, ...rest } = over;
  return resolveWorkloadOptions({
    podAnnotations: pod ?? {},
    namespaceAnnotations: ns ?? {},
    pod: POD,
    conf: { ipam: {}, feature_control: {} },
    pools: POOLS,
    log: recLog(),
    ...rest,
  });
}

/** The thrown CniError (fails the test when nothing is thrown). */
function errorOf(fn: () => unknown): CniError {
  try {
    fn();
  } catch (e) {
    expect(e).toBeInstanceOf(CniError);
    return e as CniError;
  }
  throw new Error('expected a CniError, nothing was thrown');
}

describe('annotation keys', () => {
  it('are all under the cni.netplugin.org/ prefix with docs/addresses-and-annotations.md spelling', () => {
    expect(ANNOTATIONS).toEqual({
      ipv4Pools: 'cni.netplugin.org/ipv4pools',
      ipv6Pools: 'cni.netplugin.org/ipv6pools',
      ipAddrs: 'cni.netplugin.org/ipAddrs',
      ipAddrsNoIpam: 'cni.netplugin.org/ipAddrsNoIpam',
      floatingIPs: 'cni.netplugin.org/floatingIPs',
      podIP: 'cni.netplugin.org/podIP',
      podIPs: 'cni.netplugin.org/podIPs',
      containerID: 'cni.netplugin.org/containerID',
      interfaceName: 'cni.netplugin.org/interfaceName',
      mac: 'cni.netplugin.org/mac',
      endpoint: 'cni.netplugin.org/endpoint',
      ipNATs: 'cni.netplugin.org/ipNATs',
    });
  });
});

describe('docs/addresses-and-annotations.md annotation table rows', () => {
  it('ipv4pools on a pod overrides the netconf pools', () => {
    const r = resolve({
      pod: { [ANNOTATIONS.ipv4Pools]: '["blue"]' },
      conf: { ipam: { ipv4_pools: ['default-ipv4'] } },
    });
    expect(r).toMatchObject({ assignIPv4: true, assignIPv6: false, ipv4Pools: ['blue'] });
    expect(r.source.ipv4Pools).toMatchObject({ from: 'pod', key: ANNOTATIONS.ipv4Pools });
  });

  it('ipv4pools on a namespace applies to a pod without its own', () => {
    const r = resolve({ ns: { [ANNOTATIONS.ipv4Pools]: '["10.10.0.0/24"]' } });
    expect(r.ipv4Pools).toEqual(['blue']);
    expect(r.source.ipv4Pools).toMatchObject({ from: 'namespace', object: 'namespace shop' });
  });

  it('ipv6pools on a pod or namespace overrides the netconf IPv6 pools', () => {
    const conf = { ipam: { assign_ipv6: 'true', ipv6_pools: ['default-ipv6'] } };
    expect(resolve({ pod: { [ANNOTATIONS.ipv6Pools]: '["green6"]' }, conf })).toMatchObject({
      assignIPv4: true,
      assignIPv6: true,
      ipv6Pools: ['green6'],
    });
    expect(resolve({ ns: { [ANNOTATIONS.ipv6Pools]: '["fd00:beef::/112"]' }, conf }).ipv6Pools).toEqual(['green6']);
  });

  it('ipAddrs on a pod is allocated through IPAM: requestedIPs, with only the families given', () => {
    const v4 = resolve({ pod: { [ANNOTATIONS.ipAddrs]: '["10.244.1.5"]' }, conf: { ipam: { assign_ipv6: 'true' } } });
    expect(v4).toMatchObject({ assignIPv4: true, assignIPv6: false, requestedIPs: ['10.244.1.5'] });
    expect(v4.noIpamIPs).toBeUndefined();
    const dual = resolve({ pod: { [ANNOTATIONS.ipAddrs]: '["FD00:10:244:0:0::7", "10.244.1.5"]' } });
    expect(dual).toMatchObject({ assignIPv4: true, assignIPv6: true, requestedIPs: ['fd00:10:244::7', '10.244.1.5'] });
  });

  it('ipAddrsNoIpam on a pod bypasses IPAM when the feature is enabled', () => {
    const r = resolve({
      pod: { [ANNOTATIONS.ipAddrsNoIpam]: '["10.244.9.9"]' },
      conf: { feature_control: { ip_addrs_no_ipam: true } },
    });
    expect(r).toMatchObject({ assignIPv4: false, assignIPv6: false, noIpamIPs: ['10.244.9.9'] });
    expect(r.requestedIPs).toBeUndefined();
    expect(r.warnings).toEqual([]);
  });

  it('floatingIPs on a pod are passed on when the feature is enabled', () => {
    const r = resolve({
      pod: { [ANNOTATIONS.floatingIPs]: '["10.10.0.200"]' },
      conf: { feature_control: { floating_ips: true } },
    });
    expect(r.floatingIPs).toEqual(['10.10.0.200']);
    expect(r.assignIPv4).toBe(true);
  });

  it('address annotations on a namespace are not honoured (pod only)', () => {
    const r = resolve({ ns: { [ANNOTATIONS.ipAddrs]: '["10.244.1.5"]' } });
    expect(r.requestedIPs).toBeUndefined();
    expect(r.assignIPv4).toBe(true);
  });
});

describe('docs/addresses-and-annotations.md Errors', () => {
  it('1: the netconf naming a pool that does not exist is an error naming ipam.ipv4_pools', () => {
    const e = errorOf(() => resolve({ conf: { ipam: { ipv4_pools: ['nope'] } } }));
    expect(e.code).toBe(ErrorCodes.InvalidNetworkConfig);
    expect(e.message).toContain('ipam.ipv4_pools');
    expect(e.message).toContain('"nope" does not exist');
    expect(e.message).toContain('default-ipv4 (10.244.0.0/16)');
  });

  it('1: the netconf naming a pool by its CIDR resolves to the pool name', () => {
    expect(resolve({ conf: { ipam: { ipv4_pools: ['10.244.0.0/16'] } } }).ipv4Pools).toEqual(['default-ipv4']);
  });

  it('2: a pool in an annotation must exist', () => {
    const e = errorOf(() => resolve({ pod: { [ANNOTATIONS.ipv4Pools]: '["purple"]' } }));
    expect(e.code).toBe(ErrorCodes.OrchestratorFailure);
    expect(e.message).toContain(`annotation ${ANNOTATIONS.ipv4Pools} on pod shop/web-0`);
    expect(e.message).toContain(`'["purple"]'`);
    expect(e.message).toContain('does not exist');
  });

  it('2: a CIDR matching no pool does not exist', () => {
    const e = errorOf(() => resolve({ pod: { [ANNOTATIONS.ipv4Pools]: '["192.168.0.0/24"]' } }));
    expect(e.code).toBe(ErrorCodes.OrchestratorFailure);
    expect(e.message).toContain('IP pool 192.168.0.0/24 does not exist');
  });

  it('2: a subset of a pool is rejected', () => {
    const e = errorOf(() => resolve({ pod: { [ANNOTATIONS.ipv4Pools]: '["10.244.3.0/24"]' } }));
    expect(e.code).toBe(ErrorCodes.OrchestratorFailure);
    expect(e.message).toContain('requesting a subset of a pool is not supported');
    expect(e.message).toContain('default-ipv4 (10.244.0.0/16)');
  });

  it('2: an IPv6 subset of a pool is rejected too', () => {
    const conf = { ipam: { assign_ipv6: 'true' } };
    const e = errorOf(() => resolve({ ns: { [ANNOTATIONS.ipv6Pools]: '["fd00:beef::/120"]' }, conf }));
    expect(e.message).toContain('requesting a subset of a pool is not supported');
    expect(e.message).toContain(`annotation ${ANNOTATIONS.ipv6Pools} on namespace shop`);
  });

  it('2: a pool of the wrong family is rejected with the annotation to use', () => {
    const e = errorOf(() => resolve({ pod: { [ANNOTATIONS.ipv4Pools]: '["green6"]' } }));
    expect(e.message).toContain('is an IPv6 pool');
    expect(e.message).toContain(ANNOTATIONS.ipv6Pools);
  });

  it('2: a disabled pool is rejected', () => {
    const e = errorOf(() => resolve({ pod: { [ANNOTATIONS.ipv4Pools]: '["old"]' } }));
    expect(e.message).toContain('pool old (10.30.0.0/24) is disabled');
  });

  it('3: ipAddrs and ipAddrsNoIpam together are an error quoting both', () => {
    const e = errorOf(() =>
      resolve({
        pod: { [ANNOTATIONS.ipAddrs]: '["10.244.1.5"]', [ANNOTATIONS.ipAddrsNoIpam]: '["10.99.0.1"]' },
        conf: { feature_control: { ip_addrs_no_ipam: true } },
      }),
    );
    expect(e.code).toBe(ErrorCodes.InvalidNetworkConfig);
    expect(e.message).toContain('cannot be used together');
    expect(e.message).toContain(`'["10.244.1.5"]'`);
    expect(e.message).toContain(`'["10.99.0.1"]'`);
  });

  it('4: more than one IPv4 address in ipAddrs is an error', () => {
    const e = errorOf(() => resolve({ pod: { [ANNOTATIONS.ipAddrs]: '["10.244.1.5", "10.244.1.6"]' } }));
    expect(e.code).toBe(ErrorCodes.InvalidNetworkConfig);
    expect(e.message).toContain('more than one IPv4 address');
    expect(e.message).toContain(ANNOTATIONS.ipAddrs);
  });

  it('4: more than one IPv6 address in ipAddrsNoIpam is an error', () => {
    const e = errorOf(() =>
      resolve({
        pod: { [ANNOTATIONS.ipAddrsNoIpam]: '["fd00::1", "fd00::2"]' },
        conf: { feature_control: { ip_addrs_no_ipam: true } },
      }),
    );
    expect(e.message).toContain('more than one IPv6 address');
    expect(e.message).toContain(ANNOTATIONS.ipAddrsNoIpam);
  });

  it('4: one of each family is allowed', () => {
    const r = resolve({
      pod: { [ANNOTATIONS.ipAddrsNoIpam]: '["10.99.0.1", "fd00:99::1"]' },
      conf: { feature_control: { ip_addrs_no_ipam: true } },
    });
    expect(r.noIpamIPs).toEqual(['10.99.0.1', 'fd00:99::1']);
  });

  it('5: ipAddrs takes priority over ipv4pools (pod and namespace) and the pools are not used', () => {
    const log = recLog();
    const r = resolve({
      pod: { [ANNOTATIONS.ipAddrs]: '["10.244.1.5"]', [ANNOTATIONS.ipv4Pools]: '["blue"]' },
      ns: { [ANNOTATIONS.ipv6Pools]: '["green6"]' },
      log,
    });
    expect(r.requestedIPs).toEqual(['10.244.1.5']);
    expect(r.ipv4Pools).toBeUndefined();
    expect(r.ipv6Pools).toBeUndefined();
    expect(r.source.addresses).toMatchObject({ key: ANNOTATIONS.ipAddrs });
    expect(log.lines.filter(([l, m]) => l === 'info' && m.includes('takes priority'))).toHaveLength(2);
  });

  it('5: ipAddrsNoIpam takes priority over ipv4pools', () => {
    const r = resolve({
      pod: { [ANNOTATIONS.ipAddrsNoIpam]: '["10.244.1.5"]', [ANNOTATIONS.ipv4Pools]: '["blue"]' },
      conf: { feature_control: { ip_addrs_no_ipam: true } },
    });
    expect(r).toMatchObject({ assignIPv4: false, noIpamIPs: ['10.244.1.5'] });
    expect(r.ipv4Pools).toBeUndefined();
  });

  it('6: ipAddrsNoIpam outside every pool gives a warning (no routes distributed)', () => {
    const log = recLog();
    const r = resolve({
      pod: { [ANNOTATIONS.ipAddrsNoIpam]: '["192.168.50.5"]' },
      conf: { feature_control: { ip_addrs_no_ipam: true } },
      log,
    });
    expect(r.noIpamIPs).toEqual(['192.168.50.5']);
    expect(r.warnings).toHaveLength(1);
    expect(r.warnings[0]).toContain('192.168.50.5 is outside every IP pool');
    expect(r.warnings[0]).toContain('no routes will be distributed');
    expect(log.lines).toContainEqual(['warn', r.warnings[0]]);
  });

  it('6: ipAddrsNoIpam inside a VXLAN pool gives a warning', () => {
    const r = resolve({
      pod: { [ANNOTATIONS.ipAddrsNoIpam]: '["10.20.0.9"]' },
      conf: { feature_control: { ip_addrs_no_ipam: true } },
    });
    expect(r.warnings).toHaveLength(1);
    expect(r.warnings[0]).toContain('pool vx (10.20.0.0/24), which uses VXLAN');
  });

  it('7: ipAddrsNoIpam with the feature flag off fails, naming the flag to set', () => {
    for (const fc of [{}, { ip_addrs_no_ipam: false }]) {
      const e = errorOf(() =>
        resolve({ pod: { [ANNOTATIONS.ipAddrsNoIpam]: '["10.244.1.5"]' }, conf: { feature_control: fc } }),
      );
      expect(e.code).toBe(ErrorCodes.OrchestratorFailure);
      expect(e.message).toContain('feature_control.ip_addrs_no_ipam');
      expect(e.message).toContain('"ip_addrs_no_ipam": true');
      expect(e.message).toContain('IP spoofing');
      expect(e.message).toContain(`'["10.244.1.5"]'`);
    }
  });

  it('7: floatingIPs with the feature flag off fails, naming the flag to set', () => {
    const e = errorOf(() =>
      resolve({
        pod: { [ANNOTATIONS.floatingIPs]: '["10.10.0.200"]' },
        conf: { feature_control: { floating_ips: false } },
      }),
    );
    expect(e.code).toBe(ErrorCodes.OrchestratorFailure);
    expect(e.message).toContain('feature_control.floating_ips');
    expect(e.message).toContain('traffic not intended');
  });

  it('8: the pod pool annotation wins over the namespace one, per key, without merging', () => {
    const conf = { ipam: { assign_ipv6: 'true' } };
    const r = resolve({
      pod: { [ANNOTATIONS.ipv4Pools]: '["blue"]' },
      ns: { [ANNOTATIONS.ipv4Pools]: '["default-ipv4"]', [ANNOTATIONS.ipv6Pools]: '["green6"]' },
      conf,
    });
    expect(r.ipv4Pools).toEqual(['blue']);
    expect(r.source.ipv4Pools?.from).toBe('pod');
    // The pod says nothing about IPv6, so the namespace's ipv6pools still apply.
    expect(r.ipv6Pools).toEqual(['green6']);
    expect(r.source.ipv6Pools?.from).toBe('namespace');
  });

  it('8: a namespace value the pod overrides is not even parsed', () => {
    const r = resolve({ pod: { [ANNOTATIONS.ipv4Pools]: '["blue"]' }, ns: { [ANNOTATIONS.ipv4Pools]: 'garbage' } });
    expect(r.ipv4Pools).toEqual(['blue']);
  });
});

describe('malformed values (code 7, the value quoted)', () => {
  const cases: Array<[string, string, string]> = [
    ['not JSON', '10.244.1.5', 'not valid JSON'],
    ['a JSON string, not an array', '"10.244.1.5"', 'a JSON string, not an array'],
    ['a JSON object', '{"ip":"10.244.1.5"}', 'a JSON object, not an array'],
    ['null', 'null', 'a JSON null, not an array'],
    ['an array of numbers', '[10, 11]', 'element 0 is a number, not a string'],
    ['a nested array', '[["10.244.1.5"]]', 'element 0 is an array, not a string'],
    ['an empty array', '[]', 'the list is empty'],
    ['an empty string element', '[""]', 'element 0 is an empty string'],
  ];
  for (const [what, value, why] of cases) {
    it(`ipAddrs holding ${what}`, () => {
      const e = errorOf(() => resolve({ pod: { [ANNOTATIONS.ipAddrs]: value } }));
      expect(e.code).toBe(ErrorCodes.InvalidNetworkConfig);
      expect(e.message).toContain(ANNOTATIONS.ipAddrs);
      expect(e.message).toContain(`'${value}'`);
      expect(e.message).toContain(why);
    });
  }

  it('ipv4pools on a namespace holding a bare name', () => {
    const e = errorOf(() => resolve({ ns: { [ANNOTATIONS.ipv4Pools]: 'blue' } }));
    expect(e.code).toBe(ErrorCodes.InvalidNetworkConfig);
    expect(e.message).toContain(`annotation ${ANNOTATIONS.ipv4Pools} on namespace shop has value 'blue'`);
    expect(e.message).toContain('JSON array of strings');
  });

  it('an address that is not an IP', () => {
    const e = errorOf(() => resolve({ pod: { [ANNOTATIONS.ipAddrs]: '["10.244.1.300"]' } }));
    expect(e.message).toContain('"10.244.1.300" is not an IP address');
  });

  it('an address with a prefix length', () => {
    const e = errorOf(() => resolve({ pod: { [ANNOTATIONS.ipAddrs]: '["10.244.1.5/32"]' } }));
    expect(e.message).toContain('without a prefix length');
  });

  it('floatingIPs holding a non-address', () => {
    const e = errorOf(() =>
      resolve({
        pod: { [ANNOTATIONS.floatingIPs]: '["fd00::zz"]' },
        conf: { feature_control: { floating_ips: true } },
      }),
    );
    expect(e.code).toBe(ErrorCodes.InvalidNetworkConfig);
    expect(e.message).toContain(ANNOTATIONS.floatingIPs);
  });
});

describe('ipAddrs semantics', () => {
  it('an address outside every pool is an error naming the address and the alternative', () => {
    const e = errorOf(() => resolve({ pod: { [ANNOTATIONS.ipAddrs]: '["192.168.7.7"]' } }));
    expect(e.code).toBe(ErrorCodes.OrchestratorFailure);
    expect(e.message).toContain('192.168.7.7 is not inside any IP pool');
    expect(e.message).toContain(ANNOTATIONS.ipAddrsNoIpam);
  });

  it('an address only inside a disabled pool is an error', () => {
    const e = errorOf(() => resolve({ pod: { [ANNOTATIONS.ipAddrs]: '["10.30.0.4"]' } }));
    expect(e.message).toContain('disabled pool old');
  });
});

describe('netconf and CNI_ARGS (precedence level 2)', () => {
  it('defaults: IPv4 only, pools left to IPAM (node selectors)', () => {
    const r = resolve();
    expect(r).toMatchObject({ assignIPv4: true, assignIPv6: false });
    expect(r.ipv4Pools).toBeUndefined();
    expect(r.ipv6Pools).toBeUndefined();
  });

  it('assign_ipv4 "false" and assign_ipv6 "true" (strings, as docs/addresses-and-annotations.md types them)', () => {
    const r = resolve({ conf: { ipam: { assign_ipv4: 'false', assign_ipv6: 'true', ipv6_pools: ['default-ipv6'] } } });
    expect(r).toMatchObject({ assignIPv4: false, assignIPv6: true, ipv6Pools: ['default-ipv6'] });
    expect(r.source.ipv6Pools).toMatchObject({ from: 'netconf', key: 'ipam.ipv6_pools' });
  });

  it('ipv6_pools are respected only when assign_ipv6 is "true"', () => {
    const r = resolve({ conf: { ipam: { ipv6_pools: ['does-not-matter'] } } });
    expect(r.ipv6Pools).toBeUndefined();
  });

  it('an ipv6pools annotation while IPv6 is not assigned is ignored with a warning saying how to enable IPv6', () => {
    const r = resolve({ pod: { [ANNOTATIONS.ipv6Pools]: '["green6"]' } });
    expect(r.ipv6Pools).toBeUndefined();
    expect(r.warnings[0]).toContain('assign_ipv6');
  });

  it('CNI_ARGS IP= requests that address through IPAM', () => {
    const r = resolve({ cniArgsIP: '10.244.4.4,fd00:10:244::4' });
    expect(r).toMatchObject({ assignIPv4: true, assignIPv6: true, requestedIPs: ['10.244.4.4', 'fd00:10:244::4'] });
    expect(r.source.addresses).toMatchObject({ from: 'cni-args' });
  });

  it('CNI_ARGS IP= malformed is code 4 naming CNI_ARGS', () => {
    const e = errorOf(() => resolve({ cniArgsIP: 'ten' }));
    expect(e.code).toBe(ErrorCodes.InvalidEnvironment);
    expect(e.message).toContain('CNI_ARGS IP=ten');
  });

  it('CNI_ARGS IP= outside every pool is an IPAM failure', () => {
    const e = errorOf(() => resolve({ cniArgsIP: '172.16.0.1' }));
    expect(e.code).toBe(ErrorCodes.IpamFailure);
  });

  it('annotations beat CNI_ARGS IP=: ipAddrs wins, and a pool annotation wins with a warning', () => {
    expect(resolve({ cniArgsIP: '10.244.4.4', pod: { [ANNOTATIONS.ipAddrs]: '["10.244.1.5"]' } }).requestedIPs).toEqual(
      ['10.244.1.5'],
    );
    const r = resolve({ cniArgsIP: '10.244.4.4', ns: { [ANNOTATIONS.ipv4Pools]: '["blue"]' } });
    expect(r.requestedIPs).toBeUndefined();
    expect(r.ipv4Pools).toEqual(['blue']);
    expect(r.warnings[0]).toContain('CNI_ARGS IP=10.244.4.4 is ignored');
  });
});

describe('floating IPs', () => {
  const on = { feature_control: { floating_ips: true } };

  it('must lie inside a pool', () => {
    const e = errorOf(() => resolve({ pod: { [ANNOTATIONS.floatingIPs]: '["203.0.113.9"]' }, conf: on }));
    expect(e.code).toBe(ErrorCodes.OrchestratorFailure);
    expect(e.message).toContain('203.0.113.9 is not inside any IP pool');
  });

  it('need a pod address of their family (checked before IPAM)', () => {
    const e = errorOf(() => resolve({ pod: { [ANNOTATIONS.floatingIPs]: '["fd00:beef::9"]' }, conf: on }));
    expect(e.message).toContain('is IPv6 but the pod gets no IPv6 address');
  });

  it('pairFloatingIPs pairs each with the pod address of the same family', () => {
    expect(pairFloatingIPs(['10.244.1.5/32', 'fd00:10:244::5/128'], ['fd00:beef::9', '10.10.0.200'])).toEqual([
      { internalIP: 'fd00:10:244::5', externalIP: 'fd00:beef::9' },
      { internalIP: '10.244.1.5', externalIP: '10.10.0.200' },
    ]);
    expect(pairFloatingIPs(['10.244.1.5'], undefined)).toEqual([]);
  });

  it('pairFloatingIPs fails when the pod has no address of that family', () => {
    const e = errorOf(() => pairFloatingIPs(['10.244.1.5/32'], ['fd00:beef::9']));
    expect(e.code).toBe(ErrorCodes.OrchestratorFailure);
    expect(e.message).toContain('no IPv6 address');
  });
});

describe('helpers', () => {
  it('parseWorkloadAnnotations records the source of each value', () => {
    const o = parseWorkloadAnnotations(
      { [ANNOTATIONS.ipAddrs]: '["10.0.0.1"]' },
      { [ANNOTATIONS.ipv6Pools]: '["p6"]' },
      POD,
    );
    expect(o.ipAddrs).toEqual(['10.0.0.1']);
    expect(o.ipv6Pools).toEqual(['p6']);
    expect(o.source.ipAddrs).toEqual({
      from: 'pod',
      key: ANNOTATIONS.ipAddrs,
      value: '["10.0.0.1"]',
      object: 'pod shop/web-0',
    });
  });

  it('poolsFromResources reads IPPool resources as Datastore.list returns them', () => {
    const res: Array<Resource<'IPPool'>> = [
      {
        apiVersion: API_VERSION,
        kind: 'IPPool',
        metadata: { name: 'p' },
        spec: { cidr: '10.0.0.0/8', vxlanMode: 'Always', disabled: true },
      },
    ];
    expect(poolsFromResources(res)).toEqual([
      { name: 'p', cidr: '10.0.0.0/8', vxlanMode: 'Always', ipipMode: undefined, disabled: true },
    ]);
  });
});
