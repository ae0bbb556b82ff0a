// ADD: readiness gates -> datastore ready -> pod context -> addresses (our IPAM
// in-process, or a delegated IPAM plugin) -> veth and routes -> workload
// endpoint -> policy-setup wait -> result. Every side effect pushes its undo,
// so a failure at any step leaves nothing behind.
import { randomBytes } from 'node:crypto';
import type { CniResult, CniIPConfig, CniRoute } from '../../cni/types.js';
import { isNetpluginIpam } from '../../config/index.js';
import { CniError, DatastoreError, ErrorCodes } from '../../errors.js';
import type { Resource } from '../../model/resources.js';
import type { Datastore, TxnOp } from '../../datastore/types.js';
import type { Assigned, Piggyback } from '../../ipam/index.js';
import { parseResult } from '../../cni/result.js';
import { GATEWAY_V4 } from '../../dataplane/workload.js';
import { linkLocalFromMac } from '../../dataplane/names.js';
import { buildWorkloadEndpoint, needsPodLookup, readPodContext, type PodLike } from '../../k8s/workload.js';
import { ipamFieldNames, pairFloatingIPs, poolsFromResources, resolveWorkloadOptions } from '../../k8s/annotations.js';
import { Rollback, step } from './rollback.js';
import { execDelegate } from './delegate.js';
import { HOST_MAC, checkClusterReady, identify, ipamFor, statusDir, type PluginContext, type Workload } from './common.js';
import { podMtu } from '../../config/mtu.js';
import { LABEL_NAMESPACE, LABEL_ORCHESTRATOR } from '../../model/annotations.js';

/** The pod's own address on its interface: /32 or /128 (routing is done by the host's per-address route). */
export function hostPrefix(ip: string): string {
  return ip.includes(':') ? `${ip}/128` : `${ip}/32`;
}

function bareIP(addr: string): string {
  return addr.split('/')[0]!;
}

