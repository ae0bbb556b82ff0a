// DEL: best effort and idempotent (CNI spec: DEL must succeed when the
// resources are already gone). Local teardown first, so a datastore outage
// never leaves a veth behind; then the endpoint (only if it is still ours) and
// the addresses. A datastore outage after the local teardown is code 11 so the
// runtime retries the DEL.
import type { CniContext } from '../../cni/types.js';
import { isNetpluginIpam, type Netconf } from '../../config/index.js';
import { CniError, DatastoreError, ErrorCodes } from '../../errors.js';
import type { Datastore } from '../../datastore/types.js';
import { execDelegate } from './delegate.js';
import { resolvePodCidrs } from './add.js';
import { dataplane, getIpamObserver } from './runtime.js';
import { datastoreFor, identify, ipamLockPath, statusDir, type Workload } from './common.js';

export async function del(ctx: CniContext<Netconf>): Promise<void> {
  const { conf, log } = ctx;
  const wl = identify(conf, ctx);

  let ds: Datastore | undefined;
  let dsError: unknown;
  try {
    ds = await datastoreFor(conf);
  } catch (e) {
    dsError = e;
  }

  // Whose endpoint is it? A newer sandbox of the same pod may already own the
  // endpoint and the host veth name (its ADD replaced our stale veth).
  let newerOwner: string | undefined;
  let ownerKnown = false;
  if (ds) {
    try {
      ownerKnown = true;
      const wep = await ds.get('WorkloadEndpoint', wl.endpointName, wl.namespace);
      if (wep.spec.containerID && wep.spec.containerID !== ctx.containerId) newerOwner = wep.spec.containerID;
      else {
        await ds.delete('WorkloadEndpoint', wl.endpointName, { namespace: wl.namespace, ...(wep.metadata.resourceVersion ? { revision: wep.metadata.resourceVersion } : {}) }).catch((e) => {
          if (!DatastoreError.is(e, 'NotFound') && !DatastoreError.is(e, 'Conflict')) throw e;
        });
      }
    } catch (e) {
      if (!DatastoreError.is(e, 'NotFound')) {
        ownerKnown = false;
        dsError ??= e;
      }
    }
  }

  // Inside our own netns the interface is ours whoever owns the endpoint; the
  // host end is deleted by name only when no newer sandbox owns it.
  const dp = await dataplane();
  const ownsHostEnd = ownerKnown && !newerOwner;
  if (ctx.netns || ownsHostEnd) {
    // With the netns already gone the dataplane would fall back to the host end's
    // name, which a newer sandbox of this pod may hold by now: only when it is ours.
    const r = await dp.teardown({ ...(ctx.netns ? { netnsPath: ctx.netns } : {}), ifname: ctx.ifname, hostIfname: wl.hostIfname, ...(ownsHostEnd ? {} : { keepHostEnd: true }) });
    log.debug('local teardown', { removed: r.removed });
  } else {
    log.info('no netns and the endpoint owner is unknown or newer; leaving the host veth alone', { owner: newerOwner });
  }
  if (newerOwner) log.info('not deleting the workload endpoint: it belongs to a newer container of this pod', { owner: newerOwner });
  if (conf.policy_setup_timeout_seconds && !newerOwner) {
    const { clearPolicyStatus } = await import('../../k8s/policy-wait.js');
    await clearPolicyStatus(wl.endpointName, statusDir(conf)).catch(() => undefined);
  }

  // Addresses are released by this container's handle, so an old sandbox's DEL
  // frees only its own addresses, never the newer sandbox's.
  try {
    await releaseAddresses(ctx, wl, ds);
  } catch (e) {
    dsError ??= e;
  }
  if (dsError) {
    if (DatastoreError.is(dsError, 'Unavailable') || (dsError instanceof CniError && dsError.code === ErrorCodes.TryAgainLater)) {
      throw new CniError(ErrorCodes.TryAgainLater, `local teardown done, but the datastore is unreachable so the addresses and endpoint of ${ctx.containerId} are not released yet: ${(dsError as Error).message}`);
    }
    throw dsError;
  }
}

async function releaseAddresses(ctx: CniContext<Netconf>, wl: Workload, ds: Datastore | undefined): Promise<void> {
  const { conf, log } = ctx;
  if (!isNetpluginIpam(conf.ipam)) {
    const ipamConf = await resolvePodCidrs(conf, wl, ds, { release: true });
    await execDelegate({
      type: conf.ipam.type,
      command: 'DEL',
      containerId: ctx.containerId,
      netns: ctx.netns,
      ifname: ctx.ifname,
      cniArgs: ctx.env['CNI_ARGS'] ?? '',
      path: ctx.path,
      conf: { ...ctx.rawConf, ipam: ipamConf },
      env: ctx.env,
    });
    return;
  }
  if (!ds) return;
  const { Ipam } = await import('../../ipam/index.js');
  const lockPath = ipamLockPath(conf);
  const ipam = new Ipam(ds, { log, ...(lockPath ? { lockPath } : {}) });
  const released = await ipam.releaseByHandle(wl.handleID);
  getIpamObserver()?.released(released.length);
  log.info('DEL done', { released, hostIfname: wl.hostIfname });
}
