// The addon's overlay surface in a fresh namespace: VXLAN devices, their FDB,
// permanent neighbours listed and deleted, blackhole routes, routes filtered by
// protocol; and the ipip RTM_NEWLINK message, checked byte for byte because this
// kernel has no ipip module (the kernel's refusal is checked too).
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { createNetns, inNetns, removeAllNetns } from '../support/netns.js';
import {
  NetlinkError,
  RouteType,
  netlink,
  openNetns,
  tunnelMessage,
  type Netlink,
  type NetNS,
} from '../../src/native/index.js';

let N: { name: string; path: string };
let ns: NetNS;
let nl: Netlink;

beforeEach(() => {
  N = createNetns('tun');
  ns = openNetns(N.path);
  nl = netlink(ns);
  // An underlay: a veth pair with an address, as a node's eth0.
  inNetns(N.name, 'ip', ['link', 'add', 'ul0', 'type', 'veth', 'peer', 'name', 'ul1']);
  inNetns(N.name, 'ip', ['link', 'set', 'ul0', 'up']);
  inNetns(N.name, 'ip', ['link', 'set', 'ul1', 'up']);
  inNetns(N.name, 'ip', ['addr', 'add', '192.0.2.1/24', 'dev', 'ul0']);
});

afterEach(() => {
  nl.close();
  ns.close();
  removeAllNetns();
});

function ipJson(args: string[]): any[] {
  return JSON.parse(inNetns(N.name, 'ip', ['-j', '-d', ...args]));
}

describe('vxlan', () => {
  it('creates a device with VNI, port, local VTEP, underlay device and learning off', () => {
    nl.vxlanAdd({
      name: 'vxlan.test',
      vni: 4096,
      port: 4789,
      local: '192.0.2.1',
      dev: 'ul0',
      learning: false,
      mtu: 1450,
      mac: '66:aa:bb:cc:dd:01',
    });
    const [l] = ipJson(['link', 'show', 'vxlan.test']);
    expect(l.mtu).toBe(1450);
    expect(l.address).toBe('66:aa:bb:cc:dd:01');
    const d = l.linkinfo.info_data;
    expect(d.id).toBe(4096);
    expect(d.port).toBe(4789);
    expect(d.local).toBe('192.0.2.1');
    expect(d.link).toBe('ul0');
    expect(d.learning).toBe(false);
    expect(nl.linkGet('vxlan.test').kind).toBe('vxlan');
  });

  it('creates an IPv6-underlay device (local VTEP given as IPv6)', () => {
    inNetns(N.name, 'ip', ['addr', 'add', '2001:db8::1/64', 'dev', 'ul0', 'nodad']);
    nl.vxlanAdd({ name: 'vx6.test', vni: 4096, local: '2001:db8::1', dev: 'ul0' });
    const [l] = ipJson(['link', 'show', 'vx6.test']);
    expect(l.linkinfo.info_data.local6).toBe('2001:db8::1');
    expect(l.linkinfo.info_data.port).toBe(4789);
  });

  it('refuses a second device of the same name (EEXIST) and a bad VNI (TypeError naming the field)', () => {
    nl.vxlanAdd({ name: 'vxlan.test', vni: 1 });
    expect(() => nl.vxlanAdd({ name: 'vxlan.test', vni: 1 })).toThrow(NetlinkError);
    expect(() => nl.vxlanAdd({ name: 'vxlan.x', vni: 1 << 24 })).toThrow(/options\.vni/);
  });

  it('sets, lists, replaces and deletes FDB entries (NTF_SELF, permanent)', () => {
    nl.vxlanAdd({ name: 'vxlan.test', vni: 4096, local: '192.0.2.1', dev: 'ul0' });
    nl.fdbSet({ dev: 'vxlan.test', lladdr: '66:00:00:00:00:02', dst: '192.0.2.2' });
    nl.fdbSet({ dev: 'vxlan.test', lladdr: '66:00:00:00:00:02', dst: '192.0.2.3' }); // replace
    nl.fdbSet({ dev: 'vxlan.test', lladdr: '66:00:00:00:00:04', dst: '192.0.2.4' });
    const ours = nl.fdbList({ dev: 'vxlan.test' }).filter((f) => f.dst);
    expect(ours.map((f) => `${f.lladdr}>${f.dst}`).sort()).toEqual([
      '66:00:00:00:00:02>192.0.2.3',
      '66:00:00:00:00:04>192.0.2.4',
    ]);
    const shown = inNetns(N.name, 'bridge', ['fdb', 'show', 'dev', 'vxlan.test']);
    expect(shown).toMatch(/66:00:00:00:00:02 dst 192\.0\.2\.3 self permanent/);
    nl.fdbDel({ dev: 'vxlan.test', lladdr: '66:00:00:00:00:02', dst: '192.0.2.3' });
    expect(
      nl
        .fdbList({ dev: 'vxlan.test' })
        .filter((f) => f.dst)
        .map((f) => f.lladdr),
    ).toEqual(['66:00:00:00:00:04']);
  });

  it('lists and deletes permanent neighbours on a device', () => {
    nl.vxlanAdd({ name: 'vxlan.test', vni: 4096, dev: 'ul0' });
    nl.linkSet('vxlan.test', { up: true });
    nl.neighSet({ dev: 'vxlan.test', dst: '10.65.1.0', lladdr: '66:00:00:00:00:02' });
    let list = nl.neighList({ dev: 'vxlan.test', family: 4 });
    expect(list).toEqual([expect.objectContaining({ dst: '10.65.1.0', lladdr: '66:00:00:00:00:02', permanent: true })]);
    nl.neighDel({ dev: 'vxlan.test', dst: '10.65.1.0' });
    list = nl.neighList({ dev: 'vxlan.test', family: 4 });
    expect(list).toEqual([]);
    expect(() => nl.neighDel({ dev: 'vxlan.test', dst: '10.65.1.0' })).toThrow(NetlinkError);
  });
});

