// netpluginctl the way an operator points it at a real cluster, against the
// fake API server over HTTPS: --kubeconfig, KUBECONFIG with several files,
// ~/.kube/config, --context, exec credential plugins (v1 and v1beta1, cached
// until expiry), the NetpluginAPIConfig file (--config and the default path),
// kubectl-style -l, flag suggestions and --log-format json errors.
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startFakeApiServer, writeKubeconfig, type FakeApiServer } from '../support/fake-apiserver.js';
import { CTL, runBuiltCtl } from '../support/ctl.js';
import { fromKubectlSelector, parseSelector } from '../../src/selector/index.js';

const TOKEN = 'real-cluster-token';
const EXEC_TOKEN = 'exec-plugin-token';
const LIMITED = 'limited-token';

let server: FakeApiServer;
let tmp: string;
let kubeconfig: string;

beforeAll(async () => {
  if (!existsSync(CTL))
    throw new Error(`dist/netpluginctl.mjs is missing: run 'npm run build' before the integration tests`);
  server = await startFakeApiServer({ tls: true, auth: { tokens: [TOKEN, EXEC_TOKEN] }, forbiddenTokens: [LIMITED] });
  tmp = mkdtempSync(join(tmpdir(), `ctl-real-cluster-${process.pid}-`));
  kubeconfig = writeKubeconfig(server.dir, server, { token: TOKEN, inline: true });
  const pools = [
    ['pool-a', '10.131.0.0/24', 'a'],
    ['pool-b', '10.131.1.0/24', 'b'],
  ];
  for (const [name, cidr, zone] of pools) {
    const r = await ctl(
      ['--kubeconfig', kubeconfig, 'apply', '-f', '-'],
      {},
      `apiVersion: netplugin.org/v3\nkind: IPPool\nmetadata: {name: ${name}, labels: {zone: ${zone}}}\nspec: {cidr: ` +
        `${cidr}, blockSize: 28}\n`,
    );
    expect(r.err).toBe('');
  }
});
afterAll(async () => {
  await server?.stop();
  if (tmp) rmSync(tmp, { recursive: true, force: true });
});

// Asynchronous (runBuiltCtl): the fake API server runs in this process.
const ctl = (args: string[], env: Record<string, string> = {}, input = '') =>
  runBuiltCtl(args, { env: { HOME: join(tmp, 'nohome'), ...env }, input });

const poolNames = (out: string) =>
  (JSON.parse(out) as { items?: Array<{ metadata: { name: string } }>; metadata?: { name: string } }).items?.map(
    (i) => i.metadata.name,
  ) ?? [];

/** A kubeconfig whose user runs `plugin` (an exec credential plugin). */
function execKubeconfig(name: string, apiVersion: string, plugin: string, extra: Record<string, unknown> = {}): string {
  const kc = JSON.parse(
    JSON.stringify({
      apiVersion: 'v1',
      kind: 'Config',
      'current-context': 'exec',
      clusters: [
        {
          name: 'fake',
          cluster: {
            server: server.url,
            'certificate-authority-data': readFileSync(server.caFile!).toString('base64'),
          },
        },
      ],
      users: [
        {
          name: 'exec-user',
          user: {
            exec: {
              apiVersion,
              command: plugin,
              args: ['--cluster', 'fake'],
              env: [{ name: 'PLUGIN_LOG', value: join(tmp, `${name}.runs`) }],
              ...extra,
            },
          },
        },
      ],
      contexts: [{ name: 'exec', context: { cluster: 'fake', user: 'exec-user' } }],
    }),
  );
  const p = join(tmp, `${name}.kubeconfig`);
  writeFileSync(p, JSON.stringify(kc));
  return p;
}

/** An exec plugin: logs each run (its args and KUBERNETES_EXEC_INFO) and prints an ExecCredential. */
function writePlugin(name: string, answerVersion: string, expiresInSeconds: number): string {
  const p = join(tmp, name);
  writeFileSync(
    p,
    `#!/bin/sh
printf '%s %s\\n' "$*" "$KUBERNETES_EXEC_INFO" >> "$PLUGIN_LOG"
exp=$(date -u -d "@$(( $(date +%s) + ${expiresInSeconds} ))" +%Y-%m-%dT%H:%M:%SZ)
printf '{"apiVersion":"${answerVersion}","kind":"ExecCredential","status":{"token":"${EXEC_TOKEN}","expirationTimestamp":"%s"}}' "$exp"
`,
  );
  chmodSync(p, 0o755);
  return p;
}

