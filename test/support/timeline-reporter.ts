// With NETPLUGIN_TEST_TIMELINE=<file>, writes when each test file started and
// ended (seconds since the run began, per project) and the run's wall time:
// the measurement behind test/support/durations.json and the suite's
// wall-time budget (docs in test/support/README.md). Without it, does nothing.
import { writeFileSync } from 'node:fs';
import { relative } from 'node:path';
import type { Reporter, TestModule, Vitest } from 'vitest/node';

export default class TimelineReporter implements Reporter {
  private readonly out = process.env.NETPLUGIN_TEST_TIMELINE;
  private t0 = Date.now();
  private root = process.cwd();
  private readonly rows = new Map<string, { start: number; end?: number }>();

  onInit(ctx: Vitest): void {
    this.t0 = Date.now();
    this.root = ctx.config.root;
  }

  private key(m: TestModule): string {
    return `${m.project.name}:${relative(this.root, m.moduleId)}`;
  }

  onTestModuleStart(m: TestModule): void {
    if (this.out) this.rows.set(this.key(m), { start: (Date.now() - this.t0) / 1000 });
  }

  onTestModuleEnd(m: TestModule): void {
    const r = this.rows.get(this.key(m));
    if (r) r.end = (Date.now() - this.t0) / 1000;
  }

  onTestRunEnd(): void {
    if (!this.out) return;
    const lines = [...this.rows]
      .sort((a, b) => a[1].start - b[1].start)
      .map(
        ([k, r]) =>
          `${r.start.toFixed(1).padStart(7)} ${(r.end ?? NaN).toFixed(1).padStart(7)} ` +
          `${((r.end ?? NaN) - r.start).toFixed(1).padStart(6)}  ${k}`,
      );
    writeFileSync(
      this.out,
      `#  start     end    dur  file   (wall ${((Date.now() - this.t0) / 1000).toFixed(1)} s)\n${lines.join('\n')}\n`,
    );
  }
}
