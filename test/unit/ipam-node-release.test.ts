// Releasing a deleted node's IPAM state: tunnel addresses by handle, empty
// blocks back to the pool, non-empty blocks unaffined with their allocations
// kept, affinities deleted; other nodes untouched.
import { describe, expect, it } from 'vitest';
import { MemoryDatastore } from '../../src/datastore/memory.js';
import { API_VERSION } from '../../src/model/resources.js';
import { createIpam, releaseNodeIpam } from '../../src/ipam/index.js';

async function setup() {
  const ds = new MemoryDatastore();
  await ds.create({
    apiVersion: API_VERSION,
    kind: 'IPPool',
    metadata: { name: 'p' },
    spec: { cidr: '10.60.0.0/24', blockSize: 28, vxlanMode: 'Always' },
  });
  const ipam = createIpam(ds, { lock: 'none' });
  return { ds, ipam };
}

describe('releaseNodeIpam', () => {
  it('releases tunnel addresses and empty blocks, unaffines blocks still in use, leaves other nodes alone', async () => {
    const { ds, ipam } = await setup();
    const [tun] = await ipam.assign({
      handleID: 'vxlan-tunnel-addr-n1',
      node: 'n1',
      attrs: {},
      assignIPv4: true,
      assignIPv6: false,
      use: 'Tunnel',
    });
    // Fill n1's first block so a pod lands in a second one.
    for (let i = 0; i < 16; i++)
      await ipam.assign({ handleID: `net.n1-${i}`, node: 'n1', attrs: {}, assignIPv4: true, assignIPv6: false });
    const [other] = await ipam.assign({
      handleID: 'net.n2',
      node: 'n2',
      attrs: {},
      assignIPv4: true,
      assignIPv6: false,
    });
    // Pods of n1 in its first block go; the one in the second block stays (not cleaned up yet).
    for (let i = 0; i < 15; i++) await ipam.releaseByHandle(`net.n1-${i}`);
    const r = await releaseNodeIpam(ds, 'n1');
    expect(r.tunnelAddresses).toEqual([{ handle: 'vxlan-tunnel-addr-n1', ip: tun!.ip }]);
    expect(r.blocksReleased).toEqual([tun!.block]);
    expect(r.blocksUnaffined).toEqual([{ cidr: '10.60.0.16/28', allocated: 1 }]);
    const blocks = (await ds.list('IPAMBlock')).items.map((b) => [b.spec.cidr, b.spec.affinity]);
    expect(blocks.sort()).toEqual(
      [
        ['10.60.0.16/28', null],
        [other!.block, 'host:n2'],
      ].sort(),
    );
    expect((await ds.list('BlockAffinity')).items.map((a) => a.spec.node)).toEqual(['n2']);
    expect(await ipam.handleAddresses('net.n1-15')).toHaveLength(1);
    // A second run finds nothing to do.
    expect(await releaseNodeIpam(ds, 'n1')).toEqual({
      tunnelAddresses: [],
      blocksReleased: [],
      blocksUnaffined: [],
      affinitiesDeleted: 0,
    });
  });
});
