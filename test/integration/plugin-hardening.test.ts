// Issue 11 ("Hardening"), black-box through the built plugin (and, in the
// agent project, through the shim and a resident agent): the node's own
// namespace is refused as CNI_NETNS, secrets never reach stdout, an old
// sandbox's DEL never touches the new sandbox's veth, DEL converges.
import { execFile, execFileSync } from 'node:child_process';
import { promisify } from 'node:util';
import { hostVethName } from '../../src/model/names.js';
import { describe, expect, it, onTestFinished } from 'vitest';
import { createNetns, deleteNetns } from '../support/netns.js';
import { startLockSquatter } from '../support/squatter.js';
import { dirname } from 'node:path';
import {
  cni,
  expectCniError,
  expectNothingLeft,
  expectOk,
  hostLinksWithPrefix,
  hostPoolRoutes,
  ipamState,
  k8sArgs,
  link,
  mapLimit,
  netconf,
  routes,
  sysctl,
  wepNames,
  type Cluster,
  useCluster,
} from '../support/plugin-harness.js';

const run = promisify(execFile);

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
      const add = expectCniError(
        await cni('ADD', conf(), { containerId: `own-${process.pid}`, netns: own, ifname: 'eth0' }),
        4,
      );
      expect(add.msg).toMatch(/^CNI_NETNS: .* own network namespace/);
      expect(JSON.stringify(routes(4).filter((r) => r.dst === 'default'))).toBe(defaults);
      expect(sysctl('net.ipv4.ip_forward')).toBe(fwd);
      expect(hostLinksWithPrefix(PREFIX)).toEqual([]);

      const del = expectCniError(
        await cni('DEL', conf(), { containerId: `own-${process.pid}`, netns: own, ifname: node }),
        4,
      );
      expect(del.msg).toContain('CNI_NETNS');
      expect(link(node)).toBeDefined();
      const check = expectCniError(
        await cni(
          'CHECK',
          { ...conf(), prevResult: { cniVersion: '1.0.0', interfaces: [], ips: [] } },
          { containerId: `own-${process.pid}`, netns: own, ifname: node },
        ),
        4,
      );
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

describe("finding 2: an old sandbox's DEL overlapping a new sandbox's ADD of the same pod", () => {
  it('never leaves the new pod without its veth and traffic (150 overlaps, both DEL variants)', async () => {
    const PODS = 3;
    const ROUNDS = 50;
    let overlaps = 0;
    // Traffic: each new pod reaches an address of the host (as in plugin-basic).
    execFileSync('ip', ['addr', 'add', '10.77.111.254/32', 'dev', 'lo']);
    onTestFinished(() => {
      execFileSync('ip', ['addr', 'del', '10.77.111.254/32', 'dev', 'lo'], { stdio: 'ignore' });
    });
    await mapLimit([...Array(PODS).keys()], PODS, async (p) => {
      const podName = `ovl${p}-${process.pid}`;
      const args = k8sArgs('shop', podName);
      const hostIf = hostVethName(PREFIX, `shop.${podName}`);
      let old = {
        ns: createNetns(`ov${p}`),
        call: { containerId: `ov${p}-0-${process.pid}`, args } as { containerId: string; args: string; netns?: string },
      };
      old.call.netns = old.ns.path;
      expectOk(await cni('ADD', conf(), old.call));
      for (let r = 1; r <= ROUNDS; r++) {
        const ns = createNetns(`ov${p}`);
        const call = { containerId: `ov${p}-${r}-${process.pid}`, netns: ns.path, args };
        // The runtime tore the old sandbox down: its netns is gone (or it lost the path).
        deleteNetns(old.ns.name);
        const oldDel = { ...old.call, ...(r % 2 ? {} : { netns: '' }) };
        const [add, del] = await Promise.all([cni('ADD', conf(), call), cni('DEL', conf(), oldDel)]);
        expectOk(add);
        expectOk(del);
        overlaps++;
        expect(link(hostIf), `round ${r} of ${podName}: the new sandbox's host veth`).toBeDefined();
        expect(link('eth0', ns.name), `round ${r} of ${podName}: the new sandbox's eth0`).toBeDefined();
        // `-w5`: one reply within 5 s; a loaded machine delays, a broken path fails.
        await run('ip', ['netns', 'exec', ns.name, 'ping', '-c1', '-w5', '10.77.111.254']);
        old = { ns, call };
      }
      expectOk(await cni('DEL', conf(), old.call));
      deleteNetns(old.ns.name);
    });
    expect(overlaps).toBe(PODS * ROUNDS);
    expect(await wepNames(c.ds)).toEqual([]);
    expect((await ipamState(c.ds)).handles).toEqual([]);
    await expectNothingLeft(c, PREFIX);
  }, 600_000);
});

