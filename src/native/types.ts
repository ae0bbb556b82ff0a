// The TypeScript face of the rtnetlink addon (native/*.cc). Everything is
// synchronous and cheap except link deletion (~20 ms in the kernel, which the
// agent runs on the libuv threadpool); the addon is context-aware, so it also
// loads in worker threads (the test runner's).

/** An open network namespace (an fd on /var/run/netns/x or /proc/<pid>/ns/net). */
export interface NetNS {
  readonly path: string;
  readonly fd: number;
  /** Idempotent. */
  close(): void;
}

export interface LinkInfo {
  index: number;
  name: string;
  /** e.g. 'veth', 'dummy', 'loopback' ('' when the kernel gives no IFLA_INFO_KIND) */
  kind: string;
  mtu: number;
  /** aa:bb:cc:dd:ee:ff, lower case; '' for links without one */
  mac: string;
  up: boolean;
  /** IFF_* flags */
  flags: number;
  operState: number;
  /** IFLA_GROUP: the link group (0, the default, for almost every link); always set by the addon */
  group?: number;
  numTxQueues?: number;
  numRxQueues?: number;
  /** veth peer's ifindex (IFLA_LINK) when the kernel reports it */
  parentIndex?: number;
  /** IFLA_LINK_NETNSID: the peer's netns id as seen from here, when it is elsewhere */
  linkNetnsId?: number;
}

export interface AddrInfo {
  index: number;
  family: 4 | 6;
  /** address/prefix, e.g. '10.0.0.5/32' or 'fd00::5/128' */
  cidr: string;
  address: string;
  prefixLen: number;
  scope: number;
  flags: number;
}

export type RouteScope = 'universe' | 'global' | 'site' | 'link' | 'host' | number;

export interface RouteSpec {
  /** 'default', '0.0.0.0/0', '::/0', '10.0.0.5/32', 'fe80::/64' */
  dst: string;
  gateway?: string;
  /** output device, name or index */
  dev?: string | number;
  scope?: RouteScope;
  onlink?: boolean;
  /** default main (254) */
  table?: number;
  metric?: number;
  /** RTPROT_* number or 'boot' | 'static' | 'kernel' (default 'boot') */
  protocol?: number | 'boot' | 'static' | 'kernel';
  /** preferred source */
  src?: string;
  /** default 'unicast'; 'blackhole'/'unreachable' take no gateway or dev */
  type?: 'unicast' | 'blackhole' | 'unreachable';
}

/** RTN_* route types as RouteInfo.type reports them. */
export const RouteType = { unicast: 1, blackhole: 6, unreachable: 7 } as const;

export interface RouteInfo {
  family: 4 | 6;
  dst: string; // CIDR; default routes as '0.0.0.0/0' / '::/0'
  gateway?: string;
  oif?: number;
  scope: number;
  table: number;
  metric?: number;
  protocol: number;
  type: number;
  flags: number;
  src?: string;
}

export interface VethOptions {
  /** host-side (local) name */
  name: string;
  peerName: string;
  /** Put the peer straight into this namespace in the same RTM_NEWLINK. */
  peerNetns?: NetNS;
  mtu?: number;
  mac?: string;
  peerMac?: string;
  numRxQueues?: number;
  numTxQueues?: number;
}

export interface LinkChanges {
  up?: boolean;
  mtu?: number;
  mac?: string;
  name?: string;
  netns?: NetNS;
  /** IFLA_GROUP */
  group?: number;
}

export interface NeighSpec {
  dev: string | number;
  dst: string;
  lladdr: string;
}

export interface NeighInfo {
  dst: string;
  lladdr?: string;
  /** NUD_* state bits */
  state: number;
  permanent: boolean;
}

/** A VXLAN device: learning off unless asked, port 4789 by default. */
export interface VxlanOptions {
  name: string;
  /** 1..16777215 */
  vni: number;
  /** UDP destination port, default 4789 */
  port?: number;
  /** local VTEP address; its family is the underlay's (IPv6 for a v6 underlay) */
  local?: string;
  /** underlay device (name or ifindex) */
  dev?: string | number;
  learning?: boolean;
  mtu?: number;
  mac?: string;
}

/** An ipip (IPv4-in-IPv4) device. */
export interface IpipOptions {
  name: string;
  local?: string;
  remote?: string;
  dev?: string | number;
  /** 0 (default) inherits the inner packet's TTL */
  ttl?: number;
  mtu?: number;
}

/** A VXLAN device's FDB entry: inner MAC -> remote VTEP (NTF_SELF, permanent). */
export interface FdbSpec {
  dev: string | number;
  lladdr: string;
  dst: string;
}

export interface FdbInfo {
  lladdr: string;
  dst?: string;
  state: number;
  flags: number;
}