describe('netpluginctl against a real cluster', () => {
  it('--kubeconfig alone selects the kubernetes datastore; -l takes kubectl syntax', async () => {
    const all = await ctl(['--kubeconfig', kubeconfig, 'get', 'ippools', '-o', 'json']);
    expect(all.err).toBe('');
    expect(poolNames(all.out)).toEqual(['pool-a', 'pool-b']);
    for (const sel of ['zone=a', 'zone==a', 'zone in (a)', "zone == 'a'"]) {
      const r = await ctl(['get', 'ippools', '-l', sel, '-o', 'json', '--kubeconfig', kubeconfig]);
      expect(r.err, sel).toBe('');
      expect(poolNames(r.out), sel).toEqual(['pool-a']);
    }
    expect(
      poolNames((await ctl(['--kubeconfig', kubeconfig, 'get', 'ippools', '-l', 'zone!=a,zone', '-o', 'json'])).out),
    ).toEqual(['pool-b']);
    const bad = await ctl(['--kubeconfig', kubeconfig, 'get', 'ippools', '-l', 'zone===a']);
    expect(bad.code).toBe(1);
    expect(bad.err).toMatch(/-l "zone===a": .*kubectl's form works too/s);
  });

  it('merges KUBECONFIG files, falls back to ~/.kube/config, and --context picks another user', async () => {
    // File 1: clusters and users; file 2: contexts and current-context.
    const ca = readFileSync(server.caFile!).toString('base64');
    const f1 = join(tmp, 'part1.yaml');
    const f2 = join(tmp, 'part2.yaml');
    writeFileSync(
      f1,
      JSON.stringify({
        apiVersion: 'v1',
        kind: 'Config',
        clusters: [{ name: 'c', cluster: { server: server.url, 'certificate-authority-data': ca } }],
        users: [
          { name: 'admin', user: { token: TOKEN } },
          { name: 'limited', user: { token: LIMITED } },
        ],
      }),
    );
    writeFileSync(
      f2,
      JSON.stringify({
        apiVersion: 'v1',
        kind: 'Config',
        'current-context': 'limited',
        contexts: [
          { name: 'admin', context: { cluster: 'c', user: 'admin' } },
          { name: 'limited', context: { cluster: 'c', user: 'limited' } },
        ],
      }),
    );
    const env = { DATASTORE_TYPE: 'kubernetes', KUBECONFIG: `${f1}:${f2}` };
    const forbidden = await ctl(['get', 'ippools'], env);
    expect(forbidden.code).toBe(1);
    expect(forbidden.err).toMatch(/forbidden|refused our credentials/i);
    const admin = await ctl(['get', 'ippools', '--context', 'admin', '-o', 'json'], env);
    expect(admin.err).toBe('');
    expect(poolNames(admin.out)).toHaveLength(2);
    const unknown = await ctl(['--context', 'prod', 'get', 'ippools'], env);
    expect(unknown.err).toContain('context "prod" is not in');
    expect(unknown.err).toContain('contexts: admin, limited');

    const home = join(tmp, 'home');
    mkdirSync(join(home, '.kube'), { recursive: true });
    writeFileSync(join(home, '.kube/config'), readFileSync(kubeconfig));
    const viaHome = await ctl(['get', 'ippools', '-o', 'json'], { DATASTORE_TYPE: 'kubernetes', HOME: home });
    expect(viaHome.err).toBe('');
    expect(poolNames(viaHome.out)).toHaveLength(2);
  });

  for (const apiVersion of ['client.authentication.k8s.io/v1', 'client.authentication.k8s.io/v1beta1']) {
    it(`runs an exec credential plugin (${apiVersion}) once per credential lifetime`, async () => {
      const tag = apiVersion.split('/')[1]!;
      const plugin = writePlugin(`plugin-${tag}`, apiVersion, 3600);
      const kc = execKubeconfig(
        `exec-${tag}`,
        apiVersion,
        plugin,
        tag === 'v1' ? { interactiveMode: 'Never', provideClusterInfo: true } : {},
      );
      // ipam show makes several API requests: one plugin run serves them all.
      const r = await ctl(['--kubeconfig', kc, 'ipam', 'show']);
      expect(r.err).toBe('');
      expect(r.code).toBe(0);
      const runs = readFileSync(join(tmp, `exec-${tag}.runs`), 'utf8')
        .trim()
        .split('\n');
      expect(runs).toHaveLength(1);
      const [args, info] = [
        runs[0]!.slice(0, runs[0]!.indexOf(' {')),
        JSON.parse(runs[0]!.slice(runs[0]!.indexOf(' {') + 1)),
      ];
      expect(args).toBe('--cluster fake');
      expect(info).toMatchObject({ apiVersion, kind: 'ExecCredential', spec: { interactive: false } });
      if (tag === 'v1') expect(info.spec.cluster.server).toBe(server.url);
    });
  }

  it('re-runs a plugin whose credential is about to expire, and reports plugin mistakes by name', async () => {
    const short = writePlugin('plugin-short', 'client.authentication.k8s.io/v1beta1', 2);
    const kc = execKubeconfig('exec-short', 'client.authentication.k8s.io/v1beta1', short);
    const r = await ctl(['--kubeconfig', kc, 'ipam', 'show']);
    expect(r.err).toBe('');
    expect(readFileSync(join(tmp, 'exec-short.runs'), 'utf8').trim().split('\n').length).toBeGreaterThan(1);

    const wrong = writePlugin('plugin-wrong', 'client.authentication.k8s.io/v1beta1', 3600);
    const mismatch = await ctl([
      '--kubeconfig',
      execKubeconfig('exec-wrong', 'client.authentication.k8s.io/v1', wrong, { interactiveMode: 'IfAvailable' }),
      'get',
      'ippools',
    ]);
    expect(mismatch.code).toBe(1);
    expect(mismatch.err).toContain('the plugin is configured for client.authentication.k8s.io/v1 but');
    const missing = await ctl([
      '--kubeconfig',
      execKubeconfig('exec-missing', 'client.authentication.k8s.io/v1', join(tmp, 'no-such-plugin'), {
        interactiveMode: 'Never',
        installHint: 'install it with: apt-get install the-plugin',
      }),
      'get',
      'ippools',
    ]);
    expect(missing.err).toMatch(/command ".*no-such-plugin" not found \(install it with: apt-get install the-plugin\)/);
    const noMode = await ctl([
      '--kubeconfig',
      execKubeconfig('exec-nomode', 'client.authentication.k8s.io/v1', wrong),
      'get',
      'ippools',
    ]);
    expect(noMode.err).toContain('interactiveMode is required with client.authentication.k8s.io/v1');
  });

  it('reads a NetpluginAPIConfig file from --config and from the default path', async () => {
    const cfg = join(tmp, 'netpluginctl.cfg');
    writeFileSync(
      cfg,
      `apiVersion: netplugin.org/v3\nkind: NetpluginAPIConfig\nmetadata: {}\nspec:\n  datastoreType: kubernetes\n  ` +
        `kubeconfig: ${kubeconfig}\n`,
    );
    const viaFlag = await ctl(['--config', cfg, 'get', 'ippools', '-o', 'json']);
    expect(viaFlag.err).toBe('');
    expect(poolNames(viaFlag.out)).toHaveLength(2);
    const viaDefault = await ctl(['get', 'ippools', '-o', 'json'], { NETPLUGINCTL_CONFIG: cfg });
    expect(viaDefault.err).toBe('');
    expect(poolNames(viaDefault.out)).toHaveLength(2);
    writeFileSync(
      cfg,
      `apiVersion: netplugin.org/v3\nkind: NetpluginAPIConfig\nspec: {datastoreType: kubernetes, kubeConfig: /x}\n`,
    );
    const typo = await ctl(['--config', cfg, 'get', 'ippools']);
    expect(typo.err).toContain('spec.kubeConfig is not a known field');
  });

  it('suggests the closest flag, and prints errors as JSON with --log-format json', async () => {
    const r = await ctl(['--kubeconfig', kubeconfig, 'get', 'ippools', '--outptu', 'yaml']);
    expect(r.code).toBe(1);
    expect(r.err).toContain("unknown flag --outptu for 'get'; did you mean --output?");
    const g = await ctl(['--kubecofig', kubeconfig, 'get', 'ippools']);
    expect(g.err).toContain('did you mean --kubeconfig?');
    const j = await ctl(['--log-format', 'json', 'get', 'ippools', '--kubeconfig', join(tmp, 'absent')]);
    expect(j.code).toBe(1);
    const line = JSON.parse(j.err.trim());
    expect(line).toMatchObject({ level: 'ERROR' });
    expect(line.msg).toContain(join(tmp, 'absent'));
  });
});

describe('kubectl selector translation', () => {
  it('turns every kubectl form into an equivalent selector', () => {
    const cases: Array<[string, Record<string, string>, boolean]> = [
      ['zone=a', { zone: 'a' }, true],
      ['zone=a', { zone: 'b' }, false],
      ['zone!=a', {}, true],
      ['zone in (a, b),tier', { zone: 'b', tier: 'x' }, true],
      ['zone notin (a,b)', { zone: 'a' }, false],
      ['!legacy', { legacy: '1' }, false],
      ['example.com/role=web', { 'example.com/role': 'web' }, true],
    ];
    for (const [k, labels, want] of cases)
      expect(parseSelector(fromKubectlSelector(k)!).matches(labels), `${k} ${JSON.stringify(labels)}`).toBe(want);
    expect(fromKubectlSelector('zone===a')).toBeUndefined();
  });
});
