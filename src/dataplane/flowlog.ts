// The kernel's side of flow logs, through the addon: the NFLOG group the
// policy table's tagged rules log to (nfnetlink_log), the conntrack events of
// the node's namespace (ctnetlink NEW and DESTROY) and a dump of its entries
// with their accounting. Conntrack accounting (packets and bytes per entry) is
// a per-namespace sysctl that only applies to entries created after it is on,
// so the agent turns it on before it programs the table.
import { conntrackCount } from './conntrack.js';
import { applySysctls, type SysctlIO } from './sysctl.js';
import { flowReader, netlink } from '../native/index.js';
import type { ConntrackEvent, FlowReaderHandle, NflogPacket } from '../native/types.js';

export type { ConntrackEvent, NflogPacket };

const CONNTRACK_ACCT_SYSCTL = 'net.netfilter.nf_conntrack_acct';

/** Turns conntrack accounting on in this namespace; returns whether it had to. */
export function enableConntrackAccounting(io?: SysctlIO): boolean {
  return applySysctls({ [CONNTRACK_ACCT_SYSCTL]: '1' }, io).length > 0;
}

interface FlowEventsOptions {
  /** The NFLOG group of the tagged rules. */
  group: number;
  onNflog(packets: NflogPacket[]): void;
  onConntrack(events: ConntrackEvent[]): void;
  /** Events the kernel dropped because a socket was full (counted per kind). */
  onOverrun?(kind: 'nflog' | 'conntrack', n: number): void;
  /** A reader ended on an error (it is closed). */
  onError?(kind: 'nflog' | 'conntrack', e: Error): void;
}

interface FlowEvents {
  close(): void;
}

/** Subscribes to the NFLOG group and the conntrack events of this namespace, on the event loop. */
export function openFlowEvents(o: FlowEventsOptions): FlowEvents {
  const readers: FlowReaderHandle[] = [];
  const done = (kind: 'nflog' | 'conntrack', overruns: number, err?: Error) => {
    if (overruns) o.onOverrun?.(kind, overruns);
    if (err) o.onError?.(kind, err);
  };
  try {
    readers.push(
      flowReader('nflog', { group: o.group }, (pk, overruns, err) => {
        if (pk.length) o.onNflog(pk);
        done('nflog', overruns, err);
      }),
    );
    readers.push(
      flowReader('conntrack', {}, (ev, overruns, err) => {
        if (ev.length) o.onConntrack(ev);
        done('conntrack', overruns, err);
      }),
    );
  } catch (e) {
    for (const r of readers) r.close();
    throw e;
  }
  return { close: () => readers.forEach((r) => r.close()) };
}

/** Every conntrack entry of this namespace with its counters (none: no dump, an empty list). */
export function conntrackSnapshot(): ConntrackEvent[] {
  if (conntrackCount() === 0) return [];
  const nl = netlink();
  try {
    return nl.conntrackDump();
  } finally {
    nl.close();
  }
}
