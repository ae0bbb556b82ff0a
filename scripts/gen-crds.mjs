// Writes deploy/crds/*.yaml from the zod schemas (src/datastore/crds.ts).
// `--check` exits 1 when a file is stale instead of writing it.
import { build } from 'esbuild';
import { readFileSync, writeFileSync } from 'node:fs';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const res = await build({
  entryPoints: [join(root, 'src/datastore/crds.ts')],
  bundle: true,
  platform: 'node',
  format: 'esm',
  write: false,
  external: ['yaml', 'zod'],
  logLevel: 'warning',
});
// Imported from a file next to node_modules so its externals resolve.
const tmp = join(root, 'node_modules/.gen-crds.mjs');
writeFileSync(tmp, res.outputFiles[0].text);
const { renderCrds } = await import(tmp);
const files = await renderCrds();
let stale = 0;
for (const [name, text] of Object.entries(files)) {
  const target = join(root, 'deploy/crds', name);
  if (process.argv.includes('--check')) {
    let cur = '';
    try {
      cur = readFileSync(target, 'utf8');
    } catch {}
    if (cur !== text) {
      console.error(`deploy/crds/${name} is stale: run node scripts/gen-crds.mjs`);
      stale++;
    }
  } else {
    writeFileSync(target, text);
  }
}
if (stale) process.exit(1);
if (!process.argv.includes('--check')) console.log(`wrote ${Object.keys(files).length} CRDs to deploy/crds/`);
