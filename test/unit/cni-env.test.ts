import { describe, expect, it } from 'vitest';
import { parseEnv, parseCniArgs } from '../../src/cni/env.js';
import { CniError } from '../../src/errors.js';

const ADD = {
  CNI_COMMAND: 'ADD',
  CNI_CONTAINERID: 'abc123',
  CNI_NETNS: '/var/run/netns/x',
  CNI_IFNAME: 'eth0',
  CNI_PATH: '/opt/cni/bin:/usr/lib/cni',
};

function envError(env: Record<string, string | undefined>): CniError {
  try {
    parseEnv(env);
  } catch (e) {
    expect(e).toBeInstanceOf(CniError);
    return e as CniError;
  }
  throw new Error('expected a CniError');
}

describe('parseEnv: valid', () => {
  it('parses a full ADD environment', () => {
    const e = parseEnv({ ...ADD, CNI_ARGS: 'IgnoreUnknown=1;K8S_POD_NAMESPACE=ns;K8S_POD_NAME=web-0;FOO=bar' });
    expect(e).toEqual({
      command: 'ADD',
      containerId: 'abc123',
      netns: '/var/run/netns/x',
      ifname: 'eth0',
      path: ['/opt/cni/bin', '/usr/lib/cni'],
      args: { IgnoreUnknown: '1', K8S_POD_NAMESPACE: 'ns', K8S_POD_NAME: 'web-0', FOO: 'bar' },
    });
  });
  it('DEL tolerates a missing netns', () => {
    const e = parseEnv({ ...ADD, CNI_COMMAND: 'DEL', CNI_NETNS: undefined });
    expect(e.netns).toBe('');
  });
  it('STATUS needs only CNI_COMMAND and ignores the rest', () => {
    expect(parseEnv({ CNI_COMMAND: 'STATUS', CNI_IFNAME: 'bad/name' })).toMatchObject({
      command: 'STATUS',
      ifname: '',
      path: [],
    });
  });
  it('GC needs CNI_PATH', () => {
    expect(parseEnv({ CNI_COMMAND: 'GC', CNI_PATH: '/opt/cni/bin' }).path).toEqual(['/opt/cni/bin']);
    expect(envError({ CNI_COMMAND: 'GC' }).message).toContain('CNI_PATH is not set (required for GC)');
  });
  it('CNI_PATH is optional for ADD', () => {
    expect(parseEnv({ ...ADD, CNI_PATH: undefined }).path).toEqual([]);
  });
  it.each(['a', 'A1', '0_.-x', 'x'.repeat(200)])('container ID %s is valid', (id) => {
    expect(parseEnv({ ...ADD, CNI_CONTAINERID: id }).containerId).toBe(id);
  });
  it.each(['eth0', 'a', 'x'.repeat(15), 'net1.100', 'é'.repeat(7)])('ifname %s is valid', (n) => {
    expect(parseEnv({ ...ADD, CNI_IFNAME: n }).ifname).toBe(n);
  });
});

