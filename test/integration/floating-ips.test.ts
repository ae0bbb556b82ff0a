// Floating IPs on the three-node topology (test/support/topology.ts), with real
// TCP connections: a pod on node A given a floating IP through the
// cni.netplugin.org/floatingIPs annotation is reached on that address from a
// pod on node B, from node B itself and from the "internet" namespace (its
// router has a static route to the node), and the server in the pod sees each
// client's own address; the pod reaches its own floating IP (hairpin); a policy
// denying a client by source is enforced on floating-IP traffic; DEL removes
// the translation and the routes on every node; the pod re-created on node C
// takes the address over, and a younger pod claiming it is refused and reported.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { execFile, execFileSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { API_VERSION } from '../../src/model/resources.js';
import { namespaceToProfile, serviceAccountToProfile } from '../../src/model/profiles.js';
import { convertK8sNetworkPolicy } from '../../src/model/k8s-networkpolicy.js';
import { startFakeApiServer, writeKubeconfig, type FakeApiServer } from '../support/fake-apiserver.js';
import { putNamespace, putPod, type Api } from '../support/k8s-harness.js';
import { INTERNET_IP, Topology, type NodeName, type Pod } from '../support/topology.js';

const run = promisify(execFile);
const NS = 'fipns';
const FIP = '10.172.200.7';
const POD_POOL = '10.172.0.0/20';
const FIP_POOL = '10.172.200.0/24';
const ANNOTATION = 'cni.netplugin.org/floatingIPs';

let topo: Topology;
let api: Api;
let server: FakeApiServer | undefined;
let extra: Record<string, unknown>;
let client: Pod;
let owner: Pod | undefined;

const k8sArgs = (pod: string) => `IgnoreUnknown=1;K8S_POD_NAMESPACE=${NS};K8S_POD_NAME=${pod}`;

/** A pod of NS on `node` serving TCP 8080: it answers `<tag> <the client's address as it sees it>`. */
async function servingPod(node: NodeName, name: string, annotations: Record<string, string> = {}): Promise<Pod> {
  putPod(api, NS, name, { nodeName: topo.nodes[node].name, labels: { app: name }, annotations });
  const p = await topo.addPod(node, extra, k8sArgs(name));
  const srv = topo.spawnIn(
    p.ns,
    `const net=require('net');net.createServer((s)=>s.pipe(s)).listen(8081,'0.0.0.0');` +
      `net.createServer((s)=>s.end('${name} '+s.remoteAddress+'\\n')).listen(8080,'0.0.0.0',()=>console.log('listening'));`,
  );
  await topo.waitFor(
    () => srv.lines.includes('listening'),
    20_000,
    () => `server in ${name} did not start`,
  );
  return p;
}

/** One TCP connection from namespace `ns` to FIP:8080: the client's local address and the server's answer. */
async function connect(ns: string, host = FIP): Promise<{ local: string; tag: string; seen: string } | undefined> {
  const code =
    `const s=require('net').connect({port:8080,host:'${host}'});let l='',d='';s.setTimeout(2500);` +
    `s.on('connect',()=>l=s.localAddress);s.on('data',(x)=>d+=x);s.on('end',()=>{console.log(l+' '+d.trim());process.exit(0)});` +
    `s.on('timeout',()=>process.exit(1));s.on('error',()=>process.exit(1));`;
  try {
    const { stdout } = await run('ip', ['netns', 'exec', ns, process.execPath, '-e', code], { timeout: 10_000 });
    const [local, tag, seen] = stdout.trim().split(' ');
    return local && tag && seen ? { local, tag, seen } : undefined;
  } catch {
    return undefined;
  }
}

/** Connects until the answer satisfies `ok` (routes and tables converge asynchronously). */
async function until(
  ns: string,
  ok: (r: { local: string; tag: string; seen: string } | undefined) => boolean,
  what: string,
  host = FIP,
) {
  let last: Awaited<ReturnType<typeof connect>>;
  await topo.waitFor(
    async () => ok((last = await connect(ns, host))),
    40_000,
    () =>
      `${what}: last answer ${JSON.stringify(last)}\nA:${topo.nodes.a.agentLog.slice(-1500)}\nC:${topo.nodes.c.agentLog.slice(-1500)}`,
  );
  return last!;
}

function floatingTable(node: NodeName): string {
  try {
    const args = ['netns', 'exec', topo.nodes[node].ns, 'nft', 'list', 'table', 'inet', 'netplugin-floating'];
    return execFileSync('ip', args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] });
  } catch {
    return '';
  }
}

/** DEL as the runtime sends it (with the pod's K8S_ args: the endpoint's name derives from them). */
async function delPod(p: Pod, name: string): Promise<void> {
  const r = await topo.cni(p.node, 'DEL', p.containerId, p.ns, extra, k8sArgs(name));
  expect(r.code, r.stdout + r.stderr).toBe(0);
  await topo.delPod(p);
}

