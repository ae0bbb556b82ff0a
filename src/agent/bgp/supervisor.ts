// Runs BIRD for the agent: writes the rendered configuration (and the password
// files, mode 0600) under the run dir, checks it with `bird -p` before use,
// starts `bird -f` with its control socket there, applies later changes with
// `birdc configure` (sessions stay up), restarts BIRD with a backoff when it
// dies, and polls its sessions for /readyz and metrics.
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Logger } from '../../log/types.js';
import { writeFileAtomic } from '../../atomic-write.js';
import { birdcPath, readSessions, runBirdc, type BgpSession } from '../../bird/client.js';
import type { BirdConfig } from './render.js';

import { BIRD_CONFIG_FILE as CONFIG_FILE, BIRD_CONTROL_SOCKET as CONTROL_SOCKET } from '../../model/bgp.js';
const PASSWORD_SUFFIX = '.password.conf';
/** Left in the run dir by a graceful-restart shutdown: the next BIRD recovers (-R). */
const RESTART_MARKER = 'graceful-restart';

export interface BirdStatus {
  running: boolean;
  pid: number | undefined;
  /** Sessions as of the last poll. */
  sessions: BgpSession[];
  established: number;
  /** The last configuration BIRD refused, or why it could not start. */
  lastError: string | undefined;
  restarts: number;
}

interface BirdSupervisorOptions {
  birdPath: string;
  runDir: string;
  log: Logger;
  /** How often sessions are polled (default 5 s). */
  pollMs?: number;
}

export class BirdSupervisor {
  private child: ChildProcess | undefined;
  private stopped = false;
  private restartTimer: NodeJS.Timeout | undefined;
  private pollTimer: NodeJS.Timeout | undefined;
  private backoffMs = 500;
  private startedAt = 0;
  private haveConfig = false;
  private readonly birdc: string;
  private status_: BirdStatus = {
    running: false,
    pid: undefined,
    sessions: [],
    established: 0,
    lastError: undefined,
    restarts: 0,
  };

  constructor(private readonly o: BirdSupervisorOptions) {
    this.birdc = birdcPath(o.birdPath);
    mkdirSync(o.runDir, { recursive: true, mode: 0o700 });
  }

  get socket(): string {
    return join(this.o.runDir, CONTROL_SOCKET);
  }

  status(): BirdStatus {
    return { ...this.status_, sessions: [...this.status_.sessions] };
  }

  /**
   * Writes and checks a configuration, then starts BIRD or has it reload.
   * A configuration `bird -p` refuses is not used (the running one stays) and
   * the error is returned.
   */
  async apply(r: BirdConfig): Promise<{ ok: boolean; error?: string }> {
    const dir = this.o.runDir;
    for (const [f, text] of r.secrets) writeFileAtomic(join(dir, f), text, 0o600);
    const file = join(dir, CONFIG_FILE);
    const next = `${file}.next`;
    writeFileSync(next, r.config, { mode: 0o600 });
    const check = spawnSync(this.o.birdPath, ['-p', '-c', next], { encoding: 'utf8', timeout: 10_000 });
    if (check.error || check.status !== 0) {
      const error =
        `bird -p refused the rendered configuration: ` + `${(check.stderr || check.error?.message || '').trim()}`;
      this.status_.lastError = error;
      this.o.log.error(`bgp: ${error}`);
      return { ok: false, error };
    }
    let cur = '';
    try {
      cur = readFileSync(file, 'utf8');
    } catch {
      /* first configuration */
    }
    renameSync(next, file);
    // Password files of sessions no longer configured go.
    for (const f of readdirSync(dir))
      if (f.endsWith(PASSWORD_SUFFIX) && !r.secrets.has(f)) rmSync(join(dir, f), { force: true });
    this.haveConfig = true;
    if (!this.child) {
      this.start();
      return { ok: true };
    }
    if (cur === r.config && r.secrets.size === 0) return { ok: true };
    try {
      const out = await runBirdc(this.birdc, this.socket, ['configure']);
      if (!/Reconfigured|Reconfiguration in progress|unchanged/i.test(out)) throw new Error(out.trim());
      this.status_.lastError = undefined;
      return { ok: true };
    } catch (e) {
      const error = `birdc configure failed: ${(e as Error).message}`;
      this.status_.lastError = error;
      this.o.log.warn(`bgp: ${error}`);
      return { ok: false, error };
    }
  }

