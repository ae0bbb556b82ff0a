// DEL: best effort and idempotent (CNI spec: DEL must succeed when the
// resources are already gone). Local teardown first, so a datastore outage
// never leaves a veth behind; then the endpoint (only if it is still ours) and
// the addresses. A datastore outage after the local teardown is code 11 so the
// runtime retries the DEL.
import type { CniContext } from '../../cni/types.js';
import { isNetpluginIpam, type Netconf } from '../../config/index.js';
import { CniError, DatastoreError, ErrorCodes } from '../../errors.js';
import type { Datastore, TxnOp } from '../../datastore/types.js';
import { execDelegate } from './delegate.js';
import { resolvePodCidrs } from './add.js';
import { dataplane, getIpamObserver, ipamBatchingEnabled } from './runtime.js';
import { HOST_MAC, datastoreFor, identify, ipamLockPath, statusDir, type Workload } from './common.js';
import { toCniError } from '../../cni/errors.js';
import { IpamError } from '../../ipam/errors.js';
import { netlink, type Netlink } from '../../native/index.js';

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
  let endpointDelete: TxnOp | undefined;
  // The endpoint's addresses (when it is ours), for the conntrack flush.
  let ownAddrs: string[] = [];
  if (ds) {
    try {
      ownerKnown = true;
      const wep = await ds.get('WorkloadEndpoint', wl.endpointName, wl.namespace);
      if (wep.spec.containerID && wep.spec.containerID !== ctx.containerId) newerOwner = wep.spec.containerID;
      // Deleted with the addresses, in the release's transaction (one write per DEL).
      else {
        ownAddrs = wep.spec.ipNetworks.map((n) => n.split('/')[0]!);
        endpointDelete = { op: 'delete', kind: 'WorkloadEndpoint', name: wl.endpointName, namespace: wl.namespace, ...(wep.metadata.resourceVersion ? { revision: wep.metadata.resourceVersion } : {}) };
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
      const r = await dp.teardown({ ...(ctx.netns ? { netnsPath: ctx.netns } : {}), ifname: ctx.ifname, hostIfname: wl.hostIfname, hostMac: HOST_MAC, ...(ownsHostEnd ? {} : { keepHostEnd: true }) });
      log.debug('local teardown', { removed: r.removed });
    } catch (e) {
      teardownError = e;
      log.error('local teardown failed; releasing the addresses anyway', { error: (e as Error)?.message ?? String(e) });
    }
  } else {
    log.info('no netns and the endpoint owner is unknown or newer; leaving the host veth alone', { owner: newerOwner });
  }
  if (newerOwner) log.info('not deleting the workload endpoint: it belongs to a newer container of this pod', { owner: newerOwner });
  if (conf.policy_setup_timeout_seconds && !newerOwner) {
    const { clearPolicyStatus } = await import('../../k8s/policy-wait.js');
    await clearPolicyStatus(wl.endpointName, statusDir(conf)).catch(() => undefined);
  }

  // The pod is gone from the dataplane: its connections' conntrack entries go
  // before its addresses are free, so a pod that reuses one never inherits an
  // established (allowed) state (docs/policy.md, Conntrack).
  flushConntrack(ownAddrs, log);

  // Addresses are released by this container's handle, so an old sandbox's DEL
  // frees only its own addresses, never the newer sandbox's.
  try {
    const released = await releaseAddresses(ctx, wl, ds, endpointDelete);
    // Without an endpoint record the released list is the only source of the addresses.
    flushConntrack(released.filter((a) => !ownAddrs.includes(a)), log);
  } catch (e) {
    dsError ??= e;
  }
  if (dsError) {
    if (DatastoreError.is(dsError, 'Unavailable') || ((dsError instanceof CniError || IpamError.is(dsError)) && toCniError(dsError).code === ErrorCodes.TryAgainLater)) {
      throw new CniError(ErrorCodes.TryAgainLater, `local teardown ${teardownError ? 'failed' : 'done'}, but the datastore is unreachable so the addresses and endpoint of ${ctx.containerId} are not released yet: ${(dsError as Error).message}`);
    }
    throw dsError;
  }
  if (teardownError) {
    const why = toCniError(teardownError).message;
    throw new CniError(
      ErrorCodes.DataplaneFailure,
      `the addresses and endpoint of ${ctx.containerId} are released, but its interface ${ctx.ifname} (host end ${wl.hostIfname}) could not be removed: ${why}; remove it by hand if it remains (a gone namespace takes it along)`,
    );
  }
}

/**
 * Deletes the host namespace's conntrack entries of the addresses. Best effort:
 * DEL must not fail for it (an entry left behind expires on its own timeout).
 */
function flushConntrack(addrs: string[], log: CniContext<Netconf>['log']): void {
  if (addrs.length === 0) return;
  let nl: Netlink | undefined;
  try {
    nl = netlink();
    const n = nl.conntrackFlush(addrs);
    log.debug('conntrack entries flushed', { addrs, deleted: n });
  } catch (e) {
    log.warn('could not flush the conntrack entries of the released addresses; they expire on their own', { addrs, error: (e as Error)?.message ?? String(e) });
  } finally {
    nl?.close();
  }
}

/** The addresses released (netplugin IPAM; none known for a delegated IPAM plugin). */
async function releaseAddresses(ctx: CniContext<Netconf>, wl: Workload, ds: Datastore | undefined, endpointDelete: TxnOp | undefined): Promise<string[]> {
  const { conf, log } = ctx;
  if (!isNetpluginIpam(conf.ipam)) {
    // The endpoint goes before the delegated plugin frees the addresses, as a single guarded delete.
    if (ds && endpointDelete) await ds.txn([endpointDelete]).catch(ignoreGone);
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
    return [];
  }
  if (!ds) return [];
  const { Ipam } = await import('../../ipam/index.js');
  const lockPath = ipamLockPath(conf);
  const ipam = new Ipam(ds, { log, ...(lockPath ? { lockPath } : {}), ...(ipamBatchingEnabled() ? { batch: true } : {}) });
  const released = await ipam.releaseByHandle(wl.handleID, endpointDelete ? { alsoWrite: [endpointDelete] } : {});
  getIpamObserver()?.released(released.length);
  log.info('DEL done', { released, hostIfname: wl.hostIfname });
  return released.map((a) => a.split('/')[0]!);
}

/** The endpoint changed owner or went meanwhile: nothing of ours to delete. */
function ignoreGone(e: unknown): void {
  if (!DatastoreError.is(e, 'NotFound') && !DatastoreError.is(e, 'Conflict')) throw e;
}
