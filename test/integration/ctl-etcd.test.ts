// The built netpluginctl (dist/netpluginctl.mjs) as a subprocess against a real
// etcd: resources, IPAM inspection and repair, datastore init, and install-cni
// with the real native shim and its per-exec fallback.
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startEtcd, type EtcdServer } from '../support/etcd.js';
import { openDatastore } from '../../src/datastore/index.js';
import type { Datastore } from '../../src/datastore/types.js';
import { API_VERSION } from '../../src/model/resources.js';
import { createIpam } from '../../src/ipam/index.js';
import pkg from '../../package.json' with { type: 'json' };
import { workloadEndpoint } from '../support/builders.js';
import { startBuiltCtl } from '../support/ctl.js';

const root = resolve(import.meta.dirname, '../..');
const CTL = join(root, 'dist/netpluginctl.mjs');

let etcd: EtcdServer;
let ds: Datastore;
let tmp: string;

beforeAll(async () => {
  for (const f of ['dist/netpluginctl.mjs', 'dist/netplugin.mjs', 'dist/netplugin-ipam.mjs']) {
    if (!existsSync(join(root, f)))
      throw new Error(`${f} is missing: run 'npm run build' (or node scripts/build.mjs) before the integration tests`);
  }
  tmp = mkdtempSync(join(tmpdir(), `ctl-int-${process.pid}-`));
  etcd = await startEtcd();
  ds = await openDatastore({ datastore_type: 'etcdv3', etcd_endpoints: etcd.endpoint });
});

afterAll(async () => {
  await ds?.close();
  await etcd?.stop();
  if (tmp) rmSync(tmp, { recursive: true, force: true });
});

function ctl(
  args: string[],
  opts: { input?: string; env?: Record<string, string> } = {},
): { code: number; out: string; err: string } {
  const r = spawnSync(process.execPath, [CTL, ...args], {
    input: opts.input ?? '',
    env: { PATH: process.env.PATH ?? '/usr/bin:/bin', ETCD_ENDPOINTS: etcd.endpoint, ...opts.env },
    encoding: 'utf8',
    timeout: 30_000,
  });
  return { code: r.status ?? -1, out: r.stdout, err: r.stderr };
}

const POOL_YAML = `
apiVersion: netplugin.org/v3
kind: IPPool
metadata:
  name: int-pool
spec:
  cidr: 10.123.0.0/24
  blockSize: 28
  natOutgoing: true
`;

