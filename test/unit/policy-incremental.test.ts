// The incremental compiler against the full one: after every step of a seeded
// random sequence of endpoint changes (added, removed, relabelled, renamed
// ports, moved address) the state one long-lived compiler returns equals what a
// fresh compiler computes from scratch, and the incremental path was the one
// taken; a policy or profile change takes the full path.
import { describe, expect, it } from 'vitest';
import {
  PolicyCompiler,
  type CompileInput,
  type EndpointInput,
  type PolicyInput,
  type ProfileInput,
} from '../../src/agent/policy/compile.js';
import type { DesiredState } from '../../src/agent/policy/compile.js';

function rng(seed: number): () => number {
  let x = seed >>> 0;
  return () => (x = (Math.imul(x, 1664525) + 1013904223) >>> 0) / 2 ** 32;
}

const NS = ['a', 'b', 'c'];
function policies(): PolicyInput[] {
  const out: PolicyInput[] = [];
  for (let j = 0; j < 12; j++) {
    out.push({
      kind: 'NetworkPolicy',
      name: `p${j}`,
      namespace: NS[j % 3]!,
      spec: {
        order: j % 4 === 0 ? (undefined as never) : j,
        selector: `app == 'app${j % 5}'`,
        types: ['Ingress', 'Egress'],
        ingress: [
          {
            action: j % 6 === 0 ? 'Pass' : 'Allow',
            protocol: 'TCP',
            source: { selector: `role == 'r${j % 3}'` },
            destination: { ports: [80, 'http'] },
          },
        ],
        egress: [
          { action: 'Allow', destination: { namespaceSelector: `team == 't${j % 2}'` } },
          { action: 'Deny', source: { notSelector: `role == 'r1'` } as never },
        ],
      },
    });
  }
  out.push({
    kind: 'GlobalNetworkPolicy',
    name: 'g',
    spec: {
      order: 1,
      selector: 'all()',
      namespaceSelector: "team == 't1'",
      ingress: [{ action: 'Deny', protocol: 'UDP', destination: { ports: ['dns'] } }],
    },
  });
  return out.filter((p) => !(p.spec.order === undefined && delete p.spec.order));
}
function profiles(): Map<string, ProfileInput> {
  const m = new Map<string, ProfileInput>();
  for (const [i, ns] of NS.entries())
    m.set(`kns.${ns}`, {
      name: `kns.${ns}`,
      spec: {
        labelsToApply: { 'pcns.team': `t${i % 2}` },
        ingress: [{ action: 'Allow' }],
        egress: [{ action: 'Allow' }],
      },
    });
  return m;
}
function endpoint(r: () => number, i: number, addr: number): EndpointInput {
  const ns = NS[i % 3]!;
  return {
    // Endpoint names repeat across namespaces (node-k8s-<pod>-eth0 for pods of one name).
    key: `ep${Math.floor(i / 3)}`,
    namespace: ns,
    profiles: [`kns.${ns}`],
    labels: { app: `app${Math.floor(r() * 5)}`, role: `r${Math.floor(r() * 3)}` },
    addrs: [`10.9.${addr >> 8}.${addr & 255}`, ...(i % 4 === 0 ? [`fd09::${addr.toString(16)}`] : [])],
    ports:
      r() < 0.7
        ? [{ name: r() < 0.5 ? 'http' : 'dns', protocol: r() < 0.5 ? 'TCP' : 'UDP', port: 8000 + Math.floor(r() * 3) }]
        : [],
    ...(i % 5 === 4 ? {} : { interfaceName: `npt${i}` }),
  };
}

function plain(d: DesiredState) {
  return {
    chains: Object.fromEntries([...d.chains].sort(([a], [b]) => a.localeCompare(b))),
    sets: Object.fromEntries(
      [...d.sets]
        .sort(([a], [b]) => a.localeCompare(b))
        .map(([k, v]) => [k, { type: v.type, elements: [...v.elements.keys()].sort() }]),
    ),
    endpoints: Object.fromEntries([...d.endpoints].sort()),
  };
}

describe('incremental policy compiler', () => {
  it('equals a full compile after each of 150 random endpoint changes', () => {
    const r = rng(17);
    const pols = policies();
    const profs = profiles();
    let eps: EndpointInput[] = [];
    for (let i = 0; i < 30; i++) eps.push(endpoint(r, i, i + 1));
    const c = new PolicyCompiler();
    c.compile({ policies: pols, profiles: profs, endpoints: eps });
    expect(c.lastMode).toBe('full');
    let next = 30;
    const modes = new Set<string>();
    for (let step = 0; step < 150; step++) {
      const k = r();
      const i = Math.floor(r() * eps.length);
      // Keep one endpoint of each namespace on this node (a profile going out of use is the full path).
      if (k < 0.25) (eps = [...eps, endpoint(r, next, next + 1)]), next++;
      else if (k < 0.4 && eps.length > 10 && i >= 3) eps = eps.filter((_, j) => j !== i);
      else if (k < 0.55 && i >= 3)
        eps = eps.map((e, j) => (j === i ? { ...e, addrs: [`10.9.200.${step}`] } : e)); // an address moves
      else
        eps = eps.map((e, j) => {
          if (j !== i) return e;
          const { labels, ports } = endpoint(r, 0, 0);
          const { ports: _old, ...rest } = e;
          return ports ? { ...rest, labels, ports } : { ...rest, labels };
        }); // labels and ports
      const input: CompileInput = { policies: pols, profiles: profs, endpoints: eps };
      const inc = c.compile(input);
      modes.add(c.lastMode);
      expect(plain(inc), `step ${step}`).toEqual(plain(new PolicyCompiler().compile(input)));
    }
    expect([...modes].sort()).toEqual(['incremental']);
  });

  it('returns the same state when nothing changed, and takes the full path for a policy or profile change', () => {
    const r = rng(3);
    const eps = Array.from({ length: 6 }, (_, i) => endpoint(r, i, i + 1));
    const pols = policies();
    const profs = profiles();
    const c = new PolicyCompiler();
    const s0 = c.compile({ policies: pols, profiles: profs, endpoints: eps });
    // A new map (a new batch) holding the same profile objects: nothing changed.
    expect(c.compile({ policies: [...pols], profiles: new Map(profs), endpoints: eps.map((e) => ({ ...e })) })).toBe(
      s0,
    );
    expect(c.lastMode).toBe('unchanged');
    const changedPol = pols.map((p, i) => (i === 0 ? { ...p, spec: { ...p.spec, order: 99 } } : p));
    const s2 = c.compile({ policies: changedPol, profiles: profs, endpoints: eps });
    expect(c.lastMode).toBe('full');
    expect(plain(s2)).toEqual(
      plain(new PolicyCompiler().compile({ policies: changedPol, profiles: profs, endpoints: eps })),
    );
    const changedProf = new Map(profs).set('kns.a', { name: 'kns.a', spec: { labelsToApply: { 'pcns.team': 't1' } } });
    const s3 = c.compile({ policies: changedPol, profiles: changedProf, endpoints: eps });
    expect(c.lastMode).toBe('full');
    expect(plain(s3)).toEqual(
      plain(new PolicyCompiler().compile({ policies: changedPol, profiles: changedProf, endpoints: eps })),
    );
  });
});
