// Writes docs/netconf.md from the field table in src/config/fields.ts.
// `--check` exits 1 when the file is stale instead of writing it.
import { build } from 'esbuild';
import { readFileSync, writeFileSync, mkdirSync } from 'node:fs';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const res = await build({
  entryPoints: [join(root, 'src/config/doc.ts')],
  bundle: true,
  platform: 'node',
  format: 'esm',
  write: false,
  logLevel: 'warning',
});
const mod = await import('data:text/javascript;base64,' + Buffer.from(res.outputFiles[0].text).toString('base64'));
const text = mod.renderNetconfDoc();
const target = join(root, 'docs/netconf.md');
if (process.argv.includes('--check')) {
  let cur = '';
  try {
    cur = readFileSync(target, 'utf8');
  } catch {}
  if (cur !== text) {
    console.error('docs/netconf.md is stale: run node scripts/gen-netconf-doc.mjs');
    process.exit(1);
  }
} else {
  mkdirSync(dirname(target), { recursive: true });
  writeFileSync(target, text);
  console.log('wrote docs/netconf.md');
}
