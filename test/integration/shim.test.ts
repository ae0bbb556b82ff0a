// The native shim run as a container runtime runs it (env + stdin, exit code
// + stdout), against a real agent process serving test plugin handlers through
// the real dispatcher, and against its per-exec fallback.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import {
  chmodSync,
  copyFileSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { createServer, type Server } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { build } from 'esbuild';
import { SUPPORTED_VERSIONS } from '../../src/cni/types.js';
import {
  ACCEPTED,
  HEADER_LEN,
  MAX_RESPONSE,
  PROTOCOL_VERSION,
  RESPONSE_HEADER_LEN,
  encodeResponse,
} from '../../src/agent/protocol.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const MARKER = 'NETPLUGIN-FALLBACK-RAN';

// The agent under test: the real CNI server and dispatcher with handlers that
// echo what they received or misbehave on request (netconf "testBehavior").
const AGENT_SOURCE = `
import { startCniServer } from './src/agent/server.js';
import { CniError } from './src/errors.js';
const line = (lvl) => (msg, f) => process.stderr.write(lvl + ' ' + msg + (f ? ' ' + JSON.stringify(f) : '') + '\\n');
const log = { error: line('E'), warn: line('W'), info: line('I'), debug: line('D') };
let release; const gate = new Promise((r) => (release = r));
const handlers = {
  parse: (raw) => raw,
  async add(ctx) {
    const b = ctx.rawConf.testBehavior;
    if (b === 'fail') throw new CniError(100, 'pool test-pool is exhausted', 'no free address in 10.9.0.0/30');
    if (b === 'hang') await gate;
    if (b === 'crash') process.kill(process.pid, 'SIGKILL');
    const big = b === 'big' ? ['é😀x'.repeat(300000)] : [];
    return {
      interfaces: [{ name: ctx.ifname, sandbox: ctx.netns }],
      ips: [{ address: '10.9.8.7/32', interface: 0 }],
      dns: {
        domain: String(ctx.rawConf.echo ?? ''),
        search: [ctx.containerId, ctx.env.SHIM_TEST_VALUE ?? '<unset>', ctx.args.K8S_POD_NAME ?? '', 'pid:' + process.pid],
        options: big,
      },
    };
  },
  async del() {},
  async check() {},
  async status() {},
  async gc() {},
};
const plugins = {
  netplugin: { name: 'netplugin', load: async () => handlers },
  'netplugin-ipam': { name: 'netplugin-ipam', load: async () => handlers },
};
const server = await startCniServer({ socketPath: process.env.TEST_AGENT_SOCKET, plugins, log, closeTimeoutMs: 2000, peerCred: null });
process.on('SIGTERM', () => { release(); server.close().then(() => process.exit(0)); });
process.stdout.write('ready\\n');
`;

// Stands in for dist/netplugin.mjs: shows it ran and what it was given.
const FALLBACK_SOURCE = `
import { readFileSync } from 'node:fs';
const stdin = readFileSync(0, 'utf8');
if (process.env.FALLBACK_CRASH === 'throw') throw new TypeError('fallback exploded before answering');
if (process.env.FALLBACK_CRASH === 'kill') process.kill(process.pid, 'SIGKILL');
if (process.env.FALLBACK_CRASH === 'silent') process.exit(0);
process.stdout.write(JSON.stringify({ marker: '${MARKER}', argv: process.argv.slice(1), uid: process.getuid(), env: process.env, stdin }) + '\\n');
process.exit(Number(process.env.FALLBACK_EXIT ?? 0));
`;

let tmp: string;
let binDir: string;
let pkgDir: string;
let agentJs: string;
const agents: ChildProcess[] = [];
const servers: Server[] = [];

interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
}

function runShim(opts: {
  env?: Record<string, string | undefined>;
  stdin?: string;
  name?: string;
  bin?: string;
  uid?: number;
}): Promise<Run> {
  const bin = opts.bin ?? join(binDir, opts.name ?? 'netplugin');
  return new Promise((resolve, reject) => {
    const child = spawn(bin, [], {
      env: Object.fromEntries(Object.entries(opts.env ?? {}).filter(([, v]) => v !== undefined)) as Record<
        string,
        string
      >,
      stdio: ['pipe', 'pipe', 'pipe'],
      ...(opts.uid !== undefined ? { uid: opts.uid, gid: opts.uid } : {}),
    });
    let stdout = '';
    let stderr = '';
    child.stdout.setEncoding('utf8').on('data', (d: string) => (stdout += d));
    child.stderr.setEncoding('utf8').on('data', (d: string) => (stderr += d));
    child.on('error', reject);
    child.on('close', (code) => resolve({ code, stdout, stderr }));
    child.stdin.on('error', () => {});
    child.stdin.end(opts.stdin ?? '');
  });
}

