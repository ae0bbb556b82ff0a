// The agent's CNI server in this process: socket lifecycle and permissions,
// peer credentials (real SO_PEERCRED through the addon), ordering of requests
// and graceful shutdown. Clients speak the wire protocol directly, or are the
// real shim run as another user.
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { execFileSync, spawn } from 'node:child_process';
import {
  chmodSync,
  copyFileSync,
  existsSync,
  lstatSync,
  mkdirSync,
  mkdtempSync,
  rmSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { startCniServer, type CniServer } from '../../src/agent/server.js';
import {
  ACCEPTED,
  HEADER_LEN,
  PROTOCOL_VERSION,
  decodeResponse,
  encodeRequest,
  type ShimRequest,
  type ShimResponse,
} from '../../src/agent/protocol.js';
import type { CniHandlers, PluginSpec } from '../../src/cni/types.js';
import type { Logger } from '../../src/log/types.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));

interface Deferred {
  promise: Promise<void>;
  resolve: () => void;
}
function deferred(): Deferred {
  let resolve!: () => void;
  const promise = new Promise<void>((r) => (resolve = r));
  return { promise, resolve };
}

/** Per-test hooks the handlers call: gates to hold a request, and an event log. */
let events: string[] = [];
let gates = new Map<string, Deferred>();
let started = new Map<string, Deferred>();
const gate = (name: string) => {
  if (!gates.has(name)) gates.set(name, deferred());
  return gates.get(name)!;
};
const startedSignal = (name: string) => {
  if (!started.has(name)) started.set(name, deferred());
  return started.get(name)!;
};

const handlers: CniHandlers = {
  parse: (raw) => raw,
  async add(ctx) {
    const tag = String(ctx.rawConf['tag'] ?? ctx.containerId);
    events.push(`start ${tag}`);
    startedSignal(tag).resolve();
    const wait = ctx.rawConf['waitFor'];
    if (typeof wait === 'string')
      await (wait.startsWith('started:') ? startedSignal(wait.slice(8)).promise : gate(wait).promise);
    events.push(`end ${tag}`);
    return { ips: [{ address: '10.1.2.3/32' }], dns: { search: [ctx.env['ONLY_IN_REQUEST'] ?? '<unset>'] } };
  },
  async del() {},
  async check() {},
  async status() {},
  async gc() {},
};
const plugin: PluginSpec = { name: 'netplugin', load: async () => handlers };

const logged: string[] = [];
const line = (lvl: string) => (m: string, f?: Record<string, unknown>) =>
  logged.push(`${lvl} ${m}${f ? ' ' + JSON.stringify(f) : ''}`);
const log: Logger = { error: line('E'), warn: line('W'), info: line('I'), debug: () => {} };

let tmp: string;
const servers: CniServer[] = [];
async function start(
  socketPath: string,
  extra: Partial<Parameters<typeof startCniServer>[0]> = {},
): Promise<CniServer> {
  const s = await startCniServer({ socketPath, plugins: { netplugin: plugin }, log, ...extra });
  servers.push(s);
  return s;
}

const env = (containerId: string, over: Record<string, string> = {}): Record<string, string> => ({
  CNI_COMMAND: 'ADD',
  CNI_CONTAINERID: containerId,
  CNI_NETNS: '/var/run/netns/x',
  CNI_IFNAME: 'eth0',
  CNI_PATH: '/opt/cni/bin',
  ...over,
});
const conf = (extra: Record<string, unknown> = {}) =>
  JSON.stringify({ cniVersion: '1.0.0', name: 'n', type: 'netplugin', ...extra });

interface Exchange {
  accepted: boolean;
  response?: ShimResponse;
  /** The response frame as it came. */
  frame?: Buffer;
}

/** One protocol exchange; `raw` sends bytes as given instead of a request frame. */
function exchange(socketPath: string, req: ShimRequest | Buffer, onAccepted?: () => void): Promise<Exchange> {
  return new Promise((resolve, reject) => {
    const c = connect(socketPath);
    const chunks: Buffer[] = [];
    let accepted = false;
    c.on('error', reject);
    c.on('data', (d: Buffer) => {
      if (!accepted && chunks.length === 0 && d[0] === ACCEPTED) {
        accepted = true;
        onAccepted?.();
        d = d.subarray(1);
      }
      if (d.length) chunks.push(d);
    });
    c.on('close', () => {
      const all = Buffer.concat(chunks);
      if (!accepted || all.length === 0) return resolve({ accepted });
      try {
        resolve({ accepted, response: decodeResponse(all), frame: all });
      } catch (e) {
        reject(e as Error);
      }
    });
    c.write(Buffer.isBuffer(req) ? req : encodeRequest(req));
  });
}

beforeAll(() => {
  tmp = mkdtempSync(join(tmpdir(), `np-agent-${process.pid}-`));
  chmodSync(tmp, 0o755);
});
afterEach(async () => {
  for (const g of gates.values()) g.resolve();
  for (const g of started.values()) g.resolve();
  await Promise.all(servers.splice(0).map((s) => s.close()));
  events = [];
  gates = new Map();
  started = new Map();
});
afterAll(() => {
  if (tmp) rmSync(tmp, { recursive: true, force: true });
});

describe('CNI server socket', () => {
  it('creates a root-only directory and socket, and serves requests with the request env', async () => {
    const socketPath = join(tmp, 'fresh/sub/cni.sock');
    await start(socketPath);
    expect(statSync(join(tmp, 'fresh/sub')).mode & 0o777).toBe(0o700);
    expect(statSync(join(tmp, 'fresh')).mode & 0o777).toBe(0o700);
    const st = lstatSync(socketPath);
    expect(st.isSocket()).toBe(true);
    expect(st.mode & 0o777).toBe(0o600);
    expect(process.env['ONLY_IN_REQUEST']).toBeUndefined();
    const r = await exchange(socketPath, {
      plugin: 'netplugin',
      env: env('c1', { ONLY_IN_REQUEST: 'from the runtime' }),
      stdin: conf(),
    });
    expect(r.accepted).toBe(true);
    expect(r.response!.code).toBe(0);
    expect(JSON.parse(r.response!.stdout)).toEqual({
      cniVersion: '1.0.0',
      ips: [{ address: '10.1.2.3/32' }],
      dns: { search: ['from the runtime'] },
    });
  });

  it('leaves an existing directory mode alone', async () => {
    const dir = join(tmp, 'existing');
    mkdirSync(dir, { mode: 0o755 });
    chmodSync(dir, 0o755);
    await start(join(dir, 'cni.sock'));
    expect(statSync(dir).mode & 0o777).toBe(0o755);
  });

  it('refuses to take over a socket a live agent answers on, which keeps serving', async () => {
    const socketPath = join(tmp, 'live.sock');
    await start(socketPath);
    await expect(start(socketPath)).rejects.toThrow(`another netplugin agent is already serving ${socketPath}`);
    const r = await exchange(socketPath, { plugin: 'netplugin', env: env('c2'), stdin: conf() });
    expect(r.response?.code).toBe(0);
  });

  it('replaces a stale socket nobody listens on', async () => {
    const socketPath = join(tmp, 'stale.sock');
    execFileSync('python3', ['-c', 'import socket,sys; socket.socket(socket.AF_UNIX).bind(sys.argv[1])', socketPath]);
    await start(socketPath);
    expect((await exchange(socketPath, { plugin: 'netplugin', env: env('c3'), stdin: conf() })).response?.code).toBe(0);
  });

  it('refuses a path that is not a socket, naming it', async () => {
    const p = join(tmp, 'regular-file');
    writeFileSync(p, 'keep me');
    await expect(start(p)).rejects.toThrow(`CNI socket path ${p} exists and is not a socket`);
    expect(existsSync(p)).toBe(true);
  });

  it('closes malformed and other-version requests without accepting them', async () => {
    const socketPath = join(tmp, 'malformed.sock');
    await start(socketPath);
    // Version 1 is a shim of the release before the binary answer: refused, so it runs per-exec.
    for (const version of [PROTOCOL_VERSION - 1, PROTOCOL_VERSION + 1]) {
      const other = encodeRequest({ plugin: 'netplugin', env: {}, stdin: '' });
      other[3] = version;
      expect(await exchange(socketPath, other)).toEqual({ accepted: false });
      expect(
        logged.some((l) =>
          l.includes(`shim speaks protocol version ${version}, this agent speaks ${PROTOCOL_VERSION}`),
        ),
      ).toBe(true);
    }
    expect(await exchange(socketPath, Buffer.from('GET / HTTP/1.1\r\n\r\n'))).toEqual({ accepted: false });
    const notJson = Buffer.alloc(HEADER_LEN + 3);
    encodeRequest({ plugin: '', env: {}, stdin: '' }).copy(notJson, 0, 0, 4);
    notJson.writeUInt32BE(3, 4);
    notJson.write('{x}', HEADER_LEN);
    expect(await exchange(socketPath, notJson)).toEqual({ accepted: false });
  });

  it('answers with the binary frame: "NPR", its version, the exit status, two lengths, the bytes', async () => {
    const socketPath = join(tmp, 'frame.sock');
    await start(socketPath);
    const r = await exchange(socketPath, {
      plugin: 'netplugin',
      env: env('c5', { ONLY_IN_REQUEST: 'é' }),
      stdin: conf(),
    });
    const f = r.frame!;
    expect(f.subarray(0, 4)).toEqual(Buffer.from([0x4e, 0x50, 0x52, PROTOCOL_VERSION]));
    expect(f[4]).toBe(0);
    const outLen = f.readUInt32BE(5);
    expect(f.readUInt32BE(9)).toBe(0);
    expect(f.length).toBe(13 + outLen);
    expect(JSON.parse(f.toString('utf8', 13)).dns).toEqual({ search: ['é'] });
  });

  it('answers an unknown plugin name with a CNI error naming the known ones', async () => {
    const socketPath = join(tmp, 'unknown.sock');
    await start(socketPath);
    const r = await exchange(socketPath, { plugin: 'netplugin-shim', env: env('c4'), stdin: conf() });
    expect(r.accepted).toBe(true);
    expect(r.response!.code).toBe(1);
    const err = JSON.parse(r.response!.stdout);
    expect(err.code).toBe(4);
    expect(err.msg).toContain("no plugin named 'netplugin-shim'");
    expect(err.msg).toContain('netplugin');
  });
});

describe('CNI server ordering and shutdown', () => {
  it('runs requests for one container one at a time, in arrival order', async () => {
    const socketPath = join(tmp, 'order.sock');
    await start(socketPath);
    const first = exchange(socketPath, {
      plugin: 'netplugin',
      env: env('same'),
      stdin: conf({ tag: 'A', waitFor: 'releaseA' }),
    });
    await startedSignal('A').promise;
    const second = exchange(socketPath, {
      plugin: 'netplugin',
      env: env('same', { CNI_COMMAND: 'ADD' }),
      stdin: conf({ tag: 'B' }),
    });
    // B is accepted but must wait for A: release A only once B could have run.
    const other = await exchange(socketPath, { plugin: 'netplugin', env: env('other'), stdin: conf({ tag: 'C' }) });
    expect(other.response?.code).toBe(0);
    expect(events).toEqual(['start A', 'start C', 'end C']);
    gate('releaseA').resolve();
    await Promise.all([first, second]);
    expect(events).toEqual(['start A', 'start C', 'end C', 'end A', 'start B', 'end B']);
  });

  it('runs requests for different containers at the same time', async () => {
    const socketPath = join(tmp, 'parallel.sock');
    await start(socketPath);
    // Each waits until the other started: completes only if both run at once.
    const [a, b] = await Promise.all([
      exchange(socketPath, { plugin: 'netplugin', env: env('p1'), stdin: conf({ tag: 'P1', waitFor: 'started:P2' }) }),
      exchange(socketPath, { plugin: 'netplugin', env: env('p2'), stdin: conf({ tag: 'P2', waitFor: 'started:P1' }) }),
    ]);
    expect([a.response?.code, b.response?.code]).toEqual([0, 0]);
  });

  it('bounds concurrency with maxConcurrent', async () => {
    const socketPath = join(tmp, 'bounded.sock');
    await start(socketPath, { maxConcurrent: 1 });
    const a = exchange(socketPath, {
      plugin: 'netplugin',
      env: env('m1'),
      stdin: conf({ tag: 'M1', waitFor: 'releaseM1' }),
    });
    await startedSignal('M1').promise;
    let bAccepted!: () => void;
    const accepted = new Promise<void>((r) => (bAccepted = r));
    const b = exchange(socketPath, { plugin: 'netplugin', env: env('m2'), stdin: conf({ tag: 'M2' }) }, () =>
      bAccepted(),
    );
    await accepted;
    expect(events).toEqual(['start M1']);
    gate('releaseM1').resolve();
    await Promise.all([a, b]);
    expect(events).toEqual(['start M1', 'end M1', 'start M2', 'end M2']);
  });

  it('on close: stops accepting, finishes accepted requests, removes the socket', async () => {
    const socketPath = join(tmp, 'close.sock');
    const s = await start(socketPath);
    const inflight = exchange(socketPath, {
      plugin: 'netplugin',
      env: env('z'),
      stdin: conf({ tag: 'Z', waitFor: 'releaseZ' }),
    });
    await startedSignal('Z').promise;
    const closing = s.close();
    await expect(exchange(socketPath, { plugin: 'netplugin', env: env('late'), stdin: conf() })).rejects.toMatchObject({
      code: expect.stringMatching(/ENOENT|ECONNREFUSED/),
    });
    gate('releaseZ').resolve();
    const r = await inflight;
    expect(r.response?.code).toBe(0);
    await closing;
    expect(existsSync(socketPath)).toBe(false);
  });

  it('on close: drops requests still running after closeTimeoutMs (their callers see no answer)', async () => {
    const socketPath = join(tmp, 'close-timeout.sock');
    const s = await start(socketPath, { closeTimeoutMs: 200 });
    const stuck = exchange(socketPath, {
      plugin: 'netplugin',
      env: env('stuck'),
      stdin: conf({ tag: 'S', waitFor: 'never' }),
    });
    await startedSignal('S').promise;
    await s.close();
    expect(await stuck).toEqual({ accepted: true });
    expect(logged.some((l) => l.includes('CNI requests still running at shutdown'))).toBe(true);
  });
});

describe('CNI server peer credentials', () => {
  let shim: string;
  let pkgDir: string;
  beforeAll(() => {
    execFileSync('bash', [join(ROOT, 'scripts/build-shim')], { stdio: 'pipe' });
    const bin = join(tmp, 'bin');
    mkdirSync(bin);
    shim = join(bin, 'netplugin');
    copyFileSync(join(ROOT, 'build/shim/netplugin-shim'), shim);
    chmodSync(shim, 0o755);
    pkgDir = join(tmp, 'pkg');
    mkdirSync(join(pkgDir, 'dist'), { recursive: true });
    writeFileSync(
      join(pkgDir, 'dist/netplugin.mjs'),
      "process.stdout.write(JSON.stringify({ fallback: true, uid: process.getuid() }) + '\\n');\n",
    );
  });

  function shimAs(uid: number, socketPath: string): Promise<{ code: number | null; stdout: string }> {
    return new Promise((resolve, reject) => {
      const c = spawn(shim, [], {
        uid,
        gid: uid,
        env: {
          ...env(`peer-${uid}`),
          NETPLUGIN_AGENT_SOCKET: socketPath,
          NETPLUGIN_FALLBACK_NODE: process.execPath,
          NETPLUGIN_FALLBACK_DIR: pkgDir,
        },
      });
      let stdout = '';
      c.stdout.setEncoding('utf8').on('data', (d: string) => (stdout += d));
      c.on('error', reject);
      c.on('close', (code) => resolve({ code, stdout }));
      c.stdin.end(conf());
    });
  }

  it('serves root, and refuses a non-root peer before accepting even when the socket mode lets it in', async () => {
    // A world-writable socket in a world-readable dir: only SO_PEERCRED stands in the way.
    const dir = join(tmp, 'open');
    mkdirSync(dir, { mode: 0o755 });
    chmodSync(dir, 0o755);
    const socketPath = join(dir, 'cni.sock');
    await start(socketPath);
    expect(logged.some((l) => l.includes('peer credentials are not checked'))).toBe(false);
    chmodSync(socketPath, 0o666);
    const root = await shimAs(0, socketPath);
    expect(root.code).toBe(0);
    expect(JSON.parse(root.stdout).ips).toEqual([{ address: '10.1.2.3/32' }]);
    const nobody = await shimAs(65534, socketPath);
    expect(nobody.code).toBe(0);
    expect(JSON.parse(nobody.stdout)).toEqual({ fallback: true, uid: 65534 });
    expect(logged.some((l) => l.includes('refused a CNI connection from a non-root peer'))).toBe(true);
  });
});

// Issue 11, finding 7: the agent is bounded against slow, large and odd clients.
describe('CNI server bounds', () => {
  /** Resolves when the server closes the connection; `feed` keeps writing meanwhile. */
  function closedWhile(
    socketPath: string,
    first: Buffer,
    feed: (c: ReturnType<typeof connect>) => void,
  ): Promise<{ accepted: boolean }> {
    return new Promise((resolve, reject) => {
      const c = connect(socketPath);
      let accepted = false;
      c.on('error', (e: NodeJS.ErrnoException) =>
        e.code === 'EPIPE' || e.code === 'ECONNRESET' ? undefined : reject(e),
      );
      c.on('data', (d: Buffer) => (accepted ||= d[0] === ACCEPTED));
      c.on('close', () => resolve({ accepted }));
      c.write(first, () => feed(c));
    });
  }

  it('a client trickling a byte every 300 ms is closed at the total deadline', async () => {
    const socketPath = join(tmp, 'trickle.sock');
    await start(socketPath, { requestTimeoutMs: 1500 });
    const frame = encodeRequest({ plugin: 'netplugin', env: env('slow'), stdin: conf() });
    let sent = HEADER_LEN;
    let timer: NodeJS.Timeout | undefined;
    const t0 = Date.now();
    const r = await Promise.race([
      closedWhile(socketPath, frame.subarray(0, HEADER_LEN), (c) => {
        timer = setInterval(() => {
          if (sent < frame.length - 1 && !c.destroyed) c.write(frame.subarray(sent, ++sent));
        }, 300);
      }),
      new Promise<'still open'>((r) => setTimeout(() => r('still open'), 20_000)),
    ]);
    clearInterval(timer);
    expect(r).toEqual({ accepted: false });
    expect(Date.now() - t0).toBeLessThan(20_000);
    expect(logged.some((l) => l.includes('sent no complete request in time'))).toBe(true);
  });

  it('a request larger than maxRequestBytes is closed at its header, and stalled requests share one buffer cap', async () => {
    const socketPath = join(tmp, 'big.sock');
    await start(socketPath, { maxRequestBytes: 64 << 10, maxBufferedBytes: 256 << 10, requestTimeoutMs: 30_000 });
    const big = encodeRequest({ plugin: 'netplugin', env: env('big'), stdin: conf({ pad: 'x'.repeat(100 << 10) }) });
    expect(await closedWhile(socketPath, big.subarray(0, HEADER_LEN), () => {})).toEqual({ accepted: false });
    expect(logged.some((l) => l.includes("exceeds the agent's 65536-byte limit"))).toBe(true);

    // Each stalled client sends 60 KiB of a 64 KiB request and stops: the fifth crosses 256 KiB.
    const frame = encodeRequest({ plugin: 'netplugin', env: env('stall'), stdin: conf({ pad: 'y'.repeat(62 << 10) }) });
    expect(frame.length).toBeLessThan(64 << 10);
    const clients: Array<ReturnType<typeof connect>> = [];
    let closedCount = 0;
    for (let i = 0; i < 5; i++) {
      const c = connect(socketPath);
      c.on('error', () => undefined);
      c.on('close', () => closedCount++);
      clients.push(c);
      await new Promise<void>((r) => c.write(frame.subarray(0, 60 << 10), () => r()));
    }
    for (let i = 0; i < 200 && closedCount === 0; i++) await new Promise((r) => setTimeout(r, 50));
    expect(closedCount).toBeGreaterThanOrEqual(1);
    expect(logged.some((l) => l.includes('buffer too much at once'))).toBe(true);
    for (const c of clients) c.destroy();
  });

  it.each(['constructor', '__proto__', 'hasOwnProperty', 'toString'])(
    'plugin name %s is an unknown plugin (code 4), not a prototype member',
    async (name) => {
      const socketPath = join(tmp, `proto-${name.replace(/_/g, 'u')}.sock`);
      await start(socketPath);
      const r = await exchange(socketPath, { plugin: name, env: env('c-proto'), stdin: conf() });
      expect(r.accepted).toBe(true);
      const err = JSON.parse(r.response!.stdout);
      expect(err.code).toBe(4);
      expect(err.msg).toContain(`no plugin named '${name}'`);
      expect(err.msg).not.toMatch(/ at .*\.(ts|js|mjs):\d+/);
    },
  );

  it('two sandboxes of one pod (different container IDs) run one at a time', async () => {
    const socketPath = join(tmp, 'pod-order.sock');
    await start(socketPath);
    const podArgs = { CNI_ARGS: 'IgnoreUnknown=1;K8S_POD_NAMESPACE=ns;K8S_POD_NAME=web-0' };
    const oldDel = exchange(socketPath, {
      plugin: 'netplugin',
      env: env('sandbox-old', podArgs),
      stdin: conf({ tag: 'OLD', waitFor: 'releaseOld' }),
    });
    await startedSignal('OLD').promise;
    const newAdd = exchange(socketPath, {
      plugin: 'netplugin',
      env: env('sandbox-new', podArgs),
      stdin: conf({ tag: 'NEW' }),
    });
    await new Promise((r) => setTimeout(r, 300));
    expect(events).toEqual(['start OLD']);
    gate('releaseOld').resolve();
    await Promise.all([oldDel, newAdd]);
    expect(events).toEqual(['start OLD', 'end OLD', 'start NEW', 'end NEW']);
  });
});
