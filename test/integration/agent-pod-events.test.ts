// Kubernetes Events for failed ADDs (src/agent/pod-events.ts) against the fake
// API server: which failures qualify (codes 100, 102, 7 on ADD with a pod in
// CNI_ARGS), what the event says, and the throttling (per pod and reason, and
// per minute overall) with a controlled clock; then through the real agent
// binary, a failing ADD sent by the shim becomes an event on the pod.
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createPodEvents } from '../../src/agent/pod-events.js';
import { createKubeClient, type KubeClient } from '../../src/k8s/client.js';
import { DIST, runCni } from '../support/cni.js';
import { startFakeApiServer, writeKubeconfig, type FakeApiServer } from '../support/fake-apiserver.js';
import { installShim } from '../support/plugin-harness.js';

const TOKEN = 'events-token';
let api: FakeApiServer;
let client: KubeClient;
let tmp: string;
const log = { error: () => {}, warn: () => {}, info: () => {}, debug: () => {} };

beforeAll(async () => {
  api = await startFakeApiServer({ tls: true, auth: { tokens: [TOKEN] } });
  client = await createKubeClient({ kubeconfig: writeKubeconfig(api.dir, api, { token: TOKEN }) });
  api.put('/api/v1/namespaces/shop', { metadata: { name: 'shop' } });
  api.put('/api/v1/namespaces/shop/pods/web-0', {
    metadata: { name: 'web-0', uid: 'uid-web-0' },
    spec: { containers: [{ name: 'c', image: 'x' }] },
  });
  tmp = mkdtempSync(join(tmpdir(), `pod-events-${process.pid}-`));
});
afterAll(async () => {
  client?.close();
  await api?.stop();
  if (tmp) rmSync(tmp, { recursive: true, force: true });
});

async function events(ns: string): Promise<
  Array<{
    reason: string;
    message: string;
    type: string;
    involvedObject: { name: string; kind: string };
    source: { host: string };
  }>
> {
  return ((await client.request('GET', `/api/v1/namespaces/${ns}/events`)) as { items: never[] }).items;
}

const failure = (code: number, pod: string, command = 'ADD') => ({
  plugin: 'netplugin',
  command,
  exitCode: 1,
  stdout: JSON.stringify({ cniVersion: '1.0.0', code, msg: `failure ${code}`, details: 'what to do' }),
  seconds: 0.01,
  cniArgs: `IgnoreUnknown=1;K8S_POD_NAMESPACE=shop;K8S_POD_NAME=${pod}`,
});

