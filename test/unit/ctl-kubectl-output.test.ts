// netpluginctl's kubectl output habits, in-process on the in-memory datastore:
// -o jsonpath (kubectl's JSONPath subset and semantics), -o custom-columns,
// --sort-by, --show-labels, "did you mean" for kinds, version --short and
// patch --type json (RFC 6902).
import { describe, expect, it } from 'vitest';
import { MemoryDatastore } from '../../src/datastore/memory.js';
import { runCtl } from '../../src/ctl/index.js';
import { parseJsonPath } from '../../src/ctl/jsonpath.js';
import { applyJsonPatch, parseJsonPatch } from '../../src/ctl/json-patch.js';
import { API_VERSION } from '../../src/model/resources.js';

async function ctl(
  ds: MemoryDatastore,
  argv: string[],
  stdin?: string,
): Promise<{ code: number; out: string; err: string }> {
  let out = '';
  let err = '';
  const code = await runCtl(argv, {
    env: { ETCD_ENDPOINTS: 'http://127.0.0.1:2379' },
    stdin,
    stdout: (s) => (out += s),
    stderr: (s) => (err += s),
    openDatastore: async () => ds,
  });
  return { code, out, err };
}

const pool = (name: string, cidr: string, labels: Record<string, string> = {}, extra = '') =>
  `apiVersion: ${API_VERSION}\nkind: IPPool\nmetadata: {name: ${name}, labels: ${JSON.stringify(labels)}}\nspec: ` +
  `{cidr: ${cidr}${extra}}\n`;

async function seeded(): Promise<MemoryDatastore> {
  const ds = new MemoryDatastore();
  const r = await ctl(
    ds,
    ['apply', '-f', '-'],
    [
      pool('b', '10.1.0.0/16', { zone: 'a' }, ', blockSize: 24'),
      pool('a', '10.9.0.0/16', {}, ', blockSize: 28'),
      pool('c', '10.5.0.0/16', { zone: 'c', tier: 'x' }),
    ].join('---\n'),
  );
  expect(r.err).toBe('');
  return ds;
}

