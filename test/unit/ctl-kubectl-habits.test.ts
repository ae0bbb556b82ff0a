// netpluginctl's kubectl habits on the in-memory datastore, in-process:
// get KIND/NAME, -o name, --no-headers, -f DIR, --dry-run on every writing
// command, validate -f, label, patch --type merge, completion scripts.
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { MemoryDatastore } from '../../src/datastore/memory.js';
import { runCtl } from '../../src/ctl/index.js';
import { mergePatch } from '../../src/ctl/json-patch.js';
import { API_VERSION } from '../../src/model/resources.js';
import { createIpam } from '../../src/ipam/index.js';

let ds: MemoryDatastore;
let dir: string;
beforeEach(() => {
  ds = new MemoryDatastore();
  dir = mkdtempSync(join(tmpdir(), `ctl-habits-${process.pid}-`));
});
afterEach(() => rmSync(dir, { recursive: true, force: true }));

async function ctl(argv: string[], stdin?: string): Promise<{ code: number; out: string; err: string }> {
  let out = '';
  let err = '';
  const code = await runCtl(argv, {
    env: { ETCD_ENDPOINTS: 'http://127.0.0.1:2379' },
    stdin,
    cwd: dir,
    stdout: (s) => (out += s),
    stderr: (s) => (err += s),
    openDatastore: async () => ds,
  });
  return { code, out, err };
}

const pool = (name: string, cidr: string, labels: Record<string, string> = {}) =>
  `apiVersion: ${API_VERSION}\nkind: IPPool\nmetadata: {name: ${name}, labels: ${JSON.stringify(labels)}}\nspec: {cidr: ${cidr}}\n`;

async function seed(): Promise<void> {
  const r = await ctl(
    ['apply', '-f', '-'],
    pool('a', '10.1.0.0/16', { zone: 'a' }) + '---\n' + pool('b', '10.2.0.0/16'),
  );
  expect(r.code).toBe(0);
}

describe('get', () => {
  it('takes KIND/NAME, prints -o name and tables --no-headers', async () => {
    await seed();
    const one = await ctl(['get', 'ippool/a', '-o', 'json']);
    expect(JSON.parse(one.out).metadata.name).toBe('a');
    const two = await ctl(['get', 'pool/a', 'ippools/b', '-o', 'name']);
    expect(two.out).toBe('ippool/a\nippool/b\n');
    expect((await ctl(['get', 'ippools', '-o', 'name'])).out).toBe('ippool/a\nippool/b\n');
    const t = await ctl(['get', 'ippools']);
    expect(t.out.split('\n')[0]).toMatch(/^NAME\s+CIDR/);
    const nh = await ctl(['get', 'ippools', '--no-headers']);
    expect(
      nh.out
        .split('\n')
        .filter(Boolean)
        .map((l) => l.split(/\s+/)[0]),
    ).toEqual(['a', 'b']);
    const mixed = await ctl(['get', 'ippool/a', 'node/x']);
    expect(mixed.code).toBe(1);
    expect(mixed.err).toContain('give names of one kind');
  });
});

