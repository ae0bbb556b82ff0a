import { describe, expect, it } from 'vitest';
import { formatResult, parseResult } from '../../src/cni/result.js';
import { SUPPORTED_VERSIONS, type CniResult } from '../../src/cni/types.js';
import { CniError } from '../../src/errors.js';

const FULL: CniResult = {
  interfaces: [
    { name: 'npi1234567890a', mac: 'ee:ee:ee:ee:ee:ee', mtu: 1450 },
    {
      name: 'eth0',
      mac: '02:42:ac:11:00:02',
      mtu: 1450,
      sandbox: '/var/run/netns/x',
      socketPath: '/run/vhost.sock',
      pciID: '0000:00:1f.6',
    },
  ],
  ips: [
    { address: '10.244.1.5/32', gateway: '169.254.1.1', interface: 1 },
    { address: 'fd00:10:244::5/128', interface: 1 },
  ],
  routes: [
    { dst: '0.0.0.0/0', gw: '169.254.1.1', mtu: 1400, advmss: 1360, priority: 10, table: 254, scope: 0 },
    { dst: '::/0' },
  ],
  dns: {
    nameservers: ['10.96.0.10'],
    domain: 'cluster.local',
    search: ['default.svc.cluster.local'],
    options: ['ndots:5'],
  },
};

/** What survives printing in a version: 1.1 fields are dropped below 1.1.0. */
function expectedIn(v: string): CniResult {
  if (v === '1.1.0') return FULL;
  return {
    ...FULL,
    interfaces: FULL.interfaces!.map(({ name, mac, sandbox }) => ({
      name,
      ...(mac ? { mac } : {}),
      ...(sandbox ? { sandbox } : {}),
    })),
    routes: FULL.routes!.map(({ dst, gw }) => ({ dst, ...(gw ? { gw } : {}) })),
  };
}

describe('formatResult', () => {
  it.each(SUPPORTED_VERSIONS)('prints %s in that version’s shape', (v) => {
    const out = formatResult(FULL, v) as any;
    expect(out.cniVersion).toBe(v);
    const old = v.startsWith('0.');
    expect(out.ips[0].version).toBe(old ? '4' : undefined);
    expect(out.ips[1].version).toBe(old ? '6' : undefined);
    const v11 = v === '1.1.0';
    expect('mtu' in out.interfaces[0]).toBe(v11);
    expect('socketPath' in out.interfaces[1]).toBe(v11);
    expect('pciID' in out.interfaces[1]).toBe(v11);
    for (const k of ['mtu', 'advmss', 'priority', 'table', 'scope']) expect(k in out.routes[0]).toBe(v11);
    expect(out.interfaces[1].sandbox).toBe('/var/run/netns/x');
    expect(out.dns).toEqual(FULL.dns);
  });
  it('omits absent sections (IPAM results have no interfaces)', () => {
    expect(formatResult({ ips: [{ address: '10.0.0.1/24' }] }, '0.3.1')).toEqual({
      cniVersion: '0.3.1',
      ips: [{ version: '4', address: '10.0.0.1/24' }],
    });
  });
});

describe('parseResult round trips', () => {
  it.each(SUPPORTED_VERSIONS)('%s: format -> JSON -> parse gives the internal result back', (v) => {
    const json = JSON.parse(JSON.stringify(formatResult(FULL, v)));
    expect(parseResult(json, 'prevResult')).toEqual(expectedIn(v));
  });
  it.each(SUPPORTED_VERSIONS)('%s: parse -> format -> parse is stable', (v) => {
    const once = parseResult(JSON.parse(JSON.stringify(formatResult(FULL, v))), 'prevResult');
    expect(parseResult(formatResult(once, v), 'prevResult')).toEqual(once);
  });
  it('converts across versions (0.3.1 in, 1.1.0 out)', () => {
    const old = {
      cniVersion: '0.3.1',
      interfaces: [{ name: 'eth0', sandbox: '/x' }],
      ips: [{ version: '4', address: '10.1.2.3/24', interface: 0, gateway: '10.1.2.1' }],
    };
    expect(formatResult(parseResult(old, 'prevResult'), '1.1.0')).toEqual({
      cniVersion: '1.1.0',
      interfaces: [{ name: 'eth0', sandbox: '/x' }],
      ips: [{ address: '10.1.2.3/24', interface: 0, gateway: '10.1.2.1' }],
    });
  });
  it('uses the fallback version when the result has none', () => {
    expect(parseResult({ ips: [{ address: '10.0.0.1/32' }] }, 'prevResult', '1.0.0')).toEqual({
      ips: [{ address: '10.0.0.1/32' }],
    });
  });
});

describe('parseResult errors', () => {
  const cases: Array<[string, unknown, number, string]> = [
    ['not an object', 'x', 7, 'prevResult: got string "x"'],
    ['0.2.0 result', { cniVersion: '0.2.0', ip4: { ip: '10.0.0.1/24' } }, 1, 'prevResult.cniVersion: string "0.2.0"'],
    ['no version at all', { ips: [] }, 1, 'prevResult.cniVersion: nothing'],
    [
      'address without prefix',
      { cniVersion: '1.0.0', ips: [{ address: '10.0.0.1' }] },
      7,
      'prevResult.ips[0].address: got string "10.0.0.1"',
    ],
    ['prefix too long', { cniVersion: '1.0.0', ips: [{ address: '10.0.0.1/33' }] }, 7, 'prevResult.ips[0].address'],
    [
      'wrong version field',
      { cniVersion: '0.4.0', ips: [{ version: '6', address: '10.0.0.1/32' }] },
      7,
      'prevResult.ips[0].version: got string "6"; expected "4"',
    ],
    [
      'gateway family mismatch',
      { cniVersion: '1.0.0', ips: [{ address: '10.0.0.1/32', gateway: 'fd00::1' }] },
      7,
      'prevResult.ips[0].gateway',
    ],
    [
      'interface out of range',
      { cniVersion: '1.0.0', interfaces: [{ name: 'eth0' }], ips: [{ address: '10.0.0.1/32', interface: 1 }] },
      7,
      'prevResult.ips[0].interface: got number 1',
    ],
    [
      'interface without name',
      { cniVersion: '1.0.0', interfaces: [{ mac: 'x' }] },
      7,
      'prevResult.interfaces[0].name: got nothing',
    ],
    ['route without dst', { cniVersion: '1.0.0', routes: [{ gw: '10.0.0.1' }] }, 7, 'prevResult.routes[0].dst'],
    ['bad route gw', { cniVersion: '1.0.0', routes: [{ dst: '0.0.0.0/0', gw: 'gw' }] }, 7, 'prevResult.routes[0].gw'],
    [
      'negative mtu',
      { cniVersion: '1.1.0', interfaces: [{ name: 'eth0', mtu: -1 }] },
      7,
      'prevResult.interfaces[0].mtu',
    ],
    [
      'dns nameservers not strings',
      { cniVersion: '1.0.0', dns: { nameservers: [1] } },
      7,
      'prevResult.dns.nameservers[0]',
    ],
  ];
  it.each(cases)('%s', (_n, raw, code, msg) => {
    try {
      parseResult(raw, 'prevResult');
      throw new Error('expected a failure');
    } catch (e) {
      expect(e).toBeInstanceOf(CniError);
      expect((e as CniError).code).toBe(code);
      expect((e as CniError).message).toContain(msg);
    }
  });
});
