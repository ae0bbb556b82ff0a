// The agent's CNI server: the resident end of the native shim (protocol.ts).
// Each request runs through the same dispatcher as the per-exec entry, with
// IO built from the request (the runtime's env and stdin, never the agent's
// own process.env), so both paths behave the same.
import { createConnection, createServer, type Server, type Socket } from 'node:net';
import { chmodSync, lstatSync, mkdirSync, unlinkSync } from 'node:fs';
import { dirname } from 'node:path';
import type { CniIO, PluginSpec } from '../cni/types.js';
import type { Logger } from '../log/types.js';
import {
  ACCEPTED,
  HEADER_LEN,
  decodeRequestBody,
  encodeResponse,
  requestBodyLength,
  type ShimRequest,
  type ShimResponse,
} from './protocol.js';
import { createKeyedQueue, createLimiter, type Limiter } from './serialize.js';
import { redactString } from '../log/redact.js';
import { mark, withTimeline } from '../observe/timeline.js';

// biome-ignore lint/suspicious/noExplicitAny: plugins of every netconf and runtime type share one dispatcher
type AnyPlugin = PluginSpec<any, any>;
type DispatchFn = (io: CniIO, plugin: AnyPlugin) => Promise<number>;
interface PeerCred {
  pid: number;
  uid: number;
  gid: number;
}
type PeerCredFn = (fd: number) => PeerCred;

interface CniServerOptions {
  socketPath: string;
  /** By executable name: 'netplugin', 'netplugin-ipam'. */
  plugins: Record<string, AnyPlugin>;
  log: Logger;
  /** Requests running at once per plugin (default 64). */
  maxConcurrent?: number;
  /** How long close() waits for accepted requests before dropping them (default 30 s). */
  closeTimeoutMs?: number;
  /**
   * How long a connection may take to deliver its whole request, from connect (default 10 s; a total deadline, not an
   * idle timeout).
   */
  requestTimeoutMs?: number;
  /** Largest request accepted (default 2 MiB: the 1 MiB stdin cap plus the environment). */
  maxRequestBytes?: number;
  /**
   * Bytes all connections still sending their request may buffer together (default 16 MiB); a connection that would
   * exceed it is closed.
   */
  maxBufferedBytes?: number;
  /** Default: src/cni/dispatch.ts. */
  dispatch?: DispatchFn;
  /**
   * SO_PEERCRED lookup. Default: the rtnetlink addon's peerCred(); null skips
   * the check (the socket's 0600 mode still keeps non-root callers out).
   */
  peerCred?: PeerCredFn | null;
  /** Called with every answered request (the agent's metrics, src/agent/metrics.ts). */
  onServed?: (r: {
    plugin: string;
    command: string;
    exitCode: number;
    stdout: string;
    seconds: number;
    cniArgs?: string | undefined;
  }) => void;
}

const DEFAULT_MAX_CONCURRENT = 64;
const DEFAULT_MAX_REQUEST = 2 << 20;
const DEFAULT_MAX_BUFFERED = 16 << 20;

/** Listens on `opts.socketPath` (0600, root peers only) and serves each request through the dispatcher. */
export async function startCniServer(opts: CniServerOptions): Promise<CniServer> {
  const dispatch = opts.dispatch ?? (await import('../cni/dispatch.js')).dispatch;
  const peerCred = opts.peerCred === undefined ? await loadPeerCred(opts.log) : opts.peerCred;
  const server = new CniServer(opts, dispatch, peerCred);
  await server.listen();
  return server;
}

export class CniServer {
  readonly socketPath: string;
  private readonly log: Logger;
  private readonly limits: {
    closeMs: number;
    requestMs: number;
    concurrent: number;
    request: number;
    buffered: number;
  };
  /** Own properties only: a name like `constructor` or `__proto__` is no plugin. */
  private readonly plugins: Map<string, AnyPlugin>;
  private readonly server: Server;
  /**
   * One queue per plugin name: a netplugin ADD that delegates to netplugin-ipam through the shim must
   * not wait behind itself on the same container ID.
   */
  private readonly queue = createKeyedQueue();
  private readonly limiters = new Map<string, Limiter>();
  private readonly sockets = new Set<Socket>();
  /** Connected but not yet accepted: safe to drop at shutdown (the shim falls back). */
  private readonly pending = new Set<Socket>();
  private readonly inflight = new Set<Promise<void>>();
  private readonly ownUid = process.getuid?.() ?? 0;
  /** Bytes buffered by all connections still sending their request. */
  private buffered = 0;
  private closing = false;
  private closed: Promise<void> | undefined;
  private socketIno = 0;

