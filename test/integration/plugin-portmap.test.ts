// Chaining with the real portmap plugin (Debian containernetworking-plugins,
// iptables backend), run the way libcni runs a conflist: the same cniVersion and
// name for every entry, runtimeConfig injected for the capability, each plugin's
// prevResult the previous one's result, DEL in reverse order.
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { connect } from 'node:net';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { hostVethName } from '../../src/model/names.js';
import { assertThrowawayHostNetns } from '../support/cni.js';
import { createNetns, removeAllNetns } from '../support/netns.js';
import {
  NET_NAME,
  PORTMAP,
  cleanupAttachments,
  cni,
  ensureBuilt,
  expectNothingLeft,
  expectOk,
  netconf,
  startCluster,
  type Cluster,
} from '../support/plugin-harness.js';

const PREFIX = 'npp';
const POOL = { name: 'portmap-v4', cidr: '10.77.7.0/24', blockSize: 28 };
const POOL6 = { name: 'portmap-v6', cidr: 'fd77:7::/116', blockSize: 122 };
/**
 * Host addresses that are not loopback (TEST-NET-1, and one outside the pools), added to lo of the throwaway host
 * namespace.
 */
const HOST_IP = '192.0.2.77';
const HOST_IP6 = 'fd77:7:ffff::1';
let c: Cluster;
const servers: ChildProcess[] = [];

beforeAll(async () => {
  assertThrowawayHostNetns();
  ensureBuilt();
  c = await startCluster([POOL, POOL6]);
  execFileSync('ip', ['addr', 'replace', `${HOST_IP}/32`, 'dev', 'lo']);
  execFileSync('ip', ['addr', 'replace', `${HOST_IP6}/128`, 'dev', 'lo']);
});
afterEach(async () => {
  for (const s of servers.splice(0)) s.kill('SIGKILL');
  await cleanupAttachments();
  removeAllNetns();
});
afterAll(async () => {
  for (const a of [`${HOST_IP}/32`, `${HOST_IP6}/128`]) {
    try {
      execFileSync('ip', ['addr', 'del', a, 'dev', 'lo'], { stdio: 'ignore' });
    } catch {
      /* not added */
    }
  }
  removeAllNetns();
  await c?.close();
});

/** A TCP server inside the pod answering 'hello'; resolves once it listens. */
function podServer(podName: string, port: number): Promise<ChildProcess> {
  const script = `require('net').createServer((s) => s.end('hello')).listen(${port}, () => console.log('listening'))`;
  const p = spawn('ip', ['netns', 'exec', podName, process.execPath, '-e', script], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  servers.push(p);
  return new Promise((resolve, reject) => {
    let err = '';
    p.stderr!.on('data', (d) => (err += d));
    p.stdout!.on('data', (d: Buffer) => {
      if (d.toString().includes('listening')) resolve(p);
    });
    p.on('exit', (code) => reject(new Error(`pod server exited with ${code}: ${err}`)));
  });
}

/** What a TCP client at host:port reads, or the connection error's code. */
function fetchTcp(host: string, port: number): Promise<string> {
  return new Promise((resolve) => {
    let data = '';
    const s = connect({ host, port });
    s.setTimeout(3000, () => {
      s.destroy();
      resolve('TIMEOUT');
    });
    s.on('data', (d) => (data += d));
    s.on('end', () => resolve(data));
    s.on('error', (e: NodeJS.ErrnoException) => resolve(e.code ?? 'ERROR'));
  });
}

function natRulesMentioning(text: string): string[] {
  const save = text.includes(':') ? 'ip6tables-save' : 'iptables-save';
  return execFileSync(save, ['-t', 'nat'], { encoding: 'utf8' })
    .split('\n')
    .filter((l) => l.includes(text));
}

// Dual stack in 1.0.0 also exercises ip6tables. portmap's own CHECK is not run:
// portmap 1.1.1 (Debian 12) looks for its IPv4 rules in ip6tables and fails on
// every pod (containernetworking/plugins#819), so only netplugin's CHECK of the
// chain's final result is checked here.
describe.each([
  { v: '0.4.0', dual: false },
  { v: '1.0.0', dual: true },
])('netplugin + portmap, cniVersion $v, dual stack $dual', ({ v, dual }) => {
  it('the host port reaches the pod (host address and 127.0.0.1) only while the portmap entry is there; DEL in reverse leaves no rule', async () => {
    const pod = createNetns('pod');
    const containerId = `pm${v.replace(/\./g, '')}-${process.pid}`;
    const call = { containerId, netns: pod.path, ifname: 'eth0' };
    const hostPort = 30000 + (process.pid % 20000) + (dual ? 1 : 0);
    const mapping = [{ hostPort, containerPort: 8080, protocol: 'tcp' }];
    const mainConf = netconf(c, v, {
      host_veth_prefix: PREFIX,
      ...(dual ? { ipam: { type: 'netplugin-ipam', assign_ipv4: 'true', assign_ipv6: 'true' } } : {}),
    });
    const portmapConf = {
      cniVersion: v,
      name: NET_NAME,
      type: 'portmap',
      snat: true,
      capabilities: { portMappings: true },
      runtimeConfig: { portMappings: mapping },
    };

    const add = await cni('ADD', mainConf, call);
    expectOk(add);
    const podIP = (add.json.ips[0].address as string).split('/')[0]!;
    const podIP6 = dual ? (add.json.ips[1].address as string).split('/')[0]! : undefined;
    await podServer(pod.name, 8080);
    // Reaching the pod directly works; the host port does not answer yet.
    expect(await fetchTcp(podIP, 8080)).toBe('hello');
    expect(await fetchTcp(HOST_IP, hostPort)).toBe('ECONNREFUSED');

    const pm = await cni('ADD', { ...portmapConf, prevResult: add.json }, call, PORTMAP);
    expectOk(pm);
    // portmap passes the previous result through.
    expect(pm.json.ips).toEqual(add.json.ips);
    expect(natRulesMentioning(podIP).length).toBeGreaterThan(0);
    expect(await fetchTcp(HOST_IP, hostPort)).toBe('hello');
    // Locally generated traffic to 127.0.0.1 needs route_localnet on the host veth (set by netplugin) and portmap's
    // SNAT.
    expect(await fetchTcp('127.0.0.1', hostPort)).toBe('hello');
    if (podIP6) {
      expect(natRulesMentioning(podIP6).length).toBeGreaterThan(0);
      expect(await fetchTcp(HOST_IP6, hostPort)).toBe('hello');
    }

    // libcni's CHECK gives every plugin the cached final result.
    expectOk(await cni('CHECK', { ...mainConf, prevResult: pm.json }, call));

    expectOk(await cni('DEL', { ...portmapConf, prevResult: pm.json }, call, PORTMAP));
    expect(natRulesMentioning(podIP)).toEqual([]);
    expect(await fetchTcp(HOST_IP, hostPort)).toBe('ECONNREFUSED');
    if (podIP6) {
      expect(natRulesMentioning(podIP6)).toEqual([]);
      expect(await fetchTcp(HOST_IP6, hostPort)).toBe('ECONNREFUSED');
    }
    expectOk(await cni('DEL', { ...mainConf, prevResult: pm.json }, call));
    expect(hostVethName(PREFIX, containerId)).toMatch(/^npp/);
    await expectNothingLeft(c, PREFIX);
  });
});
