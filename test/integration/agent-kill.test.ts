// Agent restarts lose nothing. The agent is SIGKILLed during a burst of 50
// ADDs through the shim (10 at a time). Requests it had accepted end with CNI
// code 11 (the shim never re-runs them); requests that found no agent fail
// before anything ran. The runtime then does what kubelet does once the agent
// is back: DEL every sandbox whose ADD failed, and set the pod up again in a
// new sandbox (new container ID) or give up on it. After the final DEL of
// every pod no address, handle, veth, route or endpoint may be left.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { assertThrowawayHostNetns } from '../support/cni.js';
import { createNetns, removeAllNetns } from '../support/netns.js';
import {
  addrs,
  cleanupAttachments,
  cni,
  ensureBuilt,
  expectNothingLeft,
  expectOk,
  installShim,
  ipamState,
  link,
  mapLimit,
  netconf,
  startAgent,
  startCluster,
  why,
  type Agent,
  type Cluster,
} from '../support/plugin-harness.js';
import type { CniOutcome } from '../support/cni.js';

const PREFIX = 'npz';
const POOL = { name: 'kill-v4', cidr: '10.77.42.0/24', blockSize: 28 };
const N = 50;
const PARALLEL = 10;
/** The agent dies once this many ADDs have answered. */
const KILL_AFTER = 15;
let c: Cluster;
let tmp: string;
let shim: string;
let agent: Agent | undefined;

beforeAll(async () => {
  assertThrowawayHostNetns();
  ensureBuilt();
  tmp = mkdtempSync(join(tmpdir(), `agent-kill-${process.pid}-`));
  shim = installShim(join(tmp, 'bin'));
  c = await startCluster([POOL]);
});
afterEach(async () => {
  await cleanupAttachments();
  removeAllNetns();
});
afterAll(async () => {
  await agent?.stop();
  removeAllNetns();
  await c?.close();
  if (tmp) rmSync(tmp, { recursive: true, force: true });
});

describe('agent SIGKILL during a burst of ADDs', () => {
  it("in-flight ADDs fail with code 11; after the runtime's DELs and retries nothing is leaked", async () => {
    const socket = join(tmp, 'run', 'cni.sock');
    agent = await startAgent(socket);
    const env = { NETPLUGIN_AGENT_SOCKET: socket };
    // info: a 50-pod burst at debug level would mostly measure logging.
    const conf = netconf(c, '1.0.0', { host_veth_prefix: PREFIX, log_level: 'info' });
    const pods = Array.from({ length: N }, () => createNetns('pk'));
    const first = pods.map((p, i) => ({ containerId: `kill${i}-${process.pid}`, netns: p.path, env }));

    let answered = 0;
    let killed: Promise<void> | undefined;
    const adds: CniOutcome[] = await mapLimit(first, PARALLEL, async (call) => {
      const r = await cni('ADD', conf, call, shim);
      if (++answered === KILL_AFTER) killed = agent!.kill();
      return r;
    });
    await killed;
    expect(killed, 'the agent was killed mid-burst').toBeDefined();

    if (process.env.KILL_DEBUG) adds.forEach((r, i) => process.stderr.write(`pod ${i}: ${why(r).slice(0, 300)}\n`));
    const ok = adds.flatMap((r, i) => (r.code === 0 ? [i] : []));
    const failed = adds.flatMap((r, i) => (r.code === 0 ? [] : [i]));
    expect(ok.length).toBeGreaterThanOrEqual(KILL_AFTER - PARALLEL);
    expect(failed.length, 'ADDs that failed because the agent died').toBeGreaterThan(0);
    const inFlight = failed.filter((i) => adds[i]!.json?.code === 11);
    const notReached = failed.filter((i) => adds[i]!.json?.code === 5 && /not reachable/.test(adds[i]!.json.msg));
    // Every failure is one of the two, never a half-done "success" or a crash.
    expect(
      [...inFlight, ...notReached].sort((a, b) => a - b),
      failed.map((i) => `pod ${i}: ${why(adds[i]!)}`).join('\n'),
    ).toEqual(failed);
    expect(inFlight.length, 'requests the agent had accepted when it died (code 11)').toBeGreaterThan(0);
    // Accepted and cut off ("retry"), or not accepted and no fallback on this
    // node ("try again once netplugin-node is up"): both tell the runtime to retry.
    for (const i of inFlight) expect(adds[i]!.json.msg).toMatch(/retry|try again/);

    // The agent comes back (systemd/DaemonSet restart); the runtime cleans up
    // each failed sandbox with DEL, then re-creates half of those pods in a
    // new sandbox and gives up on the rest.
    agent = await startAgent(socket);
    const dels = await mapLimit(failed, PARALLEL, (i) => cni('DEL', conf, first[i]!, shim));
    dels.forEach((r) => expectOk(r));
    const retried = failed.filter((_, k) => k % 2 === 0);
    const second = new Map(
      retried.map((i) => [i, { containerId: `kill${i}-retry-${process.pid}`, netns: pods[i]!.path, env }]),
    );
    const again = await mapLimit(retried, PARALLEL, (i) => cni('ADD', conf, second.get(i)!, shim));
    again.forEach((r) => expectOk(r));

    // What is up now is exactly the successful ADDs, each with its own address.
    const live = [...ok.map((i) => ({ i, r: adds[i]! })), ...retried.map((i, k) => ({ i, r: again[k]! }))];
    const ips = live.map(({ r }) => r.json.ips[0].address as string);
    expect(new Set(ips).size, `duplicate addresses: ${ips.join(' ')}`).toBe(live.length);
    for (const { i, r } of live) {
      expect(
        addrs('eth0', pods[i]!.name)
          .filter((a) => a.family === 'inet')
          .map((a) => `${a.local}/${a.prefixlen}`),
        `pod ${i}`,
      ).toEqual([r.json.ips[0].address]);
    }
    const given = failed.filter((i) => !second.has(i));
    for (const i of given) expect(link('eth0', pods[i]!.name), `pod ${i} (given up)`).toBeUndefined();
    const st = await ipamState(c.ds);
    expect(st.allocations, 'addresses held after the recovery').toHaveLength(live.length);
    expect(st.handles).toHaveLength(live.length);

    // Finally every pod goes away.
    const finals = await mapLimit(live, PARALLEL, ({ i }) => cni('DEL', conf, second.get(i) ?? first[i]!, shim));
    finals.forEach((r) => expectOk(r));
    await expectNothingLeft(c, PREFIX);
    await agent.stop();
  });
});
