// One pod interface: a veth pair whose container end is created straight in the
// pod's namespace, /32 and /128 addresses, routes via a link-scope gateway
// (169.254.1.1, answered by proxy ARP on the host end) and the host-side
// routes and sysctls that make the host the pod's only router.
import { NetlinkError, netlink, openNetns, type Netlink, type NetNS } from '../native/index.js';
import { linkLocalFromMac } from './names.js';
import {
  MAC,
  checkIfname,
  checkPath,
  validateSpec,
  type TeardownOptions,
  type ValidSpec,
  type WorkloadSpec,
  type WorkloadState,
} from './spec.js';

/** The IPv4 next hop every pod uses; it exists nowhere, the host veth answers ARP for it (proxy_arp). */
export const GATEWAY_V4 = '169.254.1.1';

const RT_SCOPE_LINK = 253;
const IFA_F_TENTATIVE = 0x40;
const IFA_F_DADFAILED = 0x08;

interface Handles {
  hostNs?: NetNS;
  ns?: NetNS;
  host?: Netlink;
  cont?: Netlink;
}

function closeAll(h: Handles): void {
  h.cont?.close();
  h.host?.close();
  h.ns?.close();
  h.hostNs?.close();
}

function hostHandle(h: Handles, hostNetnsPath: string | undefined): Netlink {
  if (hostNetnsPath) h.hostNs = openNetns(hostNetnsPath);
  h.host = netlink(h.hostNs);
  return h.host;
}

/**
 * A link netplugin did not create holds the pod's host veth name (ours are
 * veths with the spec's hostMac). It is not ours to delete, and the clash is
 * on the host, not in the pod: the message names the link and the fix.
 */
export class HostLinkInUseError extends Error {
  override name = 'HostLinkInUseError';
  constructor(
    readonly ifname: string,
    readonly link: { index: number; kind: string; mac: string },
    ourMac: string,
  ) {
    const what = `${link.kind || 'link'} ifindex ${link.index}${link.mac ? `, MAC ${link.mac}` : ''}`;
    super(
      `host interface ${ifname} (${what}) already exists and was not created by netplugin ` +
        `(its host veths are veths with MAC ${ourMac}), so it is left alone; ` +
        `delete it (ip link del ${ifname}) or rename it (ip link set ${ifname} name <other>), then retry`,
    );
  }
}

/** The link holding `s.hostIfname` on the host when it is not a veth of ours. */
function foreignHostLink(host: Netlink, s: ValidSpec): HostLinkInUseError | undefined {
  const l = host.linkFind(s.hostIfname);
  if (!l || (l.kind === 'veth' && l.mac === s.hostMac)) return undefined;
  return new HostLinkInUseError(s.hostIfname, l, s.hostMac);
}

/** Creates the pod interface; on any failure removes what it made and rethrows. */
export function setupWorkload(spec: WorkloadSpec): WorkloadState {
  return setup(spec, undefined);
}

/**
 * setupWorkload for a resident caller (the agent): the handle of the host
 * namespace (hostNetnsPath, default the caller's own) stays open between pods,
 * and with it its sysctl directories. Opening /proc/sys/net/ipv4 costs a walk
 * over every pod namespace's dentry of that name (native/core/sysctl.cc: ~0.13 ms
 * with 1000 pods); a fresh handle per pod would pay it per pod. A spec naming
 * another hostNetnsPath gets a handle of its own, as with setupWorkload.
 */
export function createWorkloadSetup(o: { hostNetnsPath?: string } = {}): {
  setup(spec: WorkloadSpec): WorkloadState;
  close(): void;
} {
  if (o.hostNetnsPath !== undefined) checkPath('createWorkloadSetup', 'options.hostNetnsPath', o.hostNetnsPath);
  let kept: Netlink | undefined;
  const open = (): Netlink => {
    if (o.hostNetnsPath === undefined) return netlink();
    const ns = openNetns(o.hostNetnsPath);
    try {
      return netlink(ns);
    } finally {
      ns.close();
    }
  };
  return {
    setup: (spec) => setup(spec, spec?.hostNetnsPath === o.hostNetnsPath ? (kept ??= open()) : undefined),
    close: () => {
      kept?.close();
      kept = undefined;
    },
  };
}

