// Staged policies through netpluginctl, against a throwaway etcd and the fake Kubernetes API
// server: the three kinds applied, listed (short names, columns), validated; `policy promote`
// both ways (Set creates or replaces, Delete removes) on both datastores, a
// StagedKubernetesNetworkPolicy promoted to a networking.k8s.io/v1 NetworkPolicy through the API
// (also beside the etcd datastore), not found, dry runs, and a concurrent change (nothing written
// on etcd; named on the Kubernetes API); `policy explain --staged`; completion of the kinds.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startEtcd, type EtcdServer } from '../support/etcd.js';
import { startFakeApiServer, writeKubeconfig, type FakeApiServer } from '../support/fake-apiserver.js';
import { requireBuiltCtl, runBuiltCtl } from '../support/ctl.js';
import { workloadEndpoint } from '../support/builders.js';
import { openDatastore } from '../../src/datastore/index.js';
import type { Datastore } from '../../src/datastore/types.js';
import { DatastoreError } from '../../src/errors.js';
import { runCtl } from '../../src/ctl/index.js';
import { createKubeClient } from '../../src/k8s/client.js';
import { API_VERSION, type Kind, type Resource } from '../../src/model/resources.js';
import { namespaceToProfile } from '../../src/model/profiles.js';

const TOKEN = 'staged-token';
let etcd: EtcdServer;
let api: FakeApiServer;
let kubeconfig: string;
let eds: Datastore;
let kds: Datastore;

beforeAll(async () => {
  requireBuiltCtl();
  etcd = await startEtcd();
  api = await startFakeApiServer({ tls: true, auth: { tokens: [TOKEN] } });
  kubeconfig = writeKubeconfig(api.dir, api, { token: TOKEN });
  eds = await openDatastore({ datastore_type: 'etcdv3', etcd_endpoints: etcd.endpoint, timeoutMs: 10_000 });
  kds = await openDatastore({ datastore_type: 'kubernetes', kubernetes: { kubeconfig }, timeoutMs: 10_000 });
  for (const ns of ['shop', 'other']) api.put(`/api/v1/namespaces/${ns}`, { metadata: { name: ns } });
}, 60_000);

afterAll(async () => {
  await eds?.close();
  await kds?.close();
  await api?.stop();
  await etcd?.stop();
});

const onEtcd = (args: string[], input = '', kube = false) =>
  runBuiltCtl(args, {
    env: { ETCD_ENDPOINTS: etcd.endpoint, DATASTORE_TYPE: 'etcdv3', ...(kube ? { KUBECONFIG: kubeconfig } : {}) },
    input,
  });
const onKube = (args: string[], input = '') =>
  runBuiltCtl(args, { env: { DATASTORE_TYPE: 'kubernetes', KUBECONFIG: kubeconfig }, input });

const STAGED = `apiVersion: netplugin.org/v3
kind: StagedNetworkPolicy
metadata: {name: deny-intruder, namespace: shop, labels: {owner: sec}}
spec:
  stagedAction: Set
  order: 10
  selector: app == 'web'
  ingress:
  - {action: Deny, source: {selector: app == 'client', namespaceSelector: all()}}
---
apiVersion: netplugin.org/v3
kind: StagedGlobalNetworkPolicy
metadata: {name: drop-legacy}
spec: {stagedAction: Delete}
---
apiVersion: netplugin.org/v3
kind: StagedKubernetesNetworkPolicy
metadata: {name: web, namespace: shop}
spec:
  podSelector: {matchLabels: {app: web}}
  ingress:
  - from: [{podSelector: {matchLabels: {app: client}}}]
    ports: [{port: 8080}]
`;

async function absent(ds: Datastore, kind: Kind, name: string, ns?: string): Promise<boolean> {
  try {
    await ds.get(kind, name, ns);
    return false;
  } catch (e) {
    if (DatastoreError.is(e, 'NotFound')) return true;
    throw e;
  }
}

