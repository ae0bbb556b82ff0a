// Says where a long run is: one line per finished test file (its state, project, path, its own
// time, how many files are done and the run's elapsed time), and while files run without one
// finishing, a line every NETPLUGIN_TEST_HEARTBEAT seconds (default 60; 0: none) naming them.
// Through vitest's logger, so the lines do not tear the live summary on a terminal.
import { relative } from 'node:path';
import type { Reporter, TestModule, TestSpecification, Vitest } from 'vitest/node';

const clock = (ms: number) => {
  const s = Math.round(ms / 1000);
  return `${Math.floor(s / 60)}:${String(s % 60).padStart(2, '0')}`;
};

export default class ProgressReporter implements Reporter {
  private ctx: Vitest | undefined;
  private t0 = Date.now();
  private total = 0;
  private done = 0;
  private readonly running = new Map<string, number>();
  private heartbeat: NodeJS.Timeout | undefined;
  private lastLine = Date.now();

  onInit(ctx: Vitest): void {
    this.ctx = ctx;
    this.t0 = Date.now();
  }

  onTestRunStart(specs: ReadonlyArray<TestSpecification>): void {
    this.total = specs.length;
    this.done = 0;
    const every = Number(process.env.NETPLUGIN_TEST_HEARTBEAT ?? 60) * 1000;
    if (every > 0) {
      this.heartbeat = setInterval(
        () => {
          if (Date.now() - this.lastLine < every || !this.running.size) return;
          const now = Date.now();
          const files = [...this.running].map(([k, start]) => `${k} (${clock(now - start)})`).join(', ');
          this.print(`[${clock(now - this.t0)}] ${this.done}/${this.total} files done; running: ${files}`);
        },
        Math.min(every, 5000),
      );
      this.heartbeat.unref();
    }
  }

  private key(m: TestModule): string {
    const file = relative(this.ctx?.config.root ?? process.cwd(), m.moduleId);
    return m.project.name ? `${m.project.name}:${file}` : file;
  }

  private print(line: string): void {
    this.lastLine = Date.now();
    if (this.ctx) this.ctx.logger.log(line);
    else process.stdout.write(line + '\n');
  }

  // From the moment a worker takes the file (queued), so its import and collection count.
  onTestModuleQueued(m: TestModule): void {
    this.running.set(this.key(m), Date.now());
  }

  onTestModuleStart(m: TestModule): void {
    if (!this.running.has(this.key(m))) this.running.set(this.key(m), Date.now());
  }

  onTestModuleEnd(m: TestModule): void {
    const k = this.key(m);
    const started = this.running.get(k) ?? Date.now();
    this.running.delete(k);
    this.done++;
    const state = m.state();
    const mark = state === 'passed' ? 'ok' : state === 'skipped' ? 'skipped' : 'FAILED';
    // Wall time from the file's start to its end: collection and hooks included.
    this.print(
      `[${clock(Date.now() - this.t0)}] ${this.done}/${this.total} ${mark} ${k} ` +
        `${((Date.now() - started) / 1000).toFixed(1)} s`,
    );
  }

  onTestRunEnd(): void {
    if (this.heartbeat) clearInterval(this.heartbeat);
    this.heartbeat = undefined;
  }
}
