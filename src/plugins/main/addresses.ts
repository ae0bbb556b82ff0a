// Address acquisition for ADD: our IPAM in-process (the addresses and the
// workload endpoint in one transaction), or a delegated IPAM plugin. Each
// reservation pushes its undo on the ADD's rollback stack.
import { CniError, ErrorCodes } from '../../errors.js';
import type { Datastore } from '../../datastore/types.js';
import { parseResult } from '../../cni/result.js';
import { ipamFieldNames, type AddressRequest } from '../../workload/annotations.js';
import { addressOf } from '../../net/cidr.js';
import { step, type Rollback } from './rollback.js';
import { execDelegate } from './delegate.js';
import { delegatedIpam } from './delegated-ipam.js';
import { ownEndpoint, type EndpointPiggyback } from './endpoint.js';
import { ipamFor, type PluginContext, type Workload } from './common.js';
import type { Ipam } from '../../ipam/index.js';

/** The pod's addresses (bare IPs) and whether an earlier ADD of this container already held them. */
interface Addresses {
  ips: string[];
  floating?: string[];
  repeated?: boolean;
}

interface EarlyIpam {
  ipam: Ipam;
  pools: Promise<Awaited<ReturnType<Datastore['list']>>>;
}

/**
 * Starts the read our IPAM needs before the pod's options are known (the
 * pools); awaited later, in ipamAddresses(). This container's handle is not
 * read: the assignment's transaction finds a repeated ADD by its guard.
 */
export async function earlyIpamReads(ctx: PluginContext, ds: Datastore): Promise<EarlyIpam> {
  const ipam = await ipamFor(ctx, ds, 'assign');
  const pools = ds.list('IPPool');
  // Awaited only once the datastore is known ready; a failure meanwhile must not go unhandled.
  pools.catch(() => undefined);
  return { ipam, pools };
}

/**
 * Reserves the pod's addresses from our IPAM as `req` (the resolved WorkloadOptions) says; the endpoint rides in the
 * same transaction.
 */
export async function ipamAddresses(
  ctx: PluginContext,
  wl: Workload,
  req: AddressRequest,
  rb: Rollback,
  early: EarlyIpam,
  piggy: EndpointPiggyback,
): Promise<Addresses> {
  const { log } = ctx;
  const { ipam } = early;
  const floating = req.floatingIPs ? { floating: req.floatingIPs } : {};
  const reuse = (ips: string[]): Addresses => {
    log.info('ADD repeated for a container that already holds addresses; reusing them', { ips });
    return { ips, repeated: true, ...floating };
  };
  if (req.noIpamIPs) {
    // No assignment to find a repeated ADD by: read what the handle holds (an earlier ADD of this container may have
    // used IPAM).
    const held = await step('reading IPAM', () => ipam.handleAddresses(wl.handleID));
    return held.length ? reuse(held.map(addressOf)) : { ips: req.noIpamIPs, ...floating };
  }

  const attrs: Record<string, string> = { containerID: ctx.containerId };
  if (wl.pod) Object.assign(attrs, { namespace: wl.pod.namespace, pod: wl.pod.name });
  // The pod's UID lets IPAM GC tell a re-created pod of the same name from the one that got the address.
  if (wl.pod && ctx.args.K8S_POD_UID) attrs['podUID'] = ctx.args.K8S_POD_UID;
  piggy.floating = req.floatingIPs;
  // One transaction takes the addresses and writes the endpoint: the step names both.
  // A repeated ADD (some address already held) undoes nothing: what it holds is the earlier ADD's.
  let repeated = false;
  const assigned = await step('assigning addresses and writing the workload endpoint', async () => {
    // What the rollback releases counts as released: the assignment was counted when it committed.
    rb.push(`addresses of ${wl.handleID}`, async () => {
      if (repeated) return;
      // Released first, counted after: `observer?.released(await …)` would skip the release itself
      // where no observer is set (the per-exec plugin), as optional calls skip their arguments.
      const released = await ipam.releaseByHandle(wl.handleID);
      ctx.runtime.ipam.observer?.released(released.length);
    });
    rb.push(`endpoint ${wl.endpointName}`, () => (repeated ? undefined : piggy.undo()));
    return ipam
      .assign({
        piggyback: piggy,
        handleID: wl.handleID,
        node: wl.node,
        attrs,
        assignIPv4: req.assignIPv4,
        assignIPv6: req.assignIPv6,
        ...(req.ipv4Pools ? { ipv4Pools: req.ipv4Pools } : {}),
        ...(req.ipv6Pools ? { ipv6Pools: req.ipv6Pools } : {}),
        ...(req.requestedIPs?.length ? { requestedIPs: req.requestedIPs } : {}),
        fields: ipamFieldNames(req),
      })
      .then((got) => {
        repeated = got.some((a) => a.held);
        return got;
      });
  });
  if (!assigned.length)
    throw new CniError(
      ErrorCodes.InvalidNetworkConfig,
      'ipam: neither assign_ipv4 nor assign_ipv6 is "true"; the pod would get no address',
    );
  // A repeated ADD for the same container and network gets what it already holds (the transaction's guard on its handle
  // said so).
  if (assigned.every((a) => a.held)) return reuse(assigned.map((a) => a.ip));
  ctx.runtime.ipam.observer?.assigned(assigned.filter((a) => !a.held).length);
  return { ips: assigned.map((a) => a.ip), ...floating };
}

/** Other IPAM types (host-local): run the plugin from CNI_PATH, with `usePodCidr` resolved to the node's pod CIDRs. */
export async function delegatedAddresses(
  ctx: PluginContext,
  wl: Workload,
  ds: Datastore,
  rb: Rollback,
): Promise<Addresses> {
  const { conf, log } = ctx;
  // A repeated ADD must not ask host-local again: it refuses a second allocation
  // for the same container ("duplicate allocation is not allowed"). This
  // container's endpoint records what it got.
  const mine = await step('reading the workload endpoint', () => ownEndpoint(ds, wl, ctx.containerId));
  if (mine?.spec.ipNetworks.length) {
    log.info('ADD repeated for a container that already holds addresses; reusing them', { ips: mine.spec.ipNetworks });
    return { ips: mine.spec.ipNetworks.map(addressOf), repeated: true };
  }
  const inv = await delegatedIpam(ctx, wl, ds);
  const raw = await step(`delegated IPAM ${conf.ipam.type}`, async () => {
    const r = await execDelegate({ ...inv, command: 'ADD' });
    rb.push(`${conf.ipam.type} allocation`, () => execDelegate({ ...inv, command: 'DEL' }));
    return r;
  });
  const result = parseResult(raw, `${conf.ipam.type} result`, ctx.cniVersion);
  const ips = (result.ips ?? []).map((i) => addressOf(i.address));
  if (!ips.length)
    throw new CniError(ErrorCodes.DelegateFailure, `delegated IPAM ${conf.ipam.type} returned no addresses`);
  return { ips };
}
