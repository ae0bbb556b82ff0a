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
//   (docs/performance.md, "Conntrack on DEL").
import { readFileSync } from 'node:fs';
import { netlink, type Netlink } from '../native/index.js';

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
    log.warn('could not flush the conntrack entries of the released addresses; they expire on their own', { addrs, error: (e as Error)?.message ?? String(e) });
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

/** The agent's deferred flush: every address deferred within `delayMs` shares one dump. */
export function createConntrackFlusher(opts: { log: ConntrackLog; delayMs?: number; flush?: typeof flushConntrack }): ConntrackFlusher {
  const delayMs = opts.delayMs ?? 2;
  const flush = opts.flush ?? flushConntrack;
  const pending = new Map<string, Promise<void>>();
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
        try {
          flush([...b.addrs], opts.log);
        } catch (e) {
          // From a timer: a throw here would take the agent down.
          opts.log.warn('could not flush the conntrack entries of the released addresses; they expire on their own', { error: (e as Error)?.message ?? String(e) });
        } finally {
          for (const a of b.addrs) if (pending.get(a) === done) pending.delete(a);
          resolve();
        }
      },
    };
    const timer = setTimeout(b.run, delayMs);
    return b;
  };

  return {
    defer(addrs) {
      if (addrs.length === 0) return;
      batch ??= start();
      for (const a of addrs) {
        batch.addrs.add(a);
        pending.set(a, batch.done);
      }
    },
    async settled(addrs) {
      const waits = addrs.map((a) => pending.get(a.split('/')[0]!)).filter((p): p is Promise<void> => !!p);
      if (waits.length) await Promise.all(waits);
    },
    async close() {
      batch?.run();
    },
  };
}
