// Flow logs from the node, end to end with real traffic: the built agent with
// --flow-aggregator (policy table with NFLOG tags, conntrack events and
// accounting) sends its records to the built netplugin-flows over mTLS. Pods
// x/a, y/b and z/c; a NetworkPolicy in y lets x/a reach y/b on TCP 80 (and so
// isolates y/b from everyone else); an "internet" namespace at a
// documentation address (198.51.100.174) stands for a public server.
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Flow } from '../../src/flows/record.js';
import { END_OF_TIER_HIT } from '../../src/model/policy-hit.js';
import { assertThrowawayHostNetns } from '../support/cni.js';
import { createNetns, deleteHostLink, removeAllNetns } from '../support/netns.js';
import { makeCert, type CertPair } from '../support/certs.js';
import { flowsPki, startFlows, type FlowsPki, type FlowsProcess } from '../support/flows.js';
import { freePort } from '../support/etcd.js';
import { NODE } from '../support/plugin-harness.js';
import {
  addPod,
  applyK8sPolicy,
  probeFrom,
  putObject,
  startPolicyAgent,
  startPolicyEnv,
  type PolicyEnv,
  type Pod,
} from '../support/policy-harness.js';
import { API_VERSION } from '../../src/model/resources.js';
import { ROOT } from '../support/cni.js';

const POOL = { name: 'flows-node', cidr: '10.173.0.0/26', blockSize: 26 };
const INET_HOST = '198.51.100.173';
const INET_ADDR = '198.51.100.174';
// Not of the pods' host veth prefix (npn): the base table would take it for an unprogrammed pod.
const INET_LINK = 'inet173n';

let env: PolicyEnv;
let pki: FlowsPki;
let agentCert: CertPair;
let agg: FlowsProcess;
let collectorPort: number;
let inetServer: ChildProcess | undefined;
let a: Pod, b: Pod, c: Pod;

async function flows(): Promise<Flow[]> {
  const r = await fetch(`${agg.apiUrl}/api/v1/flows?pageSize=10000`);
  return ((await r.json()) as { items: Flow[] }).items;
}

const is = (f: Flow, src: Pod, dst: Pod) =>
  f.sourceNamespace === src.ns && f.sourceName === src.name && f.destNamespace === dst.ns && f.destName === dst.name;

/** Polls the aggregator until `pick` finds what it wants (or the deadline). */
async function until<T>(what: string, pick: (fl: Flow[]) => T | undefined, ms = 40_000): Promise<T> {
  return untilAfter(what, undefined, pick, ms);
}

/** until(), doing `round` before each look (traffic that makes new records). */
async function untilAfter<T>(
  what: string,
  round: (() => Promise<unknown>) | undefined,
  pick: (fl: Flow[]) => T | undefined,
  ms = 40_000,
): Promise<T> {
  const end = Date.now() + ms;
  let last: Flow[] = [];
  for (;;) {
    await round?.();
    last = await flows().catch(() => last);
    const got = pick(last);
    if (got !== undefined && got !== false) return got;
    if (Date.now() > end) {
      const agent = env.agent
        .log()
        .split('\n')
        .filter((l) => l.includes('flow'))
        .slice(-10)
        .join('\n');
      throw new Error(`${what}: not seen in ${ms} ms; flows: ${JSON.stringify(last).slice(0, 3000)}\n${agent}`);
    }
    await new Promise((r) => setTimeout(r, 500));
  }
}

const started = (fl: Flow[], pred: (f: Flow) => boolean) =>
  fl.filter(pred).reduce((n, f) => n + f.connectionsStarted, 0);

async function connect(from: Pod, to: string, n: number): Promise<boolean[]> {
  return probeFrom(
    from,
    Array.from({ length: n }, () => [to, 80, 'tcp'] as [string, number, 'tcp']),
  );
}

