// Runs a TypeScript bench body: Node 20 cannot run the sources directly, so
// the entry is bundled with esbuild into node_modules/.cache and imported.
import { build } from 'esbuild';
import { mkdirSync, rmSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '../..');

/** Bundles `entry` (a path under the repository) and imports the bundle. */
export async function importTs(entry) {
  const cache = join(root, 'node_modules/.cache');
  mkdirSync(cache, { recursive: true });
  const outfile = join(cache, `${basename(entry, '.ts')}-${process.pid}.mjs`);
  await build({
    entryPoints: [join(root, entry)],
    bundle: true,
    platform: 'node',
    format: 'esm',
    target: 'node20',
    outfile,
    external: ['etcd3', 'node-gyp-build', 'esbuild'],
    logLevel: 'error',
    banner: { js: "import { createRequire as __cr } from 'node:module'; const require = __cr(import.meta.url);" },
  });
  try {
    return await import(pathToFileURL(outfile).href);
  } finally {
    rmSync(outfile, { force: true });
  }
}
