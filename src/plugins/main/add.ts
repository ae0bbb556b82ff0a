// ADD: readiness gates -> datastore ready -> pod context -> addresses (our IPAM
// in-process, or a delegated IPAM plugin) -> veth and routes -> workload
// endpoint -> policy-setup wait -> result. Every side effect pushes its undo,
// so a failure at any step leaves nothing behind.
import type { CniResult, CniIPConfig, CniRoute } from '../../cni/types.js';
import { isNetpluginIpam } from '../../config/index.js';
import { CniError, ErrorCodes } from '../../errors.js';
import { GATEWAY_V4, HostLinkInUseError } from '../../dataplane/workload.js';
import { linkLocalFromMac } from '../../dataplane/names.js';
import { needsPodLookup, readWorkloadContext } from '../../workload/workload.js';
import { poolsFromResources } from '../../workload/annotations.js';
import type { Resource } from '../../model/resources.js';
import { hostPrefix } from '../../net/cidr.js';
import { Rollback, step } from './rollback.js';
import { delegatedAddresses, earlyIpamReads, ipamAddresses } from './addresses.js';
import { EndpointPiggyback, endpointBuilder, previousMac, randomContainerMac, writeEndpoint } from './endpoint.js';
import { HOST_MAC, checkClusterReady, identify, statusDir, type PluginContext } from './common.js';
import { podMtu } from '../../config/mtu.js';
import { mark } from '../../observe/timeline.js';

