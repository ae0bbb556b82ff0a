// STATUS (CNI 1.1): can this plugin service an ADD now? 50 when it cannot:
// datastore unreachable or not ready, or no pool with a free address.
import type { CniContext } from '../../cni/types.js';
import { isNetpluginIpam, type Netconf } from '../../config/index.js';
import { CniError, ErrorCodes } from '../../errors.js';
import { checkClusterReady, datastoreFor, identify } from './common.js';

export async function status(ctx: CniContext<Netconf>): Promise<void> {
  const { conf } = ctx;
  let ds;
  try {
    ds = await datastoreFor(conf);
    await checkClusterReady(ds);
  } catch (e) {
    throw new CniError(ErrorCodes.PluginNotAvailable, `the datastore cannot be used: ${(e as Error).message}`);
  }
  if (!isNetpluginIpam(conf.ipam)) return;
  const { Ipam } = await import('../../ipam/index.js');
  let usage;
  try {
    usage = await new Ipam(ds, { lockPath: null }).usage();
  } catch (e) {
    throw new CniError(ErrorCodes.PluginNotAvailable, `IPAM cannot be read: ${(e as Error).message}`);
  }
  const node = identify(conf, { containerId: 'status', ifname: 'eth0', args: {} }).node;
  const families: Array<4 | 6> = [];
  if (conf.ipam.assign_ipv4 === 'true') families.push(4);
  if (conf.ipam.assign_ipv6 === 'true') families.push(6);
  for (const f of families) {
    const usable = usage.filter((p) => p.family === f && !p.disabled);
    if (!usable.length) throw new CniError(ErrorCodes.PluginNotAvailable, `no enabled IPv${f} pool exists for node ${node}; create one with netpluginctl apply`);
    if (!usable.some((p) => p.free > 0n)) throw new CniError(ErrorCodes.PluginNotAvailable, `every IPv${f} pool is full (${usable.map((p) => p.name).join(', ')}); add a pool`);
  }
}
