// Table of Kubernetes NetworkPolicy -> our NetworkPolicy conversions: every
// peer form, every port form, policyTypes defaulting, and the errors for what
// the API server would reject. Every converted policy must also pass the policy
// model's own schema (what the agent will read).
import { describe, expect, it } from 'vitest';
import {
  convertK8sNetworkPolicy,
  convertLabelSelector,
  PolicyConversionError,
  type KubeNetworkPolicy,
} from '../../src/model/k8s-networkpolicy.js';
import { networkPolicySpecSchema } from '../../src/model/policy.js';
import { parseSelector } from '../../src/selector/index.js';
import { namespaceToProfile, parseProfileName, serviceAccountToProfile } from '../../src/model/profiles.js';

const K8S = "netplugin.org/orchestrator == 'k8s'";
const np = (spec: KubeNetworkPolicy['spec'], name = 'p'): KubeNetworkPolicy => ({
  metadata: { name, namespace: 'web' },
  ...(spec ? { spec } : {}),
});

interface Case {
  name: string;
  in: KubeNetworkPolicy['spec'];
  selector?: string;
  types: string[];
  ingress?: unknown[];
  egress?: unknown[];
}

const cases: Case[] = [
  {
    name: 'empty podSelector, no rules: deny all ingress',
    in: { podSelector: {} },
    selector: K8S,
    types: ['Ingress'],
    ingress: [],
  },
  {
    name: 'matchLabels and every matchExpressions operator',
    in: {
      podSelector: {
        matchLabels: { app: 'db', tier: 'back' },
        matchExpressions: [
          { key: 'env', operator: 'In', values: ['prod', 'stage'] },
          { key: 'team', operator: 'NotIn', values: ['x'] },
          { key: 'owner', operator: 'Exists' },
          { key: 'legacy', operator: 'DoesNotExist' },
        ],
      },
      policyTypes: ['Ingress'],
    },
    selector:
      `${K8S} && app == 'db' && tier == 'back' && env in {'prod', 'stage'} && team not in {'x'} && ` +
      `has(owner) && !has(legacy)`,
    types: ['Ingress'],
    ingress: [],
  },
  {
    name: 'allow all ingress: one empty rule',
    in: { podSelector: {}, ingress: [{}] },
    types: ['Ingress'],
    ingress: [{ action: 'Allow' }],
  },
  {
    name: 'egress rules without policyTypes default to Ingress+Egress',
    in: { podSelector: {}, egress: [{}] },
    types: ['Ingress', 'Egress'],
    ingress: [],
    egress: [{ action: 'Allow' }],
  },
  {
    name: 'Egress only: deny all egress',
    in: { podSelector: {}, policyTypes: ['Egress'] },
    types: ['Egress'],
    egress: [],
  },
  {
    name: 'peer podSelector (same namespace)',
    in: { podSelector: {}, ingress: [{ from: [{ podSelector: { matchLabels: { role: 'fe' } } }] }] },
    types: ['Ingress'],
    ingress: [{ action: 'Allow', source: { selector: "role == 'fe'" } }],
  },
  {
    name: 'peer empty podSelector: all pods of the namespace',
    in: { podSelector: {}, ingress: [{ from: [{ podSelector: {} }] }] },
    types: ['Ingress'],
    ingress: [{ action: 'Allow', source: { selector: K8S } }],
  },
  {
    name: 'peer namespaceSelector only: all pods of those namespaces',
    in: { podSelector: {}, ingress: [{ from: [{ namespaceSelector: { matchLabels: { team: 'a' } } }] }] },
    types: ['Ingress'],
    ingress: [{ action: 'Allow', source: { selector: K8S, namespaceSelector: "team == 'a'" } }],
  },
  {
    name: 'peer empty namespaceSelector: all namespaces',
    in: { podSelector: {}, ingress: [{ from: [{ namespaceSelector: {} }] }] },
    types: ['Ingress'],
    ingress: [{ action: 'Allow', source: { selector: K8S, namespaceSelector: 'all()' } }],
  },
  {
    name: 'peer podSelector and namespaceSelector together',
    in: {
      podSelector: {},
      ingress: [
        {
          from: [
            {
              podSelector: { matchLabels: { a: 'b' } },
              namespaceSelector: { matchExpressions: [{ key: 'x', operator: 'Exists' }] },
            },
          ],
        },
      ],
    },
    types: ['Ingress'],
    ingress: [{ action: 'Allow', source: { selector: "a == 'b'", namespaceSelector: 'has(x)' } }],
  },
  {
    name: 'peer ipBlock with except',
    in: {
      podSelector: {},
      policyTypes: ['Egress'],
      egress: [{ to: [{ ipBlock: { cidr: '10.0.0.0/8', except: ['10.1.0.0/16', '10.2.0.0/16'] } }] }],
    },
    types: ['Egress'],
    egress: [{ action: 'Allow', destination: { nets: ['10.0.0.0/8'], notNets: ['10.1.0.0/16', '10.2.0.0/16'] } }],
  },
  {
    name: 'IPv6 ipBlock without except',
    in: { podSelector: {}, ingress: [{ from: [{ ipBlock: { cidr: 'fd00::/64' } }] }] },
    types: ['Ingress'],
    ingress: [{ action: 'Allow', source: { nets: ['fd00::/64'] } }],
  },
  {
    name: 'ports: number, named, range (endPort), default protocol TCP, UDP, SCTP',
    in: {
      podSelector: {},
      ingress: [
        {
          ports: [
            { port: 80 },
            { protocol: 'TCP', port: 'http' },
            { protocol: 'TCP', port: 8000, endPort: 8080 },
            { protocol: 'UDP', port: 53 },
            { protocol: 'SCTP', port: 9 },
          ],
        },
      ],
    },
    types: ['Ingress'],
    ingress: [
      { action: 'Allow', protocol: 'TCP', destination: { ports: [80, 'http', '8000:8080'] } },
      { action: 'Allow', protocol: 'UDP', destination: { ports: [53] } },
      { action: 'Allow', protocol: 'SCTP', destination: { ports: [9] } },
    ],
  },
  {
    name: 'protocol without port: every port of it; endPort equal to port: one port',
    in: {
      podSelector: {},
      ingress: [{ ports: [{ protocol: 'UDP' }, { protocol: 'UDP', port: 53 }, { port: 443, endPort: 443 }] }],
    },
    types: ['Ingress'],
    ingress: [
      { action: 'Allow', protocol: 'UDP' },
      { action: 'Allow', protocol: 'TCP', destination: { ports: [443] } },
    ],
  },
  {
    name: 'peers x protocols cross product, egress ports go with the peer',
    in: {
      podSelector: { matchLabels: { app: 'api' } },
      policyTypes: ['Egress'],
      egress: [
        {
          to: [{ podSelector: { matchLabels: { app: 'db' } } }, { ipBlock: { cidr: '192.168.0.0/24' } }],
          ports: [{ port: 5432 }, { protocol: 'UDP', port: 'dns' }],
        },
      ],
    },
    selector: `${K8S} && app == 'api'`,
    types: ['Egress'],
    egress: [
      { action: 'Allow', protocol: 'TCP', destination: { selector: "app == 'db'", ports: [5432] } },
      { action: 'Allow', protocol: 'TCP', destination: { nets: ['192.168.0.0/24'], ports: [5432] } },
      { action: 'Allow', protocol: 'UDP', destination: { selector: "app == 'db'", ports: ['dns'] } },
      { action: 'Allow', protocol: 'UDP', destination: { nets: ['192.168.0.0/24'], ports: ['dns'] } },
    ],
  },
  {
    name: 'ingress rules are dropped when policyTypes names only Egress',
    in: {
      podSelector: {},
      policyTypes: ['Egress'],
      ingress: [{}],
      egress: [{ ports: [{ port: 53, protocol: 'UDP' }] }],
    },
    types: ['Egress'],
    egress: [{ action: 'Allow', protocol: 'UDP', destination: { ports: [53] } }],
  },
];