describe('routes: type and protocol', () => {
  it('adds a blackhole route tagged with a protocol and lists routes by protocol', () => {
    nl.routeAdd({ dst: '10.66.0.0/26', type: 'blackhole', protocol: 80 });
    nl.routeAdd({ dst: '10.66.1.0/26', gateway: '192.0.2.9', protocol: 80 });
    nl.routeAdd({ dst: '10.66.2.0/26', gateway: '192.0.2.9' });
    const shown = inNetns(N.name, 'ip', ['route', 'show', 'proto', '80']);
    expect(shown).toMatch(/^blackhole 10\.66\.0\.0\/26/m);
    const ours = nl.routeList({ family: 4, protocol: 80 });
    expect(ours.map((r) => r.dst).sort()).toEqual(['10.66.0.0/26', '10.66.1.0/26']);
    expect(ours.find((r) => r.dst === '10.66.0.0/26')!.type).toBe(RouteType.blackhole);
    nl.routeDel({ dst: '10.66.0.0/26', type: 'blackhole', protocol: 80 });
    expect(nl.routeList({ family: 4, protocol: 80 }).map((r) => r.dst)).toEqual(['10.66.1.0/26']);
  });

  it('refuses a blackhole route with a gateway (TypeError naming route.type)', () => {
    expect(() => nl.routeAdd({ dst: '10.66.0.0/26', type: 'blackhole', gateway: '192.0.2.9' })).toThrow(/route\.type/);
  });
});