describe('-f DIR and --dry-run', () => {
  it('applies every YAML/JSON file of a directory in name order, ignoring others', async () => {
    const d = join(dir, 'manifests');
    mkdirSync(d);
    writeFileSync(join(d, '20-b.yaml'), pool('b', '10.2.0.0/16'));
    writeFileSync(
      join(d, '10-a.json'),
      JSON.stringify({
        apiVersion: API_VERSION,
        kind: 'IPPool',
        metadata: { name: 'a' },
        spec: { cidr: '10.1.0.0/16' },
      }),
    );
    writeFileSync(join(d, 'README.md'), 'not a manifest');
    const r = await ctl(['apply', '-f', 'manifests']);
    expect(r.err).toBe('');
    expect(r.out).toBe('ippool/a created\nippool/b created\n');
    mkdirSync(join(dir, 'empty'));
    const e = await ctl(['apply', '-f', 'empty']);
    expect(e.code).toBe(1);
    expect(e.err).toContain('-f empty: the directory holds no .yaml, .yml or .json files');
  });

  it('apply, create, replace, delete, label and patch change nothing with --dry-run, yet still check', async () => {
    await seed();
    const before = JSON.stringify((await ds.list('IPPool')).items);
    const a = await ctl(['apply', '--dry-run', '-f', '-'], pool('c', '10.3.0.0/16'));
    expect(a.out).toBe('ippool/c created (dry run)\n');
    expect((await ctl(['create', '--dry-run=client', '-f', '-'], pool('d', '10.4.0.0/16'))).out).toBe(
      'ippool/d created (dry run)\n',
    );
    expect((await ctl(['replace', '--dry-run', '-f', '-'], pool('a', '10.1.0.0/16', { zone: 'b' }))).out).toBe(
      'ippool/a replaced (dry run)\n',
    );
    expect((await ctl(['delete', 'ippool', 'b', '--dry-run'])).out).toBe('ippool/b deleted (dry run)\n');
    expect((await ctl(['label', 'ippool', 'b', 'x=y', '--dry-run'])).out).toBe('ippool/b labeled (dry run)\n');
    expect((await ctl(['patch', 'ippool', 'b', '-p', '{"spec":{"disabled":true}}', '--dry-run'])).out).toBe(
      'ippool/b patched (dry run)\n',
    );
    expect(JSON.stringify((await ds.list('IPPool')).items)).toBe(before);
    // The checks still run: an overlapping pool and a missing one fail.
    const overlap = await ctl(['apply', '--dry-run', '-f', '-'], pool('e', '10.1.128.0/17'));
    expect(overlap.code).toBe(1);
    expect(overlap.err).toMatch(/overlap/);
    expect((await ctl(['delete', 'ippool', 'zz', '--dry-run'])).code).toBe(1);
    expect((await ctl(['apply', '--dry-run=server', '-f', '-'], pool('c', '10.3.0.0/16'))).err).toContain(
      '--dry-run=server is not supported',
    );
  });

  it('install-cni --dry-run writes nothing and prints the plan', async () => {
    const pkg = join(dir, 'pkg');
    mkdirSync(join(pkg, 'dist'), { recursive: true });
    for (const p of ['netplugin', 'netplugin-ipam']) writeFileSync(join(pkg, 'dist', `${p}.mjs`), '');
    let out = '';
    const code = await runCtl(
      [
        'install-cni',
        '--dry-run',
        '--bin-dir',
        join(dir, 'bin'),
        '--conf-dir',
        join(dir, 'conf'),
        '--etcd-endpoints',
        'http://127.0.0.1:2379',
      ],
      {
        env: {},
        stdout: (s) => (out += s),
        stderr: () => {},
        packageDir: pkg,
        nodePath: process.execPath,
        inPod: false,
      },
    );
    expect(code).toBe(0);
    expect(out).toContain(`${join(dir, 'conf/10-netplugin.conflist')}`);
    expect(out).toContain('"type": "netplugin"');
    expect(readdirSync(dir).sort()).toEqual(['pkg']);
  });
});

