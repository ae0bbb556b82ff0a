// GC (CNI 1.1): removes what this network holds for attachments the runtime no
// longer knows (not in cni.dev/valid-attachments): addresses by handle, this
// node's workload endpoints and their host veths.
//
// Only what is provably this network's: handles whose network part is exactly
// this network's name (ipam/handle.ts), endpoints of containers that held such
// a handle, and host veths that are ours on the link itself (see
// removeOwnHostVeth). Endpoint fields are never trusted to name a link: on the
// Kubernetes datastore they come from pod annotations a tenant can edit.
import { validAttachments } from '../../cni/dispatch.js';
import { isNetpluginIpam } from '../../config/index.js';
import { DatastoreError } from '../../errors.js';
import { hostVethKey, hostVethName } from '../../model/names.js';
import { parseHandleID } from '../../ipam/index.js';
import { DEFAULT_VETH_PREFIX, HOST_MAC, identify, ipamFor, type PluginContext } from './common.js';

export async function gc(ctx: PluginContext): Promise<void> {
  const { conf, log } = ctx;
  const valid = validAttachments(ctx.rawConf);
  const validIds = new Set(valid.map((a) => a.containerID));
  const node = identify(conf, { containerId: 'gc', ifname: 'eth0', args: {} }).node;
  const ds = await ctx.runtime.datastore(conf);

  // Containers that held an address of this network and are gone. With
  // delegated IPAM (host-local) nothing in the datastore says which network an
  // endpoint belongs to, so GC of such a network leaves endpoints alone (DEL
  // removes them); it never guesses across networks.
  const stale = new Set<string>();
  if (isNetpluginIpam(conf.ipam)) {
    const ipam = await ipamFor(ctx, ds);
    for (const h of await ipam.listHandles({ network: conf.name })) {
      const cid = parseHandleID(h.handleID)!.containerId;
      // A handle written before the format escaped dots (`<net>.x.<cid>` of a
      // network named `<net>.x`) parses as a dotted container ID of ours;
      // runtimes' container IDs are hex, so dotted ones are left alone.
      if (validIds.has(cid) || cid.includes('.')) continue;
      stale.add(cid);
      const released = await ipam.releaseByHandle(h.handleID);
      log.info('GC released addresses of a stale attachment', { handle: h.handleID, released });
    }
  }
  // Host veths a crashed agent trashed but never deleted (no pod holds them any more).
  const dp = await ctx.runtime.dataplane();
  const purged = await dp.purgeTrash(HOST_MAC);
  if (purged) log.info('GC deleted trashed veths left by an agent', { count: purged });
  if (!stale.size) return;

  const prefix = conf.host_veth_prefix ?? DEFAULT_VETH_PREFIX;
  // Only this node's endpoints are read (on Kubernetes the API server filters the pods by node).
  const weps = await ds.list('WorkloadEndpoint', { node });
  for (const w of weps.items) {
    if (!stale.has(w.spec.containerID) || validIds.has(w.spec.containerID)) continue;
    // The host veth name is derived again from the endpoint's identity (as ADD
    // derived it), never taken from spec.interfaceName.
    const ns = w.metadata.namespace;
    const key = hostVethKey({ ...w.spec, namespace: ns });
    await dp.teardown({ ifname: w.spec.endpoint, hostIfname: hostVethName(prefix, key), hostMac: HOST_MAC });
    await ds
      .delete('WorkloadEndpoint', w.metadata.name, {
        ...(ns ? { namespace: ns } : {}),
        ...(w.metadata.resourceVersion ? { revision: w.metadata.resourceVersion } : {}),
      })
      .catch((e) => {
        if (!DatastoreError.is(e, 'NotFound') && !DatastoreError.is(e, 'Conflict')) throw e;
      });
    log.info('GC removed a stale endpoint', { endpoint: w.metadata.name, containerID: w.spec.containerID });
  }
}