/** A NETLINK_ROUTE socket created inside one namespace and used from the caller's thread. */
export interface Netlink {
  readonly netns: string; // path, or '' for the caller's own namespace
  close(): void;
  linkGet(link: string | number): LinkInfo; // NetlinkError ENODEV when missing
  linkFind(link: string | number): LinkInfo | undefined;
  linkList(): LinkInfo[];
  vethAdd(opts: VethOptions): void;
  linkSet(link: string | number, changes: LinkChanges): void;
  linkDel(link: string | number): void;
  /**
   * linkDel off the event loop: the RTM_DELLINK (a veth deletion sleeps ~20 ms in
   * the kernel) runs on a libuv threadpool thread over its own socket, created in
   * this handle's namespace, so concurrent calls on one handle are safe. Rejects
   * with the same NetlinkError linkDel throws (bad arguments: a rejected TypeError).
   * Concurrency is bounded by UV_THREADPOOL_SIZE (default 4).
   */
  linkDelAsync(link: string | number): Promise<void>;
  /**
   * One RTM_DELLINK for every link of this namespace in link group `group`
   * (1..2^32-1; 0 is every link's default group and is refused): the kernel
   * unregisters them (and each veth's peer) as one batch under one RCU grace
   * period. On the libuv threadpool, like linkDelAsync. No link in the group: NetlinkError ENODEV.
   */
  linkDelGroupAsync(group: number): Promise<void>;
  addrAdd(link: string | number, cidr: string, opts?: { nodad?: boolean; scope?: RouteScope }): void;
  addrDel(link: string | number, cidr: string): void;
  addrList(opts?: { link?: string | number; family?: 4 | 6 }): AddrInfo[];
  routeAdd(route: RouteSpec): void;
  routeReplace(route: RouteSpec): void;
  routeDel(route: RouteSpec): void;
  /** table defaults to main (254); cloned (cache) routes are left out; `protocol` keeps only routes tagged with it. */
  routeList(opts?: { family?: 4 | 6; table?: number; link?: string | number; protocol?: number }): RouteInfo[];
  neighSet(neigh: NeighSpec): void;
  neighList(opts: { dev: string | number; family?: 4 | 6 }): NeighInfo[];
  neighDel(neigh: { dev: string | number; dst: string }): void;
  /** NetlinkError EOPNOTSUPP (extack names the module) when the kernel has no vxlan support. */
  vxlanAdd(opts: VxlanOptions): void;
  /** NetlinkError EOPNOTSUPP (extack names the module) when the kernel has no ipip module. */
  ipipAdd(opts: IpipOptions): void;
  /** Created or replaced. */
  fdbSet(fdb: FdbSpec): void;
  fdbDel(fdb: FdbSpec): void;
  fdbList(opts: { dev: string | number }): FdbInfo[];
  /**
   * `net.*` keys only, in sysctl(8)'s dotted form: components of [A-Za-z0-9_-] separated by
   * '.', and a '/' inside a component stands for a '.' in it (interface 'eth0.100' ->
   * 'net.ipv4.conf.eth0/100.forwarding'). The slash-path form ('net/ipv4/...') is not accepted.
   * Read/written inside the handle's namespace. Trailing newline stripped.
   */
  sysctlGet(key: string): string;
  sysctlSet(key: string, value: string | number): void;
  /**
   * Deletes every conntrack entry (IPv4 and IPv6, all zones) of this handle's namespace whose
   * original or reply tuple has one of `addrs` as source or destination, over ctnetlink.
   * Returns how many were deleted (entries that expire meanwhile are not counted). A TypeError
   * names a bad address; a NetlinkError has op 'IPCTNL_MSG_CT_GET'/'IPCTNL_MSG_CT_DELETE' and the
   * addresses as subject (EPROTONOSUPPORT/EOPNOTSUPP: no nf_conntrack_netlink in the kernel).
   */
  conntrackFlush(addrs: string | string[]): number;
  /**
   * The entries conntrackFlush would delete, not deleted: each with its original tuple (protocol
   * number, addresses, ports where the protocol has them), its reply tuple, and the key
   * conntrackDelete takes. Errors as conntrackFlush's.
   */
  conntrackList(addrs: string | string[]): ConntrackEntry[];
  /**
   * Deletes the listed entries (their keys). An entry gone meanwhile, or replaced by a newer one
   * with the same tuple, is left alone and not counted. A TypeError names a key that is not one.
   */
  conntrackDelete(keys: Buffer[]): number;
  /** Every conntrack entry of this handle's namespace, with its accounting (when nf_conntrack_acct was on). */
  conntrackDump(): ConntrackEvent[];
}

/** Addresses, protocol and ports of a packet or of a connection's original direction. */
interface PacketTuple {
  family: 4 | 6;
  protocol: number;
  src: string;
  dst: string;
  /** Only for protocols with ports (TCP, UDP, UDP-Lite, SCTP). */
  sport?: number;
  dport?: number;
}

/** A connection's original and reply tuples, as the addon reports them (events, dumps, lists). */
interface ConntrackTuples extends PacketTuple {
  replySrc?: string;
  replyDst?: string;
  replySport?: number;
  replyDport?: number;
}

/** A ctnetlink event (a connection confirmed, or destroyed) or an entry of conntrackDump. */
export interface ConntrackEvent extends ConntrackTuples {
  type: 'new' | 'destroy' | 'dump';
  id?: number;
  mark?: number;
  /** Accounting of the original direction (from the initiator) and of the reply. */
  packetsOrig?: number;
  bytesOrig?: number;
  packetsReply?: number;
  bytesReply?: number;
  /** TCP_CONNTRACK_* (3 ESTABLISHED, 7 TIME_WAIT, 8 CLOSE, ...), TCP only. */
  tcpState?: number;
}

/** A packet an NFLOG rule sent: its prefix and its headers. */
export interface NflogPacket extends PacketTuple {
  prefix: string;
  /** The IP packet's length in bytes. */
  length: number;
  /** Input and output interface indexes (0: none). */
  indev: number;
  outdev: number;
}

export interface FlowReaderOptions {
  /** NFLOG group (nflog readers). */
  group?: number;
  /** Bytes of each packet copied (default 128: the IP and L4 headers). */
  copyRange?: number;
  /** The socket's receive buffer (default 4 MiB). */
  rcvbufBytes?: number;
  netns?: NetNS;
}

/** An open event reader; close() stops it (idempotent). */
export interface FlowReaderHandle {
  close(): void;
}

export interface ConntrackEntry extends ConntrackTuples {
  /** The kernel's id of the entry (a new entry with the same tuple has another). */
  id?: number;
  /** Opaque: what conntrackDelete takes. */
  key: Buffer;
}
