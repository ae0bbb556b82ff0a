// Properties of the resident agent path (shim -> socket -> netplugin-node):
//   - requests for one container are serialised (a DEL waits for the ADD in
//     flight), while other containers' requests run meanwhile;
//   - no thread of the agent is left in a pod's network namespace;
//   - one node's IPAM is serialised across the agent and per-exec plugin
//     processes (no duplicate address, not a single CAS conflict);
//   - --config prepares the node: ClusterInformation initialised, IPv6
//     forwarding turned on exactly when IPv6 is in use.
import { readdirSync, readFileSync, statSync, writeFileSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { workloadEndpointName } from '../../src/model/names.js';
import { endpointStatusKey, writePolicyStatus } from '../../src/policy-status/index.js';
import { startNodeInit } from '../../src/agent/node-init.js';
import { createPluginRuntime } from '../../src/plugins/main/runtime.js';
import { netlink, openNetns } from '../../src/native/index.js';
import { assertThrowawayHostNetns, DIST } from '../support/cni.js';
import { createNetns, deleteNetns, removeAllNetns } from '../support/netns.js';
import {
  NODE,
  addrs,
  cleanupAttachments,
  cni,
  ensureBuilt,
  expectNothingLeft,
  expectOk,
  installShim,
  ipamState,
  k8sArgs,
  link,
  mapLimit,
  netconf,
  startAgent,
  startCluster,
  why,
  type Agent,
  type Cluster,
} from '../support/plugin-harness.js';

const PREFIX = 'npy';
const POOL = { name: 'agent-v4', cidr: '10.77.40.0/24', blockSize: 28 };
const V6POOL = { name: 'agent-v6', cidr: 'fd77:40::/116', blockSize: 122 };
let c: Cluster;
let agent: Agent;
let tmp: string;
let shim: string;

beforeAll(async () => {
  assertThrowawayHostNetns();
  ensureBuilt();
  tmp = mkdtempSync(join(tmpdir(), `agent-path-${process.pid}-`));
  shim = installShim(join(tmp, 'bin'));
  c = await startCluster([POOL]);
  agent = await startAgent(join(tmp, 'run', 'cni.sock'));
});
afterEach(async () => {
  await cleanupAttachments();
  removeAllNetns();
});
afterAll(async () => {
  removeAllNetns();
  await agent?.stop();
  await c?.close();
  if (tmp) rmSync(tmp, { recursive: true, force: true });
});

const viaAgent = () => ({ NETPLUGIN_AGENT_SOCKET: agent.socket });

/** Settles-or-not probe without waiting: true once p has settled. */
function tracked<T>(p: Promise<T>): { p: Promise<T>; settled: () => boolean } {
  let done = false;
  void p.finally(() => (done = true));
  return { p, settled: () => done };
}

async function until(what: string, fn: () => Promise<boolean> | boolean, limitMs = 30_000): Promise<void> {
  const end = Date.now() + limitMs;
  while (!(await fn())) {
    if (Date.now() > end) throw new Error(`gave up waiting for: ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

describe('request ordering in the agent', () => {
  it("a DEL waits for the same container's ADD in flight; other containers are served meanwhile", async () => {
    const statusDir = join(tmp, 'status');
    // The policy-setup wait holds A's ADD open until we write its status file,
    // which lets the test decide when A finishes.
    const conf = netconf(c, '1.0.0', {
      host_veth_prefix: PREFIX,
      policy_setup_timeout_seconds: 50,
      endpoint_status_dir: statusDir,
    });
    const plain = netconf(c, '1.0.0', { host_veth_prefix: PREFIX });
    const [pa, pb, pc] = [createNetns('pa'), createNetns('pb'), createNetns('pc')];
    const a = { containerId: `hold-${process.pid}`, netns: pa.path, env: viaAgent() };
    const wepA = workloadEndpointName(NODE, 'cni', a.containerId, 'eth0');

    const addA = tracked(cni('ADD', conf, a, shim));
    await until("A's endpoint is written (A is in its policy wait)", async () =>
      (await c.ds.list('WorkloadEndpoint')).items.some((w) => w.metadata.name === wepA),
    );
    const delA = tracked(cni('DEL', conf, a, shim));

    // Two other containers go all the way through while A's ADD and DEL are pending.
    const b = { containerId: `other-b-${process.pid}`, netns: pb.path, env: viaAgent() };
    const d = { containerId: `other-c-${process.pid}`, netns: pc.path, env: viaAgent() };
    const rb = await cni('ADD', plain, b, shim);
    expectOk(rb);
    expectOk(await cni('ADD', plain, d, shim));
    expect(addA.settled(), 'A finished without its policy status').toBe(false);
    expect(delA.settled(), "A's DEL ran while A's ADD was in flight").toBe(false);
    // A's DEL has not touched anything yet.
    expect(link('eth0', pa.name), "A's interface").toBeDefined();
    expect((await c.ds.list('WorkloadEndpoint')).items.map((w) => w.metadata.name)).toContain(wepA);

    await writePolicyStatus(endpointStatusKey('default', wepA), { statusDir, containerID: a.containerId });
    const ra = await addA.p;
    expectOk(ra);
    expectOk(await delA.p);
    // The DEL ran after the ADD, so it removed what the ADD made.
    expect(link('eth0', pa.name)).toBeUndefined();
    expect((await c.ds.list('WorkloadEndpoint')).items.map((w) => w.metadata.name)).not.toContain(wepA);

    expectOk(await cni('DEL', plain, b, shim));
    expectOk(await cni('DEL', plain, d, shim));
    await expectNothingLeft(c, PREFIX);
  });

  it('after a burst of ADDs and DELs no agent thread is left in another network namespace', async () => {
    const conf = netconf(c, '1.0.0', { host_veth_prefix: PREFIX, log_level: 'info' });
    const pods = Array.from({ length: 16 }, () => createNetns('pt'));
    const calls = pods.map((p, i) => ({ containerId: `thr${i}-${process.pid}`, netns: p.path, env: viaAgent() }));
    const adds = await mapLimit(calls, 8, (call) => cni('ADD', conf, call, shim));
    adds.forEach((r) => expectOk(r));
    const self = statSync('/proc/self/ns/net');
    const pid = agent.proc.pid!;
    const check = () => {
      const tasks = readdirSync(`/proc/${pid}/task`);
      expect(tasks.length).toBeGreaterThan(1); // main thread + dataplane workers
      for (const t of tasks) {
        const st = statSync(`/proc/${pid}/task/${t}/ns/net`);
        expect(
          { task: t, ino: st.ino },
          `thread ${t} (${readFileSync(`/proc/${pid}/task/${t}/comm`, 'utf8').trim()})`,
        ).toEqual({ task: t, ino: self.ino });
      }
    };
    check();
    const dels = await mapLimit(calls, 8, (call) => cni('DEL', conf, call, shim));
    dels.forEach((r) => expectOk(r));
    check();
    await expectNothingLeft(c, PREFIX);
  });
});

describe('no stale state in the warm agent', () => {
  it('an operator marking the datastore not ready stops the very next ADD (code 11), and ready again lets it through', async () => {
    const conf = netconf(c, '1.0.0', { host_veth_prefix: PREFIX, log_level: 'info' });
    const pod = createNetns('pr');
    const call = { containerId: `ready-${process.pid}`, netns: pod.path, env: viaAgent() };
    const warm = { containerId: `warm-${process.pid}`, netns: createNetns('pr').path, env: viaAgent() };
    expectOk(await cni('ADD', conf, warm, shim));
    const ci = await c.ds.get('ClusterInformation', 'default');
    const off = await c.ds.update({ ...ci, spec: { ...ci.spec, datastoreReady: false } });
    try {
      const r = await cni('ADD', conf, call, shim);
      expect(r.code, why(r)).toBe(1);
      expect(r.json.code).toBe(11);
      expect(r.json.msg).toContain('datastoreReady');
      expect(link('eth0', pod.name)).toBeUndefined();
    } finally {
      await c.ds.update({ ...off, spec: { ...off.spec, datastoreReady: true } });
    }
    expectOk(await cni('ADD', conf, call, shim));
    expectOk(await cni('DEL', conf, call, shim));
    expectOk(await cni('DEL', conf, warm, shim));
    await expectNothingLeft(c, PREFIX);
  });
});

describe("a DEL answered from the agent's memory of its own ADD", () => {
  it("the endpoint and handle changed behind the agent's back: the DEL still deletes both and frees the addresses", async () => {
    const conf = netconf(c, '1.0.0', { host_veth_prefix: PREFIX, log_level: 'info' });
    const call = {
      containerId: `behind-${process.pid}`,
      netns: createNetns('pb').path,
      args: k8sArgs('ns-behind', 'pod-behind'),
      env: viaAgent(),
    };
    expectOk(await cni('ADD', conf, call, shim));
    // Another writer (kube-controllers syncing labels, an operator's repair) writes both after the agent's ADD.
    const [wep] = (await c.ds.list('WorkloadEndpoint')).items;
    expect(wep?.spec.containerID).toBe(call.containerId);
    await c.ds.update({
      ...wep!,
      metadata: { ...wep!.metadata, labels: { ...wep!.metadata.labels, changed: 'behind' } },
    });
    const [h] = (await c.ds.list('IPAMHandle')).items;
    await c.ds.update(h!);
    expectOk(await cni('DEL', conf, call, shim));
    await expectNothingLeft(c, PREFIX);
  });

  it("a newer sandbox of the pod took the endpoint over without the agent (per-exec): the old sandbox's DEL through the agent leaves it to the newer one", async () => {
    const conf = netconf(c, '1.0.0', { host_veth_prefix: PREFIX, log_level: 'info' });
    const args = k8sArgs('ns-takeover', 'pod-takeover');
    const old = { containerId: `old-${process.pid}`, netns: createNetns('po').path, args, env: viaAgent() };
    const newer = { containerId: `new-${process.pid}`, netns: createNetns('pn').path, args };
    expectOk(await cni('ADD', conf, old, shim));
    expectOk(await cni('ADD', conf, newer));
    const addrOfNewer = (await c.ds.list('WorkloadEndpoint')).items[0]!.spec.ipNetworks;
    expectOk(await cni('DEL', conf, old, shim));
    const weps = (await c.ds.list('WorkloadEndpoint')).items;
    expect(weps.map((w) => [w.spec.containerID, w.spec.ipNetworks])).toEqual([[newer.containerId, addrOfNewer]]);
    expect((await ipamState(c.ds)).handles).toEqual([expect.stringContaining(newer.containerId)]);
    expectOk(await cni('DEL', conf, newer));
    await expectNothingLeft(c, PREFIX);
  });
});

describe('one node, agent and per-exec processes at once', () => {
  it('IPAM is serialised across them: distinct addresses, no CAS conflict, nothing left', async () => {
    const x = await startCluster([{ name: 'mixed-v4', cidr: '10.77.41.0/24', blockSize: 28 }]);
    try {
      // debug: the allocator logs every CAS conflict it retries.
      const conf = netconf(x, '1.0.0', { host_veth_prefix: PREFIX, log_level: 'debug' });
      const pods = Array.from({ length: 40 }, () => createNetns('pm'));
      const calls = pods.map((p, i) => ({ containerId: `mix${i}-${process.pid}`, netns: p.path, env: viaAgent() }));
      // Every fourth pod goes through the per-exec bundle, the rest through the agent.
      const binOf = (i: number) => (i % 4 === 0 ? join(DIST, 'netplugin.mjs') : shim);
      const agentSide = calls.map((cl, i) => ({ cl, i })).filter(({ i }) => i % 4 !== 0);
      const execSide = calls.map((cl, i) => ({ cl, i })).filter(({ i }) => i % 4 === 0);
      const results = new Array(calls.length);
      await Promise.all([
        mapLimit(agentSide, 8, async ({ cl, i }) => (results[i] = await cni('ADD', conf, cl, binOf(i)))),
        mapLimit(execSide, 3, async ({ cl, i }) => (results[i] = await cni('ADD', conf, cl, binOf(i)))),
      ]);
      const failed = results.map((r, i) => (r.code === 0 ? undefined : `pod ${i}: ${why(r)}`)).filter(Boolean);
      expect(failed, 'failed ADDs').toEqual([]);
      const ips = results.map((r) => r.json.ips[0].address as string);
      expect(new Set(ips).size, `duplicate addresses: ${ips.join(' ')}`).toBe(calls.length);
      pods.forEach((p, i) =>
        expect(
          addrs('eth0', p.name)
            .filter((a) => a.family === 'inet')
            .map((a) => `${a.local}/${a.prefixlen}`),
        ).toEqual([ips[i]]),
      );
      const conflicts = results.filter((r) => /CAS conflict/.test(r.stderr)).length;
      expect(conflicts, 'ADDs that hit an IPAM CAS conflict (the node lock did not exclude)').toBe(0);
      expect((await ipamState(x.ds)).allocations).toHaveLength(calls.length);

      const dels = await Promise.all([
        mapLimit(agentSide, 8, ({ cl, i }) => cni('DEL', conf, cl, binOf(i))),
        mapLimit(execSide, 3, ({ cl, i }) => cni('DEL', conf, cl, binOf(i))),
      ]);
      for (const r of dels.flat()) {
        expectOk(r);
        expect(r.stderr).not.toMatch(/CAS conflict/);
      }
      await expectNothingLeft(x, PREFIX);
    } finally {
      await cleanupAttachments();
      await x.close();
    }
  });
});

describe('--config: the agent prepares the node', () => {
  function writeConflist(dir: string, cl: Cluster, ipam: Record<string, unknown>): string {
    const path = join(dir, `10-netplugin-${Math.random().toString(36).slice(2)}.conflist`);
    const entry = netconf(cl, '1.0.0', { ipam: { type: 'netplugin-ipam', ...ipam } });
    delete entry['cniVersion'];
    delete entry['name'];
    writeFileSync(
      path,
      JSON.stringify({
        cniVersion: '1.0.0',
        name: 'k8s-pod-network',
        plugins: [entry, { type: 'portmap', capabilities: { portMappings: true } }],
      }),
    );
    return path;
  }

  it("initialises ClusterInformation and keeps an operator's datastoreReady=false", async () => {
    const x = await startCluster([POOL], { clusterInfo: 'missing' });
    const sock = join(tmp, 'run', 'init.sock');
    let a: Agent | undefined;
    try {
      const conf = writeConflist(tmp, x, {});
      a = await startAgent(sock, ['--config', conf, '--ipv6-forwarding', 'off']);
      await until(
        'ClusterInformation default exists',
        async () => (await x.ds.list('ClusterInformation')).items.length === 1,
      );
      const ci = await x.ds.get('ClusterInformation', 'default');
      expect(ci.spec.datastoreReady).toBe(true);
      expect(ci.spec.clusterGUID).toMatch(/^[0-9a-f]{32}$/);
      await a.stop();

      await x.ds.update({ ...ci, spec: { ...ci.spec, datastoreReady: false } });
      a = await startAgent(sock, ['--config', conf, '--ipv6-forwarding', 'off']);
      await until('the agent reports the node ready', () => /node ready/.test(a!.log()));
      expect((await x.ds.get('ClusterInformation', 'default')).spec.datastoreReady).toBe(false);
    } finally {
      await a?.stop();
      await x.close();
    }
  });

  it('a --config that is not a netplugin CNI config: the agent exits naming the file and the fix', async () => {
    const bad = join(tmp, 'not-ours.conflist');
    writeFileSync(bad, JSON.stringify({ cniVersion: '1.0.0', name: 'x', plugins: [{ type: 'bridge' }] }));
    const a = await startAgent(join(tmp, 'run', 'bad.sock'), ['--config', bad]).catch((e: Error) => e);
    // It may exit before or after the socket opened; either way it must exit with the reason.
    const log =
      a instanceof Error ? a.message : await new Promise<string>((r) => a.proc.once('exit', () => r(a.log())));
    expect(log).toContain(bad);
    expect(log).toContain('"type": "netplugin"');
    expect(log).not.toMatch(/\n\s+at /);
  });

  // The decision runs in-process against a real etcd; the sysctl is written
  // for real, into a fresh namespace standing in for the node (the shared
  // throwaway host namespace already forwards IPv6, so it cannot show a change).
  async function decide(
    ipam: Record<string, unknown>,
    pools: Array<{ name: string; cidr: string; blockSize: number }>,
    mode: 'auto' | 'on' | 'off' = 'auto',
  ): Promise<string> {
    const x = await startCluster(pools);
    const node = createNetns('v6');
    const ns = openNetns(node.path);
    const runtime = createPluginRuntime();
    try {
      const nl = netlink(ns);
      expect(nl.sysctlGet('net.ipv6.conf.all.forwarding')).toBe('0');
      const lines: string[] = [];
      const log = {
        error: (m: string) => lines.push(m),
        warn: (m: string) => lines.push(m),
        info: (m: string) => lines.push(m),
        debug: () => undefined,
      };
      const init = startNodeInit({
        configPath: writeConflist(tmp, x, ipam),
        log,
        datastores: runtime,
        ipv6Forwarding: mode,
        sysctlGet: (k) => nl.sysctlGet(k),
        sysctlSet: (k, v) => nl.sysctlSet(k, v),
      });
      await init.done;
      expect(lines).toContain('node ready');
      return nl.sysctlGet('net.ipv6.conf.all.forwarding');
    } finally {
      await runtime.close();
      ns.close();
      deleteNetns(node.name);
      await x.close();
    }
  }

  it('IPv6 forwarding: on when the config assigns IPv6 or an IPv6 pool exists, untouched otherwise or with off', async () => {
    expect(await decide({ assign_ipv4: 'true', assign_ipv6: 'true' }, [POOL, V6POOL]), 'assign_ipv6 true').toBe('1');
    expect(await decide({}, [POOL, V6POOL]), 'an enabled IPv6 pool').toBe('1');
    expect(await decide({}, [POOL]), 'IPv4 only').toBe('0');
    expect(await decide({ assign_ipv6: 'true' }, [POOL, V6POOL], 'off'), '--ipv6-forwarding off').toBe('0');
    expect(await decide({}, [POOL], 'on'), '--ipv6-forwarding on').toBe('1');
  });
});
