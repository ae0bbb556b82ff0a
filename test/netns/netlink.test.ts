// The rtnetlink addon against real namespaces: H plays the host, C the
// container, so the root namespace is never touched.
import { readdirSync, readlinkSync } from 'node:fs';
import { Worker } from 'node:worker_threads';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { createNetns, inNetns, removeAllNetns } from '../support/netns.js';
import {
  NATIVE_ABI_VERSION,
  NetlinkError,
  netlink,
  openNetns,
  packageRoot,
  type Netlink,
  type NetNS,
} from '../../src/native/index.js';

const IFA_F_NODAD = 0x02;
const IFA_F_TENTATIVE = 0x40;
const RT_SCOPE_LINK = 253;
const RTNH_F_ONLINK = 4;

let H: { name: string; path: string };
let C: { name: string; path: string };
let hns: NetNS;
let cns: NetNS;
let hnl: Netlink;
let cnl: Netlink;
const closers: Array<{ close(): void }> = [];

beforeEach(() => {
  H = createNetns('nlh');
  C = createNetns('nlc');
  hns = openNetns(H.path);
  cns = openNetns(C.path);
  hnl = netlink(hns);
  cnl = netlink(cns);
  closers.push(hnl, cnl, hns, cns);
});

afterEach(() => {
  for (const c of closers.splice(0)) c.close();
  removeAllNetns();
});

function ipJson(ns: string, args: string[]): any[] {
  return JSON.parse(inNetns(ns, 'ip', ['-j', ...args]));
}

function sysQueues(ns: string, ifname: string): string[] {
  // `ip netns exec` remounts /sys for the target namespace, so this is the
  // namespace's own view of the device.
  return inNetns(ns, 'ls', [`/sys/class/net/${ifname}/queues`])
    .split(/\s+/)
    .filter(Boolean)
    .sort();
}

describe('links', () => {
  it('creates a veth with the peer directly in the target netns, with queues, MACs and MTU on both ends', () => {
    hnl.vethAdd({
      name: 'hv0',
      peerName: 'eth0',
      peerNetns: cns,
      mtu: 1400,
      mac: 'ee:ee:ee:ee:ee:ee',
      peerMac: '02:11:22:33:44:55',
      numRxQueues: 4,
      numTxQueues: 4,
    });
    const host = hnl.linkGet('hv0');
    expect(host).toMatchObject({
      name: 'hv0',
      kind: 'veth',
      mtu: 1400,
      mac: 'ee:ee:ee:ee:ee:ee',
      numRxQueues: 4,
      numTxQueues: 4,
    });
    // The peer lives in another namespace: the host end reports its netns id.
    expect(host.linkNetnsId).toBeTypeOf('number');
    expect(hnl.linkFind('eth0')).toBeUndefined();

    const peer = cnl.linkGet('eth0');
    expect(peer).toMatchObject({
      name: 'eth0',
      kind: 'veth',
      mtu: 1400,
      mac: '02:11:22:33:44:55',
      numRxQueues: 4,
      numTxQueues: 4,
    });
    expect(peer.parentIndex).toBe(host.index);
    expect(host.parentIndex).toBe(peer.index);

    const want = ['rx-0', 'rx-1', 'rx-2', 'rx-3', 'tx-0', 'tx-1', 'tx-2', 'tx-3'];
    expect(sysQueues(H.name, 'hv0')).toEqual(want);
    expect(sysQueues(C.name, 'eth0')).toEqual(want);
    // And iproute2 agrees about where each end is.
    expect(ipJson(C.name, ['link', 'show', 'eth0'])[0].address).toBe('02:11:22:33:44:55');
    expect(ipJson(H.name, ['link', 'show', 'hv0'])[0].mtu).toBe(1400);
  });

  it('lists, sets (up, mtu, mac, rename, move) and deletes links', () => {
    hnl.vethAdd({ name: 'a0', peerName: 'b0' });
    expect(
      hnl
        .linkList()
        .map((l) => l.name)
        .sort(),
    ).toEqual(['a0', 'b0', 'lo']);
    hnl.linkSet('a0', { up: true, mtu: 9000, mac: '02:00:00:00:00:01' });
    hnl.linkSet('b0', { name: 'b1' });
    const a0 = hnl.linkGet('a0');
    expect(a0).toMatchObject({ up: true, mtu: 9000, mac: '02:00:00:00:00:01' });
    expect(hnl.linkGet(a0.index).name).toBe('a0');
    hnl.linkSet('b1', { netns: cns });
    expect(hnl.linkFind('b1')).toBeUndefined();
    expect(cnl.linkGet('b1').kind).toBe('veth');
    hnl.linkDel('a0');
    // Deleting one end removes the pair, across namespaces.
    expect(cnl.linkFind('b1')).toBeUndefined();
    expect(hnl.linkList().map((l) => l.name)).toEqual(['lo']);
  });
});

