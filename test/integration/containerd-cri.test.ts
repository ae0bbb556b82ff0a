// containerd 1.6's CRI plugin, the path a kubelet takes, driven over the CRI
// API as a kubelet drives it (test/support/cri.ts): netplugin installed by
// install-cni into a private containerd's one CNI bin dir, per exec (the
// installed shim with no agent running, so its fallback runs the plugin) and
// through a running agent. containerd, runc and the pods are real; the sandbox
// image is built here from busybox-static (no registry).
import { execFile } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { copyFileSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runCtl } from '../../src/ctl/index.js';
import { writeFileAtomic } from '../../src/ctl/install-cni.js';
import { createIpam } from '../../src/ipam/index.js';
import { PAGE, busyboxRootfsTar, ociArchive } from '../support/busybox-image.js';
import { CNI_BIN_DIR, ROOT, assertThrowawayHostNetns } from '../support/cni.js';
import { iptablesRulesFor, startContainerd, type Containerd } from '../support/containerd.js';
import { CriError, type SandboxConfig } from '../support/cri.js';
import {
  NET_NAME,
  NODE,
  ensureBuilt,
  expectNothingLeft,
  hostLinksWithPrefix,
  hostPoolRoutes,
  ipamState,
  startAgent,
  startCluster,
  wepNames,
  type Agent,
  type Cluster,
} from '../support/plugin-harness.js';

const IMAGE = 'localhost/netplugin-test/busybox:cri';
const HTTPD = ['httpd', '-f', '-p', '80', '-h', '/www'];
const run = promisify(execFile);
let imageDir: string;
let archive: string;

beforeAll(() => {
  imageDir = mkdtempSync(join(tmpdir(), `cri-image-${process.pid}-`));
  archive = ociArchive(imageDir, busyboxRootfsTar(imageDir), IMAGE, ['sleep', 'infinity']);
});
afterAll(() => {
  if (imageDir) rmSync(imageDir, { recursive: true, force: true });
});

const PATHS = [
  { path: 'per exec', prefix: 'ncx', cidr: '10.77.91.0/27', nodeAddr: '10.255.78.1', hostPort: 18081 },
  { path: 'through the agent', prefix: 'nca', cidr: '10.77.92.0/27', nodeAddr: '10.255.78.2', hostPort: 18082 },
];