describe('netpluginctl against etcd', () => {
  it('applies a pool from YAML on stdin and reads it back as JSON', () => {
    const a = ctl(['apply', '-f', '-'], { input: POOL_YAML });
    expect(a.err).toBe('');
    expect(a).toMatchObject({ code: 0, out: 'ippool/int-pool created\n' });
    expect(ctl(['apply', '-f', '-'], { input: POOL_YAML }).out).toBe('ippool/int-pool unchanged\n');

    const g = ctl(['get', 'ippools', '-o', 'json']);
    expect(g.code).toBe(0);
    const list = JSON.parse(g.out);
    expect(list.kind).toBe('IPPoolList');
    expect(list.items).toHaveLength(1);
    expect(list.items[0]).toMatchObject({
      apiVersion: API_VERSION,
      kind: 'IPPool',
      metadata: { name: 'int-pool' },
      spec: { cidr: '10.123.0.0/24', blockSize: 28, natOutgoing: true },
    });
    expect(list.items[0].metadata.resourceVersion).toMatch(/^\d+$/);

    const bad = ctl(['apply', '-f', '-'], {
      input: POOL_YAML.replace('int-pool', 'other').replace('10.123.0.0/24', '10.123.0.0/25'),
    });
    expect(bad.code).toBe(1);
    expect(bad.err).toBe(
      'error: IPPool "other": spec.cidr 10.123.0.0/25 lies inside IPPool "int-pool" (10.123.0.0/24); pools must not ' +
        'overlap\n',
    );
  });

  it('reads the datastore from a conflist given with --config', () => {
    const conf = join(tmp, 'np.conflist');
    writeFileSync(
      conf,
      JSON.stringify({
        name: 'k8s-pod-network',
        cniVersion: '1.0.0',
        plugins: [
          { type: 'netplugin', etcd_endpoints: etcd.endpoint, ipam: { type: 'netplugin-ipam' } },
          { type: 'portmap' },
        ],
      }),
    );
    const r = ctl(['--config', conf, 'get', 'pools'], { env: { ETCD_ENDPOINTS: '' } });
    expect(r.err).toBe('');
    expect(r.out).toMatch(/^NAME\s+CIDR\s+SELECTOR\nint-pool\s+10\.123\.0\.0\/24\s+all\(\)\n$/);
  });

  it('shows usage after allocations, finds a leaked handle, and releases it from the report', async () => {
    const ipam = createIpam(ds, { lock: 'none' });
    const ips: Record<string, string> = {};
    for (const name of ['web', 'db', 'leaky']) {
      const [a] = await ipam.assign({
        handleID: `k8s-pod-network.cid-${name}`,
        node: 'node-a',
        attrs: { namespace: 'shop', pod: name },
        assignIPv4: true,
        assignIPv6: false,
      });
      ips[name] = a!.ip;
      if (name === 'leaky') continue; // its pod went away without a CNI DEL
      await ds.create(
        workloadEndpoint({ node: 'node-a', namespace: 'shop', pod: name, containerID: `cid-${name}`, ips: [a!.ip] }),
      );
    }

    const show = ctl(['ipam', 'show', '--show-blocks']);
    expect(show.err).toBe('');
    expect(show.out).toMatch(
      /^POOL\s+CIDR\s+SIZE\s+BLOCKS\s+ALLOCATED\s+FREE\s+USED\nint-pool\s+10\.123\.0\.0\/24\s+256\s+1\s+3\s+253\s+1\.17%\n/,
    );
    expect(show.out).toMatch(/\n10\.123\.0\.\d+\/28\s+int-pool\s+host:node-a\s+3\s+13\n/);
    const who = JSON.parse(ctl(['ipam', 'show', '--ip', ips.db!, '-o', 'json']).out);
    expect(who).toMatchObject({
      allocated: true,
      handle: 'k8s-pod-network.cid-db',
      node: 'node-a',
      namespace: 'shop',
      pod: 'db',
      workloadEndpoint: 'shop/node--a-k8s-db-eth0',
    });

    const report = join(tmp, 'report.json');
    const check = ctl(['ipam', 'check', '-o', report]);
    expect(check.code).toBe(1); // problems found
    expect(check.out).toMatch(/leaked handles \(1\):\n {2}k8s-pod-network\.cid-leaky {2}/);
    const r = JSON.parse(readFileSync(report, 'utf8'));
    expect(r.leakedHandles).toEqual([
      expect.objectContaining({ handle: 'k8s-pod-network.cid-leaky', ips: [ips.leaky] }),
    ]);

    const rel = ctl(['ipam', 'release', '--from-report', report]);
    expect(rel.err).toBe('');
    expect(rel.code).toBe(0);
    expect(rel.out).toMatch(/released handle k8s-pod-network\.cid-leaky/);
    expect(await ipam.whoHas(ips.leaky!)).toBeUndefined();
    expect((await ipam.whoHas(ips.web!))?.handle).toBe('k8s-pod-network.cid-web');
    expect(ctl(['ipam', 'check']).out).toMatch(/no problems found/);

    // The pool now holds allocations: deleting it needs --force.
    const del = ctl(['delete', 'ippool', 'int-pool']);
    expect(del.code).toBe(1);
    expect(del.err).toMatch(/still has 2 allocated addresses in 1 block/);
  });

  it('initialises the datastore idempotently and reports the cluster version', () => {
    const a = ctl(['datastore', 'init', '--cluster-type', 'k8s,bgp', '-o', 'json']);
    expect(a.code).toBe(0);
    const ci = JSON.parse(a.out);
    expect(ci.spec).toMatchObject({ clusterType: 'k8s,bgp', netpluginVersion: pkg.version, datastoreReady: true });
    const b = ctl(['datastore', 'init', '--cluster-type', 'k8s']);
    expect(b.out).toBe(
      `clusterinformation/default unchanged: version ${pkg.version}, type k8s,bgp, ready true, guid ` +
        `${ci.spec.clusterGUID}\n`,
    );
    const v = ctl(['version']);
    expect(v.out).toBe(
      `Client Version:    ${pkg.version}\nCluster Version:   ${pkg.version}\nCluster Type:      k8s,bgp\n`,
    );
  });

  it('fails with one line when etcd is unreachable', () => {
    const r = ctl(['get', 'pools'], { env: { ETCD_ENDPOINTS: 'http://127.0.0.1:1', DATASTORE_TIMEOUT_MS: '2000' } });
    expect(r.code).toBe(1);
    expect(r.err.trim().split('\n')).toHaveLength(1);
    expect(r.err).toMatch(/^error: cannot reach the datastore: /);
  });
});

