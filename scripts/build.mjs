// Bundles each executable's entry (src/bin/*.ts) into one file in dist/, so a
// per-exec start resolves few modules. Heavy clients (etcd3, the Kubernetes
// client) stay external and are loaded lazily, only when a command needs them.
import { build } from 'esbuild';
import { readdirSync, mkdirSync, chmodSync } from 'node:fs';
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
      external: ['etcd3', '@kubernetes/client-node', 'node-gyp-build', 'yaml'],
      banner: {
        js: "#!/usr/bin/env node\nimport { createRequire as __cr } from 'node:module'; const require = __cr(import.meta.url);",
      },
      logLevel: 'warning',
    });
    chmodSync(out, 0o755);
  }),
);
