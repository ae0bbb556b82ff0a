// deploy/netplugin-node.service against the agent it starts: every ExecStart
// flag exists in netplugin-node --help, the conflist path is the one
// install-cni writes, /run/netplugin survives restarts (IPAM lock, endpoint
// status), and systemd itself accepts the unit (systemd-analyze verify), also
// as install-cni --agent rewrites it for another installation.
import { execFileSync, spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { runCtl } from '../../src/ctl/index.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const UNIT = readFileSync(join(ROOT, 'deploy/netplugin-node.service'), 'utf8');
const tmp = mkdtempSync(join(tmpdir(), `deploy-systemd-${process.pid}-`));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

/** key -> values of the [Service] section (comments and other sections left out). */
function service(text: string): Map<string, string[]> {
  const out = new Map<string, string[]>();
  let section = '';
  for (const raw of text.split('\n')) {
    const line = raw.trim();
    if (!line || line.startsWith('#')) continue;
    const s = /^\[(.+)\]$/.exec(line);
    if (s) {
      section = s[1]!;
      continue;
    }
    if (section !== 'Service') continue;
    const eq = line.indexOf('=');
    const k = line.slice(0, eq);
    out.set(k, [...(out.get(k) ?? []), line.slice(eq + 1)]);
  }
  return out;
}

function verify(text: string): { status: number | null; stderr: string } {
  const dir = mkdtempSync(join(tmp, 'verify-'));
  const file = join(dir, 'netplugin-node.service');
  writeFileSync(file, text);
  const r = spawnSync('systemd-analyze', ['verify', file], { encoding: 'utf8' });
  return { status: r.status, stderr: r.stderr };
}

describe('netplugin-node.service', () => {
  const svc = service(UNIT);
  const exec = svc.get('ExecStart')![0]!.split(/\s+/);

  it('starts the agent with flags it has, the conflist install-cni writes and a node name', () => {
    expect(exec.slice(0, 2)).toEqual(['/usr/bin/node', '/opt/netplugin/dist/netplugin-node.cjs']);
    const help = execFileSync(process.execPath, [join(ROOT, 'dist/netplugin-node.cjs'), '--help'], {
      encoding: 'utf8',
    });
    const flags = exec.filter((a) => a.startsWith('--'));
    expect(flags).toEqual(expect.arrayContaining(['--socket', '--config', '--nodename', '--health-addr']));
    for (const f of flags) expect(help, `${f} is not in netplugin-node --help`).toContain(f);
    expect(exec[exec.indexOf('--config') + 1]).toBe('/etc/cni/net.d/10-netplugin.conflist');
    const installHelp = execFileSync(process.execPath, [join(ROOT, 'dist/netpluginctl.mjs'), 'install-cni', '--help'], {
      encoding: 'utf8',
    });
    expect(installHelp).toContain('default /etc/cni/net.d');
    expect(installHelp).toContain('default 10-netplugin.conflist');
    // The variables ExecStart uses have defaults in the unit.
    for (const m of svc.get('ExecStart')![0]!.matchAll(/\$\{?([A-Z_]+)\}?/g)) {
      expect(
        svc.get('Environment')!.some((e) => e.startsWith(`${m[1]}=`)),
        m[1],
      ).toBe(true);
    }
  });

  it('keeps /run/netplugin (IPAM lock, endpoint status) across restarts', () => {
    expect(exec[exec.indexOf('--socket') + 1]!.startsWith('/run/netplugin/')).toBe(true);
    expect(svc.get('RuntimeDirectory')).toEqual(['netplugin']);
    expect(svc.get('RuntimeDirectoryPreserve')).toEqual(['yes']);
  });

  it('passes systemd-analyze verify, and fails it when broken', () => {
    expect(verify(UNIT)).toMatchObject({ status: 0, stderr: '' });
    expect(verify(UNIT.replace('RuntimeDirectoryPreserve=yes', 'RuntimeDirectoryPreserve=sometimes')).stderr).toMatch(
      /Failed to parse runtime directory preserve mode/,
    );
  });

  it('as install-cni --agent writes it for another installation', async () => {
    const pkg = join(tmp, 'pkg');
    mkdirSync(join(pkg, 'dist'), { recursive: true });
    mkdirSync(join(pkg, 'deploy'), { recursive: true });
    for (const p of ['netplugin', 'netplugin-ipam']) writeFileSync(join(pkg, 'dist', `${p}.mjs`), '');
    writeFileSync(join(pkg, 'deploy/netplugin-node.service'), UNIT);
    const sd = join(tmp, 'systemd');
    const code = await runCtl(
      [
        'install-cni',
        '--bin-dir',
        join(tmp, 'bin'),
        '--conf-dir',
        join(tmp, 'conf'),
        '--etcd-endpoints',
        'http://127.0.0.1:2379',
        '--launcher',
        '--agent',
        '--systemd-dir',
        sd,
      ],
      {
        env: {},
        stdout: () => {},
        stderr: () => {},
        packageDir: pkg,
        nodePath: process.execPath,
        inPod: false,
      },
    );
    expect(code).toBe(0);
    const written = readFileSync(join(sd, 'netplugin-node.service'), 'utf8');
    expect(
      service(written).get('ExecStart')![0]!.startsWith(`${process.execPath} ${pkg}/dist/netplugin-node.cjs `),
    ).toBe(true);
    expect(verify(written)).toMatchObject({ status: 0, stderr: '' });
  });
});
