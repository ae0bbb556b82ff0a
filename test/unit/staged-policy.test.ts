// Staged policies: the pure evaluation of a flow against the policy set with the staged changes
// applied (the pending trace, src/model/staged.ts), the hits flow records carry, the object a
// promotion writes, and the validation of the three staged kinds.
import { describe, expect, it } from 'vitest';
import { API_VERSION, type Resource } from '../../src/model/resources.js';
import { convertK8sNetworkPolicy } from '../../src/model/k8s-networkpolicy.js';
import { namespaceToProfile } from '../../src/model/profiles.js';
import {
  endpointFromWep,
  endpointViews,
  type EndpointView,
  type PolicyInput,
  type ProfileInput,
} from '../../src/model/policy-eval.js';
import {
  evaluateFlow,
  pendingPolicies,
  pendingTrace,
  promotedObject,
  type FlowToEvaluate,
  type StagedPolicy,
} from '../../src/model/staged.js';
import type { GlobalNetworkPolicySpec, NetworkPolicySpec } from '../../src/model/policy.js';
import type { KubeNetworkPolicySpec } from '../../src/model/k8s-networkpolicy-types.js';
import { parseManifest } from '../../src/ctl/validate.js';
import { resourceProblem } from '../../src/datastore/schemas.js';
import { parsePolicyTrace } from '../../src/flows/record.js';

function wep(ns: string, pod: string, ip: string, labels: Record<string, string>): Resource<'WorkloadEndpoint'> {
  return {
    apiVersion: API_VERSION,
    kind: 'WorkloadEndpoint',
    metadata: {
      name: `node1-k8s-${pod}-eth0`,
      namespace: ns,
      labels: { ...labels, 'netplugin.org/namespace': ns, 'netplugin.org/orchestrator': 'k8s' },
    },
    spec: {
      orchestrator: 'k8s',
      node: 'node1',
      containerID: `c-${pod}`,
      pod,
      endpoint: 'eth0',
      ipNetworks: [`${ip}/32`],
      profiles: [`kns.${ns}`],
      interfaceName: `npu${pod}`,
    },
  };
}

const profiles = new Map<string, ProfileInput>(
  ['x', 'y'].map((ns) => {
    const p = namespaceToProfile({ metadata: { name: ns, labels: { ns } } });
    return [p.metadata.name, { name: p.metadata.name, spec: p.spec }];
  }),
);
const views = endpointViews(
  [
    wep('x', 'a', '10.174.0.1', { app: 'a' }),
    wep('x', 'b', '10.174.0.2', { app: 'b' }),
    wep('y', 'c', '10.174.0.3', { app: 'c' }),
  ].map((w) => endpointFromWep(w)),
  profiles,
);
const ep = (key: string): EndpointView => views.find((v) => v.key === `node1-k8s-${key}-eth0`)!;

/** b -> a:80/TCP as a's node reports it (the destination's ingress decides). */
function flow(from: string, to: string, reporter: 'Src' | 'Dst' = 'Dst', port = 80): FlowToEvaluate {
  const s = ep(from);
  const d = ep(to);
  return {
    reporter,
    source: { addr: s.addrs[0]!, endpoint: s },
    dest: { addr: d.addrs[0]!, endpoint: d },
    protocol: 'TCP',
    port,
  };
}

const np = (ns: string, name: string, spec: NetworkPolicySpec): PolicyInput => ({
  kind: 'NetworkPolicy',
  name,
  namespace: ns,
  spec,
});
const gnp = (name: string, spec: GlobalNetworkPolicySpec): PolicyInput => ({ kind: 'GlobalNetworkPolicy', name, spec });
const snp = (ns: string, name: string, spec: Resource<'StagedNetworkPolicy'>['spec']): StagedPolicy => ({
  apiVersion: API_VERSION,
  kind: 'StagedNetworkPolicy',
  metadata: { name, namespace: ns },
  spec,
});
const sgnp = (name: string, spec: Resource<'StagedGlobalNetworkPolicy'>['spec']): StagedPolicy => ({
  apiVersion: API_VERSION,
  kind: 'StagedGlobalNetworkPolicy',
  metadata: { name },
  spec,
});
const sknp = (ns: string, name: string, spec: Resource<'StagedKubernetesNetworkPolicy'>['spec']): StagedPolicy => ({
  apiVersion: API_VERSION,
  kind: 'StagedKubernetesNetworkPolicy',
  metadata: { name, namespace: ns },
  spec,
});
const knp = (ns: string, name: string, spec: KubeNetworkPolicySpec): PolicyInput => {
  const r = convertK8sNetworkPolicy({ metadata: { name, namespace: ns }, spec });
  return np(ns, r.metadata.name, r.spec);
};