describe('get -w against etcd', () => {
  it('lists, then prints a row per change as it happens, and stops on SIGINT', async () => {
    await ds.create({
      apiVersion: API_VERSION,
      kind: 'IPPool',
      metadata: { name: 'watch-a', labels: { watch: 'yes' } },
      spec: { cidr: '10.140.0.0/24', blockSize: 28 },
    });
    const w = startBuiltCtl(['get', 'ippools', '-w', '-l', 'watch=yes', '--output-watch-events'], {
      env: { ETCD_ENDPOINTS: etcd.endpoint },
    });
    try {
      await w.waitFor(/ADDED\s+watch-a\s+10\.140\.0\.0\/24/);
      await ds.create({
        apiVersion: API_VERSION,
        kind: 'IPPool',
        metadata: { name: 'watch-b', labels: { watch: 'yes' } },
        spec: { cidr: '10.141.0.0/24', blockSize: 28 },
      });
      // Not selected by -l: never printed.
      await ds.create({
        apiVersion: API_VERSION,
        kind: 'IPPool',
        metadata: { name: 'watch-other' },
        spec: { cidr: '10.142.0.0/24', blockSize: 28 },
      });
      await w.waitFor(/ADDED\s+watch-b/);
      const b = await ds.get('IPPool', 'watch-b');
      await ds.update({ ...b, spec: { ...b.spec, disabled: true } });
      await ds.delete('IPPool', 'watch-a');
      await w.waitFor(/DELETED\s+watch-a/);
      const r = await w.interrupt();
      expect(r.err).toBe('');
      expect(r.code).toBe(0);
      const lines = r.out.trim().split('\n');
      expect(lines[0]).toMatch(/^EVENT\s+NAME\s+CIDR\s+SELECTOR$/);
      expect(lines.slice(1).map((l) => l.split(/\s+/).slice(0, 2).join(' '))).toEqual([
        'ADDED watch-a',
        'ADDED watch-b',
        'MODIFIED watch-b',
        'DELETED watch-a',
      ]);
    } finally {
      w.kill();
      for (const n of ['watch-a', 'watch-b', 'watch-other']) await ds.delete('IPPool', n).catch(() => undefined);
    }
  });
});

describe('completion in real shells against etcd', () => {
  it('bash and fish complete commands, kinds and the names stored in etcd; zsh loads the script', async () => {
    await ds.create({
      apiVersion: API_VERSION,
      kind: 'IPPool',
      metadata: { name: 'compl-one' },
      spec: { cidr: '10.160.0.0/24', blockSize: 28 },
    });
    await ds.create({
      apiVersion: API_VERSION,
      kind: 'IPPool',
      metadata: { name: 'compl-two' },
      spec: { cidr: '10.161.0.0/24', blockSize: 28 },
    });
    try {
      const bin = join(tmp, 'bin');
      execFileSync('mkdir', ['-p', bin]);
      writeFileSync(
        join(bin, 'netpluginctl'),
        `#!/bin/sh\nexec ${JSON.stringify(process.execPath)} ${JSON.stringify(CTL)} "$@"\n`,
        { mode: 0o755 },
      );
      const env = { PATH: `${bin}:${process.env.PATH ?? '/usr/bin:/bin'}`, ETCD_ENDPOINTS: etcd.endpoint, HOME: tmp };
      for (const shell of ['bash', 'zsh', 'fish'])
        writeFileSync(join(tmp, `c.${shell}`), ctl(['completion', shell]).out);
      const bash = (line: string[]) =>
        execFileSync(
          'bash',
          [
            '-c',
            `source ${tmp}/c.bash; COMP_WORDS=(${line.map((w) => `'${w}'`).join(' ')}); COMP_CWORD=${line.length - 1}` +
              `; _netpluginctl; printf '%s\\n' "\${COMPREPLY[@]}"`,
          ],
          { encoding: 'utf8', env },
        )
          .split('\n')
          .filter(Boolean);
      expect(bash(['netpluginctl', 'get', 'ippool', 'compl-'])).toEqual(['compl-one', 'compl-two']);
      expect(bash(['netpluginctl', 'datastore', ''])).toEqual(expect.arrayContaining(['init', 'migrate', 'ready']));
      const fish = (line: string) =>
        execFileSync('fish', ['-c', `source ${tmp}/c.fish; complete -C${JSON.stringify(line)}`], {
          encoding: 'utf8',
          env,
        })
          .split('\n')
          .filter(Boolean);
      expect(fish('netpluginctl delete pool compl-t')).toEqual(['compl-two']);
      expect(fish('netpluginctl ipam ')).toEqual(expect.arrayContaining(['check', 'release', 'show']));
      const zsh = execFileSync(
        'zsh',
        [
          '-c',
          `autoload -Uz compinit && compinit -u -d ${tmp}/zcompdump && source ${tmp}/c.zsh && print -r -- ` +
            `$_comps[netpluginctl]`,
        ],
        { encoding: 'utf8', env },
      );
      expect(zsh.trim()).toBe('_netpluginctl');
    } finally {
      for (const n of ['compl-one', 'compl-two']) await ds.delete('IPPool', n).catch(() => undefined);
    }
  });
});

