// What marks a pod interface as programmed in the agent's policy table is its
// name in @wl-known: traffic of a pod interface (by prefix) whose name is not
// there is dropped. The name depends only on the pod's namespace and name, so a
// pod re-created under the same name would inherit the old pod's entry. The
// plugin marks the name in @wl-stale when it creates (ADD) or removes (DEL) the
// veth (the agent's ADD only when its table may hold the name: agent/policy/known.ts),
// and traffic of a marked interface is dropped; the agent unmarks it once
// it programmed the endpoint now behind that name (its identity: container ID
// and revision). Marking is an element add (about a millisecond); taking the
// name out of @wl-known instead would be a delete, which costs a kernel grace
// period (15-20 ms here) on every ADD. Only when policy is on; a node without
// the table is left alone.
import { NftError, nftRunAsync } from '../../native/nft.js';
import { NftModelError } from './model.js';
import { elementCommands, tableRef } from './render.js';

/** The agent's policy table (family inet). */
export const DEFAULT_POLICY_TABLE = 'netplugin';

/**
 * The policy table's name: NETPLUGIN_POLICY_TABLE, only where several agents
 * share one network namespace (the test suites run side by side).
 */
export function policyTable(env: NodeJS.ProcessEnv = process.env): string {
  const t = env['NETPLUGIN_POLICY_TABLE'] || DEFAULT_POLICY_TABLE;
  if (!/^[a-z][a-z0-9-]{0,30}$/.test(t)) {
    throw new NftModelError(`NETPLUGIN_POLICY_TABLE=${t} is not a table name (lower-case letters, digits, '-')`);
  }
  return t;
}

/**
 * Marks `hostIfname` stale: the interface is isolated until the agent
 * programs the endpoint behind it. 'no-table' when the node has no policy
 * table (nothing to do).
 *
 * In the agent, ADDs and DELs arriving together share one nft run: each run
 * costs its fixed setup (a libnftables context, its cache of the table) on the
 * agent's thread whatever the number of names, and a burst of 110 pods paid it
 * per pod. A call joins the batch that has not started yet (one per table) and
 * resolves when that batch's run finished; a batch that fails for another
 * reason than a missing table is retried name by name, so one name's error
 * stays its own. The per-exec plugin makes one call: a batch of one.
 */
export function markStale(hostIfname: string, table = policyTable()): Promise<'forgotten' | 'no-table'> {
  let b = waiting.get(table);
  if (!b) {
    b = { names: new Set(), done: undefined as unknown as Promise<Map<string, Outcome>> };
    const batch = b;
    waiting.set(table, batch);
    // Starts after the run in flight for this table (if any), so the names of the requests meanwhile join it.
    batch.done = (running.get(table) ?? Promise.resolve()).then(() => {
      if (waiting.get(table) === batch) waiting.delete(table);
      return runBatch(table, [...batch.names]);
    });
    const settled = batch.done.then(
      () => undefined,
      () => undefined,
    );
    running.set(table, settled);
    void settled.then(() => running.get(table) === settled && running.delete(table));
  }
  b.names.add(hostIfname);
  return b.done.then((r) => {
    const o = r.get(hostIfname)!;
    if (o instanceof Error) throw o;
    return o;
  });
}

type Outcome = 'forgotten' | 'no-table' | Error;
const waiting = new Map<string, { names: Set<string>; done: Promise<Map<string, Outcome>> }>();
const running = new Map<string, Promise<void>>();

async function runBatch(table: string, names: string[]): Promise<Map<string, Outcome>> {
  const out = new Map<string, Outcome>();
  const one = await markStaleNow(names, table).catch((e: Error) => e);
  if (!(one instanceof Error) || names.length === 1) {
    for (const n of names) out.set(n, one);
    return out;
  }
  for (const n of names) out.set(n, await markStaleNow([n], table).catch((e: Error) => e));
  return out;
}

async function markStaleNow(names: string[], table: string): Promise<'forgotten' | 'no-table'> {
  const script = elementCommands(
    tableRef(table),
    'add',
    'wl-stale',
    ['ifname'],
    names.map((n) => [n]),
  ).join('\n');
  try {
    await nftRunAsync(script + '\n');
    return 'forgotten';
  } catch (e) {
    // No table (policy never started on this node) or no libnftables: nothing marks the name.
    if (e instanceof NftError && (e.missing || /No such file or directory/.test(e.detail))) return 'no-table';
    throw e;
  }
}
