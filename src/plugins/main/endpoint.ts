// The workload endpoint an ADD writes: the resource built for this attachment,
// its write (in the IPAM transaction, or on its own), taking it over from an
// older sandbox of the same pod, and the undo of each for a failed ADD.
import { randomBytes } from 'node:crypto';
import type { CniContext } from '../../cni/types.js';
import type { Netconf } from '../../config/index.js';
import { DatastoreError } from '../../errors.js';
import type { Resource } from '../../model/resources.js';
import type { Datastore, TxnOp } from '../../datastore/types.js';
import { casOp, casRetry, getIfExists } from '../../datastore/cas.js';
import type { Assigned, Piggyback } from '../../ipam/index.js';
import { buildWorkloadEndpoint, type PodLike } from '../../workload/workload.js';
import { pairFloatingIPs } from '../../workload/annotations.js';
import { LABEL_NAMESPACE, LABEL_ORCHESTRATOR } from '../../model/annotations.js';
import { hostPrefix } from '../../net/cidr.js';
import type { Rollback } from './rollback.js';
import type { Workload } from './common.js';

/** Builds this attachment's endpoint for the pod's addresses (bare IPs), its floating IPs and the container MAC. */
type EndpointBuilder = (ips: string[], floating: string[] | undefined, mac: string) => Resource<'WorkloadEndpoint'>;

/** The endpoint builder of one ADD: `pod` when it was read from the API server. */
export function endpointBuilder(
  ctx: Pick<CniContext<Netconf>, 'containerId' | 'ifname'>,
  wl: Workload,
  pod: PodLike | undefined,
): EndpointBuilder {
  return (ips, floating, mac) => {
    const ipNATs = floating?.length ? pairFloatingIPs(ips, floating) : undefined;
    const wep = buildWorkloadEndpoint({
      node: wl.node,
      containerId: ctx.containerId,
      ifname: ctx.ifname,
      hostIfname: wl.hostIfname,
      ipNetworks: ips.map(hostPrefix),
      mac,
      ...(ipNATs?.length ? { ipNATs } : {}),
      ...(pod ? { pod } : wl.pod ? { pod: { metadata: { name: wl.pod.name, namespace: wl.pod.namespace } } } : {}),
    });
    if (wl.pod && !pod) {
      // Not read from the API server: the service account and labels are unknown, so claim none.
      delete wep.spec.serviceAccountName;
      delete wep.spec.profiles;
      wep.metadata.labels = { [LABEL_NAMESPACE]: wl.pod.namespace, [LABEL_ORCHESTRATOR]: 'k8s' };
    }
    return wep;
  };
}

/** A random unicast, locally administered MAC (the kernel's choice for a veth is the same kind). */
export function randomContainerMac(): string {
  const b = randomBytes(6);
  b[0] = (b[0]! & 0xfe) | 0x02;
  return [...b].map((x) => x.toString(16).padStart(2, '0')).join(':');
}

/** This attachment's endpoint if an earlier ADD of this very container wrote it (not an older sandbox of the pod). */
export async function ownEndpoint(
  ds: Datastore,
  wl: Workload,
  containerId: string,
): Promise<Resource<'WorkloadEndpoint'> | undefined> {
  const wep = await getIfExists(ds, 'WorkloadEndpoint', wl.endpointName, wl.namespace);
  return wep?.spec.containerID === containerId ? wep : undefined;
}

/** The container MAC recorded by an earlier ADD of this very container. */
export async function previousMac(ds: Datastore, wl: Workload, containerId: string): Promise<string | undefined> {
  return (await ownEndpoint(ds, wl, containerId))?.spec.mac;
}

/**
 * The workload endpoint as a write of the IPAM transaction (the allocator's
 * Piggyback): a create guarded by its absence; when that guard fails (an older
 * sandbox of the pod left its endpoint), the next attempt takes it over with
 * an update guarded by the revision just read. Also its undo for a failed ADD.
 */
