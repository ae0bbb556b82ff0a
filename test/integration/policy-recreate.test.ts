// What marks a pod interface as programmed follows the endpoint, not the
// interface name: with the agent down, a pod deleted and re-created under the
// same name (so the same host veth name) is isolated, although the old pod's
// entry was in the table, until the agent programmed the new endpoint.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  addPod,
  applyK8sPolicy,
  expectReachability,
  listTable,
  pod,
  probeFrom,
  startPolicyAgent,
  startPolicyEnv,
  SERVE_PORTS,
  type PolicyEnv,
} from '../support/policy-harness.js';
import { assertThrowawayHostNetns } from '../support/cni.js';
import { removeAllNetns, createNetns } from '../support/netns.js';
import { cni, expectOk, k8sArgs } from '../support/plugin-harness.js';
import { putPod } from '../support/k8s-harness.js';
import { hostVethName } from '../../src/model/names.js';
import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { ROOT } from '../support/cni.js';
import { join } from 'node:path';

const POOL = { name: 'pol-recreate', cidr: '10.77.81.0/26', blockSize: 26 };
let env: PolicyEnv;

beforeAll(async () => {
  assertThrowawayHostNetns();
  env = await startPolicyEnv(POOL, 'npj');
  await addPod(env, 'x', 'a');
  await addPod(env, 'y', 'c');
  // Admits nobody to a pod labelled gen=new; the first x/a is not one.
  await applyK8sPolicy(env, {
    metadata: { name: 'new-admits-nobody', namespace: 'x' },
    spec: { podSelector: { matchLabels: { gen: 'new' } }, policyTypes: ['Ingress'] },
  });
  await expectReachability(env, 80, 'tcp', () => true);
}, 120_000);
afterAll(async () => {
  await env?.close();
  removeAllNetns();
}, 60_000);

describe('a pod re-created under the same name while the agent is down', { timeout: 120_000 }, () => {
  it('is isolated until the agent programmed the new endpoint', async () => {
    const old = pod(env, 'x/a');
    const c = pod(env, 'y/c');
    expect(await probeFrom(c, [[old.ip, 80, 'tcp']], 1)).toEqual([true]);
    // The host veth name depends on namespace and pod name only: the re-created pod gets this one again.
    const ifname = hostVethName(String(env.conf['host_veth_prefix']), 'x.a');
    expect(listTable(env)).toContain(`"${ifname}" : jump to-${ifname}`);
    await env.agent.stop();
    // The runtime runs the plugin itself (no agent): it must find the agent's table.
    const perExec = { ...env.conf, policy_setup_timeout_seconds: 1 };
    const callEnv = { NETPLUGIN_POLICY_TABLE: env.table };
    old.server?.kill('SIGKILL');
    expectOk(
      await cni('DEL', perExec, {
        containerId: old.containerId,
        netns: old.netnsPath,
        args: k8sArgs('x', 'a'),
        env: callEnv,
      }),
    );
    env.pods.splice(env.pods.indexOf(old), 1);

    // The same pod name again (a StatefulSet's pod), now selected by the policy that admits nobody.
    putPod(env.api, 'x', 'a', { labels: { pod: 'a', gen: 'new' }, containers: [{ name: 'main', ports: SERVE_PORTS }] });
    const n = createNetns('polanew');
    const server = spawn(
      'ip',
      ['netns', 'exec', n.name, 'python3', join(ROOT, 'test/support/policy-pod.py'), 'serve', '80', '81'],
      { stdio: ['ignore', 'pipe', 'inherit'] },
    );
    await new Promise<void>((r) => createInterface({ input: server.stdout! }).once('line', () => r()));
    const containerId = `x-a-new-${process.pid}-${Date.now()}`;
    const r = await cni('ADD', perExec, { containerId, netns: n.path, args: k8sArgs('x', 'a'), env: callEnv });
    expectOk(r);
    const ip = (JSON.parse(r.stdout).ips[0].address as string).split('/')[0]!;
    const fresh = { ns: 'x', name: 'a', id: 'x/a', netns: n.name, netnsPath: n.path, ip, containerId, server };
    env.pods.push(fresh);

    // Agent down: nobody reaches it, and it reaches nobody.
    expect(await probeFrom(c, [[ip, 80, 'tcp']], 1)).toEqual([false]);
    expect(await probeFrom(fresh, [[c.ip, 80, 'tcp']], 1)).toEqual([false]);

    // The agent programs the new endpoint: still admits nobody (its policy), but may send (its profile).
    env.agent = await startPolicyAgent(env);
    const deadline = Date.now() + 20_000;
    let out = [false];
    while (Date.now() < deadline && !(out = await probeFrom(fresh, [[c.ip, 80, 'tcp']], 1))[0]);
    expect(out).toEqual([true]);
    expect(await probeFrom(c, [[ip, 80, 'tcp']], 1)).toEqual([false]);
    expect(listTable(env)).toContain(`"${ifname}" : jump to-${ifname}`);
  });
});
