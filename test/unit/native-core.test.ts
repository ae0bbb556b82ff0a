// The addon's N-API-free core (native/core) as a plain C++ program: the bytes
// of each op's netlink message against golden buffers, and the parsing of
// canned kernel answers (native/test/core_test.cc). Built with g++ from the
// core files only (scripts/build-core-test, skipped when unchanged).
import { execFileSync, spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { packageRoot } from '../../src/native/index.js';

const root = packageRoot();

describe('native core (no Node)', () => {
  it('builds messages byte for byte as the goldens and parses canned answers', () => {
    const bin = execFileSync('bash', [join(root, 'scripts/build-core-test')], {
      cwd: root,
      encoding: 'utf8',
      stdio: ['ignore', 'pipe', 'pipe'],
    }).trim();
    const run = spawnSync(join(root, bin), { encoding: 'utf8' });
    // The program prints each mismatch (with both byte strings) and a summary.
    expect(run.stdout).not.toMatch(/FAIL/);
    expect(run.status, run.stdout + run.stderr).toBe(0);
    expect(run.stdout).toMatch(/^\d+ checks, 0 failed$/m);
  }, 120_000);
});
