// Blocks of one address (IPv4 blockSize 32, IPv6 128): the block's prefix is the pod's own route
// (`/32 dev <veth>`, `/128 dev <veth>`). The route controller's blackhole for a local block must
// never replace it, or the node loses its pod. Two nodes on one subnet, an agent on each, no
// encapsulation: node A's route to B's block tells that A's agent has reconciled with its own
// block in place (A's pod was added first).
import { afterAll, beforeAll, expect, it } from 'vitest';
import { API_VERSION } from '../../src/model/resources.js';
import { Topology, type Pod } from '../support/topology.js';

let topo: Topology;
let pa: Pod;
let pb: Pod;

beforeAll(async () => {
  topo = await Topology.create();
  const spec = { vxlanMode: 'Never', ipipMode: 'Never', natOutgoing: false } as const;
  await topo.ds.create({
    apiVersion: API_VERSION,
    kind: 'IPPool',
    metadata: { name: 'one4' },
    spec: { cidr: '10.66.0.0/28', blockSize: 32, ...spec },
  });
  await topo.ds.create({
    apiVersion: API_VERSION,
    kind: 'IPPool',
    metadata: { name: 'one6' },
    spec: { cidr: 'fd00:66::/124', blockSize: 128, ...spec },
  });
  await Promise.all([topo.startAgent('a'), topo.startAgent('b')]);
  const dual = { ipam: { type: 'netplugin-ipam', assign_ipv4: 'true', assign_ipv6: 'true' } };
  pa = await topo.addPod('a', dual);
  pb = await topo.addPod('b', dual);
  await topo.waitFor(
    () =>
      topo.routes('a').some((r) => r.dst === `${pb.ip4}` || r.dst === `${pb.ip4}/32`) &&
      topo.routes('a', 6).some((r) => r.dst === `${pb.ip6}` || r.dst === `${pb.ip6}/128`),
    30_000,
    () =>
      `A has no routes to B's blocks: ${JSON.stringify([topo.routes('a'), topo.routes('a', 6)])}\n${topo.nodes.a.agentLog.slice(-3000)}`,
  );
}, 300_000);

afterAll(async () => {
  await topo?.destroy();
}, 60_000);

it.each([4, 6] as const)('IPv%i: the node still reaches its pod whose block is its one address', async (family) => {
  const ip = family === 4 ? pa.ip4! : pa.ip6!;
  const own = JSON.parse(topo.exec('a', 'ip', ['-j', `-${family}`, 'route', 'show', 'exact', ip])) as Array<{
    type?: string;
    dev?: string;
  }>;
  expect(own.map((r) => r.type ?? 'unicast')).not.toContain('blackhole');
  expect(own.filter((r) => r.dev !== undefined && r.dev !== 'eth0')).toHaveLength(1);
  expect(await topo.reachable('a', ip, 5_000)).toBe(true);
  // And so does a pod on the other node, through A's pod route.
  expect(await topo.reachable(pb, ip, 5_000)).toBe(true);
});
