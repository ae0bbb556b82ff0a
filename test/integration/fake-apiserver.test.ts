// The fake API server must behave like the real one for what we use, or the
// Kubernetes backend's tests prove nothing: checked over raw HTTP and with
// Debian's kubectl as a second, independent client.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { request } from 'node:http';
import {
  startFakeApiServer,
  writeKubeconfig,
  parseLabelSelector,
  mergePatch,
  jsonPatch,
  type FakeApiServer,
} from '../support/fake-apiserver.js';

interface Reply {
  status: number;
  body: any;
  text: string;
}

function call(
  server: FakeApiServer,
  method: string,
  path: string,
  body?: unknown,
  headers: Record<string, string> = {},
): Promise<Reply> {
  const u = new URL(server.url);
  const payload = body === undefined ? undefined : Buffer.from(typeof body === 'string' ? body : JSON.stringify(body));
  return new Promise((resolve, reject) => {
    const req = request(
      {
        host: u.hostname,
        port: u.port,
        method,
        path,
        headers: {
          'Content-Type': 'application/json',
          ...(payload ? { 'Content-Length': String(payload.length) } : {}),
          ...headers,
        },
      },
      (res) => {
        let text = '';
        res.on('data', (c) => (text += c));
        res.on('end', () => {
          let parsed: any;
          try {
            parsed = JSON.parse(text);
          } catch {
            parsed = undefined;
          }
          resolve({ status: res.statusCode ?? 0, body: parsed, text });
        });
      },
    );
    req.on('error', reject);
    req.end(payload);
  });
}

/** Opens a watch and collects its JSON lines. */
function watchLines(server: FakeApiServer, path: string) {
  const u = new URL(server.url);
  const lines: any[] = [];
  let status = 0;
  const req = request({ host: u.hostname, port: u.port, path }, (res) => {
    status = res.statusCode ?? 0;
    let buf = '';
    res.on('data', (c) => {
      buf += c;
      let i: number;
      while ((i = buf.indexOf('\n')) >= 0) {
        lines.push(JSON.parse(buf.slice(0, i)));
        buf = buf.slice(i + 1);
      }
    });
  });
  req.on('error', () => undefined);
  req.end();
  return {
    lines,
    status: () => status,
    async until(n: number) {
      for (let i = 0; i < 200 && lines.length < n; i++) await new Promise((r) => setTimeout(r, 25));
      return lines;
    },
    stop: () => req.destroy(),
  };
}

