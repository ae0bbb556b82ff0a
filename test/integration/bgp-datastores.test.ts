// The BGP kinds in both datastores: a real etcd and the fake API server serving
// the generated CRDs (so the Kubernetes datastore maps them to bgpconfigurations
// and bgppeers), create/get/list/update/delete and watch.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startEtcd, type EtcdServer } from '../support/etcd.js';
import { startFakeApiServer, writeKubeconfig, type FakeApiServer } from '../support/fake-apiserver.js';
import { openDatastore } from '../../src/datastore/index.js';
import type { Datastore } from '../../src/datastore/types.js';
import { API_VERSION, type Resource } from '../../src/model/resources.js';

let etcd: EtcdServer;
let server: FakeApiServer;
const stores: Record<string, Datastore> = {};

beforeAll(async () => {
  etcd = await startEtcd();
  server = await startFakeApiServer({});
  stores.etcd = await openDatastore({ datastore_type: 'etcdv3', etcd_endpoints: etcd.endpoint, timeoutMs: 10_000 });
  const kubeconfig = writeKubeconfig(server.dir, server, {});
  stores.kubernetes = await openDatastore({
    datastore_type: 'kubernetes',
    kubernetes: { kubeconfig },
    timeoutMs: 10_000,
  });
});

afterAll(async () => {
  for (const ds of Object.values(stores)) await ds.close();
  await server?.stop();
  await etcd?.stop();
});

for (const which of ['etcd', 'kubernetes']) {
  describe(`BGP resources in the ${which} datastore`, () => {
    it('stores, lists, updates and deletes BGPConfiguration and BGPPeer', async () => {
      const ds = stores[which]!;
      const conf: Resource<'BGPConfiguration'> = {
        apiVersion: API_VERSION,
        kind: 'BGPConfiguration',
        metadata: { name: 'default' },
        spec: { asNumber: 64512, serviceClusterIPs: [{ cidr: '10.96.0.0/12' }] },
      };
      const peer: Resource<'BGPPeer'> = {
        apiVersion: API_VERSION,
        kind: 'BGPPeer',
        metadata: { name: 'tor' },
        spec: { peerIP: '192.0.2.1', asNumber: 65000 },
      };
      await ds.create(conf);
      const created = await ds.create(peer);
      expect((await ds.get('BGPConfiguration', 'default')).spec).toEqual(conf.spec);
      const updated = await ds.update({ ...created, spec: { ...created.spec, ttlSecurity: 2 } });
      expect((await ds.list('BGPPeer')).items.map((p) => [p.metadata.name, p.spec.ttlSecurity])).toEqual([['tor', 2]]);
      await ds.delete('BGPPeer', 'tor', { revision: updated.metadata.resourceVersion });
      await ds.delete('BGPConfiguration', 'default');
      expect((await ds.list('BGPPeer')).items).toEqual([]);
    });
  });
}

describe('the fake API server', () => {
  it('serves the BGP CRDs under netplugin.org/v3', async () => {
    const r = await fetch(`${server.url}/apis/netplugin.org/v3`);
    const names = ((await r.json()) as { resources: Array<{ name: string }> }).resources.map((x) => x.name);
    expect(names).toEqual(expect.arrayContaining(['bgpconfigurations', 'bgppeers']));
  });
});
