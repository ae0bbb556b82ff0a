// Lazy loader and public face of the rtnetlink addon (native/*.cc). Nothing is
// loaded at import time: the first openNetns()/netlink() call resolves the
// binary through node-gyp-build (build/Release in development, prebuilds/ when
// installed), checks its ABI constant and hands it the NetlinkError class.
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type {
  ConntrackEvent,
  FlowReaderHandle,
  FlowReaderOptions,
  IpipOptions,
  Netlink,
  NetNS,
  NflogPacket,
  VxlanOptions,
} from './types.js';

export type * from './types.js';
export { RouteType } from './types.js';

/** The ABI the TS side was written against (native/bind/common.h kAbiVersion). */
export const NATIVE_ABI_VERSION = 9;

interface NetlinkErrorInit {
  /** errno name, e.g. 'EEXIST' */
  code: string;
  errno: number;
  /** 'RTM_NEWLINK', 'RTM_NEWROUTE', 'openNetns', 'setns', 'sysctlSet', ... */
  op: string;
  /** what the operation was about: ifname, route dst, sysctl key, netns path */
  subject: string;
  /** strerror text */
  detail?: string;
  /** the kernel's extended-ack message, when it gave one */
  extack?: string;
}

/** A kernel (or syscall) refusal; thrown by the addon itself. */
export class NetlinkError extends Error {
  override name = 'NetlinkError';
  readonly code: string;
  readonly errno: number;
  readonly op: string;
  readonly subject: string;
  readonly extack: string | undefined;
  constructor(init: NetlinkErrorInit) {
    const what = init.subject ? `${init.op} ${init.subject}` : init.op;
    super(`${what}: ${init.detail ?? init.code} (${init.code})${init.extack ? `: ${init.extack}` : ''}`);
    this.code = init.code;
    this.errno = init.errno;
    this.op = init.op;
    this.subject = init.subject;
    this.extack = init.extack;
  }
  static is(e: unknown, code?: string): e is NetlinkError {
    return e instanceof NetlinkError && (code === undefined || e.code === code);
  }
}

interface Addon {
  ABI_VERSION: number;
  openNetns(path: string): NetNS;
  netlink(ns?: NetNS): Netlink;
  setErrorClass(cls: typeof NetlinkError): void;
  peerCred(fd: number): PeerCred;
  /** flock(fd, LOCK_EX | LOCK_NB): true when taken, false when another open file holds it. */
  flockTry(fd: number): boolean;
  /**
   * flock(fd, LOCK_EX) on a thread of its own, bounded: true when taken, false when timed out (native/bind/flock.cc).
   */
  flockWait(fd: number, timeoutMs: number, subject: string): Promise<boolean>;
  tunnelMessage(kind: 'ipip' | 'vxlan', opts: IpipOptions | VxlanOptions): Buffer;
  nftRun(script: string, opts?: NftRawOptions): NftRawResult;
  nftRunAsync(script: string, opts?: NftRawOptions): Promise<NftRawResult>;
  flowReader(
    kind: 'nflog',
    opts: FlowReaderOptions,
    cb: (events: NflogPacket[], overruns: number, err?: Error) => void,
  ): FlowReaderHandle;
  flowReader(
    kind: 'conntrack',
    opts: FlowReaderOptions,
    cb: (events: ConntrackEvent[], overruns: number, err?: Error) => void,
  ): FlowReaderHandle;
}

/** Options of the addon's nftRun/nftRunAsync (src/native/nft.ts is the typed face). */
export interface NftRawOptions {
  json?: boolean;
  echo?: boolean;
  handles?: boolean;
  netns?: NetNS;
}

/** What libnftables answered; `missing` when the library could not be loaded. */
export interface NftRawResult {
  ok: boolean;
  missing: boolean;
  rc: number;
  output: string;
  error: string;
}

/** SO_PEERCRED of a connected unix socket. */
export interface PeerCred {
  pid: number;
  uid: number;
  gid: number;
}

let addon: Addon | undefined;

