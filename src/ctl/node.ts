// `netpluginctl delete node NAME`: deletes the Node and releases its IPAM
// state (tunnel addresses, block affinities), saying what it released.
import type { Datastore } from '../datastore/types.js';
import { DatastoreError } from '../errors.js';
import { releaseNodeIpam } from '../ipam/index.js';
import type { CtlIO } from './io.js';

export async function deleteNode(ds: Datastore, io: CtlIO, name: string): Promise<void> {
  let gone = true;
  try {
    await ds.delete('Node', name);
  } catch (e) {
    // Released anyway: a Node deleted by other means may have left IPAM state behind.
    if (!DatastoreError.is(e, 'NotFound')) throw e;
    gone = false;
  }
  const r = await releaseNodeIpam(ds, name);
  const nothing =
    !r.tunnelAddresses.length && !r.blocksReleased.length && !r.blocksUnaffined.length && !r.affinitiesDeleted;
  if (!gone && nothing) throw new DatastoreError('NotFound', `node ${name} not found`);
  io.stdout(`node/${name} ${gone ? 'deleted' : 'was already gone'}\n`);
  for (const t of r.tunnelAddresses) io.stdout(`  released tunnel address ${t.ip} (handle ${t.handle})\n`);
  for (const b of r.blocksReleased) io.stdout(`  released block ${b} (empty, back to its pool)\n`);
  for (const b of r.blocksUnaffined)
    io.stdout(
      `  block ${b.cidr} no longer affine to ${name}; its ${b.allocated} allocated ` +
        `address${b.allocated === 1 ? '' : 'es'} stay until their workloads are deleted\n`,
    );
  if (nothing) io.stdout(`  no IPAM state to release\n`);
}