const fipRoutes = (node: NodeName) => topo.routes(node).filter((r) => r.dst === FIP);

beforeAll(async () => {
  topo = await Topology.create();
  // The nodes reach the API server on the test namespace's underlay address (plain HTTP: the
  // throwaway certificate names 127.0.0.1 only).
  server = await startFakeApiServer({ host: '10.200.1.250', auth: { tokens: ['fip-token'] } });
  api = { server, kubeconfig: writeKubeconfig(topo.tmp, server, { token: 'fip-token' }) };
  putNamespace(api, NS, {}, { ns: NS });
  await topo.ds.create(namespaceToProfile({ metadata: { name: NS, labels: { ns: NS } } }));
  await topo.ds.create(serviceAccountToProfile({ metadata: { name: 'default', namespace: NS } }));
  extra = {
    host_veth_prefix: 'npl',
    policy: { type: 'k8s' },
    kubernetes: { kubeconfig: api.kubeconfig },
    feature_control: { floating_ips: true },
  };
  for (const n of Object.values(topo.nodes)) writeFileSync(n.confFile, JSON.stringify(topo.netconf(n, extra)));
  const pool = (name: string, cidr: string, more: Record<string, unknown> = {}) =>
    topo.ds.create({
      apiVersion: API_VERSION,
      kind: 'IPPool',
      metadata: { name },
      spec: { cidr, blockSize: 26, vxlanMode: 'Always', natOutgoing: true, ...more },
    });
  await pool('npl-pods', POD_POOL);
  // The floating range: a pool of its own, disabled, so IPAM never hands its addresses to pods.
  await pool('npl-fip', FIP_POOL, { disabled: true, natOutgoing: false });
  // With API access: the agents record Warning Events on pods.
  const withApi = ['--kubeconfig', api.kubeconfig];
  await Promise.all([topo.startAgent('a', withApi), topo.startAgent('b', withApi), topo.startAgent('c', withApi)]);
  // The internet reaches the floating range through the router, which has a static route to the node.
  execFileSync('ip', ['-n', topo.internet, 'route', 'add', '10.172.0.0/16', 'via', '203.0.113.1']);
  execFileSync('ip', ['-n', topo.router, 'route', 'add', `${FIP}/32`, 'via', topo.nodes.a.ip4]);
  await topo.waitFor(
    async () => (await topo.ds.list('Node')).items.filter((n) => n.spec.vxlanTunnelAddress).length === 3,
    30_000,
    () => 'nodes got no tunnel addresses',
  );
  owner = await servingPod('a', 'server', { [ANNOTATION]: JSON.stringify([FIP]) });
  putPod(api, NS, 'client', { nodeName: topo.nodes.b.name, labels: { app: 'client' } });
  client = await topo.addPod('b', extra, k8sArgs('client'));
}, 180_000);

afterAll(async () => {
  await topo?.destroy();
  await server?.stop();
}, 60_000);