/** setupWorkload with `kept` as the host handle when given (the caller's to close). */
function setup(spec: WorkloadSpec, kept: Netlink | undefined): WorkloadState {
  const s = validateSpec('setupWorkload', spec);
  const h: Handles = {};
  let created = false;
  try {
    h.ns = openNetns(s.netnsPath);
    const host = kept ?? hostHandle(h, s.hostNetnsPath);
    const cont = (h.cont = netlink(h.ns));
    // A veth of this name is a leftover of an earlier sandbox of the same pod
    // (the name is derived from the pod, not the container): replace it. Only
    // a veth with our MAC, though: any other link of that name is not ours,
    // is never deleted, and fails the ADD naming it (HostLinkInUseError).
    // (RTM_GETLINK first: a miss costs ~25 µs, a failed RTM_DELLINK ~60 µs.)
    const old = host.linkFind(s.hostIfname);
    if (old && !(old.kind === 'veth' && old.mac === s.hostMac))
      throw new HostLinkInUseError(s.hostIfname, old, s.hostMac);
    if (old) {
      try {
        host.linkDel(old.index);
      } catch (e) {
        // The kernel tears a deleted namespace's veths down asynchronously
        // (its netns cleanup runs from a workqueue): the old pair can vanish
        // between the lookup and the delete. Gone is what we wanted.
        if (!NetlinkError.is(e, 'ENODEV')) throw e;
      }
    }
    try {
      host.vethAdd({
        name: s.hostIfname,
        peerName: s.ifname,
        peerNetns: h.ns,
        ...(s.mtu !== undefined && { mtu: s.mtu }),
        mac: s.hostMac,
        ...(s.containerMac !== undefined && { peerMac: s.containerMac }),
        numRxQueues: s.numQueues,
        numTxQueues: s.numQueues,
      });
    } catch (e) {
      // EEXIST names neither side: a link that appeared on the host since the
      // lookup is the host's clash; otherwise the pod has the interface.
      throw (NetlinkError.is(e, 'EEXIST') && foreignHostLink(host, s)) || e;
    }
    created = true;
    configureHost(host, s);
    const c = configureContainer(cont, s);
    for (const a of s.parsed) {
      // replace, not add: a route to this address left by a dead pod on another device must move here.
      host.routeReplace({ dst: `${a.ip}/${a.family === 4 ? 32 : 128}`, dev: s.hostIfname, scope: 'link' });
    }
    return {
      hostIfname: s.hostIfname,
      hostIndex: c.parentIndex ?? host.linkGet(s.hostIfname).index,
      containerMac: c.mac,
      containerIndex: c.index,
      mtu: c.mtu,
    };
  } catch (e) {
    if (created) {
      try {
        // Deleting one end removes the pair, whatever the container side holds by now.
        (h.host ?? kept!).linkDel(s.hostIfname);
      } catch {
        /* the original error is the one to report */
      }
    }
    throw e;
  } finally {
    closeAll(h);
  }
}

function hasFamily(s: ValidSpec, f: 4 | 6): boolean {
  return s.parsed.some((a) => a.family === f);
}

/** The host-side IPv6 settings every pod veth gets (also checked by CHECK). */
const HOST_IPV6_HARDENING: ReadonlyArray<[string, number]> = [
  ['accept_ra', 0],
  ['accept_redirects', 0],
  ['autoconf', 0],
];

function hardenHostIPv6(host: Netlink, n: string, podHasV6: boolean): void {
  for (const [k, v] of HOST_IPV6_HARDENING) {
    try {
      host.sysctlSet(`net.ipv6.conf.${n}.${k}`, v);
    } catch (e) {
      // A node booted without IPv6 (ipv6.disable=1) has no net.ipv6 tree at
      // all: nothing can accept an RA there. An IPv6 pod on it is an error.
      if (!podHasV6 && NetlinkError.is(e, 'ENOENT')) return;
      throw e;
    }
  }
  // An IPv4-only pod's host end needs no IPv6 at all: off, it takes no IPv6
  // packet from the pod (RAs included) and gets no link-local address and no
  // IPv6 routes. Those routes are why: every link up or down on the node walks
  // the whole IPv6 routing table (the kernel's fib6 clean-up and sync), and
  // with IPv6 on, each pod veth adds three entries to it (fe80::/64, its
  // link-local, ff00::/8), so each ADD and DEL cost more with every pod
  // (docs/performance.md, "The scale cell, profiled"). Not checked by CHECK:
  // pods set up before this still have it on, and nothing of theirs depends on it.
  if (!podHasV6) host.sysctlSet(`net.ipv6.conf.${n}.disable_ipv6`, 1);
}

