// netpluginctl policy explain on the in-memory datastore: the selecting
// policies in evaluation order and the rule deciding a connection each way.
import { beforeEach, describe, expect, it } from 'vitest';
import { MemoryDatastore } from '../../src/datastore/memory.js';
import { runCtl } from '../../src/ctl/index.js';
import { API_VERSION, type Resource } from '../../src/model/resources.js';
import { convertK8sNetworkPolicy } from '../../src/model/k8s-networkpolicy.js';
import { namespaceToProfile } from '../../src/model/profiles.js';

let ds: MemoryDatastore;

async function ctl(argv: string[]): Promise<{ code: number; out: string; err: string }> {
  let out = '';
  let err = '';
  const code = await runCtl(argv, {
    env: { ETCD_ENDPOINTS: 'http://127.0.0.1:2379' },
    stdout: (s) => (out += s),
    stderr: (s) => (err += s),
    openDatastore: async () => ds,
  });
  return { code, out, err };
}

function wep(ns: string, pod: string, ip: string, labels: Record<string, string>): Resource<'WorkloadEndpoint'> {
  return {
    apiVersion: API_VERSION,
    kind: 'WorkloadEndpoint',
    metadata: {
      name: `node1-k8s-${pod}-eth0`,
      namespace: ns,
      labels: { ...labels, 'netplugin.org/namespace': ns, 'netplugin.org/orchestrator': 'k8s' },
    },
    spec: {
      orchestrator: 'k8s',
      node: 'node1',
      containerID: `c-${pod}`,
      pod,
      endpoint: 'eth0',
      ipNetworks: [`${ip}/32`],
      profiles: [`kns.${ns}`],
      interfaceName: `npi${pod}`,
      ports: [{ name: 'http', protocol: 'TCP', port: 8080 }],
    },
  };
}

beforeEach(async () => {
  ds = new MemoryDatastore();
  for (const ns of ['shop', 'other'])
    await ds.create(namespaceToProfile({ metadata: { name: ns, labels: { team: ns } } }));
  await ds.create(wep('shop', 'web', '10.0.0.1', { app: 'web' }));
  await ds.create(wep('shop', 'client', '10.0.0.2', { app: 'client' }));
  await ds.create(wep('other', 'intruder', '10.0.1.3', { app: 'client' }));
  await ds.create(
    convertK8sNetworkPolicy({
      metadata: { name: 'web-from-client', namespace: 'shop' },
      spec: {
        podSelector: { matchLabels: { app: 'web' } },
        ingress: [{ from: [{ podSelector: { matchLabels: { app: 'client' } } }], ports: [{ port: 'http' }] }],
      },
    }),
  );
  await ds.create({
    apiVersion: API_VERSION,
    kind: 'GlobalNetworkPolicy',
    metadata: { name: 'deny-10-9' },
    spec: { order: 1, selector: 'all()', ingress: [{ action: 'Deny', source: { nets: ['10.9.0.0/16'] } }] },
  });
  await ds.create({
    apiVersion: API_VERSION,
    kind: 'GlobalNetworkPolicy',
    metadata: { name: 'pass-clients' },
    spec: { order: 2, selector: "app == 'client'", ingress: [{ action: 'Pass' }] },
  });
});