describe('fake API server over HTTP', () => {
  let s: FakeApiServer;
  beforeAll(async () => {
    s = await startFakeApiServer({ historySize: 5 });
  });
  afterAll(async () => {
    await s?.stop();
  });

  it('serves discovery for core v1 and the CRDs in deploy/crds', async () => {
    expect((await call(s, 'GET', '/api')).body.versions).toEqual(['v1']);
    const core = (await call(s, 'GET', '/api/v1')).body;
    expect(core.resources.map((r: { name: string }) => r.name).sort()).toEqual([
      'configmaps',
      'events',
      'namespaces',
      'nodes',
      'pods',
      'secrets',
      'serviceaccounts',
      'services',
    ]);
    const groups = (await call(s, 'GET', '/apis')).body;
    expect(groups.groups).toContainEqual({
      name: 'netplugin.org',
      versions: [{ groupVersion: 'netplugin.org/v3', version: 'v3' }],
      preferredVersion: { groupVersion: 'netplugin.org/v3', version: 'v3' },
    });
    expect(groups.groups.map((g: { name: string }) => g.name).sort()).toEqual([
      'apiextensions.k8s.io',
      'apps',
      'coordination.k8s.io',
      'netplugin.org',
      'networking.k8s.io',
      'operator.netplugin.org',
      'rbac.authorization.k8s.io',
    ]);
    const ours = (await call(s, 'GET', '/apis/netplugin.org/v3')).body.resources as Array<{
      name: string;
      kind: string;
      namespaced: boolean;
    }>;
    expect(ours.find((r) => r.name === 'ippools')).toMatchObject({ kind: 'IPPool', namespaced: false });
    expect(ours.find((r) => r.name === 'networkpolicies')).toMatchObject({ kind: 'NetworkPolicy', namespaced: true });
    expect(ours.find((r) => r.name === 'blockaffinities')).toMatchObject({ kind: 'BlockAffinity', namespaced: false });
    expect((await call(s, 'GET', '/apis/other.io/v1')).status).toBe(404);
  });

  it('creates with a global resourceVersion, rejects duplicates and unknown namespaces with Status bodies', async () => {
    const before = s.revision();
    const ns = await call(s, 'POST', '/api/v1/namespaces', { metadata: { name: 'team-a' } });
    expect(ns.status).toBe(201);
    expect(ns.body.metadata.labels).toEqual({ 'kubernetes.io/metadata.name': 'team-a' });
    expect(Number(ns.body.metadata.resourceVersion)).toBe(before + 1);
    const pool = await call(s, 'POST', '/apis/netplugin.org/v3/ippools', {
      apiVersion: 'netplugin.org/v3',
      kind: 'IPPool',
      metadata: { name: 'p1' },
      spec: { cidr: '10.0.0.0/16' },
    });
    expect(pool.status).toBe(201);
    expect(Number(pool.body.metadata.resourceVersion)).toBe(before + 2);
    const dup = await call(s, 'POST', '/apis/netplugin.org/v3/ippools', { metadata: { name: 'p1' }, spec: {} });
    expect(dup.status).toBe(409);
    expect(dup.body).toEqual({
      kind: 'Status',
      apiVersion: 'v1',
      metadata: {},
      status: 'Failure',
      message: 'ippools.netplugin.org "p1" already exists',
      reason: 'AlreadyExists',
      details: { name: 'p1', group: 'netplugin.org', kind: 'ippools' },
      code: 409,
    });
    const noNs = await call(s, 'POST', '/api/v1/namespaces/nowhere/pods', { metadata: { name: 'x' } });
    expect(noNs.status).toBe(404);
    expect(noNs.body.message).toBe('namespaces "nowhere" not found');
    const missing = await call(s, 'GET', '/apis/netplugin.org/v3/ippools/nope');
    expect(missing.body).toMatchObject({
      kind: 'Status',
      status: 'Failure',
      reason: 'NotFound',
      code: 404,
      message: 'ippools.netplugin.org "nope" not found',
    });
  });

  it('rejects a PUT with a stale resourceVersion with a Conflict Status', async () => {
    const cur = (await call(s, 'GET', '/apis/netplugin.org/v3/ippools/p1')).body;
    const ok = await call(s, 'PUT', '/apis/netplugin.org/v3/ippools/p1', { ...cur, spec: { cidr: '10.1.0.0/16' } });
    expect(ok.status).toBe(200);
    expect(ok.body.metadata.uid).toBe(cur.metadata.uid);
    const stale = await call(s, 'PUT', '/apis/netplugin.org/v3/ippools/p1', { ...cur, spec: { cidr: '10.2.0.0/16' } });
    expect(stale.status).toBe(409);
    expect(stale.body).toEqual({
      kind: 'Status',
      apiVersion: 'v1',
      metadata: {},
      status: 'Failure',
      reason: 'Conflict',
      code: 409,
      message:
        'Operation cannot be fulfilled on ippools.netplugin.org "p1": the object has been modified; please apply ' +
        'your changes to the latest version and try again',
      details: { name: 'p1', group: 'netplugin.org', kind: 'ippools' },
    });
  });

  it('applies merge, strategic-merge and JSON patches, with resourceVersion preconditions', async () => {
    await call(s, 'POST', '/api/v1/namespaces/team-a/pods', {
      metadata: { name: 'web', labels: { app: 'web' } },
      spec: { nodeName: 'n1' },
    });
    const m = await call(
      s,
      'PATCH',
      '/api/v1/namespaces/team-a/pods/web',
      { metadata: { annotations: { a: '1' }, labels: { app: null, tier: 'f' } } },
      { 'Content-Type': 'application/merge-patch+json' },
    );
    expect(m.body.metadata.labels).toEqual({ tier: 'f' });
    const sm = await call(
      s,
      'PATCH',
      '/api/v1/namespaces/team-a/pods/web',
      { metadata: { annotations: { b: '2' } } },
      { 'Content-Type': 'application/strategic-merge-patch+json' },
    );
    expect(sm.body.metadata.annotations).toEqual({ a: '1', b: '2' });
    const jp = await call(
      s,
      'PATCH',
      '/api/v1/namespaces/team-a/pods/web',
      [
        { op: 'test', path: '/metadata/annotations/a', value: '1' },
        { op: 'remove', path: '/metadata/annotations/a' },
      ],
      { 'Content-Type': 'application/json-patch+json' },
    );
    expect(jp.body.metadata.annotations).toEqual({ b: '2' });
    const failedTest = await call(
      s,
      'PATCH',
      '/api/v1/namespaces/team-a/pods/web',
      [{ op: 'test', path: '/metadata/annotations/b', value: 'x' }],
      { 'Content-Type': 'application/json-patch+json' },
    );
    expect(failedTest.status).toBe(422);
    const stale = await call(
      s,
      'PATCH',
      '/api/v1/namespaces/team-a/pods/web',
      { metadata: { resourceVersion: m.body.metadata.resourceVersion, annotations: { c: '3' } } },
      { 'Content-Type': 'application/merge-patch+json' },
    );
    expect(stale.status).toBe(409);
    expect(stale.body.reason).toBe('Conflict');
    const smCrd = await call(
      s,
      'PATCH',
      '/apis/netplugin.org/v3/ippools/p1',
      { spec: {} },
      { 'Content-Type': 'application/strategic-merge-patch+json' },
    );
    expect(smCrd.status).toBe(415);
  });

  it('filters lists by label and field selectors', async () => {
    for (const [name, labels, node] of [
      ['a', { app: 'x', env: 'prod' }, 'n1'],
      ['b', { app: 'y' }, 'n2'],
      ['c', { app: 'x', env: 'dev', canary: '' }, 'n2'],
    ] as const) {
      expect(
        (
          await call(s, 'POST', '/api/v1/namespaces/default/pods', {
            metadata: { name, labels },
            spec: { nodeName: node },
          })
        ).status,
      ).toBe(201);
    }
    const names = async (q: string) =>
      (await call(s, 'GET', `/api/v1/namespaces/default/pods?${q}`)).body.items.map(
        (p: { metadata: { name: string } }) => p.metadata.name,
      );
    expect(await names(`labelSelector=${encodeURIComponent('app=x')}`)).toEqual(['a', 'c']);
    expect(await names(`labelSelector=${encodeURIComponent('app==x,env!=prod')}`)).toEqual(['c']);
    expect(await names(`labelSelector=${encodeURIComponent('env in (prod,qa)')}`)).toEqual(['a']);
    expect(await names(`labelSelector=${encodeURIComponent('env notin (prod),app')}`)).toEqual(['b', 'c']);
    expect(await names(`labelSelector=${encodeURIComponent('!env')}`)).toEqual(['b']);
    expect(await names(`labelSelector=canary`)).toEqual(['c']);
    expect(await names(`fieldSelector=${encodeURIComponent('spec.nodeName=n2')}`)).toEqual(['b', 'c']);
    expect(
      await names(`fieldSelector=${encodeURIComponent('metadata.name!=a,spec.nodeName=n2')}&labelSelector=app%3Dx`),
    ).toEqual(['c']);
    const all = (await call(s, 'GET', `/api/v1/pods?fieldSelector=${encodeURIComponent('metadata.namespace=team-a')}`))
      .body;
    expect(all.items.map((p: { metadata: { name: string } }) => p.metadata.name)).toEqual(['web']);
    expect(all.metadata.resourceVersion).toBe(String(s.revision()));
    const bad = await call(s, 'GET', `/api/v1/pods?fieldSelector=status.phase%3DRunning`);
    expect(bad.status).toBe(400);
    expect(() => parseLabelSelector('a in b')).toThrow(/unable to parse/);
  });

  it('deletes with preconditions', async () => {
    const cur = (await call(s, 'GET', '/api/v1/namespaces/default/pods/a')).body;
    const bad = await call(s, 'DELETE', '/api/v1/namespaces/default/pods/a', {
      preconditions: { resourceVersion: '1' },
    });
    expect(bad.status).toBe(409);
    expect(bad.body.message).toContain('Precondition failed: ResourceVersion in precondition: 1');
    expect(
      (
        await call(s, 'DELETE', '/api/v1/namespaces/default/pods/a', {
          preconditions: { resourceVersion: cur.metadata.resourceVersion },
        })
      ).status,
    ).toBe(200);
    expect((await call(s, 'GET', '/api/v1/namespaces/default/pods/a')).status).toBe(404);
  });

  it('streams watch events from a revision and answers 410 for one outside its history window', async () => {
    const from = s.revision();
    const w = watchLines(s, `/apis/netplugin.org/v3/ippools?watch=1&resourceVersion=${from}`);
    const sel = watchLines(s, `/api/v1/pods?watch=true&resourceVersion=${from}&labelSelector=app%3Dz`);
    try {
      const c = await call(s, 'POST', '/apis/netplugin.org/v3/ippools', {
        metadata: { name: 'w1' },
        spec: { cidr: '10.5.0.0/16' },
      });
      await call(s, 'PUT', '/apis/netplugin.org/v3/ippools/w1', { ...c.body, spec: { cidr: '10.6.0.0/16' } });
      await call(s, 'DELETE', '/apis/netplugin.org/v3/ippools/w1');
      await call(s, 'POST', '/api/v1/namespaces/default/pods', { metadata: { name: 'z1', labels: { app: 'z' } } });
      await call(s, 'POST', '/api/v1/namespaces/default/pods', { metadata: { name: 'y1', labels: { app: 'y' } } });
      const lines = await w.until(3);
      expect(w.status()).toBe(200);
      expect(lines.map((l) => `${l.type} ${l.object.metadata.name} ${l.object.spec.cidr}`)).toEqual([
        'ADDED w1 10.5.0.0/16',
        'MODIFIED w1 10.6.0.0/16',
        'DELETED w1 10.6.0.0/16',
      ]);
      expect((await sel.until(1)).map((l) => l.object.metadata.name)).toEqual(['z1']);
    } finally {
      w.stop();
      sel.stop();
    }
    // historySize is 5: six writes later, `from` is out of the window.
    for (let i = 0; i < 6; i++)
      await call(s, 'POST', '/apis/netplugin.org/v3/ipamhandles', {
        metadata: { name: `h${i}` },
        spec: { handleID: `h${i}`, block: {} },
      });
    const old = watchLines(s, `/apis/netplugin.org/v3/ippools?watch=1&resourceVersion=${from}`);
    const lines = await old.until(1);
    old.stop();
    expect(lines[0]).toMatchObject({ type: 'ERROR', object: { kind: 'Status', code: 410, reason: 'Expired' } });
  });

  it('injects throttling', async () => {
    s.failNext(2, 429);
    expect((await call(s, 'GET', '/api/v1/nodes')).status).toBe(429);
    const r = await call(s, 'GET', '/api/v1/nodes');
    expect(r.body).toMatchObject({ kind: 'Status', reason: 'TooManyRequests', code: 429 });
    expect((await call(s, 'GET', '/api/v1/nodes')).status).toBe(200);
  });

  it('defaults NetworkPolicy policyTypes and port protocols as the API server does', async () => {
    const np = (name: string, spec: unknown) =>
      call(s, 'POST', '/apis/networking.k8s.io/v1/namespaces/default/networkpolicies', { metadata: { name }, spec });
    expect((await np('in', { podSelector: {}, ingress: [{ ports: [{ port: 80 }] }] })).body.spec).toMatchObject({
      policyTypes: ['Ingress'],
      ingress: [{ ports: [{ port: 80, protocol: 'TCP' }] }],
    });
    expect((await np('both', { podSelector: {}, egress: [{}] })).body.spec.policyTypes).toEqual(['Ingress', 'Egress']);
    expect((await np('eg', { podSelector: {}, policyTypes: ['Egress'] })).body.spec.policyTypes).toEqual(['Egress']);
    // Our own CRD of the same kind name is not defaulted.
    const ours = await call(s, 'POST', '/apis/netplugin.org/v3/namespaces/default/networkpolicies', {
      metadata: { name: 'x' },
      spec: { selector: 'all()' },
    });
    expect(ours.body.spec).toEqual({ selector: 'all()' });
  });

  it('serves ServiceAccounts and Leases with resourceVersion conflicts; Node deletion reaches watches; dropWatches ends them', async () => {
    expect(
      (await call(s, 'POST', '/api/v1/namespaces/default/serviceaccounts', { metadata: { name: 'sa' } })).status,
    ).toBe(201);
    const lease = (
      await call(s, 'POST', '/apis/coordination.k8s.io/v1/namespaces/kube-system/leases', {
        metadata: { name: 'l' },
        spec: { holderIdentity: 'a' },
      })
    ).body;
    const put = (holder: string) =>
      call(s, 'PUT', '/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/l', {
        ...lease,
        spec: { holderIdentity: holder },
      });
    expect((await put('b')).status).toBe(200);
    const stale = await put('c'); // same (now old) resourceVersion
    expect(stale.status).toBe(409);
    expect(stale.body.reason).toBe('Conflict');

    await call(s, 'POST', '/api/v1/nodes', { metadata: { name: 'gone' } });
    const w = watchLines(s, `/api/v1/nodes?watch=1&resourceVersion=${s.revision()}`);
    try {
      expect((await call(s, 'DELETE', '/api/v1/nodes/gone')).status).toBe(200);
      expect((await w.until(1)).map((l) => `${l.type} ${l.object.metadata.name}`)).toEqual(['DELETED gone']);
      s.dropWatches();
      await call(s, 'POST', '/api/v1/nodes', { metadata: { name: 'after' } });
      await new Promise((r) => setTimeout(r, 200));
      expect(w.lines).toHaveLength(1);
    } finally {
      w.stop();
    }
  });

  it('implements RFC 7386 and RFC 6902 patches', () => {
    expect(mergePatch({ a: { b: 1, c: 2 }, l: [1, 2] }, { a: { b: null, d: 3 }, l: [3] })).toEqual({
      a: { c: 2, d: 3 },
      l: [3],
    });
    expect(
      jsonPatch({ a: [1, 3] }, [
        { op: 'add', path: '/a/1', value: 2 },
        { op: 'add', path: '/a/-', value: 4 },
        { op: 'move', from: '/a', path: '/b' },
      ]),
    ).toEqual({ b: [1, 2, 3, 4] });
  });
});