describe('addresses and routes', () => {
  beforeEach(() => {
    hnl.vethAdd({ name: 'hv0', peerName: 'eth0', peerNetns: cns, mac: 'ee:ee:ee:ee:ee:ee' });
    hnl.sysctlSet('net.ipv6.conf.hv0.accept_dad', 0);
    hnl.linkSet('hv0', { up: true });
    cnl.linkSet('eth0', { up: true });
  });

  it('adds IPv4 /32 and IPv6 /128 (NODAD) addresses and lists them', () => {
    cnl.addrAdd('eth0', '10.0.0.5/32');
    cnl.addrAdd('eth0', 'fd00::5/128', { nodad: true });
    const addrs = cnl.addrList({ link: 'eth0' });
    const v4 = addrs.find((a) => a.cidr === '10.0.0.5/32');
    const v6 = addrs.find((a) => a.cidr === 'fd00::5/128');
    expect(v4).toMatchObject({ family: 4, address: '10.0.0.5', prefixLen: 32 });
    expect(v6).toMatchObject({ family: 6, address: 'fd00::5', prefixLen: 128 });
    expect(v6!.flags & IFA_F_NODAD).toBe(IFA_F_NODAD);
    expect(v6!.flags & IFA_F_TENTATIVE).toBe(0);
    expect(cnl.addrList({ family: 4, link: 'eth0' }).map((a) => a.cidr)).toEqual(['10.0.0.5/32']);
    const ipv = ipJson(C.name, ['addr', 'show', 'dev', 'eth0']);
    const infos = ipv[0].addr_info.map((a: any) => `${a.local}/${a.prefixlen}`);
    expect(infos).toEqual(expect.arrayContaining(['10.0.0.5/32', 'fd00::5/128']));
    cnl.addrDel('eth0', '10.0.0.5/32');
    expect(cnl.addrList({ family: 4, link: 'eth0' })).toEqual([]);
  });

  it('adds a link-scope route to 169.254.1.1, a default via it, an IPv6 default via a link-local, and host /32 routes', () => {
    cnl.addrAdd('eth0', '10.0.0.5/32');
    cnl.routeAdd({ dst: '169.254.1.1/32', dev: 'eth0', scope: 'link' });
    cnl.routeAdd({ dst: 'default', gateway: '169.254.1.1', dev: 'eth0' });
    cnl.routeAdd({ dst: '::/0', gateway: 'fe80::ecee:eeff:feee:eeee', dev: 'eth0' });
    hnl.routeAdd({ dst: '10.0.0.5/32', dev: 'hv0', scope: 'link' });

    const c4 = cnl.routeList({ family: 4 });
    const eth0 = cnl.linkGet('eth0').index;
    expect(c4).toEqual(
      expect.arrayContaining([
        expect.objectContaining({ dst: '169.254.1.1/32', scope: RT_SCOPE_LINK, oif: eth0, table: 254 }),
        expect.objectContaining({ dst: '0.0.0.0/0', gateway: '169.254.1.1', oif: eth0 }),
      ]),
    );
    expect(cnl.routeList({ family: 6 })).toEqual(
      expect.arrayContaining([
        expect.objectContaining({ dst: '::/0', gateway: 'fe80::ecee:eeff:feee:eeee', oif: eth0 }),
      ]),
    );
    expect(ipJson(C.name, ['route', 'show', 'default'])[0]).toMatchObject({ gateway: '169.254.1.1', dev: 'eth0' });
    expect(ipJson(C.name, ['-6', 'route', 'show', 'default'])[0]).toMatchObject({
      gateway: 'fe80::ecee:eeff:feee:eeee',
      dev: 'eth0',
    });
    expect(ipJson(H.name, ['route', 'show', '10.0.0.5/32'])[0]).toMatchObject({ dev: 'hv0', scope: 'link' });
    expect(hnl.routeList({ link: 'hv0', family: 4 }).map((r) => r.dst)).toEqual(['10.0.0.5/32']);

    hnl.routeDel({ dst: '10.0.0.5/32', dev: 'hv0' });
    expect(hnl.routeList({ link: 'hv0', family: 4 })).toEqual([]);
  });

  it('replaces an existing route, and add refuses a duplicate with EEXIST', () => {
    cnl.routeAdd({ dst: '10.9.0.0/16', dev: 'eth0' });
    expect(() => cnl.routeAdd({ dst: '10.9.0.0/16', dev: 'eth0' })).toThrow(
      expect.objectContaining({ code: 'EEXIST', op: 'RTM_NEWROUTE', subject: '10.9.0.0/16' }),
    );
    cnl.routeReplace({ dst: '10.9.0.0/16', gateway: '169.254.1.1', dev: 'eth0', onlink: true, protocol: 'static' });
    const r = cnl.routeList({ family: 4 }).filter((x) => x.dst === '10.9.0.0/16');
    expect(r).toHaveLength(1);
    expect(r[0]).toMatchObject({ gateway: '169.254.1.1', protocol: 4 });
    expect(r[0]!.flags & RTNH_F_ONLINK).toBe(RTNH_F_ONLINK);
  });

  it('uses RTA_TABLE for tables above 255 and RTA_PRIORITY for the metric', () => {
    cnl.routeAdd({ dst: '10.8.0.0/24', dev: 'eth0', table: 1000, metric: 77, protocol: 42 });
    expect(cnl.routeList({ family: 4 }).some((r) => r.dst === '10.8.0.0/24')).toBe(false);
    expect(cnl.routeList({ family: 4, table: 1000 })).toEqual([
      expect.objectContaining({ dst: '10.8.0.0/24', table: 1000, metric: 77, protocol: 42 }),
    ]);
    expect(ipJson(C.name, ['route', 'show', 'table', '1000'])[0]).toMatchObject({ dst: '10.8.0.0/24', metric: 77 });
  });

  it('sets a permanent neighbour entry (create, then replace)', () => {
    cnl.neighSet({ dev: 'eth0', dst: '169.254.1.1', lladdr: 'ee:ee:ee:ee:ee:ee' });
    cnl.neighSet({ dev: 'eth0', dst: '169.254.1.1', lladdr: 'ee:ee:ee:ee:ee:ef' });
    const n = ipJson(C.name, ['neigh', 'show', 'dev', 'eth0']).find((x) => x.dst === '169.254.1.1');
    expect(n).toMatchObject({ lladdr: 'ee:ee:ee:ee:ee:ef', state: ['PERMANENT'] });
  });
});

