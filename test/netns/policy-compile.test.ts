// The compiler's output, applied through libnftables in the test's own netns:
// every form of rule must be accepted by nft, and an incremental batch between
// two states must leave the same table as a full resync of the second state.
import { afterAll, describe, expect, it } from 'vitest';
import { nftRun } from '../../src/native/nft.js';
import { PolicyCompiler, type CompileInput } from '../../src/agent/policy/compile.js';
import { diffCommands, fullScript } from '../../src/agent/policy/nft-script.js';

// Its own table name: the agents of the integration suites may run beside it in this namespace.
const base = { vethPrefixes: ['npc'], table: 'netplugin-compile-test' };

function input(extraLabel: string): CompileInput {
  const profiles = new Map([
    [
      'kns.x',
      {
        name: 'kns.x',
        spec: {
          labelsToApply: { 'pcns.team': 'x', 'netplugin.org/name': 'x' },
          ingress: [{ action: 'Allow' as const }],
          egress: [{ action: 'Allow' as const }],
        },
      },
    ],
  ]);
  return {
    profiles,
    endpoints: [
      {
        key: 'x/a',
        namespace: 'x',
        labels: { app: 'a', extra: extraLabel },
        profiles: ['kns.x'],
        addrs: ['10.9.0.1', 'fd00::1'],
        ports: [{ name: 'http', protocol: 'TCP', port: 80 }],
        interfaceName: 'npcaaaa',
      },
      {
        key: 'x/b',
        namespace: 'x',
        labels: { app: 'b' },
        profiles: ['kns.x'],
        addrs: ['10.9.0.2'],
        ports: [{ name: 'http', protocol: 'TCP', port: 8080 }],
        interfaceName: 'npcbbbb',
      },
      { key: 'y/c', namespace: 'y', labels: { app: 'c' }, profiles: [], addrs: ['10.9.1.3'] },
    ],
    policies: [
      {
        kind: 'NetworkPolicy',
        name: 'p1',
        namespace: 'x',
        spec: {
          order: 10,
          selector: `extra == '${extraLabel}'`,
          types: ['Ingress', 'Egress'],
          ingress: [
            { action: 'Log' },
            {
              action: 'Deny',
              protocol: 'TCP',
              source: { nets: ['10.9.1.0/24', '10.9.1.5/32'], notNets: ['10.9.1.3'] },
              destination: { ports: [81, '8000:8100'] },
            },
            {
              action: 'Allow',
              protocol: 'TCP',
              source: { selector: "app == 'b'" },
              destination: { ports: ['http', 82] },
            },
            {
              action: 'Allow',
              protocol: 'UDP',
              source: { namespaceSelector: "team == 'x'", notSelector: "app == 'z'" },
              destination: { notPorts: [53] },
            },
            { action: 'Pass', notProtocol: 'ICMP' },
            { action: 'Allow', protocol: 'ICMPv6', ipVersion: 6 },
            { action: 'Allow', protocol: 132, source: { nets: ['fd00::/8'] } },
          ],
          egress: [{ action: 'Allow', protocol: 'UDP', destination: { ports: [53] } }],
        },
      },
      {
        kind: 'GlobalNetworkPolicy',
        name: 'g1',
        spec: {
          selector: 'all()',
          namespaceSelector: 'has(team)',
          ingress: [{ action: 'Deny', source: { selector: "app == 'c'" } }],
        },
      },
    ],
  };
}

const list = () => nftRun('list table inet netplugin-compile-test');

describe('policy compiler output through libnftables', () => {
  afterAll(() => {
    try {
      nftRun('delete table inet netplugin-compile-test');
    } catch {
      // absent already
    }
  });

  it('applies a full resync, then an incremental batch equal to the resync of the new state', () => {
    const c = new PolicyCompiler();
    const s1 = c.compile(input('one'));
    nftRun(fullScript(base, s1));
    const l1 = list();
    if (process.env.SHOW_NFT) console.log(l1);
    expect(l1).toMatch(/chain to-npcaaaa/);
    expect(l1).toMatch(/comment "NetworkPolicy x\/p1 ingress rule 2"/);
    const s2 = c.compile(input('two'));
    nftRun(diffCommands(s1, s2, base).join('\n'));
    const incremental = list();
    nftRun(fullScript(base, s2));
    const full = list();
    expect(normalize(incremental)).toBe(normalize(full));
    // A second full resync leaves no duplicates.
    nftRun(fullScript(base, s2));
    expect(normalize(list())).toBe(normalize(full));
  });
});

/** Chains and sets in name order (the listing orders them by creation). */
function normalize(listing: string): string {
  const blocks = listing.split(/\n(?=\t(?:chain|set|map) )/);
  const head = blocks.shift()!;
  return [head, ...blocks.map((b) => b.replace(/\n}\s*$/, '')).sort()].join('\n');
}
