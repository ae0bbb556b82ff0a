// Our own policy model (netplugin.org/v3) enforced by the node agent, with real
// traffic: order, Deny before Allow, Pass to the profiles, GlobalNetworkPolicy
// (with namespaceSelector), notNets/notPorts, notProtocol and Log.
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { Resource } from '../../src/model/resources.js';
import type { GlobalNetworkPolicySpec, NetworkPolicySpec } from '../../src/model/policy.js';
import { execFileSync } from 'node:child_process';
import { assertThrowawayHostNetns } from '../support/cni.js';
import { createNetns, removeAllNetns } from '../support/netns.js';
import {
  addPod,
  deleteAllPolicies,
  expectReachability,
  pod,
  probeFrom,
  putObject,
  listTable,
  startPolicyEnv,
  type PolicyEnv,
  type Pod,
} from '../support/policy-harness.js';

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
    await putObject(
      env,
      np('x', 'deny-b', {
        order: 10,
        selector: "pod == 'a'",
        ingress: [{ action: 'Deny', source: { selector: "pod == 'b'" } }],
      }),
    );
    await putObject(env, np('x', 'allow-all', { order: 20, selector: "pod == 'a'", ingress: [{ action: 'Allow' }] }));
    await expectReachability(env, 80, 'tcp', (f, t) => !(is(f, 'x/b') && is(t, 'x/a')));
    await putObject(env, np('x', 'allow-all', { order: 5, selector: "pod == 'a'", ingress: [{ action: 'Allow' }] }));
    await expectReachability(env, 80, 'tcp', () => true);
  });

  it('Pass skips the remaining policies to the profiles; unmatched traffic of a selected endpoint is denied', async () => {
    await putObject(
      env,
      gnp('pass-from-y', {
        order: 1,
        selector: 'all()',
        ingress: [{ action: 'Pass', source: { namespaceSelector: "ns == 'y'" } }],
      }),
    );
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
      np('x', 'nets', {
        selector: "pod == 'a'",
        ingress: [
          {
            action: 'Allow',
            protocol: 'TCP',
            source: { nets: [POOL.cidr], notNets: [`${xb.ip}/32`] },
            destination: { notPorts: [81] },
          },
          { action: 'Allow', notProtocol: 'TCP' },
        ],
      }),
    );
    await expectReachability(env, 80, 'tcp', (f, t) => !is(t, 'x/a') || !is(f, 'x/b'));
    await expectReachability(env, 81, 'tcp', (_f, t) => !is(t, 'x/a'));
    await expectReachability(env, 81, 'udp', () => true);
  });

  it('a named port in notPorts excludes that port of the destination pod', async () => {
    await putObject(
      env,
      np('x', 'not-named', {
        selector: "pod == 'a'",
        ingress: [{ action: 'Allow', protocol: 'TCP', destination: { notPorts: ['serve-80-tcp'] } }],
      }),
    );
    await expectReachability(env, 80, 'tcp', (_f, t) => !is(t, 'x/a'));
    await expectReachability(env, 81, 'tcp', () => true);
    expect(listTable(env)).toMatch(/ip daddr \. meta l4proto \. tcp dport != @np4-/);
  });

  it('Log records the packet and goes on to the next rule', async () => {
    await putObject(
      env,
      np('x', 'log-then-allow', {
        selector: "pod == 'a'",
        ingress: [
          { action: 'Log', protocol: 'TCP' },
          { action: 'Allow', protocol: 'TCP', destination: { ports: [80] } },
        ],
      }),
    );
    await expectReachability(env, 80, 'tcp', () => true);
    await expectReachability(env, 81, 'tcp', (_f, t) => !is(t, 'x/a'));
    const listing = listTable(env);
    const line = listing
      .split('\n')
      .find((l) => l.includes('log prefix') && l.includes('NetworkPolicy x/log-then-allow ingress rule 0'));
    expect(line, listing).toBeDefined();
    const packets = Number(/counter packets (\d+)/.exec(line!)?.[1]);
    expect(packets).toBeGreaterThan(0);
    // The log rule sees connections before the allow rule decides; a new probe adds to it.
    await probeFrom(pod(env, 'y/c'), [[pod(env, 'x/a').ip, 80, 'tcp']]);
    const again = listTable(env)
      .split('\n')
      .find((l) => l.includes('NetworkPolicy x/log-then-allow ingress rule 0'))!;
    expect(Number(/counter packets (\d+)/.exec(again)?.[1])).toBeGreaterThan(packets);
  });

  it('selectors match endpoints of other nodes (known only from the datastore), and follow their label changes', async () => {
    // A "pod on node2": a netns reached through a plain veth (not a pod interface of this node), and
    // its WorkloadEndpoint on node2, as that node's plugin would have written it.
    const n = createNetns('polremote');
    const host = `rmt${process.pid % 100000}`;
    const ip = '10.77.62.200';
    const sh = (args: string[]) => execFileSync('ip', args);
    try {
      sh(['link', 'add', host, 'type', 'veth', 'peer', 'name', 'eth0', 'netns', n.name]);
      sh(['-n', n.name, 'addr', 'add', `${ip}/32`, 'dev', 'eth0']);
      sh(['-n', n.name, 'link', 'set', 'eth0', 'up']);
      sh(['-n', n.name, 'route', 'add', '169.254.1.1', 'dev', 'eth0']);
      sh(['-n', n.name, 'route', 'add', 'default', 'via', '169.254.1.1', 'dev', 'eth0']);
      execFileSync('sysctl', [
        '-qw',
        `net.ipv4.conf.${host}.proxy_arp=1`,
        `net.ipv4.neigh.${host}.proxy_delay=0`,
        `net.ipv4.conf.${host}.forwarding=1`,
      ]);
      sh(['link', 'set', host, 'up']);
      sh(['route', 'add', `${ip}/32`, 'dev', host]);
      // As the plugin does for its pods: the gateway's neighbour entry is the host end's MAC.
      const mac = (
        JSON.parse(execFileSync('ip', ['-j', 'link', 'show', host]).toString()) as Array<{ address: string }>
      )[0]!.address;
      sh(['-n', n.name, 'neigh', 'add', '169.254.1.1', 'lladdr', mac, 'dev', 'eth0', 'nud', 'permanent']);
      const remote: Pod = {
        ns: 'y',
        name: 'remote',
        id: 'y/remote',
        netns: n.name,
        netnsPath: n.path,
        ip,
        containerId: '',
      };
      const wep = (role: string): Resource<'WorkloadEndpoint'> => ({
        apiVersion: 'netplugin.org/v3',
        kind: 'WorkloadEndpoint',
        metadata: {
          name: 'node2-k8s-remote-eth0',
          namespace: 'y',
          labels: { role, 'netplugin.org/namespace': 'y', 'netplugin.org/orchestrator': 'k8s' },
        },
        spec: {
          orchestrator: 'k8s',
          node: 'node2',
          containerID: 'remote',
          pod: 'remote',
          endpoint: 'eth0',
          ipNetworks: [`${ip}/32`],
          profiles: ['kns.y'],
          interfaceName: 'npmremote0',
        },
      });
      await putObject(env, wep('client'));
      await putObject(
        env,
        np('x', 'from-remote-clients', {
          selector: "pod == 'a'",
          ingress: [
            { action: 'Allow', protocol: 'TCP', source: { selector: "role == 'client'", namespaceSelector: 'all()' } },
          ],
        }),
      );
      const xa = pod(env, 'x/a');
      const reach = async (want: boolean) => {
        const end = Date.now() + 20_000;
        let got = !want;
        while (got !== want && Date.now() < end) got = (await probeFrom(remote, [[xa.ip, 80, 'tcp']], 1))[0]!;
        return got;
      };
      expect(await reach(true)).toBe(true);
      // Nobody else is a remote client: x/b is denied.
      expect(await probeFrom(pod(env, 'x/b'), [[xa.ip, 80, 'tcp']], 1)).toEqual([false]);
      await putObject(env, wep('other'));
      expect(await reach(false)).toBe(false);
      // Remote endpoints get no chains here: only this node's pods are in the interface maps.
      expect(listTable(env)).not.toContain('npmremote0');
    } finally {
      await env.ds.delete('WorkloadEndpoint', 'node2-k8s-remote-eth0', { namespace: 'y' }).catch(() => undefined);
      try {
        sh(['link', 'del', host]);
      } catch {
        // gone with the netns
      }
    }
  });

  it('a bad rule in the datastore is refused by the schema with the field named', async () => {
    await expect(putObject(env, np('x', 'bad', { ingress: [{ action: 'Accept' as never }] }))).rejects.toThrow(
      /ingress\.0\.action/,
    );
  });
});