  constructor(
    private readonly opts: CniServerOptions,
    private readonly dispatch: DispatchFn,
    private peerCred: PeerCredFn | null,
  ) {
    this.socketPath = opts.socketPath;
    this.log = opts.log;
    this.limits = {
      closeMs: opts.closeTimeoutMs ?? 30_000,
      requestMs: opts.requestTimeoutMs ?? 10_000,
      concurrent: opts.maxConcurrent ?? DEFAULT_MAX_CONCURRENT,
      request: opts.maxRequestBytes ?? DEFAULT_MAX_REQUEST,
      buffered: opts.maxBufferedBytes ?? DEFAULT_MAX_BUFFERED,
    };
    this.plugins = new Map(Object.entries(opts.plugins));
    this.server = createServer((socket) => this.onConnection(socket));
    this.server.on('error', (e) => this.log.error('CNI socket error', { socket: this.socketPath, error: e.message }));
  }

  async listen(): Promise<void> {
    const { socketPath, server, log } = this;
    await prepareSocketPath(socketPath);
    // Bind happens synchronously inside listen(): the umask makes the socket
    // 0600 from its first instant, not after a chmod race.
    const oldMask = process.umask(0o177);
    try {
      await new Promise<void>((resolve, reject) => {
        server.once('error', reject);
        server.listen(socketPath, () => {
          server.off('error', reject);
          resolve();
        });
      });
    } finally {
      process.umask(oldMask);
    }
    chmodSync(socketPath, 0o600);
    if (this.peerCred && this.opts.peerCred === undefined) this.peerCred = probePeerCred(this.peerCred, server, log);
    this.socketIno = lstatSync(socketPath).ino;
    log.info('CNI server listening', {
      socket: socketPath,
      plugins: [...this.plugins.keys()].join(','),
      maxConcurrent: this.limits.concurrent,
    });
  }

  private limiterFor(plugin: string): Limiter {
    let l = this.limiters.get(plugin);
    if (!l) this.limiters.set(plugin, (l = createLimiter(this.limits.concurrent)));
    return l;
  }

  private onConnection(socket: Socket): void {
    if (this.closing) {
      socket.destroy();
      return;
    }
    this.sockets.add(socket);
    this.pending.add(socket);
    socket.on('close', () => {
      this.sockets.delete(socket);
      this.pending.delete(socket);
    });
    socket.on('error', (e) => this.log.debug('CNI connection error', { error: e.message }));
    if (!this.peerAllowed(socket)) {
      // Closing before "accepted": the shim runs the request per-exec, with the caller's own privileges.
      socket.destroy();
      return;
    }
    this.readRequest(socket);
  }

  /** Root or our own uid (SO_PEERCRED); without the addon the socket's 0600 mode keeps others out. */
  private peerAllowed(socket: Socket): boolean {
    if (!this.peerCred) return true;
    const fd = (socket as unknown as { _handle?: { fd?: number } })._handle?.fd;
    let cred: PeerCred | undefined;
    try {
      if (typeof fd === 'number' && fd >= 0) cred = this.peerCred(fd);
    } catch (e) {
      this.log.warn('cannot read the CNI peer credentials', { error: (e as Error).message });
    }
    if (cred && (cred.uid === 0 || cred.uid === this.ownUid)) return true;
    this.log.warn('refused a CNI connection from a non-root peer', { uid: cred?.uid, pid: cred?.pid });
    return false;
  }

  /** Buffers one request frame, within the size and time limits, then accepts it. */
  private readRequest(socket: Socket): void {
    const { log, limits } = this;
    // A total deadline from connect: a client trickling a byte at a time
    // cannot hold a connection (and its buffer) open for ever.
    const deadline = setTimeout(() => {
      log.warn('CNI connection sent no complete request in time; closing it', { timeoutMs: limits.requestMs });
      socket.destroy();
    }, limits.requestMs);
    const chunks: Buffer[] = [];
    let have = 0;
    let want = -1;
    const drop = () => {
      clearTimeout(deadline);
      this.buffered -= have;
      have = 0;
      chunks.length = 0;
    };
    socket.once('close', drop);
    const onData = (chunk: Buffer) => {
      if (this.buffered + chunk.length > limits.buffered) {
        log.warn('CNI connections buffer too much at once; closing one', {
          bufferedBytes: this.buffered,
          maxBufferedBytes: limits.buffered,
        });
        socket.destroy();
        return;
      }
      chunks.push(chunk);
      have += chunk.length;
      this.buffered += chunk.length;
      let req: ShimRequest;
      const read = performance.now();
      try {
        if (want < 0) {
          if (have < HEADER_LEN) return;
          want = requestBodyLength(Buffer.concat(chunks));
          if (want > limits.request)
            throw new Error(`request of ${want} bytes exceeds the agent's ${limits.request}-byte limit`);
        }
        if (have < HEADER_LEN + want) return;
        const buf = Buffer.concat(chunks);
        req = decodeRequestBody(buf.subarray(HEADER_LEN, HEADER_LEN + want));
      } catch (e) {
        log.warn('refused a malformed CNI request', { error: (e as Error).message });
        socket.destroy();
        return;
      }
      socket.off('data', onData);
      drop();
      this.pending.delete(socket);
      this.accept(socket, req, read);
    };
    socket.on('data', onData);
  }