export class EndpointPiggyback implements Piggyback {
  floating: string[] | undefined;
  /**
   * Told the addresses (bare IPs) of each attempt just before its transaction is sent (they are committed only if it
   * succeeds).
   */
  onAttempt: ((ips: string[]) => void) | undefined;
  /** What the transaction stored, once committed. */
  written: Resource<'WorkloadEndpoint'> | undefined;
  private prev: Resource<'WorkloadEndpoint'> | undefined;
  private attempted = false;

  constructor(
    private readonly ds: Datastore,
    private readonly containerId: string,
    private readonly build: (ips: string[], floating: string[] | undefined) => Resource<'WorkloadEndpoint'>,
  ) {}

  async ops(assigned: Assigned[], again: boolean): Promise<TxnOp[]> {
    this.attempted = true;
    this.onAttempt?.(assigned.map((a) => a.ip));
    const wep = this.build(
      assigned.map((a) => a.ip),
      this.floating,
    );
    // The allocator retries the whole transaction after a failed guard: only then is the endpoint read.
    this.prev = again
      ? await getIfExists(this.ds, 'WorkloadEndpoint', wep.metadata.name, wep.metadata.namespace)
      : undefined;
    return [casOp(wep, this.prev)];
  }

  committed(stored: Array<Resource | undefined>): void {
    this.written = stored[0] as Resource<'WorkloadEndpoint'>;
  }

  /**
   * Rollback: delete what this ADD created, give a taken-over endpoint back, or (answer lost) delete it if it is ours.
   */
  async undo(): Promise<void> {
    if (!this.attempted) return;
    const ok = (e: unknown) => {
      if (!DatastoreError.is(e, 'NotFound') && !DatastoreError.is(e, 'Conflict')) throw e;
    };
    let cur = this.written;
    if (!cur) {
      const name = this.build([], undefined).metadata;
      cur = await this.ds.get('WorkloadEndpoint', name.name, name.namespace).catch((e: unknown) => void ok(e));
      if (!cur || cur.spec.containerID !== this.containerId) return;
    }
    const ns = cur.metadata.namespace;
    if (this.prev && this.prev.spec.containerID !== this.containerId) {
      await this.ds
        .update({ ...this.prev, metadata: { ...this.prev.metadata, resourceVersion: cur.metadata.resourceVersion! } })
        .catch(ok);
      return;
    }
    await this.ds
      .delete('WorkloadEndpoint', cur.metadata.name, {
        ...(ns ? { namespace: ns } : {}),
        revision: cur.metadata.resourceVersion!,
      })
      .catch(ok);
  }
}

/** Creates the endpoint, or takes it over from an older sandbox of the same pod; pushes the undo of either. */
export async function writeEndpoint(ds: Datastore, wep: Resource<'WorkloadEndpoint'>, rb: Rollback): Promise<void> {
  const ns = wep.metadata.namespace;
  const { stored, prev } = await casRetry(
    ds,
    { kind: 'WorkloadEndpoint', name: wep.metadata.name, ...(ns ? { namespace: ns } : {}) },
    () => wep,
    { assumeAbsent: true },
  );
  if (!prev) {
    rb.push(`endpoint ${wep.metadata.name}`, () =>
      ds
        .delete('WorkloadEndpoint', wep.metadata.name, {
          ...(ns ? { namespace: ns } : {}),
          ...(stored.metadata.resourceVersion ? { revision: stored.metadata.resourceVersion } : {}),
        })
        .catch((e) => {
          if (!DatastoreError.is(e, 'NotFound')) throw e;
        }),
    );
    return;
  }
  rb.push(`endpoint ${wep.metadata.name} (restore)`, async () => {
    if (prev.spec.containerID === wep.spec.containerID) return;
    await ds.update({ ...prev, metadata: { ...prev.metadata, resourceVersion: stored.metadata.resourceVersion! } });
  });
}
