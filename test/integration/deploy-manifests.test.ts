// The Kubernetes manifests in deploy/ as shipped: every cross-reference
// (ServiceAccounts, roles, ConfigMap keys, Secrets, volumes and their mounts,
// container flags against each executable's real --help, probe ports against
// --health-addr), the install-cni init container run for real with the
// ConfigMap's template and environment (both datastore variants, etcd TLS from
// the Secret mount), and Debian's kubectl applying every file with
// --dry-run=client against the fake API server (discovery, kind mapping).
import { execFile, execFileSync } from 'node:child_process';
import { cpSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseAllDocuments } from 'yaml';
import { runCtl } from '../../src/ctl/index.js';
import { parseNetconf } from '../../src/config/index.js';
import { startFakeApiServer, writeKubeconfig, type FakeApiServer } from '../support/fake-apiserver.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const DEPLOY = join(ROOT, 'deploy');
const DIST = join(ROOT, 'dist');
type Obj = { apiVersion: string; kind: string; metadata: { name: string; namespace?: string }; [k: string]: any };

function load(file: string): Obj[] {
  return parseAllDocuments(readFileSync(join(DEPLOY, file), 'utf8'))
    .map((d) => {
      if (d.errors.length) throw new Error(`${file}: ${d.errors[0]!.message}`);
      return d.toJS() as Obj | null;
    })
    .filter((o): o is Obj => !!o);
}

const MANIFESTS = readdirSync(DEPLOY).filter((f) => /\.ya?ml$/.test(f));
const rbac = load('rbac.yaml');
const ds = load('netplugin-node-daemonset.yaml').find((o) => o.kind === 'DaemonSet')!;
const pod = ds.spec.template.spec;
const containers: any[] = [...pod.initContainers, ...pod.containers];
const CONFIG_VARIANTS = ['netplugin-config.yaml', 'netplugin-config-etcd.yaml'];
const configOf = (file: string) => load(file).find((o) => o.kind === 'ConfigMap')!;

/** `node dist/x.mjs [sub] --help` of a container's command. */
function helpOf(command: string[]): string {
  expect(command[0]).toBe('node');
  const script = command[1]!.replace('/opt/netplugin/dist/', '');
  return execFileSync(process.execPath, [join(DIST, script), ...command.slice(2), '--help'], { encoding: 'utf8' });
}

const flagsOf = (args: string[]) => args.filter((a) => a.startsWith('--')).map((a) => a.split('=')[0]!);

