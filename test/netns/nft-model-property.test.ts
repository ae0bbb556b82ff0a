// Property of the typed nftables model: whatever names, labels, addresses and
// ports the datastore holds (random strings of any bytes, from a seeded
// generator), the policy compiler either refuses the value before rendering
// (the object is reported and left out) or the whole table it renders is
// accepted by the real libnftables. Never a refused batch.
import { afterAll, describe, expect, it } from 'vitest';
import { nftRun } from '../../src/native/nft.js';
import {
  PolicyCompiler,
  type CompileInput,
  type EndpointInput,
  type PolicyInput,
  type ProfileInput,
} from '../../src/agent/policy/compile.js';
import { diffCommands, fullScript, fullScriptAttributed } from '../../src/agent/policy/nft-script.js';

const TABLE = 'netplugin-prop-test';
const base = { vethPrefixes: ['npp'], table: TABLE };

function rng(seed: number): () => number {
  let x = seed >>> 0;
  return () => (x = (Math.imul(x, 1664525) + 1013904223) >>> 0) / 2 ** 32;
}

/** A random string: any byte value (as a code unit), some multi-byte characters, the nft-special ones often. */
function anyString(r: () => number, max = 24): string {
  const special = [
    '"',
    '\n',
    ' ',
    '\\',
    '$',
    ';',
    '{',
    '}',
    '#',
    '@',
    '/',
    '\t',
    '\0',
    "'",
    '*',
    '-',
    '.',
    ':',
    '\u00e9',
    '\u{1F600}',
  ];
  let s = '';
  const n = Math.floor(r() * max);
  for (let i = 0; i < n; i++) {
    const k = r();
    s +=
      k < 0.3
        ? special[Math.floor(r() * special.length)]!
        : k < 0.6
          ? String.fromCharCode(Math.floor(r() * 256))
          : 'abcxyz0129'[Math.floor(r() * 10)]!;
  }
  return s;
}

function pick<T>(r: () => number, xs: T[]): T {
  return xs[Math.floor(r() * xs.length)]!;
}

function input(r: () => number, round: number): CompileInput {
  const names = Array.from({ length: 4 }, () => anyString(r));
  const ns = ['x', anyString(r), anyString(r)];
  const profiles = new Map<string, ProfileInput>();
  for (const n of [...ns.map((x) => `kns.${x}`), anyString(r)]) {
    profiles.set(n, {
      name: n,
      spec: {
        labelsToApply: { [anyString(r, 8) || 'k']: anyString(r) },
        ingress: [{ action: 'Allow' }, { action: 'Log' }],
        egress: [{ action: 'Allow', destination: { ports: [pick(r, [53, 80, 65535])] } }],
      },
    });
  }
  const endpoints: EndpointInput[] = [];
  for (let i = 0; i < 8; i++) {
    const n = pick(r, ns);
    const ifn = r() < 0.4 ? `npp${round}x${i}` : r() < 0.5 ? anyString(r, 18) : `npp${anyString(r, 10)}`;
    endpoints.push({
      key: r() < 0.5 ? pick(r, names) : anyString(r),
      namespace: n,
      labels: { app: pick(r, ['a', 'b', anyString(r)]), [anyString(r, 8) || 'k2']: anyString(r) },
      profiles: [`kns.${n}`, ...(r() < 0.3 ? [anyString(r)] : [])],
      addrs: [
        r() < 0.7 ? `10.7.${round & 255}.${i + 1}` : anyString(r),
        ...(r() < 0.5 ? [`fd07::${round.toString(16)}:${i + 1}`] : []),
        ...(r() < 0.2 ? [anyString(r)] : []),
      ],
      ports: [
        {
          name: pick(r, ['http', anyString(r)]),
          protocol: pick(r, ['TCP', 'UDP', anyString(r, 5)]),
          port: pick(r, [80, 8080, -1, 70000, 1.5]),
        },
      ],
      ...(r() < 0.8 ? { interfaceName: ifn } : {}),
      ...(r() < 0.5 ? { mac: r() < 0.5 ? '02:00:00:00:00:0a' : anyString(r) } : {}),
      id: anyString(r),
      pod: anyString(r),
    });
  }
  const policies: PolicyInput[] = [];
  for (let j = 0; j < 4; j++) {
    policies.push({
      kind: j % 2 ? 'NetworkPolicy' : 'GlobalNetworkPolicy',
      name: anyString(r) || 'p',
      ...(j % 2 ? { namespace: pick(r, ns) } : {}),
      spec: {
        order: j,
        selector: j === 3 ? '' : "app == 'a'",
        types: ['Ingress', 'Egress'],
        ingress: [
          { action: 'Log' },
          {
            action: 'Allow',
            protocol: 'TCP',
            source: { selector: "app == 'b'" },
            destination: { ports: ['http', 80, pick(r, [90, 70000, '9000:8000'])] as never },
          },
          { action: 'Deny', source: { nets: [pick(r, ['10.0.0.0/8', '10.0.0.1', anyString(r), 'fd00::/8'])] } },
          { action: 'Pass', protocol: pick(r, [6, 17, 300]) as never },
          {
            action: 'Allow',
            protocol: pick(r, [6, 'UDP', 300, -1]) as never,
            destination: { ports: ['http', pick(r, ['dns', anyString(r, 6)])] as never },
          },
        ],
        egress: j === 2 ? [] : [{ action: 'Deny', destination: { notPorts: ['http'], notNets: [anyString(r)] } }],
      },
    });
  }
  return { policies, profiles, endpoints };
}

afterAll(() => {
  try {
    nftRun(`delete table inet ${TABLE}`);
  } catch {
    // absent
  }
});

describe('typed nft model, property', () => {
  it('any names render to a table libnftables accepts, or are refused before rendering (150 seeded rounds)', () => {
    const r = rng(20261127);
    let refused = 0;
    let programmed = 0;
    const c = new PolicyCompiler();
    let prev: ReturnType<PolicyCompiler['compile']> | undefined;
    for (let round = 0; round < 150; round++) {
      const inp = input(r, round);
      // A fresh compile for the full script, the long-lived one for an incremental diff from the last round.
      const state = new PolicyCompiler().compile(inp);
      refused += state.refused.length;
      programmed += state.endpoints.size;
      const attributed = fullScriptAttributed(base, state);
      // The compiler refused every bad value itself: the renderer had nothing to leave out.
      expect(attributed.unrendered, `round ${round}`).toEqual([]);
      const script = attributed.script;
      try {
        nftRun(script);
      } catch (e) {
        throw new Error(`round ${round}: libnftables refused the full script: ${(e as Error).message}\n${script}`);
      }
      const inc = c.compile(inp);
      if (prev) {
        nftRun(fullScript(base, prev));
        const cmds = diffCommands(prev, inc, base);
        try {
          if (cmds.length) nftRun(cmds.join('\n') + '\n');
        } catch (e) {
          throw new Error(`round ${round}: libnftables refused the diff: ${(e as Error).message}\n${cmds.join('\n')}`);
        }
      }
      prev = inc;
    }
    // The generator produced both kinds.
    expect(refused).toBeGreaterThan(50);
    expect(programmed).toBeGreaterThan(150);
  });
});