describe('parseEnv: errors (code 4)', () => {
  const cases: Array<[string, Record<string, string | undefined>, string[]]> = [
    ['no command', { ...ADD, CNI_COMMAND: undefined }, ['CNI_COMMAND is not set']],
    [
      'unknown command',
      { ...ADD, CNI_COMMAND: 'FROB' },
      ['CNI_COMMAND: unknown command "FROB"', 'ADD, DEL, CHECK, VERSION, STATUS, GC'],
    ],
    ['no container id', { ...ADD, CNI_CONTAINERID: undefined }, ['CNI_CONTAINERID is not set (required for ADD)']],
    ['container id starts with -', { ...ADD, CNI_CONTAINERID: '-x' }, ['CNI_CONTAINERID: got "-x"']],
    ['container id with /', { ...ADD, CNI_CONTAINERID: 'a/b' }, ['CNI_CONTAINERID: got "a/b"']],
    ['no netns on ADD', { ...ADD, CNI_NETNS: '' }, ['CNI_NETNS is not set (required for ADD)']],
    [
      'no netns on CHECK',
      { ...ADD, CNI_COMMAND: 'CHECK', CNI_NETNS: undefined },
      ['CNI_NETNS is not set (required for CHECK)'],
    ],
    ['relative netns', { ...ADD, CNI_NETNS: 'netns/x' }, ['CNI_NETNS: got "netns/x"; expected an absolute path']],
    ['no ifname', { ...ADD, CNI_IFNAME: undefined }, ['CNI_IFNAME is not set']],
    ['ifname too long', { ...ADD, CNI_IFNAME: 'x'.repeat(16) }, ['at most 15 bytes (this one is 16)']],
    ['ifname multibyte too long', { ...ADD, CNI_IFNAME: 'é'.repeat(8) }, ['at most 15 bytes (this one is 16)']],
    ['ifname .', { ...ADD, CNI_IFNAME: '.' }, ["'.' and '..' are not valid"]],
    ['ifname ..', { ...ADD, CNI_IFNAME: '..' }, ["'.' and '..' are not valid"]],
    ['ifname /', { ...ADD, CNI_IFNAME: 'a/b' }, ["must not contain '/', ':' or whitespace"]],
    ['ifname :', { ...ADD, CNI_IFNAME: 'eth0:1' }, ["must not contain '/', ':' or whitespace"]],
    ['ifname space', { ...ADD, CNI_IFNAME: 'eth 0' }, ["must not contain '/', ':' or whitespace"]],
    ['ifname tab', { ...ADD, CNI_IFNAME: 'eth\t0' }, ["must not contain '/', ':' or whitespace"]],
    [
      'DEL without container id',
      { CNI_COMMAND: 'DEL', CNI_IFNAME: 'eth0' },
      ['CNI_CONTAINERID is not set (required for DEL)'],
    ],
  ];
  it.each(cases)('%s', (_n, env, parts) => {
    const e = envError(env);
    expect(e.code).toBe(4);
    for (const p of parts) expect(e.message).toContain(p);
  });
  it('names every bad variable in one message', () => {
    const e = envError({ CNI_COMMAND: 'ADD', CNI_CONTAINERID: '_x', CNI_IFNAME: 'a:b', CNI_ARGS: 'NOPE=1' });
    expect(e.code).toBe(4);
    for (const v of ['CNI_NETNS', 'CNI_CONTAINERID', 'CNI_IFNAME', 'CNI_ARGS: unknown key NOPE'])
      expect(e.message).toContain(v);
  });
});

describe('parseCniArgs', () => {
  const ok = (s: string) => {
    const problems: string[] = [];
    const args = parseCniArgs(s, problems);
    expect(problems).toEqual([]);
    return args;
  };
  const bad = (s: string) => {
    const problems: string[] = [];
    parseCniArgs(s, problems);
    expect(problems.length).toBeGreaterThan(0);
    return problems.join('; ');
  };
  it('reads the Kubernetes keys', () => {
    expect(ok('K8S_POD_NAMESPACE=default;K8S_POD_NAME=web;K8S_POD_INFRA_CONTAINER_ID=abc;K8S_POD_UID=u-1')).toEqual({
      K8S_POD_NAMESPACE: 'default',
      K8S_POD_NAME: 'web',
      K8S_POD_INFRA_CONTAINER_ID: 'abc',
      K8S_POD_UID: 'u-1',
    });
  });
  it('keeps "=" inside values and skips empty pairs', () => {
    expect(ok('K8S_POD_UID=a=b;;')).toEqual({ K8S_POD_UID: 'a=b' });
  });
  it.each(['1', 'true', 'TRUE', 'True'])('IgnoreUnknown=%s lets unknown keys through', (v) => {
    expect(ok(`IgnoreUnknown=${v};X=1`).X).toBe('1');
  });
  it.each(['0', 'false'])('IgnoreUnknown=%s does not', (v) => {
    expect(bad(`IgnoreUnknown=${v};X=1`)).toContain('unknown key X');
  });
  it('rejects a bad IgnoreUnknown value', () => expect(bad('IgnoreUnknown=yes')).toContain('IgnoreUnknown="yes"'));
  it('rejects a pair without =', () => expect(bad('K8S_POD_NAME')).toContain('is not KEY=VALUE'));
  it('rejects a non-alphanumeric key', () => expect(bad('K-1=2')).toContain('key "K-1" is not alphanumeric'));
  it.each(['10.0.0.5', 'fd00::5', '10.0.0.5,fd00::5', '10.0.0.5, fd00::5'])('IP=%s is valid', (ip) =>
    expect(ok(`IP=${ip}`).IP).toBe(ip),
  );
  it.each([
    ['10.0.0', 'is not an IP address'],
    ['10.0.0.1/24', 'is not an IP address'],
    ['10.0.0.1,10.0.0.2', 'at most one IPv4 and one IPv6'],
    ['fd00::1,fd00::2', 'at most one IPv4 and one IPv6'],
  ])('IP=%s is rejected', (ip, msg) => expect(bad(`IP=${ip}`)).toContain(msg));
});

