// The dataplane in real namespaces: H plays the host (the root namespace is
// never touched), C1/C2 are pods. Every fact is read back from the kernel, by
// the addon and by iproute2.
import { execFileSync } from 'node:child_process';
import { readdirSync } from 'node:fs';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { createNetns, deleteNetns, inNetns, removeAllNetns } from '../support/netns.js';
import { netlinkIn } from '../support/netns.js';
import {
  checkWorkload,
  createWorkloadSetup,
  HostLinkInUseError,
  linkLocalFromMac,
  setupWorkload,
  teardownWorkload,
  teardownWorkloadAsync,
  type WorkloadSpec,
} from '../../src/dataplane/index.js';
import { hostVethName } from '../../src/model/names.js';
import { NetlinkError, type Netlink } from '../../src/native/index.js';

const HOST_MAC = 'ee:ee:ee:ee:ee:ee';
const HOST_LL = 'fe80::ecee:eeff:feee:eeee';
const IFA_F_NODAD = 0x02;
const IFA_F_TENTATIVE = 0x40;
const RT_SCOPE_LINK = 253;

let H: { name: string; path: string };
let C1: { name: string; path: string };
let C2: { name: string; path: string };
const handles: Array<{ close(): void }> = [];

const nl = (path: string): Netlink => netlinkIn(path, handles);

beforeEach(() => {
  H = createNetns('dph');
  C1 = createNetns('dpc');
  C2 = createNetns('dpc');
});

afterEach(() => {
  for (const h of handles.splice(0)) h.close();
  removeAllNetns();
});

// A router advertisement (ICMPv6 type 134, router lifetime 1800 s) with a
// /64 prefix option, sent to all nodes from the pod's link-local; the kernel
// fills in the ICMPv6 checksum of a raw ICMPv6 socket.
const RA_SENDER = `
import socket, struct, sys
ifindex = socket.if_nametoindex(sys.argv[1])
s = socket.socket(socket.AF_INET6, socket.SOCK_RAW, socket.IPPROTO_ICMPV6)
s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_MULTICAST_HOPS, 255)
s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_MULTICAST_IF, ifindex)
ra = struct.pack('!BBHBBHII', 134, 0, 0, 64, 0, 1800, 0, 0)
prefix = struct.pack('!BBBBIII16s', 3, 4, 64, 0xC0, 86400, 14400, 0, socket.inet_pton(socket.AF_INET6, '2001:db8:77::'))
s.sendto(ra + prefix, ('ff02::1', 0, 0, ifindex))
`;

function spec(over: Partial<WorkloadSpec> = {}): WorkloadSpec {
  return {
    netnsPath: C1.path,
    hostNetnsPath: H.path,
    ifname: 'eth0',
    hostIfname: 'npi0test1',
    numQueues: 1,
    hostMac: HOST_MAC,
    addresses: ['10.0.0.5/32'],
    allowIpForwarding: false,
    ...over,
  };
}

const cat = (ns: string, file: string) => inNetns(ns, 'cat', [file]).trim();
const ipJson = (ns: string, args: string[]): any[] => JSON.parse(inNetns(ns, 'ip', ['-j', ...args]));
const ping = (ns: string, addr: string) => inNetns(ns, 'ping', ['-c', '1', '-w', '5', addr]);

describe('hostVethName', () => {
  it('is the prefix plus the first 11 hex chars of sha1(key), within IFNAMSIZ', () => {
    const sha = execFileSync('sha1sum', { input: 'default.nginx-7c5d' }).toString().slice(0, 11);
    expect(hostVethName('npi', 'default.nginx-7c5d')).toBe(`npi${sha}`);
    expect(hostVethName('npi', 'default.nginx-7c5d')).toHaveLength(14);
    expect(() => hostVethName('toolong', 'x')).toThrow(/prefix must be 1-4 characters/);
    expect(() => hostVethName('npi', '')).toThrow(/key must be a non-empty string/);
    expect(linkLocalFromMac(HOST_MAC)).toBe(HOST_LL);
    expect(linkLocalFromMac('02:42:ac:11:00:02')).toBe('fe80::42:acff:fe11:2');
  });
});

