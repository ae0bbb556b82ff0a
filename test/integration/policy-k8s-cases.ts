// Kubernetes NetworkPolicy (networking.k8s.io/v1) enforced by the node agent,
// as truth tables after the upstream e2e network-policy scenarios: namespaces
// x, y, z with pods a, b, c serving TCP/UDP on 80 and 81; every case probes the
// whole 9x9 matrix with fresh connections and compares it with the table the
// Kubernetes semantics give. Run by policy-k8s-etcd.test.ts (policies reach
// etcd as kube-controllers mirrors them, knp.default.*) and
// policy-k8s-kdd.test.ts (the kubernetes datastore derives them on read).
import { afterAll, afterEach, beforeAll, describe, it } from 'vitest';
import { assertThrowawayHostNetns } from '../support/cni.js';
import { removeAllNetns } from '../support/netns.js';
import type { PoolDef } from '../support/plugin-harness.js';
import {
  addMatrix,
  applyK8sPolicy,
  deleteAllPolicies,
  deleteK8sPolicy,
  expectReachability,
  pod,
  setNamespaceLabels,
  setPodLabels,
  startPolicyEnv,
  type DatastoreMode,
  type PolicyEnv,
  type Pod,
} from '../support/policy-harness.js';

const meta = (ns: string, name: string) => ({ name, namespace: ns });
const is = (p: Pod, id: string) => p.id === id;
const inNs = (p: Pod, ns: string) => p.ns === ns;