describe('deploy/ cross-references', () => {
  it('every manifest parses and names a kind', () => {
    expect(MANIFESTS).toEqual(
      expect.arrayContaining(['rbac.yaml', 'netplugin-node-daemonset.yaml', ...CONFIG_VARIANTS]),
    );
    for (const f of MANIFESTS)
      for (const o of load(f))
        expect(o.kind && o.metadata?.name, `${f}: ${JSON.stringify(o).slice(0, 80)}`).toBeTruthy();
  });

  it('the DaemonSet runs as a ServiceAccount rbac.yaml creates, and every binding names roles and accounts that exist', () => {
    const sas = rbac
      .filter((o) => o.kind === 'ServiceAccount')
      .map((o) => `${o.metadata.namespace}/${o.metadata.name}`);
    expect(sas).toContain(`${ds.metadata.namespace}/${pod.serviceAccountName}`);
    for (const b of rbac.filter((o) => o.kind.endsWith('RoleBinding'))) {
      const role = rbac.find((o) => o.kind === b.roleRef.kind && o.metadata.name === b.roleRef.name);
      expect(role, `${b.metadata.name} -> ${b.roleRef.kind}/${b.roleRef.name}`).toBeDefined();
      for (const s of b.subjects) expect(sas).toContain(`${s.namespace}/${s.name}`);
    }
    // The agent may request tokens for the plugin's account, and only for it.
    const tokenRole = rbac.find(
      (o) => o.kind === 'Role' && o.rules.some((r: any) => r.resources.includes('serviceaccounts/token')),
    )!;
    const plugin = containers
      .find((c) => c.name === 'netplugin-node')!
      .args.find((a: string) => a.startsWith('--plugin-service-account='))!
      .split('=')[1];
    expect(tokenRole.rules[0].resourceNames).toEqual([plugin]);
    expect(sas).toContain(`kube-system/${plugin}`);
  });

  it('every ConfigMap key and Secret the DaemonSet refers to exists, in both datastore variants', () => {
    for (const file of CONFIG_VARIANTS) {
      const cm = configOf(file);
      for (const c of containers) {
        for (const e of c.env ?? []) {
          const ref = e.valueFrom?.configMapKeyRef;
          if (!ref) continue;
          expect(ref.name, `${c.name} ${e.name}`).toBe(cm.metadata.name);
          expect(Object.keys(cm.data), `${file}: ${c.name} ${e.name}`).toContain(ref.key);
        }
      }
      for (const v of pod.volumes.filter((v: any) => v.configMap)) {
        expect(v.configMap.name).toBe(cm.metadata.name);
        for (const it of v.configMap.items ?? []) expect(Object.keys(cm.data)).toContain(it.key);
      }
    }
    const secrets = load('netplugin-config-etcd.yaml')
      .filter((o) => o.kind === 'Secret')
      .map((o) => o.metadata.name);
    for (const v of pod.volumes.filter((v: any) => v.secret)) {
      expect(secrets).toContain(v.secret.secretName);
      // The kubernetes variant has no Secret: the pod must still start.
      expect(v.secret.optional).toBe(true);
    }
  });

  it('volumes and mounts match one to one; $(VARS) in args are defined in the container env', () => {
    const volumes = pod.volumes.map((v: any) => v.name);
    expect(new Set(volumes).size).toBe(volumes.length);
    const used = new Set<string>();
    for (const c of containers) {
      for (const m of c.volumeMounts) {
        expect(volumes, `${c.name} mounts ${m.name}`).toContain(m.name);
        used.add(m.name);
      }
      const env = (c.env ?? []).map((e: any) => e.name);
      for (const a of c.args)
        for (const m of a.matchAll(/\$\(([A-Z_]+)\)/g)) expect(env, `${c.name}: ${a}`).toContain(m[1]);
    }
    expect([...used].sort()).toEqual([...volumes].sort());
  });

  it("container flags exist in each executable's real --help; probes hit --health-addr; Linux nodes only", () => {
    for (const c of containers) {
      const help = helpOf(c.command);
      for (const f of flagsOf(c.args)) expect(help, `${c.name}: ${f} is not in its --help`).toContain(f);
    }
    const agent = pod.containers.find((c: any) => c.name === 'netplugin-node');
    const addr = agent.args.find((a: string) => a.startsWith('--health-addr=')).split('=')[1];
    const [host, port] = addr.split(':');
    for (const [probe, path] of [
      ['livenessProbe', '/healthz'],
      ['readinessProbe', '/readyz'],
    ] as const) {
      expect(agent[probe].httpGet).toEqual({ host, path, port: Number(port) });
    }
    expect(pod.nodeSelector).toEqual({ 'kubernetes.io/os': 'linux' });
    // The image scripts/build-image tags: this package's version.
    const { version } = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { version: string };
    for (const c of containers) expect(c.image, c.name).toBe(`netplugin/node:${version}`);
    expect(pod.priorityClassName).toBe('system-node-critical');
    expect(pod.tolerations).toEqual([{ operator: 'Exists' }]);
    // The agent reads the conflist and the kubeconfig where install-cni and itself write them.
    const conf = agent.args.find((a: string) => a.startsWith('--config=')).split('=')[1];
    expect(agent.volumeMounts.some((m: any) => conf.startsWith(m.mountPath + '/'))).toBe(true);
  });
});

/** Every object of every manifest in deploy/, with the file it comes from. */
const ALL = MANIFESTS.flatMap((file) => load(file).map((o) => ({ file, o })));
const WORKLOAD_KINDS = new Set(['DaemonSet', 'Deployment', 'StatefulSet', 'Job', 'ReplicaSet']);

