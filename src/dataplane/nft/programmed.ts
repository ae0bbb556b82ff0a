// What marks a pod interface as programmed in the agent's policy table is its
// name in @wl-known: traffic of a pod interface (by prefix) whose name is not
// there is dropped. The name depends only on the pod's namespace and name, so a
// pod re-created under the same name would inherit the old pod's entry. The
// plugin marks the name in @wl-stale when it creates (ADD) or removes (DEL) the
// veth, and traffic of a marked interface is dropped; the agent unmarks it once
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
 */
export async function markStale(hostIfname: string, table = policyTable()): Promise<'forgotten' | 'no-table'> {
  const script = elementCommands(tableRef(table), 'add', 'wl-stale', ['ifname'], [[hostIfname]]).join('\n');
  try {
    await nftRunAsync(script + '\n');
    return 'forgotten';
  } catch (e) {
    // No table (policy never started on this node) or no libnftables: nothing marks the name.
    if (e instanceof NftError && (e.missing || /No such file or directory/.test(e.detail))) return 'no-table';
    throw e;
  }
}