describe('dumps', () => {
  it('reads a route dump larger than one receive buffer whole (500 routes)', () => {
    cnl.vethAdd({ name: 'd0', peerName: 'd1' });
    cnl.linkSet('d0', { up: true });
    for (let i = 0; i < 500; i++) cnl.routeAdd({ dst: `10.${100 + (i >> 8)}.${i & 255}.0/24`, dev: 'd0' });
    const routes = cnl.routeList({ family: 4, link: 'd0' });
    expect(routes).toHaveLength(500);
    expect(new Set(routes.map((r) => r.dst)).size).toBe(500);
    // Cross-check against iproute2's own dump.
    expect(ipJson(C.name, ['route', 'show', 'dev', 'd0'])).toHaveLength(500);
  });
});

describe('sysctls', () => {
  it('reads and writes a container namespace sysctl without changing the host namespace or the caller', () => {
    const own = netlink();
    closers.push(own);
    const callerBefore = own.sysctlGet('net.ipv4.ip_forward');
    hnl.sysctlSet('net.ipv4.ip_forward', 0);
    cnl.sysctlSet('net.ipv4.ip_forward', 1);
    expect(cnl.sysctlGet('net.ipv4.ip_forward')).toBe('1');
    expect(hnl.sysctlGet('net.ipv4.ip_forward')).toBe('0');
    expect(own.sysctlGet('net.ipv4.ip_forward')).toBe(callerBefore);
    // /proc/sys/net follows the opening thread's namespace: what a process
    // inside C sees is what we wrote.
    expect(inNetns(C.name, 'cat', ['/proc/sys/net/ipv4/ip_forward']).trim()).toBe('1');
    expect(inNetns(H.name, 'cat', ['/proc/sys/net/ipv4/ip_forward']).trim()).toBe('0');
    cnl.sysctlSet('net.ipv4.ip_forward', '0');
    expect(inNetns(C.name, 'cat', ['/proc/sys/net/ipv4/ip_forward']).trim()).toBe('0');
  });

  it("writes an interface's sysctl, '/' standing for '.' in the interface name", () => {
    cnl.vethAdd({ name: 'v.100', peerName: 'v1' });
    cnl.sysctlSet('net.ipv6.conf.v/100.accept_dad', 0);
    expect(inNetns(C.name, 'cat', ['/proc/sys/net/ipv6/conf/v.100/accept_dad']).trim()).toBe('0');
    expect(cnl.sysctlGet('net.ipv6.conf.v/100.accept_dad')).toBe('0');
  });

  it('opens each family directory once per handle: links made later resolve, each handle stays in its namespace, close releases them', () => {
    // Sysctls are opened relative to the handle's /proc/sys/net/<family>
    // (native/core/sysctl.cc says why): one directory fd per family, for the handle's life.
    const fds = () => readdirSync('/proc/self/fd').length;
    const start = fds();
    const h = netlink(hns);
    const c = netlink(cns);
    const before = fds();
    h.sysctlSet('net.ipv4.ip_forward', 1);
    c.sysctlSet('net.ipv4.ip_forward', 0);
    h.sysctlGet('net.ipv6.conf.all.forwarding');
    expect(fds()).toBe(before + 3);
    // A link made after its family's directory was opened.
    h.vethAdd({ name: 'late0', peerName: 'late1' });
    h.sysctlSet('net.ipv4.conf.late0.proxy_arp', 1);
    h.sysctlSet('net.ipv4.neigh.late0.proxy_delay', 0);
    h.sysctlSet('net.ipv6.conf.late0.accept_ra', 0);
    expect(inNetns(H.name, 'cat', ['/proc/sys/net/ipv4/conf/late0/proxy_arp']).trim()).toBe('1');
    expect(inNetns(H.name, 'cat', ['/proc/sys/net/ipv4/neigh/late0/proxy_delay']).trim()).toBe('0');
    expect(inNetns(H.name, 'cat', ['/proc/sys/net/ipv6/conf/late0/accept_ra']).trim()).toBe('0');
    // Deleted and made again: the same name is the new link's.
    h.linkDel('late0');
    expect(() => h.sysctlGet('net.ipv4.conf.late0.proxy_arp')).toThrow(
      expect.objectContaining({ code: 'ENOENT', subject: 'net.ipv4.conf.late0.proxy_arp' }),
    );
    h.vethAdd({ name: 'late0', peerName: 'late1' });
    expect(h.sysctlGet('net.ipv4.conf.late0.proxy_arp')).toBe('0');
    // Each handle's directories are its own namespace's.
    expect(h.sysctlGet('net.ipv4.ip_forward')).toBe('1');
    expect(c.sysctlGet('net.ipv4.ip_forward')).toBe('0');
    expect(inNetns(H.name, 'cat', ['/proc/sys/net/ipv4/ip_forward']).trim()).toBe('1');
    expect(inNetns(C.name, 'cat', ['/proc/sys/net/ipv4/ip_forward']).trim()).toBe('0');
    // A family the namespace lacks: the error of the full path, nothing kept open.
    expect(() => h.sysctlGet('net.nosuchfamily.x')).toThrow(
      expect.objectContaining({ code: 'ENOENT', subject: 'net.nosuchfamily.x' }),
    );
    expect(fds()).toBe(before + 3);
    h.close();
    c.close();
    expect(fds()).toBe(start);
  });

  it('rejects keys outside net., with path tricks or bad characters', () => {
    for (const key of [
      'kernel.hostname',
      'net..ipv4.ip_forward',
      'net.ipv4.conf.//.x',
      'net.ipv4/../../kernel',
      'net.ipv4.ip forward',
      'net.',
    ]) {
      expect(() => cnl.sysctlGet(key)).toThrow(TypeError);
    }
    expect(() => cnl.sysctlGet('net.ipv4.nonexistent_key')).toThrow(
      expect.objectContaining({ code: 'ENOENT', op: 'sysctlGet', subject: 'net.ipv4.nonexistent_key' }),
    );
    expect(() => cnl.sysctlSet('net.ipv4.ip_forward', 'x')).toThrow(expect.objectContaining({ code: 'EINVAL' }));
  });
});

