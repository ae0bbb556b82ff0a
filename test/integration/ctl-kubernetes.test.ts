// The built netpluginctl against the kubernetes datastore (the fake API server
// over HTTPS with a token): resources as CRDs, `ipam check` telling a
// deleted pod from one whose endpoint annotations are not written yet, get -w,
// --as impersonation, and the API reached through a CONNECT proxy.
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startConnectProxy } from '../support/connect-proxy.js';
import { startFakeApiServer, writeKubeconfig, type FakeApiServer } from '../support/fake-apiserver.js';
import { openDatastore } from '../../src/datastore/index.js';
import type { Datastore } from '../../src/datastore/types.js';
import { createIpam } from '../../src/ipam/index.js';
import { requireBuiltCtl, runBuiltCtl, startBuiltCtl } from '../support/ctl.js';
import { API_VERSION } from '../../src/model/resources.js';
import { workloadEndpoint } from '../support/builders.js';

const TOKEN = 'ctl-test-token';

let server: FakeApiServer;
let kubeconfig: string;
let ds: Datastore;

beforeAll(async () => {
  requireBuiltCtl();
  server = await startFakeApiServer({
    tls: true,
    auth: { tokens: [TOKEN] },
    impersonation: { tokens: [TOKEN], readOnlyUsers: ['viewer'] },
  });
  kubeconfig = writeKubeconfig(server.dir, server, { token: TOKEN });
  ds = await openDatastore({ datastore_type: 'kubernetes', kubernetes: { kubeconfig }, timeoutMs: 5000 });
});

afterAll(async () => {
  await ds?.close();
  await server?.stop();
});

const ctl = (args: string[], input = '') =>
  runBuiltCtl(args, { env: { DATASTORE_TYPE: 'kubernetes', KUBECONFIG: kubeconfig }, input });

function addPod(ns: string, name: string, node: string): void {
  server.put(`/api/v1/namespaces/${ns}`, { metadata: { name: ns } });
  server.put(`/api/v1/namespaces/${ns}/pods/${name}`, {
    metadata: { name },
    spec: { nodeName: node, containers: [{ name: 'c', image: 'x' }] },
  });
}

