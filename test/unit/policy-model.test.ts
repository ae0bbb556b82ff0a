import { describe, expect, it } from 'vitest';
import {
  comparePolicies,
  effectiveTypes,
  namespaceLabelsFromProfile,
  networkPolicySpecSchema,
  parsePort,
  profileSpecSchema,
} from '../../src/model/policy.js';
import { validateResource } from '../../src/datastore/schemas.js';

describe('policy model', () => {
  it('accepts every rule form', () => {
    const r = networkPolicySpecSchema.safeParse({
      order: 10,
      selector: "app == 'a'",
      types: ['Ingress', 'Egress'],
      ingress: [
        {
          action: 'Allow',
          protocol: 'TCP',
          source: {
            selector: "app == 'b'",
            namespaceSelector: 'all()',
            nets: ['10.0.0.0/8'],
            notNets: ['10.1.0.0/16'],
          },
          destination: { ports: [80, '8000:8100', 'http'], notPorts: [81] },
        },
        { action: 'Deny', notProtocol: 'UDP' },
        { action: 'Pass' },
        { action: 'Log', protocol: 132 },
      ],
      egress: [{ action: 'Allow', protocol: 'UDP', destination: { ports: [53] } }],
    });
    expect(r.success, JSON.stringify(r.error?.issues)).toBe(true);
  });

  it('rejects bad input naming the field', () => {
    const bad = [
      [{ ingress: [{ action: 'Accept' }] }, 'ingress.0.action'],
      [{ selector: "app = 'a'" }, 'selector'],
      [{ ingress: [{ action: 'Allow', destination: { ports: [80] } }] }, 'ingress.0.protocol'],
      [
        { ingress: [{ action: 'Allow', protocol: 'TCP', destination: { ports: ['90:80'] } }] },
        'ingress.0.destination.ports.0',
      ],
      [{ ingress: [{ action: 'Allow', source: { nets: ['banana'] } }] }, 'ingress.0.source.nets.0'],
      [{ types: ['Both'] }, 'types.0'],
    ] as const;
    for (const [spec, path] of bad) {
      const r = networkPolicySpecSchema.safeParse(spec);
      expect(r.success).toBe(false);
      expect(r.error!.issues.map((i) => i.path.join('.'))).toContain(path);
    }
    expect(() =>
      validateResource(
        'NetworkPolicy',
        {
          apiVersion: 'netplugin.org/v3',
          kind: 'NetworkPolicy',
          metadata: { name: 'p', namespace: 'x' },
          spec: { ingress: [{ action: 'Nope' }] },
        },
        '/key',
      ),
    ).toThrow(/corrupt NetworkPolicy at \/key: spec.ingress.0.action/);
    expect(profileSpecSchema.safeParse({ labelsToApply: { a: 1 } }).success).toBe(false);
  });

  it('defaults types as Calico does', () => {
    expect(effectiveTypes({})).toEqual(['Ingress']);
    expect(effectiveTypes({ egress: [{ action: 'Allow' }] })).toEqual(['Egress']);
    expect(effectiveTypes({ ingress: [{ action: 'Allow' }], egress: [{ action: 'Allow' }] })).toEqual([
      'Ingress',
      'Egress',
    ]);
    expect(effectiveTypes({ types: ['Egress'], ingress: [{ action: 'Allow' }] })).toEqual(['Egress']);
  });

  it('parses ports, namespace labels and sorts by order then name', () => {
    expect(parsePort(80)).toEqual({ kind: 'range', first: 80, last: 80 });
    expect(parsePort('8000:8100')).toEqual({ kind: 'range', first: 8000, last: 8100 });
    expect(parsePort('dns')).toEqual({ kind: 'named', name: 'dns' });
    expect(namespaceLabelsFromProfile({ 'pcns.team': 'a', 'netplugin.org/name': 'x', other: 'y' })).toEqual({
      team: 'a',
      'netplugin.org/name': 'x',
    });
    const ps = [{ name: 'z', order: 1 }, { name: 'b' }, { name: 'a', order: 1 }, { name: 'c', order: 0.5 }];
    expect(ps.sort(comparePolicies).map((p) => p.name)).toEqual(['c', 'a', 'z', 'b']);
  });
});
