// Full agents with --bgp on, one per node of the three-node topology
// (test/support/topology.ts), each supervising its own BIRD in its node's
// namespace, and FRR's bgpd as the top-of-rack router in the topology's router
// namespace (AS 65000), the topology's "internet" namespace as the external
// host behind it. A pool without encapsulation (10.175.0.0/16) is routed only
// by BGP: node-to-node mesh, the ToR, a route reflector, a graceful agent
// restart, a deleted node, and readiness with BIRD down.
import { spawn, type ChildProcess } from 'node:child_process';
import { chmodSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { API_VERSION, type Resource } from '../../src/model/resources.js';
import { startFrr, type Frr } from '../support/frr.js';
import { inNetns } from '../support/netns.js';
import { Topology, type NodeName, type Pod } from '../support/topology.js';

let topo: Topology;
let frr: Frr;
const pods = {} as Record<NodeName, Pod>;
const blocks = {} as Record<NodeName, string>;
const children: ChildProcess[] = [];
const POOL = '10.175.0.0/16';
const NODE_IP: Record<NodeName, string> = { a: '10.200.1.1', b: '10.200.1.2', c: '10.200.2.3' };

const peer = (name: string, spec: Resource<'BGPPeer'>['spec']): Resource<'BGPPeer'> => ({
  apiVersion: API_VERSION,
  kind: 'BGPPeer',
  metadata: { name },
  spec,
});
/** The node's kernel routes BIRD installed (`proto bird`), destination -> gateway. */
function birdRoutes(n: NodeName): Map<string, string> {
  const rows = JSON.parse(topo.exec(n, 'ip', ['-j', '-4', 'route', 'show', 'proto', 'bird'])) as Array<{
    dst: string;
    gateway?: string;
  }>;
  return new Map(rows.map((r) => [r.dst, r.gateway ?? '']));
}
/** birdc on the node; '' while its BIRD is not (yet) up. */
function birdc(n: NodeName, ...args: string[]): string {
  try {
    return topo.birdc(n, ...args);
  } catch {
    return '';
  }
}
const torHas = (block: string) => new RegExp(`^${block.replace(/[./]/g, '\\$&')} `, 'm').test(frr.routes());
const wait = (what: string, cond: () => boolean | Promise<boolean>, ms = 40_000) =>
  topo.waitFor(
    cond,
    ms,
    () =>
      `timed out waiting for ${what}\nA:\n${topo.nodes.a.agentLog.slice(-1500)}\nToR:\n${frr.vtysh('show bgp summary')}`,
  );

beforeAll(async () => {
  topo = await Topology.create();
  // FRR drops to its own user: it must reach its directory under the topology's.
  chmodSync(topo.tmp, 0o755);
  await topo.ds.create({
    apiVersion: API_VERSION,
    kind: 'IPPool',
    metadata: { name: 'bgp-nodes' },
    spec: { cidr: POOL, blockSize: 26, vxlanMode: 'Never', ipipMode: 'Never', natOutgoing: false },
  });
  frr = await startFrr({
    ns: topo.router,
    dir: join(topo.tmp, 'frr'),
    routerId: '10.200.1.254',
    asNumber: 65000,
    neighbors: (['a', 'b', 'c'] as const).map((n) => ({ ip: NODE_IP[n], asNumber: 64512 })),
  });
  // Each node peers with the router's address on its own subnet.
  for (const n of ['a', 'b', 'c'] as const) {
    await topo.ds.create(
      peer(`tor-${n}`, {
        node: `node-${n}`,
        peerIP: n === 'c' ? '10.200.2.254' : '10.200.1.254',
        asNumber: 65000,
        maxRestartTime: '60s',
      }),
    );
  }
  // The external host knows the pool only through the router (which learns it over BGP).
  inNetns(topo.internet, 'ip', ['route', 'add', POOL, 'via', '203.0.113.1']);
  for (const n of ['a', 'b', 'c'] as const)
    await topo.startAgent(n, [...topo.bgpArgs(n), '--health-addr', '127.0.0.1:19399']);
  for (const n of ['a', 'b', 'c'] as const) {
    pods[n] = await topo.addPod(n);
    const b = (await topo.ds.list('IPAMBlock')).items.find((x) => x.spec.affinity === `host:node-${n}`);
    blocks[n] = b!.spec.cidr;
  }
}, 300_000);

afterAll(async () => {
  for (const c of children) c.kill('SIGKILL');
  // The agents first: each stops its BIRD.
  if (topo) for (const n of ['a', 'b', 'c'] as const) await topo.stopAgent(n, 'SIGTERM');
  await frr?.stop();
  await topo?.destroy();
}, 90_000);

/** Pings from a namespace until one answer comes back (routes converge asynchronously). */
async function pingsFrom(ns: string, dst: string, ms = 20_000): Promise<boolean> {
  const end = Date.now() + ms;
  for (;;) {
    try {
      inNetns(ns, 'ping', ['-c', '1', '-W', '1', dst]);
      return true;
    } catch {
      if (Date.now() > end) return false;
    }
  }
}

describe('BGP between full agents on three nodes', () => {
  it("mesh: every node learns the others' blocks as proto bird, pods reach each other across nodes, the ToR learns every block", async () => {
    await wait('the mesh routes', () => {
      const a = birdRoutes('a');
      const b = birdRoutes('b');
      return a.get(blocks.b) === NODE_IP.b && b.get(blocks.a) === NODE_IP.a && a.has(blocks.c) && b.has(blocks.c);
    });
    // No route of the datastore's route controller for this pool: BGP alone routes it.
    expect(topo.routes('a').filter((r) => r.dst.startsWith('10.175.') && r.type !== 'blackhole')).toEqual([]);
    expect(await topo.reachable(pods.a, pods.b.ip4!)).toBe(true);
    expect(await topo.reachable(pods.b, pods.a.ip4!)).toBe(true);
    // C is behind the router: its pods are reached through the ToR, which learned C's block.
    await wait('every block at the ToR', () => torHas(blocks.a) && torHas(blocks.b) && torHas(blocks.c));
    expect(await topo.reachable(pods.a, pods.c.ip4!)).toBe(true);
    // The external host reaches a pod by its own address (no NAT: the pool has none).
    expect(await pingsFrom(topo.internet, pods.a.ip4!)).toBe(true);
  });

  it("graceful restart: an agent restart keeps the ToR's route and an established TCP connection from the external host to a pod", async () => {
    const server = spawn('ip', ['netns', 'exec', pods.a.ns, 'python3', '-c', ECHO_SERVER, pods.a.ip4!], {
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    children.push(server);
    await new Promise((r) => server.stdout!.once('data', r));
    const client = spawn('ip', ['netns', 'exec', topo.internet, 'python3', '-u', '-c', ECHO_CLIENT, pods.a.ip4!], {
      stdio: ['pipe', 'pipe', 'inherit'],
    });
    children.push(client);
    let got = '';
    client.stdout!.setEncoding('utf8').on('data', (d: string) => (got += d));
    client.stdin!.write('before\n');
    await wait('the first echo', () => got.includes('before'));
    // Watch the ToR's route to A's block through the whole restart.
    let lost = 0;
    const watch = setInterval(() => {
      if (!torHas(blocks.a)) lost++;
    }, 100);
    try {
      await topo.stopAgent('a', 'SIGTERM');
      // The agent (and its BIRD) is gone; the ToR still routes to A and the kernel of A forwards.
      client.stdin!.write('during\n');
      await wait('the echo while the agent is down', () => got.includes('during'), 15_000);
      expect(birdRoutes('a').get(blocks.b)).toBe(NODE_IP.b);
      await topo.startAgent('a', [...topo.bgpArgs('a'), '--health-addr', '127.0.0.1:19399']);
      await wait("A's session with the ToR again", () =>
        /Established/.test(birdc('a', 'show', 'protocols', 'Node_10_200_1_254')),
      );
      client.stdin!.write('after\n');
      await wait('the echo after the restart', () => got.includes('after'));
    } finally {
      clearInterval(watch);
    }
    expect(lost).toBe(0);
    // The new BIRD recovered the kept kernel routes instead of pruning them.
    expect(topo.nodes.a.agentLog).not.toMatch(/birdc graceful restart failed/);
    client.stdin!.end();
  });

  it("route reflector: with the mesh off, A and B learn each other's blocks through C", async () => {
    for (const n of ['a', 'b', 'c'] as const) await topo.ds.delete('BGPPeer', `tor-${n}`);
    await topo.ds.create({
      apiVersion: API_VERSION,
      kind: 'BGPConfiguration',
      metadata: { name: 'default' },
      spec: { nodeToNodeMeshEnabled: false },
    });
    const c = await topo.ds.get('Node', 'node-c');
    await topo.ds.update({
      ...c,
      metadata: { ...c.metadata, labels: { ...c.metadata.labels, rr: 'true' } },
      spec: { ...c.spec, bgp: { ...c.spec.bgp, routeReflectorClusterID: '224.0.0.1' } },
    });
    await topo.ds.create(peer('to-rr', { nodeSelector: '!has(rr)', peerSelector: 'has(rr)' }));
    await topo.ds.create(peer('from-rr', { nodeSelector: 'has(rr)', peerSelector: '!has(rr)' }));
    // A's only session is C; B's block comes reflected (originator B, cluster 224.0.0.1), next hop B itself.
    await wait('A and B peering with C only', () => {
      const p = (n: NodeName) => birdc(n, 'show', 'protocols');
      return (
        /Node_10_200_2_3\s+BGP\s+\S+\s+up\s.*Established/.test(p('a')) &&
        !/Mesh_|Node_10_200_1_254/.test(p('a')) &&
        /Node_10_200_2_3\s+BGP\s+\S+\s+up\s.*Established/.test(p('b'))
      );
    });
    await wait('the reflected routes', () => {
      const shown = birdc('a', 'show', 'route', 'for', blocks.b, 'all');
      return (
        /BGP\.originator_id: 10\.200\.1\.2/.test(shown) &&
        /BGP\.cluster_list: 224\.0\.0\.1/.test(shown) &&
        birdRoutes('a').get(blocks.b) === NODE_IP.b &&
        birdRoutes('b').get(blocks.a) === NODE_IP.a
      );
    });
    expect(await topo.reachable(pods.a, pods.b.ip4!)).toBe(true);
    expect(await topo.reachable(pods.b, pods.a.ip4!)).toBe(true);
  });

  it("a deleted node's routes are withdrawn at the other nodes (even those kept for its graceful restart)", async () => {
    await topo.stopAgent('b', 'SIGTERM');
    // B's BIRD went down for a graceful restart: C keeps B's routes and A still has them.
    expect(birdRoutes('a').get(blocks.b)).toBe(NODE_IP.b);
    await topo.ds.delete('Node', 'node-b');
    // Withdrawn from A's BIRD (what BGP carries). A's kernel copy follows when BIRD's graceful-restart
    // recovery ends: A's BIRD restarted with -R in the graceful-restart test above, and BIRD holds kernel
    // updates until recovery completes or its wait timer runs out (docs/bgp.md, "Graceful restart").
    await wait("B's block withdrawn at A", () => !birdc('a', 'show', 'route').includes(`${blocks.b} `));
    expect(birdRoutes('a').has(blocks.c)).toBe(true);
  });

  it('readiness: with BIRD not running the agent stays ready for CNI and reports BGP apart (readyz line, metric)', async () => {
    await topo.startAgent('b', [
      '--bgp',
      'on',
      '--bird-run-dir',
      topo.birdRunDir('b'),
      '--bird-path',
      join(topo.tmp, 'no-such-bird'),
      '--health-addr',
      '127.0.0.1:19399',
    ]);
    const readyz = async () =>
      JSON.parse(topo.exec('b', 'curl', ['-s', 'http://127.0.0.1:19399/readyz'])) as {
        status: string;
        detail: Record<string, string>;
      };
    await wait('the datastore line', async () => (await readyz()).detail.datastore === 'reachable');
    // "not started yet" comes first; then the failed start, naming the missing binary.
    await wait('BIRD reported down', async () =>
      /DEGRADED, not running: .*no-such-bird/.test((await readyz()).detail.bird ?? ''),
    );
    const r = await readyz();
    expect(r.status).toBe('ok');
    expect(r.detail.bird).toMatch(/no-such-bird/);
    expect(
      topo.exec('b', 'curl', ['-s', '-o', '/dev/null', '-w', '%{http_code}', 'http://127.0.0.1:19399/readyz']),
    ).toBe('200');
    expect(topo.exec('b', 'curl', ['-s', 'http://127.0.0.1:19399/metrics'])).toMatch(/^netplugin_bgp_bird_running 0$/m);
    // Pods on the node still get their network.
    const p = await topo.addPod('b');
    expect(p.ip4).toMatch(/^10\.175\./);
  });
});

const ECHO_SERVER = `
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], 7000)); s.listen(1); print('ready', flush=True)
c, _ = s.accept()
while True:
    d = c.recv(1000)
    if not d: break
    c.sendall(d)
`;
const ECHO_CLIENT = `
import socket, sys
c = socket.create_connection((sys.argv[1], 7000), timeout=60)
for line in sys.stdin:
    c.sendall(line.encode()); print(c.recv(1000).decode(), end='', flush=True)
`;