describe('deploy/ cross-references, every file', () => {
  const named = (kind: string, name: string, ns?: string) =>
    ALL.filter(
      ({ o }) =>
        o.kind === kind && o.metadata.name === name && (ns === undefined || (o.metadata.namespace ?? 'default') === ns),
    );
  const workloads = ALL.filter(({ o }) => WORKLOAD_KINDS.has(o.kind));
  const where = (file: string, o: Obj) => `${file}: ${o.kind}/${o.metadata.name}`;

  it('finds the workloads of every file that has one', () => {
    expect(workloads.map(({ file }) => file).sort()).toEqual([
      'netplugin-flows.yaml',
      'netplugin-kube-controllers.yaml',
      'netplugin-node-daemonset.yaml',
      'netplugin-operator.yaml',
    ]);
  });

  it('every workload runs as a ServiceAccount some manifest creates in its namespace', () => {
    for (const { file, o } of workloads) {
      const sa = o.spec.template.spec.serviceAccountName;
      expect(sa, `${where(file, o)} names no serviceAccountName`).toBeTruthy();
      expect(
        named('ServiceAccount', sa, o.metadata.namespace),
        `${where(file, o)} runs as ServiceAccount ${o.metadata.namespace}/${sa}, which no file in deploy/ creates`,
      ).not.toEqual([]);
    }
  });

  it('every binding names a role and ServiceAccounts that exist; token rules name existing accounts', () => {
    for (const { file, o } of ALL.filter(({ o }) => o.kind === 'RoleBinding' || o.kind === 'ClusterRoleBinding')) {
      const ref = o.roleRef;
      const role = named(ref.kind, ref.name, ref.kind === 'Role' ? o.metadata.namespace : undefined);
      expect(role, `${where(file, o)} -> ${ref.kind}/${ref.name}`).not.toEqual([]);
      for (const s of o.subjects ?? []) {
        if (s.kind !== 'ServiceAccount') continue;
        expect(
          named('ServiceAccount', s.name, s.namespace),
          `${where(file, o)} -> ServiceAccount ${s.namespace}/${s.name}`,
        ).not.toEqual([]);
      }
    }
    for (const { file, o } of ALL.filter(({ o }) => o.kind === 'Role' || o.kind === 'ClusterRole')) {
      for (const r of o.rules ?? []) {
        if (!r.resources?.some((x: string) => x.startsWith('serviceaccounts'))) continue;
        for (const n of r.resourceNames ?? [])
          expect(
            named('ServiceAccount', n, o.metadata.namespace),
            `${where(file, o)} -> ServiceAccount ${n}`,
          ).not.toEqual([]);
      }
    }
  });

  it('every ConfigMap and Secret a workload refers to (env, envFrom, volumes) exists with the keys it reads', () => {
    const keysOf = (kind: 'ConfigMap' | 'Secret', name: string, ns: string) =>
      named(kind, name, ns).map(({ o }) => new Set([...Object.keys(o.data ?? {}), ...Object.keys(o.stringData ?? {})]));
    const check = (what: string, kind: 'ConfigMap' | 'Secret', name: string, ns: string, keys: string[]) => {
      const found = keysOf(kind, name, ns);
      expect(found, `${what}: ${kind} ${ns}/${name} is in no file of deploy/`).not.toEqual([]);
      for (const k of keys)
        expect(
          found.some((f) => f.has(k)),
          `${what}: ${kind} ${ns}/${name} has no key ${k}`,
        ).toBe(true);
    };
    for (const { file, o } of workloads) {
      const spec = o.spec.template.spec;
      const ns = o.metadata.namespace ?? 'default';
      for (const c of [...(spec.initContainers ?? []), ...spec.containers]) {
        const what = `${where(file, o)} container ${c.name}`;
        for (const e of c.env ?? []) {
          if (e.valueFrom?.configMapKeyRef)
            check(what, 'ConfigMap', e.valueFrom.configMapKeyRef.name, ns, [e.valueFrom.configMapKeyRef.key]);
          if (e.valueFrom?.secretKeyRef)
            check(what, 'Secret', e.valueFrom.secretKeyRef.name, ns, [e.valueFrom.secretKeyRef.key]);
        }
        for (const e of c.envFrom ?? []) {
          if (e.configMapRef) check(what, 'ConfigMap', e.configMapRef.name, ns, []);
          if (e.secretRef) check(what, 'Secret', e.secretRef.name, ns, []);
        }
      }
      for (const v of spec.volumes ?? []) {
        if (v.configMap)
          check(
            `${where(file, o)} volume ${v.name}`,
            'ConfigMap',
            v.configMap.name,
            ns,
            (v.configMap.items ?? []).map((i: any) => i.key),
          );
        if (v.secret)
          check(
            `${where(file, o)} volume ${v.secret.secretName}`,
            'Secret',
            v.secret.secretName,
            ns,
            (v.secret.items ?? []).map((i: any) => i.key),
          );
      }
    }
  });

  it('every container names the one versioned image scripts/build-image tags', () => {
    const { version } = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { version: string };
    for (const { file, o } of workloads) {
      const spec = o.spec.template.spec;
      for (const c of [...(spec.initContainers ?? []), ...spec.containers])
        expect(c.image, `${where(file, o)} container ${c.name}`).toBe(`netplugin/node:${version}`);
    }
  });

  it("every container's flags (command and args) exist in its executable's real --help", () => {
    for (const { file, o } of workloads) {
      const spec = o.spec.template.spec;
      for (const c of [...(spec.initContainers ?? []), ...spec.containers]) {
        const positional = c.command
          .slice(2)
          .filter((a: string, i: number, all: string[]) => !a.startsWith('-') && !all[i - 1]?.startsWith('--'));
        const help = helpOf([c.command[0], c.command[1], ...positional]);
        for (const f of flagsOf([...c.command.slice(2), ...(c.args ?? [])]))
          expect(help, `${where(file, o)} container ${c.name}: ${f} is not in its --help`).toContain(f);
      }
    }
  });

  it('metrics: each scrape annotation names the port a container serves --metrics-addr on', () => {
    for (const { file, o } of workloads.filter(
      ({ o }) => o.spec.template.metadata?.annotations?.['prometheus.io/scrape'] === 'true',
    )) {
      const port = o.spec.template.metadata.annotations['prometheus.io/port'];
      const args = o.spec.template.spec.containers
        .flatMap((c: any) => [...(c.command ?? []), ...(c.args ?? [])])
        .join(' ');
      expect(args, where(file, o)).toMatch(new RegExp(`--metrics-addr[= ][^ ]*:${port}(\\s|$)`));
      expect(
        o.spec.template.spec.containers.flatMap((c: any) => c.ports ?? []).map((p: any) => String(p.containerPort)),
      ).toContain(port);
    }
    expect(
      workloads
        .filter(({ o }) => o.spec.template.metadata?.annotations?.['prometheus.io/scrape'] === 'true')
        .map(({ file }) => file)
        .sort(),
    ).toEqual(['netplugin-kube-controllers.yaml', 'netplugin-node-daemonset.yaml']);
  });
});