describe.each(PATHS)('containerd 1.6 CRI, netplugin $path', (p) => {
  let c: Cluster;
  let tmp: string;
  let ctd: Containerd;
  let agent: Agent | undefined;

  beforeAll(async () => {
    assertThrowawayHostNetns();
    ensureBuilt();
    c = await startCluster([{ name: `cri-${p.prefix}`, cidr: p.cidr, blockSize: 28 }]);
    tmp = mkdtempSync(join(tmpdir(), `cri-${p.prefix}-${process.pid}-`));
    const bin = join(tmp, 'bin');
    const conf = join(tmp, 'net.d');
    // install-cni as docs/runtimes.md says, into containerd's temporary directories.
    let err = '';
    const args = ['install-cni', '--bin-dir', bin, '--conf-dir', conf, '--network-name', NET_NAME];
    args.push('--etcd-endpoints', c.etcd.endpoint, '--nodename', NODE, '--log-file-path', '');
    const io = { env: {}, stdout: () => {}, stderr: (s: string) => (err += s), packageDir: ROOT, inPod: false };
    const code = await runCtl(args, { ...io, nodePath: process.execPath });
    expect(err).toBe('');
    expect(code).toBe(0);
    // Per-test settings: our own host veth prefix and the cluster's lock file.
    const file = join(conf, '10-netplugin.conflist');
    const conflist = JSON.parse(readFileSync(file, 'utf8'));
    Object.assign(conflist.plugins[0], { host_veth_prefix: p.prefix, ipam_lock_file: c.lockFile });
    writeFileSync(file, JSON.stringify(conflist, null, 2));
    // containerd 1.6 takes one bin_dir: the chained portmap and the loopback
    // plugin its CRI runs for every pod's lo must be in netplugin's.
    for (const plugin of ['portmap', 'loopback']) copyFileSync(join(CNI_BIN_DIR, plugin), join(bin, plugin));
    const socket = join(tmp, 'run/cni.sock');
    // Through the agent: no fallback, so a request the agent does not take fails loudly.
    if (p.path !== 'per exec') rmSync(join(bin, 'netplugin.fallback'));
    ctd = await startContainerd({
      dir: join(tmp, 'containerd'),
      cniBinDir: bin,
      cniConfDir: conf,
      imageArchive: archive,
      image: IMAGE,
      env: { NETPLUGIN_AGENT_SOCKET: socket },
    });
    // The agent opens the pods' netns files, which live in containerd's mount namespace.
    if (p.path !== 'per exec') agent = await startAgent(socket, [], { prefix: ctd.enter });
  }, 120_000);

  afterAll(async () => {
    // containerd's log, to see why a case failed: CRI_SHOW_LOG=1.
    if (process.env.CRI_SHOW_LOG) process.stderr.write(ctd?.log() ?? '');
    await ctd?.close();
    await agent?.stop();
    await c?.close();
    if (tmp) rmSync(tmp, { recursive: true, force: true });
  });

  function podConfig(name: string, extra: Partial<SandboxConfig> = {}): SandboxConfig {
    const uid = randomUUID();
    const linux = { cgroupParent: `${ctd.cgroupParent}/pod${uid}` };
    return { metadata: { name, namespace: 'cri-test', uid, attempt: 0 }, hostname: name, linux, ...extra };
  }

  interface Pod {
    id: string;
    config: SandboxConfig;
    ip: string;
    container?: string;
  }

  /** RunPodSandbox, PodSandboxStatus, and with a command CreateContainer + StartContainer: a kubelet's pod start. */
  async function startPod(name: string, command?: string[], extra: Partial<SandboxConfig> = {}): Promise<Pod> {
    const config = podConfig(name, extra);
    const id = await ctd.cri.runPodSandbox(config);
    const st = await ctd.cri.podSandboxStatus(id);
    expect(st.state).toBe('SANDBOX_READY');
    const pod: Pod = { id, config, ip: st.network?.ip ?? '' };
    if (command) pod.container = await ctd.cri.startContainer(id, config, 'main', IMAGE, command);
    return pod;
  }

  async function removePods(pods: Pod[]): Promise<void> {
    await Promise.all(pods.map((pod) => ctd.cri.stopPodSandbox(pod.id)));
    await Promise.all(pods.map((pod) => ctd.cri.removePodSandbox(pod.id)));
  }

  /** eth0's IPv4 address inside the pod, read with ExecSync. */
  async function eth0Address(pod: Pod): Promise<string | undefined> {
    const r = await ctd.cri.execSync(pod.container!, ['ip', '-4', 'addr', 'show', 'dev', 'eth0']);
    expect(r.exitCode, r.stderr).toBe(0);
    return /inet (\d+\.\d+\.\d+\.\d+)\//.exec(r.stdout)?.[1];
  }

  async function fetchFrom(pod: Pod, ip: string): Promise<string> {
    const get = `printf 'GET / HTTP/1.0\\r\\n\\r\\n' | nc -w 5 ${ip} 80`;
    const r = await ctd.cri.execSync(pod.container!, ['sh', '-c', get]);
    return r.stdout.split('\n').at(-2) + '\n';
  }

  /** Nothing of these sandboxes left: veths, routes, IPAM, endpoints (plugin-harness), portmap rules, netns files. */
  async function expectNothingLeftOf(ids: string[]): Promise<void> {
    await expectNothingLeft(c, p.prefix);
    expect(iptablesRulesFor(ids), 'portmap rules left behind').toEqual([]);
    expect(readdirSync(ctd.netnsDir), 'pod network namespaces left behind').toEqual([]);
    expect(await ctd.cri.listPodSandbox()).toEqual([]);
  }

  it("the runtime reports NetworkReady with netplugin's conflist loaded", async () => {
    const st = await ctd.cri.status(true);
    expect(st.conditions.find((cond) => cond.type === 'NetworkReady')?.status).toBe(true);
    expect(loadedConflists(st.info).map((l) => l.name)).toEqual([NET_NAME]);
  });

  it('pods: CRI address = eth0, pod to pod, a hostPort; stop releases, remove leaves nothing', async () => {
    const portMappings = [{ protocol: 'TCP' as const, containerPort: 80, hostPort: p.hostPort }];
    const web = await startPod('web', HTTPD, { portMappings });
    const client = await startPod('client', ['sleep', 'infinity']);
    for (const pod of [web, client]) expect(await eth0Address(pod)).toBe(pod.ip);
    expect(web.ip).not.toBe(client.ip);
    expect(await wepNames(c.ds)).toHaveLength(2);
    expect(hostPoolRoutes(c.pools)).toHaveLength(2);
    expect(await fetchFrom(client, web.ip)).toBe(PAGE);
    // The hostPort: go-cni hands portmap the CRI port mappings (capitalised keys) in runtimeConfig.
    expect(iptablesRulesFor([web.id]).length).toBeGreaterThan(0);
    await run('ip', ['addr', 'add', `${p.nodeAddr}/32`, 'dev', 'lo']);
    try {
      const { stdout } = await run('curl', ['-s', '--max-time', '5', `http://${p.nodeAddr}:${p.hostPort}/`]);
      expect(stdout).toBe(PAGE);
    } finally {
      await run('ip', ['addr', 'del', `${p.nodeAddr}/32`, 'dev', 'lo']);
    }
    // StopPodSandbox is the CNI DEL: the address, endpoint, veth and port rules go, the other pod keeps its own.
    await ctd.cri.stopPodSandbox(web.id);
    const st = await ipamState(c.ds);
    expect(st.handles).toEqual([`${NET_NAME}.${client.id}`]);
    expect(st.allocations).toHaveLength(1);
    expect(await wepNames(c.ds)).toHaveLength(1);
    expect(hostLinksWithPrefix(p.prefix)).toHaveLength(1);
    expect(iptablesRulesFor([web.id])).toEqual([]);
    await removePods([web, client]);
    await expectNothingLeftOf([web.id, client.id]);
  });

  // Started and torn down in two tests: each is 20 plugin runs at once (per exec, 20 Node starts).
  let burst: Pod[] = [];
  it('20 pods started at once: 20 addresses, each routed', async () => {
    burst = await Promise.all(Array.from({ length: 20 }, (_, i) => startPod(`burst-${i}`)));
    const ips = burst.map((pod) => pod.ip);
    expect(new Set(ips).size).toBe(20);
    for (const ip of ips) expect(ip).toMatch(new RegExp(`^${p.cidr.split('.').slice(0, 3).join('\\.')}\\.`));
    expect(hostPoolRoutes(c.pools)).toHaveLength(20);
    expect((await ipamState(c.ds)).allocations).toHaveLength(20);
  });

  it('20 pods stopped and removed at once: nothing left', async () => {
    expect(burst).toHaveLength(20);
    await removePods(burst);
    await expectNothingLeftOf(burst.map((pod) => pod.id));
  });

  it('containerd restarted with pods running: they keep their addresses, then stop and remove cleanly', async () => {
    const web = await startPod('web', HTTPD);
    const client = await startPod('client', ['sleep', 'infinity']);
    await ctd.restart();
    for (const pod of [web, client]) {
      const st = await ctd.cri.podSandboxStatus(pod.id);
      expect(st.state).toBe('SANDBOX_READY');
      expect(st.network?.ip).toBe(pod.ip);
    }
    expect(await fetchFrom(client, web.ip)).toBe(PAGE);
    await removePods([web, client]);
    await expectNothingLeftOf([web.id, client.id]);
  });

  it('an ADD that fails (pool exhausted): CRI returns the plugin message, nothing is left', async () => {
    // Every address of the pool taken by someone else.
    const ipam = createIpam(c.ds, { lock: 'none' });
    const fillers: string[] = [];
    for (let i = 0; i < 40; i++) {
      const handleID = `filler-${i}`;
      try {
        await ipam.assign({ handleID, node: NODE, attrs: {}, assignIPv4: true, assignIPv6: false });
      } catch {
        break;
      }
      fillers.push(handleID);
    }
    expect(fillers).toHaveLength(32);
    const err = await startPod('unlucky').then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(CriError);
    const details = (err as CriError).details;
    expect(details).toMatch(/plugin type="netplugin" failed \(add\)/);
    expect(details).toMatch(/no free IPv4 address|exhausted/);
    expect(hostLinksWithPrefix(p.prefix)).toEqual([]);
    expect(hostPoolRoutes(c.pools)).toEqual([]);
    expect(await wepNames(c.ds)).toEqual([]);
    expect((await ipamState(c.ds)).handles).toEqual([...fillers].sort());
    expect(readdirSync(ctd.netnsDir)).toEqual([]);
    for (const h of fillers) await ipam.releaseByHandle(h);
    await expectNothingLeftOf([]);
  });

  it('a conflist replaced by rename (as install-cni writes it) applies to the next pod without a restart', async () => {
    const file = join(tmp, 'net.d', '10-netplugin.conflist');
    const mtu = async (pod: Pod) => {
      return (await ctd.cri.execSync(pod.container!, ['cat', '/sys/class/net/eth0/mtu'])).stdout.trim();
    };
    const before = await startPod('before', ['sleep', 'infinity']);
    const conflist = JSON.parse(readFileSync(file, 'utf8'));
    const original = conflist.plugins[0].mtu;
    conflist.plugins[0].mtu = 1400;
    expect(writeFileAtomic(file, JSON.stringify(conflist, null, 2), 0o644).action).toBe('written');
    // containerd's watcher reloads the directory on the rename; Status (verbose) shows what it loaded.
    const deadline = Date.now() + 10_000;
    while (loadedConflists((await ctd.cri.status(true)).info)[0]?.plugins[0]?.['mtu'] !== 1400) {
      if (Date.now() > deadline) throw new Error(`containerd did not reload ${file} within 10 s`);
      await new Promise((r) => setTimeout(r, 100));
    }
    const after = await startPod('after', ['sleep', 'infinity']);
    expect(await mtu(before)).toBe(String(original ?? 1500));
    expect(await mtu(after)).toBe('1400');
    await removePods([before, after]);
    await expectNothingLeftOf([before.id, after.id]);
  });
});

/** The conflists containerd's CRI plugin has loaded, from Status's verbose `cniconfig` (go-cni's config result). */
function loadedConflists(info: Record<string, string>): Array<{ name: string; plugins: Record<string, unknown>[] }> {
  const cfg = JSON.parse(info['cniconfig'] ?? '{}') as { Networks?: Array<{ Config?: { Source?: string } }> };
  const lists = (cfg.Networks ?? []).flatMap((n) => (n.Config?.Source ? [JSON.parse(n.Config.Source)] : []));
  return lists.filter((c) => c.name !== 'cni-loopback');
}
