// Observability against real parts: the built agent (policy on, a pod added through the shim),
// kube-controllers (the fake API server, a throwaway etcd) and the flow aggregator serve /metrics;
// Debian's promtool checks each exposition, checks and unit-tests the alerting rules in
// deploy/prometheus; a real Prometheus on loopback scrapes the agent and kube-controllers, and its
// HTTP API returns their series. Every metric the rules name is one a process exports.
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { assertThrowawayHostNetns } from '../support/cni.js';
import { freePort } from '../support/etcd.js';
import { startFakeApiServer, writeKubeconfig, type FakeApiServer } from '../support/fake-apiserver.js';
import { flowsPki, startFlows, type FlowsPki, type FlowsProcess } from '../support/flows.js';
import { createNetns, removeAllNetns } from '../support/netns.js';
import {
  cleanupAttachments,
  cni,
  ensureBuilt,
  expectOk,
  installShim,
  netconf,
  NODE,
  startAgent,
  startCluster,
  type Agent,
  type Cluster,
} from '../support/plugin-harness.js';

const ROOT = resolve(import.meta.dirname, '../..');
const RULES_DIR = join(ROOT, 'deploy/prometheus');
const PREFIX = 'npq';
const TABLE = `netplugin-${PREFIX}`;
const POOL = 'prom-v4';

let c: Cluster;
let api: FakeApiServer;
let agent: Agent;
let kc: { proc: ChildProcess; log: () => string; exited: Promise<void> } | undefined;
let flows: FlowsProcess | undefined;
let pki: FlowsPki | undefined;
let prom: { proc: ChildProcess; log: () => string; exited: Promise<void> } | undefined;
let tmp: string;
let agentMetrics: string;
let kcMetrics: string;
let kcHealth: string;
let promUrl: string;

