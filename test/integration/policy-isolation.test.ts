// Fail-closed enforcement: a new pod is isolated from the moment its host veth
// exists until the agent programmed its policy; the ADD returns once it is
// programmed; with the agent down a new pod stays isolated and its ADD waits
// out policy_setup_timeout_seconds while existing pods keep their enforcement;
// a restarted agent resyncs the table (no gap, no duplicates); tables other
// than `inet netplugin` are never changed.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { existsSync, readFileSync } from 'node:fs';
import { endpointStatusKey, statusFilePath } from '../../src/policy-status/index.js';
import { workloadEndpointName } from '../../src/model/names.js';
import { nftRun } from '../../src/native/nft.js';
import { assertThrowawayHostNetns } from '../support/cni.js';
import { removeAllNetns } from '../support/netns.js';
import {
  addPod,
  addPreparedPod,
  applyK8sPolicy,
  expectReachability,
  pod,
  prepareNetns,
  probeFrom,
  startPolicyAgent,
  listTable,
  startPolicyEnv,
  watchProbe,
  type PolicyEnv,
} from '../support/policy-harness.js';

const POOL = { name: 'pol-iso', cidr: '10.77.63.0/26', blockSize: 26 };
let env: PolicyEnv;
const OTHER =
  'table inet policy-test-other {\n\tchain c {\n\t\ttype filter hook forward priority -5; policy accept;\n\t\tip ' +
  'saddr 192.0.2.1 counter drop\n\t}\n}';
let otherBefore = '';

beforeAll(async () => {
  assertThrowawayHostNetns();
  // Another component's table (portmap, kube-proxy, the NAT table): it must come out unchanged.
  nftRun(OTHER);
  otherBefore = nftRun('list table inet policy-test-other');
  env = await startPolicyEnv(POOL, 'npo', { timeoutSeconds: 30 });
  await addPod(env, 'x', 'a');
  await addPod(env, 'x', 'b');
  await addPod(env, 'y', 'c');
  // x/a admits only x/b.
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
  try {
    nftRun('delete table inet policy-test-other');
  } catch {
    // absent
  }
}, 60_000);

/** Every address of the pool not used by a pod yet: where the next pod's address will be. */
function freeAddresses(): string[] {
  const used = new Set(env.pods.map((p) => p.ip));
  const out: string[] = [];
  for (let i = 1; i < 63; i++) if (!used.has(`10.77.63.${i}`)) out.push(`10.77.63.${i}`);
  return out;
}

describe('pods are isolated until programmed', { timeout: 120_000 }, () => {
  it('a new pod under a policy is never reachable by a denied peer, not even before its chains exist; the ADD returns once programmed', async () => {
    const p = await prepareNetns('new1');
    const targets = freeAddresses().map((a) => [a, 80, 'tcp'] as [string, number, 'tcp']);
    const reached = await watchProbe(pod(env, 'y/c'), targets, 6, 0.3);
    const add = await addPreparedPod(env, p, 'x', { pod: 'new' });
    expect(await reached).toEqual([]);
    // Programmed well before the 30 s policy_setup_timeout_seconds: the agent released the ADD.
    expect(add.ms).toBeLessThan(15_000);
    const status = JSON.parse(readFileSync(statusFilePath(wepName(p.ns, p.name), env.statusDir), 'utf8'));
    expect(status).toMatchObject({ programmed: true, containerID: p.containerId });
    expect(await probeFrom(pod(env, 'x/b'), [[p.ip, 80, 'tcp']], 3)).toEqual([true]);
    expect(await probeFrom(pod(env, 'y/c'), [[p.ip, 80, 'tcp']], 1)).toEqual([false]);
  });

  it('agent stopped: existing enforcement stays, a new pod is isolated and its ADD waits for the timeout; the restarted agent resyncs without duplicates', async () => {
    await env.agent.stop();
    const before = withoutCounters(listTable(env));
    await expectReachability(env, 80, 'tcp', (f, t) => !['x/a', 'x/new1'].includes(t.id) || f.id === 'x/b');
    const p = await prepareNetns('new2');
    const conf = { ...env.conf, policy_setup_timeout_seconds: 3 };
    const add = await addPreparedPod(env, p, 'x', { pod: 'c' }, conf);
    expect(add.ms).toBeGreaterThanOrEqual(3000);
    expect(existsSync(statusFilePath(wepName(p.ns, p.name), env.statusDir))).toBe(false);
    // Fail closed: nobody reaches it and it reaches nobody (its profile would allow all).
    expect(await probeFrom(pod(env, 'x/b'), [[p.ip, 80, 'tcp']], 1)).toEqual([false]);
    expect(await probeFrom(p, [[pod(env, 'y/c').ip, 80, 'tcp']], 1)).toEqual([false]);
    expect(withoutCounters(listTable(env))).toBe(before);

    // Restart: a denied peer never gets through to x/a while the agent starts and resyncs.
    const reached = await watchProbe(pod(env, 'y/c'), [[pod(env, 'x/a').ip, 80, 'tcp']], 5, 0.3);
    env.agent = await startPolicyAgent(env);
    expect(await reached).toEqual([]);
    await expectReachability(env, 80, 'tcp', (f, t) => !['x/a', 'x/new1'].includes(t.id) || f.id === 'x/b');
    const listing = listTable(env);
    // No duplicates: every chain once, the base chains with their fixed rules, one map entry per pod.
    const chains = [...listing.matchAll(/^\tchain (\S+) \{/gm)].map((m) => m[1]);
    expect(new Set(chains).size).toBe(chains.length);
    const rulesOf = (chain: string) =>
      new RegExp(`chain ${chain} \\{([\\s\\S]*?)\\n\\t\\}`)
        .exec(listing)![1]!
        .trim()
        .split('\n')
        .map((l) => l.trim())
        .filter((l) => !l.startsWith('type ') && !l.startsWith('comment '));
    // unprogrammed-interface and re-created-interface drops, established, TCP without SYN and without an entry, vmap
    expect(rulesOf('forward').length).toBe(5);
    expect(rulesOf('forward-in').length).toBe(5);
    expect(chains.filter((c) => c!.startsWith('to-') && !c!.endsWith('-pol')).length).toBe(env.pods.length);
  });

  it('nothing outside inet netplugin was changed', () => {
    expect(nftRun('list table inet policy-test-other')).toBe(otherBefore);
  });
});

/** The status key of a pod's endpoint: its namespace and endpoint name. */
const wepName = (ns: string, podName: string) =>
  endpointStatusKey(ns, workloadEndpointName('node1', 'k8s', podName, 'eth0'));
const withoutCounters = (listing: string) => listing.replace(/counter packets \d+ bytes \d+/g, 'counter');