describe('errors', () => {
  it('EEXIST on a duplicate link, ENODEV on a missing one, with op and subject', () => {
    hnl.vethAdd({ name: 'dup0', peerName: 'dup1' });
    let err: unknown;
    try {
      hnl.vethAdd({ name: 'dup0', peerName: 'dup2' });
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(NetlinkError);
    expect(err).toMatchObject({ code: 'EEXIST', errno: 17, op: 'RTM_NEWLINK', subject: 'dup0' });
    expect((err as Error).message).toContain('RTM_NEWLINK dup0');
    expect(() => hnl.linkGet('nope0')).toThrow(
      expect.objectContaining({ code: 'ENODEV', op: 'RTM_GETLINK', subject: 'nope0' }),
    );
    expect(() => hnl.linkDel('nope0')).toThrow(
      expect.objectContaining({ code: 'ENODEV', op: 'RTM_DELLINK', subject: 'nope0' }),
    );
    expect(() => hnl.addrAdd('nope0', '10.0.0.1/32')).toThrow(
      expect.objectContaining({ code: 'ENODEV', subject: 'nope0' }),
    );
    expect(hnl.linkFind('nope0')).toBeUndefined();
  });

  it("surfaces the kernel's extended ack text", () => {
    // The kernel (fib_table_insert) refuses host bits under the prefix and says why.
    let err: NetlinkError | undefined;
    try {
      hnl.routeAdd({ dst: '10.1.2.3/24', dev: 'lo' });
    } catch (e) {
      err = e as NetlinkError;
    }
    expect(err).toBeInstanceOf(NetlinkError);
    expect(err).toMatchObject({ code: 'EINVAL', op: 'RTM_NEWROUTE', subject: '10.1.2.3/24' });
    expect(err!.extack).toMatch(/prefix/i);
    expect(err!.message).toContain(err!.extack);
    // A gateway that is not reachable: ENETUNREACH with its own reason.
    expect(() => hnl.routeAdd({ dst: '10.1.0.0/16', gateway: '10.9.9.9' })).toThrow(
      expect.objectContaining({ code: 'ENETUNREACH', extack: expect.stringMatching(/gateway/i) }),
    );
  });

  it('throws TypeErrors naming the argument', () => {
    expect(() => hnl.vethAdd({ name: 'x0', peerName: 'x1', mtu: 'x' as unknown as number })).toThrow(
      new TypeError("vethAdd: options.mtu must be an integer 68..65535, got 'x'"),
    );
    expect(() => hnl.vethAdd({ name: 'much-too-long-name', peerName: 'x1' })).toThrow(
      /vethAdd: options.name must be an interface name/,
    );
    expect(() => hnl.addrAdd('lo', '10.0.0.1/33')).toThrow(
      /addrAdd: cidr must be an address with prefix length.*got '10.0.0.1\/33'/,
    );
    expect(() => hnl.routeAdd({ dst: 'default', gateway: 'fe80::1', src: '10.0.0.1' })).toThrow(TypeError);
    expect(() => hnl.neighSet({ dev: 'lo', dst: '10.0.0.1', lladdr: 'zz' })).toThrow(
      /neighSet: neigh.lladdr must be a MAC address/,
    );
    expect(() => hnl.linkGet(0)).toThrow(/linkGet: link must be/);
    expect(() => openNetns('relative/path')).toThrow(TypeError);
    expect(() => openNetns('/nonexistent/netns')).toThrow(expect.objectContaining({ code: 'ENOENT', op: 'openNetns' }));
    expect(() => openNetns('/etc/hostname')).toThrow(expect.objectContaining({ code: 'EINVAL', op: 'openNetns' }));
    const closed = netlink(cns);
    closed.close();
    closed.close();
    expect(() => closed.linkList()).toThrow(expect.objectContaining({ code: 'EBADF' }));
  });
});

describe('robustness', () => {
  // A veth deletion waits for an RCU grace period in the kernel (~20 ms idle,
  // far more on a loaded machine): deleted one by one, 2000 cycles were 35-65 s
  // of waiting, most of this file's time. So most cycles move their veth into
  // a link group that one linkDelGroupAsync removes per 250 cycles (one grace
  // period for the batch), and every 50th cycle still deletes its veth with the
  // synchronous linkDel. The loop yields to the event loop every few cycles, or
  // the worker cannot answer vitest's RPC ("Timeout calling onTaskUpdate").
  it('2000 create/delete cycles leave the fd count and the thread namespace unchanged', async () => {
    const fds = () => readdirSync('/proc/self/fd').length;
    const ns = () => readlinkSync('/proc/thread-self/ns/net');
    const GROUP = 7;
    // Holds the name eth0 in C, so adding a peer of that name into C fails.
    cnl.vethAdd({ name: 'eth0', peerName: 'eth0p' });
    const fdsBefore = fds();
    const nsBefore = ns();
    for (let i = 0; i < 2000; i++) {
      const n = openNetns(C.path);
      const h = netlink(n);
      h.vethAdd({ name: `r${i}`, peerName: `p${i}` });
      // Failure paths must not leak either: the peer name is taken in C, and
      // a missing sysctl fails after the namespace switch.
      expect(() => hnl.vethAdd({ name: 'hr0', peerName: 'eth0', peerNetns: n })).toThrow(NetlinkError);
      expect(() => h.sysctlGet('net.ipv4.conf.nope0.forwarding')).toThrow(NetlinkError);
      expect(() => openNetns('/etc/hostname')).toThrow(NetlinkError);
      h.sysctlSet(`net.ipv4.conf.r${i}.forwarding`, 1);
      if (h.sysctlGet(`net.ipv4.conf.r${i}.forwarding`) !== '1') throw new Error('sysctl not applied');
      if (i % 50 === 0) h.linkDel(`r${i}`);
      else h.linkSet(`r${i}`, { group: GROUP });
      if (i % 250 === 249) await h.linkDelGroupAsync(GROUP);
      h.close();
      n.close();
      if (i % 500 === 0) expect(ns()).toBe(nsBefore);
      if (i % 10 === 9) await new Promise((r) => setImmediate(r));
    }
    expect(fds()).toBe(fdsBefore);
    expect(ns()).toBe(nsBefore);
    expect(
      cnl
        .linkList()
        .map((l) => l.name)
        .sort(),
    ).toEqual(['eth0', 'eth0p', 'lo']);
  }, 240_000);
});

describe('worker threads', () => {
  it('loads and works inside a worker_thread, alongside the main thread', async () => {
    hnl.vethAdd({ name: 'main0', peerName: 'main1' });
    const root = packageRoot();
    const code = `
      const { parentPort, workerData } = require('node:worker_threads');
      const { readlinkSync } = require('node:fs');
      const addon = require(workerData.root + '/node_modules/node-gyp-build')(workerData.root);
      class WErr extends Error { constructor(i) { super(i.op + ' ' + i.subject); Object.assign(this, i); } }
      addon.setErrorClass(WErr);
      const nsBefore = readlinkSync('/proc/thread-self/ns/net');
      const ns = addon.openNetns(workerData.path);
      const nl = addon.netlink(ns);
      nl.vethAdd({ name: 'w0', peerName: 'w1', numRxQueues: 2, numTxQueues: 2 });
      nl.sysctlSet('net.ipv4.conf.w0.forwarding', 1);
      let code = '';
      try { nl.linkGet('nope0'); } catch (e) { code = (e instanceof WErr) + ':' + e.code; }
      const names = nl.linkList().map((l) => l.name).sort();
      const q = nl.linkGet('w0').numRxQueues;
      nl.close(); ns.close();
      parentPort.postMessage({ names, code, q, abi: addon.ABI_VERSION, same: readlinkSync('/proc/thread-self/ns/net') === nsBefore });
    `;
    const w = new Worker(code, { eval: true, workerData: { root, path: H.path } });
    const msg = await new Promise<any>((resolve, reject) => {
      w.once('message', resolve);
      w.once('error', reject);
    });
    await w.terminate();
    expect(msg).toEqual({
      names: ['lo', 'main0', 'main1', 'w0', 'w1'],
      code: 'true:ENODEV',
      q: 2,
      abi: NATIVE_ABI_VERSION,
      same: true,
    });
    expect(hnl.sysctlGet('net.ipv4.conf.w0.forwarding')).toBe('1');
    // The main thread's handle still works after the worker's environment went away.
    expect(hnl.linkGet('w0').kind).toBe('veth');
    expect(() => hnl.linkGet('nope1')).toThrow(NetlinkError);
  });
});

describe('linkDelAsync', () => {
  it('deletes a veth (both ends) off the event loop and resolves undefined', async () => {
    hnl.vethAdd({ name: 'ad0', peerName: 'eth0', peerNetns: cns });
    await expect(hnl.linkDelAsync('ad0')).resolves.toBeUndefined();
    expect(hnl.linkFind('ad0')).toBeUndefined();
    expect(cnl.linkFind('eth0')).toBeUndefined();
    // By index too.
    cnl.vethAdd({ name: 'ad1', peerName: 'ad2' });
    await cnl.linkDelAsync(cnl.linkGet('ad2').index);
    expect(cnl.linkList().map((l) => l.name)).toEqual(['lo']);
  });

  it('rejects a missing link with the same NetlinkError linkDel throws, and bad input with a TypeError', async () => {
    let sync: unknown;
    try {
      hnl.linkDel('nope0');
    } catch (e) {
      sync = e;
    }
    const err = await hnl.linkDelAsync('nope0').then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(NetlinkError);
    expect(err).toMatchObject({ code: 'ENODEV', errno: 19, op: 'RTM_DELLINK', subject: 'nope0' });
    expect((err as NetlinkError).message).toBe((sync as NetlinkError).message);
    await expect(hnl.linkDelAsync(424242)).rejects.toMatchObject({
      code: 'ENODEV',
      op: 'RTM_DELLINK',
      subject: 'ifindex 424242',
    });
    await expect(hnl.linkDelAsync('' as string)).rejects.toThrow(TypeError);
    await expect(hnl.linkDelAsync({} as unknown as string)).rejects.toThrow(/linkDelAsync: link must be/);
    const closed = netlink(hns);
    closed.close();
    await expect(closed.linkDelAsync('lo')).rejects.toMatchObject({ code: 'EBADF' });
  });

  it('runs 20 concurrent deletes on one handle while the event loop keeps turning, and the handle stays usable', async () => {
    const names = Array.from({ length: 20 }, (_, i) => `cc${i}`);
    for (const n of names) hnl.vethAdd({ name: n, peerName: `${n}p` });
    const nsBefore = readlinkSync('/proc/thread-self/ns/net');
    let settled = 0;
    let ranWhilePending = false;
    const all = Promise.all(names.map((n) => hnl.linkDelAsync(n).then(() => settled++)));
    // A sync call on the same handle in between: the async requests use their own sockets.
    expect(hnl.linkGet('lo').kind).toBe('loopback');
    await new Promise<void>((resolve) => setImmediate(resolve));
    // The deletes sleep in the kernel; a callback that ran before all of them
    // settled shows none of them held the loop.
    if (settled < names.length) ranWhilePending = true;
    await all;
    expect(ranWhilePending).toBe(true);
    expect(settled).toBe(20);
    expect(hnl.linkList().map((l) => l.name)).toEqual(['lo']);
    expect(readlinkSync('/proc/thread-self/ns/net')).toBe(nsBefore);
  });

  it('200 cycles (success and failure) leak no fd and leave the thread namespace unchanged', async () => {
    const fds = () => readdirSync('/proc/self/fd').length;
    const ns = () => readlinkSync('/proc/thread-self/ns/net');
    const fdsBefore = fds();
    const nsBefore = ns();
    for (let i = 0; i < 200; i++) {
      const n = openNetns(C.path);
      const h = netlink(n);
      h.vethAdd({ name: `a${i}`, peerName: `b${i}` });
      await Promise.all([h.linkDelAsync(`a${i}`), expect(h.linkDelAsync(`zz${i}`)).rejects.toThrow(NetlinkError)]);
      // Closing the handle right away must not disturb a request in flight.
      h.vethAdd({ name: `c${i}`, peerName: `d${i}` });
      const p = h.linkDelAsync(`c${i}`);
      h.close();
      n.close();
      await p;
    }
    expect(cnl.linkList().map((l) => l.name)).toEqual(['lo']);
    expect(fds()).toBe(fdsBefore);
    expect(ns()).toBe(nsBefore);
  }, 120_000);
});
