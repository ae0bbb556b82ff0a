// Writes test/support/durations.json (the expected duration of every test file,
// read by test/support/sequencer.ts to start the longest files first) from
// vitest's cache of the last run in this checkout. Run it after a full
// `npm test` on the reference machine; keys are "<project>:<file>".
import { readdirSync, readFileSync, writeFileSync, existsSync } from 'node:fs';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const cacheDir = join(root, 'node_modules/.vite/vitest');
const caches = existsSync(cacheDir)
  ? readdirSync(cacheDir)
      .map((d) => join(cacheDir, d, 'results.json'))
      .filter(existsSync)
  : [];
if (!caches.length) {
  console.error('test-durations: no vitest results in node_modules/.vite/vitest (run the suite first)');
  process.exit(1);
}
const out = {};
for (const f of caches) {
  for (const [key, r] of JSON.parse(readFileSync(f, 'utf8')).results) out[key] = Math.round(r.duration);
}
const sorted = Object.fromEntries(Object.entries(out).sort((a, b) => b[1] - a[1] || a[0].localeCompare(b[0])));
writeFileSync(join(root, 'test/support/durations.json'), JSON.stringify(sorted, null, 1) + '\n');
console.log(`test-durations: ${Object.keys(sorted).length} files written to test/support/durations.json`);
