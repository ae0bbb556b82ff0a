// netplugin-kube-controllers, black box: the built executable against a real
// etcd and the fake Kubernetes API server. Mirrors (create, update, delete, the
// start-up resync that removes stale ones), pod labels onto endpoints, node
// labels and node deletion, IPAM GC, automatic host endpoints, leader election
// with two replicas, and watches that break (API server, etcd) losing nothing.
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it, onTestFinished } from 'vitest';
import { startFakeApiServer, writeKubeconfig, type FakeApiServer } from '../support/fake-apiserver.js';
import { freePort, startEtcd, type EtcdServer } from '../support/etcd.js';
import { openDatastore } from '../../src/datastore/index.js';
import { API_VERSION, type Kind, type Resource } from '../../src/model/resources.js';
import type { Datastore } from '../../src/datastore/types.js';
import { DatastoreError } from '../../src/errors.js';
import { createIpam } from '../../src/ipam/index.js';
import { createPool, workloadEndpoint } from '../support/builders.js';
import { workloadEndpointName } from '../../src/model/names.js';

const root = resolve(import.meta.dirname, '../..');
const BIN = join(root, 'dist/netplugin-kube-controllers.mjs');

let etcd: EtcdServer;
let api: FakeApiServer;
let kubeconfig: string;
let ds: Datastore;
const procs = new Set<Kc>();

interface Kc {
  proc: ChildProcess;
  port: number;
  log: () => string;
  exited: Promise<void>;
}

beforeAll(async () => {
  if (!existsSync(BIN)) throw new Error(`dist/netplugin-kube-controllers.mjs is missing: run 'npm run build:ts' first`);
  etcd = await startEtcd();
  api = await startFakeApiServer();
  kubeconfig = writeKubeconfig(api.dir, api);
  ds = await openDatastore({ etcd_endpoints: etcd.endpoint, timeoutMs: 5000 });
});

afterEach(async () => {
  for (const k of [...procs]) await kill(k, 'SIGKILL');
});

afterAll(async () => {
  await ds?.close();
  await api?.stop();
  await etcd?.stop();
});

async function startKc(extra: string[] = []): Promise<Kc> {
  const port = await freePort();
  const proc = spawn(
    process.execPath,
    [
      BIN,
      '--kubeconfig',
      kubeconfig,
      '--health-addr',
      `127.0.0.1:${port}`,
      '--lease-duration',
      '3s',
      '--log-level',
      'DEBUG',
      ...extra,
    ],
    {
      env: {
        PATH: process.env.PATH ?? '/usr/bin:/bin',
        DATASTORE_TYPE: 'etcdv3',
        ETCD_ENDPOINTS: etcd.endpoint,
        POD_NAMESPACE: 'kube-system',
      },
      stdio: ['ignore', 'ignore', 'pipe'],
    },
  );
  let log = '';
  proc.stderr!.on('data', (d) => (log += d));
  const exited = new Promise<void>((r) => proc.once('exit', () => r()));
  const kc = { proc, port, log: () => log, exited };
  procs.add(kc);
  return kc;
}

async function kill(k: Kc, sig: NodeJS.Signals): Promise<void> {
  if (k.proc.exitCode === null && k.proc.signalCode === null) k.proc.kill(sig);
  await k.exited;
  procs.delete(k);
}

