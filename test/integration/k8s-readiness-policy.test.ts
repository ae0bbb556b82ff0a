// Issue 8 through the built executable: readiness gates (docs/addresses-and-annotations.md)
// polled against a real local HTTP server before anything is set up, and the
// policy-setup wait (docs/addresses-and-annotations.md) released by the node agent's status
// file, or by its timeout.
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { endpointStatusKey, statusFilePath, writePolicyStatus } from '../../src/policy-status/index.js';
import { DatastoreError } from '../../src/errors.js';
import { assertThrowawayHostNetns } from '../support/cni.js';
import { createNetns, removeAllNetns } from '../support/netns.js';
import {
  NODE,
  cleanupAttachments,
  cni,
  ensureBuilt,
  expectCniError,
  expectNothingLeft,
  expectOk,
  k8sArgs,
  link,
  type Cluster,
  startCluster,
} from '../support/plugin-harness.js';
import { k8sNetconf, putPod, startApi, type Api } from '../support/k8s-harness.js';

const PREFIX = 'npr';
const POOL = { name: 'gate-v4', cidr: '10.77.25.0/24', blockSize: 28 };
let c: Cluster;
let api: Api;
let statusDir: string;
const servers: Server[] = [];

beforeAll(async () => {
  assertThrowawayHostNetns();
  ensureBuilt();
  c = await startCluster([POOL]);
  api = await startApi();
  statusDir = mkdtempSync(join(tmpdir(), `k8s-status-${process.pid}-`));
});
afterEach(async () => {
  await cleanupAttachments();
  removeAllNetns();
  await Promise.all(servers.splice(0).map((s) => new Promise((r) => s.close(r))));
});
afterAll(async () => {
  removeAllNetns();
  await api?.server.stop();
  await c?.close();
  if (statusDir) rmSync(statusDir, { recursive: true, force: true });
});

/** A readiness endpoint answering with the scripted statuses in turn (the last one repeats). */
async function gate(statuses: number[], body = 'starting'): Promise<{ url: string; hits: () => number }> {
  let n = 0;
  const srv = createServer((_req, res) => {
    const status = statuses[Math.min(n, statuses.length - 1)]!;
    n++;
    res.writeHead(status, { 'content-type': 'text/plain' });
    res.end(status >= 200 && status < 300 ? 'ok' : body);
  });
  servers.push(srv);
  await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
  const port = (srv.address() as AddressInfo).port;
  return { url: `http://127.0.0.1:${port}/readiness`, hits: () => n };
}

let seq = 0;
function newPod(): { podName: string; call: { containerId: string; netns: string; args: string }; netnsName: string } {
  const podName = `g${++seq}-${process.pid}`;
  putPod(api, 'default', podName);
  const ns = createNetns('pod');
  return {
    podName,
    call: { containerId: `${podName}-c`, netns: ns.path, args: k8sArgs('default', podName) },
    netnsName: ns.name,
  };
}

describe('readiness gates', () => {
  it('a gate that is ready at once: one probe, then the ADD proceeds', async () => {
    const g = await gate([200]);
    const p = newPod();
    const conf = k8sNetconf(c, api, PREFIX, { readiness_gates: [g.url] });
    expectOk(await cni('ADD', conf, p.call));
    expect(g.hits()).toBe(1);
    expectOk(await cni('DEL', conf, p.call));
    await expectNothingLeft(c, PREFIX);
  });

  it('a gate that answers 503, 503, then 200: ready after three probes', async () => {
    const g = await gate([503, 503, 200]);
    const p = newPod();
    const conf = k8sNetconf(c, api, PREFIX, { readiness_gates: [g.url] });
    const add = await cni('ADD', conf, p.call);
    expectOk(add);
    expect(g.hits()).toBe(3);
    expect(link('eth0', p.netnsName)).toBeDefined();
    expectOk(await cni('DEL', conf, p.call));
    await expectNothingLeft(c, PREFIX);
  });

  it('all gates must be ready: one ready, one that becomes ready later', async () => {
    const ready = await gate([200]);
    const later = await gate([503, 200]);
    const p = newPod();
    const conf = k8sNetconf(c, api, PREFIX, { readiness_gates: [ready.url, later.url] });
    expectOk(await cni('ADD', conf, p.call));
    expect(ready.hits()).toBe(1);
    expect(later.hits()).toBe(2);
    expectOk(await cni('DEL', conf, p.call));
    await expectNothingLeft(c, PREFIX);
  });

  it('a gate that never becomes ready: code 11 naming the URL and its last answer after readiness_gate_timeout_seconds, nothing left behind', async () => {
    const g = await gate([503], 'still starting');
    const p = newPod();
    const conf = k8sNetconf(c, api, PREFIX, { readiness_gates: [g.url], readiness_gate_timeout_seconds: 1 });
    const e = expectCniError(await cni('ADD', conf, p.call), 11);
    expect(e.msg).toContain(`readiness gate ${g.url} not ready after 1 s`);
    expect(e.msg).toContain("last answer HTTP 503 'still starting'");
    expect(g.hits()).toBeGreaterThan(1);
    expect(link('eth0', p.netnsName)).toBeUndefined();
    await expectNothingLeft(c, PREFIX);
  });

  it('a gate nobody listens on: code 11 naming the URL and the connection error', async () => {
    const g = await gate([200]);
    const url = g.url;
    await new Promise((r) => servers.pop()!.close(r));
    const p = newPod();
    const conf = k8sNetconf(c, api, PREFIX, { readiness_gates: [url], readiness_gate_timeout_seconds: 1 });
    const e = expectCniError(await cni('ADD', conf, p.call), 11);
    expect(e.msg).toContain(url);
    expect(e.msg).toContain('ECONNREFUSED');
    await expectNothingLeft(c, PREFIX);
  });

  it('readiness_gate_timeout_seconds out of range: code 7 naming the field', async () => {
    const p = newPod();
    const conf = k8sNetconf(c, api, PREFIX, {
      readiness_gates: ['http://127.0.0.1:1/'],
      readiness_gate_timeout_seconds: 0,
    });
    const e = expectCniError(await cni('ADD', conf, p.call), 7);
    expect(e.msg).toContain('readiness_gate_timeout_seconds');
    await expectNothingLeft(c, PREFIX);
  });
});

