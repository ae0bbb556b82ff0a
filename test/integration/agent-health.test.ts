// The agent's --health-addr endpoints against real parts: dist/netplugin-node.mjs
// with --config naming a throwaway etcd, pods added and deleted through the
// native shim in real network namespaces. /readyz follows the datastore (etcd
// stopped: 503), /metrics counts what was served, and --version /
// --log-format json behave as documented.
import { execFileSync, spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { assertThrowawayHostNetns, DIST } from '../support/cni.js';
import { createNetns, removeAllNetns } from '../support/netns.js';
import {
  cleanupAttachments,
  cni,
  ensureBuilt,
  expectCniError,
  expectOk,
  installShim,
  netconf,
  startAgent,
  startCluster,
  type Agent,
  type Cluster,
} from '../support/plugin-harness.js';

const PREFIX = 'nph';
let c: Cluster;
let agent: Agent;
let tmp: string;
let shim: string;
let base: string;
/** --metrics-addr: /metrics alone, for Prometheus. */
let metricsBase: string;

async function until(what: string, fn: () => Promise<boolean>, limitMs = 60_000): Promise<void> {
  const end = Date.now() + limitMs;
  while (!(await fn())) {
    if (Date.now() > end) throw new Error(`gave up waiting for: ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

async function get(path: string): Promise<{ status: number; body: string; type: string }> {
  const r = await fetch(base + path);
  return { status: r.status, body: await r.text(), type: r.headers.get('content-type') ?? '' };
}

/** The value of one series in Prometheus text, 0 when absent. */
function sample(text: string, series: string): number {
  const line = text.split('\n').find((l) => l.startsWith(series + ' '));
  return line ? Number(line.slice(series.length + 1)) : 0;
}

beforeAll(async () => {
  assertThrowawayHostNetns();
  ensureBuilt();
  tmp = mkdtempSync(join(tmpdir(), `agent-health-${process.pid}-`));
  shim = installShim(join(tmp, 'bin'));
  c = await startCluster([{ name: 'health-v4', cidr: '10.77.60.0/24', blockSize: 28 }]);
  const conflist = join(tmp, '10-netplugin.conflist');
  writeFileSync(
    conflist,
    JSON.stringify({
      name: 'k8s-pod-network',
      cniVersion: '1.0.0',
      plugins: [netconf(c, '1.0.0', { host_veth_prefix: PREFIX })],
    }),
  );
  agent = await startAgent(join(tmp, 'run', 'cni.sock'), [
    '--config',
    conflist,
    '--log-format',
    'json',
    '--metrics-addr',
    '127.0.0.1:0',
  ]);
  await until(
    'the agent logs its health and metrics addresses',
    async () => /serving \/healthz/.test(agent.log()) && /"serving \/metrics"/.test(agent.log()),
  );
  const addrOf = (msg: string) =>
    `http://${
      JSON.parse(
        agent
          .log()
          .split('\n')
          .find((l) => l.includes(msg))!,
      ).addr
    }`;
  base = addrOf('serving /healthz');
  metricsBase = addrOf('"serving /metrics"');
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

describe('agent health and metrics', () => {
  it('logs JSON lines with --log-format json', async () => {
    await until('the listening line is logged', async () => agent.log().includes('CNI server listening'));
    const lines = agent.log().split('\n').filter(Boolean);
    expect(lines.length).toBeGreaterThanOrEqual(2);
    for (const l of lines) expect(JSON.parse(l)).toHaveProperty('level');
    expect(lines.map((l) => JSON.parse(l).msg)).toContain('CNI server listening');
  });

  it('/healthz answers 200; /readyz turns 200 once the datastore is initialised', async () => {
    expect((await get('/healthz')).status).toBe(200);
    await until('/readyz is 200', async () => (await get('/readyz')).status === 200);
    const r = JSON.parse((await get('/readyz')).body);
    expect(r).toMatchObject({ status: 'ok', detail: { datastore: 'reachable' } });
    expect(r.detail.socket).toContain(agent.socket);
  });

  it('/metrics counts ADD/DEL by result, errors by CNI code, IPAM assigns/releases and datastore calls', async () => {
    const before = (await get('/metrics')).body;
    const conf = netconf(c, '1.0.0', { host_veth_prefix: PREFIX });
    const ns = createNetns('hm');
    const env = { NETPLUGIN_AGENT_SOCKET: agent.socket };
    expectOk(await cni('ADD', conf, { containerId: `health-${process.pid}`, netns: ns.path, env }, shim));
    expectOk(await cni('DEL', conf, { containerId: `health-${process.pid}`, netns: ns.path, env }, shim));
    // A request the user can fix: code 7 (invalid netconf field).
    expectCniError(
      await cni('ADD', { ...conf, mtu: 5 }, { containerId: `health-bad-${process.pid}`, netns: ns.path, env }, shim),
      7,
    );

    const m = await get('/metrics');
    expect(m.status).toBe(200);
    expect(m.type).toContain('text/plain; version=0.0.4');
    // The running build and the process itself.
    expect(m.body).toMatch(/^netplugin_build_info\{component="netplugin-node",version="[^"]+",nodejs="v[^"]+"\} 1$/m);
    expect(sample(m.body, 'process_resident_memory_bytes')).toBeGreaterThan(0);
    expect(sample(m.body, 'process_open_fds')).toBeGreaterThan(0);
    const delta = (s: string) => sample(m.body, s) - sample(before, s);
    expect(delta('netplugin_cni_requests_total{plugin="netplugin",command="ADD",result="success"}')).toBe(1);
    expect(delta('netplugin_cni_requests_total{plugin="netplugin",command="DEL",result="success"}')).toBe(1);
    expect(delta('netplugin_cni_requests_total{plugin="netplugin",command="ADD",result="error"}')).toBe(1);
    expect(delta('netplugin_cni_errors_total{plugin="netplugin",command="ADD",code="7"}')).toBe(1);
    expect(delta('netplugin_cni_request_duration_seconds_count{plugin="netplugin",command="ADD"}')).toBe(2);
    expect(delta('netplugin_ipam_addresses_assigned_total')).toBe(1);
    expect(delta('netplugin_ipam_addresses_released_total')).toBe(1);
    // The endpoint is written alone (create) or in one transaction with its IPAM objects (txn).
    const endpointWrites = (text: string) =>
      text
        .split('\n')
        .filter((l) =>
          /^netplugin_datastore_request_duration_seconds_count\{operation="(create|txn)",kind="[^"]*WorkloadEndpoint[^"]*",result="ok"\} /.test(
            l,
          ),
        )
        .reduce((n, l) => n + Number(l.split(' ')[1]), 0);
    expect(endpointWrites(m.body) - endpointWrites(before)).toBeGreaterThanOrEqual(1);
    expect(m.body).toContain('# TYPE netplugin_ipam_cas_retries_total counter');
  });

  it('an ADD rolled back after its addresses were assigned counts them released too', async () => {
    const conf = netconf(c, '1.0.0', { host_veth_prefix: PREFIX });
    const ns = createNetns('hr');
    // The interface name is taken in the pod: the veth fails after the IPAM transaction committed.
    execFileSync('ip', ['-n', ns.name, 'link', 'add', 'eth0', 'type', 'veth', 'peer', 'name', 'other0']);
    const before = (await get('/metrics')).body;
    const env = { NETPLUGIN_AGENT_SOCKET: agent.socket };
    expectCniError(await cni('ADD', conf, { containerId: `health-rb-${process.pid}`, netns: ns.path, env }, shim));
    const after = (await get('/metrics')).body;
    const delta = (s: string) => sample(after, s) - sample(before, s);
    expect(delta('netplugin_ipam_addresses_assigned_total')).toBe(1);
    expect(delta('netplugin_ipam_addresses_released_total')).toBe(1);
  });

  it('a request failing the same way again is logged once per interval, its repeats counted on /metrics', async () => {
    const logFile = join(tmp, 'cni-repeat.log');
    // A netconf the runtime keeps sending that is wrong: each retry fails the same way.
    const bad = { ...netconf(c, '1.0.0', { host_veth_prefix: PREFIX }), mtu: 5, log_file_path: logFile };
    const ns = createNetns('hq');
    const env = { NETPLUGIN_AGENT_SOCKET: agent.socket };
    const before = (await get('/metrics')).body;
    for (let i = 0; i < 6; i++)
      expectCniError(await cni('ADD', bad, { containerId: `health-rep-${process.pid}`, netns: ns.path, env }, shim), 7);
    const lines = readFileSync(logFile, 'utf8')
      .split('\n')
      .filter((l) => l.includes('mtu'));
    expect(lines).toHaveLength(1);
    const m = (await get('/metrics')).body;
    const key = 'netplugin_log_repeats_suppressed_total{level="ERROR"}';
    expect(sample(m, key) - sample(before, key)).toBe(5);
  });

  it('--metrics-addr serves the same /metrics and no probe paths', async () => {
    const m = await fetch(`${metricsBase}/metrics`);
    expect(m.status).toBe(200);
    const types = (text: string) =>
      text
        .split('\n')
        .filter((l) => l.startsWith('# TYPE '))
        .sort();
    const served = types(await m.text());
    expect(served.join('\n')).toContain('# TYPE netplugin_cni_requests_total counter');
    expect(served).toEqual(types((await get('/metrics')).body));
    for (const p of ['/healthz', '/readyz']) expect((await fetch(metricsBase + p)).status).toBe(404);
  });

  it('/readyz is 503 naming the datastore while etcd is down', async () => {
    await c.etcd.stop();
    await until('/readyz is 503', async () => (await get('/readyz')).status === 503);
    const r = JSON.parse((await get('/readyz')).body);
    expect(r.status).toBe('failing');
    expect(r.detail.datastore).toBeTruthy();
    // And as a gauge, for Prometheus on --metrics-addr (where no probe path is served).
    expect(sample(await (await fetch(`${metricsBase}/metrics`)).text(), 'netplugin_agent_ready')).toBe(0);
    // Liveness does not follow the datastore: restarting the agent would not help.
    expect((await get('/healthz')).status).toBe(200);
  });
});

describe('--version and bad flags', () => {
  it('every executable prints its version', () => {
    const { version } = JSON.parse(
      spawnSync('node', ['-p', 'JSON.stringify(require("./package.json"))'], {
        cwd: join(DIST, '..'),
        encoding: 'utf8',
      }).stdout,
    );
    const { bin } = JSON.parse(
      spawnSync('node', ['-p', 'JSON.stringify(require("./package.json"))'], {
        cwd: join(DIST, '..'),
        encoding: 'utf8',
      }).stdout,
    ) as { bin: Record<string, string> };
    expect(Object.keys(bin).length).toBeGreaterThanOrEqual(5);
    for (const exe of Object.keys(bin)) {
      const r = spawnSync(process.execPath, [join(DIST, `${exe}.mjs`), '--version'], {
        encoding: 'utf8',
        timeout: 30_000,
      });
      expect(r.status, `${exe}: ${r.stderr}`).toBe(0);
      expect(r.stdout).toContain(version);
    }
    const s = spawnSync(shim, ['--version'], { encoding: 'utf8' });
    expect(s.status).toBe(0);
    expect(s.stdout).toBe(`netplugin ${version} (native shim)\n`);
  });

  it('the long-running entries answer an unknown flag with exit 2, the flag and their usage; --help prints the usage', () => {
    for (const exe of ['netplugin-node', 'netplugin-kube-controllers']) {
      const r = spawnSync(process.execPath, [join(DIST, `${exe}.mjs`), '--no-such-flag'], {
        encoding: 'utf8',
        timeout: 30_000,
      });
      expect(r.status, exe).toBe(2);
      expect(r.stderr).toContain(`${exe}: Unknown option '--no-such-flag'`);
      expect(r.stderr).toContain(`usage: ${exe} `);
      const h = spawnSync(process.execPath, [join(DIST, `${exe}.mjs`), '--help'], {
        encoding: 'utf8',
        timeout: 30_000,
      });
      expect(h.status, exe).toBe(0);
      expect(h.stdout).toMatch(new RegExp(`^usage: ${exe} `));
    }
  });

  it('rejects an unknown --log-format and a bad --health-addr names the flag', () => {
    const f = spawnSync(process.execPath, [join(DIST, 'netplugin-node.mjs'), '--log-format', 'xml'], {
      encoding: 'utf8',
      timeout: 30_000,
    });
    expect(f.status).toBe(2);
    expect(f.stderr).toContain("--log-format 'xml' is not one of text, json");
    const h = spawnSync(process.execPath, [join(DIST, 'netplugin-node.mjs'), '--health-addr', 'localhost'], {
      encoding: 'utf8',
      timeout: 30_000,
    });
    expect(h.status).toBe(2);
    expect(h.stderr).toContain('invalid listen address "localhost": expected HOST:PORT');
  });
});