describe('convertK8sNetworkPolicy', () => {
  for (const c of cases) {
    it(c.name, () => {
      const out = convertK8sNetworkPolicy(np(c.in));
      expect(out.metadata).toEqual({ name: 'knp.default.p', namespace: 'web' });
      expect(out.kind).toBe('NetworkPolicy');
      expect(out.spec.order).toBe(1000);
      if (c.selector) expect(out.spec.selector).toBe(c.selector);
      expect(out.spec.types).toEqual(c.types);
      expect(out.spec.ingress).toEqual(c.ingress);
      expect(out.spec.egress).toEqual(c.egress);
      // What the agent reads must be a valid model object, selectors included.
      const parsed = networkPolicySpecSchema.safeParse(out.spec);
      expect(parsed.success ? '' : JSON.stringify(parsed.error.issues)).toBe('');
      for (const r of [...(out.spec.ingress ?? []), ...(out.spec.egress ?? [])]) {
        for (const e of [r.source, r.destination]) {
          if (e?.selector) parseSelector(e.selector);
          if (e?.namespaceSelector) parseSelector(e.namespaceSelector);
        }
      }
    });
  }

  it('a converted selector matches what Kubernetes would select', () => {
    const sel = parseSelector(
      convertLabelSelector(
        { matchLabels: { app: 'db' }, matchExpressions: [{ key: 'env', operator: 'NotIn', values: ['dev'] }] },
        'f',
      ),
    );
    expect(sel.matches({ app: 'db', env: 'prod' })).toBe(true);
    expect(sel.matches({ app: 'db' })).toBe(true); // NotIn matches an absent key, as in Kubernetes
    expect(sel.matches({ app: 'db', env: 'dev' })).toBe(false);
    expect(sel.matches({ app: 'web' })).toBe(false);
  });

  it.each([
    [
      { podSelector: { matchExpressions: [{ key: 'a', operator: 'Gt', values: ['1'] }] } },
      'spec.podSelector.matchExpressions[0].operator="Gt"',
    ],
    [{ ingress: [{ ports: [{ protocol: 'ICMP' }] }] }, 'spec.ingress[0].ports[0].protocol="ICMP"'],
    [{ ingress: [{ ports: [{ port: 70000 }] }] }, 'spec.ingress[0].ports[0].port=70000'],
    [{ ingress: [{ ports: [{ port: 90, endPort: 80 }] }] }, 'spec.ingress[0].ports[0].endPort=80'],
    [
      { ingress: [{ ports: [{ port: 'http', endPort: 90 }] }] },
      'spec.ingress[0].ports[0].endPort needs a numeric port',
    ],
    [
      { egress: [{ to: [{ ipBlock: { cidr: '10.0.0.0/8' }, podSelector: {} }] }] },
      'spec.egress[0].to[0]: ipBlock cannot be combined',
    ],
    [{ ingress: [{ from: [{}] }] }, 'spec.ingress[0].from[0]: a peer needs'],
  ] as Array<[KubeNetworkPolicy['spec'], string]>)('rejects what the API server would: %j', (spec, msg) => {
    expect(() => convertK8sNetworkPolicy(np(spec))).toThrow(PolicyConversionError);
    expect(() => convertK8sNetworkPolicy(np(spec))).toThrow(msg);
  });
});