describe('setupWorkload', () => {
  it('sets up a dual-stack pod interface; every fact reads back from both namespaces', () => {
    const st = setupWorkload(
      spec({ addresses: ['10.0.0.5/32', 'fd00::5/128'], mtu: 1400, numQueues: 4, containerMac: '02:aa:bb:cc:dd:05' }),
    );
    const h = nl(H.path);
    const c = nl(C1.path);
    const hv = h.linkGet('npi0test1');
    const eth0 = c.linkGet('eth0');
    expect(st).toEqual({
      hostIfname: 'npi0test1',
      hostIndex: hv.index,
      containerMac: '02:aa:bb:cc:dd:05',
      containerIndex: eth0.index,
      mtu: 1400,
    });

    // Links: the peer was born in C1, MAC/MTU/queues on both ends, both up.
    expect(hv).toMatchObject({ kind: 'veth', mac: HOST_MAC, mtu: 1400, up: true, numRxQueues: 4, numTxQueues: 4 });
    expect(eth0).toMatchObject({
      kind: 'veth',
      mac: '02:aa:bb:cc:dd:05',
      mtu: 1400,
      up: true,
      numRxQueues: 4,
      numTxQueues: 4,
    });
    expect(h.linkFind('eth0')).toBeUndefined();
    const q = ['rx-0', 'rx-1', 'rx-2', 'rx-3', 'tx-0', 'tx-1', 'tx-2', 'tx-3'];
    expect(inNetns(C1.name, 'ls', ['/sys/class/net/eth0/queues']).split(/\s+/).filter(Boolean).sort()).toEqual(q);
    expect(inNetns(H.name, 'ls', ['/sys/class/net/npi0test1/queues']).split(/\s+/).filter(Boolean).sort()).toEqual(q);

    // Container addresses: /32 and /128, the IPv6 one usable at once (no DAD).
    const addrs = c.addrList({ link: 'eth0' });
    expect(addrs.map((a) => a.cidr)).toEqual(expect.arrayContaining(['10.0.0.5/32', 'fd00::5/128']));
    const v6 = addrs.find((a) => a.cidr === 'fd00::5/128')!;
    expect(v6.flags & IFA_F_NODAD).toBe(IFA_F_NODAD);
    expect(v6.flags & IFA_F_TENTATIVE).toBe(0);

    // Container routes.
    expect(ipJson(C1.name, ['-4', 'route', 'show'])).toEqual(
      expect.arrayContaining([
        expect.objectContaining({ dst: '169.254.1.1', dev: 'eth0', scope: 'link' }),
        expect.objectContaining({ dst: 'default', gateway: '169.254.1.1', dev: 'eth0' }),
      ]),
    );
    expect(ipJson(C1.name, ['-6', 'route', 'show', 'default'])[0]).toMatchObject({ gateway: HOST_LL, dev: 'eth0' });
    expect(c.routeList({ family: 4 }).find((r) => r.dst === '169.254.1.1/32')!.scope).toBe(RT_SCOPE_LINK);
    expect(ipJson(C1.name, ['neigh', 'show', 'dev', 'eth0'])).toEqual(
      expect.arrayContaining([
        expect.objectContaining({ dst: '169.254.1.1', lladdr: HOST_MAC, state: ['PERMANENT'] }),
        expect.objectContaining({ dst: HOST_LL, lladdr: HOST_MAC, state: ['PERMANENT'] }),
      ]),
    );

    // Container sysctls (read by a process inside C1, not through the addon).
    expect(cat(C1.name, '/proc/sys/net/ipv4/ip_forward')).toBe('0');
    expect(cat(C1.name, '/proc/sys/net/ipv6/conf/all/forwarding')).toBe('0');
    expect(cat(C1.name, '/proc/sys/net/ipv6/conf/eth0/accept_dad')).toBe('0');

    // Host side: link-local present and not tentative, /32 and /128 routes, sysctls.
    const ll = h.addrList({ link: 'npi0test1', family: 6 }).find((a) => a.address === HOST_LL);
    expect(ll).toBeDefined();
    expect(ll!.flags & IFA_F_TENTATIVE).toBe(0);
    expect(ipJson(H.name, ['route', 'show', 'dev', 'npi0test1'])).toEqual([
      expect.objectContaining({ dst: '10.0.0.5', scope: 'link' }),
    ]);
    expect(ipJson(H.name, ['-6', 'route', 'show', 'fd00::5/128'])[0]).toMatchObject({ dev: 'npi0test1' });
    const hs = (k: string) => cat(H.name, `/proc/sys/net/${k}`);
    expect(hs('ipv4/conf/npi0test1/proxy_arp')).toBe('1');
    expect(hs('ipv4/neigh/npi0test1/proxy_delay')).toBe('0');
    expect(hs('ipv4/conf/npi0test1/forwarding')).toBe('1');
    expect(hs('ipv4/conf/npi0test1/route_localnet')).toBe('1');
    expect(hs('ipv6/conf/npi0test1/proxy_ndp')).toBe('1');
    expect(hs('ipv6/conf/npi0test1/accept_ra')).toBe('0');
    expect(hs('ipv6/conf/npi0test1/forwarding')).toBe('1');
    expect(hs('ipv6/conf/npi0test1/accept_dad')).toBe('0');
    expect(hs('ipv6/conf/npi0test1/disable_ipv6')).toBe('0');

    expect(
      checkWorkload(spec({ addresses: ['10.0.0.5/32', 'fd00::5/128'], mtu: 1400, numQueues: 4 }), {
        containerMac: st.containerMac,
      }),
    ).toEqual([]);
  });

  it('an IPv4-only pod cannot plant a route on the node with a router advertisement', async () => {
    // The node does not forward IPv6 (as in an IPv4-only cluster): the kernel
    // then accepts RAs on any interface whose accept_ra is 1 (its default).
    const h = nl(H.path);
    h.sysctlSet('net.ipv6.conf.all.forwarding', 0);
    h.sysctlSet('net.ipv6.conf.default.forwarding', 0);
    setupWorkload(spec({ addresses: ['10.0.0.5/32'] }));
    const hs = (k: string) => cat(H.name, `/proc/sys/net/${k}`);
    expect(hs('ipv6/conf/npi0test1/accept_ra')).toBe('0');
    expect(hs('ipv6/conf/npi0test1/accept_redirects')).toBe('0');
    expect(hs('ipv6/conf/npi0test1/autoconf')).toBe('0');
    expect(hs('ipv4/conf/npi0test1/accept_redirects')).toBe('0');
    // IPv6 is off on the host end of an IPv4-only pod: no address, no route in any table.
    expect(hs('ipv6/conf/npi0test1/disable_ipv6')).toBe('1');
    expect(ipJson(H.name, ['-6', 'addr', 'show', 'dev', 'npi0test1'])).toEqual([]);
    expect(ipJson(H.name, ['-6', 'route', 'show', 'table', 'all', 'dev', 'npi0test1'])).toEqual([]);
    const planted = () =>
      inNetns(H.name, 'ip', ['-6', 'route', 'show'])
        .split('\n')
        .filter((l) => /^default|2001:db8:77::/.test(l));
    // The pod's eth0 gets a link-local (the RA's source) once DAD is done.
    for (
      let i = 0;
      i < 100 &&
      !inNetns(C1.name, 'ip', ['-6', 'addr', 'show', 'dev', 'eth0', 'scope', 'link', '-tentative']).includes('fe80');
      i++
    ) {
      await new Promise((r) => setTimeout(r, 50));
    }
    const sendRA = () => inNetns(C1.name, 'python3', ['-c', RA_SENDER, 'eth0']);
    sendRA();
    await new Promise((r) => setTimeout(r, 300));
    expect(planted()).toEqual([]);
    // The same RA is a real one: with the old settings (IPv6 on, accept_ra=1) the node takes it.
    h.sysctlSet('net.ipv6.conf.npi0test1.disable_ipv6', 0);
    h.sysctlSet('net.ipv6.conf.npi0test1.accept_ra', 1);
    let seen: string[] = [];
    for (let i = 0; i < 50 && seen.length < 2; i++) {
      sendRA();
      await new Promise((r) => setTimeout(r, 100));
      seen = planted();
    }
    expect(seen.join('\n')).toMatch(/default via fe80::[0-9a-f:]+ dev npi0test1 proto ra/);
    expect(seen.join('\n')).toMatch(/2001:db8:77::\/64 dev npi0test1/);
  });

  it('turns forwarding on in the container only when allowed, leaving the host namespace alone', () => {
    const h = nl(H.path);
    h.sysctlSet('net.ipv4.ip_forward', 0);
    const st = setupWorkload(spec({ allowIpForwarding: true, addresses: ['10.0.0.5/32', 'fd00::5/128'] }));
    expect(cat(C1.name, '/proc/sys/net/ipv4/ip_forward')).toBe('1');
    expect(cat(C1.name, '/proc/sys/net/ipv6/conf/all/forwarding')).toBe('1');
    expect(cat(H.name, '/proc/sys/net/ipv4/ip_forward')).toBe('0');
    // A random container MAC is reported as the kernel chose it.
    expect(st.containerMac).toBe(ipJson(C1.name, ['link', 'show', 'eth0'])[0].address);
  });

  it('gives connectivity: a pod reaches an address of the host, and two pods reach each other (IPv4 and IPv6)', () => {
    const h = nl(H.path);
    h.addrAdd('lo', '10.255.0.1/32');
    h.addrAdd('lo', 'fd00:255::1/128', { nodad: true });
    // Node-wide setting (the agent's job, not per pod): IPv6 forwarding is
    // decided by conf/all, unlike IPv4 where the input device's flag counts.
    h.sysctlSet('net.ipv6.conf.all.forwarding', 1);
    setupWorkload(spec({ addresses: ['10.0.0.5/32', 'fd00::5/128'] }));
    setupWorkload(spec({ netnsPath: C2.path, hostIfname: 'npi0test2', addresses: ['10.0.0.6/32', 'fd00::6/128'] }));
    expect(ping(C1.name, '10.255.0.1')).toMatch(/1 received/);
    expect(ping(C1.name, '10.0.0.6')).toMatch(/1 received/);
    expect(ping(C2.name, '10.0.0.5')).toMatch(/1 received/);
    expect(ping(C1.name, 'fd00:255::1')).toMatch(/1 received/);
    expect(ping(C1.name, 'fd00::6')).toMatch(/1 received/);
  });

  it('replaces a stale host veth of the same name when it is ours (a veth with our MAC)', () => {
    const h = nl(H.path);
    h.vethAdd({ name: 'npi0test1', peerName: 'stale0', mac: HOST_MAC });
    const old = h.linkGet('npi0test1').index;
    const st = setupWorkload(spec());
    expect(st.hostIndex).not.toBe(old);
    expect(h.linkFind('stale0')).toBeUndefined();
    expect(h.linkGet('npi0test1').index).toBe(st.hostIndex);
  });

  it('leaves a link of that name that is not ours alone and fails naming it as not ours', () => {
    const h = nl(H.path);
    h.vethAdd({ name: 'npi0test1', peerName: 'other0', mac: '02:00:00:00:00:01' });
    const old = h.linkGet('npi0test1').index;
    expect(() => setupWorkload(spec())).toThrow(HostLinkInUseError);
    expect(() => setupWorkload(spec())).toThrow(
      /host interface npi0test1 \(veth ifindex \d+, MAC 02:00:00:00:00:01\) already exists and was not created by netplugin/,
    );
    expect(h.linkGet('npi0test1').index).toBe(old);
    expect(h.linkFind('other0')).toBeDefined();
    expect(nl(C1.path).linkFind('eth0')).toBeUndefined();
  });

  it('rolls back on a failure mid-way: no veth left on either side, and the error is the kernel one', () => {
    let err: unknown;
    try {
      // The second, identical address fails in the kernel after the veth,
      // the host sysctls and the first address are in place.
      setupWorkload(spec({ addresses: ['10.0.0.5/32', '10.0.0.5/32'] }));
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(NetlinkError);
    expect(err).toMatchObject({ code: 'EEXIST', op: 'RTM_NEWADDR' });
    expect(
      nl(H.path)
        .linkList()
        .map((l) => l.name),
    ).toEqual(['lo']);
    expect(
      nl(C1.path)
        .linkList()
        .map((l) => l.name),
    ).toEqual(['lo']);
    expect(ipJson(H.name, ['route', 'show'])).toEqual([]);
  });

  it('rejects a bad spec before touching the kernel, naming the field', () => {
    expect(() => setupWorkload(spec({ addresses: ['10.0.0.5'] }))).toThrow(
      /setupWorkload: spec.addresses\[0\] must be an address with its prefix length/,
    );
    expect(() => setupWorkload(spec({ mtu: 10 }))).toThrow(/spec.mtu must be an integer 68..65535/);
    expect(() => setupWorkload(spec({ hostMac: 'ee:ee' }))).toThrow(/spec.hostMac must be a MAC address/);
    expect(() => setupWorkload(spec({ numQueues: 0 }))).toThrow(/spec.numQueues/);
    expect(() => setupWorkload(spec({ hostIfname: 'a-name-that-is-too-long' }))).toThrow(/spec.hostIfname/);
    expect(
      nl(H.path)
        .linkList()
        .map((l) => l.name),
    ).toEqual(['lo']);
    // A missing namespace is a NetlinkError naming the path.
    expect(() => setupWorkload(spec({ netnsPath: '/var/run/netns/does-not-exist-' + process.pid }))).toThrow(
      expect.objectContaining({ code: 'ENOENT', op: 'openNetns' }),
    );
  });
});

describe('createWorkloadSetup', () => {
  it('keeps one host handle for every pod of its host namespace: same result as setupWorkload, rollback included, nothing left open after close', () => {
    const fds = () => readdirSync('/proc/self/fd').length;
    const start = fds();
    const w = createWorkloadSetup({ hostNetnsPath: H.path });
    try {
      const a = w.setup(
        spec({ netnsPath: C1.path, hostIfname: 'npi0keep1', addresses: ['10.0.0.5/32', 'fd00::5/128'] }),
      );
      // The handle and its sysctl directories stay; the pods' own handles do not.
      const kept = fds();
      expect(kept).toBeGreaterThan(start);
      const b = w.setup(
        spec({ netnsPath: C2.path, hostIfname: 'npi0keep2', addresses: ['10.0.0.6/32', 'fd00::6/128'] }),
      );
      expect(fds()).toBe(kept);
      expect(
        checkWorkload(
          spec({ netnsPath: C1.path, hostIfname: 'npi0keep1', addresses: ['10.0.0.5/32', 'fd00::5/128'] }),
          { containerMac: a.containerMac },
        ),
      ).toEqual([]);
      expect(
        checkWorkload(
          spec({ netnsPath: C2.path, hostIfname: 'npi0keep2', addresses: ['10.0.0.6/32', 'fd00::6/128'] }),
          { containerMac: b.containerMac },
        ),
      ).toEqual([]);
      // A failure mid-way rolls back through the kept handle too.
      const C3 = createNetns('dpc');
      expect(() =>
        w.setup(spec({ netnsPath: C3.path, hostIfname: 'npi0keep3', addresses: ['10.0.0.7/32', '10.0.0.7/32'] })),
      ).toThrow(expect.objectContaining({ code: 'EEXIST', op: 'RTM_NEWADDR' }));
      expect(
        nl(H.path)
          .linkList()
          .map((l) => l.name)
          .sort(),
      ).toEqual(['lo', 'npi0keep1', 'npi0keep2']);
      expect(
        nl(C3.path)
          .linkList()
          .map((l) => l.name),
      ).toEqual(['lo']);
      // Another host namespace gets its own handle, closed after the pod.
      const H2 = createNetns('dph');
      const before = fds();
      w.setup(spec({ netnsPath: C3.path, hostNetnsPath: H2.path, hostIfname: 'npi0keep3' }));
      expect(fds()).toBe(before);
      expect(
        nl(H2.path)
          .linkList()
          .map((l) => l.name)
          .sort(),
      ).toEqual(['lo', 'npi0keep3']);
    } finally {
      w.close();
    }
    for (const h of handles.splice(0)) h.close();
    expect(fds()).toBe(start);
  });
});

describe('teardownWorkload and checkWorkload', () => {
  it('is idempotent: removes once, then finds nothing; a vanished netns is fine', () => {
    setupWorkload(spec());
    const o = { netnsPath: C1.path, hostNetnsPath: H.path, ifname: 'eth0', hostIfname: 'npi0test1' };
    expect(teardownWorkload(o)).toEqual({ removed: true });
    expect(nl(H.path).linkFind('npi0test1')).toBeUndefined();
    expect(teardownWorkload(o)).toEqual({ removed: false });
    deleteNetns(C1.name);
    expect(teardownWorkload(o)).toEqual({ removed: false });
    expect(teardownWorkload({ ...o, netnsPath: undefined })).toEqual({ removed: false });
  });

  it('without a netns removes the host end by name', () => {
    setupWorkload(spec());
    expect(teardownWorkload({ hostNetnsPath: H.path, ifname: 'eth0', hostIfname: 'npi0test1' })).toEqual({
      removed: true,
    });
    expect(nl(C1.path).linkFind('eth0')).toBeUndefined();
  });

  it('reports drift', () => {
    const st = setupWorkload(spec());
    const s = spec();
    expect(checkWorkload(s, { containerMac: st.containerMac })).toEqual([]);
    const c = nl(C1.path);
    c.routeDel({ dst: 'default', gateway: '169.254.1.1' });
    nl(H.path).sysctlSet('net.ipv4.conf.npi0test1.proxy_arp', 0);
    const drift = checkWorkload(s, { containerMac: '02:00:00:00:00:99' });
    expect(drift).toEqual(
      expect.arrayContaining([
        expect.stringContaining('eth0 MAC'),
        expect.stringContaining('default route via 169.254.1.1'),
        expect.stringContaining('proxy_arp'),
      ]),
    );
    expect(drift).toHaveLength(3);
    teardownWorkload({ netnsPath: C1.path, hostNetnsPath: H.path, ifname: 'eth0', hostIfname: 'npi0test1' });
    expect(checkWorkload(s, { containerMac: st.containerMac })).toEqual([
      'container interface eth0 is missing',
      'host veth npi0test1 is missing',
    ]);
  });
});

describe('teardownWorkloadAsync', () => {
  it('is idempotent like teardownWorkload: removes once, then finds nothing; a vanished netns is fine', async () => {
    setupWorkload(spec());
    const o = { netnsPath: C1.path, hostNetnsPath: H.path, ifname: 'eth0', hostIfname: 'npi0test1' };
    await expect(teardownWorkloadAsync(o)).resolves.toEqual({ removed: true });
    expect(nl(H.path).linkFind('npi0test1')).toBeUndefined();
    expect(nl(C1.path).linkFind('eth0')).toBeUndefined();
    await expect(teardownWorkloadAsync(o)).resolves.toEqual({ removed: false });
    deleteNetns(C1.name);
    await expect(teardownWorkloadAsync(o)).resolves.toEqual({ removed: false });
    await expect(teardownWorkloadAsync({ ...o, netnsPath: undefined })).resolves.toEqual({ removed: false });
  });

  it('with the netns gone never deletes the host end by name (a newer sandbox of the pod owns that name)', async () => {
    setupWorkload(spec());
    const gone = `/var/run/netns/np-gone-${process.pid}`;
    await expect(
      teardownWorkloadAsync({
        netnsPath: gone,
        hostNetnsPath: H.path,
        ifname: 'eth0',
        hostIfname: 'npi0test1',
        hostMac: HOST_MAC,
      }),
    ).resolves.toEqual({ removed: false });
    expect(nl(H.path).linkFind('npi0test1')).toBeDefined();
    expect(nl(C1.path).linkFind('eth0')).toBeDefined();
  });

  it('without a netns removes the host end by name only when it is a veth with our MAC, unless keepHostEnd', async () => {
    setupWorkload(spec());
    setupWorkload(
      spec({ netnsPath: C2.path, hostIfname: 'npi0test2', hostMac: '02:aa:00:00:00:02', addresses: ['10.0.0.6/32'] }),
    );
    const o = { hostNetnsPath: H.path, ifname: 'eth0', hostIfname: 'npi0test1', hostMac: HOST_MAC };
    await expect(teardownWorkloadAsync({ ...o, keepHostEnd: true })).resolves.toEqual({ removed: false });
    expect(nl(H.path).linkFind('npi0test1')).toBeDefined();
    // npi0test2 carries another MAC: not ours under this MAC, left alone.
    await expect(teardownWorkloadAsync({ ...o, hostIfname: 'npi0test2' })).resolves.toEqual({ removed: false });
    expect(nl(H.path).linkFind('npi0test2')).toBeDefined();
    await expect(teardownWorkloadAsync(o)).resolves.toEqual({ removed: true });
    expect(nl(H.path).linkFind('npi0test1')).toBeUndefined();
    expect(nl(C1.path).linkFind('eth0')).toBeUndefined();
    // The other pod is untouched.
    expect(nl(H.path).linkFind('npi0test2')).toBeDefined();
    expect(nl(C2.path).linkFind('eth0')).toBeDefined();
  });

  it('rejects bad options naming the field, and a non-ENODEV kernel failure is not "not found"', async () => {
    await expect(teardownWorkloadAsync({ ifname: 'eth0', hostIfname: 'x'.repeat(16) })).rejects.toThrow(
      /teardownWorkloadAsync: options.hostIfname/,
    );
    await expect(
      teardownWorkloadAsync({ hostNetnsPath: '/etc/hostname', ifname: 'eth0', hostIfname: 'npi0test1' }),
    ).rejects.toMatchObject({
      code: 'EINVAL',
      op: 'openNetns',
    });
  });
});