describe('install-cni as the init container runs it', () => {
  let tmp: string;
  let pkg: string;
  beforeAll(() => {
    tmp = mkdtempSync(join(tmpdir(), `deploy-manifests-${process.pid}-`));
    // The image's package without node_modules (copying ~100 MB twice proves nothing more).
    pkg = join(tmp, 'image/opt/netplugin');
    mkdirSync(join(pkg, 'dist'), { recursive: true });
    for (const f of ['netplugin.mjs', 'netplugin-ipam.mjs']) cpSync(join(DIST, f), join(pkg, 'dist', f));
    cpSync(join(ROOT, 'package.json'), join(pkg, 'package.json'));
    cpSync(join(ROOT, 'prebuilds'), join(pkg, 'prebuilds'), { recursive: true });
  });
  afterAll(() => rmSync(tmp, { recursive: true, force: true }));

  for (const file of CONFIG_VARIANTS) {
    it(`writes a conflist the plugin accepts from ${file}`, async () => {
      // log_format json (the ConfigMap says text): the plugin's own log follows the ConfigMap's setting.
      const shipped = configOf(file);
      expect(shipped.data.log_format).toBe('text');
      const cm = { ...shipped, data: { ...shipped.data, log_format: 'json' } };
      const init = pod.initContainers.find((c: any) => c.name === 'install-cni');
      const dir = join(tmp, file);
      const host = join(dir, 'host');
      const mounts: Record<string, string> = {
        '/etc/netplugin/config': join(dir, 'config'),
        '/etc/netplugin/etcd-secrets': join(dir, 'secrets'),
        '/host': host,
      };
      mkdirSync(mounts['/etc/netplugin/config']!, { recursive: true });
      writeFileSync(join(mounts['/etc/netplugin/config']!, 'cni_network_config'), cm.data.cni_network_config);
      const etcd = cm.data.datastore_type === 'etcdv3';
      mkdirSync(mounts['/etc/netplugin/etcd-secrets']!, { recursive: true });
      if (etcd)
        for (const k of ['etcd-key', 'etcd-cert', 'etcd-ca'])
          writeFileSync(join(mounts['/etc/netplugin/etcd-secrets']!, k), `PEM ${k}\n`);
      // The container's environment, from the ConfigMap and the downward API.
      const env: Record<string, string> = {};
      for (const e of init.env)
        env[e.name] = e.valueFrom?.configMapKeyRef
          ? cm.data[e.valueFrom.configMapKeyRef.key]
          : e.valueFrom?.fieldRef
            ? 'node-a.example'
            : e.value;
      const args = init.args.map((a: string) => {
        let out = a.replace(/\$\(([A-Z_]+)\)/g, (_m: string, v: string) => env[v]!);
        for (const [from, to] of Object.entries(mounts)) out = out.replace(`=${from}`, `=${to}`);
        return out;
      });
      let err = '';
      const code = await runCtl(['install-cni', ...args], {
        env,
        stdout: () => {},
        stderr: (s) => (err += s),
        packageDir: pkg,
        nodePath: '/usr/bin/node',
        inPod: true,
      });
      expect(err.replace(/warning: the host has no node[^\n]*\n/, ''), err).toBe('');
      expect(code).toBe(0);
      const written = JSON.parse(readFileSync(join(host, 'etc/cni/net.d/10-netplugin.conflist'), 'utf8'));
      const entry = written.plugins.find((p: any) => p.type === 'netplugin');
      const conf = parseNetconf(
        { name: written.name, cniVersion: written.cniVersion, ...entry },
        { pluginType: 'netplugin' },
      );
      expect(conf).toMatchObject({
        log_format: 'json',
        datastore_type: cm.data.datastore_type,
        nodename: 'node-a.example',
        mtu: Number(cm.data.veth_mtu),
        kubernetes: { kubeconfig: '/etc/cni/net.d/netplugin-kubeconfig' },
      });
      if (etcd) {
        expect(entry).toMatchObject({
          etcd_endpoints: cm.data.etcd_endpoints,
          etcd_key_file: '/etc/cni/net.d/netplugin-tls/etcd-key',
          etcd_cert_file: '/etc/cni/net.d/netplugin-tls/etcd-cert',
          etcd_ca_cert_file: '/etc/cni/net.d/netplugin-tls/etcd-ca',
        });
        for (const k of ['etcd-key', 'etcd-cert', 'etcd-ca']) {
          const p = join(host, 'etc/cni/net.d/netplugin-tls', k);
          expect(readFileSync(p, 'utf8')).toBe(`PEM ${k}\n`);
          expect(statSync(p).mode & 0o777).toBe(0o600);
        }
      } else {
        expect(entry.etcd_key_file).toBeUndefined();
      }
      // Host paths, never the image's: the package copy and the fallback file.
      expect(readFileSync(join(host, 'opt/cni/bin/netplugin.fallback'), 'utf8')).toBe('\n/opt/netplugin\n');
      expect(statSync(join(host, 'opt/netplugin/dist/netplugin.mjs')).isFile()).toBe(true);
    });
  }
});

describe('kubectl --dry-run=client', () => {
  let api: FakeApiServer;
  let kubeconfig: string;
  beforeAll(async () => {
    api = await startFakeApiServer({ tls: true, auth: { tokens: ['admin'] } });
    kubeconfig = writeKubeconfig(api.dir, api, { token: 'admin' });
  });
  afterAll(async () => api?.stop());

  // Asynchronous: the API server runs in this process.
  const kubectl = (args: string[]) =>
    promisify(execFile)('kubectl', ['--kubeconfig', kubeconfig, ...args], { encoding: 'utf8', timeout: 60_000 });

  it('applies every manifest and CRD', async () => {
    const files = [...MANIFESTS.map((f) => join(DEPLOY, f)), join(DEPLOY, 'crds')];
    for (const f of files) {
      const r = await kubectl(['apply', '--dry-run=client', '--validate=false', '-f', f]);
      const objs = statSync(f).isDirectory() ? readdirSync(f).length : load(f.slice(DEPLOY.length + 1)).length;
      expect(
        r.stdout
          .trim()
          .split('\n')
          .filter((l) => /\(dry run\)$/.test(l)),
        `${f}:\n${r.stdout}${r.stderr}`,
      ).toHaveLength(objs);
    }
  });
});