describe('profiles', () => {
  it('namespace -> kns.<ns> with pcns. labels, its name, allow-all rules', () => {
    const p = namespaceToProfile({
      metadata: { name: 'web', labels: { team: 'a', 'kubernetes.io/metadata.name': 'web' } },
    });
    expect(p.metadata.name).toBe('kns.web');
    expect(p.spec.labelsToApply).toEqual({
      'pcns.team': 'a',
      'pcns.kubernetes.io/metadata.name': 'web',
      'netplugin.org/name': 'web',
    });
    expect(p.spec.ingress).toEqual([{ action: 'Allow' }]);
    expect(p.spec.egress).toEqual([{ action: 'Allow' }]);
  });
  it('service account -> ksa.<ns>.<name> with pcsa. labels', () => {
    const p = serviceAccountToProfile({ metadata: { name: 'builder', namespace: 'ci', labels: { role: 'x' } } });
    expect(p.metadata.name).toBe('ksa.ci.builder');
    expect(p.spec.labelsToApply).toEqual({ 'pcsa.role': 'x' });
  });
  it('profile names parse back', () => {
    expect(parseProfileName('kns.web')).toEqual({ namespace: 'web' });
    expect(parseProfileName('ksa.web.build.er')).toEqual({ namespace: 'web', serviceAccount: 'build.er' });
    expect(parseProfileName('ksa.web')).toBeUndefined();
    expect(parseProfileName('other')).toBeUndefined();
  });
});