describe('floating IP held by a pod on node A', { timeout: 90_000 }, () => {
  it('records the pair on the endpoint, translates on A and routes on B and C', async () => {
    const weps = (await topo.ds.list('WorkloadEndpoint')).items.filter((w) => w.spec.ipNATs?.length);
    expect(weps.map((w) => w.spec.ipNATs)).toEqual([[{ internalIP: owner!.ip4, externalIP: FIP }]]);
    await topo.waitFor(
      () => floatingTable('a').includes(`${FIP} : ${owner!.ip4}`),
      30_000,
      () => `no DNAT on A:\n${floatingTable('a')}\n${topo.nodes.a.agentLog.slice(-2000)}`,
    );
    expect(floatingTable('b')).toBe('');
    await topo.waitFor(
      () => fipRoutes('b').length === 1 && fipRoutes('c').length === 1,
      30_000,
      () => `no routes: ${JSON.stringify([fipRoutes('b'), fipRoutes('c')])}`,
    );
    const tunA = (await topo.ds.get('Node', 'node-a')).spec.vxlanTunnelAddress;
    for (const n of ['b', 'c'] as const)
      expect(fipRoutes(n)[0]).toMatchObject({ gateway: tunA, dev: 'vxlan.netplugin' });
    expect(fipRoutes('a')[0]).toMatchObject({ gateway: owner!.ip4 });
  });

  it("a pod on node B reaches it, and the server sees the pod's own address", async () => {
    const r = await until(client.ns, (x) => x?.tag === 'server', 'pod on B');
    expect(r.seen).toBe(client.ip4);
    expect(r.local).toBe(client.ip4);
  });

  it('node B itself reaches it, and the server sees the address node B sent from', async () => {
    const r = await until(topo.nodes.b.ns, (x) => x?.tag === 'server', 'node B');
    expect(r.seen).toBe(r.local);
  });

  it('node A itself reaches it (output hook)', async () => {
    const r = await until(topo.nodes.a.ns, (x) => x?.tag === 'server', 'node A');
    expect(r.seen).toBe(r.local);
  });

  it("the internet reaches it through the router's static route to node A, with its own source", async () => {
    const r = await until(topo.internet, (x) => x?.tag === 'server', 'internet');
    expect(r.seen).toBe(INTERNET_IP);
    expect(r.local).toBe(INTERNET_IP);
  });

  it('hairpin: the pod reaches its own floating IP (source translated to the floating IP)', async () => {
    const r = await until(owner!.ns, (x) => x?.tag === 'server', 'hairpin');
    expect(r.local).toBe(owner!.ip4);
    expect(r.seen).toBe(FIP);
  });

  it("the pod's ingress policy sees the client's source: a policy denying the internet by source is enforced", async () => {
    const np = {
      metadata: { name: 'no-internet', namespace: NS },
      spec: {
        podSelector: { matchLabels: { app: 'server' } },
        ingress: [{ from: [{ ipBlock: { cidr: '0.0.0.0/0', except: [`${INTERNET_IP}/32`] } }] }],
      },
    };
    const pol = convertK8sNetworkPolicy(np);
    await topo.ds.create(pol);
    try {
      await until(topo.internet, (x) => x === undefined, 'internet still served under the deny policy');
      // Twice more: denied each time, not by a lost packet.
      expect(await connect(topo.internet)).toBeUndefined();
      expect(await connect(topo.internet)).toBeUndefined();
      const r = await until(client.ns, (x) => x?.tag === 'server', 'pod on B under the policy');
      expect(r.seen).toBe(client.ip4);
    } finally {
      await topo.ds.delete(pol.kind, pol.metadata.name, { namespace: pol.metadata.namespace });
    }
    await until(topo.internet, (x) => x?.tag === 'server', 'internet after the policy went');
  });
});