describe("a foreign link holding the pod's host veth name", () => {
  // Another program's link (a bridge; a veth that is not ours: another MAC)
  // carries the name our host veth would get. It is not ours to delete, and
  // the clash is on the host: the error must say so, not blame the pod.
  for (const [what, make] of [
    ['a bridge', (n: string) => execFileSync('ip', ['link', 'add', n, 'type', 'bridge'])],
    [
      'a veth without our MAC',
      (n: string) =>
        execFileSync('ip', [
          'link',
          'add',
          n,
          'address',
          '02:00:00:00:00:09',
          'type',
          'veth',
          'peer',
          'name',
          `${n.slice(0, 11)}peer`,
        ]),
    ],
  ] as const) {
    it(`${what}: ADD fails naming the host link, saying it is not ours and the fix, and leaves nothing behind`, async () => {
      const podName = `foreign-${process.pid}`;
      const hostIf = hostVethName(PREFIX, `shop.${podName}`);
      make(hostIf);
      onTestFinished(() => {
        if (link(hostIf)) execFileSync('ip', ['link', 'del', hostIf]);
      });
      const before = link(hostIf)!;
      const pod = createNetns('nhfl');
      onTestFinished(() => deleteNetns(pod.name));
      const call = {
        containerId: `fl-${process.pid}`,
        netns: pod.path,
        ifname: 'eth0',
        args: k8sArgs('shop', podName),
      };
      const e = expectCniError(await cni('ADD', conf(), call), 101);
      expect(e.msg).toContain(`host interface ${hostIf}`);
      expect(e.msg).toContain('not created by netplugin');
      expect(e.msg).toContain(`ip link del ${hostIf}`);
      expect(e.msg).not.toContain("pod's namespace");
      // The foreign link is untouched, the pod got nothing, the datastore holds nothing.
      const after = link(hostIf);
      expect([after?.address, after?.linkinfo?.info_kind]).toEqual([before.address, before.linkinfo?.info_kind]);
      expect(link('eth0', pod.name)).toBeUndefined();
      expect(await wepNames(c.ds)).toEqual([]);
      expect(await ipamState(c.ds)).toEqual({ handles: [], allocations: [] });
      expect(hostPoolRoutes(c.pools)).toEqual([]);
      // Once it is out of the way, the same ADD works.
      execFileSync('ip', ['link', 'del', hostIf]);
      expectOk(await cni('ADD', conf(), call));
      expectOk(await cni('DEL', conf(), call));
      await expectNothingLeft(c, PREFIX);
    });
  }
});

describe('finding 8: DEL converges when local teardown fails unexpectedly', () => {
  it('releases the address and endpoint, and reports what it could not clean with a code', async () => {
    const pod = createNetns('nhconv');
    const call = { containerId: `conv-${process.pid}`, netns: pod.path, ifname: 'eth0' };
    expectOk(await cni('ADD', conf(), call));
    // A CNI_NETNS the dataplane cannot even open (ENOTDIR): neither "gone" nor usable.
    const bad = expectCniError(await cni('DEL', conf(), { ...call, netns: '/etc/hostname/netns' }), 101);
    expect(bad.msg).toContain(`addresses and endpoint of ${call.containerId} are released`);
    expect(bad.msg).toContain('could not be removed');
    expect((await ipamState(c.ds)).handles).toEqual([]);
    expect(await wepNames(c.ds)).toEqual([]);
    // The runtime's DEL with the real namespace then finishes the job.
    expectOk(await cni('DEL', conf(), call));
    await expectNothingLeft(c, PREFIX);
  });
});

describe('finding 3: an unprivileged process squatting the IPAM lock', () => {
  it('ADD and DEL still succeed, without waiting out the lock timeout', async () => {
    const squatter = await startLockSquatter(c.lockFile, dirname(c.lockFile));
    try {
      for (let i = 0; i < 6; i++) {
        const pod = createNetns('nhsq');
        const call = { containerId: `sq${i}-${process.pid}`, netns: pod.path, ifname: 'eth0' };
        // The old code's lock name was squatted for good: each ADD waited the whole 60 s and failed with code 11.
        expectOk(await cni('ADD', conf(), call));
        expectOk(await cni('DEL', conf(), call));
        deleteNetns(pod.name);
      }
      expect(squatter.out).toMatch(/ready (EACCES|EPERM)/);
    } finally {
      await squatter.stop();
    }
    await expectNothingLeft(c, PREFIX);
  }, 120_000);
});
