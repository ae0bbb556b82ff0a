// Orders test files longest first, so the two workers never end with one long
// file running alone while the other idles (vitest's own order, in a fresh
// clone with no cache, is by file size: the small NetworkPolicy truth-table
// files, ~50 s each, started last). A file's expected duration is its last
// run in this checkout (vitest's cache), else test/support/durations.json
// (measured on a full run; refresh with `node scripts/test-durations.mjs`),
// else UNKNOWN_MS. Failed files of the last run still go first, as in vitest.
import { readFileSync } from 'node:fs';
import { relative } from 'node:path';
import { BaseSequencer, type TestSpecification } from 'vitest/node';

const UNKNOWN_MS = 10_000;
const table = JSON.parse(readFileSync(new URL('./durations.json', import.meta.url), 'utf8')) as Record<string, number>;

export default class LongestFirstSequencer extends BaseSequencer {
  override async sort(files: TestSpecification[]): Promise<TestSpecification[]> {
    const key = (s: TestSpecification) => `${s.project.name}:${relative(this.ctx.config.root, s.moduleId)}`;
    const last = (s: TestSpecification) => this.ctx.cache.getFileTestResults(key(s));
    const expected = (s: TestSpecification) => last(s)?.duration ?? table[key(s)] ?? UNKNOWN_MS;
    return [...files].sort(
      (a, b) =>
        Number(!!last(b)?.failed) - Number(!!last(a)?.failed) ||
        expected(b) - expected(a) ||
        key(a).localeCompare(key(b)),
    );
  }
}
