// upgrade check's blocking rules and the etcd-datastore path of auto-hep (labels
// go onto netplugin's Node when no Kubernetes API is configured), run in-process
// against an in-memory datastore standing in for etcd.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { MemoryDatastore } from '../../src/datastore/memory.js';
import { API_VERSION } from '../../src/model/resources.js';
import { runCtl } from '../../src/ctl/index.js';
import pkg from '../../package.json' with { type: 'json' };

async function ctl(ds: MemoryDatastore, args: string[]): Promise<{ code: number; out: string; err: string }> {
  let out = '';
  let err = '';
  const code = await runCtl(args, {
    env: { ETCD_ENDPOINTS: 'http://127.0.0.1:2379' },
    stdout: (s) => (out += s),
    stderr: (s) => (err += s),
    openDatastore: async () => ds,
  });
  return { code, out, err };
}

async function cluster(version: string): Promise<MemoryDatastore> {
  const ds = new MemoryDatastore();
  await ds.create({
    apiVersion: API_VERSION,
    kind: 'ClusterInformation',
    metadata: { name: 'default' },
    spec: { clusterGUID: 'g', netpluginVersion: version, datastoreReady: true },
  });
  return ds;
}

describe('upgrade check: what blocks', () => {
  it.each([
    ['v3.14.2', 1, /BLOCKING the cluster runs v3\.14\.2; the procedures upgrade from v3\.15 or later/],
    [
      'v3.40.0',
      1,
      new RegExp(
        `BLOCKING this client \\(${pkg.version.replaceAll('.', '\\.')}\\) is older than the cluster \\(v3\\.40\\.0\\)`,
      ),
    ],
    ['v3.15.0', 0, /cluster version v3\.15\.0, client/],
    ['v3.31.4', 0, /nothing blocks the upgrade\n$/],
  ])('cluster %s: exit %i', async (version, code, msg) => {
    const ds = await cluster(version);
    const r = await ctl(ds, ['upgrade', 'check']);
    expect(r.err).toBe('');
    expect(r.code).toBe(code);
    expect(r.out).toMatch(msg);
    expect(r.out).toMatch(/manifest install with the etcd datastore:/);
  });

  it('--to another release line blocks; a bad --to is an error', async () => {
    const ds = await cluster('v3.30.0');
    expect((await ctl(ds, ['upgrade', 'check', '--to', 'v3.32.x'])).code).toBe(0);
    const r = await ctl(ds, ['upgrade', 'check', '--to', 'v4.0']);
    expect(r.code).toBe(1);
    expect(r.out).toMatch(/BLOCKING this netpluginctl .* upgrades to v3\.32\.x, not v4\.0/);
    expect((await ctl(ds, ['upgrade', 'check', '--to', 'latest'])).err).toMatch(
      /--to "latest" is not a version; use e\.g\. v3\.32\.x/,
    );
  });
});

describe('upgrade check: deprecated options', () => {
  it('names etcd_authority and etcd_scheme from the --config conflist, without blocking', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'ctl-upgrade-check-'));
    try {
      const conf = join(dir, '10-netplugin.conflist');
      writeFileSync(
        conf,
        JSON.stringify({
          name: 'k8s-pod-network',
          cniVersion: '1.0.0',
          plugins: [
            {
              type: 'netplugin',
              etcd_authority: '127.0.0.1:2379',
              etcd_scheme: 'http',
              ipam: { type: 'netplugin-ipam' },
            },
          ],
        }),
      );
      const r = await ctl(await cluster('v3.31.0'), ['--config', conf, 'upgrade', 'check']);
      expect(r.code).toBe(0);
      expect(r.out).toMatch(/deprecated option\(s\) etcd_authority, etcd_scheme: replace them with etcd_endpoints/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('upgrade auto-hep without a Kubernetes API', () => {
  it("labels go onto netplugin's Node; a missing node stops it before any change", async () => {
    const ds = await cluster('v3.31.0');
    await ds.create({
      apiVersion: API_VERSION,
      kind: 'Node',
      metadata: { name: 'n1', labels: { zone: 'a' } },
      spec: {},
    });
    await ds.create({
      apiVersion: API_VERSION,
      kind: 'HostEndpoint',
      metadata: { name: 'n1-all', labels: { role: 'db' } },
      spec: { node: 'n1', interfaceName: '*' },
    });
    await ds.create({
      apiVersion: API_VERSION,
      kind: 'HostEndpoint',
      metadata: { name: 'ghost-all', labels: { role: 'db' } },
      spec: { node: 'ghost', interfaceName: '*' },
    });
    const bad = await ctl(ds, ['upgrade', 'auto-hep']);
    expect(bad.code).toBe(1);
    expect(bad.err).toMatch(/auto-hep: nothing changed: hostendpoint\/ghost-all: its node ghost does not exist/);
    expect((await ds.get('Node', 'n1')).metadata.labels).toEqual({ zone: 'a' });
    await expect(ds.get('KubeControllersConfiguration', 'default')).rejects.toThrow();
    await ds.delete('HostEndpoint', 'ghost-all');

    // A stand-in controller, in this process: creates n1-auto-hep once autoCreate is on.
    let stop = false;
    const loop = (async () => {
      while (!stop) {
        const kcc = await ds.get('KubeControllersConfiguration', 'default').catch(() => undefined);
        if (kcc?.spec.controllers?.node?.hostEndpoint?.autoCreate === 'Enabled') {
          await ds.create({
            apiVersion: API_VERSION,
            kind: 'HostEndpoint',
            metadata: { name: 'n1-auto-hep', labels: { 'netplugin.org/created-by': 'netplugin-kube-controllers' } },
            spec: { node: 'n1', interfaceName: '*' },
          });
          return;
        }
        await new Promise((r) => setTimeout(r, 50));
      }
    })();
    const ok = await ctl(ds, ['upgrade', 'auto-hep', '--timeout', '30']);
    stop = true;
    await loop;
    expect(ok.err).toBe('');
    expect(ok.code).toBe(0);
    expect(ok.out).toMatch(/node\/n1: added labels role=db \(from hostendpoint\/n1-all\)/);
    expect((await ds.get('Node', 'n1')).metadata.labels).toEqual({ zone: 'a', role: 'db' });
    expect((await ds.list('HostEndpoint')).items.map((h) => h.metadata.name)).toEqual(['n1-auto-hep']);
    // Nothing left to migrate.
    expect((await ctl(ds, ['upgrade', 'auto-hep'])).out).toMatch(/no all-interfaces host endpoints to migrate/);
  });

  it('--timeout must be a positive number', async () => {
    expect((await ctl(await cluster('v3.31.0'), ['upgrade', 'auto-hep', '--timeout', 'soon'])).err).toMatch(
      /--timeout "soon" is not a positive number of seconds/,
    );
  });
});
