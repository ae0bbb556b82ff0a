// Pool allowedUses in the allocator: a [Tunnel]-only pool never gives a
// workload address, however it is asked for (automatic choice, explicit pool
// lists from the netconf or annotations, a requested address from IP= or
// ipAddrs); tunnel addresses come only from pools that allow Tunnel.
import { beforeEach, describe, expect, it } from 'vitest';
import { MemoryDatastore } from '../../src/datastore/memory.js';
import type { IPPoolSpec } from '../../src/model/resources.js';
import { type CniError, ErrorCodes } from '../../src/errors.js';
import { IpamError } from '../../src/ipam/errors.js';
import { toCniError } from '../../src/cni/errors.js';
import { createIpam, type Ipam, type AssignRequest } from '../../src/ipam/index.js';
import { createPool } from '../support/builders.js';

let ds: MemoryDatastore;
let ipam: Ipam;

async function pool(name: string, cidr: string, spec: Partial<IPPoolSpec> = {}): Promise<void> {
  await createPool(ds, name, cidr, { blockSize: 26, ...spec });
}

function req(extra: Partial<AssignRequest> = {}): AssignRequest {
  return {
    handleID: `net.${Math.random().toString(16).slice(2)}`,
    node: 'n1',
    attrs: {},
    assignIPv4: true,
    assignIPv6: false,
    ...extra,
  };
}

async function failure(p: Promise<unknown>): Promise<CniError> {
  const e = await p.then(
    () => undefined,
    (x: unknown) => x,
  );
  // The domain throws IpamErrors; the code is what the CNI edge makes of it.
  expect(e).toBeInstanceOf(IpamError);
  return toCniError(e);
}

beforeEach(async () => {
  ds = new MemoryDatastore();
  ipam = createIpam(ds, { lock: 'none' });
  await pool('tunnels', '10.70.0.0/24', { allowedUses: ['Tunnel'] });
});

describe('allowedUses', () => {
  it('automatic workload assignment skips a Tunnel-only pool and says why when nothing else exists', async () => {
    const e = await failure(ipam.assign(req()));
    expect(e.code).toBe(ErrorCodes.IpamFailure);
    expect(e.message).toContain('tunnels (10.70.0.0/24, allowedUses [Tunnel])');
    await pool('pods', '10.71.0.0/24', { allowedUses: ['Workload'] });
    const [a] = await ipam.assign(req());
    expect(a!.pool).toBe('pods');
  });

  it('an explicit pool list naming a Tunnel-only pool is an error naming the pool, its allowedUses and the field', async () => {
    await pool('pods', '10.71.0.0/24');
    const e = await failure(
      ipam.assign(req({ ipv4Pools: ['tunnels'], fields: { ipv4Pools: 'cni.netplugin.org/ipv4pools' } })),
    );
    expect(e.message).toMatch(
      /^cni\.netplugin\.org\/ipv4pools: pool 'tunnels' \(10\.70\.0\.0\/24\) has allowedUses \[Tunnel\]: it gives no Workload addresses/,
    );
    expect(e.message).toContain('add Workload to its spec.allowedUses');
    expect((await ds.list('IPAMBlock')).items).toEqual([]);
  });

  it('a requested address (IP= or ipAddrs) inside a Tunnel-only pool is refused and nothing is allocated', async () => {
    const e = await failure(
      ipam.assign(req({ requestedIPs: ['10.70.0.5'], fields: { requestedIPs: 'cni.netplugin.org/ipAddrs' } })),
    );
    expect(e.message).toContain(
      "cni.netplugin.org/ipAddrs: 10.70.0.5 is in pool 'tunnels' (10.70.0.0/24), whose allowedUses is [Tunnel]",
    );
    expect((await ds.list('IPAMHandle')).items).toEqual([]);
  });

  it('tunnel assignments use Tunnel pools and never a Workload-only pool', async () => {
    await pool('pods', '10.71.0.0/24', { allowedUses: ['Workload'] });
    const [t] = await ipam.assign(req({ use: 'Tunnel', handleID: 'vxlan-tunnel-addr-n1' }));
    expect(t!.pool).toBe('tunnels');
    const e = await failure(ipam.assign(req({ use: 'Tunnel', ipv4Pools: ['pods'] })));
    expect(e.message).toContain("pool 'pods' (10.71.0.0/24) has allowedUses [Workload]: it gives no Tunnel addresses");
  });

  it('a pool without allowedUses serves both', async () => {
    await pool('both', '10.72.0.0/24');
    const [w] = await ipam.assign(req({ ipv4Pools: ['both'] }));
    const [t] = await ipam.assign(req({ ipv4Pools: ['both'], use: 'Tunnel' }));
    expect([w!.pool, t!.pool]).toEqual(['both', 'both']);
  });
});