export function defineTruthTables(mode: DatastoreMode, POOL: PoolDef, prefix: string): void {
  let env: PolicyEnv;

  beforeAll(async () => {
    assertThrowawayHostNetns();
    env = await startPolicyEnv(POOL, prefix, { mode });
    await addMatrix(env);
  }, 180_000);
  afterEach(async () => {
    await deleteAllPolicies(env);
    for (const ns of ['x', 'y', 'z']) await setNamespaceLabels(env, ns, { ns });
  });
  afterAll(async () => {
    await env?.close();
    removeAllNetns();
  }, 60_000);

  describe(`Kubernetes NetworkPolicy truth tables (${mode} datastore)`, { timeout: 120_000 }, () => {
    it('no policy: everything reachable', async () => {
      await expectReachability(env, 80, 'tcp', () => true);
    });

    it('default deny ingress in x (TCP and UDP)', async () => {
      await applyK8sPolicy(env, {
        metadata: meta('x', 'deny-ingress'),
        spec: { podSelector: {}, policyTypes: ['Ingress'] },
      });
      await expectReachability(env, 80, 'tcp', (_f, t) => !inNs(t, 'x'));
      await expectReachability(env, 81, 'udp', (_f, t) => !inNs(t, 'x'));
    });

    it('default deny egress in x: also blocks x to x; replies of y pods still pass', async () => {
      await applyK8sPolicy(env, {
        metadata: meta('x', 'deny-egress'),
        spec: { podSelector: {}, policyTypes: ['Egress'] },
      });
      await expectReachability(env, 80, 'tcp', (f) => !inNs(f, 'x'));
    });

    it('allow from a namespace (namespaceSelector)', async () => {
      await applyK8sPolicy(env, {
        metadata: meta('x', 'from-y'),
        spec: { podSelector: {}, ingress: [{ from: [{ namespaceSelector: { matchLabels: { ns: 'y' } } }] }] },
      });
      await expectReachability(env, 80, 'tcp', (f, t) => !inNs(t, 'x') || inNs(f, 'y'));
    });

    it('allow from a pod of the same namespace (podSelector)', async () => {
      await applyK8sPolicy(env, {
        metadata: meta('x', 'a-from-b'),
        spec: {
          podSelector: { matchLabels: { pod: 'a' } },
          ingress: [{ from: [{ podSelector: { matchLabels: { pod: 'b' } } }] }],
        },
      });
      await expectReachability(env, 80, 'tcp', (f, t) => !is(t, 'x/a') || is(f, 'x/b'));
    });

    it('namespaceSelector and podSelector in one peer: AND', async () => {
      await applyK8sPolicy(env, {
        metadata: meta('x', 'a-from-yc'),
        spec: {
          podSelector: { matchLabels: { pod: 'a' } },
          ingress: [
            {
              from: [
                {
                  namespaceSelector: { matchExpressions: [{ key: 'ns', operator: 'In', values: ['y'] }] },
                  podSelector: { matchLabels: { pod: 'c' } },
                },
              ],
            },
          ],
        },
      });
      await expectReachability(env, 80, 'tcp', (f, t) => !is(t, 'x/a') || is(f, 'y/c'));
    });

    it('namespaceSelector or podSelector in two peers: OR', async () => {
      await applyK8sPolicy(env, {
        metadata: meta('x', 'a-from-y-or-b'),
        spec: {
          podSelector: { matchLabels: { pod: 'a' } },
          ingress: [
            {
              from: [
                { namespaceSelector: { matchLabels: { ns: 'y' } } },
                { podSelector: { matchLabels: { pod: 'b' } } },
              ],
            },
          ],
        },
      });
      await expectReachability(env, 80, 'tcp', (f, t) => !is(t, 'x/a') || inNs(f, 'y') || is(f, 'x/b'));
    });

    it('ipBlock with except (matches pod addresses too)', async () => {
      const yc = pod(env, 'y/c');
      await applyK8sPolicy(env, {
        metadata: meta('x', 'a-from-block'),
        spec: {
          podSelector: { matchLabels: { pod: 'a' } },
          ingress: [{ from: [{ ipBlock: { cidr: POOL.cidr, except: [`${yc.ip}/32`] } }] }],
        },
      });
      await expectReachability(env, 80, 'tcp', (f, t) => !is(t, 'x/a') || !is(f, 'y/c'));
    });

    it('named port: only the port of that name and protocol', async () => {
      await applyK8sPolicy(env, {
        metadata: meta('x', 'a-81-named'),
        spec: { podSelector: { matchLabels: { pod: 'a' } }, ingress: [{ ports: [{ port: 'serve-81-tcp' }] }] },
      });
      await expectReachability(env, 81, 'tcp', () => true);
      await expectReachability(env, 80, 'tcp', (_f, t) => !is(t, 'x/a'));
      await expectReachability(env, 81, 'udp', (_f, t) => !is(t, 'x/a'));
    });

    it('endPort: a range of ports; UDP port rules leave TCP denied', async () => {
      await applyK8sPolicy(env, {
        metadata: meta('x', 'a-range'),
        spec: {
          podSelector: { matchLabels: { pod: 'a' } },
          ingress: [
            {
              ports: [
                { protocol: 'TCP', port: 81, endPort: 90 },
                { protocol: 'UDP', port: 80 },
              ],
            },
          ],
        },
      });
      await expectReachability(env, 81, 'tcp', () => true);
      await expectReachability(env, 80, 'tcp', (_f, t) => !is(t, 'x/a'));
      await expectReachability(env, 80, 'udp', () => true);
    });

    it('multiple policies: the union of what they allow', async () => {
      await applyK8sPolicy(env, {
        metadata: meta('x', 'a-from-b'),
        spec: {
          podSelector: { matchLabels: { pod: 'a' } },
          ingress: [{ from: [{ podSelector: { matchLabels: { pod: 'b' } } }] }],
        },
      });
      await applyK8sPolicy(env, {
        metadata: meta('x', 'a-from-z'),
        spec: {
          podSelector: { matchLabels: { pod: 'a' } },
          ingress: [{ from: [{ namespaceSelector: { matchLabels: { ns: 'z' } } }] }],
        },
      });
      await expectReachability(env, 80, 'tcp', (f, t) => !is(t, 'x/a') || is(f, 'x/b') || inNs(f, 'z'));
    });

    it('policy update and deletion', async () => {
      await applyK8sPolicy(env, {
        metadata: meta('x', 'a-from'),
        spec: {
          podSelector: { matchLabels: { pod: 'a' } },
          ingress: [{ from: [{ podSelector: { matchLabels: { pod: 'b' } } }] }],
        },
      });
      await expectReachability(env, 80, 'tcp', (f, t) => !is(t, 'x/a') || is(f, 'x/b'));
      await applyK8sPolicy(env, {
        metadata: meta('x', 'a-from'),
        spec: {
          podSelector: { matchLabels: { pod: 'a' } },
          ingress: [{ from: [{ podSelector: { matchLabels: { pod: 'c' } } }] }],
        },
      });
      await expectReachability(env, 80, 'tcp', (f, t) => !is(t, 'x/a') || is(f, 'x/c'));
      await deleteK8sPolicy(env, 'x', 'a-from');
      await expectReachability(env, 80, 'tcp', () => true);
    });

    it('pod label update moves a pod into and out of a peer selection and a policy selection', async () => {
      await applyK8sPolicy(env, {
        metadata: meta('x', 'a-from-b'),
        spec: {
          podSelector: { matchLabels: { pod: 'a' } },
          ingress: [{ from: [{ podSelector: { matchLabels: { pod: 'b' } } }] }],
        },
      });
      await expectReachability(env, 80, 'tcp', (f, t) => !is(t, 'x/a') || is(f, 'x/b'));
      const xc = pod(env, 'x/c');
      await setPodLabels(env, xc, { pod: 'b' });
      await expectReachability(env, 80, 'tcp', (f, t) => !is(t, 'x/a') || is(f, 'x/b') || is(f, 'x/c'));
      await setPodLabels(env, xc, { pod: 'a' }); // now selected by the policy itself
      await expectReachability(env, 80, 'tcp', (f, t) => !(is(t, 'x/a') || is(t, 'x/c')) || is(f, 'x/b'));
      await setPodLabels(env, xc, { pod: 'c' });
    });

    it('namespace label update changes who a namespaceSelector matches', async () => {
      await applyK8sPolicy(env, {
        metadata: meta('x', 'from-team'),
        spec: { podSelector: {}, ingress: [{ from: [{ namespaceSelector: { matchLabels: { team: 'blue' } } }] }] },
      });
      await expectReachability(env, 80, 'tcp', (_f, t) => !inNs(t, 'x'));
      await setNamespaceLabels(env, 'z', { ns: 'z', team: 'blue' });
      await expectReachability(env, 80, 'tcp', (f, t) => !inNs(t, 'x') || inNs(f, 'z'));
    });

    it('egress: only DNS-style UDP to port 80, and the destination must still admit it', async () => {
      await applyK8sPolicy(env, {
        metadata: meta('x', 'a-egress-udp'),
        spec: {
          podSelector: { matchLabels: { pod: 'a' } },
          policyTypes: ['Egress'],
          egress: [{ ports: [{ protocol: 'UDP', port: 80 }] }],
        },
      });
      await applyK8sPolicy(env, {
        metadata: meta('y', 'deny-ingress'),
        spec: { podSelector: { matchLabels: { pod: 'b' } }, policyTypes: ['Ingress'] },
      });
      await expectReachability(env, 80, 'udp', (_f, t) => !is(t, 'y/b'));
      await expectReachability(env, 80, 'tcp', (f, t) => !is(f, 'x/a') && !is(t, 'y/b'));
    });

    it('egress to a namespace with ingress from a pod: a connection needs both', async () => {
      await applyK8sPolicy(env, {
        metadata: meta('x', 'egress-to-y'),
        spec: {
          podSelector: {},
          policyTypes: ['Egress'],
          egress: [{ to: [{ namespaceSelector: { matchLabels: { ns: 'y' } } }] }],
        },
      });
      await applyK8sPolicy(env, {
        metadata: meta('y', 'from-xa'),
        spec: {
          podSelector: {},
          ingress: [
            { from: [{ namespaceSelector: { matchLabels: { ns: 'x' } }, podSelector: { matchLabels: { pod: 'a' } } }] },
          ],
        },
      });
      await expectReachability(env, 80, 'tcp', (f, t) =>
        inNs(f, 'x') ? inNs(t, 'y') && is(f, 'x/a') : !inNs(t, 'y') || false,
      );
    });
  });
}
