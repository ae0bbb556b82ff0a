// What a tenant writes cannot steer another pod's policy, through the real
// agent on the Kubernetes datastore (the fake API server):
// - a pod whose interfaceName annotation names another namespace's pod's veth
//   takes nothing from it: the agent derives every local endpoint's veth itself,
//   reports the disagreement (log, Warning Event) and programs each pod on its own;
// - two pods of the same name in two namespaces on one node each get their own
//   policy status (file and wait), and files of the name format without the
//   namespace are removed by a new agent;
// - an established TCP connection is cut once a policy change denies it (also
//   when only the server sends), and survives a policy change that still allows
//   it with its conntrack entry untouched.
import { spawn, type ChildProcess } from 'node:child_process';
import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { hostVethName } from '../../src/model/names.js';
import { netlink } from '../../src/native/index.js';
import { workloadEndpointName } from '../../src/model/names.js';
import { assertThrowawayHostNetns } from '../support/cni.js';
import { removeAllNetns } from '../support/netns.js';
import { NODE } from '../support/plugin-harness.js';
import {
  addPod,
  applyK8sPolicy,
  expectReachability,
  listTable,
  pod,
  probeFrom,
  startPolicyAgent,
  startPolicyEnv,
  type PolicyEnv,
  type Pod,
} from '../support/policy-harness.js';
import type { KubeNetworkPolicy } from '../../src/model/k8s-networkpolicy.js';

const PREFIX = 'npw';
const POOL = { name: 'pol-tenant', cidr: '10.77.183.0/24', blockSize: 26 };
let env: PolicyEnv;

beforeAll(async () => {
  assertThrowawayHostNetns();
  env = await startPolicyEnv(POOL, PREFIX, { mode: 'kubernetes', timeoutSeconds: 20 });
}, 120_000);
afterAll(async () => {
  await env?.close();
  removeAllNetns();
}, 60_000);

/** A NetworkPolicy in `ns` that admits to pods labelled pod=`to` only pods labelled pod=`from` of the namespace. */
function admit(ns: string, name: string, to: string, from: string): KubeNetworkPolicy {
  return {
    metadata: { name, namespace: ns },
    spec: {
      podSelector: { matchLabels: { pod: to } },
      ingress: [{ from: [{ podSelector: { matchLabels: { pod: from } } }] }],
    },
  };
}

/** The endpoint status files in the directory, whatever their names. */
function status(): Array<{ f: string; s: { containerID?: string; at?: string } }> {
  return readdirSync(env.statusDir)
    .filter((f) => f.endsWith('.json') && !f.startsWith('.'))
    .map((f) => ({
      f,
      s: JSON.parse(readFileSync(join(env.statusDir, f), 'utf8')) as { containerID?: string; at?: string },
    }));
}

function statusOf(p: Pod): Array<{ containerID?: string; at?: string }> {
  return status()
    .map((x) => x.s)
    .filter((s) => s.containerID === p.containerId);
}