function configureHost(host: Netlink, s: ValidSpec): void {
  const n = s.hostIfname;
  if (hasFamily(s, 4)) {
    // The pod's gateway 169.254.1.1 exists nowhere: the host end answers ARP for
    // every address (proxy_arp) at once (proxy_delay 0) and routes the packets.
    host.sysctlSet(`net.ipv4.conf.${n}.proxy_arp`, 1);
    host.sysctlSet(`net.ipv4.neigh.${n}.proxy_delay`, 0);
    host.sysctlSet(`net.ipv4.conf.${n}.forwarding`, 1);
    // A hostPort reached on the node's 127.0.0.1 is DNAT'd to the pod and leaves through this veth
    // with source 127.0.0.1: without route_localnet the kernel drops it as a martian. It would also
    // let a pod's packet to 127.0.0.0/8 reach the node's loopback listeners: the agent's policy
    // table drops those (its prerouting chain).
    host.sysctlSet(`net.ipv4.conf.${n}.route_localnet`, 1);
  }
  // Whatever the pod's families: the node never learns from a pod. A pod is
  // untrusted and can send router advertisements and redirects on its veth;
  // on a node that does not forward IPv6 (IPv4-only clusters) the kernel
  // accepts RAs by default, so a pod could plant a default route or a prefix
  // on the node. Set before the link comes up, so not even one RA gets in.
  hardenHostIPv6(host, n, hasFamily(s, 6));
  host.sysctlSet(`net.ipv4.conf.${n}.accept_redirects`, 0);
  if (hasFamily(s, 6)) {
    // DAD off before the link comes up: the link-local the pod routes through
    // must be usable at once, not after ~1 s of tentative state.
    host.sysctlSet(`net.ipv6.conf.${n}.accept_dad`, 0);
    host.sysctlSet(`net.ipv6.conf.${n}.proxy_ndp`, 1);
    host.sysctlSet(`net.ipv6.conf.${n}.forwarding`, 1);
    // Added explicitly (the kernel would add the same EUI-64 address on link up,
    // and then ignores its own duplicate) so it exists before the pod's routes use it.
    host.addrAdd(n, `${linkLocalFromMac(s.hostMac)}/64`, { nodad: true });
  }
  host.linkSet(n, { up: true });
}

function configureContainer(cont: Netlink, s: ValidSpec) {
  const n = s.ifname;
  const v4 = hasFamily(s, 4);
  const v6 = hasFamily(s, 6);
  if (v6) cont.sysctlSet(`net.ipv6.conf.${n}.accept_dad`, 0);
  for (const a of s.parsed) cont.addrAdd(n, a.cidr, a.family === 6 ? { nodad: true } : undefined);
  cont.linkSet(n, { up: true });
  if (v4) {
    cont.routeAdd({ dst: `${GATEWAY_V4}/32`, dev: n, scope: 'link' });
    cont.routeAdd({ dst: 'default', gateway: GATEWAY_V4, dev: n });
    // A permanent entry saves the first packet an ARP round trip.
    cont.neighSet({ dev: n, dst: GATEWAY_V4, lladdr: s.hostMac });
  }
  if (v6) {
    const gw = linkLocalFromMac(s.hostMac);
    cont.routeAdd({ dst: '::/0', gateway: gw, dev: n });
    cont.neighSet({ dev: n, dst: gw, lladdr: s.hostMac });
  }
  const fwd = s.allowIpForwarding ? 1 : 0;
  // Written explicitly either way: a namespace may come with forwarding on.
  cont.sysctlSet('net.ipv4.ip_forward', fwd);
  if (v6) cont.sysctlSet('net.ipv6.conf.all.forwarding', fwd);
  return cont.linkGet(n);
}

/**
 * Removes the pod interface. With the netns given and present, the container end is
 * deleted inside it (never a same-named host veth that may belong to a newer sandbox);
 * otherwise the host end is deleted by name (unless keepHostEnd). Missing netns or link: { removed: false }.
 */
export function teardownWorkload(o: TeardownOptions): { removed: boolean } {
  const h: Handles = {};
  try {
    const t = teardownTarget('teardownWorkload', o, h);
    if (!t) return { removed: false };
    try {
      t.nl.linkDel(t.name);
      return { removed: true };
    } catch (e) {
      return { removed: notThere(e) };
    }
  } finally {
    closeAll(h);
  }
}

/**
 * teardownWorkload with the deletion (a veth sleeps ~20 ms in the kernel) on the
 * libuv threadpool, so the event loop keeps serving other pods meanwhile. Same
 * validation (thrown synchronously as a rejection), same choice of end, same result.
 */