describe('validate, label, patch', () => {
  it('validate -f reports each document and fails on an invalid or overlapping pool, without a datastore', async () => {
    writeFileSync(join(dir, 'ok.yaml'), pool('a', '10.1.0.0/16') + '---\n' + pool('b', '10.2.0.0/16'));
    const ok = await ctl(['validate', '-f', 'ok.yaml']);
    expect(ok).toMatchObject({ code: 0, err: '' });
    expect(ok.out).toBe('ok.yaml document 1: ippool/a valid\nok.yaml document 2: ippool/b valid\n');
    writeFileSync(
      join(dir, 'bad.yaml'),
      pool('a', '10.1.0.1/16') + '---\n' + pool('b', '10.2.0.0/16') + '---\n' + pool('c', '10.2.3.0/24'),
    );
    const bad = await ctl(['validate', '-f', 'bad.yaml']);
    expect(bad.code).toBe(1);
    expect(bad.err).toMatch(/document 1: .*10\.1\.0\.1\/16/);
    expect(bad.err).toMatch(/document 3: .*overlap/);
    expect(bad.out).toContain('document 2: ippool/b valid');
    expect((await ds.list('IPPool')).items).toHaveLength(0);
  });

  it('label sets and removes labels, refuses to overwrite without --overwrite', async () => {
    await seed();
    expect((await ctl(['label', 'ippool', 'b', 'zone=b', 'tier=x'])).out).toBe('ippool/b labeled\n');
    expect((await ds.get('IPPool', 'b')).metadata.labels).toEqual({ zone: 'b', tier: 'x' });
    const clash = await ctl(['label', 'ippool/b', 'zone=c']);
    expect(clash.code).toBe(1);
    expect(clash.err).toContain('already has label zone=b; pass --overwrite');
    expect((await ctl(['label', 'ippool/b', 'zone=c', 'tier-', '--overwrite'])).code).toBe(0);
    expect((await ds.get('IPPool', 'b')).metadata.labels).toEqual({ zone: 'c' });
    expect((await ctl(['label', 'ippool', 'b', 'bad key=1'])).err).toContain('is not a valid label key');
    expect((await ctl(['label', 'wep', 'x', 'a=b'])).err).toContain('written by the plugin only');
  });

  it('patch --type merge changes spec and labels, validates the result, and rejects other types', async () => {
    await seed();
    expect(
      (
        await ctl([
          'patch',
          'ippool',
          'a',
          '--type',
          'merge',
          '-p',
          '{"spec":{"disabled":true},"metadata":{"labels":{"zone":null,"team":"net"}}}',
        ])
      ).out,
    ).toBe('ippool/a patched\n');
    const a = await ds.get('IPPool', 'a');
    expect(a.spec.disabled).toBe(true);
    expect(a.metadata.labels).toEqual({ team: 'net' });
    const cidr = await ctl(['patch', 'ippool', 'a', '-p', '{"spec":{"cidr":"10.9.0.0/16"}}']);
    expect(cidr.code).toBe(1);
    expect(cidr.err).toMatch(/cidr/);
    expect((await ctl(['patch', 'ippool', 'a', '--type', 'strategic', '-p', '{}'])).err).toContain(
      '--type "strategic" is not supported',
    );
    expect((await ctl(['patch', 'ippool', 'a', '-p', '{"status":{}}'])).err).toContain('only spec and metadata');
    expect(mergePatch({ a: { b: 1, c: [1] }, d: 1 }, { a: { b: null, c: [2] }, e: 'x' })).toEqual({
      a: { c: [2] },
      d: 1,
      e: 'x',
    });
  });
});