async function eventually(what: string, fn: () => Promise<boolean> | boolean, ms = 20_000): Promise<void> {
  const end = Date.now() + ms;
  while (!(await fn())) {
    if (Date.now() > end) throw new Error(`${what}: not within ${ms} ms\n${env.agent.log().slice(-4000)}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

describe('policy against tenant-written data (kubernetes datastore)', { timeout: 150_000 }, () => {
  it("a pod whose interfaceName annotation names x/a's veth takes nothing from x/a", async () => {
    await addPod(env, 'x', 'a');
    await addPod(env, 'x', 'b');
    await addPod(env, 'y', 'c');
    // x/a admits only x/b.
    await applyK8sPolicy(env, admit('x', 'a-from-b', 'a', 'b'));
    const isolated = (f: Pod, t: Pod) => t.id !== 'x/a' || f.id === 'x/b';
    await expectReachability(env, 80, 'tcp', isolated);

    // y/evil names x/a's host veth (computable from "x.a") in its annotation, as its owner can.
    const evil = await addPod(env, 'y', 'evil');
    const victim = hostVethName(PREFIX, 'x.a');
    const patched = new Date().toISOString();
    await env.kube.patchPod(
      'y',
      'evil',
      { metadata: { annotations: { 'cni.netplugin.org/interfaceName': victim } } },
      'merge',
    );
    // The agent reports an endpoint programmed again after each change of it: the batch with the annotation is in.
    await eventually("the agent applied y/evil's change", () => statusOf(evil).some((s) => (s.at ?? '') > patched));
    // x/a keeps its isolation (only x/b), y/evil is programmed on its own veth (reachable, reaching).
    await expectReachability(env, 80, 'tcp', isolated);
    expect(listTable(env)).toContain(`chain to-${hostVethName(PREFIX, 'y.evil')}`);

    // Reported (once, not per batch), with a Warning Event on the pod.
    expect(env.agent.log()).toContain('records host interface');
    await applyK8sPolicy(env, { metadata: { name: 'noop', namespace: 'y' }, spec: { podSelector: {}, ingress: [{}] } });
    await expectReachability(env, 80, 'tcp', isolated);
    expect(env.agent.log().split('records host interface').length - 1).toBe(1);
    type Ev = { reason: string; type: string; message: string; involvedObject: { name: string; namespace: string } };
    const events = await env.kube.request<{ items: Ev[] }>('GET', '/api/v1/namespaces/y/events');
    const ev = events.items.filter((e) => e.reason === 'NetpluginInterfaceMismatch');
    expect(ev.map((e) => [e.type, e.involvedObject.namespace, e.involvedObject.name])).toEqual([
      ['Warning', 'y', 'evil'],
    ]);
    expect(ev[0]!.message).toContain(victim);
    expect(evil.ip).not.toBe(pod(env, 'x/a').ip);
  });

  it('same-named pods in two namespaces: each ADD waits for its own programming, each gets its own status', async () => {
    const [xt, zt] = await Promise.all([addPod(env, 'x', 'twin'), addPod(env, 'z', 'twin')]);
    for (const t of [xt, zt]) {
      expect(t.addLog ?? '', `${t.id}'s ADD`).not.toContain('was not reported programmed');
      // Released by its own programming: reachable at once (a pod not programmed yet is dropped).
      expect(await probeFrom(pod(env, 'x/b'), [[t.ip, 80, 'tcp']]), `${t.id} right after its ADD`).toEqual([true]);
    }
    expect(env.agent.log()).not.toContain('was not reported programmed');
    for (const t of [xt, zt]) expect(statusOf(t).length, `${t.id}'s status file`).toBe(1);

    // A file of the earlier name format (no namespace) is removed by a new agent and releases nobody.
    const old = join(env.statusDir, `${workloadEndpointName(NODE, 'k8s', 'twin', 'eth0')}.json`);
    const stale = { programmed: true, at: new Date().toISOString(), endpoint: 'x', containerID: xt.containerId };
    writeFileSync(old, JSON.stringify(stale));
    await env.agent.stop();
    env.agent = await startPolicyAgent(env);
    await eventually('the new agent resyncs', () => env.agent.log().includes('table resynced'));
    await eventually('the old-format file is removed', () => !status().some((x) => join(env.statusDir, x.f) === old));
    for (const t of [xt, zt]) expect(statusOf(t).length, `${t.id}'s status file`).toBe(1);
  });

  it('an open TCP connection survives a policy change that still allows it and is cut by one that denies it', async () => {
    const srv = await addPod(env, 'z', 'srv', { pod: 'srv' }, false);
    const cli = await addPod(env, 'z', 'cli', { pod: 'cli' }, false);
    const server = spawnIn(srv, ECHO_SERVER, []);
    let client: ChildProcess | undefined;
    try {
      await firstLine(server);
      client = spawnIn(cli, ECHO_CLIENT, [srv.ip]);
      const lines: string[] = [];
      createInterface({ input: client.stdout! }).on('line', (l) => lines.push(l));
      const exchanges = () => lines.filter((l) => l === 'ok').length;
      await eventually('the connection is up', () => exchanges() > 5);
      const entry = () => conntrackOf(cli.ip, srv.ip, 8080);
      const before = entry();
      expect(before?.id, 'the connection has a conntrack entry with an id').toBeDefined();

      // A policy selecting srv that still admits cli: the agent checks srv's entries and leaves this one.
      const deleted = ctDeleted();
      const checked = checks();
      await applyK8sPolicy(env, admit('z', 'srv-in', 'srv', 'cli'));
      await eventually('the policy is programmed', () => listTable(env).includes('z/knp.default.srv-in ingress'));
      const n = exchanges();
      await eventually('the connection carries on', () => exchanges() > n + 20);
      expect(lines.filter((l) => l.startsWith('cut'))).toEqual([]);
      // The same entry (the kernel gives a re-created one another id): never deleted and picked up again.
      expect(entry()?.id).toBe(before!.id);
      await eventually('the agent checked the entries', () => checks() > checked);
      expect(entry()?.id).toBe(before!.id);
      expect(ctDeleted()).toBe(deleted);

      // The same policy now admits only another pod: the open connection is cut.
      const t0 = Date.now();
      await applyK8sPolicy(env, admit('z', 'srv-in', 'srv', 'nobody'));
      await eventually('the connection is cut', () => lines.some((l) => l.startsWith('cut')), 15_000);
      process.stderr.write(`connection cut ${Date.now() - t0} ms after the deny was written\n`);
      expect(await probeFrom(cli, [[srv.ip, 8080, 'tcp']])).toEqual([false]);
      await eventually('the agent deleted its entry', () => ctDeleted() > deleted);
    } finally {
      client?.kill('SIGKILL');
      server.kill('SIGKILL');
    }
  });

  it('a connection where only the server sends is cut by a new deny too', async () => {
    const srv = await addPod(env, 'z', 'feed', { pod: 'feed' }, false);
    const cli = await addPod(env, 'z', 'reader', { pod: 'reader' }, false);
    const server = spawnIn(srv, STREAM_SERVER, []);
    let client: ChildProcess | undefined;
    try {
      await firstLine(server);
      client = spawnIn(cli, STREAM_CLIENT, [srv.ip]);
      let ticks = 0;
      createInterface({ input: client.stdout! }).on('line', (l) => (ticks += l === 'tick' ? 1 : 0));
      await eventually('the stream flows', () => ticks > 5);

      // feed now admits only pods labelled nobody. Its own egress and reader's ingress stay open: a
      // stream picked up again from feed's side would be accepted, so it must not be picked up.
      await applyK8sPolicy(env, admit('z', 'feed-in', 'feed', 'nobody'));
      await eventually('the policy is programmed', () => listTable(env).includes('z/knp.default.feed-in ingress'));
      await sleep(1000);
      const n = ticks;
      await sleep(1000);
      expect(ticks, 'lines the client received in the second after the cut').toBe(n);
      expect(conntrackOf(cli.ip, srv.ip, 8090)).toBeUndefined();
    } finally {
      client?.kill('SIGKILL');
      server.kill('SIGKILL');
    }
  });
});

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** The conntrack entry (in the agent's namespace, which is this one) of a TCP connection. */
function conntrackOf(src: string, dst: string, dport: number): { id?: number } | undefined {
  const nl = netlink();
  try {
    return nl.conntrackList([src]).find((e) => e.protocol === 6 && e.src === src && e.dst === dst && e.dport === dport);
  } finally {
    nl.close();
  }
}

/** The agent's checks of conntrack entries after policy changes (its log), and the entries they deleted. */
function cuts(): number[] {
  const re = /deleted the conntrack entries of flows the policy change denies.*?deleted=(\d+)/g;
  return [...env.agent.log().matchAll(re)].map((m) => Number(m[1]));
}
const ctDeleted = () => cuts().reduce((a, b) => a + b, 0);
const checks = () => cuts().length;

/** Echoes every line on TCP 8080 for as long as the peer keeps the connection. */
const ECHO_SERVER = `
import socket, threading
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(('0.0.0.0', 8080)); s.listen(8)
print('ready', flush=True)
def echo(c):
    while True:
        d = c.recv(64)
        if not d: return
        c.sendall(d)
while True:
    c, _ = s.accept(); threading.Thread(target=echo, args=(c,), daemon=True).start()`;

/** One connection; a line every 50 ms, each answered within 0.5 s ("ok"), else "cut" and exit. */
const ECHO_CLIENT = `
import socket, sys, time
s = socket.create_connection((sys.argv[1], 8080), timeout=2); s.settimeout(0.5)
while True:
    try:
        s.sendall(b'ping\\n')
        if s.recv(64) != b'ping\\n': raise OSError('short')
        print('ok', flush=True)
    except OSError as e:
        print('cut', repr(e), flush=True); sys.exit(0)
    time.sleep(0.05)`;

/** Sends a line every 50 ms on every connection to TCP 8090, and reads nothing. */
const STREAM_SERVER = `
import socket, threading, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(('0.0.0.0', 8090)); s.listen(8)
print('ready', flush=True)
def feed(c):
    try:
        while True:
            c.sendall(b'tick\\n'); time.sleep(0.05)
    except OSError:
        return
while True:
    c, _ = s.accept(); threading.Thread(target=feed, args=(c,), daemon=True).start()`;

/** Connects and prints every line it receives; sends nothing. */
const STREAM_CLIENT = `
import socket, sys
s = socket.create_connection((sys.argv[1], 8090), timeout=5); s.settimeout(None)
for l in s.makefile('rb'):
    print('tick', flush=True)
print('closed', flush=True)`;

function spawnIn(p: Pod, code: string, args: string[]): ChildProcess {
  return spawn('ip', ['netns', 'exec', p.netns, 'python3', '-c', code, ...args], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
}

function firstLine(proc: ChildProcess): Promise<string> {
  return new Promise((resolve, reject) => {
    createInterface({ input: proc.stdout! }).once('line', resolve);
    proc.once('exit', (c) => reject(new Error(`exited ${c}`)));
  });
}