  private start(): void {
    if (this.stopped || this.child || !this.haveConfig) return;
    const dir = this.o.runDir;
    const args = ['-f', '-c', join(dir, CONFIG_FILE), '-s', this.socket, '-P', join(dir, 'bird.pid')];
    // After a BIRD that died or was shut down for a graceful restart (its kernel routes persist), the
    // new one recovers: it keeps those routes until its peers sent their tables again, instead of
    // pruning them at its first kernel scan. A first start has nothing to recover and does not wait.
    const marker = join(dir, RESTART_MARKER);
    if (this.status_.restarts > 0 || existsSync(marker)) args.push('-R');
    rmSync(marker, { force: true });
    const child = spawn(this.o.birdPath, args, { stdio: ['ignore', 'ignore', 'pipe'] });
    this.child = child;
    this.startedAt = Date.now();
    let tail = '';
    child.stderr!.setEncoding('utf8');
    child.stderr!.on('data', (d: string) => {
      tail = (tail + d).slice(-4000);
      for (const line of d.split('\n')) if (line.trim()) this.o.log.info('bird', { line: line.trim() });
    });
    child.on('error', (e) => {
      this.status_.lastError = `cannot run ${this.o.birdPath}: ${e.message}`;
    });
    child.on('spawn', () => {
      this.status_.running = true;
      this.status_.pid = child.pid;
      this.o.log.info('bgp: BIRD started', { pid: child.pid, socket: this.socket });
    });
    child.on('exit', (code, signal) => {
      this.child = undefined;
      this.status_.running = false;
      this.status_.pid = undefined;
      this.status_.sessions = [];
      this.status_.established = 0;
      if (this.stopped) return;
      // A BIRD that ran a while gets a quick restart; one that keeps dying backs off up to 30 s.
      if (Date.now() - this.startedAt > 60_000) this.backoffMs = 500;
      const why =
        `BIRD exited (${signal ?? `code ${code}`})` +
        `${tail.trim() ? `: ${tail.trim().split('\n').slice(-1)[0]}` : ''}`;
      this.status_.lastError = why;
      this.o.log.warn(`bgp: ${why}; restarting`, { inMs: this.backoffMs });
      this.status_.restarts++;
      this.restartTimer = setTimeout(() => this.start(), this.backoffMs);
      this.backoffMs = Math.min(this.backoffMs * 2, 30_000);
    });
    if (!this.pollTimer) {
      this.pollTimer = setInterval(() => void this.poll(), this.o.pollMs ?? 5000);
      this.pollTimer.unref();
    }
  }

  /** Reads the sessions now (also run periodically). */
  async poll(): Promise<BgpSession[]> {
    if (!this.child) return [];
    try {
      const sessions = await readSessions(this.birdc, this.socket);
      this.status_.sessions = sessions;
      this.status_.established = sessions.filter((s) => s.established).length;
      return sessions;
    } catch {
      return this.status_.sessions;
    }
  }

  /**
   * Stops BIRD. Its kernel routes stay (`persist`). `graceful` (the agent stopping, to be restarted):
   * BIRD shuts down for a graceful restart (`birdc graceful restart`): its sessions close without a
   * Cease, so the peers keep our routes for the restart time, and the next BIRD started in this run
   * dir recovers (-R). Otherwise SIGTERM: the peers withdraw our routes at once.
   */
  async stop(o: { graceful?: boolean } = {}): Promise<void> {
    this.stopped = true;
    clearTimeout(this.restartTimer);
    clearInterval(this.pollTimer);
    const c = this.child;
    if (!c) return;
    const exited = new Promise<void>((resolve) => c.once('exit', () => resolve()));
    let signalled = false;
    if (o.graceful) {
      try {
        writeFileSync(join(this.o.runDir, RESTART_MARKER), '', { mode: 0o600 });
        await runBirdc(this.birdc, this.socket, ['graceful', 'restart']);
      } catch (e) {
        this.o.log.warn(`bgp: birdc graceful restart failed; stopping BIRD with SIGTERM: ${(e as Error).message}`);
        c.kill('SIGTERM');
        signalled = true;
      }
    } else {
      c.kill('SIGTERM');
      signalled = true;
    }
    const kill = setTimeout(() => c.kill(signalled ? 'SIGKILL' : 'SIGTERM'), 5000);
    kill.unref();
    await exited;
    clearTimeout(kill);
  }
}
