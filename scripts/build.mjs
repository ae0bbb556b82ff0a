// Bundles each executable's entry (src/bin/*.ts) into one file in dist/, so a
// per-exec start resolves few modules. etcd3 (gRPC, only when a datastore asks
// for that transport) and yaml stay external and are loaded lazily.
import { build } from 'esbuild';
import { readdirSync, mkdirSync, chmodSync, copyFileSync } from 'node:fs';
import { join, basename, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const entries = readdirSync(join(root, 'src/bin')).filter((f) => f.endsWith('.ts'));
mkdirSync(join(root, 'dist'), { recursive: true });
await Promise.all(
  entries.map(async (f) => {
    const out = join(root, 'dist', basename(f, '.ts') + '.mjs');
    await build({
      entryPoints: [join(root, 'src/bin', f)],
      outfile: out,
      bundle: true,
      platform: 'node',
      target: 'node20',
      format: 'esm',
      sourcemap: 'linked',
      legalComments: 'none',
      external: ['etcd3', 'node-gyp-build', 'yaml'],
      banner: {
        js: "#!/usr/bin/env node\nimport { createRequire as __cr } from 'node:module'; const require = __cr(import.meta.url);",
      },
      logLevel: 'warning',
    });
    chmodSync(out, 0o755);
  }),
);
// CommonJS entries (src/bin/*.cjs: netplugin-node's launcher) are copied as they are.
for (const f of readdirSync(join(root, 'src/bin')).filter((f) => f.endsWith('.cjs'))) {
  const out = join(root, 'dist', f);
  copyFileSync(join(root, 'src/bin', f), out);
  chmodSync(out, 0o755);
}