describe('ipip', () => {
  // Walks an RTM_NEWLINK: ifinfomsg, then attributes; IFLA_LINKINFO (18)
  // holds IFLA_INFO_KIND (1) and IFLA_INFO_DATA (2).
  function attrs(buf: Buffer, start: number, end: number): Map<number, Buffer> {
    const m = new Map<number, Buffer>();
    let off = start;
    while (off + 4 <= end) {
      const len = buf.readUInt16LE(off);
      const type = buf.readUInt16LE(off + 2) & 0x3fff;
      if (len < 4) break;
      m.set(type, buf.subarray(off + 4, off + len));
      off += (len + 3) & ~3;
    }
    return m;
  }

  it('builds the RTM_NEWLINK for an ipip device with link, local, ttl and pmtudisc', () => {
    const buf = tunnelMessage('ipip', { name: 'tunl.netplugin', local: '192.0.2.1', dev: 7, mtu: 1480 });
    expect(buf.readUInt32LE(0)).toBe(buf.length); // nlmsg_len
    expect(buf.readUInt16LE(4)).toBe(16); // RTM_NEWLINK
    const flags = buf.readUInt16LE(6);
    expect(flags & 0x400).toBe(0x400); // NLM_F_CREATE
    expect(flags & 0x200).toBe(0x200); // NLM_F_EXCL
    const top = attrs(buf, 16 + 16, buf.length);
    expect(top.get(3)!.toString('latin1')).toBe('tunl.netplugin\0'); // IFLA_IFNAME
    expect(top.get(4)!.readUInt32LE(0)).toBe(1480); // IFLA_MTU
    const li = top.get(18)!;
    const info = attrs(li, 0, li.length);
    expect(info.get(1)!.toString('latin1')).toBe('ipip\0');
    const data = attrs(info.get(2)!, 0, info.get(2)!.length);
    expect(data.get(1)!.readUInt32LE(0)).toBe(7); // IFLA_IPTUN_LINK
    expect([...data.get(2)!]).toEqual([192, 0, 2, 1]); // IFLA_IPTUN_LOCAL
    expect(data.has(3)).toBe(false); // no IFLA_IPTUN_REMOTE: a collect-all device
    expect(data.get(4)![0]).toBe(0); // IFLA_IPTUN_TTL inherit
    expect(data.get(10)![0]).toBe(1); // IFLA_IPTUN_PMTUDISC
  });

  it('builds a VXLAN message with the port in network byte order', () => {
    const buf = tunnelMessage('vxlan', { name: 'vxlan.netplugin', vni: 4096, port: 4789, local: '192.0.2.1' });
    const li = attrs(buf, 32, buf.length).get(18)!;
    const info = attrs(li, 0, li.length);
    const data = attrs(info.get(2)!, 0, info.get(2)!.length);
    expect(data.get(1)!.readUInt32LE(0)).toBe(4096); // IFLA_VXLAN_ID
    expect(data.get(15)!.readUInt16BE(0)).toBe(4789); // IFLA_VXLAN_PORT
    expect(data.get(7)![0]).toBe(0); // IFLA_VXLAN_LEARNING off
  });

  it('refuses IPv6 addresses for ipip and names in tunnelMessage (TypeErrors naming the field)', () => {
    expect(() => tunnelMessage('ipip', { name: 't', local: '2001:db8::1' })).toThrow(/options\.local/);
    expect(() => tunnelMessage('ipip', { name: 't', dev: 'eth0' })).toThrow(/options\.dev/);
  });

  it('reports the missing kernel module when the kernel refuses the device', () => {
    let err: unknown;
    try {
      nl.ipipAdd({ name: 'tunl.netplugin', local: '192.0.2.1', dev: 'ul0' });
    } catch (e) {
      err = e;
    }
    // This kernel has no ipip module; a kernel with one creates the device.
    if (err === undefined) {
      expect(nl.linkGet('tunl.netplugin').kind).toBe('ipip');
    } else {
      expect(err).toBeInstanceOf(NetlinkError);
      expect((err as NetlinkError).code).toBe('EOPNOTSUPP');
      expect((err as Error).message).toMatch(/no 'ipip' module/);
    }
  });
});