const allowFromB = np('x', 'allow-b', {
  order: 20,
  selector: "app == 'a'",
  ingress: [{ action: 'Allow', source: { selector: "app == 'b'" } }],
});

describe('the pending trace of a flow', () => {
  it('a staged deny shows as a pending deny, naming the staged policy, while the enforced set allows', () => {
    const pending = pendingPolicies(
      [allowFromB],
      [
        snp('x', 'deny-b', {
          order: 10,
          selector: "app == 'a'",
          ingress: [{ action: 'Deny', source: { selector: "app == 'b'" } }],
        }),
      ],
    );
    const enforced = evaluateFlow([allowFromB], profiles, flow('b', 'a'))!;
    expect(enforced.action).toBe('Allow');
    expect(enforced.hits).toEqual([
      { kind: 'NetworkPolicy', namespace: 'x', name: 'allow-b', tier: 'default', action: 'Allow', ruleIndex: 0 },
    ]);
    expect(pendingTrace(pending, profiles, flow('b', 'a'))).toEqual([
      { kind: 'StagedNetworkPolicy', namespace: 'x', name: 'deny-b', tier: 'default', action: 'Deny', ruleIndex: 0 },
    ]);
    // Traffic the staged policy does not match still reaches the enforced one, in the pending trace too.
    expect(pendingTrace(pending, profiles, flow('c', 'a'))).toEqual([
      { kind: 'EndOfTier', namespace: '', name: 'default', tier: 'default', action: 'Deny', ruleIndex: -1 },
    ]);
    // The source's egress (Src) is not selected by either: its profile allows.
    expect(pendingTrace(pending, profiles, flow('b', 'a', 'Src'))).toEqual([
      { kind: 'Profile', namespace: '', name: 'kns.x', tier: '', action: 'Allow', ruleIndex: 0 },
    ]);
    // The trace is one flow records carry.
    expect(
      parsePolicyTrace('policies', {
        enforced: enforced.hits,
        pending: pendingTrace(pending, profiles, flow('b', 'a')),
      }).pending[0]!.kind,
    ).toBe('StagedNetworkPolicy');
  });

  it('a staged Delete removes the enforced policy from the pending set', () => {
    const deny = np('x', 'deny-b', {
      order: 10,
      selector: "app == 'a'",
      ingress: [{ action: 'Deny', source: { selector: "app == 'b'" } }],
    });
    const pending = pendingPolicies([deny, allowFromB], [snp('x', 'deny-b', { stagedAction: 'Delete' })]);
    expect(pending.policies.map((p) => p.name)).toEqual(['allow-b']);
    expect(evaluateFlow([deny, allowFromB], profiles, flow('b', 'a'))!.hits[0]).toMatchObject({
      kind: 'NetworkPolicy',
      name: 'deny-b',
      action: 'Deny',
    });
    expect(pendingTrace(pending, profiles, flow('b', 'a'))).toEqual([
      { kind: 'NetworkPolicy', namespace: 'x', name: 'allow-b', tier: 'default', action: 'Allow', ruleIndex: 0 },
    ]);
    // Deleting the last policy selecting a leaves it to its profile.
    const none = pendingPolicies([allowFromB], [snp('x', 'allow-b', { stagedAction: 'Delete' })]);
    expect(pendingTrace(none, profiles, flow('c', 'a'))).toEqual([
      { kind: 'Profile', namespace: '', name: 'kns.x', tier: '', action: 'Allow', ruleIndex: 0 },
    ]);
    // A Delete of a policy that does not exist changes nothing; one in another namespace neither.
    expect(
      pendingPolicies(
        [allowFromB],
        [snp('x', 'nope', { stagedAction: 'Delete' }), snp('y', 'allow-b', { stagedAction: 'Delete' })],
      ).policies,
    ).toEqual([allowFromB]);
  });

  it('a staged Set replaces the enforced policy of its name in place', () => {
    const pending = pendingPolicies(
      [allowFromB],
      [
        snp('x', 'allow-b', {
          order: 20,
          selector: "app == 'a'",
          ingress: [{ action: 'Allow', source: { selector: "app == 'c'", namespaceSelector: 'all()' } }],
        }),
      ],
    );
    expect(pending.policies).toHaveLength(1);
    expect(pending.policies[0]!.staged).toEqual({ kind: 'StagedNetworkPolicy', name: 'allow-b', namespace: 'x' });
    expect(pendingTrace(pending, profiles, flow('c', 'a'))).toEqual([
      { kind: 'StagedNetworkPolicy', namespace: 'x', name: 'allow-b', tier: 'default', action: 'Allow', ruleIndex: 0 },
    ]);
    expect(pendingTrace(pending, profiles, flow('b', 'a'))).toEqual([
      { kind: 'EndOfTier', namespace: '', name: 'default', tier: 'default', action: 'Deny', ruleIndex: -1 },
    ]);
    // The enforced set is not touched.
    expect(evaluateFlow([allowFromB], profiles, flow('c', 'a'))!.action).toBe('Deny');
  });

  it('order decides between staged and enforced policies as between enforced ones', () => {
    const staged = (order: number) =>
      snp('x', 'deny-b', {
        order,
        selector: "app == 'a'",
        ingress: [{ action: 'Deny', source: { selector: "app == 'b'" } }],
      });
    expect(pendingTrace(pendingPolicies([allowFromB], [staged(10)]), profiles, flow('b', 'a'))[0]).toMatchObject({
      kind: 'StagedNetworkPolicy',
      action: 'Deny',
    });
    expect(pendingTrace(pendingPolicies([allowFromB], [staged(30)]), profiles, flow('b', 'a'))[0]).toMatchObject({
      kind: 'NetworkPolicy',
      name: 'allow-b',
      action: 'Allow',
    });
    // Equal order: the name decides (x/allow-b before x/deny-b).
    expect(pendingTrace(pendingPolicies([allowFromB], [staged(20)]), profiles, flow('b', 'a'))[0]).toMatchObject({
      name: 'allow-b',
    });
    // A staged global Pass before the enforced deny hands the flow to the profiles: Pass hit, then the profile's.
    const denyAll = np('x', 'deny-all', { order: 50, selector: 'all()', ingress: [{ action: 'Deny' }] });
    const pass = sgnp('pass-b', {
      order: 1,
      selector: 'all()',
      ingress: [{ action: 'Log' }, { action: 'Pass', source: { selector: "app == 'b'" } }],
    });
    expect(pendingTrace(pendingPolicies([denyAll], [pass]), profiles, flow('b', 'a'))).toEqual([
      {
        kind: 'StagedGlobalNetworkPolicy',
        namespace: '',
        name: 'pass-b',
        tier: 'default',
        action: 'Pass',
        ruleIndex: 1,
      },
      { kind: 'Profile', namespace: '', name: 'kns.x', tier: '', action: 'Allow', ruleIndex: 0 },
    ]);
    expect(evaluateFlow([denyAll], profiles, flow('b', 'a'))!.hits).toEqual([
      { kind: 'NetworkPolicy', namespace: 'x', name: 'deny-all', tier: 'default', action: 'Deny', ruleIndex: 0 },
    ]);
  });

  it('a StagedGlobalNetworkPolicy replaces the GlobalNetworkPolicy of its name, not a NetworkPolicy', () => {
    const g = gnp('allow-b', { order: 5, selector: "app == 'a'", ingress: [{ action: 'Deny' }] });
    const pending = pendingPolicies([allowFromB, g], [sgnp('allow-b', { stagedAction: 'Delete' })]);
    expect(pending.policies).toEqual([allowFromB]);
  });

  it('Kubernetes policies: the enforced mirror is named as the Kubernetes policy, a staged one by its own name', () => {
    const enforced = [
      knp('x', 'web', {
        podSelector: { matchLabels: { app: 'a' } },
        ingress: [{ from: [{ podSelector: { matchLabels: { app: 'b' } } }], ports: [{ port: 80 }] }],
      }),
    ];
    expect(evaluateFlow(enforced, profiles, flow('b', 'a'))!.hits).toEqual([
      { kind: 'KubernetesNetworkPolicy', namespace: 'x', name: 'web', tier: '', action: 'Allow', ruleIndex: 0 },
    ]);
    // Staged: only port 81 from b; b -> a:80 is then denied by the end of the tier.
    const staged = sknp('x', 'web', {
      podSelector: { matchLabels: { app: 'a' } },
      ingress: [{ from: [{ podSelector: { matchLabels: { app: 'b' } } }], ports: [{ port: 81 }] }],
    });
    const pending = pendingPolicies(enforced, [staged]);
    expect(pending.policies).toHaveLength(1);
    expect(pendingTrace(pending, profiles, flow('b', 'a'))).toEqual([
      { kind: 'EndOfTier', namespace: '', name: 'default', tier: 'default', action: 'Deny', ruleIndex: -1 },
    ]);
    expect(pendingTrace(pending, profiles, flow('b', 'a', 'Dst', 81))).toEqual([
      { kind: 'StagedKubernetesNetworkPolicy', namespace: 'x', name: 'web', tier: '', action: 'Allow', ruleIndex: 0 },
    ]);
    expect(pendingPolicies(enforced, [sknp('x', 'web', { stagedAction: 'Delete' })]).policies).toEqual([]);
  });

  it('a staged object whose Kubernetes spec does not convert is left out, named, and the rest still evaluates', () => {
    const bad = sknp('x', 'bad', { ingress: [{ from: [{ ipBlock: { cidr: '10.0.0.0/8' }, podSelector: {} }] }] });
    const pending = pendingPolicies(
      [allowFromB],
      [bad, snp('x', 'deny-b', { order: 1, selector: 'all()', ingress: [{ action: 'Deny' }] })],
    );
    expect(pending.skipped).toEqual([
      {
        ref: { kind: 'StagedKubernetesNetworkPolicy', name: 'bad', namespace: 'x' },
        reason: expect.stringContaining('ipBlock cannot be combined'),
      },
    ]);
    // In evaluation order: deny-b (order 1) first.
    expect(pending.policies.map((p) => p.name)).toEqual(['deny-b', 'allow-b']);
  });

  it('a flow whose reporting side is not an endpoint has no pending trace', () => {
    const a = ep('a');
    const out: FlowToEvaluate = {
      reporter: 'Src',
      source: { addr: '192.0.2.1' },
      dest: { addr: a.addrs[0]!, endpoint: a },
      protocol: 'TCP',
      port: 80,
    };
    expect(pendingTrace(pendingPolicies([allowFromB], []), profiles, out)).toEqual([]);
    // The peer unknown as an endpoint: matched by nets only.
    const world = { ...out, reporter: 'Dst' as const };
    const pending = pendingPolicies(
      [],
      [
        snp('x', 'from-world', {
          selector: "app == 'a'",
          ingress: [{ action: 'Allow', source: { nets: ['192.0.2.0/24'] } }],
        }),
      ],
    );
    expect(pendingTrace(pending, profiles, world)[0]).toMatchObject({
      kind: 'StagedNetworkPolicy',
      name: 'from-world',
      action: 'Allow',
    });
  });
});

