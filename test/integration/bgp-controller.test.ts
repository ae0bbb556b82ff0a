// The agent's BGP controller end to end on two nodes (network namespaces on
// one link) sharing a datastore: from the resources alone (Nodes, IPPool,
// IPAMBlock, BGPConfiguration) each controller renders BIRD's configuration
// and runs BIRD; a block claimed by one node appears at the other as a
// `proto bird` route, a disabled pool is withdrawn, and a bad BGPPeer is
// isolated (the mesh keeps working).
import { chmodSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { execFileSync } from 'node:child_process';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createNetns, deleteNetns, inNetns } from '../support/netns.js';
import { parseCidr } from '../../src/net/cidr.js';
import { MemoryDatastore } from '../../src/datastore/memory.js';
import { startBgpController, type BgpController } from '../../src/agent/bgp/index.js';
import { blockName } from '../../src/model/names.js';
import { API_VERSION, type Resource } from '../../src/model/resources.js';
import type { Logger } from '../../src/log/types.js';

const logs: string[] = [];
const line = (l: string) => (m: string, f?: Record<string, unknown>) =>
  logs.push(`${l} ${m}${f?.line ? `: ${String(f.line)}` : ''}`);
const log: Logger = { error: line('E'), warn: line('W'), info: line('I'), debug: () => undefined };
const tmp = mkdtempSync(join(tmpdir(), 'bgp-ctl-'));
const ns = { a: '', b: '' };
const IP = { a: '10.202.0.1', b: '10.202.0.2' };
const ds = new MemoryDatastore();
const ctl: Partial<Record<'a' | 'b', BgpController>> = {};

const res = <K extends 'Node' | 'IPPool' | 'IPAMBlock' | 'BGPConfiguration' | 'BGPPeer'>(
  kind: K,
  name: string,
  spec: Resource<K>['spec'],
): Resource<K> => ({ apiVersion: API_VERSION, kind, metadata: { name }, spec }) as Resource<K>;
const block = (cidr: string, node: string) =>
  res('IPAMBlock', blockName(cidr), {
    cidr,
    affinity: `host:${node}`,
    allocations: Array(64).fill(null),
    unallocated: [...Array(64).keys()],
    attributes: [],
  });
const birdRoutes = (n: 'a' | 'b') => inNetns(ns[n], 'ip', ['-4', 'route', 'show', 'proto', 'bird']);

async function until(what: string, fn: () => boolean, ms = 30_000): Promise<void> {
  const end = Date.now() + ms;
  while (!fn()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}; log:\n${logs.slice(-15).join('\n')}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

beforeAll(async () => {
  ns.a = createNetns('bgpca').name;
  ns.b = createNetns('bgpcb').name;
  execFileSync('ip', ['-n', ns.a, 'link', 'add', 'eth0', 'type', 'veth', 'peer', 'name', 'eth0', 'netns', ns.b]);
  for (const n of ['a', 'b'] as const) {
    execFileSync('ip', ['-n', ns[n], 'addr', 'add', `${IP[n]}/24`, 'dev', 'eth0']);
    execFileSync('ip', ['-n', ns[n], 'link', 'set', 'eth0', 'up']);
    await ds.create(res('Node', n, { ipv4Address: `${IP[n]}/24` }));
  }
  await ds.create(res('BGPConfiguration', 'default', { asNumber: 64600 }));
  await ds.create(
    res('IPPool', 'bgp', { cidr: '10.244.0.0/16', blockSize: 26, vxlanMode: 'Never', ipipMode: 'Never' }),
  );
  await ds.create(block('10.244.1.0/26', 'a'));
  for (const n of ['a', 'b'] as const) {
    const bin = join(tmp, `bin-${n}`);
    mkdirSync(bin);
    writeFileSync(join(bin, 'bird'), `#!/bin/sh\nexec ip netns exec ${ns[n]} /usr/sbin/bird "$@"\n`);
    writeFileSync(join(bin, 'birdc'), '#!/bin/sh\nexec /usr/sbin/birdc "$@"\n');
    for (const f of ['bird', 'birdc']) chmodSync(join(bin, f), 0o755);
    ctl[n] = startBgpController({
      ds,
      node: n,
      subnets: () => [parseCidr('10.202.0.0/24')],
      log,
      birdPath: join(bin, 'bird'),
      runDir: join(tmp, `run-${n}`),
    });
  }
});

afterAll(async () => {
  for (const c of Object.values(ctl)) await c?.stop();
  for (const n of Object.values(ns)) if (n) deleteNetns(n);
  rmSync(tmp, { recursive: true, force: true });
});

describe('the BGP controller from the datastore', () => {
  it('meshes the nodes and installs the claimed block at the other node', async () => {
    await until('the mesh session', () => ctl.a!.status().established === 1 && ctl.b!.status().established === 1);
    await until("a's block at b", () => /^10\.244\.1\.0\/26 via 10\.202\.0\.1 dev eth0/m.test(birdRoutes('b')));
    expect(ctl.a!.status().sessions[0]).toMatchObject({ peerAddress: IP.b, peerType: 'node-to-node mesh' });
  });

  it('follows a newly claimed block, isolates a bad peer, and withdraws a disabled pool', async () => {
    await ds.create(block('10.244.2.0/26', 'b'));
    await until("b's block at a", () => birdRoutes('a').includes('10.244.2.0/26 via 10.202.0.2'));
    // Stored by a writer that bypassed validation: the controllers skip it and keep the mesh.
    await ds.create(res('BGPPeer', 'broken', { peerIP: '10.202.0.9' }));
    await until('the bad peer reported', () =>
      logs.some((l) => /BGPPeer broken: spec\.asNumber: is required with peerIP/.test(l)),
    );
    const pool = await ds.get('IPPool', 'bgp');
    await ds.update({ ...pool, spec: { ...pool.spec, disabled: true } });
    await until(
      'the blocks withdrawn',
      () => !birdRoutes('a').includes('10.244.') && !birdRoutes('b').includes('10.244.'),
    );
    expect(ctl.a!.status().established).toBe(1);
  });
});