async function until<T>(what: string, fn: () => Promise<T | undefined | false>, limitMs = 45_000): Promise<T> {
  const end = Date.now() + limitMs;
  let last: unknown;
  for (;;) {
    try {
      const v = await fn();
      if (v) return v;
    } catch (e) {
      last = e;
    }
    if (Date.now() > end) throw new Error(`gave up waiting for: ${what}${last ? ` (${(last as Error).message})` : ''}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

const text = async (url: string) => (await fetch(url)).text();

/** The value of one series (exact name and labels) in the text format; undefined when absent. */
function sample(body: string, series: string): number | undefined {
  const line = body.split('\n').find((l) => l.startsWith(series + ' '));
  return line === undefined ? undefined : Number(line.slice(series.length + 1));
}

function promtool(args: string[], input?: string): { status: number | null; out: string } {
  const r = spawnSync('promtool', args, { input, encoding: 'utf8', cwd: RULES_DIR, timeout: 30_000 });
  return { status: r.status, out: `${r.stdout}${r.stderr}` };
}

function spawnLogged(cmd: string, args: string[], env?: NodeJS.ProcessEnv) {
  const proc = spawn(cmd, args, { stdio: ['ignore', 'pipe', 'pipe'], ...(env ? { env } : {}) });
  let log = '';
  proc.stdout!.on('data', (d: Buffer) => (log += d));
  proc.stderr!.on('data', (d: Buffer) => (log += d));
  const exited = new Promise<void>((r) => proc.once('exit', () => r()));
  return { proc, log: () => log, exited };
}

async function stopProc(p: { proc: ChildProcess; exited: Promise<void> } | undefined): Promise<void> {
  if (!p) return;
  if (p.proc.exitCode === null && p.proc.signalCode === null) p.proc.kill('SIGTERM');
  const t = setTimeout(() => p.proc.kill('SIGKILL'), 5_000);
  await p.exited;
  clearTimeout(t);
}

beforeAll(async () => {
  assertThrowawayHostNetns();
  ensureBuilt();
  tmp = mkdtempSync(join(tmpdir(), `prometheus-test-${process.pid}-`));
  const shim = installShim(join(tmp, 'bin'));
  c = await startCluster([{ name: POOL, cidr: '10.77.62.0/24', blockSize: 28 }]);
  const conf = netconf(c, '1.0.0', {
    host_veth_prefix: PREFIX,
    policy: { type: 'k8s' },
    policy_setup_timeout_seconds: 10,
  });
  const conflist = join(tmp, '10-netplugin.conflist');
  writeFileSync(conflist, JSON.stringify({ name: 'k8s-pod-network', cniVersion: '1.0.0', plugins: [conf] }));
  const agentPort = await freePort();
  agent = await startAgent(
    join(tmp, 'run', 'cni.sock'),
    ['--config', conflist, '--no-routes', '--metrics-addr', `127.0.0.1:${agentPort}`],
    {
      env: { NETPLUGIN_POLICY_TABLE: TABLE },
    },
  );
  agentMetrics = `http://127.0.0.1:${agentPort}/metrics`;
  // One pod on the node: a local endpoint for the policy gauges, an address in use for the pool's.
  const ns = createNetns('pq');
  const env = { NETPLUGIN_AGENT_SOCKET: agent.socket, NETPLUGIN_POLICY_TABLE: TABLE };
  expectOk(await cni('ADD', conf, { containerId: `prom-${process.pid}`, netns: ns.path, env }, shim));

  api = await startFakeApiServer();
  const kubeconfig = writeKubeconfig(api.dir, api);
  const [healthPort, kcPort] = [await freePort(), await freePort()];
  kc = spawnLogged(
    process.execPath,
    [
      join(ROOT, 'dist/netplugin-kube-controllers.mjs'),
      '--kubeconfig',
      kubeconfig,
      '--health-addr',
      `127.0.0.1:${healthPort}`,
      '--metrics-addr',
      `127.0.0.1:${kcPort}`,
      // The default lease (a short one is lost, and the process exits, when the machine is busy).
    ],
    {
      PATH: process.env.PATH ?? '/usr/bin:/bin',
      DATASTORE_TYPE: 'etcdv3',
      ETCD_ENDPOINTS: c.etcd.endpoint,
      POD_NAMESPACE: 'kube-system',
    },
  );
  kcMetrics = `http://127.0.0.1:${kcPort}/metrics`;
  kcHealth = `http://127.0.0.1:${healthPort}`;

  pki = flowsPki();
  flows = await startFlows(pki);
}, 120_000);

afterAll(async () => {
  await stopProc(prom);
  await stopProc(kc);
  await flows?.stop();
  pki?.remove();
  await cleanupAttachments();
  removeAllNetns();
  await agent?.stop();
  spawnSync('nft', ['delete', 'table', 'inet', TABLE], { stdio: 'ignore' });
  await api?.stop();
  await c?.close();
  if (tmp) rmSync(tmp, { recursive: true, force: true });
}, 60_000);

describe('metrics for Prometheus', { timeout: 120_000 }, () => {
  it('the agent exports its state: a programmed local endpoint, no programming lag, ready', async () => {
    const body = await until('the agent programmed its endpoint and is ready', async () => {
      const b = await text(agentMetrics);
      return sample(b, 'netplugin_policy_local_endpoints') === 1 && sample(b, 'netplugin_agent_ready') === 1 && b;
    });
    expect(sample(body, 'netplugin_policy_controller_running')).toBe(1);
    expect(sample(body, 'netplugin_policy_programming_lag_seconds')).toBeLessThan(60);
    expect(body).toMatch(/^netplugin_policy_programmed_policies\{kind="Profile"\} \d+$/m);
    expect(sample(body, 'netplugin_ipam_addresses_assigned_total')).toBe(1);
  });

  it('kube-controllers exports per-pool addresses in use and capacity, blocks per node, GC state', async () => {
    const body = await until('the leader exports the pool', async () => {
      const b = await text(kcMetrics);
      return (
        sample(b, `netplugin_ipam_pool_addresses_in_use{pool="${POOL}"}`) === 1 &&
        sample(b, 'netplugin_ipam_gc_last_scan_timestamp_seconds')! > 0 &&
        b
      );
    });
    expect(sample(body, `netplugin_ipam_pool_capacity_addresses{pool="${POOL}"}`)).toBe(256);
    expect(sample(body, `netplugin_ipam_blocks{node="${NODE}",pool="${POOL}"}`)).toBe(1);
    expect(sample(body, `netplugin_ipam_gc_candidate_addresses{pool="${POOL}",state="past_grace"}`)).toBe(0);
    expect(body).toMatch(/^netplugin_build_info\{component="netplugin-kube-controllers",/m);
  });

  it('every /metrics endpoint passes promtool check metrics', async () => {
    await until('kube-controllers is ready', async () => (await fetch(`${kcHealth}/readyz`)).status === 200);
    const problems: string[] = [];
    for (const [what, url] of [
      ['netplugin-node', agentMetrics],
      ['netplugin-kube-controllers', kcMetrics],
      ['netplugin-flows', `${flows!.healthUrl}/metrics`],
    ] as const) {
      const body = await text(url);
      expect(body, what).toContain('netplugin_build_info{');
      const r = promtool(['check', 'metrics'], body);
      problems.push(...(r.status === 0 && r.out === '' ? [] : [`${what} (exit ${r.status}):\n${r.out}`]));
    }
    expect(problems.join('\n')).toBe('');
  });

  it('the alerting rules pass promtool check rules and their unit tests, and name exported metrics', async () => {
    const check = promtool(['check', 'rules', 'netplugin-rules.yaml']);
    expect(check.status, check.out).toBe(0);
    const t = promtool(['test', 'rules', 'netplugin-rules.test.yaml']);
    expect(t.status, t.out).toBe(0);
    expect(t.out).toContain('SUCCESS');
    // Every netplugin_* name in an expression is served by the agent or kube-controllers here, or
    // (BGP: only with --bgp on) registered by the agent's source.
    const rules = readFileSync(join(RULES_DIR, 'netplugin-rules.yaml'), 'utf8');
    const names = new Set(
      rules
        .split('\n')
        .filter((l) => !l.trim().startsWith('#'))
        .join('\n')
        .match(/\bnetplugin_[a-z_]+\b/g),
    );
    const live = (await text(agentMetrics)) + (await text(kcMetrics));
    const agentSource = readFileSync(join(ROOT, 'src/agent/parts/node-network.ts'), 'utf8');
    expect(names.size).toBeGreaterThanOrEqual(8);
    for (const n of names) {
      if (n.startsWith('netplugin_bgp_')) expect(agentSource, n).toContain(`'${n}'`);
      else expect(live, `${n} is named by a rule but not exported`).toMatch(new RegExp(`^# TYPE ${n} `, 'm'));
    }
  });

  it('a real Prometheus scrapes the agent and kube-controllers and answers a query for their series', async () => {
    const dir = join(tmp, 'prometheus');
    const port = await freePort();
    const target = (u: string) => new URL(u).host;
    writeFileSync(
      join(tmp, 'prometheus.yml'),
      [
        'global: { scrape_interval: 1s, evaluation_interval: 1s }',
        'rule_files: [' + JSON.stringify(join(RULES_DIR, 'netplugin-rules.yaml')) + ']',
        'scrape_configs:',
        `  - job_name: netplugin-node`,
        `    static_configs: [{ targets: ["${target(agentMetrics)}"] }]`,
        `  - job_name: netplugin-kube-controllers`,
        `    static_configs: [{ targets: ["${target(kcMetrics)}"] }]`,
        '',
      ].join('\n'),
    );
    prom = spawnLogged('prometheus', [
      `--config.file=${join(tmp, 'prometheus.yml')}`,
      `--storage.tsdb.path=${dir}`,
      `--web.listen-address=127.0.0.1:${port}`,
    ]);
    promUrl = `http://127.0.0.1:${port}`;
    const query = async (q: string) => {
      const r = (await (await fetch(`${promUrl}/api/v1/query?query=${encodeURIComponent(q)}`)).json()) as {
        status: string;
        data: { result: Array<{ metric: Record<string, string>; value: [number, string] }> };
      };
      expect(r.status).toBe('success');
      return r.data.result;
    };
    const up = await until(
      'both targets up',
      async () => {
        if (prom!.proc.exitCode !== null)
          throw new Error(`prometheus exited ${prom!.proc.exitCode}: ${prom!.log().slice(-1500)}`);
        const res = await query('up == 1');
        return res.length === 2 && res;
      },
      60_000,
    ).catch((e: Error) => {
      const kcState =
        kc!.proc.exitCode !== null || kc!.proc.signalCode !== null
          ? `exited (${kc!.proc.exitCode ?? kc!.proc.signalCode})`
          : 'running';
      throw new Error(
        `${e.message}\nprometheus log: ${prom!.log().slice(-1500)}\nkube-controllers ${kcState}: ${kc!.log().slice(-1500)}`,
      );
    });
    expect(up.map((s) => s.metric.job).sort()).toEqual(['netplugin-kube-controllers', 'netplugin-node']);
    const inUse = await until('the pool gauge in Prometheus', async () => {
      const res = await query(`netplugin_ipam_pool_addresses_in_use{pool="${POOL}"}`);
      return res.length === 1 && res;
    });
    expect(inUse[0]!.metric.job).toBe('netplugin-kube-controllers');
    expect(inUse[0]!.value[1]).toBe('1');
    const endpoints = await until('the agent gauge in Prometheus', async () => {
      const res = await query('netplugin_policy_local_endpoints');
      return res.length === 1 && res;
    });
    expect(endpoints[0]!.value[1]).toBe('1');
    // The rules loaded, and none fires on this healthy node.
    const rules = (await (await fetch(`${promUrl}/api/v1/rules`)).json()) as {
      data: { groups: Array<{ rules: Array<{ name: string; state: string }> }> };
    };
    const loaded = rules.data.groups.flatMap((g) => g.rules);
    expect(loaded.map((r) => r.name)).toContain('NetpluginIPPoolAlmostFull');
    expect(loaded.filter((r) => r.state === 'firing')).toEqual([]);
  });
});
