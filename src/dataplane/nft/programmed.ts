// What marks a pod interface as programmed in the agent's policy table is its
// name in @wl-known: traffic of a pod interface (by prefix) whose name is not
// there is dropped. The name depends only on the pod's namespace and name, so a
// pod re-created under the same name would inherit the old pod's entry. The
// plugin takes the name out when it creates (ADD) or removes (DEL) the veth;
// the agent puts it back once it programmed the endpoint now behind that name
// (its identity: container ID and revision). One small nft transaction, only
// when policy is on; a node without the table is left alone.
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
  if (!/^[a-z][a-z0-9-]{0,30}$/.test(t)) throw new NftModelError(`NETPLUGIN_POLICY_TABLE=${t} is not a table name (lower-case letters, digits, '-')`);
  return t;
}

/**
 * Takes `hostIfname` out of @wl-known: the interface is isolated until the
 * agent programs the endpoint behind it. 'no-table' when the node has no
 * policy table (nothing to do). An absent name is fine: it is added first,
 * then deleted, in one transaction.
 */
export async function forgetProgrammed(hostIfname: string, table = policyTable()): Promise<'forgotten' | 'no-table'> {
  const T = tableRef(table);
  const script = [...elementCommands(T, 'add', 'wl-known', ['ifname'], [[hostIfname]]), ...elementCommands(T, 'delete', 'wl-known', ['ifname'], [[hostIfname]])].join('\n');
  const { nftRunAsync, NftError } = await import('../../native/nft.js');
  try {
    await nftRunAsync(script + '\n');
    return 'forgotten';
  } catch (e) {
    // No table (policy never started on this node) or no libnftables: nothing marks the name.
    if (e instanceof NftError && (e.missing || /No such file or directory/.test(e.detail))) return 'no-table';
    throw e;
  }
}