beforeAll(async () => {
  assertThrowawayHostNetns();
  pki = flowsPki();
  // The batch's node must be the certificate's name: the agent's is its node name.
  agentCert = makeCert(pki.dir, pki.ca, NODE, 'client');
  collectorPort = await freePort();
  agg = await startFlows(pki, { collectorPort });
  env = await startPolicyEnv(POOL, 'npn', {
    agentArgs: [
      '--flow-aggregator',
      `https://127.0.0.1:${collectorPort}`,
      '--flow-tls-cert',
      agentCert.cert,
      '--flow-tls-key',
      agentCert.key,
      '--flow-tls-ca',
      pki.ca.cert,
      '--flow-flush-interval',
      '1s',
    ],
  });
  a = await addPod(env, 'x', 'a');
  b = await addPod(env, 'y', 'b');
  c = await addPod(env, 'z', 'c');
  await applyK8sPolicy(env, {
    metadata: { name: 'allow-a', namespace: 'y' },
    spec: {
      podSelector: { matchLabels: { pod: 'b' } },
      policyTypes: ['Ingress'],
      ingress: [
        {
          from: [{ namespaceSelector: { matchLabels: { ns: 'x' } }, podSelector: { matchLabels: { pod: 'a' } } }],
          ports: [{ port: 80, protocol: 'TCP' }],
        },
      ],
    },
  });
  // The internet: a namespace behind a host veth, at a public-looking address.
  const inet = createNetns('npninet');
  execFileSync('ip', ['link', 'add', INET_LINK, 'type', 'veth', 'peer', 'name', 'eth0', 'netns', inet.name]);
  execFileSync('ip', ['addr', 'add', `${INET_HOST}/30`, 'dev', INET_LINK]);
  execFileSync('ip', ['link', 'set', INET_LINK, 'up']);
  execFileSync('ip', ['-n', inet.name, 'addr', 'add', `${INET_ADDR}/30`, 'dev', 'eth0']);
  execFileSync('ip', ['-n', inet.name, 'link', 'set', 'eth0', 'up']);
  execFileSync('ip', ['-n', inet.name, 'link', 'set', 'lo', 'up']);
  execFileSync('ip', ['-n', inet.name, 'route', 'add', '10.173.0.0/26', 'via', INET_HOST]);
  inetServer = spawn(
    'ip',
    ['netns', 'exec', inet.name, 'python3', join(ROOT, 'test/support/policy-pod.py'), 'serve', '80', '81'],
    { stdio: ['ignore', 'pipe', 'inherit'] },
  );
  await new Promise<void>((resolve, reject) => {
    createInterface({ input: inetServer!.stdout! }).once('line', (l) =>
      l === 'ready' ? resolve() : reject(new Error(l)),
    );
    inetServer!.once('exit', (code) => reject(new Error(`internet server exited ${code}`)));
  });
  // Enforced: a reaches b, c does not.
  const end = Date.now() + 30_000;
  for (;;) {
    const [ab] = await connect(a, b.ip, 1);
    const [cb] = await probeFrom(c, [[b.ip, 80, 'tcp']], 0.5);
    if (ab && !cb) break;
    if (Date.now() > end) throw new Error(`policy not in force: a→b ${ab}, c→b ${cb}\n${env.agent.log().slice(-3000)}`);
    await new Promise((r) => setTimeout(r, 300));
  }
}, 180_000);

afterAll(async () => {
  inetServer?.kill('SIGKILL');
  deleteHostLink(INET_LINK);
  await env?.close();
  await agg?.stop();
  pki?.remove();
  removeAllNetns();
}, 60_000);