describe('promotion', () => {
  it('writes the enforced kind of the same name, without stagedAction, with the staged labels', () => {
    const s = snp('x', 'p', { stagedAction: 'Set', order: 3, selector: 'all()', ingress: [{ action: 'Allow' }] });
    s.metadata.labels = { team: 'a' };
    s.metadata.resourceVersion = '42';
    expect(promotedObject(s)).toEqual({
      kind: 'NetworkPolicy',
      res: {
        apiVersion: API_VERSION,
        kind: 'NetworkPolicy',
        metadata: { name: 'p', namespace: 'x', labels: { team: 'a' } },
        spec: { order: 3, selector: 'all()', ingress: [{ action: 'Allow' }] },
      },
    });
    expect(promotedObject(sknp('x', 'k', { policyTypes: ['Ingress'] }))).toEqual({
      kind: 'KubernetesNetworkPolicy',
      object: {
        apiVersion: 'networking.k8s.io/v1',
        kind: 'NetworkPolicy',
        metadata: { name: 'k', namespace: 'x' },
        spec: { podSelector: {}, policyTypes: ['Ingress'] },
      },
    });
  });
});

describe('validation of the staged kinds', () => {
  const manifest = (kind: string, spec: unknown, ns: string | null = 'x') => ({
    apiVersion: API_VERSION,
    kind,
    metadata: { name: 'p', ...(ns ? { namespace: ns } : {}) },
    spec,
  });

  it('accepts the enforced spec plus stagedAction, by kind name or short name', () => {
    expect(
      parseManifest(
        manifest('StagedNetworkPolicy', { stagedAction: 'Set', selector: 'all()', ingress: [{ action: 'Deny' }] }),
        'doc',
      ).kind,
    ).toBe('StagedNetworkPolicy');
    expect(
      parseManifest(manifest('sgnp', { namespaceSelector: "ns == 'x'", egress: [{ action: 'Allow' }] }, null), 'doc')
        .kind,
    ).toBe('StagedGlobalNetworkPolicy');
    const k = parseManifest(
      manifest('StagedKubernetesNetworkPolicy', {
        podSelector: { matchLabels: { app: 'a' } },
        ingress: [{ from: [{ namespaceSelector: {} }], ports: [{ port: 'http' }] }],
      }),
      'doc',
    );
    expect(k.kind).toBe('StagedKubernetesNetworkPolicy');
    expect(parseManifest(manifest('snp', { stagedAction: 'Delete' }), 'doc').spec).toEqual({ stagedAction: 'Delete' });
  });

  it('refuses unknown fields, bad values and a Delete with rules, naming the field', () => {
    expect(() => parseManifest(manifest('StagedNetworkPolicy', { stagedAction: 'Remove' }), 'doc')).toThrow(
      /spec\.stagedAction: "Remove" is not one of Set, Delete/,
    );
    expect(() => parseManifest(manifest('StagedNetworkPolicy', { stagedActon: 'Set' }), 'doc')).toThrow(
      /spec\.stagedActon: unknown field; did you mean stagedAction\?/,
    );
    expect(() =>
      parseManifest(manifest('StagedNetworkPolicy', { stagedAction: 'Delete', selector: 'all()' }), 'doc'),
    ).toThrow(/spec\.selector: a staged Delete removes the enforced policy/);
    expect(() => parseManifest(manifest('StagedGlobalNetworkPolicy', {}, 'x'), 'doc')).toThrow(
      /cluster-scoped; remove metadata.namespace/,
    );
    expect(() =>
      parseManifest(manifest('sknp', { podSelector: { matchExpressions: [{ key: 'a', operator: 'Is' }] } }), 'doc'),
    ).toThrow(/spec\.podSelector\.matchExpressions\[0\]\.operator: "Is" is not one of In, NotIn, Exists, DoesNotExist/);
    expect(() =>
      parseManifest(
        manifest('sknp', { ingress: [{ from: [{ ipBlock: { cidr: '10.0.0.0/8' }, podSelector: {} }] }] }),
        'doc',
      ),
    ).toThrow(/spec\.ingress\[0\]\.from\[0\]: ipBlock cannot be combined with podSelector or namespaceSelector/);
    expect(() => parseManifest(manifest('sknp', { ingress: [{ ports: [{ port: 80, endPort: 79 }] }] }), 'doc')).toThrow(
      /spec\.ingress\[0\]\.ports\[0\]\.endPort: 79 must be from port \(80\) to 65535/,
    );
    expect(() => parseManifest(manifest('sknp', { ingres: [] }), 'doc')).toThrow(
      /spec\.ingres: unknown field; did you mean ingress\?/,
    );
  });

  it('the datastore refuses a malformed stored staged object (it is then skipped, as other malformed objects)', () => {
    const stored = {
      apiVersion: API_VERSION,
      kind: 'StagedNetworkPolicy',
      metadata: { name: 'p', namespace: 'x' },
      spec: { stagedAction: 'Sometimes' },
    };
    expect(resourceProblem('StagedNetworkPolicy', stored)).toMatch(/spec\.stagedAction/);
    expect(
      resourceProblem('StagedNetworkPolicy', {
        ...stored,
        spec: { stagedAction: 'Set', ingress: [{ action: 'Deny' }] },
      }),
    ).toBeUndefined();
  });
});