  private accept(socket: Socket, req: ShimRequest, read: number): void {
    // Running starts only once "accepted" is in the kernel: if we die before
    // that, the shim sees no marker and safely runs the request per-exec.
    socket.write(Buffer.from([ACCEPTED]), (err) => {
      if (err) {
        this.log.warn('CNI client went away before the request was accepted', { error: err.message });
        return;
      }
      const p = withTimeline(req.env['CNI_COMMAND'] ?? '', read, () => {
        mark('accepted');
        return this.handle(req);
      }).then((res) => {
        if (!socket.destroyed) socket.end(frameResponse(res));
      });
      this.inflight.add(p);
      void p.finally(() => this.inflight.delete(p));
    });
  }

  /** Orders the request behind the pod's earlier ones and bounds the plugin's concurrency. */
  async handle(req: ShimRequest): Promise<ShimResponse> {
    const plugin = this.plugins.get(req.plugin);
    if (!plugin) {
      const known = [...this.plugins.keys()].join(', ');
      return cniError(
        4,
        `this agent serves no plugin named '${req.plugin.slice(0, 64)}' (the executable's name); install the shim as ` +
          `one of: ${known}`,
      );
    }
    const run = () => this.limiterFor(req.plugin).run(() => this.serve(plugin, req));
    // VERSION, STATUS and GC carry no container ID and need no ordering.
    const key = orderingKey(req.env);
    return key ? this.queue.run(`${req.plugin}\0${key}`, run) : run();
  }

  private async serve(plugin: AnyPlugin, req: ShimRequest): Promise<ShimResponse> {
    const { log } = this;
    const started = performance.now();
    mark('dispatching');
    let stdout = '';
    let stderr = '';
    const io: CniIO = {
      env: req.env,
      stdin: req.stdin,
      stdout: (c) => {
        stdout += c;
      },
      stderr: (c) => {
        stderr += c;
      },
    };
    let code: number;
    try {
      code = await this.dispatch(io, plugin);
    } catch (e) {
      // The dispatcher turns every failure into CNI error JSON; reaching here is a bug.
      log.error('CNI dispatcher threw', { error: (e as Error)?.stack ?? String(e) });
      return cniError(999, `netplugin agent internal error: ${redactString((e as Error)?.message ?? String(e))}`);
    }
    this.opts.onServed?.({
      plugin: req.plugin,
      command: req.env['CNI_COMMAND'] ?? '',
      exitCode: code,
      stdout,
      seconds: (performance.now() - started) / 1000,
      cniArgs: req.env['CNI_ARGS'],
    });
    log.info('CNI request served', {
      plugin: req.plugin,
      command: req.env['CNI_COMMAND'] ?? '',
      ...(req.env['CNI_CONTAINERID'] ? { containerId: req.env['CNI_CONTAINERID'] } : {}),
      code,
      ms: Math.round((performance.now() - started) * 10) / 10,
    });
    return stderr ? { code, stdout, stderr } : { code, stdout };
  }

  /** Stops accepting, lets accepted requests finish (bounded), removes the socket. */
  close(): Promise<void> {
    this.closed ??= this.shutdown();
    return this.closed;
  }