/** The package root: the nearest directory above this module holding package.json
 * (<root>/src/native when run from sources, <root>/dist for the bundles). */
export function packageRoot(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  for (;;) {
    if (existsSync(join(dir, 'package.json'))) return dir;
    const up = dirname(dir);
    if (up === dir)
      throw new Error(
        `netplugin: no package.json above ${dirname(fileURLToPath(import.meta.url))}; the native addon cannot be ` +
          `located`,
      );
    dir = up;
  }
}

/** The loaded addon (loading it on first use); for the sibling wrappers in src/native/. */
export function addonInstance(): Addon {
  return load();
}

function load(): Addon {
  if (addon) return addon;
  const root = packageRoot();
  const require = createRequire(import.meta.url);
  const gypBuild = require('node-gyp-build') as { (dir: string): unknown; resolve(dir: string): string };
  let file: string;
  try {
    file = gypBuild.resolve(root);
  } catch (e) {
    throw new Error(
      `netplugin: no native addon for ${process.platform}-${process.arch} under ${root} (build/Release or ` +
        `prebuilds/); ` +
        `run 'npm run build:native'. ${(e as Error).message.split('\n')[0]}`,
    );
  }
  const a = require(file) as Addon;
  if (a.ABI_VERSION !== NATIVE_ABI_VERSION) {
    throw new Error(
      `netplugin: native addon ${file} has ABI_VERSION ${String(a.ABI_VERSION)}, expected ${NATIVE_ABI_VERSION}: ` +
        `it is stale; rebuild it with 'npm run build:native' (or 'npm run prebuildify' for prebuilds/)`,
    );
  }
  a.setErrorClass(NetlinkError);
  addon = a;
  return a;
}

/** Opens a network namespace file (/var/run/netns/<name>, /proc/<pid>/ns/net) as a handle. */
export function openNetns(path: string): NetNS {
  return load().openNetns(path);
}

/** A NETLINK_ROUTE socket created inside `ns` (or the caller's namespace) and used from here. */
export function netlink(ns?: NetNS): Netlink {
  return ns === undefined ? load().netlink() : load().netlink(ns);
}

/**
 * Reads the packets of an NFLOG group (kind 'nflog') or the conntrack NEW/DESTROY events (kind
 * 'conntrack') of a namespace, as they come, on this thread's event loop. `cb` gets each batch,
 * the number of overruns (events the kernel dropped: the socket was full) and, last, an error
 * that ended the reader.
 */
export function flowReader(
  kind: 'nflog',
  opts: FlowReaderOptions,
  cb: (events: NflogPacket[], overruns: number, err?: Error) => void,
): FlowReaderHandle;
export function flowReader(
  kind: 'conntrack',
  opts: FlowReaderOptions,
  cb: (events: ConntrackEvent[], overruns: number, err?: Error) => void,
): FlowReaderHandle;
export function flowReader(
  kind: 'nflog' | 'conntrack',
  opts: FlowReaderOptions,
  // biome-ignore lint/suspicious/noExplicitAny: the events are typed by the caller per reader kind
  cb: (events: any[], overruns: number, err?: Error) => void,
): FlowReaderHandle {
  return kind === 'nflog' ? load().flowReader('nflog', opts, cb) : load().flowReader('conntrack', opts, cb);
}

/** The credentials of the process at the other end of a connected unix socket fd. */
export function peerCred(fd: number): PeerCred {
  return load().peerCred(fd);
}

/**
 * The RTM_NEWLINK message ipipAdd/vxlanAdd would send for these options, built
 * without talking to the kernel (options.dev must then be an ifindex).
 */
export function tunnelMessage(kind: 'ipip', opts: IpipOptions): Buffer;
export function tunnelMessage(kind: 'vxlan', opts: VxlanOptions): Buffer;
export function tunnelMessage(kind: 'ipip' | 'vxlan', opts: IpipOptions | VxlanOptions): Buffer {
  return load().tunnelMessage(kind, opts);
}
