// test/support/progress-reporter.ts as vitest runs it: a real vitest run of two throwaway test
// files (one slow and passing, one failing) prints a line per finished file with its state and
// time, and heartbeat lines naming the file still running.
import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, expect, it } from 'vitest';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
let dir: string;

beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), `progress-reporter-${process.pid}-`));
  writeFileSync(
    join(dir, 'slow.test.ts'),
    "import { it } from 'vitest';\nit('waits', () => new Promise((r) => setTimeout(r, 2500)));\n",
  );
  writeFileSync(
    join(dir, 'broken.test.ts'),
    "import { expect, it } from 'vitest';\nit('fails', () => expect(1).toBe(2));\n",
  );
  const reporter = join(ROOT, 'test/support/progress-reporter.ts');
  writeFileSync(
    join(dir, 'vitest.config.mjs'),
    `export default { test: { include: ['*.test.ts'], reporters: [${JSON.stringify(reporter)}] } };\n`,
  );
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

it('prints one line per finished file with its state and time, and heartbeats while a file runs', async () => {
  const run = promisify(execFile)(
    process.execPath,
    [join(ROOT, 'node_modules/vitest/vitest.mjs'), 'run', '--root', dir, '--config', join(dir, 'vitest.config.mjs')],
    {
      env: { ...process.env, NETPLUGIN_TEST_HEARTBEAT: '1', CI: '1' },
      encoding: 'utf8',
      timeout: 50_000,
    },
  );
  // The failing file makes vitest exit 1.
  const out = await run.then(
    (r) => r.stdout,
    (e: { stdout: string }) => e.stdout,
  );
  const lines = out.split('\n');
  const slow = lines.filter((l) => /^\[\d+:\d\d\] [12]\/2 ok slow\.test\.ts \d+\.\d s$/.test(l));
  expect(slow, out).toHaveLength(1);
  expect(Number(/ (\d+\.\d) s$/.exec(slow[0]!)![1])).toBeGreaterThanOrEqual(2.5);
  expect(
    lines.filter((l) => /^\[\d+:\d\d\] [12]\/2 FAILED broken\.test\.ts \d+\.\d s$/.test(l)),
    out,
  ).toHaveLength(1);
  expect(
    lines.some((l) => /^\[\d+:\d\d\] [01]\/2 files done; running: .*slow\.test\.ts \(\d+:\d\d\)/.test(l)),
    out,
  ).toBe(true);
});