describe('jsonpath evaluator (kubectl semantics)', () => {
  const list = {
    kind: 'List',
    items: [
      { metadata: { name: 'a', labels: { 'k.io/x': '1' } }, spec: { n: 1, ports: [1, 2, 3] } },
      { metadata: { name: 'b' }, spec: { n: 2, ports: [4] } },
    ],
  };
  const ev = (t: string) => parseJsonPath(t).evaluate(list);
  it('fields, wildcards, indexes, slices, literals, ranges, filters, recursion', () => {
    expect(ev('{.kind}')).toBe('List');
    expect(ev('{.items[*].metadata.name}')).toBe('a b');
    expect(ev('{.items[0].spec}')).toBe('{"n":1,"ports":[1,2,3]}');
    expect(ev('{.items[-1:].metadata.name}')).toBe('b');
    expect(ev('{.items[0].spec.ports[1:]}')).toBe('2 3');
    expect(ev('{.items[0].spec.ports[-1]}')).toBe('3');
    expect(ev('names: {.items[*].metadata.name}!')).toBe('names: a b!');
    expect(ev('{range .items[*]}{.metadata.name}{"\\t"}{.spec.n}{"\\n"}{end}')).toBe('a\t1\nb\t2\n');
    expect(ev('{range .items[*]}[{range .spec.ports[*]}{@};{end}]{end}')).toBe('[1;2;3;][4;]');
    expect(ev('{.items[?(@.spec.n==2)].metadata.name}')).toBe('b');
    expect(ev('{.items[?(@.metadata.labels)].metadata.name}')).toBe('a');
    expect(ev("{.items[0].metadata.labels['k.io/x']}")).toBe('1');
    expect(ev('{..name}')).toBe('a b');
    expect(ev('{range .items[*]}{$.kind}/{.metadata.name} {end}')).toBe('List/a List/b ');
    // A missing key prints nothing (kubectl get's --allow-missing-template-keys=true).
    expect(ev('{.items[*].metadata.nope}x')).toBe('x');
  });
  it('names what is wrong in a bad template', () => {
    expect(() => parseJsonPath('{.items[*]')).toThrow(/unclosed "\{"/);
    expect(() => parseJsonPath('{range .items[*]}{.x}')).toThrow(/without \{end\}/);
    expect(() => parseJsonPath('{end}')).toThrow(/without \{range/);
    expect(() => parseJsonPath('{.items[a:b]}')).toThrow(/unsupported \[a:b\]/);
  });
});

describe('get output options', () => {
  it('-o jsonpath on a list and on one object', async () => {
    const ds = await seeded();
    expect((await ctl(ds, ['get', 'ippools', '-o', 'jsonpath={.items[*].metadata.name}'])).out).toBe('a b c');
    const r = await ctl(ds, [
      'get',
      'pools',
      '-o=jsonpath={range .items[*]}{.metadata.name}={.spec.cidr}{"\\n"}{end}',
      '--sort-by',
      '.spec.cidr',
    ]);
    expect(r.out).toBe('b=10.1.0.0/16\nc=10.5.0.0/16\na=10.9.0.0/16\n');
    expect((await ctl(ds, ['get', 'ippool', 'c', '-o', 'jsonpath={.metadata.labels.tier}'])).out).toBe('x');
    const bad = await ctl(ds, ['get', 'ippools', '-o', 'jsonpath={.items[*']);
    expect(bad.code).toBe(1);
    expect(bad.err).toContain('unclosed');
    const typo = await ctl(ds, ['get', 'ippools', '-o', 'jsonpth']);
    expect(typo.err).toContain('did you mean jsonpath?');
  });

  it('-o custom-columns with <none> for missing values, --sort-by numbers, --show-labels', async () => {
    const ds = await seeded();
    const cc = await ctl(ds, [
      'get',
      'ippools',
      '-o',
      'custom-columns=NAME:.metadata.name,BS:.spec.blockSize,ZONE:{.metadata.labels.zone}',
      '--sort-by={.spec.blockSize}',
    ]);
    expect(cc.out).toBe(['NAME   BS   ZONE', 'b      24   a', 'c      26   c', 'a      28   <none>', ''].join('\n'));
    const nh = await ctl(ds, [
      'get',
      'ippools',
      '-o',
      'custom-columns=NAME:metadata.name',
      '--no-headers',
      '--sort-by',
      'metadata.name',
    ]);
    expect(nh.out).toBe('a\nb\nc\n');
    const bad = await ctl(ds, ['get', 'ippools', '-o', 'custom-columns=NAME']);
    expect(bad.err).toContain('is not HEADER:PATH');
    const sl = await ctl(ds, ['get', 'ippools', '--show-labels', '--sort-by=.metadata.name']);
    const lines = sl.out.trim().split('\n');
    expect(lines[0]).toMatch(/^NAME\s+CIDR\s+SELECTOR\s+LABELS$/);
    expect(lines[1]).toMatch(/^a\s.*\s<none>$/);
    expect(lines[3]).toMatch(/^c\s.*\stier=x,zone=c$|^c\s.*\szone=c,tier=x$/);
    const json = JSON.parse((await ctl(ds, ['get', 'ippools', '-o', 'json', '--sort-by', '.spec.cidr'])).out);
    expect(json.items.map((i: { metadata: { name: string } }) => i.metadata.name)).toEqual(['b', 'c', 'a']);
  });

  it('"did you mean" for a mistyped kind', async () => {
    const ds = new MemoryDatastore();
    const r = await ctl(ds, ['get', 'ippol']);
    expect(r.code).toBe(1);
    expect(r.err).toContain('unknown resource kind "ippol"; did you mean ippool?');
    expect((await ctl(ds, ['get', 'globalnetworkpolicys'])).err).toContain('did you mean globalnetworkpolicy');
    expect((await ctl(ds, ['get', 'zzzz'])).err).toMatch(/unknown resource kind "zzzz"; known kinds: IPPool/);
  });

  it('version --short', async () => {
    const ds = new MemoryDatastore();
    await ctl(ds, ['datastore', 'init']);
    const r = await ctl(ds, ['version', '--short']);
    expect(r.out).toMatch(/^Client Version: \d+\.\d+\.\d+\S*\nCluster Version: \d+\.\d+\.\d+\S*\n$/);
  });
});

describe('--log-format json', () => {
  it('covers every error line, also the ones printed before the exit code (not found, one bad document of several)', async () => {
    const ds = await seeded();
    const r = await ctl(ds, ['get', 'ippool', 'a', 'nope', '--log-format', 'json', '-o', 'name']);
    expect(r.code).toBe(1);
    expect(r.out).toBe('ippool/a\n');
    const lines = r.err
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l));
    expect(lines).toEqual([expect.objectContaining({ level: 'ERROR', msg: 'IPPool "nope" not found' })]);
    const w = await ctl(
      ds,
      ['--log-format=json', 'apply', '-f', '-'],
      pool('ok', '10.20.0.0/16') + '---\n' + pool('Bad_Name', '10.21.0.0/16'),
    );
    expect(w.code).toBe(1);
    const wl = w.err
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l));
    expect(wl).toHaveLength(1);
    expect(wl[0]).toMatchObject({
      level: 'ERROR',
      msg: expect.stringContaining('metadata.name: "Bad_Name" is not a valid name'),
    });
    const f = await ctl(ds, ['get', 'zzz', '--log-format', 'json']);
    expect(JSON.parse(f.err.trim())).toMatchObject({
      level: 'ERROR',
      exitCode: 1,
      msg: expect.stringContaining('unknown resource kind'),
    });
  });
});