describe('fake API server with authentication, driven by kubectl', () => {
  let s: FakeApiServer;
  let tmp: string;
  let kubeconfig: string;
  // stdin is closed: on a 401 kubectl would otherwise prompt for a password.
  const kubectlWith = (config: string, ...args: string[]) =>
    new Promise<{ code: number; stdout: string; stderr: string }>((resolve) => {
      const child = execFile(
        'kubectl',
        ['--kubeconfig', config, '--cache-dir', join(tmp, 'cache'), '--request-timeout', '10s', ...args],
        { timeout: 30_000 },
        (err, stdout, stderr) => resolve({ code: err ? ((err as { code?: number }).code ?? 1) : 0, stdout, stderr }),
      );
      child.stdin?.end();
    });
  const kubectl = (...args: string[]) => kubectlWith(kubeconfig, ...args);

  beforeAll(async () => {
    s = await startFakeApiServer({ tls: true, auth: { tokens: ['admin-token'] }, forbiddenTokens: ['weak-token'] });
    tmp = mkdtempSync(join(tmpdir(), 'netplugin-kubectl-'));
    kubeconfig = writeKubeconfig(tmp, s, { token: 'admin-token' });
    s.put('/api/v1/namespaces/default/pods/web-0', {
      metadata: { name: 'web-0', labels: { app: 'web' } },
      spec: { nodeName: 'n1' },
    });
    s.put('/api/v1/namespaces/kube-system/pods/dns-0', { metadata: { name: 'dns-0' }, spec: { nodeName: 'n2' } });
  });
  afterAll(async () => {
    await s?.stop();
    if (tmp) rmSync(tmp, { recursive: true, force: true });
  });

  it('answers 401 to unknown credentials and 403 for a token without permission', async () => {
    // (Without any credentials kubectl would prompt for a password; a wrong token gets the same 401.)
    const anon = writeKubeconfig(tmp, s, { token: 'bogus-token' });
    const weak = writeKubeconfig(tmp, s, { token: 'weak-token' });
    const r1 = await kubectlWith(anon, 'get', 'pods', '-o', 'json');
    expect(r1.code).not.toBe(0);
    expect(r1.stderr).toMatch(/Unauthorized|must be logged in/);
    const r2 = await kubectlWith(weak, 'get', 'pods', '-n', 'default', '-o', 'json');
    expect(r2.code).not.toBe(0);
    expect(r2.stderr).toContain('cannot list resource "pods" in API group "" in the namespace "default"');
  });

  it('lists pods in all namespaces', async () => {
    const r = await kubectl('get', 'pods', '-A', '-o', 'json');
    expect(r.stderr).toBe('');
    const list = JSON.parse(r.stdout);
    expect(
      list.items.map(
        (p: { metadata: { namespace: string; name: string } }) => `${p.metadata.namespace}/${p.metadata.name}`,
      ),
    ).toEqual(['default/web-0', 'kube-system/dns-0']);
    const sel = JSON.parse((await kubectl('get', 'pods', '-A', '-l', 'app=web', '-o', 'json')).stdout);
    expect(sel.items.map((p: { metadata: { name: string } }) => p.metadata.name)).toEqual(['web-0']);
  });

  it('applies, patches and conflicts on a custom resource', async () => {
    const file = join(tmp, 'pool.yaml');
    writeFileSync(
      file,
      'apiVersion: netplugin.org/v3\nkind: IPPool\nmetadata:\n  name: kubectl-pool\nspec:\n  cidr: 10.50.0.0/16\n  ' +
        'natOutgoing: true\n',
    );
    const a = await kubectl('apply', '--validate=false', '-f', file);
    expect(a.stderr).toBe('');
    expect(a.stdout).toContain('ippool.netplugin.org/kubectl-pool created');
    writeFileSync(
      file,
      'apiVersion: netplugin.org/v3\nkind: IPPool\nmetadata:\n  name: kubectl-pool\nspec:\n  cidr: 10.50.0.0/16\n  ' +
        'natOutgoing: false\n',
    );
    const a2 = await kubectl('apply', '--validate=false', '-f', file);
    expect(a2.stdout).toContain('ippool.netplugin.org/kubectl-pool configured');
    const p = await kubectl('patch', 'ippool', 'kubectl-pool', '--type=merge', '-p', '{"spec":{"blockSize":28}}');
    expect(p.stdout).toContain('ippool.netplugin.org/kubectl-pool patched');
    const got = JSON.parse((await kubectl('get', 'ippool', 'kubectl-pool', '-o', 'json')).stdout);
    expect(got.spec).toEqual({ cidr: '10.50.0.0/16', natOutgoing: false, blockSize: 28 });
    const pp = await kubectl('patch', 'pod', 'web-0', '-n', 'default', '-p', '{"metadata":{"annotations":{"x":"y"}}}');
    expect(pp.stdout).toContain('pod/web-0 patched');
    // A replace with an old resourceVersion must fail like on a real cluster.
    const staleFile = join(tmp, 'stale.json');
    writeFileSync(staleFile, JSON.stringify({ ...got, metadata: { ...got.metadata, resourceVersion: '1' } }));
    const c = await kubectl('replace', '--validate=false', '-f', staleFile);
    expect(c.code).not.toBe(0);
    expect(c.stderr).toContain(
      'the object has been modified; please apply your changes to the latest version and try again',
    );
  });
});