export async function teardownWorkloadAsync(o: TeardownOptions): Promise<{ removed: boolean }> {
  const h: Handles = {};
  try {
    const t = teardownTarget('teardownWorkloadAsync', o, h);
    if (!t) return { removed: false };
    return await deleteLinkAsync(t.nl, t.name);
  } finally {
    // linkDelAsync owns its own socket: closing the handles cannot cut a request short.
    closeAll(h);
  }
}

/** The link to delete and the handle of its namespace; undefined when there is nothing to do. */
/** TeardownOptions' validation (TypeError naming the field), shared with the deferred teardown (trash.ts). */
export function checkTeardownOptions(fn: string, o: TeardownOptions): void {
  if (typeof o !== 'object' || o === null) throw new TypeError(`${fn}: options must be an object, got ${String(o)}`);
  checkIfname(fn, 'options.ifname', o.ifname);
  checkIfname(fn, 'options.hostIfname', o.hostIfname);
  if (o.netnsPath !== undefined && o.netnsPath !== '') checkPath(fn, 'options.netnsPath', o.netnsPath);
  if (o.hostNetnsPath !== undefined) checkPath(fn, 'options.hostNetnsPath', o.hostNetnsPath);
  if (o.hostMac !== undefined && (typeof o.hostMac !== 'string' || !MAC.test(o.hostMac)))
    throw new TypeError(
      `${fn}: options.hostMac must be a MAC address like 'ee:ee:ee:ee:ee:ee', got ${JSON.stringify(o.hostMac)}`,
    );
}

function teardownTarget(
  fn: string,
  o: TeardownOptions,
  h: Handles,
): { nl: Netlink; name: string | number } | undefined {
  checkTeardownOptions(fn, o);
  if (o.netnsPath) {
    try {
      h.ns = openNetns(o.netnsPath);
    } catch (e) {
      // Gone (ENOENT) or already unmounted into a plain file (EINVAL): the kernel
      // removed the veth pair with the namespace, or will when its last user exits.
      // A host veth of the same name is then a newer sandbox's (the name is the
      // pod's): never fall back to deleting it by name.
      if (!NetlinkError.is(e, 'ENOENT') && !NetlinkError.is(e, 'EINVAL')) throw e;
      return undefined;
    }
  }
  if (h.ns) return { nl: (h.cont = netlink(h.ns)), name: o.ifname };
  if (o.keepHostEnd === true) return undefined;
  const nl = hostHandle(h, o.hostNetnsPath);
  if (o.hostMac === undefined) return { nl, name: o.hostIfname };
  // Ownership is judged on the link, not on a datastore record: a veth with our MAC.
  const l = nl.linkFind(o.hostIfname);
  if (l?.kind !== 'veth' || l.mac !== o.hostMac.toLowerCase()) return undefined;
  return { nl, name: l.index };
}

/** Deletes a link off the event loop; { removed: false } when it is already gone. */
export async function deleteLinkAsync(nl: Netlink, link: string | number): Promise<{ removed: boolean }> {
  try {
    await nl.linkDelAsync(link);
    return { removed: true };
  } catch (e) {
    return { removed: notThere(e) };
  }
}

/** false for "already gone" (ENODEV); any other failure is rethrown. */
export function notThere(e: unknown): false {
  if (NetlinkError.is(e, 'ENODEV')) return false;
  throw e;
}