  private async shutdown(): Promise<void> {
    const { log, server, socketPath } = this;
    this.closing = true;
    const serverClosed = new Promise<void>((resolve) => server.close(() => resolve()));
    // Connections still sending their request were never accepted: the
    // shim falls back to per-exec for them.
    for (const s of this.pending) s.destroy();
    let timer: NodeJS.Timeout | undefined;
    const timedOut = await Promise.race([
      Promise.allSettled([...this.inflight]).then(() => false),
      new Promise<boolean>((r) => (timer = setTimeout(() => r(true), this.limits.closeMs))),
    ]);
    clearTimeout(timer);
    if (timedOut)
      log.warn('CNI requests still running at shutdown; their callers get code 11 and retry', {
        count: this.inflight.size,
      });
    for (const s of this.sockets) s.destroy();
    await serverClosed;
    // libuv unlinks the socket on close; this covers the rest, but never
    // a newer agent's socket at the same path.
    try {
      if (lstatSync(socketPath).ino === this.socketIno) unlinkSync(socketPath);
    } catch {
      /* already gone */
    }
    log.info('CNI server stopped', { socket: socketPath });
  }
}

/**
 * What ADD/DEL/CHECK are ordered by: the pod (namespace/name) when the
 * runtime names one, else the container ID. All sandboxes of a pod share its
 * host veth name, so an old sandbox's DEL and a new sandbox's ADD must not
 * overlap (per container ID they did).
 */
function orderingKey(env: Record<string, string | undefined>): string | undefined {
  const args = env['CNI_ARGS'] ?? '';
  const arg = (k: string) => {
    for (const part of args.split(';')) if (part.startsWith(`${k}=`)) return part.slice(k.length + 1);
    return undefined;
  };
  const ns = arg('K8S_POD_NAMESPACE');
  const name = arg('K8S_POD_NAME');
  if (ns && name) return `pod\0${ns}\0${name}`;
  const cid = env['CNI_CONTAINERID'];
  return cid ? `container\0${cid}` : undefined;
}

/** The response frame; an answer too large for the shim becomes a CNI error it can relay. */
function frameResponse(res: ShimResponse): Buffer {
  try {
    return encodeResponse(res);
  } catch (e) {
    return encodeResponse(cniError(5, `netplugin agent cannot send its answer: ${(e as Error).message}`));
  }
}

function cniError(code: number, msg: string): ShimResponse {
  return { code: 1, stdout: JSON.stringify({ cniVersion: '1.0.0', code, msg }) + '\n' };
}

/**
 * Makes the socket path usable: creates its directory (0700: root only), and
 * removes a stale socket left by a dead agent, but refuses to take over one
 * that a live agent still answers on.
 */
async function prepareSocketPath(path: string): Promise<void> {
  mkdirSync(dirname(path), { recursive: true, mode: 0o700 });
  let isSocket: boolean;
  try {
    isSocket = lstatSync(path).isSocket();
  } catch {
    return;
  }
  if (!isSocket) {
    throw new Error(`CNI socket path ${path} exists and is not a socket; remove it or pass another --socket`);
  }
  const state = await new Promise<'live' | 'stale' | 'gone'>((resolve, reject) => {
    const c = createConnection(path);
    c.once('connect', () => {
      c.destroy();
      resolve('live');
    });
    c.once('error', (e: NodeJS.ErrnoException) => {
      if (e.code === 'ECONNREFUSED') resolve('stale');
      else if (e.code === 'ENOENT') resolve('gone');
      else reject(new Error(`cannot probe the existing CNI socket ${path}: ${e.message}`));
    });
  });
  if (state === 'live') {
    throw new Error(`another netplugin agent is already serving ${path}; stop it first (or pass another --socket)`);
  }
  if (state === 'stale') unlinkSync(path);
}

/**
 * The addon loads lazily, so a missing or stale build shows only on the first
 * call. SO_PEERCRED on a listening unix socket answers with our own
 * credentials, which makes it a harmless probe.
 */
function probePeerCred(fn: PeerCredFn, server: Server, log: Logger): PeerCredFn | null {
  const fd = (server as unknown as { _handle?: { fd?: number } })._handle?.fd;
  try {
    if (typeof fd === 'number' && fd >= 0) fn(fd);
    return fn;
  } catch (e) {
    warnNoPeerCred(log, `the native addon failed: ${(e as Error).message}`);
    return null;
  }
}

let peerCredWarned = false;
function warnNoPeerCred(log: Logger, why: string): void {
  if (peerCredWarned) return;
  peerCredWarned = true;
  log.warn(`CNI peer credentials are not checked (${why}); relying on the socket's 0600 mode`);
}

async function loadPeerCred(log: Logger): Promise<PeerCredFn | null> {
  let why = 'the native addon has no peerCred()';
  try {
    const mod = (await import('../dataplane/syscalls.js')) as { peerCred?: PeerCredFn };
    if (typeof mod.peerCred === 'function') return mod.peerCred;
  } catch (e) {
    why = `the native addon did not load: ${(e as Error).message}`;
  }
  warnNoPeerCred(log, why);
  return null;
}
