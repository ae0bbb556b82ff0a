// A node peering over eBGP with a "top-of-rack" router running an independent
// BGP implementation (FRR's bgpd and zebra, AS 65000, in their own namespace
// with their own config, sockets and pid files in a temp dir), with an
// "external host" behind it. The node runs a real BIRD through the agent's
// supervisor from the renderer's configuration, and a pod in a Never pool.
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { chmodSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createNetns, deleteNetns, inNetns } from '../support/netns.js';
import { startFrr, type Frr } from '../support/frr.js';
import { BirdSupervisor } from '../../src/agent/bgp/supervisor.js';
import { renderBirdConfig, type BirdInput } from '../../src/agent/bgp/render.js';
import { parseCidr } from '../../src/net/cidr.js';
import type { Logger } from '../../src/log/types.js';
import type { IPPoolSpec } from '../../src/model/resources.js';

const logs: string[] = [];
const line = (l: string) => (m: string, f?: Record<string, unknown>) =>
  logs.push(`${l} ${m}${f?.line ? `: ${String(f.line)}` : ''}`);
const log: Logger = { error: line('E'), warn: line('W'), info: line('I'), debug: () => undefined };
const tmp = mkdtempSync(join(tmpdir(), 'bgp-tor-'));
const ns = { node: '', tor: '', ext: '', pod: '' };
const daemons: ChildProcess[] = [];
let bird: BirdSupervisor;
const POOL: { name: string; spec: IPPoolSpec } = {
  name: 'bgp',
  spec: { cidr: '10.244.0.0/16', vxlanMode: 'Never', ipipMode: 'Never' },
};

function input(over: Partial<BirdInput> = {}): BirdInput {
  return {
    me: 'a',
    nodes: [{ metadata: { name: 'a' }, spec: { ipv4Address: '10.210.0.1/24' } }],
    configs: [],
    peers: [{ metadata: { name: 'tor' }, spec: { peerIP: '10.210.0.254', asNumber: 65000, maxRestartTime: '60s' } }],
    pools: [POOL],
    blocks: ['10.244.1.0/26'],
    borrowed: [],
    extraAddresses: [],
    subnets: [parseCidr('10.210.0.0/24')],
    passwords: new Map(),
    runDir: join(tmp, 'bird'),
    ...over,
  };
}

const ip = (n: string, ...a: string[]) => execFileSync('ip', ['-n', n, ...a]);
let frr: Frr | undefined;
const torRoutes = () => frr!.routes();
const vtysh = (cmd: string) => frr!.vtysh(cmd);

async function until<T>(what: string, fn: () => T | undefined | false, ms = 30_000): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    const v = fn();
    if (v) return v;
    if (Date.now() > end)
      throw new Error(
        `timed out waiting for ${what}; log:\n${logs.slice(-15).join('\n')}\nToR:\n${vtysh('show bgp summary')}\n${vtysh('show bgp ipv4 unicast')}\nToR routes:\n${torRoutes()}`,
      );
    await new Promise((r) => setTimeout(r, 100));
  }
}

beforeAll(async () => {
  for (const k of Object.keys(ns) as Array<keyof typeof ns>) ns[k] = createNetns(`tor${k}`).name;
  ip(ns.node, 'link', 'add', 'eth0', 'type', 'veth', 'peer', 'name', 'eth0', 'netns', ns.tor);
  ip(ns.tor, 'link', 'add', 'eth1', 'type', 'veth', 'peer', 'name', 'eth0', 'netns', ns.ext);
  ip(ns.node, 'link', 'add', 'npi0', 'type', 'veth', 'peer', 'name', 'eth0', 'netns', ns.pod);
  ip(ns.node, 'addr', 'add', '10.210.0.1/24', 'dev', 'eth0');
  ip(ns.tor, 'addr', 'add', '10.210.0.254/24', 'dev', 'eth0');
  ip(ns.tor, 'addr', 'add', '198.51.100.1/24', 'dev', 'eth1');
  ip(ns.ext, 'addr', 'add', '198.51.100.2/24', 'dev', 'eth0');
  ip(ns.pod, 'addr', 'add', '10.244.1.5/32', 'dev', 'eth0');
  for (const [n, d] of [
    [ns.node, 'eth0'],
    [ns.node, 'npi0'],
    [ns.tor, 'eth0'],
    [ns.tor, 'eth1'],
    [ns.ext, 'eth0'],
    [ns.pod, 'eth0'],
  ] as const)
    ip(n, 'link', 'set', d, 'up');
  for (const n of [ns.node, ns.tor]) inNetns(n, 'sysctl', ['-qw', 'net.ipv4.ip_forward=1']);
  inNetns(ns.node, 'sysctl', ['-qw', 'net.ipv4.conf.npi0.proxy_arp=1']);
  ip(ns.node, 'route', 'add', 'default', 'via', '10.210.0.254');
  ip(ns.node, 'route', 'add', '10.244.1.5/32', 'dev', 'npi0');
  // The blackhole IPAM's route controller keeps for the node's own block.
  ip(ns.node, 'route', 'add', 'blackhole', '10.244.1.0/26');
  ip(ns.pod, 'route', 'add', '169.254.1.1', 'dev', 'eth0');
  ip(ns.pod, 'route', 'add', 'default', 'via', '169.254.1.1', 'dev', 'eth0');
  ip(ns.ext, 'route', 'add', 'default', 'via', '198.51.100.1');
  // FRR runs as its own user: it must reach its directory under ours.
  chmodSync(tmp, 0o755);
  frr = await startFrr({
    ns: ns.tor,
    dir: join(tmp, 'frr'),
    routerId: '10.210.0.254',
    asNumber: 65000,
    neighbors: [{ ip: '10.210.0.1', asNumber: 64512 }],
  });
  const bin = join(tmp, 'bin');
  mkdirSync(bin);
  writeFileSync(join(bin, 'bird'), `#!/bin/sh\nexec ip netns exec ${ns.node} /usr/sbin/bird "$@"\n`);
  writeFileSync(join(bin, 'birdc'), '#!/bin/sh\nexec /usr/sbin/birdc "$@"\n');
  for (const f of ['bird', 'birdc']) chmodSync(join(bin, f), 0o755);
  bird = new BirdSupervisor({ birdPath: join(bin, 'bird'), runDir: join(tmp, 'bird'), log, pollMs: 200 });
});