// Issue 11, findings 5 and 8: what reaches the plugin from the runtime is
// checked at the edge, each problem named with its fix (code 4).
describe('parseEnv: hardening (code 4)', () => {
  it.each([
    ['a newline (forges a log line)', 'web\nlevel=error msg=forged'],
    ['..', '..'],
    ['a slash', 'a/b'],
    ['a space', 'web 0'],
    ['a leading dot', '.hidden'],
    ['300 characters', 'a'.repeat(300)],
  ])('K8S_POD_NAME with %s', (_what, name) => {
    const e = envError({ ...ADD, CNI_ARGS: `K8S_POD_NAMESPACE=ns;K8S_POD_NAME=${name}` });
    expect(e.code).toBe(4);
    expect(e.message).toContain('K8S_POD_NAME=');
    expect(e.message).toContain('is not a valid pod name');
  });
  it.each([['..'], ['a/b'], ['-a'], ['x'.repeat(254)], ['ns\n']])('K8S_POD_NAMESPACE %j', (ns) => {
    const e = envError({ ...ADD, CNI_ARGS: `K8S_POD_NAMESPACE=${ns};K8S_POD_NAME=web` });
    expect(e.message).toContain('K8S_POD_NAMESPACE=');
    expect(e.message).toContain('is not a valid namespace name');
  });
  it('valid pod names and namespaces pass: Kubernetes names and runtime container names', () => {
    expect(
      parseEnv({ ...ADD, CNI_ARGS: 'K8S_POD_NAMESPACE=kube-system;K8S_POD_NAME=coredns-5d78c9869d-x2x.v1' }).args
        .K8S_POD_NAME,
    ).toBe('coredns-5d78c9869d-x2x.v1');
    // podman passes its container name (generated ones have '_') as both keys.
    const podman = parseEnv({
      ...ADD,
      CNI_ARGS: 'IgnoreUnknown=1;K8S_POD_NAMESPACE=romantic_nobel;K8S_POD_NAME=romantic_nobel',
    }).args;
    expect(podman).toMatchObject({ K8S_POD_NAMESPACE: 'romantic_nobel', K8S_POD_NAME: 'romantic_nobel' });
    expect(parseEnv({ ...ADD, CNI_ARGS: 'K8S_POD_NAMESPACE=Dev;K8S_POD_NAME=Web.1' }).args.K8S_POD_NAME).toBe('Web.1');
  });
  it('a 5000-character container ID', () => {
    const e = envError({ ...ADD, CNI_CONTAINERID: 'a'.repeat(5000) });
    expect(e.message).toMatch(/CNI_CONTAINERID: .*5000 characters.*at most 255/);
    expect(e.message.length).toBeLessThan(400);
  });
  it('an interface name with % (the kernel would pick the name)', () => {
    expect(envError({ ...ADD, CNI_IFNAME: 'eth%d' }).message).toMatch(/CNI_IFNAME: got "eth%d"; .*'%'/);
  });
  it("the plugin's own network namespace as CNI_NETNS, by any path to it", () => {
    for (const path of [
      '/proc/self/ns/net',
      `/proc/${process.pid}/ns/net`,
      `/proc/${process.pid}/task/${process.pid}/ns/net`,
    ]) {
      for (const cmd of ['ADD', 'DEL', 'CHECK']) {
        const e = envError({ ...ADD, CNI_COMMAND: cmd, CNI_NETNS: path });
        expect(e.code).toBe(4);
        expect(e.message).toMatch(/^CNI_NETNS: .* is the (plugin's|node's) own network namespace/);
      }
    }
  });
});
