// STATUS (CNI 1.1): can this plugin service an ADD now? 50 when it cannot:
// datastore unreachable or not ready, or no pool with a free address.
import { isNetpluginIpam } from '../../config/index.js';
import { CniError, ErrorCodes } from '../../errors.js';
import { createIpam } from '../../ipam/index.js';
import { checkClusterReady, identify, type PluginContext } from './common.js';

export async function status(ctx: PluginContext): Promise<void> {
  const { conf } = ctx;
  let ds;
  try {
    ds = await ctx.runtime.datastore(conf);
    await checkClusterReady(ds);
  } catch (e) {
    throw new CniError(ErrorCodes.PluginNotAvailable, `the datastore cannot be used: ${(e as Error).message}`);
  }
  if (!isNetpluginIpam(conf.ipam)) return;
  const node = identify(conf, { containerId: 'status', ifname: 'eth0', args: {} }).node;
  const families = ([4, 6] as const).filter(
    (f) => (f === 4 ? conf.ipam.assign_ipv4 : conf.ipam.assign_ipv6) === 'true',
  );
  let problem: string | undefined;
  try {
    // The same pool choice as an ADD (nodeSelector, ipv4_pools/ipv6_pools).
    // Reads only: no lock.
    problem = await createIpam(ds, { lock: 'none' }).readiness({
      node,
      families: [...families],
      ipv4Pools: conf.ipam.ipv4_pools,
      ipv6Pools: conf.ipam.ipv6_pools,
    });
  } catch (e) {
    throw new CniError(ErrorCodes.PluginNotAvailable, `IPAM cannot be read: ${(e as Error).message}`);
  }
  if (problem)
    throw new CniError(
      ErrorCodes.PluginNotAvailable,
      `${problem}; new pods cannot get addresses until a pool is added or addresses are freed`,
    );
}
