// Host endpoints on the 3-node topology (test/support/topology.ts), with real
// traffic: node A runs TCP and UDP services in its own namespace and a pod
// with TCP services; node B (same subnet) and the "internet" namespace
// (behind the router, which routes the pod's block to A) are the clients.
// Each case changes the datastore only (HostEndpoints, GlobalNetworkPolicies,
// Profiles, AgentConfigurations) and the agent of A enforces it live.
import { execFileSync, spawnSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  API_VERSION,
  type AgentConfigurationSpec,
  type HostEndpointSpec,
  type HostPortSpec,
  type Kind,
  type Resource,
  type SpecOf,
} from '../../src/model/resources.js';
import type { GlobalNetworkPolicySpec } from '../../src/model/policy.js';
import { Topology, type Pod } from '../support/topology.js';
import { DEFAULT_FAILSAFE_OUTBOUND } from '../../src/model/agent-config.js';

const POOL = '10.171.0.0/16';
const A = '10.200.1.1';
const B_IP = '10.200.1.2';
let topo: Topology;
let pod: Pod;
let podB: Pod;
let server: { lines: string[] };

async function put<K extends Kind>(
  kind: K,
  name: string,
  spec: SpecOf<K>,
  labels?: Record<string, string>,
): Promise<void> {
  const metadata = { name, ...(labels ? { labels } : {}) };
  const cur = await topo.ds.get(kind, name).catch(() => undefined);
  if (cur) await topo.ds.update({ ...cur, metadata: { ...cur.metadata, ...metadata }, spec } as Resource<K>);
  else await topo.ds.create({ apiVersion: API_VERSION, kind, metadata, spec } as Resource<K>);
}
async function del(kind: Kind, name: string): Promise<void> {
  await topo.ds.delete(kind, name).catch(() => undefined);
}

/** A TCP connection from namespace `ns` to ip:port is accepted within 1.5 s. */
function tcp(ns: string, ip: string, port: number): boolean {
  const r = spawnSync('ip', ['netns', 'exec', ns, 'timeout', '1.5', 'bash', '-c', `exec 3<>/dev/tcp/${ip}/${port}`], {
    stdio: 'ignore',
  });
  return r.status === 0;
}

/** A UDP datagram from `ns` to ip:port is echoed within 1.5 s. */
function udp(ns: string, ip: string, port: number): boolean {
  const code = `
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(1.5); s.sendto(b'ping', (sys.argv[1], int(sys.argv[2])))
try: print(s.recvfrom(16)[0] == b'ping')
except OSError: print(False)`;
  const out = execFileSync('ip', ['netns', 'exec', ns, 'python3', '-c', code, ip, String(port)], { encoding: 'utf8' });
  return out.trim() === 'True';
}

const B = () => topo.nodes.b.ns;
const NET = () => topo.internet;

/** Polls until probe() gives `want` (policy is applied asynchronously), then returns it. */
async function becomes(what: string, want: boolean, probe: () => boolean, ms = 30_000): Promise<boolean> {
  const end = Date.now() + ms;
  for (;;) {
    const got = probe();
    if (got === want) return got;
    if (Date.now() > end) {
      const log = topo.nodes.a.agentLog.slice(-2500);
      const table = execFileSync(
        'ip',
        ['netns', 'exec', topo.nodes.a.ns, 'nft', 'list', 'table', 'inet', 'netplugin'],
        { encoding: 'utf8' },
      );
      throw new Error(`${what}: still ${got} after ${ms} ms\n${table}\n${log}`);
    }
    await new Promise((r) => setTimeout(r, 300));
  }
}

const gnp = (name: string, spec: GlobalNetworkPolicySpec) => put('GlobalNetworkPolicy', name, spec);
const hep = (name: string, spec: HostEndpointSpec, labels: Record<string, string>) =>
  put('HostEndpoint', name, spec, labels);
let etcdOut: HostPortSpec[] = [];
const agentConfig = (name: string, spec: AgentConfigurationSpec) =>
  put('AgentConfiguration', name, { failsafeOutboundHostPorts: etcdOut, ...spec });

