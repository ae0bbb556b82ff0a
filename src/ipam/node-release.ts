// Releasing a node's IPAM state when the node is gone: its tunnel addresses
// (by their handles) and its block affinities. An empty block goes back to its
// pool; a block still holding addresses (pods not cleaned up yet) keeps them
// but loses its affinity, so any node may later take it over. Used by
// `netpluginctl delete node` and by the kube-controllers' node controller.
import { DatastoreError } from '../errors.js';
import { blockName } from '../model/names.js';
import type { Datastore } from '../datastore/types.js';
import { Ipam } from './allocator.js';
import type { IpamOptions } from './allocator.js';

/** The IPAM handles of a node's tunnel addresses. */
export const TUNNEL_HANDLES = {
  vxlan4: (node: string) => `vxlan-tunnel-addr-${node}`,
  vxlan6: (node: string) => `vxlan-v6-tunnel-addr-${node}`,
  ipip: (node: string) => `ipip-tunnel-addr-${node}`,
} as const;

interface NodeRelease {
  /** Tunnel addresses released, with their handle. */
  tunnelAddresses: Array<{ handle: string; ip: string }>;
  /** Empty blocks returned to their pool. */
  blocksReleased: string[];
  /** Blocks that still hold addresses: affinity removed, allocations kept. */
  blocksUnaffined: Array<{ cidr: string; allocated: number }>;
  affinitiesDeleted: number;
}

function notFound(e: unknown): boolean {
  return DatastoreError.is(e, 'NotFound');
}

export async function releaseNodeIpam(ds: Datastore, node: string, opts: IpamOptions = {}): Promise<NodeRelease> {
  const ipam = new Ipam(ds, { lock: null, ...opts });
  const out: NodeRelease = { tunnelAddresses: [], blocksReleased: [], blocksUnaffined: [], affinitiesDeleted: 0 };
  // Listed first: releasing a tunnel address may empty a block, which the
  // allocator then returns to the pool itself; it still counts as released here.
  const affs = (await ds.list('BlockAffinity')).items.filter((x) => x.spec.node === node);
  for (const h of Object.values(TUNNEL_HANDLES)) {
    const handle = h(node);
    for (const ip of await ipam.releaseByHandle(handle)) out.tunnelAddresses.push({ handle, ip });
  }
  for (const a of affs) {
    for (let attempt = 0; attempt < 10; attempt++) {
      let b;
      try {
        b = await ds.get('IPAMBlock', blockName(a.spec.cidr));
      } catch (e) {
        if (!notFound(e)) throw e;
        out.blocksReleased.push(a.spec.cidr);
        break;
      }
      if (b.spec.affinity !== `host:${node}`) break;
      const allocated = b.spec.allocations.filter((x) => x != null).length;
      try {
        if (allocated === 0) {
          await ds.delete('IPAMBlock', b.metadata.name, { revision: b.metadata.resourceVersion });
          out.blocksReleased.push(b.spec.cidr);
        } else {
          await ds.update({ ...b, spec: { ...b.spec, affinity: null } });
          out.blocksUnaffined.push({ cidr: b.spec.cidr, allocated });
        }
        break;
      } catch (e) {
        if (DatastoreError.is(e, 'Conflict')) continue;
        if (notFound(e)) break;
        throw e;
      }
    }
    try {
      await ds.delete('BlockAffinity', a.metadata.name);
      out.affinitiesDeleted++;
    } catch (e) {
      if (!notFound(e)) throw e;
    }
  }
  return out;
}
