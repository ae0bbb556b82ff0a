// The built netpluginctl against the kubernetes datastore (the fake API server
// over HTTPS with a token): resources as CRDs, and `ipam check` telling a
// deleted pod from one whose endpoint annotations are not written yet.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startFakeApiServer, writeKubeconfig, type FakeApiServer } from '../support/fake-apiserver.js';
import { openDatastore } from '../../src/datastore/index.js';
import { type Datastore } from '../../src/datastore/types.js';
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

  it('get -w streams changes from the API server watch and stops on SIGINT', async () => {
    await ds.create({ apiVersion: API_VERSION, kind: 'IPPool', metadata: { name: 'watched-0' }, spec: { cidr: '10.149.0.0/24', blockSize: 28 } });
    const w = startBuiltCtl(['get', 'ippool', 'watched-0', 'watched-1', '-w', '-o', 'jsonpath={.metadata.name} {.spec.disabled}{"\\n"}'], {
      env: { DATASTORE_TYPE: 'kubernetes', KUBECONFIG: kubeconfig },
    });
    try {
      await w.waitFor(/^watched-0 \n/);
      await ds.create({ apiVersion: API_VERSION, kind: 'IPPool', metadata: { name: 'watched-1' }, spec: { cidr: '10.150.0.0/24', blockSize: 28 } });
      // Not among the names given: never printed.
      await ds.create({ apiVersion: API_VERSION, kind: 'IPPool', metadata: { name: 'watched-2' }, spec: { cidr: '10.151.0.0/24', blockSize: 28 } });
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
});