/** TCP echo on every port given and UDP echo on 9090, in namespace `ns`. */
function services(ns: string, tcpPorts: number[]): { lines: string[] } {
  const code = `
const net = require('net'), dgram = require('dgram');
let n = 0; const up = () => { if (++n === ${tcpPorts.length + 1}) console.log('listening'); };
for (const p of ${JSON.stringify(tcpPorts)}) net.createServer((s) => { s.on('error', () => {}); s.pipe(s); }).listen(p, '0.0.0.0', up);
const u = dgram.createSocket('udp4'); u.on('message', (m, r) => u.send(m, r.port, r.address)); u.bind(9090, up);`;
  return topo.spawnIn(ns, code);
}

beforeAll(async () => {
  topo = await Topology.create();
  const etcd = new URL(topo.etcd.endpoint);
  etcdOut = [...DEFAULT_FAILSAFE_OUTBOUND, { protocol: 'TCP', port: Number(etcd.port), net: `${etcd.hostname}/32` }];
  const extra = { policy: { type: 'k8s' }, host_veth_prefix: 'npb', endpoint_status_dir: join(topo.tmp, 'status') };
  for (const n of Object.values(topo.nodes)) writeFileSync(n.confFile, JSON.stringify(topo.netconf(n, extra)));
  await topo.ds.create({
    apiVersion: API_VERSION,
    kind: 'IPPool',
    metadata: { name: 'hep4' },
    spec: { cidr: POOL, blockSize: 26, vxlanMode: 'Never', ipipMode: 'Never', natOutgoing: false },
  });
  // Pods here have no Kubernetes profiles: this policy opens them (a namespaceSelector never selects a host endpoint).
  await put('GlobalNetworkPolicy', 'pods-open', {
    namespaceSelector: 'has(netplugin.org/name)',
    ingress: [{ action: 'Allow' }],
    egress: [{ action: 'Allow' }],
  });
  await Promise.all([topo.startAgent('a'), topo.startAgent('b')]);
  pod = await topo.addPod('a', extra);
  podB = await topo.addPod('b', extra);
  // The router sends the pod's block to A: the internet reaches the pod through A's eth0 (forwarded).
  const block = `${pod.ip4!.split('.').slice(0, 3).join('.')}.${Number(pod.ip4!.split('.')[3]) & 0xc0}/26`;
  execFileSync('ip', ['-n', topo.router, 'route', 'add', block, 'via', A]);
  execFileSync('ip', ['-n', topo.internet, 'route', 'add', POOL, 'via', '203.0.113.1']);
  // The agents reach etcd (in the test's namespace, on a port of its own) through A's eth0: as the
  // datastore's port is in a real cluster (2379), it is a failsafe port of every configuration here.
  await agentConfig('default', {});
  server = services(topo.nodes.a.ns, [22, 6443, 7070, 8080, 8081]);
  const podServer = services(pod.ns, [80, 81]);
  const bServer = services(topo.nodes.b.ns, [8080]);
  const up = [server, podServer, bServer];
  await topo.waitFor(
    () => up.every((x) => x.lines.includes('listening')),
    15_000,
    () => 'services did not start',
  );
  // A NodePort-like DNAT on A (its own table in A's namespace): A:8888 → the pod's port 81.
  execFileSync('ip', ['netns', 'exec', topo.nodes.a.ns, 'nft', '-f', '-'], {
    input: `table ip hepnat {\n chain pre {\n type nat hook prerouting priority dstnat;\n tcp dport 8888 dnat to ${pod.ip4}:81\n }\n}\n`,
  });
}, 180_000);

afterAll(async () => {
  await topo?.destroy();
}, 60_000);