export async function add(ctx: PluginContext): Promise<CniResult> {
  const { conf, log, runtime } = ctx;
  if (!ctx.netns) throw new CniError(ErrorCodes.InvalidEnvironment, 'CNI_NETNS is required for ADD');
  const wl = identify(conf, ctx);

  if (conf.readiness_gates?.length) {
    await step('readiness gates', async () => {
      const { waitForReadinessGates } = await import('../../k8s/readiness.js');
      await waitForReadinessGates(conf.readiness_gates!, { log, ...(conf.readiness_gate_timeout_seconds ? { deadlineMs: conf.readiness_gate_timeout_seconds * 1000 } : {}) });
    });
  }

  const ds = await step('checking the datastore', () => runtime.datastore(conf));
  // The IPAM reads do not depend on readiness and write nothing: issue them
  // with the ClusterInformation read, so the three cost one round trip.
  const early = isNetpluginIpam(conf.ipam) ? await earlyIpamReads(ctx, wl, ds) : undefined;
  await step('checking the datastore', () => checkClusterReady(ds));

  let pod: PodLike | undefined;
  let nsAnnotations: Record<string, string> = {};
  if (wl.pod && needsPodLookup(conf, ctx.args, log)) {
    const kube = await step('reading the pod', () => runtime.kubeClient(conf));
    const got = await step('reading the pod', async () => readPodContext(await runtime.podSource(conf, kube, wl.node, ctx.args.K8S_POD_UID), wl.pod!, kube.server));
    pod = got.pod;
    nsAnnotations = got.namespace.metadata?.annotations ?? {};
  }

  const rb = new Rollback(log);
  try {
    const sdir = statusDir(conf);
    const policyWait = conf.policy_setup_timeout_seconds ? await import('../../k8s/policy-wait.js') : undefined;
    if (policyWait) await policyWait.clearPolicyStatus(wl.endpointName, sdir);
    // The container MAC is chosen here rather than by the kernel, so the
    // endpoint (which records it) can be written before or while the veth is
    // created. A repeated ADD (same container and ifname) rebuilds the pair
    // with the MAC it had, so the runtime gets the very result it got the
    // first time (previousMac below).
    const freshMac = randomContainerMac();
    const endpointFor = (ips: string[], floating: string[] | undefined, mac: string): Resource<'WorkloadEndpoint'> => {
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
    // With our IPAM the endpoint goes in the transaction that takes the
    // addresses: an ADD costs one datastore write.
    const piggy = new EndpointPiggyback(ds, ctx.containerId, (ips, floating) => endpointFor(ips, floating, freshMac));
    const { ips, floating, repeated } = await addresses(ctx, wl, ds, pod, nsAnnotations, rb, early, piggy);
    const v4 = ips.find((a) => !a.includes(':'));
    const v6 = ips.find((a) => a.includes(':'));
    const containerMac = repeated ? await previousMac(ds, wl, ctx.containerId) : undefined;
    const mac = piggy.written ? freshMac : (containerMac ?? freshMac);
    // Without a netconf mtu, the agent's pod MTU (leaves room for VXLAN/IPIP headers).
    const mtu = podMtu(conf);
    const dp = await runtime.dataplane();
    const wep = piggy.written ?? endpointFor(ips, floating, mac);

    const [veth, endpoint] = await Promise.allSettled([
      step('creating the veth pair', async () => {
        const st = await dp
          .setup({
            netnsPath: ctx.netns,
            ifname: ctx.ifname,
            hostIfname: wl.hostIfname,
            ...(mtu ? { mtu } : {}),
            numQueues: conf.num_queues,
            hostMac: HOST_MAC,
            containerMac: mac,
            addresses: ips.map(hostPrefix),
            allowIpForwarding: conf.container_settings.allow_ip_forwarding,
          })
          .catch((e: unknown) => {
            throw explainVethFailure(e, ctx.netns, ctx.ifname);
          });
        rb.push(`veth ${wl.hostIfname}`, () => dp.teardown({ netnsPath: ctx.netns, ifname: ctx.ifname, hostIfname: wl.hostIfname }));
        return st;
      }),
      // Without the IPAM transaction (delegated IPAM, a repeated ADD), the
      // endpoint is written while the veth is being created; both push their
      // undo only once done, and both are awaited before any rollback.
      piggy.written ? Promise.resolve() : step('writing the workload endpoint', () => writeEndpoint(ds, wep, rb)),
    ]);
    if (veth.status === 'rejected') throw veth.reason;
    if (endpoint.status === 'rejected') throw endpoint.reason;
    const state = veth.value;

    if (policyWait) {
      const policySignal = runtime.policySignal();
      const r = await policyWait.waitForPolicyProgrammed({
        endpointKey: wep.metadata.name,
        ...(sdir ? { statusDir: sdir } : {}),
        timeoutMs: conf.policy_setup_timeout_seconds! * 1000,
        containerId: ctx.containerId,
        ...(policySignal ? { signal: policySignal } : {}),
        log,
      });
      log.debug('policy setup wait', { programmed: r.programmed, waitedMs: r.waitedMs });
    }

    const ipConfigs: CniIPConfig[] = [];
    const routes: CniRoute[] = [];
    if (v4) {
      ipConfigs.push({ address: hostPrefix(v4), gateway: GATEWAY_V4, interface: 1 });
      routes.push({ dst: '0.0.0.0/0', gw: GATEWAY_V4 });
    }
    if (v6) {
      const gw6 = linkLocalFromMac(HOST_MAC);
      ipConfigs.push({ address: hostPrefix(v6), gateway: gw6, interface: 1 });
      routes.push({ dst: '::/0', gw: gw6 });
    }
    log.info('ADD done', { ips, hostIfname: wl.hostIfname, endpoint: wep.metadata.name });
    return {
      interfaces: [
        { name: wl.hostIfname, mac: HOST_MAC, ...(mtu ? { mtu } : {}) },
        { name: ctx.ifname, mac: state.containerMac, sandbox: ctx.netns, mtu: state.mtu },
      ],
      ips: ipConfigs,
      routes,
    };
  } catch (e) {
    await rb.unwind();
    throw e;
  }
}

/** A random unicast, locally administered MAC (the kernel's choice for a veth is the same kind). */
function randomContainerMac(): string {
  const b = randomBytes(6);
  b[0] = (b[0]! & 0xfe) | 0x02;
  return [...b].map((x) => x.toString(16).padStart(2, '0')).join(':');
}

type IpamModule = typeof import('../../ipam/index.js');
interface EarlyIpam {
  ipam: InstanceType<IpamModule['Ipam']>;
  held: Promise<string[]>;
  pools: Promise<Awaited<ReturnType<Datastore['list']>>>;
}

/** Starts the reads our IPAM needs (this container's handle, the pools); awaited later, in addresses(). */
async function earlyIpamReads(ctx: PluginContext, wl: Workload, ds: Datastore): Promise<EarlyIpam> {
  const ipam = await ipamFor(ctx, ds, 'assign');
  const held = ipam.handleAddresses(wl.handleID);
  const pools = ds.list('IPPool');
  // Awaited only once the datastore is known ready; a failure meanwhile must not go unhandled.
  held.catch(() => undefined);
  pools.catch(() => undefined);
  return { ipam, held, pools };
}

/** Chooses and reserves the pod's addresses; returns bare IPs. */
async function addresses(
  ctx: PluginContext,
  wl: Workload,
  ds: Datastore,
  pod: PodLike | undefined,
  nsAnnotations: Record<string, string>,
  rb: Rollback,
  early: EarlyIpam | undefined,
  piggy: EndpointPiggyback,
): Promise<{ ips: string[]; floating?: string[]; repeated?: boolean }> {
  const { conf, log } = ctx;
  if (!isNetpluginIpam(conf.ipam) || !early) return delegatedAddresses(ctx, wl, ds, rb);
  const ipamConf = conf.ipam;
  const { ipam } = early;

  // A repeated ADD for the same container and network returns what it already holds.
  const held = await step('reading IPAM', () => early.held);
  const pools = poolsFromResources((await step('listing IP pools', () => early.pools)).items as Resource<'IPPool'>[]);
  const req = resolveWorkloadOptions({
    podAnnotations: pod?.metadata.annotations ?? {},
    namespaceAnnotations: pod ? nsAnnotations : {},
    ...(wl.pod ? { pod: wl.pod } : {}),
    conf: { ipam: ipamConf, feature_control: conf.feature_control },
    ...(ctx.args.IP ? { cniArgsIP: ctx.args.IP } : {}),
    pools,
    log,
  });
  for (const w of req.warnings) log.warn(w);
  if (held.length) {
    log.info('ADD repeated for a container that already holds addresses; reusing them', { ips: held });
    return { ips: held.map(bareIP), repeated: true, ...(req.floatingIPs ? { floating: req.floatingIPs } : {}) };
  }
  if (req.noIpamIPs) return { ips: req.noIpamIPs, ...(req.floatingIPs ? { floating: req.floatingIPs } : {}) };

  const attrs: Record<string, string> = { containerID: ctx.containerId };
  if (wl.pod) Object.assign(attrs, { namespace: wl.pod.namespace, pod: wl.pod.name });
  // The pod's UID lets IPAM GC tell a re-created pod of the same name from the one that got the address.
  if (wl.pod && ctx.args.K8S_POD_UID) attrs['podUID'] = ctx.args.K8S_POD_UID;
  piggy.floating = req.floatingIPs;
  // One transaction takes the addresses and writes the endpoint: the step names both.
  const assigned = await step('assigning addresses and writing the workload endpoint', async () => {
    rb.push(`addresses of ${wl.handleID}`, () => ipam.releaseByHandle(wl.handleID));
    rb.push(`endpoint ${wl.endpointName}`, () => piggy.undo());
    return ipam.assign({
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
    });
  });
  ctx.runtime.ipam.observer?.assigned(assigned.length);
  if (!assigned.length) throw new CniError(ErrorCodes.InvalidNetworkConfig, 'ipam: neither assign_ipv4 nor assign_ipv6 is "true"; the pod would get no address');
  return { ips: assigned.map((a) => a.ip), ...(req.floatingIPs ? { floating: req.floatingIPs } : {}) };
}

/** Other IPAM types (host-local): run the plugin from CNI_PATH, with `usePodCidr` resolved to the node's pod CIDRs. */
async function delegatedAddresses(ctx: PluginContext, wl: Workload, ds: Datastore, rb: Rollback): Promise<{ ips: string[]; repeated?: boolean }> {
  const { conf, log } = ctx;
  // A repeated ADD must not ask host-local again: it refuses a second allocation
  // for the same container ("duplicate allocation is not allowed"). This
  // container's endpoint records what it got.
  const mine = await step('reading the workload endpoint', () => ownEndpoint(ds, wl, ctx.containerId));
  if (mine?.spec.ipNetworks.length) {
    log.info('ADD repeated for a container that already holds addresses; reusing them', { ips: mine.spec.ipNetworks });
    return { ips: mine.spec.ipNetworks.map(bareIP), repeated: true };
  }
  const ipamConf = await resolvePodCidrs(ctx, wl, ds);
  const delegateConf = { ...ctx.rawConf, ipam: ipamConf };
  const inv = {
    type: conf.ipam.type,
    containerId: ctx.containerId,
    netns: ctx.netns,
    ifname: ctx.ifname,
    cniArgs: ctx.env['CNI_ARGS'] ?? '',
    path: ctx.path,
    conf: delegateConf,
    env: ctx.env,
  };
  const raw = await step(`delegated IPAM ${conf.ipam.type}`, async () => {
    const r = await execDelegate({ ...inv, command: 'ADD' });
    rb.push(`${conf.ipam.type} allocation`, () => execDelegate({ ...inv, command: 'DEL' }));
    return r;
  });
  const result = parseResult(raw, `${conf.ipam.type} result`, ctx.cniVersion);
  const ips = (result.ips ?? []).map((i) => bareIP(i.address));
  if (!ips.length) throw new CniError(ErrorCodes.DelegateFailure, `delegated IPAM ${conf.ipam.type} returned no addresses`);
  return { ips };
}

/** Replaces host-local's `usePodCidr` / `usePodCidrIPv6` subnets with the node's pod CIDRs (the operator's HostLocal mode). */
export async function resolvePodCidrs(ctx: Pick<PluginContext, 'conf' | 'runtime'>, wl: Workload, ds: Datastore | undefined, opts: { release?: boolean } = {}): Promise<Record<string, unknown>> {
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
          `ipam: subnet "${v}" needs the node's ${v === 'usePodCidr' ? 'IPv4' : 'IPv6'} pod CIDR, but node ${wl.node} has ${cidrs.length ? cidrs.join(', ') : 'none'}; set the node's podCIDRs (kube-controller-manager --allocate-node-cidrs) or give a subnet`,
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

async function nodePodCidrs({ conf, runtime }: Pick<PluginContext, 'conf' | 'runtime'>, wl: Workload, ds: Datastore): Promise<string[]> {
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

/**
 * The kernel's refusals that mean the runtime's input is wrong, said in its
 * terms (CNI_NETNS, CNI_IFNAME) rather than as a bare errno.
 */
function explainVethFailure(e: unknown, netns: string, ifname: string): unknown {
  const nl = e as { op?: unknown; code?: unknown } | null;
  if (!nl || typeof nl.op !== 'string' || typeof nl.code !== 'string') return e;
  if (nl.op === 'openNetns' && nl.code === 'ENOENT') {
    return new CniError(ErrorCodes.InvalidEnvironment, `CNI_NETNS ${netns} does not exist; the runtime must pass the path of the pod's network namespace (is the sandbox already gone?)`);
  }
  if (nl.op === 'openNetns' && (nl.code === 'EINVAL' || nl.code === 'ENOTDIR')) {
    return new CniError(ErrorCodes.InvalidEnvironment, `CNI_NETNS ${netns} is not a network namespace (${nl.code}); pass /var/run/netns/<name> or /proc/<pid>/ns/net`);
  }
  if (nl.op === 'RTM_NEWLINK' && nl.code === 'EEXIST') {
    // The host end was checked and a stale one removed just before, so the clash is inside the pod.
    return new CniError(ErrorCodes.DataplaneFailure, `interface ${ifname} already exists in the pod's namespace ${netns} (EEXIST); CNI_IFNAME must name an interface the pod does not have yet`);
  }
  return e;
}

/** This attachment's endpoint if an earlier ADD of this very container wrote it (not an older sandbox of the pod). */
async function ownEndpoint(ds: Datastore, wl: Workload, containerId: string): Promise<Resource<'WorkloadEndpoint'> | undefined> {
  try {
    const wep = await ds.get('WorkloadEndpoint', wl.endpointName, wl.namespace);
    return wep.spec.containerID === containerId ? wep : undefined;
  } catch (e) {
    if (DatastoreError.is(e, 'NotFound')) return undefined;
    throw e;
  }
}

/** The container MAC recorded by an earlier ADD of this very container. */
async function previousMac(ds: Datastore, wl: Workload, containerId: string): Promise<string | undefined> {
  return (await ownEndpoint(ds, wl, containerId))?.spec.mac;
}

/**
 * The workload endpoint as a write of the IPAM transaction (the allocator's
 * Piggyback): a create guarded by its absence; when that guard fails (an older
 * sandbox of the pod left its endpoint), the next attempt takes it over with
 * an update guarded by the revision just read. Also its undo for a failed ADD.
 */
class EndpointPiggyback implements Piggyback {
  floating: string[] | undefined;
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
    const wep = this.build(assigned.map((a) => a.ip), this.floating);
    if (!again) return [{ op: 'create', res: wep }];
    try {
      this.prev = await this.ds.get('WorkloadEndpoint', wep.metadata.name, wep.metadata.namespace);
    } catch (e) {
      if (!DatastoreError.is(e, 'NotFound')) throw e;
      this.prev = undefined;
      return [{ op: 'create', res: wep }];
    }
    return [{ op: 'update', res: { ...wep, metadata: { ...wep.metadata, resourceVersion: this.prev.metadata.resourceVersion! } } }];
  }

  committed(stored: Array<Resource | undefined>): void {
    this.written = stored[0] as Resource<'WorkloadEndpoint'>;
  }

  /** Rollback: delete what this ADD created, give a taken-over endpoint back, or (answer lost) delete it if it is ours. */
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
      await this.ds.update({ ...this.prev, metadata: { ...this.prev.metadata, resourceVersion: cur.metadata.resourceVersion! } }).catch(ok);
      return;
    }
    await this.ds.delete('WorkloadEndpoint', cur.metadata.name, { ...(ns ? { namespace: ns } : {}), revision: cur.metadata.resourceVersion! }).catch(ok);
  }
}

