// netplugin-ipam: the standard CNI IPAM plugin over the block allocator
// (src/ipam). Run by a runtime or by another plugin as delegated IPAM; the
// main plugin calls src/ipam in-process instead.
import { CniError, DatastoreError, ErrorCodes } from '../../errors.js';
import { parseNetconf, type Netconf, type NetpluginIpam } from '../../config/netconf.js';
import { resolveNodename } from '../../config/nodename.js';
import { validAttachments } from '../../cni/dispatch.js';
import type { CniContext, CniHandlers, CniResult } from '../../cni/types.js';
import type { Datastore } from '../../datastore/types.js';
import { createIpam, handleIDFor, parseHandleID, type Ipam } from '../../ipam/index.js';
import { formatIP, tryParseIP } from '../../net/cidr.js';
import type { PluginRuntime } from '../main/runtime.js';
import { nodeIpamLock } from '../node-lock.js';

type Ctx = CniContext<Netconf, PluginRuntime>;

function ipamConf(conf: Netconf): NetpluginIpam {
  return conf.ipam as NetpluginIpam;
}

/** One handle per attachment (format and comparison: ipam/handle.ts). */
export function attachmentHandle(conf: Netconf, containerId: string): string {
  return handleIDFor(conf.name, containerId);
}

async function withIpam<T>(ctx: Ctx, fn: (ipam: Ipam, ds: Datastore) => Promise<T>): Promise<T> {
  // The runtime's datastore: loads etcd3 or the Kubernetes client, only the
  // one the netconf names; the agent keeps it open across requests.
  const ds = await ctx.runtime.datastore(ctx.conf);
  // Marks the end of start-up cost (module and client loading) in debug logs.
  ctx.log.debug('netplugin-ipam: datastore open', { type: ds.type });
  // The runtime's shared IPAM state (what one of the agent's instances learns
  // of full blocks, the others use) and its lock-takeover hook.
  const { shared, onLockTakeover } = ctx.runtime.ipam;
  return fn(createIpam(ds, { lock: nodeIpamLock(ctx, onLockTakeover), log: ctx.log, shared }), ds);
}

function requestedIPs(ctx: Ctx): string[] {
  const raw = ctx.args.IP;
  if (!raw) return [];
  return raw
    .split(',')
    .map((s) => s.trim())
    .filter((s) => s !== '');
}

async function add(ctx: Ctx): Promise<CniResult> {
  const conf = ctx.conf;
  const ic = ipamConf(conf);
  const node = resolveNodename(conf);
  const attrs: Record<string, string> = { containerID: ctx.containerId };
  if (ctx.args.K8S_POD_NAMESPACE) attrs['namespace'] = ctx.args.K8S_POD_NAMESPACE;
  if (ctx.args.K8S_POD_NAME) attrs['pod'] = ctx.args.K8S_POD_NAME;
  if (ctx.args.K8S_POD_UID) attrs['podUID'] = ctx.args.K8S_POD_UID;
  const assigned = await withIpam(ctx, (ipam) =>
    ipam.assign({
      handleID: attachmentHandle(conf, ctx.containerId),
      node,
      attrs,
      assignIPv4: ic.assign_ipv4 === 'true',
      assignIPv6: ic.assign_ipv6 === 'true',
      ipv4Pools: ic.ipv4_pools,
      ipv6Pools: ic.assign_ipv6 === 'true' ? ic.ipv6_pools : undefined,
      requestedIPs: requestedIPs(ctx),
      fields: { ipv4Pools: 'ipam.ipv4_pools', ipv6Pools: 'ipam.ipv6_pools', requestedIPs: 'CNI_ARGS IP' },
    }),
  );
  ctx.log.info('netplugin-ipam: assigned', { node, ips: assigned.map((a) => a.address) });
  ctx.runtime.ipam.observer?.assigned(assigned.filter((a) => !a.held).length);
  const families = [...new Set(assigned.map((a) => a.family))].sort();
  return {
    // No `interface`: an IPAM plugin does not know the interfaces its caller creates.
    ips: assigned.map((a) => ({ address: a.address })),
    routes: families.map((f) => ({ dst: f === 4 ? '0.0.0.0/0' : '::/0' })),
  };
}

async function del(ctx: Ctx): Promise<void> {
  const released = await withIpam(ctx, (ipam) => ipam.releaseByHandle(attachmentHandle(ctx.conf, ctx.containerId)));
  ctx.log.info('netplugin-ipam: released', { ips: released });
  ctx.runtime.ipam.observer?.released(released.length);
}

async function check(ctx: Ctx): Promise<void> {
  const handleID = attachmentHandle(ctx.conf, ctx.containerId);
  const held = new Set(await withIpam(ctx, (ipam) => ipam.handleAddresses(handleID)));
  if (!held.size)
    throw new CniError(
      ErrorCodes.CheckFailed,
      `no addresses are allocated to handle ${handleID}; the container's IPAM state is gone: recreate it`,
    );
  for (const ipc of ctx.prevResult?.ips ?? []) {
    const ip = tryParseIP(ipc.address.split('/')[0] ?? '');
    const text = ip ? formatIP(ip) : ipc.address;
    if (!held.has(text)) {
      throw new CniError(
        ErrorCodes.CheckFailed,
        `prevResult address ${ipc.address} is not allocated to handle ${handleID} (it holds ` +
          `${[...held].join(', ')}); recreate the container`,
      );
    }
  }
}

async function gc(ctx: Ctx): Promise<void> {
  // Container IDs are case-sensitive: `CAFE01` being valid says nothing about `cafe01`.
  const valid = new Set(validAttachments(ctx.rawConf).map((a) => a.containerID));
  await withIpam(ctx, async (ipam) => {
    const handles = await ipam.listHandles({ network: ctx.conf.name });
    for (const h of handles) {
      const cid = parseHandleID(h.handleID)!.containerId;
      // Handles written before the format escaped dots (`<net>.x.<cid>` of a
      // network named `<net>.x`) parse as a dotted container ID of ours;
      // runtimes' container IDs are hex, so dotted ones are left alone.
      if (cid.includes('.') || valid.has(cid)) continue;
      const ips = await ipam.releaseByHandle(h.handleID);
      ctx.log.info('netplugin-ipam: GC released a stale handle', { handle: h.handleID, ips });
    }
  });
}

async function status(ctx: Ctx): Promise<void> {
  const ic = ipamConf(ctx.conf);
  const node = resolveNodename(ctx.conf);
  let problem: string | undefined;
  try {
    await withIpam(ctx, async (ipam) => {
      const families = ([4, 6] as const).filter((f) => (f === 4 ? ic.assign_ipv4 : ic.assign_ipv6) === 'true');
      problem = await ipam.readiness({
        node,
        families: [...families],
        ipv4Pools: ic.ipv4_pools,
        ipv6Pools: ic.ipv6_pools,
      });
    });
  } catch (e) {
    if (DatastoreError.is(e)) {
      throw new CniError(
        ErrorCodes.PluginNotAvailable,
        `datastore (${ctx.conf.datastore_type}) is not usable: ${e.kind}: ${e.message.split('\n')[0]}`,
      );
    }
    throw e;
  }
  if (problem)
    throw new CniError(
      ErrorCodes.PluginNotAvailable,
      `${problem}; new pods cannot get addresses until a pool is added or addresses are freed`,
    );
}

export const handlers: CniHandlers<Netconf, PluginRuntime> = {
  parse: (raw) => parseNetconf(raw, { pluginType: 'netplugin-ipam' }),
  add,
  del,
  check,
  status,
  gc,
};