export async function add(ctx: PluginContext): Promise<CniResult> {
  const { conf, log, runtime } = ctx;
  if (!ctx.netns) throw new CniError(ErrorCodes.InvalidEnvironment, 'CNI_NETNS is required for ADD');
  const wl = identify(conf, ctx);
  // With policy on, the host veth's name is marked stale before anything of this pod is written:
  // a previous pod of the same name (deleted while the agent was down) leaves it no rules. The nft
  // code loads lazily: an ADD without policy does not pay for it. The agent skips the mark for a
  // name its table surely lacks (dropped as unknown already).
  const marked =
    conf.policy?.type === 'k8s' && runtime.policySignal()?.mayBeKnown?.(wl.hostIfname) !== false
      ? import('../../dataplane/nft/programmed.js').then((m) => m.markStale(wl.hostIfname))
      : undefined;
  marked?.catch(() => undefined); // awaited below

  if (conf.readiness_gates?.length) {
    await step('readiness gates', async () => {
      // Lazy: only an ADD with readiness gates loads the HTTP probes.
      const { waitForReadinessGates } = await import('../../workload/readiness.js');
      await waitForReadinessGates(conf.readiness_gates!, {
        log,
        ...(conf.readiness_gate_timeout_seconds ? { deadlineMs: conf.readiness_gate_timeout_seconds * 1000 } : {}),
      });
    });
  }

  const ds = await step('checking the datastore', () => runtime.datastore(conf));
  mark('datastore client');
  // The IPAM reads do not depend on readiness and write nothing: issue them
  // with the ClusterInformation read, so the three cost one round trip.
  const ourIpam = isNetpluginIpam(conf.ipam) ? conf.ipam : undefined;
  const early = ourIpam ? await earlyIpamReads(ctx, ds) : undefined;
  await step('checking the datastore', () => checkClusterReady(ds));
  mark('cluster ready');

  // The pod (when this ADD reads it) and its resolved options in one call;
  // with our IPAM the pool list read above is awaited there.
  const readPod = wl.pod && needsPodLookup(conf, ctx.args, log) ? wl.pod : undefined;
  const work = await readWorkloadContext({
    ...(readPod
      ? {
          pod: {
            ref: readPod,
            open: () =>
              step('reading the pod', async () => {
                const kube = await runtime.kubeClient(conf);
                return {
                  source: await runtime.podSource(conf, kube, wl.node, ctx.args.K8S_POD_UID),
                  apiServer: kube.server,
                };
              }),
          },
        }
      : {}),
    ...(early && ourIpam
      ? {
          resolve: {
            ...(wl.pod ? { pod: wl.pod } : {}),
            conf: { ipam: ourIpam, feature_control: conf.feature_control },
            ...(ctx.args.IP ? { cniArgsIP: ctx.args.IP } : {}),
            pools: () =>
              step('listing IP pools', async () =>
                poolsFromResources((await early.pools).items as Array<Resource<'IPPool'>>),
              ),
            log,
          },
        }
      : {}),
  });
  const pod = work.pod;
  mark('workload context');
  for (const w of work.options?.warnings ?? []) log.warn(w);

  if (marked) await step('isolating the pod interface until its policy is programmed', () => marked);
  const rb = new Rollback(log);
  try {
    const sdir = statusDir(conf);
    // Lazy: only an ADD that waits for its policy loads the status protocol.
    const policyWait = conf.policy_setup_timeout_seconds ? await import('../../policy-status/index.js') : undefined;
    const statusKey = policyWait?.endpointStatusKey(wl.namespace, wl.endpointName);
    if (policyWait) await policyWait.clearPolicyStatus(statusKey!, sdir);
    // The container MAC is chosen here rather than by the kernel, so the
    // endpoint (which records it) can be written before or while the veth is
    // created. A repeated ADD (same container and ifname) rebuilds the pair
    // with the MAC it had, so the runtime gets the very result it got the
    // first time (previousMac below).
    const freshMac = randomContainerMac();
    const endpointFor = endpointBuilder(ctx, wl, pod);
    // Without a netconf mtu, the agent's pod MTU (leaves room for VXLAN/IPIP headers).
    const mtu = podMtu(conf);
    const dp = await runtime.dataplane();
    const netns = ctx.netns;
    const undoVeth = () => dp.teardown({ netnsPath: netns, ifname: ctx.ifname, hostIfname: wl.hostIfname });
    const createVeth = (addrs: string[], mac: string) =>
      step('creating the veth pair', () =>
        dp
          .setup({
            netnsPath: netns,
            ifname: ctx.ifname,
            hostIfname: wl.hostIfname,
            ...(mtu ? { mtu } : {}),
            numQueues: conf.num_queues,
            hostMac: HOST_MAC,
            containerMac: mac,
            addresses: addrs.map(hostPrefix),
            allowIpForwarding: conf.container_settings.allow_ip_forwarding,
          })
          .catch((e: unknown) => {
            throw explainVethFailure(e, netns, ctx.ifname);
          }),
      );
    // With our IPAM the endpoint goes in the transaction that takes the
    // addresses: an ADD costs one datastore write. And the veth pair is made
    // while that transaction commits (its addresses are known just before it
    // is sent), so an ADD waits for the slower of the two, not for both. The
    // pod's process does not run before ADD returns, and ADD returns only
    // once the transaction committed the very addresses the veth has (or the
    // pair is made again with the committed ones; or undone with the rest).
    const piggy = new EndpointPiggyback(ds, ctx.containerId, (ips, floating) => endpointFor(ips, floating, freshMac));
    let speculative: { ips: string[]; made: Promise<Awaited<ReturnType<typeof createVeth>>> } | undefined;
    piggy.onAttempt = (tentative) => {
      if (speculative) return;
      // Started on the event loop's next turn: the dataplane's netlink work runs
      // on this thread, so the transaction's request must go out first.
      const made = new Promise<void>((r) => setImmediate(r)).then(() => createVeth(tentative, freshMac));
      void made.then(
        () => mark('veth made'),
        () => undefined,
      );
      made.catch(() => undefined); // awaited below, or by the rollback
      speculative = { ips: tentative, made };
      // Undone only if it was made: a failed setup touched nothing of the pod's (an
      // interface of that name it already had is not ours to delete).
      rb.push(`veth ${wl.hostIfname}`, async () => {
        if (await madeOk(made)) await undoVeth();
      });
    };
    const { ips, floating, repeated } =
      early && work.options
        ? await ipamAddresses(ctx, wl, work.options, rb, early, piggy)
        : await delegatedAddresses(ctx, wl, ds, rb);
    mark('addresses committed');
    const v4 = ips.find((a) => !a.includes(':'));
    const v6 = ips.find((a) => a.includes(':'));
    const containerMac = repeated ? await previousMac(ds, wl, ctx.containerId) : undefined;
    const mac = piggy.written ? freshMac : (containerMac ?? freshMac);
    const wep = piggy.written ?? endpointFor(ips, floating, mac);
    const made = speculative;

    const [veth, endpoint] = await Promise.allSettled([
      (async () => {
        if (made && mac === freshMac && made.ips.length === ips.length && made.ips.every((a) => ips.includes(a)))
          return made.made;
        if (made) {
          // The transaction that committed was not the first attempt's (a retry took other addresses), or this is a
          // repeated ADD: the pair made meanwhile goes, and is made again as committed.
          if (await madeOk(made.made)) await undoVeth();
        }
        const st = await createVeth(ips, mac);
        if (!made) rb.push(`veth ${wl.hostIfname}`, undoVeth);
        return st;
      })(),
      // Without the IPAM transaction (delegated IPAM, a repeated ADD), the
      // endpoint is written while the veth is being created; both push their
      // undo only once done, and both are awaited before any rollback.
      piggy.written ? Promise.resolve() : step('writing the workload endpoint', () => writeEndpoint(ds, wep, rb)),
    ]);
    if (veth.status === 'rejected') throw veth.reason;
    if (endpoint.status === 'rejected') throw endpoint.reason;
    const state = veth.value;
    mark('veth and endpoint done');

    if (policyWait) {
      const policySignal = runtime.policySignal();
      const r = await policyWait.waitForPolicyProgrammed({
        endpointKey: statusKey!,
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

/** Whether a veth setup succeeded (waits for it). */
function madeOk(p: Promise<unknown>): Promise<boolean> {
  return p.then(
    () => true,
    () => false,
  );
}

/**
 * The kernel's refusals that mean the runtime's input is wrong, said in its
 * terms (CNI_NETNS, CNI_IFNAME) rather than as a bare errno.
 */
function explainVethFailure(e: unknown, netns: string, ifname: string): unknown {
  // The dataplane's own message names the host link, says it is not ours and the fix.
  if (e instanceof HostLinkInUseError) return new CniError(ErrorCodes.DataplaneFailure, e.message);
  const nl = e as { op?: unknown; code?: unknown } | null;
  if (!nl || typeof nl.op !== 'string' || typeof nl.code !== 'string') return e;
  if (nl.op === 'openNetns' && nl.code === 'ENOENT') {
    return new CniError(
      ErrorCodes.InvalidEnvironment,
      `CNI_NETNS ${netns} does not exist; the runtime must pass the path of the pod's network namespace (is the ` +
        `sandbox already gone?)`,
    );
  }
  if (nl.op === 'openNetns' && (nl.code === 'EINVAL' || nl.code === 'ENOTDIR')) {
    return new CniError(
      ErrorCodes.InvalidEnvironment,
      `CNI_NETNS ${netns} is not a network namespace (${nl.code}); pass /var/run/netns/<name> or /proc/<pid>/ns/net`,
    );
  }
  if (nl.op === 'RTM_NEWLINK' && nl.code === 'EEXIST') {
    // The host end was checked just before (a stale veth of ours removed, a
    // foreign link reported as HostLinkInUseError), so the clash is inside the pod.
    return new CniError(
      ErrorCodes.DataplaneFailure,
      `interface ${ifname} already exists in the pod's namespace ${netns} (EEXIST); CNI_IFNAME must name an ` +
        `interface the pod does not have yet`,
    );
  }
  return e;
}
