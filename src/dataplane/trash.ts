// Deferred veth deletion. Deleting a veth sleeps in the kernel for an RCU
// grace period (~20 ms), and one RTM_DELLINK per pod pays it once per pod. A
// DEL instead "trashes" the pod's host veth: down (the kernel then drops every
// route through it, IPv4 and IPv6, so nothing can send the pod's addresses
// there), renamed to a name no pod can derive (so the pod's host veth name is
// free at once for its next sandbox) and moved into a link group reserved for
// netplugin. One RTM_DELLINK naming the group (IFLA_GROUP) then deletes every
// trashed veth and its container end as one batch under one grace period.
// What a crash leaves in the group is deleted by the next agent start and by
// CNI GC (purgeTrash).
import { NetlinkError, netlink, openNetns, type Netlink, type NetNS } from '../native/index.js';
import type { TeardownOptions } from './spec.js';
import { checkTeardownOptions, deleteLinkAsync, notThere, teardownWorkloadAsync } from './workload.js';

/** The link group trashed veths wait in ('npt'). Reserved for netplugin on a node. */
export const TRASH_GROUP = 0x6e7074;

/**
 * Trashed names: `npx` + the ifindex in hex, at most 11 characters. A derived
 * host veth name is a 1-4 character prefix + 11 hex characters (12 or more),
 * so a trashed name never equals a name a pod can get.
 */
const TRASH_NAME = /^npx[0-9a-f]{1,8}$/;
function trashName(index: number): string {
  return `npx${index.toString(16)}`;
}

function open(hostNetnsPath: string | undefined): { nl: Netlink; ns?: NetNS; close(): void } {
  const ns = hostNetnsPath ? openNetns(hostNetnsPath) : undefined;
  try {
    const nl = netlink(ns);
    return { nl, ...(ns ? { ns } : {}), close: () => (nl.close(), ns?.close()) };
  } catch (e) {
    ns?.close();
    throw e;
  }
}

/**
 * The pair a teardown would remove, when it can be trashed: with the pod's
 * netns, the container end `ifname` and its peer; without, the host link named
 * hostIfname. Either way the host end must be ours on the link itself
 * (docs/security.md): a veth with our MAC and the pod's derived name (and, with
 * the netns, really the container end's peer). undefined: not provably ours, or
 * nothing there; the caller then takes the direct path, which makes the same checks.
 * `cont` (the container end's handle) is the caller's to close.
 */
function pairToTrash(
  o: TeardownOptions,
  host: Netlink,
): { hostIndex: number; cont?: { nl: Netlink; index: number } } | undefined {
  if (o.hostMac === undefined) return undefined;
  let cont: { nl: Netlink; index: number; peer: number } | undefined;
  if (o.netnsPath) {
    let ns: NetNS;
    try {
      ns = openNetns(o.netnsPath);
    } catch {
      return undefined;
    }
    let nl: Netlink;
    try {
      nl = netlink(ns);
    } finally {
      ns.close();
    }
    const c = nl.linkFind(o.ifname);
    if (c?.kind !== 'veth' || c.parentIndex === undefined) {
      nl.close();
      return undefined;
    }
    cont = { nl, index: c.index, peer: c.parentIndex };
  } else if (o.keepHostEnd === true) {
    return undefined;
  }
  const l = host.linkFind(o.hostIfname);
  const ours =
    !!l &&
    l.kind === 'veth' &&
    l.mac === o.hostMac.toLowerCase() &&
    (!cont || (l.index === cont.peer && l.parentIndex === cont.index));
  if (!ours) {
    cont?.nl.close();
    return undefined;
  }
  return { hostIndex: l!.index, ...(cont ? { cont: { nl: cont.nl, index: cont.index } } : {}) };
}

interface TrashOptions {
  hostNetnsPath?: string;
  group?: number;
  /** How long trashed veths gather before one group deletion (default 5 ms). */
  delayMs?: number;
  log?: { info(msg: string, f?: Record<string, unknown>): void; error(msg: string, f?: Record<string, unknown>): void };
}

export interface Trash {
  /** teardownWorkloadAsync's contract, without waiting for the kernel's deletion. */
  teardown(o: TeardownOptions): Promise<{ removed: boolean }>;
  /** Deletes what is in the group now (a crash's leftovers); see purgeTrash. */
  purge(hostMac: string): Promise<number>;
  /** Trashed and not yet deleted. */
  pending(): number;
  /** Waits for the deletion of everything trashed so far; stops the timer. */
  close(): Promise<void>;
}

