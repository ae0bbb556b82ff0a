// Delegated IPAM (host-local and other IPAM plugins): the invocation ADD, DEL
// and CHECK pass on (our netconf with its `ipam` section, the runtime's CNI_*
// values), with host-local's `usePodCidr` subnets resolved to the node's pod
// CIDRs (the operator's HostLocal mode).
import { CniError, DatastoreError, ErrorCodes } from '../../errors.js';
import type { Datastore } from '../../datastore/types.js';
import type { DelegateInvocation } from './delegate.js';
import type { PluginContext, Workload } from './common.js';

/**
 * The invocation of the netconf's IPAM plugin for this attachment, less the
 * command. With `release` (DEL) unreadable pod CIDRs are tolerated (resolvePodCidrs).
 */
export async function delegatedIpam(
  ctx: PluginContext,
  wl: Workload,
  ds: Datastore | undefined,
  opts: { release?: boolean } = {},
): Promise<Omit<DelegateInvocation, 'command'>> {
  const ipam = await resolvePodCidrs(ctx, wl, ds, opts);
  return {
    type: ctx.conf.ipam.type,
    containerId: ctx.containerId,
    netns: ctx.netns,
    ifname: ctx.ifname,
    cniArgs: ctx.env['CNI_ARGS'] ?? '',
    path: ctx.path,
    conf: { ...ctx.rawConf, ipam },
    env: ctx.env,
  };
}

/**
 * Replaces host-local's `usePodCidr` / `usePodCidrIPv6` subnets with the node's pod CIDRs (the operator's HostLocal
 * mode).
 */
async function resolvePodCidrs(
  ctx: Pick<PluginContext, 'conf' | 'runtime'>,
  wl: Workload,
  ds: Datastore | undefined,
  opts: { release?: boolean } = {},
): Promise<Record<string, unknown>> {
  const { conf } = ctx;
  const ipam = structuredClone(conf.ipam) as Record<string, unknown>;
  const text = JSON.stringify(ipam);
  if (!text.includes('"usePodCidr"') && !text.includes('"usePodCidrIPv6"')) return ipam;
  let cidrs: string[] = [];
  try {
    if (!ds) throw new CniError(ErrorCodes.TryAgainLater, 'the datastore is unavailable');
    cidrs = await nodePodCidrs(ctx, wl, ds);
  } catch (e) {
    // DEL and CHECK must work when the node's CIDRs cannot be read (datastore down,
    // node deleted): host-local releases by container ID and only validates the
    // subnet, so any well-formed placeholder does.
    if (!opts.release) throw e;
  }
  const v4 = cidrs.find((c) => !c.includes(':')) ?? (opts.release ? RELEASE_PLACEHOLDER_V4 : undefined);
  const v6 = cidrs.find((c) => c.includes(':')) ?? (opts.release ? RELEASE_PLACEHOLDER_V6 : undefined);
  const sub = (v: unknown): unknown => {
    if (v === 'usePodCidr' || v === 'usePodCidrIPv6') {
      const want = v === 'usePodCidr' ? v4 : v6;
      if (!want) {
        throw new CniError(
          ErrorCodes.InvalidNetworkConfig,
          `ipam: subnet "${v}" needs the node's ${v === 'usePodCidr' ? 'IPv4' : 'IPv6'} pod CIDR, but node ` +
            `${wl.node} has ${cidrs.length ? cidrs.join(', ') : 'none'}; set the node's podCIDRs ` +
            `(kube-controller-manager --allocate-node-cidrs) or give a subnet`,
        );
      }
      return want;
    }
    if (Array.isArray(v)) return v.map(sub);
    if (v && typeof v === 'object') return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, sub(x)]));
    return v;
  };
  return sub(ipam) as Record<string, unknown>;
}

/** Documentation ranges (RFC 5737, RFC 3849): valid subnets that never hold a real reservation. */
const RELEASE_PLACEHOLDER_V4 = '192.0.2.0/30';
const RELEASE_PLACEHOLDER_V6 = '2001:db8::/126';

async function nodePodCidrs(
  { conf, runtime }: Pick<PluginContext, 'conf' | 'runtime'>,
  wl: Workload,
  ds: Datastore,
): Promise<string[]> {
  if (conf.kubernetes?.kubeconfig || conf.kubernetes?.k8s_api_root) {
    const kube = await runtime.kubeClient(conf);
    const node = (await kube.getNode(wl.node)) as { spec?: { podCIDR?: string; podCIDRs?: string[] } };
    const list = node.spec?.podCIDRs?.length ? node.spec.podCIDRs : node.spec?.podCIDR ? [node.spec.podCIDR] : [];
    return list;
  }
  try {
    return (await ds.get('Node', wl.node)).spec.podCIDRs ?? [];
  } catch (e) {
    if (DatastoreError.is(e, 'NotFound')) return [];
    throw e;
  }
}
