// Issue 11 ("Hardening"), black-box through the built plugin (and, in the
// agent project, through the shim and a resident agent): the node's own
// namespace is refused as CNI_NETNS, secrets never reach stdout, an old
// sandbox's DEL never touches the new sandbox's veth, DEL converges.
import { execFileSync } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { createNetns } from '../fixtures/netns.js';
import { cni, expectCniError, expectNothingLeft, expectOk, hostLinksWithPrefix, link, netconf, routes, sysctl, type Cluster, useCluster } from './plugin-harness.js';

const PREFIX = 'nhx';
const POOL = { name: 'harden-v4', cidr: '10.77.111.0/24', blockSize: 28 };
let c: Cluster;

useCluster([POOL], (x) => (c = x));

const conf = (extra: Record<string, unknown> = {}) => netconf(c, '1.0.0', { host_veth_prefix: PREFIX, ...extra });

describe('finding 5: the node namespace as CNI_NETNS', () => {
  it('ADD, CHECK and DEL refuse it with code 4 naming CNI_NETNS, and change nothing on the node', async () => {
    const own = `/proc/${process.pid}/ns/net`;
    const node = `nhn${process.pid % 100000}`;
    execFileSync('ip', ['link', 'add', node, 'type', 'veth', 'peer', 'name', `${node}p`]);
    try {
      const defaults = JSON.stringify(routes(4).filter((r) => r.dst === 'default'));
      const fwd = sysctl('net.ipv4.ip_forward');
      const add = expectCniError(await cni('ADD', conf(), { containerId: `own-${process.pid}`, netns: own, ifname: 'eth0' }), 4);
      expect(add.msg).toMatch(/^CNI_NETNS: .* own network namespace/);
      expect(JSON.stringify(routes(4).filter((r) => r.dst === 'default'))).toBe(defaults);
      expect(sysctl('net.ipv4.ip_forward')).toBe(fwd);
      expect(hostLinksWithPrefix(PREFIX)).toEqual([]);

      const del = expectCniError(await cni('DEL', conf(), { containerId: `own-${process.pid}`, netns: own, ifname: node }), 4);
      expect(del.msg).toContain('CNI_NETNS');
      expect(link(node)).toBeDefined();
      const check = expectCniError(await cni('CHECK', { ...conf(), prevResult: { cniVersion: '1.0.0', interfaces: [], ips: [] } }, { containerId: `own-${process.pid}`, netns: own, ifname: node }), 4);
      expect(check.msg).toContain('CNI_NETNS');
    } finally {
      execFileSync('ip', ['link', 'del', node]);
    }
    await expectNothingLeft(c, PREFIX);
  });

  it('a real sandbox namespace still works', async () => {
    const pod = createNetns('nhpod');
    const call = { containerId: `ok-${process.pid}`, netns: pod.path, ifname: 'eth0' };
    expectOk(await cni('ADD', conf(), call));
    expectOk(await cni('DEL', conf(), call));
    await expectNothingLeft(c, PREFIX);
  });
});