async function waitFor<T>(
  what: string,
  fn: () => Promise<T | undefined | false> | T | undefined | false,
  timeoutMs = 30_000,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    try {
      const v = await fn();
      if (v !== undefined && v !== false) return v as T;
    } catch (e) {
      last = e;
    }
    if (Date.now() > deadline)
      throw new Error(`timed out waiting for ${what}${last ? `: ${(last as Error).message}` : ''}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

async function http(k: Kc, path: string): Promise<{ status: number; body: string }> {
  const r = await fetch(`http://127.0.0.1:${k.port}${path}`);
  return { status: r.status, body: await r.text() };
}

async function waitLeader(k: Kc): Promise<void> {
  await waitFor(
    'the replica to lead and finish its resync',
    async () => {
      const r = await http(k, '/readyz');
      return r.status === 200 && r.body.includes('"role":"leader"');
    },
    45_000,
  );
}

async function metric(k: Kc, name: string): Promise<number> {
  const { body } = await http(k, '/metrics');
  let sum = 0;
  for (const line of body.split('\n'))
    if (line.startsWith(name) && /^[^{ ]+(\{[^}]*\})? /.test(line) && line.split(/[{ ]/)[0] === name)
      sum += Number(line.split(' ').pop());
  return sum;
}

async function tryGet<K extends Kind>(kind: K, name: string, namespace?: string): Promise<Resource<K> | undefined> {
  try {
    return await ds.get(kind, name, namespace);
  } catch (e) {
    if (DatastoreError.is(e, 'NotFound')) return undefined;
    throw e;
  }
}

async function apiDelete(path: string): Promise<void> {
  const r = await fetch(`${api.url}${path}`, { method: 'DELETE' });
  if (r.status !== 200) throw new Error(`DELETE ${path}: ${r.status} ${await r.text()}`);
}

const ns = (name: string, labels: Record<string, string> = {}) =>
  api.put(`/api/v1/namespaces/${name}`, { metadata: { name, labels } });
const knp = (namespace: string, name: string, spec: Record<string, unknown>) =>
  api.put(`/apis/networking.k8s.io/v1/namespaces/${namespace}/networkpolicies/${name}`, {
    apiVersion: 'networking.k8s.io/v1',
    kind: 'NetworkPolicy',
    metadata: { name },
    spec,
  });
const node = (name: string, labels: Record<string, string>, ip = '192.0.2.10') =>
  api.put(`/api/v1/nodes/${name}`, {
    metadata: { name, labels },
    status: {
      addresses: [
        { type: 'InternalIP', address: ip },
        { type: 'Hostname', address: name },
      ],
    },
  });
const pod = (
  namespace: string,
  name: string,
  o: { uid?: string; node?: string; labels?: Record<string, string>; ips?: string[] } = {},
) =>
  api.put(`/api/v1/namespaces/${namespace}/pods/${name}`, {
    metadata: { name, uid: o.uid ?? `uid-${name}`, labels: o.labels ?? {} },
    spec: { nodeName: o.node ?? 'n1', containers: [{ name: 'c' }] },
    status: o.ips ? { podIP: o.ips[0], podIPs: o.ips.map((ip) => ({ ip })) } : {},
  });

async function setConfig(node: Record<string, unknown>): Promise<void> {
  const spec = { controllers: { node } };
  const cur = await tryGet('KubeControllersConfiguration', 'default');
  if (cur) await ds.update({ ...cur, spec });
  else
    await ds.create({
      apiVersion: API_VERSION,
      kind: 'KubeControllersConfiguration',
      metadata: { name: 'default' },
      spec,
    });
}

async function endpoint(
  namespace: string,
  podName: string,
  node: string,
  containerID: string,
  ip: string,
): Promise<string> {
  const wep = workloadEndpoint({
    node,
    namespace,
    pod: podName,
    containerID,
    ips: [ip],
    interfaceName: `np${containerID.slice(-6)}`,
    labels: { 'netplugin.org/namespace': namespace, 'netplugin.org/orchestrator': 'k8s' },
  });
  await ds.create(wep);
  return wep.metadata.name;
}

/** Stores `value` at the etcd key of an endpoint as another writer could (no validation); returns the undo. */
function putRawEndpoint(namespace: string, name: string, value: string): () => void {
  const key = `/netplugin/resources/v3/netplugin.org/workloadendpoints/${namespace}/${name}`;
  const etcdctl = (...args: string[]) =>
    execFileSync('etcdctl', ['--endpoints', etcd.endpoint, ...args], { env: { ...process.env, ETCDCTL_API: '3' } });
  etcdctl('put', key, value);
  return () => etcdctl('del', key);
}

async function pool(name: string, cidr: string): Promise<void> {
  if (!(await tryGet('IPPool', name))) await createPool(ds, name, cidr, { blockSize: 28 });
}

function ctl(args: string[]): Promise<{ code: number; out: string; err: string }> {
  return new Promise((resolvePromise, reject) => {
    const p = spawn(process.execPath, [join(root, 'dist/netpluginctl.mjs'), ...args], {
      env: { PATH: process.env.PATH ?? '/usr/bin:/bin', ETCD_ENDPOINTS: etcd.endpoint, KUBECONFIG: kubeconfig },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    let err = '';
    p.stdout!.on('data', (d) => (out += d));
    p.stderr!.on('data', (d) => (err += d));
    p.on('error', reject);
    p.on('close', (code) => resolvePromise({ code: code ?? -1, out, err }));
  });
}

async function allocated(ip: string): Promise<boolean> {
  return (await createIpam(ds, { lock: 'none' }).whoHas(ip)) !== undefined;
}

describe('mirrors', { timeout: 120_000 }, () => {
  it('mirror NetworkPolicies, namespaces and service accounts; follow updates and deletions; resync after a restart', async () => {
    ns('shop', { team: 'a' });
    api.put('/api/v1/namespaces/shop/serviceaccounts/builder', {
      metadata: { name: 'builder', labels: { role: 'ci' } },
    });
    knp('shop', 'db', {
      podSelector: { matchLabels: { app: 'db' } },
      ingress: [{ from: [{ podSelector: { matchLabels: { app: 'web' } } }], ports: [{ port: 5432 }] }],
    });
    let kc = await startKc();
    await waitLeader(kc);

    const mirror = await waitFor('knp.default.db', () => tryGet('NetworkPolicy', 'knp.default.db', 'shop'));
    expect(mirror.spec.selector).toBe("netplugin.org/orchestrator == 'k8s' && app == 'db'");
    expect(mirror.spec.types).toEqual(['Ingress']); // the API server's defaulting
    expect(mirror.spec.ingress).toEqual([
      { action: 'Allow', protocol: 'TCP', source: { selector: "app == 'web'" }, destination: { ports: [5432] } },
    ]);
    const kns = await waitFor('kns.shop', () => tryGet('Profile', 'kns.shop'));
    expect(kns.spec.labelsToApply).toMatchObject({ 'pcns.team': 'a', 'netplugin.org/name': 'shop' });
    const ksa = await waitFor('ksa.shop.builder', () => tryGet('Profile', 'ksa.shop.builder'));
    expect(ksa.spec.labelsToApply).toEqual({ 'pcsa.role': 'ci' });

    // Updates follow.
    knp('shop', 'db', {
      podSelector: { matchLabels: { app: 'db' } },
      policyTypes: ['Ingress', 'Egress'],
      egress: [{ ports: [{ protocol: 'UDP', port: 53 }] }],
    });
    await waitFor('the updated mirror', async () =>
      (await tryGet('NetworkPolicy', 'knp.default.db', 'shop'))?.spec.types?.includes('Egress'),
    );
    ns('shop', { team: 'b' });
    await waitFor(
      'the updated namespace profile',
      async () => (await tryGet('Profile', 'kns.shop'))?.spec.labelsToApply?.['pcns.team'] === 'b',
    );
    // A mirror edited by hand is put back.
    const edited = (await tryGet('NetworkPolicy', 'knp.default.db', 'shop'))!;
    await ds.update({ ...edited, spec: { ...edited.spec, selector: 'all()' } });
    await waitFor(
      'the edited mirror restored',
      async () => (await tryGet('NetworkPolicy', 'knp.default.db', 'shop'))?.spec.selector !== 'all()',
    );

    // Deletions follow.
    await apiDelete('/api/v1/namespaces/shop/serviceaccounts/builder');
    await waitFor('ksa.shop.builder gone', async () => !(await tryGet('Profile', 'ksa.shop.builder')));

    // Down: the policy goes, a stale mirror appears, a namespace is added.
    await kill(kc, 'SIGTERM');
    await apiDelete('/apis/networking.k8s.io/v1/namespaces/shop/networkpolicies/db');
    await ds.create({
      apiVersion: API_VERSION,
      kind: 'NetworkPolicy',
      metadata: { name: 'knp.default.stale', namespace: 'default' },
      spec: { selector: 'all()' },
    });
    await ds.create({ apiVersion: API_VERSION, kind: 'Profile', metadata: { name: 'kns.gone' }, spec: {} });
    await ds.create({
      apiVersion: API_VERSION,
      kind: 'NetworkPolicy',
      metadata: { name: 'mine', namespace: 'default' },
      spec: { selector: 'all()' },
    });
    ns('later');
    const metricsPort = await freePort();
    kc = await startKc(['--metrics-addr', `127.0.0.1:${metricsPort}`]);
    await waitLeader(kc); // the SIGTERMed leader handed the lease back
    await waitFor(
      'the resync',
      async () =>
        !(await tryGet('NetworkPolicy', 'knp.default.db', 'shop')) &&
        !(await tryGet('NetworkPolicy', 'knp.default.stale', 'default')) &&
        !(await tryGet('Profile', 'kns.gone')) &&
        !!(await tryGet('Profile', 'kns.later')),
    );
    // Objects that are not mirrors are left alone.
    expect(await tryGet('NetworkPolicy', 'mine', 'default')).toBeDefined();
    expect(await tryGet('Profile', 'kns.shop')).toBeDefined();

    // Health, readiness and metrics on the one listener.
    expect((await http(kc, '/healthz')).status).toBe(200);
    expect(await metric(kc, 'netplugin_kube_controllers_objects_synced_total')).toBeGreaterThan(0);
    expect((await http(kc, '/metrics')).body).toContain('netplugin_kube_controllers_queue_depth{controller="policy"}');
    // --metrics-addr: the same metrics for Prometheus on their own listener, and no probe paths there.
    const onMetrics = (path: string) =>
      fetch(`http://127.0.0.1:${metricsPort}${path}`).then(async (r) => ({ status: r.status, body: await r.text() }));
    expect((await onMetrics('/metrics')).body).toContain('netplugin_kube_controllers_queue_depth{controller="policy"}');
    for (const p of ['/healthz', '/readyz']) expect((await onMetrics(p)).status).toBe(404);
    await kill(kc, 'SIGTERM');
    expect(kc.proc.exitCode).toBe(0);
  });

  it('copies pod label changes onto the endpoint, keeping netplugin.org/* labels', async () => {
    ns('app');
    pod('app', 'web-0', { labels: { app: 'web', v: '1' } });
    const wepName = 'n1-k8s-web--0-eth0';
    await ds.create({
      apiVersion: API_VERSION,
      kind: 'WorkloadEndpoint',
      metadata: {
        name: wepName,
        namespace: 'app',
        labels: { app: 'web', v: '1', 'netplugin.org/namespace': 'app', 'netplugin.org/orchestrator': 'k8s' },
      },
      spec: {
        orchestrator: 'k8s',
        node: 'n1',
        containerID: 'c1',
        pod: 'web-0',
        endpoint: 'eth0',
        interfaceName: 'npa1',
        ipNetworks: ['10.99.0.1/32'],
      },
    });
    const kc = await startKc(['--controllers', 'workloadendpoint']);
    await waitLeader(kc);
    // The pod tries to claim another namespace through a label: ours wins.
    pod('app', 'web-0', { labels: { app: 'web', v: '2', 'netplugin.org/namespace': 'kube-system' } });
    const wep = await waitFor('labels on the endpoint', async () => {
      const w = await tryGet('WorkloadEndpoint', wepName, 'app');
      return w?.metadata.labels?.v === '2' ? w : undefined;
    });
    expect(wep.metadata.labels).toEqual({
      app: 'web',
      v: '2',
      'netplugin.org/namespace': 'app',
      'netplugin.org/orchestrator': 'k8s',
    });
    await waitFor('the start logged', () => kc.log().includes('started the workloadendpoint controller'));
    expect(kc.log()).not.toContain('started the policy controller');
  });
});

describe('node controller', { timeout: 120_000 }, () => {
  it('keeps node labels on the datastore Node; node deletion releases its addresses, blocks and Node', async () => {
    await pool('nodes', '10.91.0.0/24');
    node('n2', { zone: 'a' });
    const kc = await startKc(['--controllers', 'node']);
    await waitLeader(kc);
    await waitFor('Node n2 with labels', async () => (await tryGet('Node', 'n2'))?.metadata.labels?.zone === 'a');
    node('n2', { zone: 'b', disk: 'ssd' });
    await waitFor('Node n2 relabelled', async () => (await tryGet('Node', 'n2'))?.metadata.labels?.disk === 'ssd');

    // Addresses of n2: a pod's, and one without pod attributes (a tunnel address).
    const ipam = createIpam(ds, { lock: 'none' });
    const [podAddr] = await ipam.assign({
      handleID: 'k8s-pod-network.aaa',
      node: 'n2',
      attrs: { namespace: 'default', pod: 'p1', containerID: 'aaa' },
      assignIPv4: true,
      assignIPv6: false,
    });
    const [tunnel] = await ipam.assign({
      handleID: 'vxlan-tunnel-addr-n2',
      node: 'n2',
      attrs: { type: 'vxlanTunnelAddress' },
      assignIPv4: true,
      assignIPv6: false,
    });
    // A pod on another node keeps its address.
    node('n3', {});
    const [other] = await ipam.assign({
      handleID: 'k8s-pod-network.bbb',
      node: 'n3',
      attrs: { namespace: 'default', pod: 'p2', containerID: 'bbb' },
      assignIPv4: true,
      assignIPv6: false,
    });
    pod('default', 'p1', { node: 'n2' });
    pod('default', 'p2', { node: 'n3' });
    const wepN2 = await endpoint('default', 'p1', 'n2', 'aaa', podAddr!.ip);
    const wepN3 = await endpoint('default', 'p2', 'n3', 'bbb', other!.ip);
    expect((await ds.list('BlockAffinity')).items.some((a) => a.spec.node === 'n2')).toBe(true);

    await apiDelete('/api/v1/nodes/n2');
    await waitFor('Node n2 gone', async () => !(await tryGet('Node', 'n2')));
    expect(await allocated(podAddr!.ip)).toBe(false);
    expect(await allocated(tunnel!.ip)).toBe(false);
    expect(await allocated(other!.ip)).toBe(true);
    expect((await ds.list('BlockAffinity')).items.filter((a) => a.spec.node === 'n2')).toEqual([]);
    expect((await ds.list('IPAMBlock')).items.filter((b) => b.spec.affinity === 'host:n2')).toEqual([]);
    expect((await ipam.listHandles()).filter((h) => h.handleID === 'k8s-pod-network.aaa')).toEqual([]);
    expect(await tryGet('WorkloadEndpoint', wepN2, 'default')).toBeUndefined();
    expect(await tryGet('WorkloadEndpoint', wepN3, 'default')).toBeDefined();
    expect(await metric(kc, 'netplugin_kube_controllers_ipam_addresses_released_total')).toBe(2);
    await waitFor('the release logged', () => kc.log().includes(podAddr!.ip));
  });

  it("GC releases a leaked address only after the grace period, never a live pod's or one without Kubernetes attributes", async () => {
    await pool('gc', '10.92.0.0/24');
    await setConfig({ leakGracePeriod: '4s', reconcilerPeriod: '1s' });
    ns('gc');
    node('g1', {});
    const ipam = createIpam(ds, { lock: 'none' });
    const assign = async (handle: string, attrs: Record<string, string>) =>
      (
        await ipam.assign({
          handleID: handle,
          node: 'g1',
          attrs: { containerID: handle, ...attrs },
          assignIPv4: true,
          assignIPv6: false,
        })
      )[0]!.ip;
    const live = await assign('net.live', { namespace: 'gc', pod: 'live', podUID: 'uid-live' });
    pod('gc', 'live', { node: 'g1', uid: 'uid-live', ips: [live] });
    const plain = await assign('net.plain', {}); // podman / plain CNI
    const recreated = await assign('net.recreated', { namespace: 'gc', pod: 'again', podUID: 'uid-old' });
    pod('gc', 'again', { node: 'g1', uid: 'uid-new' });
    const t0 = Date.now();
    const gone = await assign('net.gone', { namespace: 'gc', pod: 'gone' });
    // The plugin's endpoint of the vanished pod stays on etcd (no DEL ran); the live pod's stays too.
    const goneWep = await endpoint('gc', 'gone', 'g1', 'net.gone', gone);
    const liveWep = await endpoint('gc', 'live', 'g1', 'net.live', live);
    // An endpoint of a vanished pod whose address is already free goes too.
    const orphanWep = await endpoint('gc', 'orphan', 'g1', 'net.orphan', '10.92.0.250');
    // A malformed endpoint (a value another writer broke) is skipped: it must not stop the scans.
    const unbreak = putRawEndpoint(
      'gc',
      workloadEndpointName('g1', 'k8s', 'broken', 'eth0'),
      '{"apiVersion": "netplugin.org/v3", "kind": "WorkloadEndpoint", "spec": ',
    );
    onTestFinished(unbreak);

    const kc = await startKc(['--controllers', 'node']);
    await waitLeader(kc);
    await waitFor(
      'the leaked addresses released',
      async () => !(await allocated(gone)) && !(await allocated(recreated)),
    );
    // Leaked since t0 at the earliest: the grace period bounds the release from below.
    expect(Date.now() - t0).toBeGreaterThanOrEqual(4000);
    const released = () =>
      kc
        .log()
        .split('\n')
        .filter((l) => l.includes('released a leaked address'))
        .join('\n');
    await waitFor('both releases logged', () => released().includes(gone) && released().includes(recreated));
    expect(released()).toContain('was re-created');
    // Two more complete scans later, the others are still held.
    const scans = await metric(kc, 'netplugin_kube_controllers_ipam_gc_scans_total');
    await waitFor(
      'two more GC scans',
      async () => (await metric(kc, 'netplugin_kube_controllers_ipam_gc_scans_total')) >= scans + 2,
    );
    expect(await allocated(live)).toBe(true);
    expect(await allocated(plain)).toBe(true);
    expect(await tryGet('WorkloadEndpoint', goneWep, 'gc')).toBeUndefined();
    expect(await tryGet('WorkloadEndpoint', liveWep, 'gc')).toBeDefined();
    expect(await tryGet('WorkloadEndpoint', orphanWep, 'gc')).toBeUndefined();
    expect(await metric(kc, 'netplugin_kube_controllers_ipam_addresses_released_total')).toBe(2);
    // The state gauges: the two held addresses of the pool, its one block on g1, nothing left leaked.
    const gauge = (body: string, series: string) =>
      Number(new RegExp(`^${series.replace(/[{}]/g, '\\$&')} (\\S+)$`, 'm').exec(body)?.[1]);
    await waitFor('the pool gauges follow the releases', async () => {
      const body = (await http(kc, '/metrics')).body;
      return gauge(body, 'netplugin_ipam_pool_addresses_in_use{pool="gc"}') === 2 && body;
    });
    const body = (await http(kc, '/metrics')).body;
    expect(gauge(body, 'netplugin_ipam_pool_capacity_addresses{pool="gc"}')).toBe(256);
    expect(gauge(body, 'netplugin_ipam_blocks{node="g1",pool="gc"}')).toBe(1);
    for (const state of ['in_grace', 'past_grace']) {
      expect(gauge(body, `netplugin_ipam_gc_candidate_addresses{pool="gc",state="${state}"}`)).toBe(0);
    }
    // Counted on /metrics and logged, never an error that stops a controller.
    expect((await http(kc, '/metrics')).body).toMatch(
      /^netplugin_datastore_invalid_objects\{kind="WorkloadEndpoint"\} 1$/m,
    );
    expect(kc.log()).toMatch(/malformed object.*WorkloadEndpoint gc\/g1-k8s-broken-eth0/);
  });

  it('GC reacts to a pod deletion: its leaked address goes once leakGracePeriod has passed since, not a period later', async () => {
    await pool('gcev', '10.93.0.0/24');
    // A period far longer than the test: only the deletion event can release in time.
    await setConfig({ leakGracePeriod: '5s', reconcilerPeriod: '10m' });
    ns('gcev');
    node('e1', {});
    const ipam = createIpam(ds, { lock: 'none' });
    const ip = (
      await ipam.assign({
        handleID: 'net.ev',
        node: 'e1',
        attrs: { containerID: 'ev', namespace: 'gcev', pod: 'ev', podUID: 'uid-ev' },
        assignIPv4: true,
        assignIPv6: false,
      })
    )[0]!.ip;
    pod('gcev', 'ev', { node: 'e1', uid: 'uid-ev', ips: [ip] });
    const kc = await startKc(['--controllers', 'node']);
    await waitLeader(kc);
    // The start-up scan saw a live pod.
    await waitFor(
      'the start-up GC scan',
      async () => (await metric(kc, 'netplugin_kube_controllers_ipam_gc_scans_total')) >= 1,
    );
    expect(await allocated(ip)).toBe(true);

    // The pod goes without a DEL (the node's runtime never tore the sandbox down).
    const t0 = Date.now();
    await apiDelete('/api/v1/namespaces/gcev/pods/ev');
    // Held while the grace period runs: every read that answered before t0 + 5 s saw it allocated.
    for (;;) {
      const held = await allocated(ip);
      if (Date.now() >= t0 + 4500) break;
      expect(held, `released ${Date.now() - t0} ms after the pod's deletion, inside the 5 s grace period`).toBe(true);
      await new Promise((r) => setTimeout(r, 250));
    }
    await waitFor(
      'the leaked address released after the pod deletion (the period is 10 minutes)',
      async () => !(await allocated(ip)),
    );
    expect(kc.log()).toMatch(/released a leaked address.*pod gcev\/ev does not exist/);
  });

  it('automatic host endpoints follow autoCreate and node changes, without a restart', async () => {
    await setConfig({ hostEndpoint: { autoCreate: 'Disabled' } });
    node('h1', { rack: 'r1' }, '192.0.2.21');
    const kc = await startKc(['--controllers', 'node']);
    await waitLeader(kc);
    await waitFor('Node h1', () => tryGet('Node', 'h1'));
    expect(await tryGet('HostEndpoint', 'h1-auto-hep')).toBeUndefined();

    await setConfig({ hostEndpoint: { autoCreate: 'Enabled' } });
    const hep = await waitFor('h1-auto-hep', () => tryGet('HostEndpoint', 'h1-auto-hep'));
    expect(hep.spec).toEqual({
      node: 'h1',
      interfaceName: '*',
      expectedIPs: ['192.0.2.21'],
      profiles: ['netplugin-default-allow'],
    });
    expect(hep.metadata.labels).toEqual({ rack: 'r1', 'netplugin.org/created-by': 'netplugin-kube-controllers' });
    expect((await tryGet('Profile', 'netplugin-default-allow'))?.spec).toEqual({
      ingress: [{ action: 'Allow' }],
      egress: [{ action: 'Allow' }],
    });

    node('h1', { rack: 'r2' }, '192.0.2.22');
    await waitFor('the host endpoint following the node', async () => {
      const h = await tryGet('HostEndpoint', 'h1-auto-hep');
      return h?.metadata.labels?.rack === 'r2' && h.spec.expectedIPs?.[0] === '192.0.2.22';
    });
    await apiDelete('/api/v1/nodes/h1');
    await waitFor(
      'the host endpoint of a deleted node removed',
      async () => !(await tryGet('HostEndpoint', 'h1-auto-hep')),
    );

    node('h2', {});
    await waitFor('h2-auto-hep', () => tryGet('HostEndpoint', 'h2-auto-hep'));
    await setConfig({ hostEndpoint: { autoCreate: 'Disabled' } });
    await waitFor(
      'auto host endpoints removed when Disabled',
      async () => !(await tryGet('HostEndpoint', 'h2-auto-hep')),
    );
  });
});

describe('netpluginctl', { timeout: 120_000 }, () => {
  it('shows mirrors; ipam check tells what GC does; ipam release refuses an address whose pod exists', async () => {
    ns('cli');
    knp('cli', 'allow-dns', {
      podSelector: {},
      policyTypes: ['Egress'],
      egress: [{ ports: [{ protocol: 'UDP', port: 53 }] }],
    });
    await setConfig({ leakGracePeriod: '1h' });
    const kc = await startKc(['--controllers', 'policy']);
    await waitLeader(kc);
    await waitFor('knp.default.allow-dns', () => tryGet('NetworkPolicy', 'knp.default.allow-dns', 'cli'));
    const get = await ctl(['get', 'networkpolicy', '-A']);
    expect(get.err).toBe('');
    expect(get.out).toContain('knp.default.allow-dns');

    await pool('cli', '10.93.0.0/24');
    const ipam = createIpam(ds, { lock: 'none' });
    const one = async (handle: string, attrs: Record<string, string>) =>
      (await ipam.assign({ handleID: handle, node: 'c1', attrs, assignIPv4: true, assignIPv6: false }))[0]!.ip;
    const vanished = await one('net.cvanished', { namespace: 'cli', pod: 'vanished', containerID: 'cvanished' });
    const plain = await one('net.cplain', { containerID: 'cplain' });
    pod('cli', 'alive', { node: 'c1' });
    const alive = await one('net.calive', { namespace: 'cli', pod: 'alive', containerID: 'calive' });

    const check = await ctl(['ipam', 'check']);
    // Leaked addresses are a finding: exit 1 (docs/netpluginctl.md), so cron jobs and alerts see it.
    expect(check.code).toBe(1);
    const lines = check.out.split('\n');
    const lineAfter = (ip: string) => lines[lines.findIndex((l) => l.includes(ip)) + 1] ?? '';
    expect(lineAfter(vanished)).toMatch(
      /GC: allocated \d+s ago; released once it has looked leaked for leakGracePeriod 1h/,
    );
    expect(lineAfter(plain)).toContain('GC: no Kubernetes attributes');
    expect(check.out).not.toContain(alive); // its pod exists (asked through KUBECONFIG)

    // A malformed object is a finding of its own, named with where it is and why; describe shows it as stored.
    const broken = workloadEndpointName('c1', 'k8s', 'alive', 'eth0');
    const unbreak = putRawEndpoint(
      'cli',
      broken,
      JSON.stringify({
        apiVersion: API_VERSION,
        kind: 'WorkloadEndpoint',
        metadata: { name: broken, namespace: 'cli' },
        spec: {
          orchestrator: 'k8s',
          node: 'c1',
          containerID: 'calive',
          pod: 'alive',
          endpoint: 'eth0',
          ipNetworks: ['10.93.0.300/32'],
          interfaceName: 'npx',
        },
      }),
    );
    try {
      const again = await ctl(['ipam', 'check']);
      expect(again.code).toBe(1);
      expect(again.out).toContain(
        `WorkloadEndpoint cli/${broken}  etcd key /netplugin/resources/v3/netplugin.org/workloadendpoints/cli/${broken}`,
      );
      expect(again.out).toMatch(/spec\.ipNetworks\.0: not an IPv4 or IPv6 address/);
      expect(again.out).not.toContain(alive);
      const json = JSON.parse((await ctl(['ipam', 'check', '--json'])).out) as { invalidObjects: unknown[] };
      expect(json.invalidObjects).toEqual([
        expect.objectContaining({ kind: 'WorkloadEndpoint', name: broken, namespace: 'cli' }),
      ]);
      const described = await ctl(['describe', 'workloadendpoint', broken, '-n', 'cli']);
      expect(described.code).toBe(1);
      expect(described.out).toContain('Status:           MALFORMED');
      expect(described.out).toContain('10.93.0.300/32');
      const listed = await ctl(['get', 'workloadendpoints', '-n', 'cli']);
      expect(listed.err).toContain(`warning: WorkloadEndpoint cli/${broken} is malformed and not shown`);
      const got = await ctl(['get', 'workloadendpoint', broken, '-n', 'cli']);
      expect(got.code).not.toBe(0);
      expect(got.err).toContain(`WorkloadEndpoint cli/${broken} is malformed`);
    } finally {
      unbreak();
    }

    const refused = await ctl(['ipam', 'release', '--ip', alive]);
    expect(refused.code).toBe(1);
    expect(refused.err).toContain(`${alive} belongs to pod cli/alive, which still exists`);
    expect(await allocated(alive)).toBe(true);
    const forced = await ctl(['ipam', 'release', '--ip', alive, '--force']);
    expect(forced.code).toBe(0);
    expect(await allocated(alive)).toBe(false);
    expect((await ctl(['ipam', 'release', '--ip', vanished])).code).toBe(0);
  });
});

describe('availability', { timeout: 120_000 }, () => {
  it('two replicas: only the leader writes; the standby takes over after SIGKILL of the leader', async () => {
    const a = await startKc(['--controllers', 'profile']);
    await waitLeader(a);
    const b = await startKc(['--controllers', 'profile']);
    await waitFor('the second replica to report standby', async () =>
      (await http(b, '/readyz')).body.includes('"role":"standby"'),
    );
    ns('ha-1');
    await waitFor('kns.ha-1 from the leader', () => tryGet('Profile', 'kns.ha-1'));
    expect(await metric(b, 'netplugin_kube_controllers_objects_synced_total')).toBe(0);
    expect(b.log()).not.toContain('created Profile');
    expect(await metric(b, 'netplugin_kube_controllers_leader')).toBe(0);

    await kill(a, 'SIGKILL');
    const killedAt = Date.now();
    await waitLeader(b);
    // Lease 3 s, judged from when b last saw it change (about 3 s; the bound leaves room for a loaded machine).
    expect(Date.now() - killedAt).toBeLessThan(30_000);
    ns('ha-2');
    await waitFor('kns.ha-2 from the new leader', () => tryGet('Profile', 'kns.ha-2'));
    // The log line follows the write; stderr may arrive a moment later.
    await waitFor('the new leader logging the write', () => b.log().includes('created Profile kns.ha-2'));
  });

  it('loses no event when the API server drops its watches (with compaction) or etcd restarts', async () => {
    const kc = await startKc(['--controllers', 'policy']);
    await waitLeader(kc);
    knp('default', 'w1', { podSelector: {} });
    await waitFor('knp.default.w1', () => tryGet('NetworkPolicy', 'knp.default.w1', 'default'));

    // API server "restart": every watch ends and the old revisions are gone (410 on resume).
    api.compact();
    api.dropWatches();
    await apiDelete('/apis/networking.k8s.io/v1/namespaces/default/networkpolicies/w1');
    knp('default', 'w2', { podSelector: {} });
    await waitFor(
      'the re-list converging',
      async () =>
        !(await tryGet('NetworkPolicy', 'knp.default.w1', 'default')) &&
        !!(await tryGet('NetworkPolicy', 'knp.default.w2', 'default')),
    );

    // etcd down: changes meanwhile are written once it is back.
    await etcd.pause();
    knp('default', 'w3', { podSelector: {} });
    await apiDelete('/apis/networking.k8s.io/v1/namespaces/default/networkpolicies/w2');
    await new Promise((r) => setTimeout(r, 1500));
    await etcd.start();
    await waitFor(
      'convergence after the etcd restart',
      async () =>
        !!(await tryGet('NetworkPolicy', 'knp.default.w3', 'default')) &&
        !(await tryGet('NetworkPolicy', 'knp.default.w2', 'default')),
      45_000,
    );
    expect(kc.proc.exitCode).toBeNull();
    expect((await http(kc, '/healthz')).status).toBe(200);
  });

  it('a leader that cannot renew its lease (API server hung) stops and exits within the renew deadline', async () => {
    const kc = await startKc(['--controllers', 'policy']);
    await waitLeader(kc);
    api.stall(true);
    const stalledAt = Date.now();
    try {
      await Promise.race([
        kc.exited,
        new Promise((_, reject) =>
          setTimeout(() => reject(new Error('the leader kept running with a hung API server')), 30_000),
        ),
      ]);
    } finally {
      api.stall(false);
    }
    procs.delete(kc);
    expect(kc.proc.exitCode).toBe(1);
    expect(kc.log()).toContain('lost the lease; stopping all writes');
    // Renew deadline 2 s with a 3 s lease: gone well before another replica could take over.
    expect(Date.now() - stalledAt).toBeLessThan(20_000);
  });

  it('--log-format json logs one JSON object per line; a bad format is refused', async () => {
    const kc = await startKc(['--log-format', 'json']);
    await waitLeader(kc);
    await kill(kc, 'SIGTERM');
    const lines = kc.log().split('\n').filter(Boolean);
    expect(lines.length).toBeGreaterThan(0);
    for (const l of lines)
      expect(JSON.parse(l)).toMatchObject({
        level: expect.any(String),
        msg: expect.any(String),
        component: 'netplugin-kube-controllers',
      });
    const bad = await startKc(['--log-format', 'xml']);
    await bad.exited;
    expect(bad.proc.exitCode).toBe(2);
    expect(bad.log()).toContain("--log-format 'xml' is not one of text, json");
    procs.delete(bad);
  });

  it('rejects a bad controller list with a clear error', async () => {
    const kc = await startKc(['--controllers', 'policy,nodes']);
    await kc.exited;
    expect(kc.proc.exitCode).toBe(2);
    expect(kc.log()).toContain('unknown controller nodes');
    procs.delete(kc);
  });
});