describe('the floating IP follows its pod', { timeout: 120_000 }, () => {
  it('DEL removes the translation on A and the routes on every node', async () => {
    await delPod(owner!, 'server');
    owner = undefined;
    await topo.waitFor(
      () => floatingTable('a') === '' && (['a', 'b', 'c'] as const).every((n) => fipRoutes(n).length === 0),
      30_000,
      () =>
        `left behind: table ${floatingTable('a')} routes ${JSON.stringify([fipRoutes('a'), fipRoutes('b'), fipRoutes('c')])}`,
    );
    expect(await connect(client.ns)).toBeUndefined();
  });

  it('the pod re-created on node C takes it over: routes on A and B to C, translation on C', async () => {
    execFileSync('ip', ['-n', topo.router, 'route', 'replace', `${FIP}/32`, 'via', topo.nodes.c.ip4]);
    owner = await servingPod('c', 'server', { [ANNOTATION]: JSON.stringify([FIP]) });
    await topo.waitFor(
      () => floatingTable('c').includes(`${FIP} : ${owner!.ip4}`),
      30_000,
      () => `no DNAT on C:\n${topo.nodes.c.agentLog.slice(-2000)}`,
    );
    const tunC = (await topo.ds.get('Node', 'node-c')).spec.vxlanTunnelAddress;
    await topo.waitFor(
      () => (['a', 'b'] as const).every((n) => fipRoutes(n)[0]?.gateway === tunC),
      30_000,
      () => `routes not moved: ${JSON.stringify([fipRoutes('a'), fipRoutes('b')])}`,
    );
    expect((await until(client.ns, (x) => x?.tag === 'server', 'pod on B to C')).seen).toBe(client.ip4);
    expect((await until(topo.internet, (x) => x?.tag === 'server', 'internet to C')).seen).toBe(INTERNET_IP);
    const fromB = await until(topo.nodes.b.ns, (x) => x?.tag === 'server', 'node B to C');
    expect(fromB.seen).toBe(fromB.local);
  });

  it('a younger pod claiming the same floating IP is refused and reported; the holder keeps it', async () => {
    const young = await servingPod('b', 'usurper', { [ANNOTATION]: JSON.stringify([FIP]) });
    await topo.waitFor(
      () => /floating IP held by an older endpoint/.test(topo.nodes.b.agentLog),
      30_000,
      () => `no conflict reported on B:\n${topo.nodes.b.agentLog.slice(-2000)}`,
    );
    expect(topo.nodes.b.agentLog).toMatch(new RegExp(`floatingIP.*${FIP.replace(/\./g, '\\.')}`));
    expect(floatingTable('b')).toBe('');
    const events = async () => {
      const r = await fetch(`${server!.url}/api/v1/namespaces/${NS}/events`, {
        headers: { Authorization: 'Bearer fip-token' },
      });
      return (
        (await r.json()) as {
          items: Array<{ reason: string; type: string; message: string; involvedObject: { name: string } }>;
        }
      ).items;
    };
    let seen: Awaited<ReturnType<typeof events>> = [];
    await topo.waitFor(
      async () =>
        (seen = await events()).some(
          (e) => e.reason === 'NetpluginFloatingIPRefused' && e.involvedObject.name === 'usurper',
        ),
      20_000,
      () => `no Event on the refused pod: ${JSON.stringify(seen)}\n${topo.nodes.b.agentLog.slice(-1500)}`,
    );
    const ev = (await events()).find((e) => e.reason === 'NetpluginFloatingIPRefused')!;
    expect(ev.type).toBe('Warning');
    expect(ev.message).toContain(`floating IP ${FIP} is held by the older endpoint ${NS}/`);
    expect((await until(client.ns, (x) => x !== undefined, 'pod on B during the conflict')).tag).toBe('server');
    expect(fipRoutes('b')[0]?.dev).toBe('vxlan.netplugin');
    await delPod(young, 'usurper');
    expect((await connect(client.ns))?.tag).toBe('server');
  });

  it("agent start reconciles: a stale translation and route left on B are replaced, the holder's lost table comes back", async () => {
    await Promise.all([topo.stopAgent('b'), topo.stopAgent('c')]);
    const stale = join(topo.tmp, 'stale.nft');
    writeFileSync(
      stale,
      [
        'add table inet netplugin-floating',
        'add map inet netplugin-floating fip4 { type ipv4_addr : ipv4_addr; elements = { ' +
          FIP +
          ' : ' +
          client.ip4 +
          ' }; }',
        'add chain inet netplugin-floating prerouting { type nat hook prerouting priority -100; policy accept; }',
        'add rule inet netplugin-floating prerouting dnat ip to ip daddr map @fip4',
        '',
      ].join('\n'),
    );
    topo.exec('b', 'nft', ['-f', stale]);
    topo.exec('b', 'ip', ['route', 'replace', `${FIP}/32`, 'via', topo.nodes.a.ip4, 'proto', '80']);
    topo.exec('c', 'nft', ['delete', 'table', 'inet', 'netplugin-floating']);
    await Promise.all([
      topo.startAgent('b', ['--kubeconfig', api.kubeconfig]),
      topo.startAgent('c', ['--kubeconfig', api.kubeconfig]),
    ]);
    const tunC = (await topo.ds.get('Node', 'node-c')).spec.vxlanTunnelAddress;
    await topo.waitFor(
      () =>
        floatingTable('b') === '' &&
        fipRoutes('b')[0]?.gateway === tunC &&
        floatingTable('c').includes(`${FIP} : ${owner!.ip4}`),
      30_000,
      () =>
        `not reconciled: B table ${floatingTable('b')} B routes ${JSON.stringify(fipRoutes('b'))} C table ${floatingTable('c')}`,
    );
    expect((await until(client.ns, (x) => x?.tag === 'server', 'pod on B after the restart')).seen).toBe(client.ip4);
  });

  it('a floating IP no longer translated cuts the connections through it (conntrack), even where packets still arrive', async () => {
    const echo = topo.spawnIn(
      client.ns,
      `const s=require('net').connect(8081,'${FIP}');let n=0;s.on('connect',()=>{console.log('connected');setInterval(()=>s.write('x'),100)});` +
        `s.on('data',()=>console.log('echo '+(n++)));s.on('error',(e)=>console.log('error '+e.code));`,
    );
    const echoes = () => echo.lines.filter((l) => l.startsWith('echo')).length;
    await topo.waitFor(
      () => echoes() > 5,
      20_000,
      () => `no echoes: ${echo.lines.slice(-5).join(' ')}`,
    );
    const wep = (await topo.ds.list('WorkloadEndpoint')).items.find(
      (w) => w.spec.node === 'node-c' && w.spec.ipNATs?.length,
    );
    const { ipNATs: _n, ...spec } = wep!.spec;
    await topo.ds.update({ ...wep!, spec });
    await topo.waitFor(
      () => floatingTable('c') === '',
      30_000,
      () => `translation kept on C: ${floatingTable('c')}`,
    );
    // The router's static route still brings the client's packets to C: only the cut conntrack
    // entry stops them. The client writes every 100 ms: a 2 s silence is the connection cut
    // (the cut follows the table's replacement asynchronously, so a few echoes may come first).
    let count = echoes();
    let since = Date.now();
    await topo.waitFor(
      () => {
        if (echoes() !== count) [count, since] = [echoes(), Date.now()];
        return Date.now() - since > 2000;
      },
      15_000,
      () => `the connection still echoes: ${echoes()} echoes`,
    );
    echo.proc.kill();
  });
});
