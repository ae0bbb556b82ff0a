// etcd over mutual TLS with certificates made by openssl for this test: the
// happy path (with a CA bundle whose second root is the right one) and each
// misconfiguration an operator can make, asserting the message tells the fix;
// over both transports (etcd's JSON gateway over https, and gRPC).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { startEtcd, type EtcdServer } from '../support/etcd.js';
import { certDir, makeCA, makeCert, type CA, type CertPair } from '../support/certs.js';
import { openDatastore } from '../../src/datastore/index.js';
import { DatastoreError } from '../../src/errors.js';
import { API_VERSION } from '../../src/model/resources.js';
import type { WatchEvent } from '../../src/datastore/types.js';
import type { EtcdDatastore } from '../../src/datastore/etcd.js';

for (const transport of ['http', 'grpc'] as const) {
  describe(`etcdv3 over mutual TLS (${transport})`, () => {
    let etcd: EtcdServer;
    let dir: ReturnType<typeof certDir>;
    let etcdCA: CA;
    let otherCA: CA;
    let client: CertPair;
    let strangerClient: CertPair;
    let bundle: string;

    beforeAll(async () => {
      dir = certDir();
      otherCA = makeCA(dir.dir, 'other-ca');
      etcdCA = makeCA(dir.dir, 'etcd-ca');
      // etcd's JSON gateway presents the server certificate to etcd's own gRPC
      // server, so with --client-cert-auth it must allow client auth too (as
      // kubeadm's etcd certificates do); the next describe covers one that does not.
      const server = makeCert(dir.dir, etcdCA, 'etcd-server', 'both');
      client = makeCert(dir.dir, etcdCA, 'netplugin', 'client');
      strangerClient = makeCert(dir.dir, otherCA, 'stranger', 'client');
      bundle = join(dir.dir, 'bundle.pem');
      writeFileSync(bundle, readFileSync(otherCA.cert, 'utf8') + readFileSync(etcdCA.cert, 'utf8'));
      etcd = await startEtcd({
        scheme: 'https',
        args: [
          '--cert-file',
          server.cert,
          '--key-file',
          server.key,
          '--client-cert-auth',
          '--trusted-ca-file',
          etcdCA.cert,
        ],
      });
    });
    afterAll(async () => {
      await etcd?.stop();
      dir?.remove();
    });

    async function failure(conf: Record<string, string>): Promise<DatastoreError> {
      const ds = await openDatastore({
        etcd_transport: transport,
        etcd_endpoints: etcd.endpoint,
        timeoutMs: 3000,
        ...conf,
      });
      try {
        const e = await ds.get('IPPool', 'x').then(
          () => undefined,
          (x: unknown) => x,
        );
        expect(e).toBeInstanceOf(DatastoreError);
        return e as DatastoreError;
      } finally {
        await ds.close();
      }
    }

    it('works with a client certificate and a CA bundle whose second root issued the server certificate', async () => {
      const ds = await openDatastore({
        etcd_transport: transport,
        etcd_endpoints: etcd.endpoint,
        etcd_ca_cert_file: bundle,
        etcd_cert_file: client.cert,
        etcd_key_file: client.key,
      });
      try {
        const c = await ds.create({
          apiVersion: API_VERSION,
          kind: 'IPPool',
          metadata: { name: 'tls-pool' },
          spec: { cidr: '10.0.0.0/16' },
        });
        expect((await ds.get('IPPool', 'tls-pool')).metadata.resourceVersion).toBe(c.metadata.resourceVersion);
      } finally {
        await ds.close();
      }
    });

    it("names the CA file when it does not hold the server certificate's issuer", async () => {
      const e = await failure({
        etcd_ca_cert_file: otherCA.cert,
        etcd_cert_file: client.cert,
        etcd_key_file: client.key,
      });
      expect(e.kind).toBe('Unauthorized');
      expect(e.message).toContain(
        `TLS handshake with ${etcd.endpoint} failed: certificate signed by unknown authority`,
      );
      expect(e.message).toContain(
        `etcd_ca_cert_file=${otherCA.cert} does not hold the CA that issued the server certificate`,
      );
    });

    it('says a client certificate is required when none is configured', async () => {
      const e = await failure({ etcd_ca_cert_file: etcdCA.cert });
      expect(e.kind).toBe('Unauthorized');
      expect(e.message).toContain('the server requires a client certificate: set etcd_cert_file and etcd_key_file');
    });

    it('says the server rejected a client certificate from a CA it does not trust', async () => {
      const e = await failure({
        etcd_ca_cert_file: etcdCA.cert,
        etcd_cert_file: strangerClient.cert,
        etcd_key_file: strangerClient.key,
      });
      expect(e.kind).toBe('Unauthorized');
      expect(e.message).toContain(`the server rejected the client certificate etcd_cert_file=${strangerClient.cert}`);
    });

    it('refuses TLS files with http endpoints', async () => {
      await expect(
        openDatastore({
          etcd_transport: transport,
          etcd_endpoints: etcd.endpoint.replace('https', 'http'),
          etcd_ca_cert_file: etcdCA.cert,
        }),
      ).rejects.toThrow(/use https:\/\/ endpoints/);
    });
  });
}