describe('pod events for failed ADDs', () => {
  it('records user-fixable failures on the pod, throttled per pod and reason and per minute', async () => {
    let t = 1_000_000;
    const ev = createPodEvents({
      client,
      node: 'node-a',
      log,
      perPodIntervalMs: 60_000,
      maxPerMinute: 3,
      now: () => t,
    });
    ev.served(failure(100, 'web-0'));
    ev.served(failure(100, 'web-0')); // same pod and reason: throttled
    ev.served(failure(102, 'web-0')); // another reason: recorded
    ev.served(failure(999, 'web-1')); // internal error: not the user's to fix
    ev.served(failure(100, 'web-2', 'DEL')); // only ADD
    ev.served({ ...failure(100, 'web-3'), cniArgs: '' }); // no pod
    ev.served({ ...failure(100, 'web-4'), exitCode: 0 });
    await ev.idle();
    let got = await events('shop');
    expect(got.map((e) => [e.involvedObject.name, e.reason]).sort()).toEqual([
      ['web-0', 'NetpluginIPAMFailed'],
      ['web-0', 'NetpluginPodConfigInvalid'],
    ]);
    expect(got[0]).toMatchObject({
      type: 'Warning',
      involvedObject: { kind: 'Pod', name: 'web-0', uid: 'uid-web-0' },
      source: { host: 'node-a' },
    });
    expect(got.find((e) => e.reason === 'NetpluginIPAMFailed')!.message).toBe(
      'CNI ADD failed (code 100): failure 100: what to do',
    );

    // The per-minute cap: one more fits (3), the next does not.
    ev.served(failure(7, 'web-5'));
    ev.served(failure(7, 'web-6'));
    await ev.idle();
    expect((await events('shop')).length).toBe(3);
    // A minute later both throttles have passed.
    t += 61_000;
    ev.served(failure(100, 'web-0'));
    await ev.idle();
    got = await events('shop');
    expect(got.filter((e) => e.involvedObject.name === 'web-0' && e.reason === 'NetpluginIPAMFailed')).toHaveLength(2);
  });

  it('records a warning outside an ADD (a pod the policy agent cannot program), with the same throttle', async () => {
    api.put('/api/v1/namespaces/lab', { metadata: { name: 'lab' } });
    api.put('/api/v1/namespaces/lab/pods/odd', {
      metadata: { name: 'odd', uid: 'uid-odd' },
      spec: { containers: [{ name: 'c', image: 'x' }] },
    });
    const ev = createPodEvents({ client, node: 'node-b', log, now: () => 5_000_000 });
    ev.warn(
      'lab',
      'odd',
      'NetpluginPolicyNotProgrammed',
      'netplugin cannot program this pod\'s network policy: interfaceName "a b"',
    );
    ev.warn('lab', 'odd', 'NetpluginPolicyNotProgrammed', 'again'); // throttled
    await ev.idle();
    const got = await events('lab');
    expect(got).toHaveLength(1);
    expect(got[0]).toMatchObject({
      type: 'Warning',
      reason: 'NetpluginPolicyNotProgrammed',
      involvedObject: { kind: 'Pod', name: 'odd', uid: 'uid-odd' },
      source: { host: 'node-b' },
    });
    expect(got[0]!.message).toContain('interfaceName "a b"');
  });

  it('the agent records one when an ADD through the shim fails for a missing pool', async () => {
    const socket = join(tmp, 'run/cni.sock');
    const agent = spawn(
      process.execPath,
      [
        join(DIST, 'netplugin-node.mjs'),
        '--socket',
        socket,
        '--health-addr',
        'off',
        '--kubeconfig',
        writeKubeconfig(api.dir, api, { token: TOKEN }),
        '--nodename',
        'node-b',
      ],
      { stdio: ['ignore', 'ignore', 'pipe'] },
    );
    let err = '';
    agent.stderr!.on('data', (d: Buffer) => (err += d));
    try {
      for (let i = 0; i < 300 && !err.includes('CNI server listening'); i++)
        await new Promise((r) => setTimeout(r, 100));
      const shim = installShim(join(tmp, 'bin'));
      // A netconf the plugin rejects (code 7): an MTU below the IPv4 minimum.
      const conf = {
        cniVersion: '1.0.0',
        name: 'ev',
        type: 'netplugin',
        mtu: 5,
        etcd_endpoints: 'http://127.0.0.1:1',
        ipam: { type: 'netplugin-ipam' },
      };
      writeFileSync(join(tmp, 'conf.json'), JSON.stringify(conf));
      const r = await runCni({
        bin: shim,
        command: 'ADD',
        conf,
        containerId: 'c-ev',
        netns: '/var/run/netns/none',
        args: 'IgnoreUnknown=1;K8S_POD_NAMESPACE=shop;K8S_POD_NAME=api-0',
        env: { NETPLUGIN_AGENT_SOCKET: socket },
      });
      expect(JSON.parse(r.stdout).code).toBe(7);
      let got: Awaited<ReturnType<typeof events>> = [];
      for (let i = 0; i < 100; i++) {
        got = (await events('shop')).filter((e) => e.involvedObject.name === 'api-0');
        if (got.length) break;
        await new Promise((res) => setTimeout(res, 100));
      }
      expect(got).toHaveLength(1);
      expect(got[0]).toMatchObject({ reason: 'NetpluginNetworkConfigInvalid', source: { host: 'node-b' } });
      expect(got[0]!.message).toContain('mtu');
    } finally {
      agent.kill('SIGTERM');
      await new Promise((r) => agent.once('exit', r));
    }
  });
});
