// The `netplugin` CNI plugin's handlers. Heavy modules (datastore clients,
// IPAM, the addon) load inside the handlers, only for the commands that need them.
import { parseNetconf, type Netconf } from '../../config/netconf.js';
import type { CniHandlers } from '../../cni/types.js';
import { identify, type PluginContext } from './common.js';
import type { PluginRuntime } from './runtime.js';
import { add } from './add.js';
import { del } from './del.js';
import { check } from './check.js';
import { status } from './status.js';
import { gc } from './gc.js';
import { mark } from '../../observe/timeline.js';

/**
 * ADD, DEL and CHECK of one host veth name run one at a time on the node,
 * across processes (per-exec and the agent alike). The name is the pod's, so
 * all sandboxes of a pod share it: an old sandbox's DEL overlapping a new
 * sandbox's ADD deleted the new veth right after its ADD succeeded.
 */
async function oneAtATime<T>(ctx: PluginContext, fn: (ctx: PluginContext) => Promise<T>): Promise<T> {
  const { hostIfname } = identify(ctx.conf, ctx);
  // Lazy: STATUS, GC and VERSION take no veth lock; only ADD, DEL and CHECK load the lock code.
  const { withVethLock } = await import('../node-lock.js');
  return withVethLock(ctx, hostIfname, () => {
    mark('pod lock held');
    return fn(ctx);
  });
}

export const handlers: CniHandlers<Netconf, PluginRuntime> = {
  parse: (raw) => parseNetconf(raw, { pluginType: 'netplugin' }),
  add: (ctx) => oneAtATime(ctx, add),
  del: (ctx) => oneAtATime(ctx, del),
  check: (ctx) => oneAtATime(ctx, check),
  status,
  gc,
};