describe('netpluginctl policy explain', () => {
  it('lists the selecting policies in order and the deciding rules', async () => {
    const r = await ctl(['policy', 'explain', 'web', '-n', 'shop', '--peer', 'client', '--port', '8080']);
    expect(r.err).toBe('');
    expect(r.code).toBe(0);
    expect(r.out).toContain('ingress: selected by, in evaluation order');
    expect(r.out).toMatch(
      /1\. GlobalNetworkPolicy deny-10-9 \(order 1\)\n\s+2\. NetworkPolicy shop\/knp\.default\.web-from-client \(order 1000\)/,
    );
    expect(r.out).toContain('egress: no policy selects it; its profiles decide');
    expect(r.out).toMatch(
      /ingress of shop\/web: ALLOW by NetworkPolicy shop\/knp\.default\.web-from-client ingress rule 0 \(Allow\)/,
    );
    expect(r.out).toMatch(/egress of client: ALLOW by Profile kns\.shop egress rule 0 \(Allow\)/);
  });

  it('a pod of another namespace, a port other than the named one, and an address', async () => {
    const other = JSON.parse(
      (
        await ctl([
          'policy',
          'explain',
          'web',
          '-n',
          'shop',
          '--peer',
          'other/intruder',
          '--port',
          '8080',
          '-o',
          'json',
        ])
      ).out,
    );
    expect(other.connection.ingress).toMatchObject({
      verdict: 'deny',
      by: 'selected by 2 ingress policies, no rule matched',
    });
    const port = JSON.parse(
      (await ctl(['policy', 'explain', 'web', '-n', 'shop', '--peer', 'client', '--port', '80', '-o', 'json'])).out,
    );
    expect(port.connection.ingress.verdict).toBe('deny');
    const addr = JSON.parse(
      (await ctl(['policy', 'explain', 'web', '-n', 'shop', '--peer', '10.9.1.1', '--port', '8080', '-o', 'json'])).out,
    );
    expect(addr.connection.ingress).toMatchObject({
      verdict: 'deny',
      by: 'GlobalNetworkPolicy deny-10-9 ingress rule 0 (Deny)',
    });
    const pass = JSON.parse(
      (await ctl(['policy', 'explain', 'client', '-n', 'shop', '--peer', 'other/intruder', '-o', 'json'])).out,
    );
    expect(pass.connection.ingress).toMatchObject({ verdict: 'allow', by: 'Profile kns.shop ingress rule 0 (Allow)' });
    expect(pass.connection.ingress.trace).toContain('passed to the profiles');
  });

  it("source ports: a rule with them matches only with --source-port, by number, range or the source pod's named port", async () => {
    await ds.create({
      apiVersion: API_VERSION,
      kind: 'GlobalNetworkPolicy',
      metadata: { name: 'src-ports' },
      spec: {
        order: 0,
        selector: "app == 'web'",
        ingress: [
          { action: 'Deny', protocol: 'TCP', source: { ports: ['40000:40010', 'http'] } },
          { action: 'Deny', protocol: 'TCP', source: { notPorts: [1] } },
        ],
      },
    });
    const explain = async (...a: string[]) =>
      JSON.parse(
        (
          await ctl([
            'policy',
            'explain',
            'web',
            '-n',
            'shop',
            '--peer',
            'client',
            '--port',
            '8080',
            ...a,
            '-o',
            'json',
          ])
        ).out,
      );
    // No source port: neither rule matches; the k8s policy decides.
    expect((await explain()).connection.ingress.by).toBe(
      'NetworkPolicy shop/knp.default.web-from-client ingress rule 0 (Allow)',
    );
    expect((await explain('--source-port', '40005')).connection.ingress).toMatchObject({
      verdict: 'deny',
      by: 'GlobalNetworkPolicy src-ports ingress rule 0 (Deny)',
    });
    // 8080 is the client's port named http.
    expect((await explain('--source-port', '8080')).connection.ingress.by).toBe(
      'GlobalNetworkPolicy src-ports ingress rule 0 (Deny)',
    );
    expect((await explain('--source-port', '1')).connection.ingress.by).toBe(
      'NetworkPolicy shop/knp.default.web-from-client ingress rule 0 (Allow)',
    );
    expect((await explain('--source-port', '2')).connection.ingress.by).toBe(
      'GlobalNetworkPolicy src-ports ingress rule 1 (Deny)',
    );
    const text = (
      await ctl(['policy', 'explain', 'web', '-n', 'shop', '--peer', 'client', '--port', '8080', '--source-port', '2'])
    ).out;
    expect(text).toContain(
      'client -> shop/web TCP/8080 from port 2, ingress of shop/web: DENY by GlobalNetworkPolicy src-ports ingress rule 1 (Deny)',
    );
    expect(await ctl(['policy', 'explain', 'web', '-n', 'shop', '--source-port', '0'])).toMatchObject({
      code: 1,
      err: expect.stringContaining('--source-port 0'),
    });
  });

  it('bad input is a one-line error naming the value', async () => {
    expect(await ctl(['policy', 'explain', 'nope', '-n', 'shop'])).toMatchObject({
      code: 1,
      err: expect.stringContaining('no workload endpoint for pod shop/nope'),
    });
    expect(await ctl(['policy', 'explain', 'web', '-n', 'shop', '--port', '70000'])).toMatchObject({
      code: 1,
      err: expect.stringContaining('--port 70000'),
    });
    expect(await ctl(['policy', 'explain', 'web', '-n', 'shop', '--protocol', 'GRE'])).toMatchObject({
      code: 1,
      err: expect.stringContaining('--protocol GRE'),
    });
    expect(await ctl(['policy', 'frobnicate'])).toMatchObject({
      code: 1,
      err: expect.stringContaining("unknown policy command 'frobnicate'"),
    });
  });

  it('--staged: pending verdicts beside the enforced ones, a staged Delete, the pending selection', async () => {
    // Staged: replace the Kubernetes policy so it allows port 9090 only, and delete the global deny.
    await ds.create({
      apiVersion: API_VERSION,
      kind: 'StagedKubernetesNetworkPolicy',
      metadata: { name: 'web-from-client', namespace: 'shop' },
      spec: {
        podSelector: { matchLabels: { app: 'web' } },
        ingress: [{ from: [{ podSelector: { matchLabels: { app: 'client' } } }], ports: [{ port: 9090 }] }],
      },
    });
    await ds.create({
      apiVersion: API_VERSION,
      kind: 'StagedGlobalNetworkPolicy',
      metadata: { name: 'deny-10-9' },
      spec: { stagedAction: 'Delete' },
    });
    const r = await ctl(['policy', 'explain', 'web', '-n', 'shop', '--peer', 'client', '--port', '8080', '--staged']);
    expect(r.err).toBe('');
    expect(r.out).toContain(
      'ingress of shop/web: ALLOW by NetworkPolicy shop/knp.default.web-from-client ingress rule 0 (Allow)',
    );
    expect(r.out).toContain('  pending: DENY by selected by 1 ingress policy, no rule matched');
    expect(r.out).toContain(
      '  pending: ALLOW by Profile kns.shop egress rule 0 (Allow) (the staged changes do not change it)',
    );
    expect(r.out).toMatch(
      /with the staged changes \(pending\), in evaluation order:\n\s+1\. StagedKubernetesNetworkPolicy shop\/web-from-client/,
    );
    expect(r.out).toContain(
      'StagedGlobalNetworkPolicy deny-10-9 (stagedAction Delete: removes GlobalNetworkPolicy deny-10-9)',
    );
    const j = JSON.parse(
      (
        await ctl([
          'policy',
          'explain',
          'web',
          '-n',
          'shop',
          '--peer',
          'client',
          '--port',
          '9090',
          '--staged',
          '-o',
          'json',
        ])
      ).out,
    );
    expect(j.connection.ingress.verdict).toBe('deny');
    expect(j.connection.pending.ingress.hits).toEqual([
      {
        kind: 'StagedKubernetesNetworkPolicy',
        namespace: 'shop',
        name: 'web-from-client',
        tier: '',
        action: 'Allow',
        ruleIndex: 0,
      },
    ]);
    expect(j.staged.map((s: { kind: string }) => s.kind).sort()).toEqual([
      'StagedGlobalNetworkPolicy',
      'StagedKubernetesNetworkPolicy',
    ]);
    // Two staged policies of one name in two namespaces: only the one of the pod's namespace concerns it.
    for (const ns of ['shop', 'other']) {
      await ds.create({
        apiVersion: API_VERSION,
        kind: 'StagedNetworkPolicy',
        metadata: { name: 'same', namespace: ns },
        spec: { selector: 'all()' },
      });
    }
    const same = JSON.parse((await ctl(['policy', 'explain', 'web', '-n', 'shop', '--staged', '-o', 'json'])).out);
    expect(
      same.staged.filter((s: { name: string }) => s.name.endsWith('/same')).map((s: { name: string }) => s.name),
    ).toEqual(['shop/same']);
    await ds.delete('StagedNetworkPolicy', 'same', { namespace: 'shop' });
    await ds.delete('StagedNetworkPolicy', 'same', { namespace: 'other' });
    // Without staged objects: said once.
    await ds.delete('StagedGlobalNetworkPolicy', 'deny-10-9');
    await ds.delete('StagedKubernetesNetworkPolicy', 'web-from-client', { namespace: 'shop' });
    expect((await ctl(['policy', 'explain', 'web', '-n', 'shop', '--staged'])).out).toContain(
      'Staged policies: none exist',
    );
  });
});