describe('flow logs from the node', () => {
  it('reports an Allow flow a→b naming the policy and rule (Dst) and the profile (Src), and a Deny c→b (end of policies)', async () => {
    expect(await connect(a, b.ip, 3)).toEqual([true, true, true]);
    expect(
      await probeFrom(
        c,
        [
          [b.ip, 80, 'tcp'],
          [b.ip, 80, 'tcp'],
        ],
        0.5,
      ),
    ).toEqual([false, false]);
    const dst = await until('Allow a→b reported by b', (fl) =>
      fl.find((f) => is(f, a, b) && f.reporter === 'Dst' && f.action === 'Allow' && f.policies.enforced.length > 0),
    );
    expect(dst.policies.enforced).toEqual([
      { kind: 'KubernetesNetworkPolicy', namespace: 'y', name: 'allow-a', tier: '', action: 'Allow', ruleIndex: 0 },
    ]);
    expect(dst.policies.pending).toEqual([]);
    expect(dst.destPort).toBe(80);
    expect(dst.protocol).toBe('TCP');
    expect(dst.sourceType).toBe('wep');
    expect(dst.sourceLabels).toMatchObject({ pod: 'a' });
    const src = await until('Allow a→b reported by a', (fl) =>
      fl.find((f) => is(f, a, b) && f.reporter === 'Src' && f.action === 'Allow' && f.policies.enforced.length > 0),
    );
    expect(src.policies.enforced[0]).toMatchObject({ kind: 'Profile', action: 'Allow' });
    const deny = await until('Deny c→b reported by b', (fl) =>
      fl.find((f) => is(f, c, b) && f.reporter === 'Dst' && f.action === 'Deny'),
    );
    expect(deny.policies.enforced).toEqual([END_OF_TIER_HIT]);
    expect(deny.packetsIn).toBeGreaterThan(0);
    expect(deny.connectionsStarted).toBe(0);
    // No connection c→b was made: no report of either end counts one.
    expect(started(await flows(), (f) => is(f, c, b))).toBe(0);
  }, 180_000);

  it('counts connections and bytes from conntrack, growing with the traffic', async () => {
    const pred = (f: Flow) => is(f, a, b) && f.reporter === 'Dst' && f.action === 'Allow';
    const before = await until('a→b counted', (fl) => started(fl, pred) || undefined);
    const bytesBefore = (await flows()).filter(pred).reduce((n, f) => n + f.bytesIn + f.bytesOut, 0);
    expect(await connect(a, b.ip, 4)).toEqual([true, true, true, true]);
    const after = await until('4 more a→b connections', (fl) =>
      started(fl, pred) >= before + 4 ? started(fl, pred) : undefined,
    );
    expect(after).toBe(before + 4);
    const fl = await flows();
    const bytesAfter = fl.filter(pred).reduce((n, f) => n + f.bytesIn + f.bytesOut, 0);
    expect(bytesAfter).toBeGreaterThan(bytesBefore);
    // The server answered "ok" on each: b sent bytes out, a received them (both ends report).
    expect(fl.filter(pred).reduce((n, f) => n + f.packetsOut, 0)).toBeGreaterThan(0);
    const srcIn = fl.filter((f) => is(f, a, b) && f.reporter === 'Src').reduce((n, f) => n + f.packetsIn, 0);
    expect(srcIn).toBeGreaterThan(0);
    // Each connection completes once (TIME_WAIT lasts minutes: it must not be counted at every flush).
    const done = (f2: Flow[]) => f2.filter(pred).reduce((n, f) => n + f.connectionsCompleted, 0);
    await until('completed', (f2) => done(f2) >= after || undefined);
    await new Promise((r) => setTimeout(r, 2500));
    expect(done(await flows())).toBe(after);
  });

  it('names traffic to an outside public address net/pub', async () => {
    expect(await connect(a, INET_ADDR, 2)).toEqual([true, true]);
    const out = await until('a→internet', (fl) =>
      fl.find(
        (f) => f.sourceName === 'a' && f.sourceNamespace === 'x' && f.destType === 'net' && f.connectionsStarted > 0,
      ),
    );
    expect(out).toMatchObject({ destName: 'pub', destNamespace: '', reporter: 'Src', action: 'Allow', destPort: 80 });
  });

  it('an aggregator restart loses nothing the agent buffered and duplicates nothing', async () => {
    const pred = (f: Flow) => is(f, a, b) && f.reporter === 'Dst' && f.action === 'Allow';
    await agg.stop();
    expect(await connect(a, b.ip, 5)).toEqual([true, true, true, true, true]);
    // Several flush intervals while it is away: the records wait in the agent's buffer.
    await new Promise((r) => setTimeout(r, 3000));
    agg = await startFlows(pki, { collectorPort });
    const got = await until('the buffered connections', (fl) =>
      started(fl, pred) >= 5 ? started(fl, pred) : undefined,
    );
    expect(got).toBe(5);
    await new Promise((r) => setTimeout(r, 3000));
    expect(started(await flows(), pred)).toBe(5);
  });

  it('shows a staged deny in the pending trace of an allowed flow, while the traffic still flows', async () => {
    // Staged only: no node enforces it, so a still reaches b; the records say it would not.
    await putObject(env, {
      apiVersion: API_VERSION,
      kind: 'StagedNetworkPolicy',
      metadata: { name: 'deny-b', namespace: 'y' },
      spec: { order: 10, selector: "pod == 'b'", types: ['Ingress'], ingress: [{ action: 'Deny' }] },
    });
    const staged = { kind: 'StagedNetworkPolicy', namespace: 'y', name: 'deny-b', tier: 'default', action: 'Deny' };
    const dst = await untilAfter(
      'a staged deny in the pending trace of a→b',
      async () => {
        // Each round's connections make new records, evaluated against what the agent has seen by then.
        expect(await connect(a, b.ip, 1)).toEqual([true]);
      },
      (fl) => fl.find((f) => is(f, a, b) && f.reporter === 'Dst' && f.action === 'Allow' && f.policies.pending.length),
    );
    const allowA = { kind: 'KubernetesNetworkPolicy', namespace: 'y', name: 'allow-a', tier: '', action: 'Allow' };
    expect(dst.policies.enforced).toEqual([{ ...allowA, ruleIndex: 0 }]);
    expect(dst.policies.pending).toEqual([{ ...staged, ruleIndex: 0 }]);
    expect(dst.connectionsStarted).toBeGreaterThan(0);
    // a's egress is not touched by it: its pending trace is its enforced one.
    const src = await until('a→b reported by a with a pending trace', (fl) =>
      fl.find((f) => is(f, a, b) && f.reporter === 'Src' && f.action === 'Allow' && f.policies.pending.length > 0),
    );
    expect(src.policies.pending).toEqual(src.policies.enforced);
    // Deleted, the staged policy leaves the trace empty again (no staged policy: nothing pending).
    const unstaged = (f: Flow) =>
      is(f, a, b) && f.reporter === 'Dst' && f.action === 'Allow' && f.policies.pending.length === 0;
    const before = started(await flows(), unstaged);
    await env.ds.delete('StagedNetworkPolicy', 'deny-b', { namespace: 'y' });
    await untilAfter(
      'a→b without a pending trace after the staged policy went',
      async () => {
        expect(await connect(a, b.ip, 1)).toEqual([true]);
      },
      (fl) => started(fl, unstaged) > before || undefined,
    );
  });
  it('takes the aggregator and interval from the AgentConfiguration without the flags, live', async () => {
    // The agent again, with the TLS files only: flow logs wait for an aggregator from the datastore.
    await env.agent.stop();
    const tls = ['--flow-tls-cert', agentCert.cert, '--flow-tls-key', agentCert.key, '--flow-tls-ca', pki.ca.cert];
    env.agent = await startPolicyAgent(env, tls);
    const conf = (spec: Record<string, string>) =>
      putObject(env, { apiVersion: API_VERSION, kind: 'AgentConfiguration', metadata: { name: `node.${NODE}` }, spec });
    const pred = (f: Flow) => is(f, a, b) && f.reporter === 'Dst' && f.action === 'Allow';
    const before = started(await flows(), pred);
    const spec = { flowLogsAggregator: `https://127.0.0.1:${collectorPort}`, flowLogsFlushInterval: '1s' };
    await conf(spec);
    await untilAfter(
      "a→b reported to the AgentConfiguration's aggregator",
      async () => {
        expect(await connect(a, b.ip, 1)).toEqual([true]);
      },
      (fl) => started(fl, pred) > before || undefined,
    );
    // Another aggregator named there: the agent's client moves to it.
    const agg2 = await startFlows(pki, { collectorPort: await freePort() });
    try {
      const moved = { ...spec, flowLogsAggregator: `https://127.0.0.1:${agg2.collectorPort}` };
      await conf(moved);
      const end = Date.now() + 40_000;
      for (;;) {
        expect(await connect(a, b.ip, 1)).toEqual([true]);
        const r = await fetch(`${agg2.apiUrl}/api/v1/flows?pageSize=10000`);
        const fl = ((await r.json()) as { items: Flow[] }).items;
        if (started(fl, pred) > 0) break;
        if (Date.now() > end) throw new Error(`no a→b at the second aggregator\n${env.agent.log().slice(-3000)}`);
        await new Promise((r2) => setTimeout(r2, 500));
      }
      expect(env.agent.log()).toContain('restarting the flow client');
    } finally {
      await agg2.stop();
    }
  });
});
