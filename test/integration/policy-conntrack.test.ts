// Conntrack of a deleted pod: a UDP flow from client pod c to server pod s is
// allowed and established (the host's conntrack table has its entry); the DEL
// of s flushes every entry of s's address (the agent: just after DEL returns,
// before an ADD can give the address a veth again), and a new pod that gets the same
// address under a deny-all-ingress policy is not reachable by that flow, even
// from the same source port (without the flush the stale ESTABLISHED entry
// would let it through the base chain's `ct state established accept`).
import { execFile, execFileSync } from 'node:child_process';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Resource } from '../../src/model/resources.js';
import type { NetworkPolicySpec } from '../../src/model/policy.js';
import { assertThrowawayHostNetns } from '../support/cni.js';
import { removeAllNetns } from '../support/netns.js';
import { addPod, delPod, putObject, startPolicyEnv, type PolicyEnv, type Pod } from '../support/policy-harness.js';

const POOL = { name: 'pol-ct', cidr: '10.77.65.0/26', blockSize: 26 };
const SPORT = 40555;
let env: PolicyEnv;

beforeAll(async () => {
  assertThrowawayHostNetns();
  env = await startPolicyEnv(POOL, 'npc');
}, 120_000);
afterAll(async () => {
  await env?.close();
  removeAllNetns();
}, 60_000);

function np(name: string, spec: NetworkPolicySpec): Resource<'NetworkPolicy'> {
  return { apiVersion: 'netplugin.org/v3', kind: 'NetworkPolicy', metadata: { name, namespace: 'x' }, spec };
}

/** One UDP echo from `from`, always from source port SPORT (so the same conntrack tuple each time). */
function udpFromFixedPort(from: Pod, to: string): Promise<boolean> {
  const code = `
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(('', ${SPORT})); s.settimeout(1.5); s.sendto(b'ping', (sys.argv[1], 80))
try: print(s.recvfrom(16)[0] == b'ping')
except OSError: print(False)`;
  return new Promise((resolve, reject) =>
    execFile('ip', ['netns', 'exec', from.netns, 'python3', '-c', code, to], { timeout: 30_000 }, (e, out) =>
      e ? reject(e) : resolve(out.trim() === 'True'),
    ),
  );
}

/** This test's host namespace's conntrack entries naming `addr` (/proc/net/nf_conntrack is per namespace). */
function entriesOf(addr: string): string[] {
  return execFileSync('cat', ['/proc/net/nf_conntrack'], { encoding: 'utf8' })
    .split('\n')
    .filter((l) => l.includes(`src=${addr} `) || l.includes(`dst=${addr} `));
}

async function eventually(what: string, fn: () => Promise<boolean>, ms = 20_000): Promise<void> {
  const end = Date.now() + ms;
  while (!(await fn())) {
    if (Date.now() > end) throw new Error(`${what}: not within ${ms} ms`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

describe('conntrack of a deleted pod', { timeout: 120_000 }, () => {
  it('DEL flushes the entries of its address; a new pod with that address inherits no allowed state', async () => {
    await putObject(
      env,
      np('old-open', { selector: "srv == 'old'", ingress: [{ action: 'Allow', source: { selector: "pod == 'c'" } }] }),
    );
    await putObject(env, np('new-closed', { selector: "srv == 'new'", types: ['Ingress'] }));
    const c = await addPod(env, 'x', 'c');
    const s = await addPod(env, 'x', 's', { pod: 's', srv: 'old' });
    await eventually('c reaches s over UDP from its fixed port', () => udpFromFixedPort(c, s.ip));
    expect(
      entriesOf(s.ip).some((l) => l.includes(`sport=${SPORT} `) && l.includes('udp')),
      `no entry for ${s.ip}:\n${entriesOf(s.ip).join('\n')}`,
    ).toBe(true);

    await delPod(env, s);
    // The agent flushes off the DEL's request path (batched, a few ms later).
    await eventually(`the entries of ${s.ip} are flushed`, async () => entriesOf(s.ip).length === 0);

    // The next pod asks for s's address (the IPAM annotation), as a reuse would give it.
    const s2 = await addPod(env, 'x', 's2', { pod: 's2', srv: 'new' }, true, {
      'cni.netplugin.org/ipAddrs': JSON.stringify([s.ip]),
    });
    expect(s2.ip).toBe(s.ip);
    // The policy is in force for a fresh flow, and the old flow's tuple is no way in either.
    expect(await udpFromFixedPort(c, s2.ip)).toBe(false);
    expect(await udpFromFixedPort(c, s2.ip)).toBe(false);
    expect(entriesOf(s2.ip).some((l) => l.includes('ASSURED'))).toBe(false);
  });
});
