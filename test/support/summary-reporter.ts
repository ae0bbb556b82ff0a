// Prints one closing line that any CI reads: "N passed, M failed" (after
// vitest's own summary). Unhandled errors count as failures: a run that dies
// outside a test (a worker RPC timeout, an error after teardown) is not green.
import type { Reporter, TestModule } from 'vitest/node';

export default class SummaryReporter implements Reporter {
  onTestRunEnd(testModules: ReadonlyArray<TestModule>, unhandledErrors: ReadonlyArray<unknown>): void {
    let passed = 0;
    let failed = 0;
    let skipped = 0;
    for (const m of testModules) {
      if (m.state() === 'failed' && ![...m.children.allTests()].length) failed++; // a file that failed to load
      for (const t of m.children.allTests()) {
        const s = t.result().state;
        if (s === 'passed') passed++;
        else if (s === 'failed') failed++;
        else skipped++;
      }
    }
    const errors = unhandledErrors.length;
    const line = `${passed} passed, ${failed + errors} failed${skipped ? `, ${skipped} skipped` : ''}`;
    const note = errors ? `(${errors} unhandled error${errors === 1 ? '' : 's'} counted as failed)\n` : '';
    // At exit, so it is the very last line, after vitest's own summary.
    process.once('exit', () => process.stdout.write(`\n${note}${line}\n`));
  }
}
