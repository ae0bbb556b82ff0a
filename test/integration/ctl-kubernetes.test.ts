// The built netpluginctl against the kubernetes datastore (the fake API server
// over HTTPS with a token): resources as CRDs, and `ipam check` telling a
// deleted pod from one whose endpoint annotations are not written yet.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startFakeApiServer, writeKubeconfig, type FakeApiServer } from '../support/fake-apiserver.js';
import { openDatastore } from '../../src/datastore/index.js';
import { type Datastore } from '../../src/datastore/types.js';
import { createIpam } from '../../src/ipam/index.js';
import { requireBuiltCtl, runBuiltCtl } from '../support/ctl.js';
import { workloadEndpoint } from '../support/builders.js';

const TOKEN = 'ctl-test-token';

let server: FakeApiServer;
let kubeconfig: string;
let ds: Datastore;

beforeAll(async () => {
  requireBuiltCtl();
  server = await startFakeApiServer({ tls: true, auth: { tokens: [TOKEN] } });
  kubeconfig = writeKubeconfig(server.dir, server, { token: TOKEN });
  ds = await openDatastore({ datastore_type: 'kubernetes', kubernetes: { kubeconfig }, timeoutMs: 5000 });
});

afterAll(async () => {
  await ds?.close();
  await server?.stop();
});

const ctl = (args: string[], input = '') => runBuiltCtl(args, { env: { DATASTORE_TYPE: 'kubernetes', KUBECONFIG: kubeconfig }, input });

function addPod(ns: string, name: string, node: string): void {
  server.put(`/api/v1/namespaces/${ns}`, { metadata: { name: ns } });
  server.put(`/api/v1/namespaces/${ns}/pods/${name}`, { metadata: { name }, spec: { nodeName: node, containers: [{ name: 'c', image: 'x' }] } });
}

describe('netpluginctl with the kubernetes datastore', () => {
  it('applies and reads pools as custom resources', async () => {
    const a = await ctl(['apply', '-f', '-'], 'apiVersion: netplugin.org/v3\nkind: IPPool\nmetadata: {name: k8s-pool}\nspec: {cidr: 10.124.0.0/24, blockSize: 28}\n');
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
      const [a] = await ipam.assign({ handleID: `k8s-pod-network.cid-${name}`, node: 'node-a', attrs: { namespace: 'shop', pod: name }, assignIPv4: true, assignIPv6: false });
      ips[name] = a!.ip;
    }
    // Only the running pod has its endpoint written; "starting" is mid-ADD.
    await ds.create(workloadEndpoint({ node: 'node-a', namespace: 'shop', pod: 'running', containerID: 'cid-running', ips: [ips.running!] }));
    const c = await ctl(['ipam', 'check', '--json']);
    expect(c.err).toBe('');
    const r = JSON.parse(c.out);
    expect(r.leakedHandles).toEqual([expect.objectContaining({ handle: 'k8s-pod-network.cid-deleted', ips: [ips.deleted], reason: 'pod shop/deleted no longer exists' })]);
    expect(r.summary.allocated).toBe(3);

    const who = JSON.parse((await ctl(['ipam', 'show', '--ip', ips.running!, '-o', 'json'])).out);
    expect(who).toMatchObject({ allocated: true, pod: 'running', namespace: 'shop' });
  });

  it("names a pod with malformed endpoint annotations and a malformed custom resource; describe shows them as stored", async () => {
    server.put('/api/v1/namespaces/tenant', { metadata: { name: 'tenant' } });
    server.put('/api/v1/namespaces/tenant/pods/forger', {
      metadata: { name: 'forger', annotations: { 'cni.netplugin.org/containerID': 'forged', 'cni.netplugin.org/podIPs': '10.124.9.9/32', 'cni.netplugin.org/ipNATs': '[{"internalIP":' } },
      spec: { nodeName: 'node-b', containers: [{ name: 'c', image: 'x' }] },
    });
    server.put('/apis/netplugin.org/v3/hostendpoints/broken-hep', { apiVersion: 'netplugin.org/v3', kind: 'HostEndpoint', metadata: { name: 'broken-hep' }, spec: { node: ['n1'] } });
    const wep = 'node--b-k8s-forger-eth0';
    const c = await ctl(['ipam', 'check']);
    expect(c.code).toBe(1);
    expect(c.out).toContain(`WorkloadEndpoint tenant/${wep}  pod tenant/forger (annotations cni.netplugin.org/*)`);
    expect(c.out).toContain('annotation cni.netplugin.org/ipNATs="[{\\"internalIP\\":" is not JSON');
    expect(c.out).toMatch(/HostEndpoint broken-hep {2}https:\/\/.*\/apis\/netplugin\.org\/v3\/hostendpoints\/broken-hep\n {6}spec\.node: /);
    const d = await ctl(['describe', 'workloadendpoint', wep, '-n', 'tenant']);
    expect(d.code).toBe(1);
    expect(d.out).toContain('Status:           MALFORMED');
    expect(d.out).toContain('cni.netplugin.org/ipNATs');
    // The other endpoints of the namespace still list; the malformed one is named on stderr.
    const l = await ctl(['get', 'workloadendpoints', '-A']);
    expect(l.code).toBe(0);
    expect(l.err).toContain(`warning: WorkloadEndpoint tenant/${wep} is malformed and not shown`);
    expect(l.out).toContain('running');
    server.put('/apis/netplugin.org/v3/hostendpoints/broken-hep', { apiVersion: 'netplugin.org/v3', kind: 'HostEndpoint', metadata: { name: 'broken-hep' }, spec: { node: 'n1' } });
    server.put('/api/v1/namespaces/tenant/pods/forger', { metadata: { name: 'forger' }, spec: { nodeName: 'node-b', containers: [{ name: 'c', image: 'x' }] } });
    expect((await ctl(['ipam', 'check', '--json'])).out).toContain('"invalidObjects": []');
  });
});