/** A networking.k8s.io/v1 NetworkPolicy as the API server holds it, or undefined. */
async function k8sPolicy(
  ns: string,
  name: string,
): Promise<{ metadata: Record<string, unknown>; spec: Record<string, unknown> } | undefined> {
  const kube = await createKubeClient({ kubeconfig });
  try {
    return await kube.request('GET', `/apis/networking.k8s.io/v1/namespaces/${ns}/networkpolicies/${name}`);
  } catch (e) {
    if (DatastoreError.is(e, 'NotFound')) return undefined;
    throw e;
  } finally {
    kube.close();
  }
}

describe('the staged kinds in netpluginctl (etcd)', () => {
  it('applies the three kinds and lists them by short name with their columns', async () => {
    const a = await onEtcd(['apply', '-f', '-'], STAGED);
    expect(a.err).toBe('');
    expect(a.out).toBe(
      'stagednetworkpolicy/shop/deny-intruder created\nstagedglobalnetworkpolicy/drop-legacy ' +
        'created\nstagedkubernetesnetworkpolicy/shop/web created\n',
    );
    const snp = await onEtcd(['get', 'snp', '-n', 'shop']);
    expect(snp.out).toMatch(/^NAME\s+ACTION\s+ORDER\s+SELECTOR\ndeny-intruder\s+Set\s+10\s+app == 'web'\n$/);
    expect((await onEtcd(['get', 'snp', '-A'])).out).toMatch(
      /^NAMESPACE\s+NAME\s+ACTION\s+ORDER\s+SELECTOR\nshop\s+deny-intruder\s+Set\s+10\s+app == 'web'\n$/,
    );
    expect((await onEtcd(['get', 'sgnp'])).out).toMatch(
      /^NAME\s+ACTION\s+ORDER\s+SELECTOR\ndrop-legacy\s+Delete\s*\n$/,
    );
    expect((await onEtcd(['get', 'stagedkubernetesnetworkpolicies', '-A'])).out).toMatch(
      /shop\s+web\s+Set\s+app == 'web'\s+Ingress\n/,
    );
    // Stored under their own etcd keys.
    expect((await eds.get('StagedNetworkPolicy', 'deny-intruder', 'shop')).metadata.labels).toEqual({ owner: 'sec' });
  });

  it('refuses a malformed staged policy with the field and the fix', async () => {
    const r = await onEtcd(
      ['apply', '-f', '-'],
      'apiVersion: netplugin.org/v3\nkind: snp\nmetadata: {name: bad, namespace: shop}\nspec: ' +
        '{stagedAction: Delete, selector: all(), ordr: 1}\n',
    );
    expect(r.code).toBe(1);
    expect(r.err).toContain(
      'spec.selector: a staged Delete removes the enforced policy of its name and takes no other field',
    );
    expect(r.err).toContain('spec.ordr: unknown field; did you mean order?');
    expect(await absent(eds, 'StagedNetworkPolicy', 'bad', 'shop')).toBe(true);
  });

  it('explain --staged: the pending verdict beside the enforced one, naming the staged policy', async () => {
    await eds.create(namespaceToProfile({ metadata: { name: 'shop', labels: {} } }));
    for (const [pod, ip, app] of [
      ['web-0', '10.174.9.1', 'web'],
      ['client-0', '10.174.9.2', 'client'],
    ] as const) {
      await eds.create(
        workloadEndpoint({
          node: 'n1',
          namespace: 'shop',
          pod,
          containerID: `c-${pod}`,
          ips: [ip],
          labels: { app, 'netplugin.org/namespace': 'shop' },
          spec: { profiles: ['kns.shop'] },
        }),
      );
    }
    await eds.create({
      apiVersion: API_VERSION,
      kind: 'NetworkPolicy',
      metadata: { name: 'allow-clients', namespace: 'shop' },
      spec: { order: 20, selector: "app == 'web'", ingress: [{ action: 'Allow' }] },
    });
    const r = await onEtcd([
      'policy',
      'explain',
      'web-0',
      '-n',
      'shop',
      '--peer',
      'client-0',
      '--port',
      '8080',
      '--staged',
    ]);
    expect(r.err).toBe('');
    expect(r.out).toContain('ingress of shop/web-0: ALLOW by NetworkPolicy shop/allow-clients ingress rule 0 (Allow)');
    expect(r.out).toContain('  pending: DENY by StagedNetworkPolicy shop/deny-intruder ingress rule 0 (Deny)');
    expect(r.out).toContain(
      'StagedNetworkPolicy shop/deny-intruder (stagedAction Set: sets NetworkPolicy shop/deny-intruder)',
    );
    expect(r.out).toMatch(
      /with the staged changes \(pending\), in evaluation order:\n\s+1\. StagedNetworkPolicy shop\/deny-intruder/,
    );
    const j = JSON.parse(
      (
        await onEtcd([
          'policy',
          'explain',
          'web-0',
          '-n',
          'shop',
          '--peer',
          'client-0',
          '--port',
          '8080',
          '--staged',
          '-o',
          'json',
        ])
      ).out,
    );
    expect(j.connection.ingress.hits).toEqual([
      {
        kind: 'NetworkPolicy',
        namespace: 'shop',
        name: 'allow-clients',
        tier: 'default',
        action: 'Allow',
        ruleIndex: 0,
      },
    ]);
    expect(j.connection.pending.ingress.hits).toEqual([
      {
        kind: 'StagedNetworkPolicy',
        namespace: 'shop',
        name: 'deny-intruder',
        tier: 'default',
        action: 'Deny',
        ruleIndex: 0,
      },
    ]);
    // Without --staged nothing of them.
    expect(
      (await onEtcd(['policy', 'explain', 'web-0', '-n', 'shop', '--peer', 'client-0', '--port', '8080'])).out,
    ).not.toContain('pending');
  });

  it('promote: a dry run changes nothing; Set creates the enforced policy, removes the staged one', async () => {
    const dry = await onEtcd(['policy', 'promote', 'snp/deny-intruder', '-n', 'shop', '--dry-run']);
    expect(dry.err).toBe('');
    expect(dry.out).toBe(
      'NetworkPolicy shop/deny-intruder would be created (promoted StagedNetworkPolicy ' +
        'shop/deny-intruder, stagedAction Set) (dry run)\n' +
        'StagedNetworkPolicy shop/deny-intruder would be removed (dry run)\n',
    );
    expect(await absent(eds, 'NetworkPolicy', 'deny-intruder', 'shop')).toBe(true);
    const r = await onEtcd(['policy', 'promote', 'stagednetworkpolicy', 'deny-intruder', '-n', 'shop']);
    expect(r.err).toBe('');
    expect(r.out).toBe(
      'NetworkPolicy shop/deny-intruder created (promoted StagedNetworkPolicy ' +
        'shop/deny-intruder, stagedAction Set)\nStagedNetworkPolicy shop/deny-intruder removed\n',
    );
    const np = await eds.get('NetworkPolicy', 'deny-intruder', 'shop');
    expect(np.spec).toEqual({
      order: 10,
      selector: "app == 'web'",
      ingress: [{ action: 'Deny', source: { selector: "app == 'client'", namespaceSelector: 'all()' } }],
    });
    expect(np.metadata.labels).toEqual({ owner: 'sec' });
    expect(await absent(eds, 'StagedNetworkPolicy', 'deny-intruder', 'shop')).toBe(true);
    // explain now shows it enforced.
    expect(
      (await onEtcd(['policy', 'explain', 'web-0', '-n', 'shop', '--peer', 'client-0', '--port', '8080'])).out,
    ).toContain('ingress of shop/web-0: DENY by NetworkPolicy shop/deny-intruder');
  });

  it('promote: Set replaces an existing policy; Delete deletes one; errors name what is missing', async () => {
    await onEtcd(
      ['apply', '-f', '-'],
      'apiVersion: netplugin.org/v3\nkind: StagedNetworkPolicy\nmetadata: {name: allow-clients, ' +
        'namespace: shop}\nspec: {order: 20, selector: "app == \'web\'", ingress: [{action: Allow, ' +
        'protocol: TCP, destination: {ports: [8080]}}]}\n',
    );
    const before = await eds.get('NetworkPolicy', 'allow-clients', 'shop');
    const r = await onEtcd(['policy', 'promote', 'snp/allow-clients', '-n', 'shop']);
    expect(r.out).toContain(
      'NetworkPolicy shop/allow-clients replaced (promoted StagedNetworkPolicy shop/allow-clients, stagedAction Set)',
    );
    const after = await eds.get('NetworkPolicy', 'allow-clients', 'shop');
    expect(after.spec.ingress).toEqual([{ action: 'Allow', protocol: 'TCP', destination: { ports: [8080] } }]);
    expect(after.metadata.resourceVersion).not.toBe(before.metadata.resourceVersion);

    await onEtcd(
      ['apply', '-f', '-'],
      'apiVersion: netplugin.org/v3\nkind: StagedNetworkPolicy\nmetadata: {name: deny-intruder, ' +
        'namespace: shop}\nspec: {stagedAction: Delete}\n',
    );
    const d = await onEtcd(['policy', 'promote', 'snp/deny-intruder', '-n', 'shop']);
    expect(d.out).toBe(
      'NetworkPolicy shop/deny-intruder deleted (promoted StagedNetworkPolicy ' +
        'shop/deny-intruder, stagedAction Delete)\nStagedNetworkPolicy shop/deny-intruder removed\n',
    );
    expect(await absent(eds, 'NetworkPolicy', 'deny-intruder', 'shop')).toBe(true);

    const g = await onEtcd(['policy', 'promote', 'sgnp/drop-legacy']);
    expect(g.out).toBe(
      'GlobalNetworkPolicy drop-legacy does not exist: nothing to delete (promoted ' +
        'StagedGlobalNetworkPolicy drop-legacy, stagedAction Delete)\nStagedGlobalNetworkPolicy ' +
        'drop-legacy removed\n',
    );

    const nf = await onEtcd(['policy', 'promote', 'snp/nope', '-n', 'shop']);
    expect(nf.code).toBe(1);
    expect(nf.err).toContain(
      'StagedNetworkPolicy "nope" not found in namespace shop; ' +
        "list them with 'netpluginctl get stagednetworkpolicy -n shop'",
    );
    const wrong = await onEtcd(['policy', 'promote', 'networkpolicy/allow-clients', '-n', 'shop']);
    expect(wrong.code).toBe(1);
    expect(wrong.err).toContain('policy promote takes a staged policy');
    expect((await onEtcd(['policy', 'promote', 'sgnp/x', '-n', 'shop'])).err).toContain(
      'StagedGlobalNetworkPolicy is cluster-scoped; drop -n shop',
    );
  });

  it('a StagedKubernetesNetworkPolicy needs the Kubernetes API beside etcd, and is written there', async () => {
    const none = await onEtcd(['policy', 'promote', 'sknp/web', '-n', 'shop']);
    expect(none.code).toBe(1);
    expect(none.err).toContain(
      'promotes to a Kubernetes NetworkPolicy (networking.k8s.io/v1), written through the ' +
        'Kubernetes API, and no Kubernetes API is configured beside the etcdv3 datastore: pass ' +
        '--kubeconfig PATH or set KUBECONFIG',
    );
    expect(await absent(eds, 'StagedKubernetesNetworkPolicy', 'web', 'shop')).toBe(false);
    const r = await onEtcd(['policy', 'promote', 'sknp/web', '-n', 'shop'], '', true);
    expect(r.err).toBe('');
    expect(r.out).toBe(
      'Kubernetes NetworkPolicy shop/web created (promoted StagedKubernetesNetworkPolicy ' +
        'shop/web, stagedAction Set); ' +
        'netplugin-kube-controllers mirrors it into etcd as NetworkPolicy shop/knp.default.web\n' +
        'StagedKubernetesNetworkPolicy shop/web removed\n',
    );
    const np = await k8sPolicy('shop', 'web');
    expect(np?.spec).toMatchObject({
      podSelector: { matchLabels: { app: 'web' } },
      ingress: [
        { from: [{ podSelector: { matchLabels: { app: 'client' } } }], ports: [{ port: 8080, protocol: 'TCP' }] },
      ],
    });
    expect(await absent(eds, 'StagedKubernetesNetworkPolicy', 'web', 'shop')).toBe(true);
  });

  it('a concurrent change of the staged object: the etcd transaction writes nothing', async () => {
    await onEtcd(
      ['apply', '-f', '-'],
      'apiVersion: netplugin.org/v3\nkind: StagedNetworkPolicy\nmetadata: {name: racing, ' +
        'namespace: shop}\nspec: {selector: all(), ingress: [{action: Deny}]}\n',
    );
    const { code, err } = await promoteWhileChanging(
      eds,
      { ETCD_ENDPOINTS: etcd.endpoint, DATASTORE_TYPE: 'etcdv3' },
      'racing',
    );
    expect(code).toBe(1);
    expect(err).toContain('StagedNetworkPolicy shop/racing changed while promoting');
    expect(err).toContain('nothing was changed');
    expect(await absent(eds, 'NetworkPolicy', 'racing', 'shop')).toBe(true);
    expect((await eds.get('StagedNetworkPolicy', 'racing', 'shop')).spec.order).toBe(99);
  });
});

