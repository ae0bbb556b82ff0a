// One malformed object costs itself only, through the real agent on the
// kubernetes datastore (fake API server): a tenant's pod whose endpoint
// annotations do not parse (cni.netplugin.org/podIPs, ipNATs) must not stop
// the agent's policy controller from programming other pods (before, the list
// of every endpoint failed on it, the watch errored and every relist failed
// again); it is logged once and counted on /metrics. An endpoint that becomes
// malformed is treated as deleted: its pod is isolated (fail closed), and is
// programmed again once repaired.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ENDPOINT_ANNOTATIONS as WEP } from '../../src/model/annotations.js';
import { assertThrowawayHostNetns } from '../support/cni.js';
import { putPod } from '../support/k8s-harness.js';
import { removeAllNetns } from '../support/netns.js';
import { NODE } from '../support/plugin-harness.js';
import {
  addPod,
  applyK8sPolicy,
  expectReachability,
  pod,
  probeFrom,
  startPolicyEnv,
  type PolicyEnv,
} from '../support/policy-harness.js';

const POOL = { name: 'pol-invalid', cidr: '10.77.66.0/26', blockSize: 26 };
let env: PolicyEnv;

beforeAll(async () => {
  assertThrowawayHostNetns();
  env = await startPolicyEnv(POOL, 'npv', { mode: 'kubernetes', timeoutSeconds: 20 });
  await addPod(env, 'x', 'a');
  await addPod(env, 'x', 'b');
  await addPod(env, 'y', 'c');
  // x/a and any pod labelled pod=new admit only x/b.
  await applyK8sPolicy(env, {
    metadata: { name: 'a-from-b', namespace: 'x' },
    spec: {
      podSelector: { matchLabels: { pod: 'a' } },
      ingress: [{ from: [{ podSelector: { matchLabels: { pod: 'b' } } }] }],
    },
  });
  await applyK8sPolicy(env, {
    metadata: { name: 'new-from-b', namespace: 'x' },
    spec: {
      podSelector: { matchLabels: { pod: 'new' } },
      ingress: [{ from: [{ podSelector: { matchLabels: { pod: 'b' } } }] }],
    },
  });
  await expectReachability(env, 80, 'tcp', (f, t) => t.id !== 'x/a' || f.id === 'x/b');
}, 120_000);
afterAll(async () => {
  await env?.close();
  removeAllNetns();
}, 60_000);

async function metrics(): Promise<string> {
  const addr = /serving \/healthz.*addr="?(127\.0\.0\.1:\d+)/.exec(env.agent.log())?.[1];
  expect(addr, 'the agent logs its health address').toBeDefined();
  const r = await fetch(`http://${addr}/metrics`);
  return r.text();
}

/** An API call from the test; one retry when the server dropped the idle keep-alive socket the client reused. */
async function api<T>(call: () => Promise<T>): Promise<T> {
  try {
    return await call();
  } catch (e) {
    if (!/ECONNRESET/.test((e as Error).message)) throw e;
    return call();
  }
}

async function until(what: string, pred: () => Promise<boolean> | boolean, ms = 20_000): Promise<void> {
  const end = Date.now() + ms;
  while (!(await pred())) {
    if (Date.now() > end) throw new Error(`${what} did not happen within ${ms} ms\n${env.agent.log().slice(-4000)}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

describe('malformed objects on the kubernetes datastore, through the agent', { timeout: 120_000 }, () => {
  it("a tenant pod with malformed endpoint annotations does not stop another pod's policy from being programmed", async () => {
    // A tenant with edit rights on its namespace writes the plugin's annotations itself.
    putPod(env.api, 'y', 'evil-ips', {
      nodeName: NODE,
      annotations: { [WEP.containerID]: 'forged-1', [WEP.podIPs]: 'not-an-address' },
    });
    putPod(env.api, 'y', 'evil-nat', {
      nodeName: NODE,
      annotations: { [WEP.containerID]: 'forged-2', [WEP.podIPs]: '10.77.66.60/32', [WEP.ipNATs]: '{not json' },
    });
    // The agent's pod watch delivers them before the new pod's endpoint (one ordered stream).
    const added = await addPod(env, 'x', 'new', { pod: 'new' });
    expect(added.ip).toBeTruthy();
    // x/new is programmed (isolated until then): x/b reaches it, nobody else does.
    await expectReachability(env, 80, 'tcp', (f, t) => !['x/a', 'x/new'].includes(t.id) || f.id === 'x/b');
    const m = await metrics();
    expect(m).toMatch(/^netplugin_datastore_invalid_objects\{kind="WorkloadEndpoint"\} 2$/m);
    expect(m).toMatch(/^netplugin_datastore_invalid_objects\{kind="IPPool"\} 0$/m);
    // Logged once per object and revision, naming the annotation.
    const warnings = env.agent
      .log()
      .split('\n')
      .filter((l) => l.includes('malformed object') && l.includes('evil-ips'));
    expect(warnings).toHaveLength(1);
    expect(warnings[0]).toContain(WEP.podIPs);
    expect(
      env.agent
        .log()
        .split('\n')
        .find((l) => l.includes('malformed object') && l.includes('evil-nat')),
    ).toContain(WEP.ipNATs);
  });

  it('an endpoint that becomes malformed is dropped (its pod isolated) and programmed again once repaired', async () => {
    const yc = pod(env, 'y/c');
    const xb = pod(env, 'x/b');
    const good = (await api(() => env.kube.getPod('y', 'c'))).metadata.annotations ?? {};
    await api(() =>
      env.kube.patchPod('y', 'c', { metadata: { annotations: { [WEP.podIPs]: `${yc.ip}/33` } } }, 'merge'),
    );
    await until('y/c is isolated', async () => {
      const [fromB, fromC] = await Promise.all([
        probeFrom(xb, [[yc.ip, 80, 'tcp']], 0.75),
        probeFrom(yc, [[xb.ip, 80, 'tcp']], 0.75),
      ]);
      return !fromB[0] && !fromC[0];
    });
    expect(await metrics()).toMatch(/^netplugin_datastore_invalid_objects\{kind="WorkloadEndpoint"\} 3$/m);
    // Repaired: programmed again, and no longer counted.
    await api(() =>
      env.kube.patchPod('y', 'c', { metadata: { annotations: { [WEP.podIPs]: good[WEP.podIPs]! } } }, 'merge'),
    );
    await expectReachability(env, 80, 'tcp', (f, t) => !['x/a', 'x/new'].includes(t.id) || f.id === 'x/b');
    expect(await metrics()).toMatch(/^netplugin_datastore_invalid_objects\{kind="WorkloadEndpoint"\} 2$/m);
  });
});
