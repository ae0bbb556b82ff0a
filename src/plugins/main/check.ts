// CHECK (CNI >= 0.4.0): compares prevResult with the kernel and the datastore
// and fails naming every drift found.
import { isNetpluginIpam } from '../../config/index.js';
import { CniError, DatastoreError, ErrorCodes } from '../../errors.js';
import { execDelegate } from './delegate.js';
import { delegatedIpam } from './delegated-ipam.js';
import { addressOf } from '../../net/cidr.js';
import { HOST_MAC, identify, ipamFor, type PluginContext } from './common.js';

export async function check(ctx: PluginContext): Promise<void> {
  const { conf } = ctx;
  const prev = ctx.prevResult;
  if (!prev)
    throw new CniError(
      ErrorCodes.InvalidNetworkConfig,
      'prevResult: CHECK needs the result of the ADD in prevResult; the runtime must pass it',
    );
  if (!ctx.netns) throw new CniError(ErrorCodes.InvalidEnvironment, 'CNI_NETNS is required for CHECK');
  const wl = identify(conf, ctx);
  const contIdx = prev.interfaces?.findIndex((i) => i.name === ctx.ifname && i.sandbox) ?? -1;
  const contIf = contIdx >= 0 ? prev.interfaces![contIdx] : undefined;
  if (!contIf?.mac)
    throw new CniError(
      ErrorCodes.CheckFailed,
      `prevResult has no interface ${ctx.ifname} with a sandbox and MAC; it is not a netplugin result for this ` +
        `attachment`,
    );
  const addrs = (prev.ips ?? [])
    .filter((i) => i.interface === undefined || i.interface === contIdx)
    .map((i) => i.address);

  const drift: string[] = [];
  const dp = await ctx.runtime.dataplane();
  drift.push(
    ...(await dp.check(
      {
        netnsPath: ctx.netns,
        ifname: ctx.ifname,
        hostIfname: wl.hostIfname,
        ...(conf.mtu ? { mtu: conf.mtu } : {}),
        numQueues: conf.num_queues,
        hostMac: HOST_MAC,
        addresses: addrs,
        allowIpForwarding: conf.container_settings.allow_ip_forwarding,
      },
      { containerMac: contIf.mac },
    )),
  );

  const ds = await ctx.runtime.datastore(conf);
  if (isNetpluginIpam(conf.ipam)) {
    const held = new Set((await (await ipamFor(ctx, ds)).handleAddresses(wl.handleID)).map(addressOf));
    for (const a of addrs) {
      const ip = addressOf(a);
      if (!held.has(ip)) drift.push(`IPAM no longer holds ${ip} for handle ${wl.handleID}`);
    }
  } else {
    // Delegated IPAM checks its own bookkeeping (host-local: the address file still names this container).
    try {
      await execDelegate({ ...(await delegatedIpam(ctx, wl, ds)), command: 'CHECK' });
    } catch (e) {
      if (!(e instanceof CniError) || e.code === ErrorCodes.TryAgainLater) throw e;
      drift.push(e.message);
    }
  }
  try {
    const wep = await ds.get('WorkloadEndpoint', wl.endpointName, wl.namespace);
    if (wep.spec.containerID !== ctx.containerId)
      drift.push(`workload endpoint ${wl.endpointName} belongs to container ${wep.spec.containerID}`);
  } catch (e) {
    if (!DatastoreError.is(e, 'NotFound')) throw e;
    drift.push(`workload endpoint ${wl.endpointName} is missing`);
  }
  if (drift.length) throw new CniError(ErrorCodes.CheckFailed, `CHECK found drift: ${drift.join('; ')}`);
}
