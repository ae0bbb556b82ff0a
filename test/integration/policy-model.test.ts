// Our own policy model (netplugin.org/v3) enforced by the node agent, with real
// traffic: order, Deny before Allow, Pass to the profiles, GlobalNetworkPolicy
// (with namespaceSelector), notNets/notPorts, notProtocol and Log.
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { Resource } from '../../src/datastore/types.js';
import type { GlobalNetworkPolicySpec, NetworkPolicySpec } from '../../src/model/policy.js';
import { assertThrowawayHostNetns } from '../fixtures/cni.js';
import { removeAllNetns } from '../fixtures/netns.js';
import { addPod, deleteAllPolicies, expectReachability, pod, probeFrom, putObject, listTable, startPolicyEnv, type PolicyEnv, type Pod } from './policy-harness.js';

const POOL = { name: 'pol-model', cidr: '10.77.62.0/24', blockSize: 26 };
let env: PolicyEnv;

beforeAll(async () => {
  assertThrowawayHostNetns();
  env = await startPolicyEnv(POOL, 'npm');
  await addPod(env, 'x', 'a');
  await addPod(env, 'x', 'b');
  await addPod(env, 'y', 'c');
}, 120_000);
afterEach(() => deleteAllPolicies(env));
afterAll(async () => {
  await env?.close();
  removeAllNetns();
}, 60_000);

const is = (p: Pod, id: string) => p.id === id;

function np(ns: string, name: string, spec: NetworkPolicySpec): Resource<'NetworkPolicy'> {
  return { apiVersion: 'netplugin.org/v3', kind: 'NetworkPolicy', metadata: { name, namespace: ns }, spec };
}
function gnp(name: string, spec: GlobalNetworkPolicySpec): Resource<'GlobalNetworkPolicy'> {
  return { apiVersion: 'netplugin.org/v3', kind: 'GlobalNetworkPolicy', metadata: { name }, spec };
}

describe('netplugin.org/v3 policy model', { timeout: 120_000 }, () => {
  it('order: the first matching rule of the lowest order wins (Deny before Allow, then swapped)', async () => {
    await putObject(env, np('x', 'deny-b', { order: 10, selector: "pod == 'a'", ingress: [{ action: 'Deny', source: { selector: "pod == 'b'" } }] }));
    await putObject(env, np('x', 'allow-all', { order: 20, selector: "pod == 'a'", ingress: [{ action: 'Allow' }] }));
    await expectReachability(env, 80, 'tcp', (f, t) => !(is(f, 'x/b') && is(t, 'x/a')));
    await putObject(env, np('x', 'allow-all', { order: 5, selector: "pod == 'a'", ingress: [{ action: 'Allow' }] }));
    await expectReachability(env, 80, 'tcp', () => true);
  });

  it('Pass skips the remaining policies to the profiles; unmatched traffic of a selected endpoint is denied', async () => {
    await putObject(env, gnp('pass-from-y', { order: 1, selector: 'all()', ingress: [{ action: 'Pass', source: { namespaceSelector: "ns == 'y'" } }] }));
    await putObject(env, np('x', 'deny-all', { order: 10, selector: 'all()', ingress: [{ action: 'Deny' }] }));
    // x pods: y passes (kns.x allows), x is denied by deny-all; y/c: selected by the GNP only, x unmatched -> denied.
    await expectReachability(env, 80, 'tcp', (f) => f.ns === 'y');
  });

  it('GlobalNetworkPolicy with namespaceSelector selects endpoints of those namespaces only', async () => {
    await putObject(env, gnp('isolate-x', { selector: 'all()', namespaceSelector: "ns == 'x'", types: ['Ingress'] }));
    await expectReachability(env, 80, 'tcp', (_f, t) => t.ns !== 'x');
  });

  it('nets with notNets, notPorts and notProtocol', async () => {
    const xb = pod(env, 'x/b');
    await putObject(
      env,
      np('x', 'nets', { selector: "pod == 'a'", ingress: [{ action: 'Allow', protocol: 'TCP', source: { nets: [POOL.cidr], notNets: [`${xb.ip}/32`] }, destination: { notPorts: [81] } }, { action: 'Allow', notProtocol: 'TCP' }] }),
    );
    await expectReachability(env, 80, 'tcp', (f, t) => !is(t, 'x/a') || !is(f, 'x/b'));
    await expectReachability(env, 81, 'tcp', (_f, t) => !is(t, 'x/a'));
    await expectReachability(env, 81, 'udp', () => true);
  });

  it('Log records the packet and goes on to the next rule', async () => {
    await putObject(env, np('x', 'log-then-allow', { selector: "pod == 'a'", ingress: [{ action: 'Log', protocol: 'TCP' }, { action: 'Allow', protocol: 'TCP', destination: { ports: [80] } }] }));
    await expectReachability(env, 80, 'tcp', () => true);
    await expectReachability(env, 81, 'tcp', (_f, t) => !is(t, 'x/a'));
    const listing = listTable(env);
    const line = listing.split('\n').find((l) => l.includes('log prefix') && l.includes('np x/log-then-allow ingress rule 0'));
    expect(line, listing).toBeDefined();
    const packets = Number(/counter packets (\d+)/.exec(line!)?.[1]);
    expect(packets).toBeGreaterThan(0);
    // The log rule sees connections before the allow rule decides; a new probe adds to it.
    await probeFrom(pod(env, 'y/c'), [[pod(env, 'x/a').ip, 80, 'tcp']]);
    const again = listTable(env).split('\n').find((l) => l.includes('np x/log-then-allow ingress rule 0'))!;
    expect(Number(/counter packets (\d+)/.exec(again)?.[1])).toBeGreaterThan(packets);
  });

  it('a bad rule in the datastore is refused by the schema with the field named', async () => {
    await expect(putObject(env, np('x', 'bad', { ingress: [{ action: 'Accept' as never }] }))).rejects.toThrow(/ingress\.0\.action/);
  });
});
