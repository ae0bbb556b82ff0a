// Node registration against a real namespace's addresses: autodetection
// (first-found, interface=, can-reach= through the kernel's source address
// choice), re-registration after the node address changes, and the Node's
// other fields left alone.
import { execFileSync } from 'node:child_process';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { parseAutodetect, registerNode } from '../../src/agent/node-registration.js';
import { MemoryDatastore } from '../../src/datastore/memory.js';
import { API_VERSION } from '../../src/model/resources.js';
import { netlink, openNetns, type Netlink, type NetNS } from '../../src/native/index.js';
import { createNetns, inNetns, removeAllNetns } from '../support/netns.js';

const log = { error() {}, warn() {}, info() {}, debug() {} };
let N: { name: string; path: string };
let ns: NetNS;
let nl: Netlink;
const hostLink = `nrg${process.pid % 100000}`;

beforeEach(() => {
  N = createNetns('nreg');
  ns = openNetns(N.path);
  nl = netlink(ns);
  inNetns(N.name, 'ip', ['link', 'add', 'docker0', 'type', 'bridge']);
  inNetns(N.name, 'ip', ['addr', 'add', '172.17.0.1/16', 'dev', 'docker0']);
  inNetns(N.name, 'ip', ['link', 'add', 'ens3', 'type', 'veth', 'peer', 'name', 'ens4']);
  inNetns(N.name, 'ip', ['addr', 'add', '192.0.2.10/24', 'dev', 'ens3']);
  inNetns(N.name, 'ip', ['addr', 'add', '198.51.100.7/24', 'dev', 'ens4']);
});

afterEach(() => {
  nl.close();
  ns.close();
  removeAllNetns();
  try {
    execFileSync('ip', ['link', 'del', hostLink], { stdio: 'ignore' });
  } catch {
    /* not created by this test */
  }
});

describe('registerNode', () => {
  it('registers the first-found address (skipping docker0), and re-registers when it changes, keeping other fields', async () => {
    inNetns(N.name, 'ip', ['addr', 'del', '198.51.100.7/24', 'dev', 'ens4']);
    const ds = new MemoryDatastore();
    await ds.create({
      apiVersion: API_VERSION,
      kind: 'Node',
      metadata: { name: 'n1', labels: { zone: 'x' } },
      spec: { podCIDRs: ['10.244.1.0/24'] },
    });
    let n = await registerNode({ ds, node: 'n1', nl, autodetect: parseAutodetect('first-found'), log });
    expect(n.spec.ipv4Address).toBe('192.0.2.10/24');
    expect(n.spec.addresses).toEqual([{ address: '192.0.2.10', type: 'NetpluginNodeIP' }]);
    inNetns(N.name, 'ip', ['addr', 'del', '192.0.2.10/24', 'dev', 'ens3']);
    inNetns(N.name, 'ip', ['addr', 'add', '192.0.2.11/25', 'dev', 'ens3']);
    n = await registerNode({ ds, node: 'n1', nl, autodetect: parseAutodetect('first-found'), log });
    expect(n.spec.ipv4Address).toBe('192.0.2.11/25');
    expect(n.spec.podCIDRs).toEqual(['10.244.1.0/24']);
    expect(n.metadata.labels).toEqual({ zone: 'x' });
  });

  it('interface=REGEX, an explicit --node-ip without prefix (prefix taken from the interface), and none', async () => {
    const ds = new MemoryDatastore();
    let n = await registerNode({ ds, node: 'n1', nl, autodetect: parseAutodetect('interface=ens4'), log });
    expect(n.spec.ipv4Address).toBe('198.51.100.7/24');
    n = await registerNode({ ds, node: 'n1', nl, ipv4: '192.0.2.10', autodetect: parseAutodetect('first-found'), log });
    expect(n.spec.ipv4Address).toBe('192.0.2.10/24');
    await expect(
      registerNode({ ds, node: 'n1', nl, ipv4: 'fd00::1', autodetect: parseAutodetect('first-found'), log }),
    ).rejects.toThrow(/--node-ip 'fd00::1' is not an IPv4 address/);
  });

  it('can-reach=ADDR picks the address the kernel uses as source towards ADDR', async () => {
    // can-reach asks this process's namespace (the agent runs in the node's), so the link is made here.
    const peer = createNetns('nregp');
    execFileSync('ip', ['link', 'add', hostLink, 'type', 'veth', 'peer', 'name', 'eth0', 'netns', peer.name]);
    execFileSync('ip', ['addr', 'add', '10.123.0.1/24', 'dev', hostLink]);
    execFileSync('ip', ['link', 'set', hostLink, 'up']);
    const here = netlink();
    try {
      const ds = new MemoryDatastore();
      const n = await registerNode({
        ds,
        node: 'n1',
        nl: here,
        autodetect: parseAutodetect('can-reach=10.123.0.9'),
        log,
      });
      expect(n.spec.ipv4Address).toBe('10.123.0.1/24');
    } finally {
      here.close();
    }
  });
});