describe('netpluginctl with the kubernetes datastore', () => {
  it('applies and reads pools as custom resources', async () => {
    const a = await ctl(
      ['apply', '-f', '-'],
      'apiVersion: netplugin.org/v3\nkind: IPPool\nmetadata: {name: k8s-pool}\nspec: {cidr: 10.124.0.0/24, ' +
        'blockSize: 28}\n',
    );
    expect(a.err).toBe('');
    expect(a.out).toBe('ippool/k8s-pool created\n');
    const g = JSON.parse((await ctl(['get', 'pool', 'k8s-pool', '-o', 'json'])).out);
    expect(g.spec).toMatchObject({ cidr: '10.124.0.0/24', blockSize: 28 });
  });

  it('ipam check reports only the handle whose pod is gone', async () => {
    const ipam = createIpam(ds, { lock: 'none' });
    const ips: Record<string, string> = {};
    for (const name of ['running', 'starting', 'deleted']) {
      if (name !== 'deleted') addPod('shop', name, 'node-a');
      const [a] = await ipam.assign({
        handleID: `k8s-pod-network.cid-${name}`,
        node: 'node-a',
        attrs: { namespace: 'shop', pod: name },
        assignIPv4: true,
        assignIPv6: false,
      });
      ips[name] = a!.ip;
    }
    // Only the running pod has its endpoint written; "starting" is mid-ADD.
    await ds.create(
      workloadEndpoint({
        node: 'node-a',
        namespace: 'shop',
        pod: 'running',
        containerID: 'cid-running',
        ips: [ips.running!],
      }),
    );
    const c = await ctl(['ipam', 'check', '--json']);
    expect(c.err).toBe('');
    const r = JSON.parse(c.out);
    expect(r.leakedHandles).toEqual([
      expect.objectContaining({
        handle: 'k8s-pod-network.cid-deleted',
        ips: [ips.deleted],
        reason: 'pod shop/deleted no longer exists',
      }),
    ]);
    expect(r.summary.allocated).toBe(3);

    const who = JSON.parse((await ctl(['ipam', 'show', '--ip', ips.running!, '-o', 'json'])).out);
    expect(who).toMatchObject({ allocated: true, pod: 'running', namespace: 'shop' });
  });

  it('names a pod with malformed endpoint annotations and a malformed custom resource; describe shows them as stored', async () => {
    server.put('/api/v1/namespaces/tenant', { metadata: { name: 'tenant' } });
    server.put('/api/v1/namespaces/tenant/pods/forger', {
      metadata: {
        name: 'forger',
        annotations: {
          'cni.netplugin.org/containerID': 'forged',
          'cni.netplugin.org/podIPs': '10.124.9.9/32',
          'cni.netplugin.org/ipNATs': '[{"internalIP":',
        },
      },
      spec: { nodeName: 'node-b', containers: [{ name: 'c', image: 'x' }] },
    });
    server.put('/apis/netplugin.org/v3/hostendpoints/broken-hep', {
      apiVersion: 'netplugin.org/v3',
      kind: 'HostEndpoint',
      metadata: { name: 'broken-hep' },
      spec: { node: ['n1'] },
    });
    const wep = 'node--b-k8s-forger-eth0';
    const c = await ctl(['ipam', 'check']);
    expect(c.code).toBe(1);
    expect(c.out).toContain(`WorkloadEndpoint tenant/${wep}  pod tenant/forger (annotations cni.netplugin.org/*)`);
    expect(c.out).toContain('annotation cni.netplugin.org/ipNATs="[{\\"internalIP\\":" is not JSON');
    expect(c.out).toMatch(
      /HostEndpoint broken-hep {2}https:\/\/.*\/apis\/netplugin\.org\/v3\/hostendpoints\/broken-hep\n {6}spec\.node: /,
    );
    const d = await ctl(['describe', 'workloadendpoint', wep, '-n', 'tenant']);
    expect(d.code).toBe(1);
    expect(d.out).toContain('Status:           MALFORMED');
    expect(d.out).toContain('cni.netplugin.org/ipNATs');
    // The other endpoints of the namespace still list; the malformed one is named on stderr.
    const l = await ctl(['get', 'workloadendpoints', '-A']);
    expect(l.code).toBe(0);
    expect(l.err).toContain(`warning: WorkloadEndpoint tenant/${wep} is malformed and not shown`);
    expect(l.out).toContain('running');
    server.put('/apis/netplugin.org/v3/hostendpoints/broken-hep', {
      apiVersion: 'netplugin.org/v3',
      kind: 'HostEndpoint',
      metadata: { name: 'broken-hep' },
      spec: { node: 'n1' },
    });
    server.put('/api/v1/namespaces/tenant/pods/forger', {
      metadata: { name: 'forger' },
      spec: { nodeName: 'node-b', containers: [{ name: 'c', image: 'x' }] },
    });
    expect((await ctl(['ipam', 'check', '--json'])).out).toContain('"invalidObjects": []');
  });

  it('get -w streams changes from the API server watch and stops on SIGINT', async () => {
    await ds.create({
      apiVersion: API_VERSION,
      kind: 'IPPool',
      metadata: { name: 'watched-0' },
      spec: { cidr: '10.149.0.0/24', blockSize: 28 },
    });
    const w = startBuiltCtl(
      ['get', 'ippool', 'watched-0', 'watched-1', '-w', '-o', 'jsonpath={.metadata.name} {.spec.disabled}{"\\n"}'],
      {
        env: { DATASTORE_TYPE: 'kubernetes', KUBECONFIG: kubeconfig },
      },
    );
    try {
      await w.waitFor(/^watched-0 \n/);
      await ds.create({
        apiVersion: API_VERSION,
        kind: 'IPPool',
        metadata: { name: 'watched-1' },
        spec: { cidr: '10.150.0.0/24', blockSize: 28 },
      });
      // Not among the names given: never printed.
      await ds.create({
        apiVersion: API_VERSION,
        kind: 'IPPool',
        metadata: { name: 'watched-2' },
        spec: { cidr: '10.151.0.0/24', blockSize: 28 },
      });
      const p0 = await ds.get('IPPool', 'watched-0');
      await ds.update({ ...p0, spec: { ...p0.spec, disabled: true } });
      await w.waitFor(/watched-0 true\n/);
      const r = await w.interrupt();
      expect(r.code).toBe(0);
      expect(r.out).toBe('watched-0 \nwatched-1 \nwatched-0 true\n');
    } finally {
      w.kill();
      for (const n of ['watched-0', 'watched-1', 'watched-2']) await ds.delete('IPPool', n).catch(() => undefined);
    }
  });

  it('--as and --as-group impersonate a user: sent on every request, refused writes name the user', async () => {
    const before = server.impersonations().length;
    const g = await ctl(['--as', 'viewer', 'get', 'ippools', '-o', 'name']);
    expect(g.err).toBe('');
    expect(g.code).toBe(0);
    const seen = server.impersonations().slice(before);
    expect(seen.length).toBeGreaterThan(0);
    expect(seen.every((i) => i.user === 'viewer')).toBe(true);
    const w = await ctl(
      ['apply', '--as=viewer', '-f', '-'],
      'apiVersion: netplugin.org/v3\nkind: IPPool\nmetadata: {name: as-pool}\nspec: {cidr: 10.170.0.0/24}\n',
    );
    expect(w.code).toBe(1);
    expect(w.err).toContain('User "viewer" cannot create resource "ippools"');
    const grp = await ctl(['get', 'ippools', '--as', 'admin', '--as-group', 'ops', '--as-group', 'devs']);
    expect(grp.code).toBe(0);
    expect(server.impersonations().at(-1)).toMatchObject({ user: 'admin', groups: ['ops', 'devs'] });
    const alone = await ctl(['get', 'ippools', '--as-group', 'ops']);
    expect(alone.err).toContain('--as-group needs --as USER');
    const etcd = await runBuiltCtl(['get', 'ippools', '--as', 'viewer'], {
      env: { ETCD_ENDPOINTS: 'http://127.0.0.1:1' },
    });
    expect(etcd.err).toContain('need the kubernetes datastore');
  });

  it("reaches the API through the kubeconfig's proxy-url, and through HTTPS_PROXY unless NO_PROXY names the host", async () => {
    const proxy = await startConnectProxy({ hosts: { 'kube-api.invalid': '127.0.0.1' } });
    try {
      const kc = JSON.parse(readFileSync(kubeconfig, 'utf8'));
      const port = new URL(server.url).port;
      // proxy-url: used for every server, loopback too (client-go's rule for an explicit proxy).
      const viaUrl = join(server.dir, 'kubeconfig-proxy-url');
      kc.clusters[0].cluster['proxy-url'] = proxy.url;
      writeFileSync(viaUrl, JSON.stringify(kc));
      const a = await runBuiltCtl(['get', 'ippools', '-o', 'name'], {
        env: { DATASTORE_TYPE: 'kubernetes', KUBECONFIG: viaUrl },
      });
      expect(a.err).toBe('');
      expect(proxy.targets).toContain(`127.0.0.1:${port}`);
      // HTTPS_PROXY: a host name only the proxy resolves; the certificate names localhost.
      delete kc.clusters[0].cluster['proxy-url'];
      kc.clusters[0].cluster.server = `https://kube-api.invalid:${port}`;
      kc.clusters[0].cluster['tls-server-name'] = 'localhost';
      const viaEnv = join(server.dir, 'kubeconfig-proxy-env');
      writeFileSync(viaEnv, JSON.stringify(kc));
      proxy.targets.length = 0;
      const b = await runBuiltCtl(['get', 'ippools', '-o', 'name'], {
        env: { DATASTORE_TYPE: 'kubernetes', KUBECONFIG: viaEnv, HTTPS_PROXY: proxy.url },
      });
      expect(b.err).toBe('');
      expect(proxy.targets).toEqual(expect.arrayContaining([`kube-api.invalid:${port}`]));
      // NO_PROXY: a direct connection, which cannot resolve the name; the proxy sees nothing.
      proxy.targets.length = 0;
      const c = await runBuiltCtl(['get', 'ippools'], {
        env: {
          DATASTORE_TYPE: 'kubernetes',
          KUBECONFIG: viaEnv,
          HTTPS_PROXY: proxy.url,
          NO_PROXY: 'example.com,.invalid',
        },
      });
      expect(c.code).toBe(1);
      expect(c.err).toMatch(/does not resolve|unreachable/);
      expect(proxy.targets).toEqual([]);
      // A proxy that refuses: the error names it.
      const d = await runBuiltCtl(['get', 'ippools'], {
        env: { DATASTORE_TYPE: 'kubernetes', KUBECONFIG: viaEnv, HTTPS_PROXY: 'socks5://127.0.0.1:1' },
      });
      expect(d.err).toContain('only http:// proxies (HTTP CONNECT) are supported');
    } finally {
      await proxy.stop();
    }
  });
});
