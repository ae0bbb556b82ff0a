// The built executables run as a runtime runs them: environment + stdin in,
// JSON on stdout, exit code out. NODE_EXTRA_CA_CERTS is removed as the shim does.
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SUPPORTED_VERSIONS } from '../../src/cni/types.js';

const root = join(__dirname, '..', '..');
const BINS = ['netplugin', 'netplugin-ipam'] as const;
const tmp = mkdtempSync(join(tmpdir(), `cni-exec-${process.pid}-`));

beforeAll(() => {
  if (!BINS.every((b) => existsSync(join(root, 'dist', `${b}.mjs`)))) {
    const r = spawnSync(process.execPath, [join(root, 'scripts/build.mjs')], { cwd: root, encoding: 'utf8' });
    if (r.status !== 0) throw new Error(`build failed: ${r.stderr}`);
  }
});
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

function exec(bin: string, env: Record<string, string>, stdin: string) {
  const base: Record<string, string> = { PATH: process.env.PATH ?? '/usr/bin:/bin' };
  const r = spawnSync(process.execPath, [join(root, 'dist', `${bin}.mjs`)], {
    env: { ...base, ...env },
    input: stdin,
    encoding: 'utf8',
    timeout: 30_000,
  });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}
function jsonOnly(stdout: string): any {
  // Nothing but one JSON document on stdout.
  expect(stdout.trim().split('\n')).toHaveLength(1);
  return JSON.parse(stdout);
}

const ADD_ENV = {
  CNI_COMMAND: 'ADD',
  CNI_CONTAINERID: 'exec-test-1',
  CNI_NETNS: '/var/run/netns/none',
  CNI_IFNAME: 'eth0',
  CNI_PATH: '/usr/lib/cni',
};

describe.each(BINS)('%s', (bin) => {
  it.each(SUPPORTED_VERSIONS)('VERSION with cniVersion %s', (v) => {
    const r = exec(bin, { CNI_COMMAND: 'VERSION' }, JSON.stringify({ cniVersion: v }));
    expect(r.code).toBe(0);
    expect(jsonOnly(r.stdout)).toEqual({ cniVersion: v, supportedVersions: [...SUPPORTED_VERSIONS] });
  });
  it('VERSION with empty stdin', () => {
    const r = exec(bin, { CNI_COMMAND: 'VERSION' }, '');
    expect(r.code).toBe(0);
    expect(jsonOnly(r.stdout).supportedVersions).toEqual([...SUPPORTED_VERSIONS]);
  });
  it('VERSION with a 0.2.0 conf is code 1', () => {
    const r = exec(bin, { CNI_COMMAND: 'VERSION' }, '{"cniVersion":"0.2.0"}');
    expect(r.code).toBe(1);
    const j = jsonOnly(r.stdout);
    expect(j).toMatchObject({ cniVersion: '0.2.0', code: 1 });
    expect(j.msg).toContain('0.3.0, 0.3.1, 0.4.0, 1.0.0, 1.1.0');
  });
  it('bad env is code 4 JSON naming each variable', () => {
    const r = exec(
      bin,
      { CNI_COMMAND: 'ADD', CNI_IFNAME: 'way-too-long-ifname' },
      JSON.stringify({ cniVersion: '1.0.0', name: 'n', type: 'netplugin', ipam: { type: 'netplugin-ipam' } }),
    );
    expect(r.code).toBe(1);
    const j = jsonOnly(r.stdout);
    expect(j.code).toBe(4);
    for (const v of ['CNI_CONTAINERID', 'CNI_NETNS', 'CNI_IFNAME']) expect(j.msg).toContain(v);
    expect(r.stderr).toContain('CNI_CONTAINERID');
  });
  it('unknown CNI_COMMAND is code 4', () => {
    const r = exec(bin, { CNI_COMMAND: 'FROB' }, '{}');
    expect(r.code).toBe(1);
    expect(jsonOnly(r.stdout).code).toBe(4);
  });
  it('bad netconf is code 7 naming the field and the fix', () => {
    const conf = {
      cniVersion: '1.0.0',
      name: 'n',
      type: bin === 'netplugin' ? 'netplugin' : 'bridge',
      ipam: { type: 'netplugin-ipam', assign_ipv4: true },
    };
    const r = exec(bin, ADD_ENV, JSON.stringify(conf));
    expect(r.code).toBe(1);
    const j = jsonOnly(r.stdout);
    expect(j).toMatchObject({ cniVersion: '1.0.0', code: 7 });
    expect(j.msg).toContain('ipam.assign_ipv4: got boolean true; this field is a string: write "true" (quoted)');
    expect(r.stdout).not.toContain('    at ');
  });
  it('malformed JSON is code 6', () => {
    const r = exec(bin, ADD_ENV, '{"cniVersion":');
    expect(r.code).toBe(1);
    expect(jsonOnly(r.stdout).code).toBe(6);
  });
  it('STATUS at 1.0.0 is code 1', () => {
    const r = exec(
      bin,
      { CNI_COMMAND: 'STATUS' },
      JSON.stringify({ cniVersion: '1.0.0', name: 'n', type: 'netplugin', ipam: { type: 'netplugin-ipam' } }),
    );
    expect(r.code).toBe(1);
    expect(jsonOnly(r.stdout)).toMatchObject({ code: 1, msg: expect.stringContaining('does not allow STATUS') });
  });
  it('writes the log file the netconf names', () => {
    const file = join(tmp, bin, 'cni.log');
    const r = exec(
      bin,
      { ...ADD_ENV, CNI_ARGS: 'IgnoreUnknown=1;K8S_POD_NAMESPACE=ns;K8S_POD_NAME=p' },
      JSON.stringify({
        cniVersion: '1.0.0',
        name: 'n',
        type: 'netplugin',
        ipam: { type: 'netplugin-ipam' },
        mtu: 1,
        log_file_path: file,
      }),
    );
    expect(r.code).toBe(1);
    expect(readFileSync(file, 'utf8')).toMatch(/ERROR +\[\d+\] cid=exec-test-1 pod=ns\/p .*mtu: got number 1/);
  });
});
