// The conntrack entries of a deleted pod's addresses. They must go before a
// new pod with one of those addresses can receive traffic: an entry left
// behind would let that pod inherit an established (allowed) state, past its
// own policy (docs/policy.md, Conntrack). Entries of the dead pod hurt nobody
// else: no route or link of the dead pod is left to carry their traffic.
//
// The flush is a ctnetlink dump, and a dump walks the kernel's whole conntrack
// hash table (shared by every namespace: 262144 buckets here, ~10-15 ms of
// kernel CPU) whatever the number of entries. Two ways round it:
// - a namespace with no entry at all (nf_conntrack_count, per namespace) has
//   nothing to flush: no dump;
// - the resident agent defers the flush off the DEL's request path and runs
//   one dump for every address deferred meanwhile; an ADD of the agent that
//   gets one of those addresses waits for that dump before its veth exists
//   (docs/performance.md, "Conntrack on DEL"). The addresses waiting are
//   written to a journal first, so an agent killed before the dump leaves
//   them for the next start, which flushes them before it serves a pod.
import { closeSync, constants, ftruncateSync, openSync, readFileSync, writeSync } from 'node:fs';
import { netlink, type Netlink } from '../native/index.js';
import type { ConntrackEntry } from '../native/types.js';
import { tryParseIP } from '../net/cidr.js';

export interface ConntrackLog {
  debug(msg: string, fields?: Record<string, unknown>): void;
  warn(msg: string, fields?: Record<string, unknown>): void;
}

/**
 * Entries in this process's network namespace (the count is per namespace);
 * 0 without the conntrack module (no file: no table, nothing to flush);
 * undefined when unreadable (then flush as if there were some).
 */
export function conntrackCount(): number | undefined {
  let text: string;
  try {
    text = readFileSync('/proc/sys/net/netfilter/nf_conntrack_count', 'latin1');
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === 'ENOENT' ? 0 : undefined;
  }
  const n = Number(text.trim());
  return Number.isInteger(n) && n >= 0 ? n : undefined;
}

/**
 * Deletes this namespace's conntrack entries naming the addresses (bare IPs).
 * Best effort: DEL must not fail for it (an entry left behind expires on its own timeout).
 */
export function flushConntrack(addrs: readonly string[], log: ConntrackLog): void {
  if (addrs.length === 0 || conntrackCount() === 0) return;
  let nl: Netlink | undefined;
  try {
    nl = netlink();
    const n = nl.conntrackFlush([...addrs]);
    log.debug('conntrack entries flushed', { addrs, deleted: n });
  } catch (e) {
    log.warn('could not flush the conntrack entries of the released addresses; they expire on their own', {
      addrs,
      error: (e as Error)?.message ?? String(e),
    });
  } finally {
    nl?.close();
  }
}

/** A conntrack entry's flow as the node's rules saw its first packet (src/model/policy-eval.ts Flow). */
export interface ConntrackFlow {
  src: string;
  /** After DNAT (a Service): the reply's source, the endpoint that answers. */
  dst: string;
  protocol: number;
  port?: number;
  sourcePort?: number;
  /** The node itself opened it (its source is one of the node's addresses): no rule saw it leave. */
  fromNode: boolean;
}

function flowOf(e: ConntrackEntry, local: ReadonlySet<string>): ConntrackFlow {
  const dnat = e.replySrc !== undefined && e.replySrc !== e.dst;
  const port = dnat ? e.replySport : e.dport;
  return {
    src: e.src,
    dst: dnat ? e.replySrc! : e.dst,
    protocol: e.protocol,
    ...(port !== undefined ? { port } : {}),
    ...(e.sport !== undefined ? { sourcePort: e.sport } : {}),
    fromNode: local.has(e.src),
  };
}

/**
 * Deletes this namespace's conntrack entries naming the addresses whose flow `denied` says the
 * rules now deny; the others are left untouched. Best effort as flushConntrack (a failure is
 * logged): returns how many entries were listed and deleted.
 */
export function cutConntrack(
  addrs: readonly string[],
  denied: (f: ConntrackFlow) => boolean,
  log: ConntrackLog,
): { listed: number; deleted: number } {
  if (addrs.length === 0 || conntrackCount() === 0) return { listed: 0, deleted: 0 };
  let nl: Netlink | undefined;
  try {
    nl = netlink();
    const entries = nl.conntrackList([...addrs]);
    if (entries.length === 0) return { listed: 0, deleted: 0 };
    const local = new Set(nl.addrList().map((a) => a.address));
    const keys = entries.filter((e) => denied(flowOf(e, local))).map((e) => e.key);
    const deleted = keys.length ? nl.conntrackDelete(keys) : 0;
    log.debug('conntrack entries of denied flows deleted', { addrs: addrs.length, listed: entries.length, deleted });
    return { listed: entries.length, deleted };
  } catch (e) {
    log.warn('could not delete the conntrack entries of flows a policy change denies; they expire on their own', {
      addrs,
      error: (e as Error)?.message ?? String(e),
    });
    return { listed: 0, deleted: 0 };
  } finally {
    nl?.close();
  }
}