/** Creates the endpoint, or takes it over from an older sandbox of the same pod. */
async function writeEndpoint(ds: Datastore, wep: Resource<'WorkloadEndpoint'>, rb: Rollback): Promise<void> {
  const ns = wep.metadata.namespace;
  for (let attempt = 0; ; attempt++) {
    try {
      const created = await ds.create(wep);
      rb.push(`endpoint ${wep.metadata.name}`, () =>
        ds.delete('WorkloadEndpoint', wep.metadata.name, { ...(ns ? { namespace: ns } : {}), ...(created.metadata.resourceVersion ? { revision: created.metadata.resourceVersion } : {}) }).catch((e) => {
          if (!DatastoreError.is(e, 'NotFound')) throw e;
        }),
      );
      return;
    } catch (e) {
      if (!DatastoreError.is(e, 'AlreadyExists') || attempt > 5) throw e;
    }
    try {
      const cur = await ds.get('WorkloadEndpoint', wep.metadata.name, ns);
      const prev = structuredClone(cur);
      const next = { ...wep, metadata: { ...wep.metadata, resourceVersion: cur.metadata.resourceVersion! } };
      const updated = await ds.update(next);
      rb.push(`endpoint ${wep.metadata.name} (restore)`, async () => {
        if (prev.spec.containerID === wep.spec.containerID) return;
        await ds.update({ ...prev, metadata: { ...prev.metadata, resourceVersion: updated.metadata.resourceVersion! } });
      });
      return;
    } catch (e) {
      if (!DatastoreError.is(e, 'NotFound') && !DatastoreError.is(e, 'Conflict')) throw e;
    }
  }
}