async function startAgent(socket: string): Promise<ChildProcess> {
  const child = spawn(process.execPath, [agentJs], {
    env: { ...process.env, TEST_AGENT_SOCKET: socket },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  agents.push(child);
  let err = '';
  child.stderr!.setEncoding('utf8').on('data', (d: string) => (err += d));
  await new Promise<void>((resolve, reject) => {
    child.stdout!.setEncoding('utf8').on('data', (d: string) => d.includes('ready') && resolve());
    child.on('exit', (code) => reject(new Error(`test agent exited (${code}) before it was ready:\n${err}`)));
  });
  return child;
}

function exited(child: ChildProcess): Promise<void> {
  return child.exitCode !== null || child.signalCode !== null
    ? Promise.resolve()
    : new Promise((r) => child.once('exit', () => r()));
}

/** A one-off server speaking just enough protocol to misbehave in a chosen way. */
async function fakeAgent(socket: string, onConn: (c: import('node:net').Socket) => void): Promise<void> {
  const s = createServer(onConn);
  servers.push(s);
  await new Promise<void>((r) => s.listen(socket, r));
}

const netconf = (version: string, extra: Record<string, unknown> = {}) =>
  JSON.stringify({
    cniVersion: version,
    name: 'shim-test',
    type: 'netplugin',
    ipam: { type: 'netplugin-ipam' },
    ...extra,
  });

let agentSocket: string;
const baseEnv = (over: Record<string, string | undefined> = {}): Record<string, string | undefined> => ({
  PATH: process.env['PATH'],
  CNI_COMMAND: 'ADD',
  CNI_CONTAINERID: `ctr-${process.pid}`,
  CNI_NETNS: '/var/run/netns/shim-test',
  CNI_IFNAME: 'eth0',
  CNI_PATH: '/opt/cni/bin',
  CNI_ARGS: 'K8S_POD_NAMESPACE=default;K8S_POD_NAME=web-0',
  NETPLUGIN_AGENT_SOCKET: agentSocket,
  NETPLUGIN_FALLBACK_NODE: process.execPath,
  NETPLUGIN_FALLBACK_DIR: pkgDir,
  NODE_EXTRA_CA_CERTS: '/nonexistent/extra-ca.pem',
  SHIM_TEST_VALUE: 'quote " backslash \\ tab \t newline \n é 😀 \u0001',
  ...over,
});

beforeAll(async () => {
  execFileSync('bash', [join(ROOT, 'scripts/build-shim')], { stdio: 'pipe' });
  tmp = mkdtempSync(join(tmpdir(), `np-shim-${process.pid}-`));
  // Readable by the unprivileged user of the non-root test.
  chmodSync(tmp, 0o755);
  binDir = join(tmp, 'bin');
  pkgDir = join(tmp, 'pkg');
  mkdirSync(binDir);
  mkdirSync(join(pkgDir, 'dist'), { recursive: true });
  copyFileSync(join(ROOT, 'build/shim/netplugin-shim'), join(binDir, 'netplugin'));
  chmodSync(join(binDir, 'netplugin'), 0o755);
  symlinkSync('netplugin', join(binDir, 'netplugin-ipam'));
  writeFileSync(join(pkgDir, 'dist/netplugin.mjs'), FALLBACK_SOURCE);
  writeFileSync(join(pkgDir, 'dist/netplugin-ipam.mjs'), FALLBACK_SOURCE);
  agentJs = join(tmp, 'agent.mjs');
  await build({
    stdin: { contents: AGENT_SOURCE, resolveDir: ROOT, sourcefile: 'shim-test-agent.ts', loader: 'ts' },
    outfile: agentJs,
    bundle: true,
    platform: 'node',
    format: 'esm',
    target: 'node20',
    external: ['etcd3', 'node-gyp-build', 'yaml'],
    logLevel: 'error',
  });
  agentSocket = join(tmp, 'run/cni.sock');
  await startAgent(agentSocket);
});

afterAll(async () => {
  for (const a of agents) {
    a.kill('SIGKILL');
    await exited(a);
  }
  await Promise.all(servers.map((s) => new Promise((r) => s.close(r))));
  if (tmp) rmSync(tmp, { recursive: true, force: true });
});

describe('shim -> agent', () => {
  for (const version of SUPPORTED_VERSIONS) {
    it(`relays an ADD result and exit code 0 (cniVersion ${version})`, async () => {
      const echo = 'stdin "quoted" \\ é 😀 \u0007 end';
      const r = await runShim({ env: baseEnv(), stdin: netconf(version, { echo }) });
      expect(r.stdout).not.toContain(MARKER);
      expect(r.code).toBe(0);
      const res = JSON.parse(r.stdout);
      expect(res.cniVersion).toBe(version);
      expect(res.interfaces).toEqual([{ name: 'eth0', sandbox: '/var/run/netns/shim-test' }]);
      expect(res.ips[0].address).toBe('10.9.8.7/32');
      expect(res.dns.domain).toBe(echo);
      expect(res.dns.search.slice(0, 3)).toEqual([`ctr-${process.pid}`, baseEnv()['SHIM_TEST_VALUE'], 'web-0']);
      // Served by the agent process, not by this one or a fallback.
      expect(res.dns.search[3]).toBe(`pid:${agents[0]!.pid}`);
    });
  }

  it('serves the plugin named by the executable (netplugin-ipam symlink)', async () => {
    const r = await runShim({ name: 'netplugin-ipam', env: baseEnv(), stdin: netconf('1.0.0') });
    expect(r.code).toBe(0);
    expect(JSON.parse(r.stdout).ips[0].address).toBe('10.9.8.7/32');
  });

  it('forwards VERSION like any other command', async () => {
    const r = await runShim({ env: baseEnv({ CNI_COMMAND: 'VERSION' }), stdin: '{"cniVersion":"0.4.0"}' });
    expect(r.code).toBe(0);
    expect(r.stdout).not.toContain(MARKER);
    expect(JSON.parse(r.stdout)).toEqual({ cniVersion: '0.4.0', supportedVersions: [...SUPPORTED_VERSIONS] });
  });

  it('relays a CNI error with exit code 1, and the log line on stderr', async () => {
    const r = await runShim({ env: baseEnv(), stdin: netconf('1.0.0', { testBehavior: 'fail' }) });
    expect(r.code).toBe(1);
    expect(r.stdout).not.toContain(MARKER);
    expect(JSON.parse(r.stdout)).toMatchObject({
      code: 100,
      msg: 'pool test-pool is exhausted',
      details: 'no free address in 10.9.0.0/30',
    });
    expect(r.stderr).toContain('pool test-pool is exhausted');
  });

  it('relays a result of several megabytes intact', async () => {
    const r = await runShim({ env: baseEnv(), stdin: netconf('1.1.0', { testBehavior: 'big' }) });
    expect(r.code).toBe(0);
    expect(JSON.parse(r.stdout).dns.options).toEqual(['é😀x'.repeat(300000)]);
  });

  // Just under the plugins' documented 1 MiB stdin cap (src/cni/dispatch.ts MAX_STDIN).
  it('delivers a stdin of nearly 1 MiB intact', async () => {
    const echo = 'ü"\\\n'.repeat(110000);
    const r = await runShim({ env: baseEnv(), stdin: netconf('1.0.0', { echo }) });
    expect(r.code).toBe(0);
    expect(JSON.parse(r.stdout).dns.domain).toBe(echo);
  });

  it('reports code 11 and leaves the request alone when the agent misses the deadline', async () => {
    const r = await runShim({
      env: baseEnv({ NETPLUGIN_SHIM_TIMEOUT_MS: '700' }),
      stdin: netconf('0.4.0', { testBehavior: 'hang' }),
    });
    expect(r.code).toBe(1);
    expect(r.stdout).not.toContain(MARKER);
    expect(JSON.parse(r.stdout)).toEqual({
      cniVersion: '0.4.0',
      code: 11,
      msg: 'netplugin agent did not answer within 700 ms',
    });
  });

  it('rejects a malformed NETPLUGIN_SHIM_TIMEOUT_MS naming it', async () => {
    const r = await runShim({ env: baseEnv({ NETPLUGIN_SHIM_TIMEOUT_MS: '5s' }), stdin: netconf('1.0.0') });
    expect(r.code).toBe(1);
    const err = JSON.parse(r.stdout);
    expect(err.code).toBe(4);
    expect(err.msg).toContain("NETPLUGIN_SHIM_TIMEOUT_MS='5s'");
  });

  it('never re-runs a request the agent accepted and then died on: code 11, no fallback', async () => {
    const socket = join(tmp, 'crash/cni.sock');
    const agent = await startAgent(socket);
    const r = await runShim({
      env: baseEnv({ NETPLUGIN_AGENT_SOCKET: socket }),
      stdin: netconf('1.0.0', { testBehavior: 'crash' }),
    });
    await exited(agent);
    expect(agent.signalCode).toBe('SIGKILL');
    expect(r.stdout).not.toContain(MARKER);
    expect(r.code).toBe(1);
    expect(JSON.parse(r.stdout)).toEqual({
      cniVersion: '1.0.0',
      code: 11,
      msg: 'netplugin agent stopped while handling the request; the runtime should retry',
    });
    // The dead agent's socket file stays behind: now nobody listens, so it is the fallback's turn.
    expect(existsSync(socket)).toBe(true);
    const again = await runShim({ env: baseEnv({ NETPLUGIN_AGENT_SOCKET: socket }), stdin: netconf('1.0.0') });
    expect(JSON.parse(again.stdout).marker).toBe(MARKER);
  });
});

describe('shim -> per-exec fallback', () => {
  it('runs node <dir>/dist/<name>.mjs with the same env (minus NODE_EXTRA_CA_CERTS) and stdin when no agent listens', async () => {
    const stdin = netconf('1.0.0', { echo: 'é 😀 "q" \\' });
    const env = baseEnv({ NETPLUGIN_AGENT_SOCKET: join(tmp, 'absent/cni.sock'), FALLBACK_EXIT: '3' });
    const r = await runShim({ env, stdin });
    expect(r.code).toBe(3);
    const out = JSON.parse(r.stdout);
    expect(out.marker).toBe(MARKER);
    expect(out.argv).toEqual([join(pkgDir, 'dist/netplugin.mjs')]);
    expect(out.stdin).toBe(stdin);
    expect(out.env['NODE_EXTRA_CA_CERTS']).toBeUndefined();
    expect(out.env['CNI_ARGS']).toBe(env['CNI_ARGS']);
    expect(out.env['SHIM_TEST_VALUE']).toBe(env['SHIM_TEST_VALUE']);
  });

  it('prefers dist/<name>.cjs (the code-cached entry) and falls back to dist/<name>.mjs without it', async () => {
    const dir = join(tmp, 'pkg-cjs');
    mkdirSync(join(dir, 'dist'), { recursive: true });
    writeFileSync(
      join(dir, 'dist/netplugin.cjs'),
      `process.stdout.write(JSON.stringify({ entry: 'cjs', argv: process.argv.slice(1) }) + '\\n');\n`,
    );
    writeFileSync(join(dir, 'dist/netplugin-ipam.mjs'), FALLBACK_SOURCE);
    const env = baseEnv({ NETPLUGIN_AGENT_SOCKET: join(tmp, 'absent.sock'), NETPLUGIN_FALLBACK_DIR: dir });
    const r = await runShim({ env, stdin: '{}' });
    expect(r.code).toBe(0);
    expect(JSON.parse(r.stdout)).toEqual({ entry: 'cjs', argv: [join(dir, 'dist/netplugin.cjs')] });
    const ipam = await runShim({ name: 'netplugin-ipam', env, stdin: '{}' });
    expect(JSON.parse(ipam.stdout).argv).toEqual([join(dir, 'dist/netplugin-ipam.mjs')]);
  });

  it('uses the executable name for the fallback entry', async () => {
    const r = await runShim({
      name: 'netplugin-ipam',
      env: baseEnv({ NETPLUGIN_AGENT_SOCKET: join(tmp, 'absent.sock') }),
      stdin: '{}',
    });
    expect(JSON.parse(r.stdout).argv).toEqual([join(pkgDir, 'dist/netplugin-ipam.mjs')]);
  });

  it('finds node and the package through netplugin.fallback next to the executable', async () => {
    const dir = join(tmp, 'opt-cni-bin');
    mkdirSync(dir);
    copyFileSync(join(binDir, 'netplugin'), join(dir, 'netplugin'));
    chmodSync(join(dir, 'netplugin'), 0o755);
    writeFileSync(join(dir, 'netplugin.fallback'), `${process.execPath}\n${pkgDir}\n`);
    const env = baseEnv({
      NETPLUGIN_AGENT_SOCKET: join(tmp, 'absent.sock'),
      NETPLUGIN_FALLBACK_NODE: undefined,
      NETPLUGIN_FALLBACK_DIR: undefined,
    });
    const r = await runShim({ bin: join(dir, 'netplugin'), env, stdin: 'x' });
    expect(r.code).toBe(0);
    expect(JSON.parse(r.stdout)).toMatchObject({ marker: MARKER, stdin: 'x' });
  });

  // Every state below used to leave the runtime without a CNI answer or with a
  // dead-end code; each must now print a code-11 error JSON ("try again").
  const noAgent = (over: Record<string, string | undefined> = {}) =>
    baseEnv({ NETPLUGIN_AGENT_SOCKET: join(tmp, 'absent.sock'), ...over });
  const expectRetry = (r: Run, ...parts: string[]) => {
    expect(r.code).toBe(1);
    expect(r.stdout.endsWith('\n')).toBe(true);
    const err = JSON.parse(r.stdout);
    expect(err.code).toBe(11);
    for (const part of parts) expect(err.msg).toContain(part);
    expect(err.msg).toContain('try again once netplugin-node is up');
    return err;
  };

  it('no agent and no netplugin.fallback: code 11 naming the socket and the missing file', async () => {
    const r = await runShim({
      env: noAgent({ NETPLUGIN_FALLBACK_NODE: undefined, NETPLUGIN_FALLBACK_DIR: undefined }),
      stdin: netconf('0.3.1'),
    });
    const err = expectRetry(
      r,
      `${join(tmp, 'absent.sock')}: No such file or directory`,
      `${join(binDir, 'netplugin.fallback')}: No such file or directory`,
    );
    expect(err.cniVersion).toBe('0.3.1');
  });

  it('no agent and a fallback file without node (a host without Node): code 11', async () => {
    const dir = join(tmp, 'no-node-host');
    mkdirSync(dir);
    copyFileSync(join(binDir, 'netplugin'), join(dir, 'netplugin'));
    chmodSync(join(dir, 'netplugin'), 0o755);
    writeFileSync(join(dir, 'netplugin.fallback'), `\n${pkgDir}\n`);
    const r = await runShim({
      bin: join(dir, 'netplugin'),
      env: noAgent({ NETPLUGIN_FALLBACK_NODE: undefined, NETPLUGIN_FALLBACK_DIR: undefined }),
      stdin: '{}',
    });
    expectRetry(r, 'names no node executable');
  });

  it('no agent and a fallback node that does not exist: code 11', async () => {
    const r = await runShim({ env: noAgent({ NETPLUGIN_FALLBACK_NODE: join(tmp, 'no-node') }), stdin: '{}' });
    expectRetry(
      r,
      `'${join(tmp, 'no-node')} ${join(pkgDir, 'dist/netplugin.mjs')}' cannot run: No such file or directory`,
    );
  });

  it('no agent, node present but the package missing (paths recorded inside a container): code 11, no stack trace', async () => {
    const r = await runShim({
      env: noAgent({ NETPLUGIN_FALLBACK_DIR: join(tmp, 'opt-netplugin-absent') }),
      stdin: '{}',
    });
    expectRetry(r, `${join(tmp, 'opt-netplugin-absent/dist/netplugin.mjs')} is missing`);
    expect(r.stderr).toBe('');
  });

  it('a fallback that throws before answering: code 11 quoting the error line, its stderr passed through', async () => {
    const r = await runShim({ env: noAgent({ FALLBACK_CRASH: 'throw' }), stdin: '{}' });
    expectRetry(r, 'exited with status 1 without a CNI answer', 'TypeError: fallback exploded before answering');
    expect(r.stderr).toContain('TypeError: fallback exploded before answering');
  });

  it('a fallback killed by a signal: code 11 naming the signal', async () => {
    const r = await runShim({ env: noAgent({ FALLBACK_CRASH: 'kill' }), stdin: '{}' });
    expectRetry(r, 'was killed by signal 9 without a CNI answer');
  });

  it('an ADD whose fallback exits 0 with nothing on stdout: code 11; a DEL that does so succeeds', async () => {
    expectRetry(
      await runShim({ env: noAgent({ FALLBACK_CRASH: 'silent' }), stdin: '{}' }),
      'exited with status 0 without a CNI answer',
    );
    const del = await runShim({ env: noAgent({ FALLBACK_CRASH: 'silent', CNI_COMMAND: 'DEL' }), stdin: '{}' });
    expect(del).toMatchObject({ code: 0, stdout: '' });
  });

  it('falls back when a stale socket file refuses connections', async () => {
    const socket = join(tmp, 'stale.sock');
    execFileSync('python3', ['-c', 'import socket,sys; socket.socket(socket.AF_UNIX).bind(sys.argv[1])', socket]);
    const r = await runShim({ env: baseEnv({ NETPLUGIN_AGENT_SOCKET: socket }), stdin: 'stale' });
    expect(JSON.parse(r.stdout)).toMatchObject({ marker: MARKER, stdin: 'stale' });
  });

  it('falls back when the agent closes the connection before accepting', async () => {
    const socket = join(tmp, 'refuse.sock');
    await fakeAgent(socket, (c) => c.once('data', () => c.destroy()));
    const r = await runShim({ env: baseEnv({ NETPLUGIN_AGENT_SOCKET: socket }), stdin: 'refused' });
    expect(JSON.parse(r.stdout)).toMatchObject({ marker: MARKER, stdin: 'refused' });
  });

  it('does not fall back when the connection drops after the accepted marker', async () => {
    const socket = join(tmp, 'drop.sock');
    await fakeAgent(socket, (c) => c.once('data', () => c.end(Buffer.from([ACCEPTED, 0, 0]))));
    const r = await runShim({ env: baseEnv({ NETPLUGIN_AGENT_SOCKET: socket }), stdin: netconf('1.0.0') });
    expect(r.stdout).not.toContain(MARKER);
    expect(JSON.parse(r.stdout)).toMatchObject({
      code: 11,
      msg: 'netplugin agent stopped while handling the request; the runtime should retry',
    });
  });

  it('as a non-root caller: cannot open the 0600 socket, so its own privileges run the fallback', async () => {
    const r = await runShim({ env: baseEnv(), stdin: netconf('1.0.0'), uid: 65534 });
    const out = JSON.parse(r.stdout);
    expect(out.marker).toBe(MARKER);
    expect(out.uid).toBe(65534);
  });
});

// The answer after "accepted" is a binary frame the shim reads by its lengths
// (docs/agent.md, "Wire protocol"). A frame it cannot use must still give the
// runtime a CNI error JSON on stdout, and never the fallback: the agent
// accepted the request, so it may have done part of the work.
describe('shim <- agent answer frames', () => {
  let n = 0;
  /** A fake agent that reads the whole request, accepts it and answers `frame`. */
  async function answering(frame: Buffer): Promise<string> {
    const socket = join(tmp, `answer-${n++}.sock`);
    await fakeAgent(socket, (c) => {
      // A shim that refuses the frame exits with it unread: the kernel resets the connection.
      c.on('error', () => {});
      let got = Buffer.alloc(0);
      c.on('data', (d: Buffer) => {
        got = Buffer.concat([got, d]);
        if (got.length >= HEADER_LEN && got.length >= HEADER_LEN + got.readUInt32BE(4)) {
          c.removeAllListeners('data');
          c.end(Buffer.concat([Buffer.from([ACCEPTED]), frame]));
        }
      });
    });
    return socket;
  }
  const header = (over: { magic?: string; version?: number; code?: number; outLen?: number; errLen?: number } = {}) => {
    const h = Buffer.alloc(RESPONSE_HEADER_LEN);
    h.write(over.magic ?? 'NPR', 0, 'latin1');
    h[3] = over.version ?? PROTOCOL_VERSION;
    h[4] = over.code ?? 0;
    h.writeUInt32BE(over.outLen ?? 0, 5);
    h.writeUInt32BE(over.errLen ?? 0, 9);
    return h;
  };
  /** The shim's own CNI error: exit 1, one JSON line in the netconf's cniVersion, no fallback. */
  const shimError = async (frame: Buffer) => {
    const r = await runShim({
      env: baseEnv({ NETPLUGIN_AGENT_SOCKET: await answering(frame) }),
      stdin: netconf('0.4.0'),
    });
    expect(r.stdout).not.toContain(MARKER);
    expect(r.code).toBe(1);
    expect(r.stdout.endsWith('}\n')).toBe(true);
    const err = JSON.parse(r.stdout) as { cniVersion: string; code: number; msg: string };
    expect(err.cniVersion).toBe('0.4.0');
    return err;
  };

  it('relays stdout and stderr byte for byte (NUL, invalid UTF-8) and the exit status', async () => {
    const out = Buffer.from([0x7b, 0x00, 0xff, 0xfe, 0x22, 0x5c, 0x0a]);
    const err = Buffer.from('warn \u00e9\n\u0000', 'utf8');
    const frame = Buffer.concat([header({ code: 7, outLen: out.length, errLen: err.length }), out, err]);
    const socket = await answering(frame);
    const child = spawn(join(binDir, 'netplugin'), [], {
      env: baseEnv({ NETPLUGIN_AGENT_SOCKET: socket }) as Record<string, string>,
    });
    const stdout: Buffer[] = [];
    const stderr: Buffer[] = [];
    child.stdout.on('data', (d: Buffer) => stdout.push(d));
    child.stderr.on('data', (d: Buffer) => stderr.push(d));
    child.stdin.end('{}');
    const code = await new Promise<number | null>((r) => child.on('close', r));
    expect(code).toBe(7);
    expect(Buffer.concat(stdout)).toEqual(out);
    expect(Buffer.concat(stderr)).toEqual(err);
  });

  it('relays the frame encodeResponse writes, with empty stdout', async () => {
    const r = await runShim({
      env: baseEnv({
        NETPLUGIN_AGENT_SOCKET: await answering(encodeResponse({ code: 0, stdout: '', stderr: 'só stderr\n' })),
      }),
      stdin: '{}',
    });
    expect(r).toEqual({ code: 0, stdout: '', stderr: 'só stderr\n' });
  });

  it('a wrong magic: code 5 naming the bytes it got', async () => {
    // What an agent answering protocol version 1 (u32 length + JSON) would send.
    const v1 = Buffer.from('{"code":0,"stdout":"{}"}');
    const len = Buffer.alloc(4);
    len.writeUInt32BE(v1.length);
    const err = await shimError(Buffer.concat([len, v1]));
    expect(err.code).toBe(5);
    expect(err.msg).toContain('does not start with the netplugin response magic "NPR" (it starts 00 00 00 18)');
    expect(err.msg).toContain('install the shim and netplugin-node from one release');
  });

  it('a wrong version: code 11, try again, naming both versions', async () => {
    const out = Buffer.from('{"cniVersion":"1.0.0"}');
    const err = await shimError(Buffer.concat([header({ version: PROTOCOL_VERSION + 1, outLen: out.length }), out]));
    expect(err.code).toBe(11);
    expect(err.msg).toContain(
      `netplugin agent speaks another protocol version (${PROTOCOL_VERSION + 1}, this shim speaks ${PROTOCOL_VERSION}` +
        `); try again`,
    );
  });

  for (const [what, frame] of [
    ['inside the header', header({ outLen: 20 }).subarray(0, 7)],
    ['inside stdout', Buffer.concat([header({ outLen: 20, errLen: 4 }), Buffer.from('{"cniVers')])],
    ['inside stderr', Buffer.concat([header({ outLen: 2, errLen: 10 }), Buffer.from('{}err')])],
  ] as const) {
    it(`a frame truncated ${what}: code 11, the agent stopped`, async () => {
      const err = await shimError(frame);
      expect(err).toMatchObject({
        code: 11,
        msg: 'netplugin agent stopped while handling the request; the runtime should retry',
      });
    });
  }

  it('an oversized length: code 5 naming the sizes and the limit, before reading any of it', async () => {
    const err = await shimError(header({ outLen: 0xffffffff, errLen: 0xffffffff }));
    expect(err.code).toBe(5);
    expect(err.msg).toContain(
      `announced a ${2 * 0xffffffff}-byte answer (stdout ${0xffffffff}, stderr ${0xffffffff} bytes), over the shim's ` +
        `limit of ${MAX_RESPONSE} bytes`,
    );
  });

  it('lengths that add up to just over the limit: code 5', async () => {
    const err = await shimError(header({ outLen: MAX_RESPONSE, errLen: 1 }));
    expect(err.code).toBe(5);
    expect(err.msg).toContain(`announced a ${MAX_RESPONSE + 1}-byte answer`);
  });
});
