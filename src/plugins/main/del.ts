// DEL: best effort and idempotent (CNI spec: DEL must succeed when the
// resources are already gone). Local teardown first, so a datastore outage
// never leaves a veth behind; then the endpoint (only if it is still ours) and
// the addresses. A datastore outage after the local teardown is code 11 so the
// runtime retries the DEL.
import { isNetpluginIpam } from '../../config/index.js';
import { CniError, DatastoreError, ErrorCodes } from '../../errors.js';
import type { Datastore, TxnOp } from '../../datastore/types.js';
import type { Resource } from '../../model/resources.js';
import { execDelegate } from './delegate.js';
import { delegatedIpam } from './delegated-ipam.js';
import { HOST_MAC, identify, ipamFor, statusDir, type PluginContext, type Workload } from './common.js';
import { toCniError } from '../../cni/errors.js';
import { IpamError } from '../../ipam/index.js';
import { WorkloadError } from '../../workload/errors.js';
import { addressOf } from '../../net/cidr.js';

export async function del(ctx: PluginContext): Promise<void> {
  const { conf, log } = ctx;
  const wl = identify(conf, ctx);

  let ds: Datastore | undefined;
  let dsError: unknown;
  try {
    ds = await ctx.runtime.datastore(conf);
  } catch (e) {
    dsError = e;
  }

  // Whose endpoint is it? A newer sandbox of the same pod may already own the
  // endpoint and the host veth name (its ADD replaced our stale veth).
  let newerOwner: string | undefined;
  let ownerKnown = false;
  let endpointDelete: TxnOp | undefined;
  // The endpoint's addresses (when it is ours), for the conntrack flush.
  let ownAddrs: string[] = [];
  if (ds) {
    try {
      ownerKnown = true;
      // With the netns given, the owner decides no link (the teardown runs
      // inside it, and never falls back to the host end's name), only the
      // endpoint's delete, which its revision guards: so the agent may answer
      // from what its ADD wrote (no round trip); a stale answer fails that
      // guard and is read again (releaseAddresses' reread).
      const wep = await ds.get(
        'WorkloadEndpoint',
        wl.endpointName,
        wl.namespace,
        ctx.netns ? { recent: true } : undefined,
      );
      if (wep.spec.containerID && wep.spec.containerID !== ctx.containerId) newerOwner = wep.spec.containerID;
      // Deleted with the addresses, in the release's transaction (one write per DEL).
      else {
        ownAddrs = wep.spec.ipNetworks.map(addressOf);
        endpointDelete = endpointDeleteOp(wep);
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
  const dp = await ctx.runtime.dataplane();
  const ownsHostEnd = ownerKnown && !newerOwner;
  // A failure here must not stop the release below: a DEL that freed nothing
  // would fail the same way on every retry while the address stayed taken.
  let teardownError: unknown;
  if (ctx.netns || ownsHostEnd) {
    // With no netns the dataplane falls back to the host end's name, which a
    // newer sandbox of this pod may hold by now: only when the endpoint says
    // it is ours, and then only a veth with our MAC (checked on the link).
    // With a netns given but gone, the pair went with it: the host end is never
    // touched by name (ADD and DEL of one veth name run one at a time, so a
    // newer sandbox's ADD cannot slip in between).
    try {
      const r = await dp.teardown({
        ...(ctx.netns ? { netnsPath: ctx.netns } : {}),
        ifname: ctx.ifname,
        hostIfname: wl.hostIfname,
        hostMac: HOST_MAC,
        ...(ownsHostEnd ? {} : { keepHostEnd: true }),
      });
      log.debug('local teardown', { removed: r.removed });
      // The name no longer marks a programmed pod (a pod re-created under it waits for the agent).
      // The nft code loads lazily: a DEL without policy does not pay for it.
      if (ownsHostEnd && conf.policy?.type === 'k8s')
        await (await import('../../dataplane/nft/programmed.js')).markStale(wl.hostIfname);
    } catch (e) {
      teardownError = e;
      log.error('local teardown failed; releasing the addresses anyway', { error: (e as Error)?.message ?? String(e) });
    }
  } else {
    log.info('no netns and the endpoint owner is unknown or newer; leaving the host veth alone', { owner: newerOwner });
  }
  if (newerOwner)
    log.info('not deleting the workload endpoint: it belongs to a newer container of this pod', { owner: newerOwner });
  if (conf.policy_setup_timeout_seconds && !newerOwner) {
    // Lazy: only with a policy wait configured is there a status to clear.
    const { clearPolicyStatus, endpointStatusKey } = await import('../../policy-status/index.js');
    await clearPolicyStatus(endpointStatusKey(wl.namespace, wl.endpointName), statusDir(conf)).catch(() => undefined);
  }

  // The pod is gone from the dataplane: its connections' conntrack entries go
  // before a pod that reuses one of its addresses can get traffic, so that pod
  // never inherits an established (allowed) state (docs/policy.md, Conntrack).
  // Per-exec: now, before the release. The agent: batched off the request
  // path; its ADDs wait for it before a reused address gets a veth.
  dp.flushConntrack(ownAddrs, log);

  // Addresses are released by this container's handle, so an old sandbox's DEL
  // frees only its own addresses, never the newer sandbox's.
  try {
    const released = await releaseAddresses(ctx, wl, ds, endpointDelete);
    // Without an endpoint record the released list is the only source of the addresses.
    dp.flushConntrack(
      released.filter((a) => !ownAddrs.includes(a)),
      log,
    );
  } catch (e) {
    dsError ??= e;
  }
  if (dsError) {
    const mapped = dsError instanceof CniError || IpamError.is(dsError) || WorkloadError.is(dsError);
    const retry = mapped && toCniError(dsError).code === ErrorCodes.TryAgainLater;
    if (DatastoreError.is(dsError, 'Unavailable') || retry) {
      throw new CniError(
        ErrorCodes.TryAgainLater,
        `local teardown ${teardownError ? 'failed' : 'done'}, but the datastore is unreachable so the addresses and ` +
          `endpoint of ${ctx.containerId} are not released yet: ${(dsError as Error).message}`,
      );
    }
    throw dsError;
  }
  if (teardownError) {
    const why = toCniError(teardownError).message;
    throw new CniError(
      ErrorCodes.DataplaneFailure,
      `the addresses and endpoint of ${ctx.containerId} are released, but its interface ${ctx.ifname} (host end ` +
        `${wl.hostIfname}) could not be removed: ${why}; remove it by hand if it remains (a gone namespace takes it ` +
        `along)`,
    );
  }
}

/** The addresses released (netplugin IPAM; none known for a delegated IPAM plugin). */
async function releaseAddresses(
  ctx: PluginContext,
  wl: Workload,
  ds: Datastore | undefined,
  endpointDelete: TxnOp | undefined,
): Promise<string[]> {
  const { conf, log } = ctx;
  // The endpoint changed since it was read: delete it at its new revision if it is still ours.
  const reread = async (): Promise<TxnOp | undefined> => {
    const wep = await ds
      ?.get('WorkloadEndpoint', wl.endpointName, wl.namespace)
      .catch((e: unknown) => void ignoreGone(e));
    return wep && (!wep.spec.containerID || wep.spec.containerID === ctx.containerId)
      ? endpointDeleteOp(wep)
      : undefined;
  };
  if (!isNetpluginIpam(conf.ipam)) {
    // The endpoint goes before the delegated plugin frees the addresses, as a single guarded delete.
    if (ds && endpointDelete) {
      await ds.txn([endpointDelete]).catch(async (e: unknown) => {
        ignoreGone(e);
        const again = await reread();
        if (again) await ds.txn([again]).catch(ignoreGone);
      });
    }
    await execDelegate({ ...(await delegatedIpam(ctx, wl, ds, { release: true })), command: 'DEL' });
    return [];
  }
  if (!ds) return [];
  const ipam = await ipamFor(ctx, ds, 'assign');
  const released = await ipam.releaseByHandle(
    wl.handleID,
    endpointDelete ? { alsoWrite: [endpointDelete], reread } : {},
  );
  ctx.runtime.ipam.observer?.released(released.length);
  log.info('DEL done', { released, hostIfname: wl.hostIfname });
  return released.map(addressOf);
}

/** The endpoint's delete, guarded by the revision it was read at. */
function endpointDeleteOp(wep: Resource<'WorkloadEndpoint'>): TxnOp {
  return {
    op: 'delete',
    kind: 'WorkloadEndpoint',
    name: wep.metadata.name,
    ...(wep.metadata.namespace ? { namespace: wep.metadata.namespace } : {}),
    ...(wep.metadata.resourceVersion ? { revision: wep.metadata.resourceVersion } : {}),
  };
}

/** The endpoint changed owner or went meanwhile: nothing of ours to delete. */
function ignoreGone(e: unknown): void {
  if (!DatastoreError.is(e, 'NotFound') && !DatastoreError.is(e, 'Conflict')) throw e;
}
