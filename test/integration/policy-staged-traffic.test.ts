// Staged policies are never enforced: with real pods, the node agent and real traffic, staged
// denies of all three kinds change nothing on the wire (nor in the agent's nftables table), while
// the pending evaluation of the same flows (src/model/staged.ts) says they would be denied; the
// same deny, promoted with the built netpluginctl, then blocks.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { assertThrowawayHostNetns } from '../support/cni.js';
import { removeAllNetns } from '../support/netns.js';
import { runBuiltCtl } from '../support/ctl.js';
import {
  addPod,
  expectReachability,
  listTable,
  modelInputs,
  pod,
  putObject,
  startPolicyEnv,
  type PolicyEnv,
  type Pod,
} from '../support/policy-harness.js';
import { API_VERSION, type Resource } from '../../src/model/resources.js';
import { evaluateFlow, pendingPolicies, pendingTrace, type StagedPolicy } from '../../src/model/staged.js';

const POOL = { name: 'pol-staged', cidr: '10.174.0.0/24', blockSize: 26 };
let env: PolicyEnv;

beforeAll(async () => {
  assertThrowawayHostNetns();
  env = await startPolicyEnv(POOL, 'npu');
  await addPod(env, 'x', 'a');
  await addPod(env, 'x', 'b');
  await addPod(env, 'y', 'c');
}, 120_000);
afterAll(async () => {
  await env?.close();
  removeAllNetns();
}, 60_000);

const STAGED: StagedPolicy[] = [
  {
    apiVersion: API_VERSION,
    kind: 'StagedNetworkPolicy',
    metadata: { name: 'deny-b', namespace: 'x' },
    spec: { order: 1, selector: "pod == 'a'", ingress: [{ action: 'Deny', source: { selector: "pod == 'b'" } }] },
  },
  {
    apiVersion: API_VERSION,
    kind: 'StagedGlobalNetworkPolicy',
    metadata: { name: 'deny-y' },
    spec: { order: 1, selector: 'all()', namespaceSelector: "ns == 'y'", egress: [{ action: 'Deny' }] },
  },
  {
    apiVersion: API_VERSION,
    kind: 'StagedKubernetesNetworkPolicy',
    metadata: { name: 'default-deny', namespace: 'y' },
    spec: { podSelector: {}, policyTypes: ['Ingress'] },
  },
  // A staged Delete of the enforced allow of a.
  {
    apiVersion: API_VERSION,
    kind: 'StagedNetworkPolicy',
    metadata: { name: 'allow-a', namespace: 'x' },
    spec: { stagedAction: 'Delete' },
  },
];

describe('staged policies on the wire', { timeout: 120_000 }, () => {
  it('a staged deny changes nothing on the wire while its pending verdict is Deny; promoted, it blocks', async () => {
    await putObject(env, {
      apiVersion: API_VERSION,
      kind: 'NetworkPolicy',
      metadata: { name: 'allow-a', namespace: 'x' },
      spec: { order: 10, selector: "pod == 'a'", ingress: [{ action: 'Allow' }] },
    });
    await expectReachability(env, 80, 'tcp', () => true);

    for (const s of STAGED) await putObject(env, s as Resource);
    // A later enforced change the agent must apply: once it is in the table, the agent has seen what came before it.
    await putObject(env, {
      apiVersion: API_VERSION,
      kind: 'GlobalNetworkPolicy',
      metadata: { name: 'marker' },
      spec: { order: 500, selector: "pod == 'nobody'", ingress: [{ action: 'Allow' }] },
    });
    const end = Date.now() + 30_000;
    while (!listTable(env).includes('GlobalNetworkPolicy marker') && Date.now() < end)
      await new Promise((r) => setTimeout(r, 200));
    const after = listTable(env);
    expect(after).toContain('GlobalNetworkPolicy marker');
    expect(after).not.toMatch(/Staged|deny-b|deny-y|default-deny/);
    await expectReachability(env, 80, 'tcp', () => true);

    // What the agent reports as pending for the same flows
    // (Dst: the receiving pod's ingress; Src: the sender's egress).
    const { policies: enforced, profiles, views } = await modelInputs(env);
    const staged = (
      await Promise.all([
        env.ds.list('StagedNetworkPolicy'),
        env.ds.list('StagedGlobalNetworkPolicy'),
        env.ds.list('StagedKubernetesNetworkPolicy'),
      ])
    ).flatMap((l) => l.items as StagedPolicy[]);
    expect(staged).toHaveLength(STAGED.length);
    const pending = pendingPolicies(enforced, staged);
    const side = (p: Pod) => ({ addr: p.ip, endpoint: views.find((v) => v.addrs.includes(p.ip))! });
    const flow = (from: Pod, to: Pod, reporter: 'Src' | 'Dst') => ({
      reporter,
      source: side(from),
      dest: side(to),
      protocol: 'TCP' as const,
      port: 80,
    });
    const [xa, xb, yc] = [pod(env, 'x/a'), pod(env, 'x/b'), pod(env, 'y/c')];
    expect(evaluateFlow(enforced, profiles, flow(xb, xa, 'Dst'))!.hits).toEqual([
      { kind: 'NetworkPolicy', namespace: 'x', name: 'allow-a', tier: 'default', action: 'Allow', ruleIndex: 0 },
    ]);
    expect(pendingTrace(pending, profiles, flow(xb, xa, 'Dst'))).toEqual([
      { kind: 'StagedNetworkPolicy', namespace: 'x', name: 'deny-b', tier: 'default', action: 'Deny', ruleIndex: 0 },
    ]);
    expect(pendingTrace(pending, profiles, flow(yc, xa, 'Src'))).toEqual([
      {
        kind: 'StagedGlobalNetworkPolicy',
        namespace: '',
        name: 'deny-y',
        tier: 'default',
        action: 'Deny',
        ruleIndex: 0,
      },
    ]);
    expect(pendingTrace(pending, profiles, flow(xa, yc, 'Dst'))).toEqual([
      { kind: 'EndOfTier', namespace: '', name: 'default', tier: 'default', action: 'Deny', ruleIndex: -1 },
    ]);
    // x/b's ingress is selected by no policy, staged or not: its profile decides, as enforced.
    expect(pendingTrace(pending, profiles, flow(xa, xb, 'Dst'))).toEqual([
      { kind: 'Profile', namespace: '', name: 'kns.x', tier: '', action: 'Allow', ruleIndex: 0 },
    ]);

    // Promoted with the CLI, the same deny is enforced: b -> a is blocked, the rest still flows.
    const ctlEnv = { ETCD_ENDPOINTS: env.c!.etcd.endpoint, DATASTORE_TYPE: 'etcdv3' };
    const r = await runBuiltCtl(['policy', 'promote', 'snp/deny-b', '-n', 'x'], { env: ctlEnv });
    expect(r.err).toBe('');
    expect(r.out).toContain('NetworkPolicy x/deny-b created');
    await expectReachability(env, 80, 'tcp', (f, t) => !(f.id === 'x/b' && t.id === 'x/a'));

    for (const s of STAGED.slice(1)) await env.ds.delete(s.kind, s.metadata.name, { namespace: s.metadata.namespace });
  });
});