describe('etcdv3 over mutual TLS with a server certificate that lacks clientAuth', () => {
  let etcd: EtcdServer;
  let dir: ReturnType<typeof certDir>;
  let ca: CA;
  let client: CertPair;

  beforeAll(async () => {
    dir = certDir();
    ca = makeCA(dir.dir, 'etcd-ca');
    const server = makeCert(dir.dir, ca, 'etcd-server-only', 'server');
    client = makeCert(dir.dir, ca, 'netplugin', 'client');
    etcd = await startEtcd({
      scheme: 'https',
      args: ['--cert-file', server.cert, '--key-file', server.key, '--client-cert-auth', '--trusted-ca-file', ca.cert],
    });
  });
  afterAll(async () => {
    await etcd?.stop();
    dir?.remove();
  });

  const conf = () => ({
    etcd_endpoints: etcd.endpoint,
    etcd_ca_cert_file: ca.cert,
    etcd_cert_file: client.cert,
    etcd_key_file: client.key,
    timeoutMs: 5000,
  });

  it('explains why the JSON gateway cannot work when http is asked for explicitly', async () => {
    const ds = await openDatastore({ ...conf(), etcd_transport: 'http' });
    try {
      const e = (await ds.get('IPPool', 'x').catch((x: unknown) => x)) as DatastoreError;
      expect(e).toBeInstanceOf(DatastoreError);
      expect(e.kind).toBe('Unavailable');
      expect(e.message).toContain(`get IPPool x: etcd at ${etcd.endpoint} cannot serve its JSON gateway`);
      expect(e.message).toContain('extendedKeyUsage clientAuth');
    } finally {
      await ds.close();
    }
  });

  it('falls back to gRPC by default, for calls and watches', async () => {
    const ds = (await openDatastore(conf())) as EtcdDatastore;
    const events: Array<WatchEvent<'IPPool'>> = [];
    const w = ds.watch('IPPool', { revision: '1' }, (ev) => events.push(ev));
    try {
      const c = await ds.create({
        apiVersion: API_VERSION,
        kind: 'IPPool',
        metadata: { name: 'fallback-pool' },
        spec: { cidr: '10.0.0.0/16' },
      });
      expect((await ds.get('IPPool', 'fallback-pool')).metadata.resourceVersion).toBe(c.metadata.resourceVersion);
      expect(ds.transport).toBe('grpc');
      for (let i = 0; i < 200 && !events.some((e) => e.type === 'ADDED'); i++)
        await new Promise((r) => setTimeout(r, 50));
      expect(
        events.map((e) => (e.type === 'ERROR' ? `ERROR ${e.error.message}` : `${e.type} ${e.object.metadata.name}`)),
      ).toEqual(['ADDED fallback-pool']);
    } finally {
      w.stop();
      await ds.close();
    }
  });
});