describe('policy-setup wait', () => {
  const wepName = (pod: string) => `${NODE}-k8s-${pod.replace(/-/g, '--')}-eth0`;
  /** The status key of a pod's endpoint (the pods here are in namespace default). */
  const statusKey = (pod: string) => endpointStatusKey('default', wepName(pod));

  /** Stands in for the node agent: once the endpoint exists and ~1 s has passed since `t0`, reports it programmed. */
  function agentReportsLater(
    pod: string,
    containerID: string,
    t0: number,
  ): { wrote: Promise<number>; stop: () => void } {
    let stopped = false;
    const wrote = (async () => {
      for (;;) {
        if (stopped) throw new Error('stopped');
        try {
          await c.ds.get('WorkloadEndpoint', wepName(pod), 'default');
          break;
        } catch (e) {
          if (!DatastoreError.is(e, 'NotFound')) throw e;
        }
        await new Promise((r) => setTimeout(r, 50));
      }
      const wait = t0 + 1000 - Date.now();
      if (wait > 0) await new Promise((r) => setTimeout(r, wait));
      await writePolicyStatus(statusKey(pod), { statusDir, containerID });
      return Date.now();
    })();
    wrote.catch(() => undefined);
    return { wrote, stop: () => (stopped = true) };
  }

  it('the ADD returns once the agent reports the endpoint programmed, well before the timeout', async () => {
    const p = newPod();
    const timeoutS = 30;
    const conf = k8sNetconf(c, api, PREFIX, { policy_setup_timeout_seconds: timeoutS, endpoint_status_dir: statusDir });
    const t0 = Date.now();
    const agent = agentReportsLater(p.podName, p.call.containerId, t0);
    try {
      const add = await cni('ADD', conf, p.call);
      const finished = Date.now();
      expectOk(add);
      const wroteAt = await agent.wrote;
      expect(finished, 'ADD returned before the status file was written').toBeGreaterThanOrEqual(wroteAt);
      expect(finished - t0, 'ADD waited for the timeout instead of the file').toBeLessThan((timeoutS * 1000) / 2);
      expect(existsSync(statusFilePath(statusKey(p.podName), statusDir))).toBe(true);
    } finally {
      agent.stop();
    }
    expectOk(await cni('DEL', conf, p.call));
    expect(existsSync(statusFilePath(statusKey(p.podName), statusDir)), 'DEL removes the status file').toBe(false);
    await expectNothingLeft(c, PREFIX);
  });

  it('no report: the ADD succeeds once policy_setup_timeout_seconds has elapsed', async () => {
    const p = newPod();
    const conf = k8sNetconf(c, api, PREFIX, { policy_setup_timeout_seconds: 1, endpoint_status_dir: statusDir });
    const t0 = Date.now();
    const add = await cni('ADD', conf, p.call);
    expectOk(add);
    expect(Date.now() - t0).toBeGreaterThanOrEqual(1000);
    expect(add.stderr).toContain('was not reported programmed within 1000 ms');
    expect(link('eth0', p.netnsName)).toBeDefined();
    expectOk(await cni('DEL', conf, p.call));
    await expectNothingLeft(c, PREFIX);
  });

  it('a status file of another container (an earlier sandbox of the same pod) does not release the ADD', async () => {
    const p = newPod();
    // Left over from before this ADD: removed before the endpoint is written.
    await writePolicyStatus(statusKey(p.podName), { statusDir, containerID: 'an-older-sandbox' });
    const conf = k8sNetconf(c, api, PREFIX, { policy_setup_timeout_seconds: 2, endpoint_status_dir: statusDir });
    const t0 = Date.now();
    // Written while the ADD waits, naming the wrong container: ignored.
    const agent = agentReportsLater(p.podName, 'an-older-sandbox', t0 - 1000);
    try {
      const add = await cni('ADD', conf, p.call);
      expectOk(add);
      await agent.wrote;
      expect(Date.now() - t0).toBeGreaterThanOrEqual(2000);
      expect(add.stderr).toContain('was not reported programmed within 2000 ms');
    } finally {
      agent.stop();
    }
    expectOk(await cni('DEL', conf, p.call));
    await expectNothingLeft(c, PREFIX);
  });
});