describe('completion', () => {
  const words = async (...w: string[]) => (await ctl(['__complete', ...w])).out.split('\n').filter(Boolean);
  it('completes every command of the overview, their subcommands and flags, kinds and resource names', async () => {
    await seed();
    const cmds = await words('');
    for (const c of [
      'apply',
      'get',
      'describe',
      'patch',
      'ipam',
      'policy',
      'datastore',
      'installation',
      'upgrade',
      'version',
      'install-cni',
      'completion',
      'flows',
      'node',
    ])
      expect(cmds).toContain(c);
    expect(await words('ipam', '')).toEqual(expect.arrayContaining(['check', 'release', 'show']));
    expect(await words('datastore', 'm')).toEqual(['migrate']);
    expect(await words('upgrade', '')).toEqual(expect.arrayContaining(['auto-hep', 'check', 'finish', 'owner-refs']));
    expect(await words('installation', '')).toEqual(['apply', 'render']);
    expect(await words('policy', '')).toEqual(['explain', 'promote']);
    expect(await words('get', '--s')).toEqual(expect.arrayContaining(['--selector', '--show-labels', '--sort-by']));
    expect(await words('ipam', 'release', '--d')).toEqual(['--dry-run']);
    expect(await words('installation', 'apply', '--')).toContain('--dry-run');
    expect(await words('flows', '--f')).toEqual(['--follow']);
    expect(await words('node', 'diags', '--')).toContain('--help');
    expect(await words('get', 'ipp')).toEqual(['ipp', 'ippool', 'ippools']);
    expect(await words('get', 'ippool', '')).toEqual(['a', 'b']);
    expect(await words('get', '-o', 'wide', 'pool', 'a', '')).toEqual(['a', 'b']);
    expect(await words('label', 'pool/')).toEqual(['pool/a', 'pool/b']);
    expect(await words('get', '-o', 'js')).toEqual(['json', 'jsonpath=']);
    expect(await words('completion', '')).toEqual(['bash', 'fish', 'zsh']);
    expect(await words('ipam', 'show', 'x')).toEqual([]);
  });

  for (const shell of ['bash', 'zsh', 'fish']) {
    it(`prints a ${shell} script that ${shell} loads and registers`, async () => {
      const r = await ctl(['completion', shell]);
      expect(r.code).toBe(0);
      const script = join(dir, `c.${shell}`);
      writeFileSync(script, r.out);
      const probe = {
        bash: `source ${script} && complete -p netpluginctl`,
        zsh: `autoload -Uz compinit && compinit -u -d ${dir}/zcompdump && source ${script} && print -r -- $_comps[netpluginctl]`,
        fish: `source ${script}; and complete -c netpluginctl`,
      }[shell]!;
      const got = execFileSync(shell, ['-c', probe], { encoding: 'utf8', env: { PATH: process.env.PATH, HOME: dir } });
      expect(got).toContain(
        shell === 'zsh'
          ? '_netpluginctl'
          : shell === 'bash'
            ? '-F _netpluginctl netpluginctl'
            : '__netpluginctl_complete',
      );
    });
  }
  it('rejects other shells', async () => {
    expect((await ctl(['completion', 'tcsh'])).err).toContain('use bash, zsh, fish');
  });
});

describe('progress on a terminal', () => {
  it('ipam check and release show a progress line on stderr only when it is a TTY', async () => {
    await ctl(['apply', '-f', '-'], pool('p', '10.60.0.0/24'));
    await ctl(['apply', '-f', '-'], `apiVersion: ${API_VERSION}\nkind: Node\nmetadata: {name: n1}\nspec: {}\n`);
    const ipam = createIpam(ds, { lock: 'none' });
    // 25 handles without workload endpoints: all leaked.
    for (let i = 0; i < 25; i++)
      await ipam.assign({
        handleID: `k8s-pod-network.c${i}`,
        node: 'n1',
        attrs: {},
        assignIPv4: true,
        assignIPv6: false,
      });
    const run = async (argv: string[], tty: boolean) => {
      let out = '';
      let err = '';
      const code = await runCtl(argv, {
        env: { ETCD_ENDPOINTS: 'http://127.0.0.1:2379' },
        cwd: dir,
        stdout: (x) => (out += x),
        stderr: (x) => (err += x),
        openDatastore: async () => ds,
        stderrIsTTY: tty,
      });
      return { code, out, err };
    };
    const plain = await run(['ipam', 'check', '-o', 'r.json'], false);
    expect(plain.code).toBe(1);
    expect(plain.err).toBe('');
    const tty = await run(['ipam', 'check'], true);
    expect(tty.err).toContain('\r\x1b[Kipam check: handles 25/25');
    expect(tty.err.endsWith('\r\x1b[K')).toBe(true);
    expect(tty.out).toBe(
      plain.out.replace(
        /report written to r\.json.*\n/,
        'write a report with -o FILE, review it, then run: netpluginctl ipam release --from-report FILE\n',
      ),
    );
    const rel = await run(['ipam', 'release', '--from-report', 'r.json'], true);
    expect(rel.code).toBe(0);
    expect(rel.err).toContain('ipam release: handles 25/25');
    expect(rel.out.match(/^released handle /gm)).toHaveLength(25);
  });
});
