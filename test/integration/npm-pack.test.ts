// The package as an operator gets it: `npm pack` of this checkout, installed
// globally into a temporary prefix with --offline (the dependencies are
// bundled in the tarball), nothing compiled (the prebuilt addon and shim are
// used), then install-cni from the installed package and a pod ADD/DEL
// through the installed shim's per-exec fallback against a throwaway etcd.
import { execFile } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { assertThrowawayHostNetns } from '../support/cni.js';
import { createNetns, removeAllNetns } from '../support/netns.js';
import {
  cleanupAttachments,
  cni,
  ensureBuilt,
  expectOk,
  netconf,
  startCluster,
  type Cluster,
} from '../support/plugin-harness.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const run = promisify(execFile);
const { version } = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { version: string };

let tmp: string;
let prefix: string;
let pkgDir: string;
let c: Cluster;

beforeAll(async () => {
  assertThrowawayHostNetns();
  ensureBuilt();
  tmp = mkdtempSync(join(tmpdir(), `npm-pack-${process.pid}-`));
  prefix = join(tmp, 'prefix');
  await run('npm', ['pack', '--pack-destination', tmp, '--loglevel=error'], {
    cwd: ROOT,
    timeout: 300_000,
    maxBuffer: 64 << 20,
  });
  // Offline, and a compiler that fails: the prebuilds must be enough.
  await run(
    'npm',
    [
      'install',
      '-g',
      '--prefix',
      prefix,
      '--offline',
      '--no-audit',
      '--no-fund',
      '--loglevel=error',
      join(tmp, `netplugin-${version}.tgz`),
    ],
    {
      cwd: tmp,
      timeout: 300_000,
      env: { ...process.env, CC: '/bin/false', CXX: '/bin/false', npm_config_build_from_source: 'false' },
    },
  );
  pkgDir = join(prefix, 'lib/node_modules/netplugin');
  c = await startCluster([{ name: 'pack-v4', cidr: '10.77.70.0/24', blockSize: 28 }]);
}, 600_000);
afterAll(async () => {
  await cleanupAttachments();
  removeAllNetns();
  await c?.close();
  if (tmp) rmSync(tmp, { recursive: true, force: true });
});

describe('npm pack', () => {
  it('installs offline with its executables, the prebuilt addon and shim, and compiles nothing', async () => {
    const bins = Object.keys(
      (JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { bin: Record<string, string> }).bin,
    ).sort();
    expect(readdirSync(join(prefix, 'bin')).sort()).toEqual(bins);
    expect(existsSync(join(pkgDir, 'build'))).toBe(false);
    expect(existsSync(join(pkgDir, `prebuilds/linux-${process.arch}/netplugin-shim`))).toBe(true);
    for (const dep of ['etcd3', 'yaml', 'node-gyp-build'])
      expect(existsSync(join(pkgDir, 'node_modules', dep, 'package.json')), dep).toBe(true);
    // netplugin-flows' web UI ships in the package (no CDN).
    for (const f of ['index.html', 'app.js', 'style.css'])
      expect(existsSync(join(pkgDir, 'dist/flows-ui', f)), f).toBe(true);
    for (const exe of bins) {
      const r = await run(join(prefix, 'bin', exe), ['--version'], {
        env: { PATH: `${join(prefix, 'bin')}:${process.env.PATH}` },
      });
      expect(r.stdout).toContain(version);
    }
  });

  it('install-cni from the installed package, then a pod ADD and DEL through the installed shim', async () => {
    const bin = join(tmp, 'opt/cni/bin');
    const conf = join(tmp, 'etc/cni/net.d');
    const r = await run(
      join(prefix, 'bin/netpluginctl'),
      [
        'install-cni',
        '--bin-dir',
        bin,
        '--conf-dir',
        conf,
        '--etcd-endpoints',
        c.etcd.endpoint,
        '--nodename',
        'node1',
        '--log-file-path',
        '',
      ],
      {
        env: { PATH: `${join(prefix, 'bin')}:${process.env.PATH}` },
      },
    );
    expect(r.stdout).toContain(
      `installed the native shim (${join(pkgDir, `prebuilds/linux-${process.arch}/netplugin-shim`)})`,
    );
    expect(readFileSync(join(bin, 'netplugin.fallback'), 'utf8')).toBe(`${process.execPath}\n${pkgDir}\n`);
    const installed = JSON.parse(readFileSync(join(conf, '10-netplugin.conflist'), 'utf8'));
    const ns = createNetns('pk');
    const plugin = {
      ...netconf(c, '1.0.0', { host_veth_prefix: 'npk' }),
      ...installed.plugins[0],
      ipam_lock_file: c.lockFile,
      cniVersion: '1.0.0',
      name: installed.name,
    };
    // No agent: the shim runs node <installed package>/dist/netplugin.mjs.
    const env = { NETPLUGIN_AGENT_SOCKET: join(tmp, 'no-agent.sock') };
    const add = await cni(
      'ADD',
      plugin,
      { containerId: `pack-${process.pid}`, netns: ns.path, env, path: bin },
      join(bin, 'netplugin'),
    );
    expectOk(add);
    expect(JSON.parse(add.stdout).ips[0].address).toMatch(/^10\.77\.70\./);
    expectOk(
      await cni(
        'DEL',
        plugin,
        { containerId: `pack-${process.pid}`, netns: ns.path, env, path: bin },
        join(bin, 'netplugin'),
      ),
    );
  });
});