describe('host endpoints on the wire', { timeout: 180_000 }, () => {
  it('without a host endpoint the node is open', async () => {
    expect(await becomes('B to A:8080', true, () => tcp(B(), A, 8080))).toBe(true);
    expect(tcp(NET(), A, 8081)).toBe(true);
    expect(udp(B(), A, 9090)).toBe(true);
    expect(tcp(topo.nodes.a.ns, B_IP, 8080)).toBe(true);
    expect(await becomes('internet to the pod', true, () => tcp(NET(), pod.ip4!, 80))).toBe(true);
  });

  it('a named-interface host endpoint without policy closes the node but for the failsafe ports', async () => {
    await hep('node-a-eth0', { node: 'node-a', interfaceName: 'eth0', expectedIPs: [A] }, { role: 'edge' });
    await becomes('B to A:8080 closed', false, () => tcp(B(), A, 8080));
    expect(tcp(NET(), A, 8081)).toBe(false);
    expect(udp(B(), A, 9090)).toBe(false);
    expect(tcp(B(), A, 22)).toBe(true);
    expect(tcp(NET(), A, 6443)).toBe(true);
    // Outbound too: A no longer reaches B's port 8080.
    expect(tcp(topo.nodes.a.ns, B_IP, 8080)).toBe(false);
  });

  it('pods are not affected: forwarded traffic and pods to their own node', async () => {
    expect(await becomes('internet to the pod', true, () => tcp(NET(), pod.ip4!, 80))).toBe(true);
    expect(tcp(podB.ns, pod.ip4!, 81)).toBe(true);
    // Pod to its own node: defaultEndpointToHostAction Accept (the default).
    expect(tcp(pod.ns, A, 8080)).toBe(true);
  });

  it('a GlobalNetworkPolicy allows one port from one CIDR to the nodes with a label', async () => {
    await gnp('hep-allow-8080', {
      selector: "role == 'edge'",
      types: ['Ingress'],
      ingress: [{ action: 'Allow', protocol: 'TCP', source: { nets: [`${B_IP}/32`] }, destination: { ports: [8080] } }],
    });
    await becomes('B to A:8080 open', true, () => tcp(B(), A, 8080));
    expect(tcp(NET(), A, 8080)).toBe(false);
    expect(tcp(B(), A, 8081)).toBe(false);
    expect(tcp(B(), A, 22)).toBe(true);
  });

  it('applyOnForward policy applies to traffic forwarded to a pod', async () => {
    await gnp('hep-forward', {
      selector: "role == 'edge'",
      applyOnForward: true,
      order: 10,
      types: ['Ingress'],
      ingress: [
        { action: 'Deny', protocol: 'TCP', source: { nets: ['203.0.113.0/24'] }, destination: { ports: [80] } },
        { action: 'Allow', destination: { nets: [POOL] } },
      ],
    });
    await becomes('internet to pod:80 closed', false, () => tcp(NET(), pod.ip4!, 80));
    expect(tcp(NET(), pod.ip4!, 81)).toBe(true);
    expect(tcp(B(), pod.ip4!, 80)).toBe(true);
    // Not a forward-only policy: the host's own traffic still follows the earlier policy.
    expect(tcp(B(), A, 8080)).toBe(true);
    expect(tcp(NET(), A, 8080)).toBe(false);
  });

  it('preDNAT policy sees the port before DNAT', async () => {
    expect(await becomes('internet to A:8888 (DNAT to pod:81)', true, () => tcp(NET(), A, 8888))).toBe(true);
    await gnp('hep-prednat', {
      selector: "role == 'edge'",
      applyOnForward: true,
      preDNAT: true,
      ingress: [
        { action: 'Deny', protocol: 'TCP', source: { nets: ['203.0.113.0/24'] }, destination: { ports: [8888] } },
        { action: 'Allow' },
      ],
    });
    await becomes('internet to A:8888 closed', false, () => tcp(NET(), A, 8888));
    expect(tcp(B(), A, 8888)).toBe(true);
    expect(tcp(NET(), pod.ip4!, 81)).toBe(true);
    await del('GlobalNetworkPolicy', 'hep-prednat');
    await del('GlobalNetworkPolicy', 'hep-forward');
  });

  it('doNotTrack policy allows without conntrack entries', async () => {
    const conntrack = () =>
      execFileSync('ip', ['netns', 'exec', topo.nodes.a.ns, 'cat', '/proc/net/nf_conntrack'], { encoding: 'utf8' });
    await becomes('B to A:7070 closed first', false, () => tcp(B(), A, 7070));
    await gnp('hep-untracked', {
      selector: "role == 'edge'",
      applyOnForward: true,
      doNotTrack: true,
      ingress: [{ action: 'Allow', protocol: 'TCP', source: { nets: [`${B_IP}/32`] }, destination: { ports: [7070] } }],
      egress: [{ action: 'Allow', protocol: 'TCP', source: { ports: [7070] }, destination: { nets: [`${B_IP}/32`] } }],
    });
    await becomes('B to A:7070 open', true, () => tcp(B(), A, 7070));
    expect(conntrack()).not.toMatch(/dport=7070 /);
    // Tracked traffic still has entries (the check above can fail).
    expect(tcp(B(), A, 8080)).toBe(true);
    expect(conntrack()).toMatch(/dport=8080 /);
    await del('GlobalNetworkPolicy', 'hep-untracked');
    await becomes('B to A:7070 closed again', false, () => tcp(B(), A, 7070));
  });

  it('the failsafe ports change through AgentConfiguration without an agent restart', async () => {
    const pid = topo.nodes.a.agent!.pid;
    await del('GlobalNetworkPolicy', 'hep-allow-8080');
    await becomes('B to A:8080 closed', false, () => tcp(B(), A, 8080));
    await agentConfig('default', { failsafeInboundHostPorts: [{ protocol: 'TCP', port: 8080, net: `${B_IP}/32` }] });
    await becomes('B to A:8080 open by failsafe', true, () => tcp(B(), A, 8080));
    expect(tcp(NET(), A, 8080)).toBe(false); // the failsafe entry's net
    expect(tcp(B(), A, 22)).toBe(false); // a configured list replaces the defaults
    // A node's own configuration overrides the default: an empty list turns failsafe off.
    await agentConfig('node.node-a', { failsafeInboundHostPorts: [] });
    await becomes('B to A:8080 closed', false, () => tcp(B(), A, 8080));
    expect(tcp(B(), A, 6443)).toBe(false);
    await del('AgentConfiguration', 'node.node-a');
    await becomes('B to A:8080 open by failsafe again', true, () => tcp(B(), A, 8080));
    expect(topo.nodes.a.agent!.pid).toBe(pid);
    expect(topo.nodes.a.agent!.exitCode).toBe(null);
  });

  it('an agent restart keeps an established host connection', async () => {
    // A connection opened while failsafe allowed it; then new ones are refused, the open one goes on.
    const client = topo.spawnIn(
      B(),
      `
const s = require('net').connect(8080, '${A}', () => console.log('connected'));
s.on('data', (d) => console.log('echo ' + d.toString().trim()));
process.stdin.resume();
setInterval(() => s.write('x' + Date.now() + '\\n'), 500);`,
    );
    await topo.waitFor(
      () => client.lines.includes('connected'),
      15_000,
      () => 'no connection',
    );
    await agentConfig('default', { failsafeInboundHostPorts: [{ protocol: 'TCP', port: 22 }] });
    await becomes('new connections to A:8080 refused', false, () => tcp(B(), A, 8080));
    await topo.stopAgent('a');
    await topo.startAgent('a');
    // The new agent's full resync replaced the table: echoes still come back on the old connection.
    await topo.waitFor(
      () => /policy: controller started/.test(topo.nodes.a.agentLog),
      30_000,
      () => topo.nodes.a.agentLog.slice(-2000),
    );
    await new Promise((r) => setTimeout(r, 2000));
    const before = client.lines.filter((l) => l.startsWith('echo')).length;
    await topo.waitFor(
      () => client.lines.filter((l) => l.startsWith('echo')).length > before + 2,
      15_000,
      () => `no echo after the restart: ${client.lines.slice(-5).join(' | ')}`,
    );
    expect(tcp(B(), A, 8080)).toBe(false);
    client.proc.kill('SIGKILL');
    await agentConfig('default', {});
  });

  it('the all-interfaces automatic host endpoint with the allow-all profile is open; a policy denies one port', async () => {
    await del('HostEndpoint', 'node-a-eth0');
    await put('Profile', 'netplugin-default-allow', { ingress: [{ action: 'Allow' }], egress: [{ action: 'Allow' }] });
    await hep(
      'node-a-auto-hep',
      { node: 'node-a', interfaceName: '*', expectedIPs: [A], profiles: ['netplugin-default-allow'] },
      { auto: 'a' },
    );
    await becomes('B to A:8081 open', true, () => tcp(B(), A, 8081));
    expect(tcp(NET(), A, 8080)).toBe(true);
    expect(udp(B(), A, 9090)).toBe(true);
    await gnp('auto-deny-8081', {
      selector: "auto == 'a'",
      ingress: [{ action: 'Deny', protocol: 'TCP', destination: { ports: [8081] } }, { action: 'Pass' }],
      egress: [{ action: 'Pass' }],
    });
    await becomes('B to A:8081 closed', false, () => tcp(B(), A, 8081));
    expect(tcp(B(), A, 8080)).toBe(true);
    expect(tcp(NET(), A, 8081)).toBe(false);
    // Pods unaffected by the all-interfaces endpoint.
    expect(tcp(podB.ns, pod.ip4!, 80)).toBe(true);
    expect(tcp(pod.ns, A, 8081)).toBe(true);
  });
});
