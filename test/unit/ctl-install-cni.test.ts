// install-cni / uninstall-cni into temporary bin and conf dirs, with a
// temporary package dir whose dist/ entries are tiny scripts, so the installed
// launchers can be executed for real.
import { execFileSync } from 'node:child_process';
import {
  chmodSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { MemoryDatastore } from '../../src/datastore/memory.js';
import { runCtl } from '../../src/ctl/index.js';
import { parseNetconf } from '../../src/config/index.js';

let root: string;
let pkg: string;
let bin: string;
let conf: string;
let ds: MemoryDatastore;

beforeEach(() => {
  root = mkdtempSync(join(tmpdir(), `ctl-install-${process.pid}-`));
  pkg = join(root, 'pkg');
  bin = join(root, 'opt/cni/bin');
  conf = join(root, 'etc/cni/net.d');
  mkdirSync(join(pkg, 'dist'), { recursive: true });
  // Each fake entry reports which script ran, its args, and whether NODE_EXTRA_CA_CERTS leaked through.
  for (const p of ['netplugin', 'netplugin-ipam']) {
    writeFileSync(
      join(pkg, 'dist', `${p}.mjs`),
      `process.stdout.write(JSON.stringify({ entry: ${JSON.stringify(p)}, args: process.argv.slice(2), ca: process.env.NODE_EXTRA_CA_CERTS ?? null }));\n`,
    );
  }
  ds = new MemoryDatastore();
});
afterEach(() => rmSync(root, { recursive: true, force: true }));

async function install(
  args: string[],
  env: Record<string, string> = {},
): Promise<{ code: number; out: string; err: string }> {
  let out = '';
  let err = '';
  const code = await runCtl(['install-cni', '--bin-dir', bin, '--conf-dir', conf, ...args], {
    env,
    stdout: (s) => (out += s),
    stderr: (s) => (err += s),
    packageDir: pkg,
    nodePath: process.execPath,
    openDatastore: async () => ds,
  });
  return { code, out, err };
}

function conflist(name = '10-netplugin.conflist'): {
  name: string;
  cniVersion: string;
  plugins: Array<Record<string, any>>;
} {
  return JSON.parse(readFileSync(join(conf, name), 'utf8'));
}

function snapshot(dir: string): Record<string, { mode: number; data: string; ino: number }> {
  const out: Record<string, { mode: number; data: string; ino: number }> = {};
  for (const f of readdirSync(dir)) {
    const st = statSync(join(dir, f));
    out[f] = { mode: st.mode & 0o7777, data: readFileSync(join(dir, f), 'latin1'), ino: st.ino };
  }
  return out;
}

const ETCD = ['--etcd-endpoints', 'http://10.0.0.1:2379,http://10.0.0.2:2379'];

describe('install-cni', () => {
  it('installs launchers when no shim exists, and they run the per-exec entry without NODE_EXTRA_CA_CERTS', async () => {
    const r = await install(ETCD);
    expect(r.err).toBe('');
    expect(r.code).toBe(0);
    expect(r.out).toMatch(/^installed sh launchers as .*\/netplugin and netplugin-ipam \(no native shim found/);
    expect(readdirSync(bin).sort()).toEqual(['netplugin', 'netplugin-ipam']);
    for (const p of ['netplugin', 'netplugin-ipam']) {
      expect(statSync(join(bin, p)).mode & 0o777).toBe(0o755);
      const res = JSON.parse(
        execFileSync(join(bin, p), ['x', 'y z'], {
          env: { ...process.env, NODE_EXTRA_CA_CERTS: '/nonexistent.pem' },
        }).toString(),
      );
      expect(res).toEqual({ entry: p, args: ['x', 'y z'], ca: null });
    }
  });

  it('points the launchers at dist/<name>.cjs (the code-cached entry) when the package has it', async () => {
    writeFileSync(
      join(pkg, 'dist/netplugin.cjs'),
      `process.stdout.write(JSON.stringify({ entry: 'netplugin.cjs', args: process.argv.slice(2) }));\n`,
    );
    const r = await install(ETCD);
    expect(r.code).toBe(0);
    expect(readFileSync(join(bin, 'netplugin'), 'utf8')).toContain(`'${join(pkg, 'dist/netplugin.cjs')}' "$@"`);
    expect(JSON.parse(execFileSync(join(bin, 'netplugin'), ['a']).toString())).toEqual({
      entry: 'netplugin.cjs',
      args: ['a'],
    });
    // A package without it (netplugin-ipam here) keeps the .mjs entry.
    expect(readFileSync(join(bin, 'netplugin-ipam'), 'utf8')).toContain(
      `'${join(pkg, 'dist/netplugin-ipam.mjs')}' "$@"`,
    );
  });

  it('installs the shim and the fallback file when a shim binary exists', async () => {
    mkdirSync(join(pkg, 'build/shim'), { recursive: true });
    writeFileSync(join(pkg, 'build/shim/netplugin-shim'), '\x7fELF fake shim bytes');
    const r = await install(ETCD);
    expect(r.code).toBe(0);
    expect(r.out).toMatch(/^installed the native shim \(.*build\/shim\/netplugin-shim\)/);
    expect(readdirSync(bin).sort()).toEqual(['netplugin', 'netplugin-ipam', 'netplugin.fallback']);
    for (const p of ['netplugin', 'netplugin-ipam']) {
      expect(readFileSync(join(bin, p), 'latin1')).toBe('\x7fELF fake shim bytes');
      expect(statSync(join(bin, p)).mode & 0o777).toBe(0o755);
    }
    expect(readFileSync(join(bin, 'netplugin.fallback'), 'utf8')).toBe(`${process.execPath}\n${pkg}\n`);
    // --launcher forces the launcher and removes the now meaningless fallback file.
    const l = await install([...ETCD, '--launcher']);
    expect(l.out).toMatch(/installed sh launchers/);
    expect(readdirSync(bin).sort()).toEqual(['netplugin', 'netplugin-ipam']);
  });

  it('finds a prebuilt shim for this architecture', async () => {
    mkdirSync(join(pkg, `prebuilds/linux-${process.arch}`), { recursive: true });
    writeFileSync(join(pkg, `prebuilds/linux-${process.arch}/netplugin-shim`), 'prebuilt');
    const r = await install(ETCD);
    expect(r.out).toMatch(new RegExp(`native shim \\(.*prebuilds/linux-${process.arch}/netplugin-shim\\)`));
    expect(readFileSync(join(bin, 'netplugin'), 'utf8')).toBe('prebuilt');
  });

  it('is idempotent and leaves no temporary files', async () => {
    const a = await install([...ETCD, '--mtu', '1450']);
    const before = { bin: snapshot(bin), conf: snapshot(conf) };
    const b = await install([...ETCD, '--mtu', '1450']);
    expect(b.code).toBe(0);
    expect(b.out).toMatch(/10-netplugin\.conflist unchanged/);
    expect(b.out).not.toMatch(/ written/);
    expect({ bin: snapshot(bin), conf: snapshot(conf) }).toEqual(before);
    expect(a.out).toMatch(/10-netplugin\.conflist written/);
    // A changed setting rewrites only the conflist, through a new inode (rename, not in-place write).
    const c = await install([...ETCD, '--mtu', '1400']);
    expect(c.out).toMatch(/10-netplugin\.conflist written/);
    expect(c.out).toMatch(/netplugin unchanged/);
    expect(statSync(join(conf, '10-netplugin.conflist')).ino).not.toBe(before.conf['10-netplugin.conflist']!.ino);
    for (const d of [bin, conf]) expect(readdirSync(d).filter((f) => f.startsWith('.'))).toEqual([]);
  });

  it('writes the default conflist: etcd, netplugin-ipam, portmap', async () => {
    await install([
      ...ETCD,
      '--nodename',
      'node-1',
      '--mtu',
      '1450',
      '--kubeconfig',
      '/etc/cni/net.d/netplugin-kubeconfig',
      '--policy',
      'k8s',
    ]);
    const c = conflist();
    expect(c).toEqual({
      name: 'k8s-pod-network',
      cniVersion: '1.0.0',
      plugins: [
        {
          type: 'netplugin',
          log_level: 'info',
          log_file_path: '/var/log/netplugin/cni/cni.log',
          datastore_type: 'etcdv3',
          etcd_endpoints: 'http://10.0.0.1:2379,http://10.0.0.2:2379',
          nodename: 'node-1',
          mtu: 1450,
          ipam: { type: 'netplugin-ipam' },
          policy: { type: 'k8s' },
          kubernetes: { kubeconfig: '/etc/cni/net.d/netplugin-kubeconfig' },
        },
        { type: 'portmap', snat: true, capabilities: { portMappings: true } },
      ],
    });
    // The plugin itself accepts the entry.
    const parsed = parseNetconf(
      { name: c.name, cniVersion: c.cniVersion, ...c.plugins[0] },
      { pluginType: 'netplugin' },
    );
    expect(parsed.etcdEndpointList).toEqual(['http://10.0.0.1:2379', 'http://10.0.0.2:2379']);
  });

  it('writes host-local IPAM, the kubernetes datastore and no portmap on request', async () => {
    const r = await install([
      '--datastore-type',
      'kubernetes',
      '--kubeconfig',
      'rel/kubeconfig',
      '--ipam',
      'host-local',
      '--no-portmap',
      '--conf-name',
      '05-np.conflist',
      '--log-file-path',
      '',
    ]);
    expect(r.code).toBe(0);
    const c = conflist('05-np.conflist');
    expect(c.plugins).toHaveLength(1);
    const e = c.plugins[0]!;
    expect(e.datastore_type).toBe('kubernetes');
    expect(e.etcd_endpoints).toBeUndefined();
    expect(e.log_file_path).toBeUndefined();
    expect(e.ipam).toEqual({ type: 'host-local', ranges: [[{ subnet: 'usePodCidr' }]] });
    // Relative paths are made absolute: the runtime runs the plugin from another directory.
    expect(e.kubernetes.kubeconfig).toBe(join(process.cwd(), 'rel/kubeconfig'));
  });

  it('takes the datastore from the environment like the rest of the CLI', async () => {
    const r = await install([], { ETCD_ENDPOINTS: 'https://etcd.example:2379', KUBERNETES_NODE_NAME: 'n9' });
    expect(r.code).toBe(0);
    expect(conflist().plugins[0]).toMatchObject({ etcd_endpoints: 'https://etcd.example:2379', nodename: 'n9' });
  });

  it('fills a template and refuses unfilled placeholders', async () => {
    const tpl = join(root, 'tpl.conflist');
    writeFileSync(
      tpl,
      JSON.stringify({
        name: '__NETWORK_NAME__',
        cniVersion: '0.3.1',
        plugins: [
          {
            type: 'netplugin',
            datastore_type: '__DATASTORE_TYPE__',
            etcd_endpoints: '__ETCD_ENDPOINTS__',
            mtu: '__CNI_MTU__',
            ipam: { type: 'netplugin-ipam' },
          },
        ],
      }).replace('"__CNI_MTU__"', '__CNI_MTU__'),
    );
    const r = await install([...ETCD, '--from-template', tpl, '--mtu', '1440']);
    expect(r.err).toBe('');
    expect(conflist()).toEqual({
      name: 'k8s-pod-network',
      cniVersion: '0.3.1',
      plugins: [
        {
          type: 'netplugin',
          datastore_type: 'etcdv3',
          etcd_endpoints: 'http://10.0.0.1:2379,http://10.0.0.2:2379',
          mtu: 1440,
          ipam: { type: 'netplugin-ipam' },
        },
      ],
    });
    const miss = await install(['--from-template', tpl]);
    expect(miss.code).toBe(1);
    expect(miss.err).toMatch(/no value for __ETCD_ENDPOINTS__ \(set --etcd-endpoints\), __CNI_MTU__ \(set --mtu\)/);
  });

  it('the shipped template fills in to a conflist the plugin accepts', async () => {
    const tpl = join(process.cwd(), 'deploy/10-netplugin.conflist.template');
    const r = await install([
      ...ETCD,
      '--from-template',
      tpl,
      '--mtu',
      '1500',
      '--nodename',
      'n1',
      '--kubeconfig',
      '/etc/cni/net.d/netplugin-kubeconfig',
    ]);
    expect(r.err).toBe('');
    expect(r.code).toBe(0);
    const c = conflist();
    expect(c.plugins.map((p) => p.type)).toEqual(['netplugin', 'portmap']);
    expect(c.plugins[0]).toMatchObject({
      etcd_endpoints: ETCD[1],
      mtu: 1500,
      nodename: 'n1',
      log_format: 'text',
      kubernetes: { kubeconfig: '/etc/cni/net.d/netplugin-kubeconfig' },
    });
    // The plugin's log format: --plugin-log-format, else LOG_FORMAT (the DaemonSet's, from the ConfigMap).
    const filled = ['--mtu', '1500', '--nodename', 'n1', '--kubeconfig', '/etc/cni/net.d/netplugin-kubeconfig'];
    expect((await install([...ETCD, '--from-template', tpl, ...filled, '--plugin-log-format', 'json'])).code).toBe(0);
    expect(conflist().plugins[0]).toMatchObject({ log_format: 'json' });
    expect((await install([...ETCD, '--mtu', '1500'], { LOG_FORMAT: 'json' })).code).toBe(0);
    expect(conflist().plugins[0]).toMatchObject({ log_format: 'json' });
    const bad = await install([...ETCD, '--from-template', tpl, ...filled, '--plugin-log-format', 'yaml']);
    expect(bad.code).toBe(1);
    expect(bad.err).toContain('--plugin-log-format (or LOG_FORMAT) "yaml" is not supported; use text or json');
  });

  it('rejects bad flags before writing anything', async () => {
    const cases: Array<[string[], RegExp]> = [
      [[], /--datastore-type etcdv3 needs --etcd-endpoints/],
      [['--datastore-type', 'kubernetes'], /--datastore-type kubernetes needs --kubeconfig/],
      [['--datastore-type', 'consul'], /--datastore-type "consul" is not supported/],
      [[...ETCD, '--mtu', '40'], /--mtu 40 is out of range; use 68-65535/],
      [[...ETCD, '--mtu', 'big'], /--mtu "big" is not an integer/],
      [[...ETCD, '--ipam', 'dhcp'], /--ipam "dhcp" is not supported; use netplugin-ipam or host-local/],
      [[...ETCD, '--policy', 'calico'], /--policy "calico" is not supported/],
      [[...ETCD, '--policy', 'k8s'], /--policy k8s needs --kubeconfig/],
      [[...ETCD, '--conf-name', '../evil'], /--conf-name "..\/evil" must be a file name ending in \.conflist/],
      [['--etcd-endpoints', 'not a url'], /conflist would be rejected by the plugin: .*etcd_endpoints/],
      [[...ETCD, '--log-level', 'loud'], /conflist would be rejected by the plugin: .*log_level/],
    ];
    for (const [args, re] of cases) {
      const r = await install(args);
      expect(r.code, args.join(' ')).toBe(1);
      expect(r.err, args.join(' ')).toMatch(re);
      expect(r.err.split('\n').filter(Boolean)).toHaveLength(1);
    }
    expect(existsSync(bin)).toBe(false);
    expect(existsSync(conf)).toBe(false);
  });

  it('fails clearly when the package is not built', async () => {
    rmSync(join(pkg, 'dist/netplugin-ipam.mjs'));
    const r = await install(ETCD);
    expect(r.code).toBe(1);
    expect(r.err).toMatch(/dist\/netplugin-ipam\.mjs is missing; build the package first \(npm run build\)/);
  });

  it('warns when another configuration sorts first', async () => {
    mkdirSync(conf, { recursive: true });
    writeFileSync(join(conf, '00-other.conflist'), '{}');
    const r = await install(ETCD);
    expect(r.code).toBe(0);
    expect(r.err).toMatch(/warning: .*00-other\.conflist sorts before 10-netplugin\.conflist/);
  });

  it('writes the agent unit with --agent and initialises the datastore with --init-datastore', async () => {
    const systemd = join(root, 'systemd');
    const r = await install([...ETCD, '--agent', '--systemd-dir', systemd, '--init-datastore']);
    expect(r.err).toBe('');
    const unit = readFileSync(join(systemd, 'netplugin-node.service'), 'utf8');
    expect(unit).toContain(`ExecStart=${process.execPath} ${join(pkg, 'dist/netplugin-node.cjs')} --log-level INFO`);
    expect(r.out).toMatch(/clusterinformation\/default created/);
    expect((await ds.get('ClusterInformation', 'default')).spec.datastoreReady).toBe(true);
    expect((await install([...ETCD, '--init-datastore'])).out).toMatch(/clusterinformation\/default unchanged/);
  });

  it('bases the agent unit on the shipped deploy/netplugin-node.service, pointed at this installation', async () => {
    mkdirSync(join(pkg, 'deploy'), { recursive: true });
    writeFileSync(
      join(pkg, 'deploy/netplugin-node.service'),
      readFileSync(join(process.cwd(), 'deploy/netplugin-node.service')),
    );
    const systemd = join(root, 'systemd');
    expect((await install([...ETCD, '--agent', '--systemd-dir', systemd])).code).toBe(0);
    const unit = readFileSync(join(systemd, 'netplugin-node.service'), 'utf8');
    const exec = unit.split('\n').find((l) => l.startsWith('ExecStart='));
    expect(exec).toMatch(
      new RegExp(
        `^ExecStart=${process.execPath.replace(/[.]/g, '\\.')} ${join(pkg, 'dist/netplugin-node.cjs').replace(/[.]/g, '\\.')} `,
      ),
    );
    expect(unit).not.toContain('/opt/netplugin/');
  });

  it('prints JSON with -o json', async () => {
    const r = await install([...ETCD, '-o', 'json']);
    const j = JSON.parse(r.out);
    expect(j).toMatchObject({ kind: 'launcher', packageDir: pkg, conflist: { name: 'k8s-pod-network' } });
    expect(j.files.map((f: { path: string }) => f.path)).toEqual([
      join(bin, 'netplugin'),
      join(bin, 'netplugin-ipam'),
      join(conf, '10-netplugin.conflist'),
    ]);
  });
});

describe('uninstall-cni', () => {
  async function uninstall(args: string[] = []): Promise<{ code: number; out: string; err: string }> {
    let out = '';
    let err = '';
    const code = await runCtl(['uninstall-cni', '--bin-dir', bin, '--conf-dir', conf, ...args], {
      env: {},
      stdout: (s) => (out += s),
      stderr: (s) => (err += s),
    });
    return { code, out, err };
  }

  it('removes what install-cni wrote and leaves other files', async () => {
    mkdirSync(join(pkg, 'build/shim'), { recursive: true });
    writeFileSync(join(pkg, 'build/shim/netplugin-shim'), 'shim');
    await install(ETCD);
    writeFileSync(join(bin, 'bridge'), 'other plugin');
    chmodSync(join(bin, 'bridge'), 0o755);
    const r = await uninstall();
    expect(r.code).toBe(0);
    expect(r.out.split('\n').filter(Boolean)).toHaveLength(4);
    expect(readdirSync(bin)).toEqual(['bridge']);
    expect(readdirSync(conf)).toEqual([]);
    expect((await uninstall()).out).toBe('nothing to remove\n');
  });

  it('refuses to remove a configuration that is not netplugin', async () => {
    mkdirSync(conf, { recursive: true });
    writeFileSync(join(conf, '10-netplugin.conflist'), JSON.stringify({ name: 'x', plugins: [{ type: 'bridge' }] }));
    const r = await uninstall();
    expect(r.code).toBe(1);
    expect(r.err).toMatch(/is not a netplugin configuration; not removing it/);
    expect(existsSync(join(conf, '10-netplugin.conflist'))).toBe(true);
  });
});