/** Compares the kernel's state with the spec; returns one line per drift, [] when all is as set up. */
export function checkWorkload(spec: WorkloadSpec, expect: { containerMac: string }): string[] {
  const s = validateSpec('checkWorkload', spec);
  const drift: string[] = [];
  const h: Handles = {};
  try {
    try {
      h.ns = openNetns(s.netnsPath);
    } catch (e) {
      if (NetlinkError.is(e)) return [`container netns ${s.netnsPath} cannot be opened: ${e.code}`];
      throw e;
    }
    const host = hostHandle(h, s.hostNetnsPath);
    const cont = (h.cont = netlink(h.ns));
    const c = cont.linkFind(s.ifname);
    const hl = host.linkFind(s.hostIfname);
    if (!c) drift.push(`container interface ${s.ifname} is missing`);
    if (!hl) drift.push(`host veth ${s.hostIfname} is missing`);
    if (!c || !hl) return drift;
    const want = (what: string, got: unknown, exp: unknown) => {
      if (got !== exp) drift.push(`${what} is ${JSON.stringify(got)}, expected ${JSON.stringify(exp)}`);
    };
    want(`${s.ifname} kind`, c.kind, 'veth');
    want(`${s.ifname} MAC`, c.mac, expect.containerMac.toLowerCase());
    want(`${s.ifname} up`, c.up, true);
    want(`${s.hostIfname} MAC`, hl.mac, s.hostMac);
    want(`${s.hostIfname} up`, hl.up, true);
    if (c.parentIndex !== hl.index || hl.parentIndex !== c.index)
      drift.push(`${s.hostIfname} and ${s.ifname} are not the two ends of one veth pair`);
    if (s.mtu !== undefined) {
      want(`${s.ifname} MTU`, c.mtu, s.mtu);
      want(`${s.hostIfname} MTU`, hl.mtu, s.mtu);
    }
    want(`${s.ifname} rx queues`, c.numRxQueues, s.numQueues);
    want(`${s.ifname} tx queues`, c.numTxQueues, s.numQueues);

    const addrs = cont.addrList({ link: c.index });
    for (const a of s.parsed) {
      const got = addrs.find((x) => x.address === a.ip && x.prefixLen === a.prefixLen);
      if (!got) drift.push(`address ${a.cidr} is missing on ${s.ifname}`);
      else if (got.flags & (IFA_F_TENTATIVE | IFA_F_DADFAILED))
        drift.push(`address ${a.cidr} on ${s.ifname} is tentative or failed DAD`);
    }
    if (hasFamily(s, 4)) {
      const r4 = cont.routeList({ family: 4 });
      if (!r4.some((r) => r.dst === `${GATEWAY_V4}/32` && r.oif === c.index && r.scope === RT_SCOPE_LINK)) {
        drift.push(`container route ${GATEWAY_V4}/32 scope link dev ${s.ifname} is missing`);
      }
      if (!r4.some((r) => r.dst === '0.0.0.0/0' && r.gateway === GATEWAY_V4 && r.oif === c.index)) {
        drift.push(`container default route via ${GATEWAY_V4} dev ${s.ifname} is missing`);
      }
      const sys = (k: string, v: string) => want(`host sysctl ${k}`, host.sysctlGet(k), v);
      sys(`net.ipv4.conf.${s.hostIfname}.proxy_arp`, '1');
      sys(`net.ipv4.neigh.${s.hostIfname}.proxy_delay`, '0');
      sys(`net.ipv4.conf.${s.hostIfname}.forwarding`, '1');
      sys(`net.ipv4.conf.${s.hostIfname}.route_localnet`, '1');
    }
    if (hasFamily(s, 6)) {
      const gw = linkLocalFromMac(s.hostMac);
      if (!cont.routeList({ family: 6 }).some((r) => r.dst === '::/0' && r.gateway === gw && r.oif === c.index)) {
        drift.push(`container default route via ${gw} dev ${s.ifname} is missing`);
      }
      const sys = (k: string, v: string) => want(`host sysctl ${k}`, host.sysctlGet(k), v);
      sys(`net.ipv6.conf.${s.hostIfname}.proxy_ndp`, '1');
      sys(`net.ipv6.conf.${s.hostIfname}.forwarding`, '1');
    }
    for (const [k, v] of HOST_IPV6_HARDENING) {
      let got: string | undefined;
      try {
        got = host.sysctlGet(`net.ipv6.conf.${s.hostIfname}.${k}`);
      } catch (e) {
        if (!NetlinkError.is(e, 'ENOENT') || hasFamily(s, 6)) throw e;
      }
      if (got !== undefined) want(`host sysctl net.ipv6.conf.${s.hostIfname}.${k}`, got, String(v));
    }
    const fwd = s.allowIpForwarding ? '1' : '0';
    want('container sysctl net.ipv4.ip_forward', cont.sysctlGet('net.ipv4.ip_forward'), fwd);
    if (hasFamily(s, 6))
      want('container sysctl net.ipv6.conf.all.forwarding', cont.sysctlGet('net.ipv6.conf.all.forwarding'), fwd);

    const hostRoutes = host.routeList({ link: hl.index });
    for (const a of s.parsed) {
      const dst = `${a.ip}/${a.family === 4 ? 32 : 128}`;
      if (!hostRoutes.some((r) => r.dst === dst)) drift.push(`host route ${dst} dev ${s.hostIfname} is missing`);
    }
    return drift;
  } finally {
    closeAll(h);
  }
}