describe('patch --type json (RFC 6902)', () => {
  it('add, remove, replace, move, copy and test, all or nothing', () => {
    const doc = { spec: { a: 1, list: ['x', 'y'] }, metadata: { labels: { 'a/b': '1' } } };
    const ops = parseJsonPatch([
      { op: 'add', path: '/spec/b', value: 2 },
      { op: 'add', path: '/spec/list/-', value: 'z' },
      { op: 'add', path: '/spec/list/0', value: 'w' },
      { op: 'replace', path: '/spec/a', value: 10 },
      { op: 'remove', path: '/spec/list/1' },
      { op: 'copy', from: '/spec/a', path: '/spec/c' },
      { op: 'move', from: '/metadata/labels/a~1b', path: '/metadata/labels/moved' },
      { op: 'test', path: '/spec/c', value: 10 },
    ]);
    expect(applyJsonPatch(doc, ops)).toEqual({
      spec: { a: 10, b: 2, c: 10, list: ['w', 'y', 'z'] },
      metadata: { labels: { moved: '1' } },
    });
    expect(doc.spec.a).toBe(1);
    expect(() => applyJsonPatch(doc, parseJsonPatch([{ op: 'test', path: '/spec/a', value: 2 }]))).toThrow(
      /operation 1 \(test \/spec\/a\): test failed: \/spec\/a is 1, not 2; nothing was changed/,
    );
    expect(() => applyJsonPatch(doc, parseJsonPatch([{ op: 'replace', path: '/spec/nope', value: 2 }]))).toThrow(
      /does not exist \(use "add"/,
    );
    expect(() => applyJsonPatch(doc, parseJsonPatch([{ op: 'remove', path: '/spec/list/5' }]))).toThrow(
      /index 5 is out of range/,
    );
    expect(() => parseJsonPatch([{ op: 'frob', path: '/x' }])).toThrow(/"op" must be one of add, remove/);
    expect(() => parseJsonPatch([{ op: 'add', path: '/x' }])).toThrow(/"value" is missing/);
    expect(() => parseJsonPatch({ op: 'add' })).toThrow(/must be a JSON array/);
  });

  it('patches a stored resource, refuses other metadata, and a failed test changes nothing', async () => {
    const ds = await seeded();
    const ok = await ctl(ds, [
      'patch',
      'ippool',
      'c',
      '--type',
      'json',
      '-p',
      '[{"op":"test","path":"/spec/cidr","value":"10.5.0.0/16"},{"op":"add","path":"/spec/disabled","value":true},{"op":"remove","path":"/metadata/labels/tier"}]',
    ]);
    expect(ok.err).toBe('');
    expect(ok.out).toBe('ippool/c patched\n');
    const c = await ds.get('IPPool', 'c');
    expect(c.spec.disabled).toBe(true);
    expect(c.metadata.labels).toEqual({ zone: 'c' });
    const failed = await ctl(ds, [
      'patch',
      'ippool',
      'c',
      '--type=json',
      '-p',
      '[{"op":"replace","path":"/spec/natOutgoing","value":true},{"op":"test","path":"/spec/disabled","value":false}]',
    ]);
    expect(failed.code).toBe(1);
    expect(failed.err).toContain('operation 2 (test /spec/disabled): test failed');
    expect((await ds.get('IPPool', 'c')).spec.natOutgoing).not.toBe(true);
    const meta = await ctl(ds, [
      'patch',
      'ippool',
      'c',
      '--type',
      'json',
      '-p',
      '[{"op":"replace","path":"/metadata/name","value":"d"}]',
    ]);
    expect(meta.err).toContain('metadata.name cannot be patched');
    const other = await ctl(ds, ['patch', 'ippool', 'c', '--type', 'strategic', '-p', '{}']);
    expect(other.err).toContain('use --type merge');
  });
});