describe('edit against etcd', () => {
  // The editor: a script run as $EDITOR, one step per round, logging what it saw.
  const EDITOR_JS = `
import { appendFileSync, readFileSync, writeFileSync } from 'node:fs';
import { execFileSync } from 'node:child_process';
const file = process.argv[2];
const log = process.env.EDIT_LOG;
const round = readFileSync(log, 'utf8').split('\\n').filter((l) => l.startsWith('round')).length + 1;
const text = readFileSync(file, 'utf8');
appendFileSync(log, 'round ' + round + '\\n' + text + '\\n');
const mode = process.env.EDIT_MODE;
if (mode === 'invalid-then-fix') {
  if (round === 1) writeFileSync(file, text.replace('natOutgoing: true', 'natOutgoing: maybe').replace('zone: a', 'zone: b'));
  else writeFileSync(file, text.replace('natOutgoing: maybe', 'natOutgoing: false'));
} else if (mode === 'conflict') {
  execFileSync(process.execPath, [process.env.CTL, 'label', 'ippool', 'edit-pool', 'other=writer']);
  writeFileSync(file, text.replace('natOutgoing: true', 'natOutgoing: false'));
} else if (mode === 'invalid-twice') {
  if (round === 1) writeFileSync(file, text.replace('natOutgoing: true', 'natOutgoing: maybe'));
}
`;
  const setup = async () => {
    await ds.delete('IPPool', 'edit-pool').catch(() => undefined);
    await ds.create({
      apiVersion: API_VERSION,
      kind: 'IPPool',
      metadata: { name: 'edit-pool', labels: { zone: 'a' } },
      spec: { cidr: '10.180.0.0/24', blockSize: 28, natOutgoing: true },
    });
    writeFileSync(join(tmp, 'editor.mjs'), EDITOR_JS);
    writeFileSync(join(tmp, 'edit.log'), '');
  };
  const edit = (mode: string, args = ['edit', 'ippool', 'edit-pool']) =>
    ctl(args, {
      env: {
        KUBE_EDITOR: `${process.execPath} ${join(tmp, 'editor.mjs')}`,
        EDIT_MODE: mode,
        EDIT_LOG: join(tmp, 'edit.log'),
        CTL,
      },
    });

  it('reopens an invalid edit with the error on top, then saves the fixed one', async () => {
    await setup();
    const r = edit('invalid-then-fix');
    expect(r.err).toBe('');
    expect(r.out).toBe('ippool/edit-pool edited\n');
    const log = readFileSync(join(tmp, 'edit.log'), 'utf8');
    const second = log.split('round 2\n')[1]!;
    expect(second).toMatch(/^# Please edit the object below/);
    expect(second).toMatch(/# ippool\/edit-pool was not valid:\n# .*spec\.natOutgoing/);
    expect(second).toContain('zone: b');
    const p = await ds.get('IPPool', 'edit-pool');
    expect(p.spec.natOutgoing).toBe(false);
    expect(p.metadata.labels).toEqual({ zone: 'b' });
  });

  it('cancels when nothing changed, and when an invalid file is saved again unchanged', async () => {
    await setup();
    expect(edit('none')).toMatchObject({ code: 0, out: 'Edit cancelled, no changes made.\n' });
    writeFileSync(join(tmp, 'edit.log'), '');
    const twice = edit('invalid-twice');
    expect(twice.code).toBe(1);
    expect(twice.err).toMatch(/Edit cancelled, no valid changes were saved; a copy of your changes is in (\S+)/);
    rmSync(/in (\S+)$/.exec(twice.err.trim())![1]!, { force: true });
    expect((await ds.get('IPPool', 'edit-pool')).spec.natOutgoing).toBe(true);
  });

  it('refuses to overwrite a change made while the editor was open, keeping the edits in a file', async () => {
    await setup();
    const r = edit('conflict', ['edit', 'ippool/edit-pool']);
    expect(r.code).toBe(1);
    const m = /changed by someone else while you edited it .* your edits are saved in (\S+):/.exec(r.err);
    expect(m, r.err).not.toBeNull();
    expect(readFileSync(m![1]!, 'utf8')).toContain('natOutgoing: false');
    rmSync(m![1]!, { force: true });
    const p = await ds.get('IPPool', 'edit-pool');
    expect(p.spec.natOutgoing).toBe(true);
    expect(p.metadata.labels).toEqual({ zone: 'a', other: 'writer' });
    await ds.delete('IPPool', 'edit-pool');
  });
});

describe('install-cni with the real shim', () => {
  let shim: string;
  beforeAll(() => {
    // The shim exactly as scripts/build-shim builds it, into our temp dir.
    shim = join(tmp, 'netplugin-shim');
    execFileSync(
      'g++',
      [
        '-std=c++17',
        '-O2',
        '-static',
        '-s',
        '-fno-exceptions',
        '-fno-rtti',
        '-o',
        shim,
        join(root, 'native/shim/shim.cc'),
      ],
      { stdio: 'pipe' },
    );
  });

  function runPlugin(path: string): { code: number; out: string; err: string } {
    const r = spawnSync(path, [], {
      input: JSON.stringify({ cniVersion: '1.0.0' }),
      env: {
        PATH: process.env.PATH ?? '/usr/bin:/bin',
        CNI_COMMAND: 'VERSION',
        NETPLUGIN_AGENT_SOCKET: join(tmp, 'no-agent.sock'),
        NODE_EXTRA_CA_CERTS: '/nonexistent.pem',
      },
      encoding: 'utf8',
      timeout: 30_000,
    });
    return { code: r.status ?? -1, out: r.stdout, err: r.stderr };
  }

  it('installs the shim whose fallback runs the per-exec plugin when no agent listens', () => {
    const bin = join(tmp, 'shim-bin');
    const conf = join(tmp, 'shim-conf');
    const r = ctl([
      'install-cni',
      '--bin-dir',
      bin,
      '--conf-dir',
      conf,
      '--shim',
      shim,
      '--etcd-endpoints',
      etcd.endpoint,
      '--init-datastore',
    ]);
    expect(r.err).toBe('');
    expect(r.code).toBe(0);
    expect(r.out).toMatch(/^installed the native shim/);
    expect(readFileSync(join(bin, 'netplugin.fallback'), 'utf8')).toBe(`${process.execPath}\n${root}\n`);
    for (const p of ['netplugin', 'netplugin-ipam']) {
      const v = runPlugin(join(bin, p));
      expect(v.err).toBe('');
      expect(v.code).toBe(0);
      expect(JSON.parse(v.out)).toEqual({
        cniVersion: '1.0.0',
        supportedVersions: ['0.3.0', '0.3.1', '0.4.0', '1.0.0', '1.1.0'],
      });
    }
    const c = JSON.parse(readFileSync(join(conf, '10-netplugin.conflist'), 'utf8'));
    expect(c.plugins.map((p: { type: string }) => p.type)).toEqual(['netplugin', 'portmap']);
  });

  it('installs working sh launchers with --launcher', () => {
    const bin = join(tmp, 'launcher-bin');
    const r = ctl([
      'install-cni',
      '--bin-dir',
      bin,
      '--conf-dir',
      join(tmp, 'launcher-conf'),
      '--launcher',
      '--etcd-endpoints',
      etcd.endpoint,
    ]);
    expect(r.code).toBe(0);
    expect(readFileSync(join(bin, 'netplugin'), 'utf8')).toMatch(/^#!\/bin\/sh\n/);
    // The built package has the code-cached entry, and the launcher runs it.
    expect(readFileSync(join(bin, 'netplugin'), 'utf8')).toMatch(/\/dist\/netplugin\.cjs' "\$@"\n/);
    const v = runPlugin(join(bin, 'netplugin'));
    expect(v.code).toBe(0);
    expect(JSON.parse(v.out).supportedVersions).toContain('1.1.0');
  });

  it('the bash wrapper scripts/install-cni passes its flags through', () => {
    const bin = join(tmp, 'wrapper-bin');
    const out = execFileSync(
      'bash',
      [
        join(root, 'scripts/install-cni'),
        '--bin-dir',
        bin,
        '--conf-dir',
        join(tmp, 'wrapper-conf'),
        '--launcher',
        '--etcd-endpoints',
        etcd.endpoint,
        '--no-portmap',
      ],
      {
        encoding: 'utf8',
      },
    );
    expect(out).toMatch(/installed sh launchers/);
    expect(JSON.parse(readFileSync(join(tmp, 'wrapper-conf/10-netplugin.conflist'), 'utf8')).plugins).toHaveLength(1);
  });
});