export function createTrash(opts: TrashOptions = {}): Trash {
  const group = opts.group ?? TRASH_GROUP;
  const delayMs = opts.delayMs ?? 5;
  let pending = 0;
  let timer: NodeJS.Timeout | undefined;
  let running: Promise<void> | undefined;
  let failures = 0;
  let lastMac: string | undefined;

  const schedule = (ms: number) => {
    if (timer || running) return;
    timer = setTimeout(() => {
      timer = undefined;
      running = flush().finally(() => {
        running = undefined;
        if (pending > 0) schedule(failures ? Math.min(1000, delayMs * 2 ** failures) : delayMs);
      });
    }, ms);
  };

  const flush = async () => {
    const n = pending;
    if (n === 0) return;
    const h = open(opts.hostNetnsPath);
    try {
      // Everything in the group when the kernel takes the request goes; what is
      // trashed meanwhile lands either in this batch or in the next one.
      // ENODEV: the group is empty (the pairs went with their namespaces).
      await h.nl.linkDelGroupAsync(group).catch(notThere);
      pending = Math.max(0, pending - n);
      failures = 0;
    } catch (e) {
      failures++;
      opts.log?.error('deleting the trashed veths failed; retrying', { group, error: (e as Error).message });
      // A link without a delete operation (a physical NIC) put in the group makes
      // every group deletion fail (EOPNOTSUPP): after a few tries, ours go one by one.
      if (failures >= 3 && lastMac) {
        try {
          await purgeTrash({
            hostMac: lastMac,
            group,
            ...(opts.hostNetnsPath ? { hostNetnsPath: opts.hostNetnsPath } : {}),
            oneByOne: true,
          });
          pending = Math.max(0, pending - n);
          failures = 0;
        } catch (e2) {
          opts.log?.error('deleting the trashed veths one by one failed too', { group, error: (e2 as Error).message });
        }
      }
    } finally {
      h.close();
    }
  };

  return {
    async teardown(o) {
      checkTeardownOptions('trash.teardown', o);
      const h = open(o.hostNetnsPath ?? opts.hostNetnsPath);
      let index: number | undefined;
      let cont: { nl: Netlink; index: number } | undefined;
      try {
        const pair = pairToTrash(o, h.nl);
        cont = pair?.cont;
        if (pair) {
          // Down first: the kernel refuses to rename a link that is up (EBUSY).
          // The container end too: the runtime may ADD the same interface name
          // into the same namespace right after this DEL.
          if (cont) {
            cont.nl.linkSet(cont.index, { up: false });
            cont.nl.linkSet(cont.index, { name: trashName(cont.index) });
          }
          h.nl.linkSet(pair.hostIndex, { up: false });
          h.nl.linkSet(pair.hostIndex, { name: trashName(pair.hostIndex), group });
          index = pair.hostIndex;
        }
      } catch (e) {
        // Gone meanwhile (its namespace went): nothing left to trash.
        if (NetlinkError.is(e, 'ENODEV')) return { removed: false };
        index = undefined;
        opts.log?.error('trashing a veth failed; deleting it directly', {
          hostIfname: o.hostIfname,
          error: (e as Error).message,
        });
        // The container end may be renamed already: delete the pair by its index.
        if (cont) return await deleteLinkAsync(cont.nl, cont.index);
      } finally {
        cont?.nl.close();
        h.close();
      }
      if (index === undefined) return teardownWorkloadAsync(o);
      lastMac = o.hostMac;
      pending++;
      schedule(delayMs);
      return { removed: true };
    },
    async purge(hostMac) {
      const n = await purgeTrash({
        hostMac,
        group,
        ...(opts.hostNetnsPath ? { hostNetnsPath: opts.hostNetnsPath } : {}),
      });
      if (n) opts.log?.info('deleted veths an earlier agent left in the trash group', { count: n, group });
      return n;
    },
    pending: () => pending,
    async close() {
      if (timer) {
        clearTimeout(timer);
        timer = undefined;
      }
      await running;
      if (pending > 0) await flush();
    },
  };
}

/**
 * Deletes the trashed veths a crashed agent left behind: the links of the
 * trash group that are ours (a veth with our MAC and a trashed name). All of
 * them at once with a group deletion when nothing else is in the group; one
 * by one otherwise, leaving a link that is not ours alone. Returns how many.
 */
export async function purgeTrash(o: {
  hostMac: string;
  hostNetnsPath?: string;
  group?: number;
  oneByOne?: boolean;
}): Promise<number> {
  const group = o.group ?? TRASH_GROUP;
  const h = open(o.hostNetnsPath);
  try {
    const inGroup = h.nl.linkList().filter((l) => l.group === group);
    const ours = inGroup.filter(
      (l) => l.kind === 'veth' && l.mac === o.hostMac.toLowerCase() && TRASH_NAME.test(l.name),
    );
    if (ours.length === 0) return 0;
    if (ours.length === inGroup.length && !o.oneByOne) {
      await h.nl.linkDelGroupAsync(group).catch(notThere);
    } else {
      for (const l of ours) await h.nl.linkDelAsync(l.index).catch(notThere);
    }
    return ours.length;
  } finally {
    h.close();
  }
}
