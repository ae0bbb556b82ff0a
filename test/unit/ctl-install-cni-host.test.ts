// install-cni run the way a DaemonSet init container runs it: the host's
// filesystem mounted at a directory (--host-root), or no host mount at all in a
// pod. What it records in netplugin.fallback must be host paths, and the real
// shim installed from it must answer a CNI error (never an empty stdout) when
// the agent is down and the host cannot run the fallback.
import { spawnSync } from 'node:child_process';
import {
  chmodSync,
  copyFileSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { runCtl } from '../../src/ctl/index.js';
import { detectPod, shimCandidates } from '../../src/ctl/install-cni.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const ETCD = ['--etcd-endpoints', 'http://10.0.0.1:2379'];

let tmp: string;
let pkg: string;
let host: string;

beforeEach(() => {
  tmp = mkdtempSync(join(tmpdir(), `ctl-install-host-${process.pid}-`));
  // The package as the image holds it: dist entries, a dependency, the shim.
  pkg = join(tmp, 'image/opt/netplugin');
  host = join(tmp, 'host');
  mkdirSync(join(pkg, 'dist'), { recursive: true });
  mkdirSync(join(pkg, 'node_modules/yaml'), { recursive: true });
  mkdirSync(join(pkg, 'build/shim'), { recursive: true });
  writeFileSync(join(pkg, 'package.json'), JSON.stringify({ name: 'netplugin', version: '0.0.0-test' }));
  for (const p of ['netplugin', 'netplugin-ipam']) writeFileSync(join(pkg, 'dist', `${p}.mjs`), `// ${p} entry\n`);
  writeFileSync(join(pkg, 'node_modules/yaml/index.js'), 'export {};\n');
  const shim = shimCandidates(ROOT).find((p) => existsSync(p));
  if (!shim) throw new Error('no shim binary: run npm run build:shim');
  copyFileSync(shim, join(pkg, 'build/shim/netplugin-shim'));
  mkdirSync(host);
});
afterEach(() => rmSync(tmp, { recursive: true, force: true }));

async function install(args: string[], inPod = false): Promise<{ code: number; out: string; err: string }> {
  let out = '';
  let err = '';
  const code = await runCtl(['install-cni', ...ETCD, ...args], {
    env: {},
    stdout: (s) => (out += s),
    stderr: (s) => (err += s),
    packageDir: pkg,
    nodePath: '/usr/local/bin/node-in-image',
    inPod,
  });
  return { code, out, err };
}

/** Runs an installed shim as a runtime would, with no agent listening. */
function runShim(bin: string, command = 'ADD'): { status: number | null; stdout: string } {
  const r = spawnSync(bin, [], {
    input: JSON.stringify({ cniVersion: '1.0.0', name: 'n', type: 'netplugin' }),
    env: {
      PATH: '/usr/bin:/bin',
      CNI_COMMAND: command,
      CNI_CONTAINERID: 'c1',
      CNI_NETNS: '/var/run/netns/x',
      CNI_IFNAME: 'eth0',
      CNI_PATH: '/opt/cni/bin',
      NETPLUGIN_AGENT_SOCKET: join(tmp, 'no-agent.sock'),
    },
    encoding: 'utf8',
  });
  return { status: r.status, stdout: r.stdout };
}

describe('install-cni --host-root', () => {
  it('writes under the host root, copies the package to /opt/netplugin and records host paths', async () => {
    mkdirSync(join(host, 'usr/local/bin'), { recursive: true });
    writeFileSync(join(host, 'usr/local/bin/node'), '#!/bin/sh\n');
    chmodSync(join(host, 'usr/local/bin/node'), 0o755);
    const r = await install(['--host-root', host]);
    expect(r.err).toBe('');
    expect(r.code).toBe(0);
    expect(readdirSync(join(host, 'opt/cni/bin')).sort()).toEqual([
      'netplugin',
      'netplugin-ipam',
      'netplugin.fallback',
    ]);
    expect(readFileSync(join(host, 'opt/cni/bin/netplugin.fallback'), 'utf8')).toBe(
      '/usr/local/bin/node\n/opt/netplugin\n',
    );
    expect(JSON.parse(readFileSync(join(host, 'etc/cni/net.d/10-netplugin.conflist'), 'utf8')).plugins[0].type).toBe(
      'netplugin',
    );
    // What the per-exec entry needs, and nothing of the build tree.
    expect(readdirSync(join(host, 'opt/netplugin')).sort()).toEqual(['dist', 'node_modules', 'package.json']);
    expect(readFileSync(join(host, 'opt/netplugin/dist/netplugin.mjs'), 'utf8')).toBe('// netplugin entry\n');
    expect(readFileSync(join(host, 'opt/netplugin/node_modules/yaml/index.js'), 'utf8')).toBe('export {};\n');
    // Nothing lands outside the host root, and a second run replaces the copy without leftovers.
    expect(
      existsSync('/opt/netplugin/package.json') &&
        readFileSync('/opt/netplugin/package.json', 'utf8').includes('0.0.0-test'),
    ).toBe(false);
    writeFileSync(join(pkg, 'dist/netplugin.mjs'), '// netplugin entry v2\n');
    expect((await install(['--host-root', host])).code).toBe(0);
    expect(readFileSync(join(host, 'opt/netplugin/dist/netplugin.mjs'), 'utf8')).toBe('// netplugin entry v2\n');
    expect(readdirSync(join(host, 'opt')).sort()).toEqual(['cni', 'netplugin']);
  });

  it('prefers /usr/bin/node, honours --host-node and --host-package-dir, and checks them', async () => {
    for (const d of ['usr/bin', 'usr/local/bin', 'srv/node/bin']) {
      mkdirSync(join(host, d), { recursive: true });
      writeFileSync(join(host, d, 'node'), '#!/bin/sh\n');
      chmodSync(join(host, d, 'node'), 0o755);
    }
    expect((await install(['--host-root', host])).code).toBe(0);
    expect(readFileSync(join(host, 'opt/cni/bin/netplugin.fallback'), 'utf8')).toBe('/usr/bin/node\n/opt/netplugin\n');
    expect(
      (
        await install([
          '--host-root',
          host,
          '--host-node',
          '/srv/node/bin/node',
          '--host-package-dir',
          '/var/lib/netplugin/pkg',
        ])
      ).code,
    ).toBe(0);
    expect(readFileSync(join(host, 'opt/cni/bin/netplugin.fallback'), 'utf8')).toBe(
      '/srv/node/bin/node\n/var/lib/netplugin/pkg\n',
    );
    expect(existsSync(join(host, 'var/lib/netplugin/pkg/dist/netplugin-ipam.mjs'))).toBe(true);
    const missing = await install(['--host-root', host, '--host-node', '/opt/node/bin/node']);
    expect(missing.code).toBe(1);
    expect(missing.err).toContain(
      `--host-node /opt/node/bin/node: ${join(host, 'opt/node/bin/node')} is not an executable file`,
    );
    const rel = await install(['--host-root', host, '--host-package-dir', 'opt/np']);
    expect(rel.code).toBe(1);
    expect(rel.err).toContain('--host-package-dir "opt/np" must be an absolute path on the host');
  });

  it('a host without node: the fallback names none, with a warning, and the shim answers code 11', async () => {
    const r = await install(['--host-root', host]);
    expect(r.code).toBe(0);
    expect(r.err).toMatch(/warning: the host has no node .*CNI calls answer code 11 \(retry\) while the agent is down/);
    expect(readFileSync(join(host, 'opt/cni/bin/netplugin.fallback'), 'utf8')).toBe('\n/opt/netplugin\n');
    const run = runShim(join(host, 'opt/cni/bin/netplugin'));
    expect(run.status).toBe(1);
    expect(JSON.parse(run.stdout)).toMatchObject({ code: 11 });
    expect(JSON.parse(run.stdout).msg).toContain('names no node executable');
  });

  it('in a pod without --host-root: never records the container paths, and warns', async () => {
    const bin = join(host, 'opt/cni/bin');
    const r = await install(['--bin-dir', bin, '--conf-dir', join(host, 'etc/cni/net.d')], true);
    expect(r.code).toBe(0);
    expect(r.err).toMatch(
      /warning: install-cni runs in a Kubernetes pod, so its node \(\/usr\/local\/bin\/node-in-image\)/,
    );
    expect(readFileSync(join(bin, 'netplugin.fallback'), 'utf8')).toBe(`\n${pkg}\n`);
    for (const cmd of ['ADD', 'DEL']) {
      const run = runShim(join(bin, 'netplugin-ipam'), cmd);
      expect(run.status).toBe(1);
      expect(JSON.parse(run.stdout).code).toBe(11);
    }
  });

  it('detects a pod by its service-account mount', () => {
    const fake = join(tmp, 'podroot');
    expect(detectPod(fake)).toBe(false);
    mkdirSync(join(fake, 'var/run/secrets/kubernetes.io/serviceaccount'), { recursive: true });
    expect(detectPod(fake)).toBe(true);
  });

  it('host-local with plain --subnet ranges for hosts without Kubernetes', async () => {
    const conf = join(host, 'etc/cni/net.d');
    const r = await install([
      '--bin-dir',
      join(host, 'opt/cni/bin'),
      '--conf-dir',
      conf,
      '--ipam',
      'host-local',
      '--subnet',
      '10.88.0.0/16',
      '--subnet',
      'fd88::/64',
      '--network-name',
      'podman-np',
    ]);
    expect(r.err).toBe('');
    const written = JSON.parse(readFileSync(join(conf, '10-netplugin.conflist'), 'utf8'));
    expect(written.name).toBe('podman-np');
    expect(written.plugins[0].ipam).toEqual({
      type: 'host-local',
      ranges: [[{ subnet: '10.88.0.0/16' }], [{ subnet: 'fd88::/64' }]],
    });
    expect(
      (await install(['--bin-dir', join(host, 'b'), '--conf-dir', join(host, 'c'), '--subnet', '10.88.0.0/16'])).err,
    ).toContain('--subnet is for --ipam host-local');
    expect(
      (
        await install([
          '--bin-dir',
          join(host, 'b'),
          '--conf-dir',
          join(host, 'c'),
          '--ipam',
          'host-local',
          '--subnet',
          '10.88.0.0',
        ])
      ).err,
    ).toContain('--subnet "10.88.0.0" is not a CIDR');
  });
});