/**
 * Runs promote in-process on a datastore that, just before the promote's writes, changes the
 * staged object (another writer).
 */
async function promoteWhileChanging(
  ds: Datastore,
  env: Record<string, string>,
  name: string,
): Promise<{ code: number; out: string; err: string }> {
  let out = '';
  let err = '';
  const racing: Datastore = Object.assign(Object.create(ds) as Datastore, {
    async txn(ops: Parameters<Datastore['txn']>[0]) {
      const cur = (await ds.get('StagedNetworkPolicy', name, 'shop')) as Resource<'StagedNetworkPolicy'>;
      await ds.update({ ...cur, spec: { ...cur.spec, order: 99 } });
      return ds.txn(ops);
    },
    async close() {},
  });
  const code = await runCtl(['policy', 'promote', `snp/${name}`, '-n', 'shop'], {
    env,
    stdout: (s) => (out += s),
    stderr: (s) => (err += s),
    openDatastore: async () => racing,
  });
  return { code, out, err };
}

describe('the staged kinds in netpluginctl (Kubernetes datastore)', () => {
  it('custom resources; Set promotes to the netplugin kind, a Kubernetes one to networking.k8s.io', async () => {
    const a = await onKube(['apply', '-f', '-'], STAGED);
    expect(a.err).toBe('');
    expect((await kds.get('StagedGlobalNetworkPolicy', 'drop-legacy')).spec).toEqual({ stagedAction: 'Delete' });
    expect((await onKube(['get', 'sknp', '-n', 'shop', '-o', 'name'])).out).toBe('stagedkubernetesnetworkpolicy/web\n');

    const p = await onKube(['policy', 'promote', 'snp/deny-intruder', '-n', 'shop']);
    expect(p.err).toBe('');
    expect(p.out).toContain('NetworkPolicy shop/deny-intruder created');
    expect((await kds.get('NetworkPolicy', 'deny-intruder', 'shop')).spec.order).toBe(10);
    expect(await absent(kds, 'StagedNetworkPolicy', 'deny-intruder', 'shop')).toBe(true);

    // The etcd tests wrote the Kubernetes policy shop/web into this API server already:
    // replaced (PUT at its resourceVersion).
    const before = await k8sPolicy('shop', 'web');
    expect(before).toBeDefined();
    const k = await onKube(['policy', 'promote', 'sknp/web', '-n', 'shop']);
    expect(k.err).toBe('');
    expect(k.out).toBe(
      'Kubernetes NetworkPolicy shop/web replaced (promoted StagedKubernetesNetworkPolicy ' +
        'shop/web, stagedAction Set)\nStagedKubernetesNetworkPolicy shop/web removed\n',
    );
    expect((await k8sPolicy('shop', 'web'))!.metadata.resourceVersion).not.toBe(before!.metadata.resourceVersion);
    // The datastore derives its NetworkPolicy from the Kubernetes one at once.
    expect((await kds.get('NetworkPolicy', 'knp.default.web', 'shop')).spec.selector).toBe(
      "netplugin.org/orchestrator == 'k8s' && app == 'web'",
    );

    // A staged Delete of it deletes the Kubernetes policy.
    await onKube(
      ['apply', '-f', '-'],
      'apiVersion: netplugin.org/v3\nkind: StagedKubernetesNetworkPolicy\nmetadata: {name: web, ' +
        'namespace: shop}\nspec: {stagedAction: Delete}\n',
    );
    const d = await onKube(['policy', 'promote', 'sknp/web', '-n', 'shop']);
    expect(d.out).toContain(
      'Kubernetes NetworkPolicy shop/web deleted (promoted StagedKubernetesNetworkPolicy ' +
        'shop/web, stagedAction Delete)',
    );
    expect(await absent(kds, 'NetworkPolicy', 'knp.default.web', 'shop')).toBe(true);
    expect(await absent(kds, 'StagedKubernetesNetworkPolicy', 'web', 'shop')).toBe(true);
  });

  it('a StagedNetworkPolicy named as a Kubernetes mirror is refused with the kind to use', async () => {
    await onKube(
      ['apply', '-f', '-'],
      'apiVersion: netplugin.org/v3\nkind: StagedNetworkPolicy\nmetadata: {name: ' +
        'knp.default.web, namespace: shop}\nspec: {selector: all()}\n',
    );
    const r = await onKube(['policy', 'promote', 'snp/knp.default.web', '-n', 'shop']);
    expect(r.code).toBe(1);
    expect(r.err).toContain('stage that one as a StagedKubernetesNetworkPolicy named "web" instead');
  });

  it('a concurrent change on the Kubernetes API: the enforced policy written, the staged one kept', async () => {
    await onKube(
      ['apply', '-f', '-'],
      'apiVersion: netplugin.org/v3\nkind: StagedNetworkPolicy\nmetadata: {name: racing, ' +
        'namespace: shop}\nspec: {selector: all(), ingress: [{action: Deny}]}\n',
    );
    const { code, err } = await promoteWhileChanging(
      kds,
      { DATASTORE_TYPE: 'kubernetes', KUBECONFIG: kubeconfig },
      'racing',
    );
    expect(code).toBe(1);
    expect(err).toContain(
      'NetworkPolicy shop/racing created (promoted StagedNetworkPolicy shop/racing, stagedAction ' +
        'Set), but StagedNetworkPolicy shop/racing was not removed',
    );
    expect((await kds.get('StagedNetworkPolicy', 'racing', 'shop')).spec.order).toBe(99);
  });

  it('completion offers the staged kinds and promote', async () => {
    const kinds = (await onKube(['__complete', 'get', 's'])).out.split('\n');
    expect(kinds).toEqual(expect.arrayContaining(['snp', 'sgnp', 'sknp', 'stagednetworkpolicies']));
    expect((await onKube(['__complete', 'policy', ''])).out.split('\n')).toEqual(
      expect.arrayContaining(['explain', 'promote']),
    );
    expect((await onKube(['__complete', 'policy', 'explain', '--st'])).out).toContain('--staged');
  });
});