afterAll(async () => {
  await bird?.stop();
  for (const d of daemons) d.kill('SIGTERM');
  await frr?.stop();
  await new Promise((r) => setTimeout(r, 300));
  for (const n of Object.values(ns)) if (n) deleteNetns(n);
  rmSync(tmp, { recursive: true, force: true });
});

describe('eBGP with a top-of-rack FRR router', () => {
  it("the ToR learns the node's block and the external host reaches the pod by its own address", async () => {
    expect(await bird.apply(renderBirdConfig(input()))).toEqual({ ok: true });
    await until('the session', () => bird.status().established === 1);
    await until('the block at the ToR', () => /^10\.244\.1\.0\/26 (nhid \d+ )?via 10\.210\.0\.1 /m.test(torRoutes()));
    // Not NATed: the ping reaches 10.244.1.5 itself, through the ToR's BGP route.
    expect(inNetns(ns.ext, 'ping', ['-c', '1', '-W', '2', '10.244.1.5'])).toMatch(/1 received/);
  });

  it('a new block appears at the ToR; floating IPs only inside a BGP pool; a deleted pool is withdrawn', async () => {
    await bird.apply(
      renderBirdConfig(
        input({ blocks: ['10.244.1.0/26', '10.244.1.64/26'], extraAddresses: ['10.244.9.9', '172.16.0.1'] }),
      ),
    );
    await until(
      'the new block and the floating IP at the ToR',
      () =>
        torRoutes().includes('10.244.1.64/26') && /^10\.244\.9\.9 (nhid \d+ )?via 10\.210\.0\.1 /m.test(torRoutes()),
    );
    expect(torRoutes()).not.toContain('172.16.0.1');
    await bird.apply(renderBirdConfig(input({ pools: [], extraAddresses: ['10.244.9.9'] })));
    await until("the pool's routes withdrawn at the ToR", () => !torRoutes().includes('10.244.'));
    await bird.apply(renderBirdConfig(input()));
    await until('the block back at the ToR', () => torRoutes().includes('10.244.1.0/26'));
  });

  it('graceful restart: a BIRD kill keeps an established TCP connection from the external host to the pod', async () => {
    const server = spawn('ip', ['netns', 'exec', ns.pod, 'python3', '-c', ECHO_SERVER], {
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    daemons.push(server);
    await new Promise((r) => server.stdout!.once('data', r));
    const client = spawn('ip', ['netns', 'exec', ns.ext, 'python3', '-u', '-c', ECHO_CLIENT], {
      stdio: ['pipe', 'pipe', 'inherit'],
    });
    daemons.push(client);
    let got = '';
    client.stdout!.setEncoding('utf8').on('data', (d: string) => (got += d));
    client.stdin!.write('before\n');
    await until('the first echo', () => got.includes('before'));
    const pid = bird.status().pid!;
    process.kill(pid, 'SIGKILL');
    await until('BIRD restarted', () => bird.status().running && bird.status().pid !== pid);
    expect(torRoutes()).toContain('10.244.1.0/26');
    client.stdin!.write('during\n');
    await until('the echo while BIRD restarts', () => got.includes('during'));
    await until('the session back', () => bird.status().established === 1);
    client.stdin!.write('after\n');
    await until('the echo after', () => got.includes('after'));
    client.stdin!.end();
  });

  it('a mismatched password never establishes', async () => {
    const r = await bird.apply(
      renderBirdConfig(
        input({
          peers: [
            {
              metadata: { name: 'tor' },
              spec: { peerIP: '10.210.0.254', asNumber: 65000, password: { file: '/unused' } },
            },
          ],
          passwords: new Map([['tor', 'not-what-the-tor-has']]),
        }),
      ),
    );
    expect(r).toEqual({ ok: true });
    await until('the session to drop', () => bird.status().established === 0);
    await new Promise((res) => setTimeout(res, 6000));
    expect(bird.status().established).toBe(0);
    // The kernel took the key (TCP-MD5 is available): the session fails on the signature, not on a refusal.
    expect(logs.join('\n')).not.toMatch(/MD5/i);
    expect(bird.status().sessions[0]).toMatchObject({ peerAddress: '10.210.0.254', established: false });
    expect(vtysh('show bgp summary')).not.toMatch(/10\.210\.0\.1\s+4\s+64512\s+.*\d+:\d+:\d+\s+\d+/);
  });
});

const ECHO_SERVER = `
import socket
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(('10.244.1.5', 7000)); s.listen(1); print('ready', flush=True)
c, _ = s.accept()
while True:
    d = c.recv(1000)
    if not d: break
    c.sendall(d)
`;
const ECHO_CLIENT = `
import socket, sys
c = socket.create_connection(('10.244.1.5', 7000), timeout=60)
for line in sys.stdin:
    c.sendall(line.encode()); print(c.recv(1000).decode(), end='', flush=True)
`;