export interface ConntrackFlusher {
  /** Queues the addresses for the next batched flush; returns at once. */
  defer(addrs: readonly string[]): void;
  /** Resolves once no flush of any of the addresses (bare or with a prefix) is pending. */
  settled(addrs: readonly string[]): Promise<void>;
  /** Runs what is pending now (agent shutdown). */
  close(): Promise<void>;
}

/**
 * The journal of deferred addresses: what an earlier agent left in it (it was
 * killed before its dump) is flushed now, synchronously, before this agent
 * serves any pod; then it is emptied and kept open for appends. Opened without
 * following a symlink, mode 0600 (it lives in the agent's own 0700 directory).
 */
function openJournal(path: string, flush: typeof flushConntrack, log: ConntrackLog): number | undefined {
  try {
    const fd = openSync(path, constants.O_RDWR | constants.O_CREAT | constants.O_APPEND | constants.O_NOFOLLOW, 0o600);
    const left = [
      ...new Set(
        readFileSync(fd, 'latin1')
          .split('\n')
          .filter((l) => tryParseIP(l) !== undefined),
      ),
    ];
    if (left.length) {
      log.warn(
        'flushing the conntrack entries of addresses an earlier agent released but did not flush (it was stopped ' +
          'first)',
        { addrs: left },
      );
      flush(left, log);
    }
    ftruncateSync(fd, 0);
    return fd;
  } catch (e) {
    log.warn(
      'conntrack journal unusable: an agent killed with flushes pending would leave their entries to expire on their ' +
        'own',
      { path, error: (e as Error)?.message ?? String(e) },
    );
    return undefined;
  }
}

/**
 * The agent's deferred flush: every address deferred within the delay shares
 * one dump. The delay is `delayMs`, or ten times what the last dump took when
 * that is longer (at most `maxDelayMs`): each dump walks the whole hash table
 * on the agent's thread (10-30 ms), and in a burst of DELs a fixed 2 ms window
 * gave about one dump per DEL, most of the agent's CPU per DEL. The spacing
 * keeps dumps under a tenth of the thread. Nobody waits for it: an ADD that
 * reuses a queued address runs the pending dump at once (settled()). With
 * `journal` (a file path), deferred addresses are appended to it before
 * defer() returns and it is emptied once nothing is pending.
 */
export function createConntrackFlusher(opts: {
  log: ConntrackLog;
  delayMs?: number;
  maxDelayMs?: number;
  flush?: typeof flushConntrack;
  journal?: string;
}): ConntrackFlusher {
  const delayMs = opts.delayMs ?? 2;
  const maxDelayMs = Math.max(delayMs, opts.maxDelayMs ?? 100);
  const flush = opts.flush ?? flushConntrack;
  let lastDumpMs = 0;
  const pending = new Map<string, Promise<void>>();
  let journal = opts.journal ? openJournal(opts.journal, flush, opts.log) : undefined;
  let batch: { addrs: Set<string>; done: Promise<void>; run: () => void } | undefined;

  const start = (): NonNullable<typeof batch> => {
    let resolve!: () => void;
    const done = new Promise<void>((r) => (resolve = r));
    const b = {
      addrs: new Set<string>(),
      done,
      run: () => {
        clearTimeout(timer);
        if (batch === b) batch = undefined;
        const t0 = performance.now();
        try {
          flush([...b.addrs], opts.log);
        } catch (e) {
          // From a timer: a throw here would take the agent down.
          opts.log.warn('could not flush the conntrack entries of the released addresses; they expire on their own', {
            error: (e as Error)?.message ?? String(e),
          });
        } finally {
          lastDumpMs = performance.now() - t0;
          for (const a of b.addrs) if (pending.get(a) === done) pending.delete(a);
          if (journal !== undefined && pending.size === 0) {
            try {
              ftruncateSync(journal, 0);
            } catch {
              // Left as is: the next start flushes those addresses once more (harmless).
            }
          }
          resolve();
        }
      },
    };
    const timer = setTimeout(b.run, Math.min(maxDelayMs, Math.max(delayMs, 10 * lastDumpMs)));
    return b;
  };

  return {
    defer(addrs) {
      if (addrs.length === 0) return;
      if (journal !== undefined) {
        try {
          writeSync(journal, `${addrs.join('\n')}\n`);
        } catch (e) {
          opts.log.warn('conntrack journal write failed; not journaling any more', {
            error: (e as Error)?.message ?? String(e),
          });
          closeSync(journal);
          journal = undefined;
        }
      }
      batch ??= start();
      for (const a of addrs) {
        batch.addrs.add(a);
        pending.set(a, batch.done);
      }
    },
    async settled(addrs) {
      const waits = addrs.map((a) => pending.get(a.split('/')[0]!)).filter((p): p is Promise<void> => !!p);
      // An address of the batch still waiting for its timer: its dump runs now, not at the timer.
      if (batch && waits.includes(batch.done)) batch.run();
      if (waits.length) await Promise.all(waits);
    },
    async close() {
      batch?.run();
      if (journal !== undefined) closeSync(journal);
      journal = undefined;
    },
  };
}
