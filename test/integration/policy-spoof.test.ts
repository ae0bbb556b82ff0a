// What a pod sends, checked by the agent's table before anything accepts it:
// a denied pod forging an allowed peer's source address (IPv4 with the node's
// rp_filter off, IPv6, which has no rp_filter) reaches nothing; an allowed pod
// sending with a MAC that is not its own reaches nothing; no pod reaches a
// listener on the node's loopback (127.0.0.1 over UDP and TCP, ::1), although
// the host veth has route_localnet on (hostPort on localhost needs it).
// Frames are made by hand in the pod (a packet socket), as an attacker with
// CAP_NET_RAW would.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createSocket, type Socket } from 'node:dgram';
import { createServer, type Server } from 'node:net';
import { execFileSync } from 'node:child_process';
import { assertThrowawayHostNetns } from '../support/cni.js';
import { removeAllNetns } from '../support/netns.js';
import {
  addPod,
  applyK8sPolicy,
  expectReachability,
  forgeFrom,
  pod,
  receiveOn,
  startPolicyEnv,
  type PolicyEnv,
} from '../support/policy-harness.js';

const POOL = { name: 'pol-spoof', cidr: '10.77.80.0/26', blockSize: 26 };
const POOL6 = { name: 'pol-spoof6', cidr: 'fd77:80::/122', blockSize: 122 };
const PORT = 5555;
let env: PolicyEnv;

function sysctl(k: string, v: string): void {
  execFileSync('sysctl', ['-qw', `${k}=${v}`]);
}

beforeAll(async () => {
  assertThrowawayHostNetns();
  // Debian's default: no reverse-path filter (the veths made later take the default).
  sysctl('net.ipv4.conf.all.rp_filter', '0');
  sysctl('net.ipv4.conf.default.rp_filter', '0');
  env = await startPolicyEnv(POOL, 'npe', { pool6: POOL6 });
  await addPod(env, 'x', 'a');
  await addPod(env, 'x', 'b');
  await addPod(env, 'y', 'c');
  // x/a admits only x/b.
  await applyK8sPolicy(env, {
    metadata: { name: 'a-from-b', namespace: 'x' },
    spec: {
      podSelector: { matchLabels: { pod: 'a' } },
      ingress: [{ from: [{ podSelector: { matchLabels: { pod: 'b' } } }] }],
    },
  });
  await expectReachability(env, 80, 'udp', (f, t) => t.id !== 'x/a' || f.id === 'x/b');
}, 120_000);
afterAll(async () => {
  await env?.close();
  removeAllNetns();
}, 60_000);

/** The sources of what reached x/a on PORT while `send` ran (a window long enough for a loaded machine). */
async function reachingA(send: () => Promise<unknown>): Promise<string[]> {
  const got = await receiveOn(pod(env, 'x/a'), PORT, 5);
  await send();
  return got.done;
}

describe('pods cannot forge their source', { timeout: 60_000 }, () => {
  it("IPv4: a denied pod sending with an allowed peer's address reaches nothing (rp_filter 0); the peer itself does", async () => {
    const [a, b, c] = ['x/a', 'x/b', 'y/c'].map((id) => pod(env, id));
    expect(await reachingA(() => forgeFrom(c!, { src: b!.ip, dst: a!.ip, dport: PORT, proto: 'udp' }))).toEqual([]);
    // The same frames from the pod whose address it is get through: the check is what stopped them.
    const own = await reachingA(() => forgeFrom(b!, { src: b!.ip, dst: a!.ip, dport: PORT, proto: 'udp' }));
    expect(own.length).toBeGreaterThan(0);
    expect(new Set(own)).toEqual(new Set([b!.ip]));
  });

  it('IPv6: the same, where the kernel has no rp_filter at all', async () => {
    const [a, b, c] = ['x/a', 'x/b', 'y/c'].map((id) => pod(env, id));
    expect(a!.ip6).toBeDefined();
    expect(await reachingA(() => forgeFrom(c!, { src: b!.ip6!, dst: a!.ip6!, dport: PORT, proto: 'udp' }))).toEqual([]);
    const own = await reachingA(() => forgeFrom(b!, { src: b!.ip6!, dst: a!.ip6!, dport: PORT, proto: 'udp' }));
    expect(own.length).toBeGreaterThan(0);
    expect(new Set(own)).toEqual(new Set([b!.ip6]));
  });

  it('a pod sending from a MAC that is not its own reaches nothing, even with its own address', async () => {
    const [a, b] = ['x/a', 'x/b'].map((id) => pod(env, id));
    expect(
      await reachingA(() =>
        forgeFrom(b!, { src: b!.ip, dst: a!.ip, dport: PORT, proto: 'udp', srcMac: '02:66:66:66:66:66' }),
      ),
    ).toEqual([]);
  });
});

describe('pods cannot reach the node loopback', { timeout: 60_000 }, () => {
  let udp: Socket | undefined;
  let udp6: Socket | undefined;
  let tcp: Server | undefined;
  afterAll(() => {
    udp?.close();
    udp6?.close();
    tcp?.close();
  });

  it('UDP to 127.0.0.1 and ::1, TCP to 127.0.0.1: nothing arrives, no handshake answers', async () => {
    const got: string[] = [];
    const listen = (type: 'udp4' | 'udp6', addr: string) =>
      new Promise<Socket>((resolve) => {
        const s = createSocket(type);
        s.on('message', (_m, r) => got.push(r.address));
        s.bind(0, addr, () => resolve(s));
      });
    udp = await listen('udp4', '127.0.0.1');
    udp6 = await listen('udp6', '::1');
    let accepted = 0;
    tcp = createServer((s) => (accepted++, s.destroy()));
    await new Promise<void>((r) => tcp!.listen(0, '127.0.0.1', r));
    const tcpPort = (tcp.address() as { port: number }).port;
    const c = pod(env, 'y/c');
    await forgeFrom(c, { src: c.ip, dst: '127.0.0.1', dport: udp.address().port, proto: 'udp' });
    await forgeFrom(c, { src: c.ip6!, dst: '::1', dport: udp6.address().port, proto: 'udp' });
    const synAcks = await forgeFrom(c, {
      src: c.ip,
      dst: '127.0.0.1',
      dport: tcpPort,
      proto: 'syn',
      count: 2,
      wait: 1.5,
    });
    await new Promise((r) => setTimeout(r, 300));
    expect({ udp: got, synAcks, accepted }).toEqual({ udp: [], synAcks: [], accepted: 0 });
  });
});
