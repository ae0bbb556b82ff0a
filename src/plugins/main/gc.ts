// GC (CNI 1.1): removes what this network holds for attachments the runtime no
// longer knows (not in cni.dev/valid-attachments): addresses by handle, this
// node's workload endpoints and their host veths.
import type { CniContext } from '../../cni/types.js';
import { validAttachments } from '../../cni/dispatch.js';
import { isNetpluginIpam, type Netconf } from '../../config/index.js';
import { DatastoreError } from '../../errors.js';
import { dataplane } from './runtime.js';
import { datastoreFor, identify, ipamLockPath } from './common.js';

export async function gc(ctx: CniContext<Netconf>): Promise<void> {
  const { conf, log } = ctx;
  const valid = validAttachments(ctx.rawConf);
  const validIds = new Set(valid.map((a) => a.containerID));
  const node = identify(conf, { containerId: 'gc', ifname: 'eth0', args: {} }).node;
  const ds = await datastoreFor(conf);
  const weps = await ds.list('WorkloadEndpoint');

  // Endpoints carry no network name; a container whose addresses come from
  // another network (a second netplugin network, e.g. under Multus) and none
  // from this one is that network's to collect.
  const otherNetworks = new Set<string>();
  if (isNetpluginIpam(conf.ipam)) {
    const { Ipam } = await import('../../ipam/index.js');
    const lockPath = ipamLockPath(conf);
    const ipam = new Ipam(ds, { log, ...(lockPath ? { lockPath } : {}) });
    const prefix = `${conf.name}.`;
    const all = await ipam.listHandles();
    const ours = new Set(all.filter((h) => h.handleID.startsWith(prefix)).map((h) => h.handleID.slice(prefix.length)));
    for (const h of all) {
      if (h.handleID.startsWith(prefix)) continue;
      for (const w of weps.items) if (h.handleID.endsWith(`.${w.spec.containerID}`) && !ours.has(w.spec.containerID)) otherNetworks.add(w.spec.containerID);
    }
    for (const cid of ours) {
      if (validIds.has(cid)) continue;
      const handle = prefix + cid;
      const released = await ipam.releaseByHandle(handle);
      log.info('GC released addresses of a stale attachment', { handle, released });
    }
  }

  const dp = await dataplane();
  for (const w of weps.items) {
    if (w.spec.node !== node || validIds.has(w.spec.containerID) || otherNetworks.has(w.spec.containerID)) continue;
    await dp.teardown({ ifname: w.spec.endpoint, hostIfname: w.spec.interfaceName });
    await ds.delete('WorkloadEndpoint', w.metadata.name, { ...(w.metadata.namespace ? { namespace: w.metadata.namespace } : {}), ...(w.metadata.resourceVersion ? { revision: w.metadata.resourceVersion } : {}) }).catch((e) => {
      if (!DatastoreError.is(e, 'NotFound') && !DatastoreError.is(e, 'Conflict')) throw e;
    });
    log.info('GC removed a stale endpoint', { endpoint: w.metadata.name, containerID: w.spec.containerID });
  }
}
