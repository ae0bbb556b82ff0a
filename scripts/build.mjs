// Bundles each executable's entry (src/bin/*.ts) into one file in dist/, so a
// per-exec start resolves few modules. etcd3 (gRPC, only when a datastore asks
// for that transport) and yaml stay external and are loaded lazily.
//
// The per-exec plugins (PER_EXEC) are bundled as CommonJS into
// dist/<name>.bundle.cjs and started by dist/<name>.cjs, which compiles the
// bundle with a V8 code cache (src/bin/common/code-cache.cjs; docs/performance.md,
// "Per-exec start-up"); dist/<name>.mjs stays as an entry for whatever names it.
import { build } from 'esbuild';
import { createHash } from 'node:crypto';
import { spawnSync } from 'node:child_process';
import { readdirSync, mkdirSync, chmodSync, copyFileSync, readFileSync, writeFileSync, rmSync } from 'node:fs';
import { join, basename, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const PER_EXEC = ['netplugin', 'netplugin-ipam'];
const entries = readdirSync(join(root, 'src/bin')).filter((f) => f.endsWith('.ts'));
mkdirSync(join(root, 'dist'), { recursive: true });
const common = {
  bundle: true,
  platform: 'node',
  target: 'node20',
  sourcemap: 'linked',
  legalComments: 'none',
  external: ['etcd3', 'node-gyp-build', 'yaml'],
  logLevel: 'warning',
};

async function buildEsm(f) {
  const out = join(root, 'dist', basename(f, '.ts') + '.mjs');
  await build({
    ...common,
    entryPoints: [join(root, 'src/bin', f)],
    outfile: out,
    format: 'esm',
    banner: {
      js:
        "#!/usr/bin/env node\nimport { createRequire as __cr } from 'node:module'; const require = " +
        '__cr(import.meta.url);',
    },
  });
  chmodSync(out, 0o755);
}

async function buildPerExec(f) {
  const name = basename(f, '.ts');
  const bundle = join(root, 'dist', `${name}.bundle.cjs`);
  await build({
    ...common,
    entryPoints: [join(root, 'src/bin', f)],
    outfile: bundle,
    format: 'cjs',
    // import.meta.url locates the package (package.json, the addon) from the running file.
    define: { 'import.meta.url': '__np_import_meta_url' },
    // import() of externals (etcd3, yaml, node:http) becomes require(): code compiled by vm.Script
    // has no dynamic import callback on Node 20, least of all when it comes from a code cache.
    supported: { 'dynamic-import': false },
    banner: { js: "'use strict';\nvar __np_import_meta_url = require('node:url').pathToFileURL(__filename).href;" },
  });
  // The build id the code cache is keyed on (code-cache.cjs): a hash of the bundle's content.
  const text = readFileSync(bundle, 'utf8');
  const left = /[^\w$.]import\(/.exec(text);
  if (left)
    throw new Error(
      `build: ${bundle} still has an import() (code-cache.cjs cannot run it): ...` +
        `${text.slice(left.index - 60, left.index + 40)}...`,
    );
  const id = createHash('sha256').update(text).digest('hex').slice(0, 32);
  writeFileSync(bundle, `${text}//# netplugin-build ${id}\n`);
  writeFileSync(
    join(root, 'dist', `${name}.cjs`),
    [
      '#!/usr/bin/env node',
      `// ${name}: the per-exec entry (the shim's fallback and install-cni's launcher run this).`,
      "'use strict';",
      `require('./code-cache.cjs').runBundle(require('node:path').join(__dirname, '${name}.bundle.cjs'));`,
      '',
    ].join('\n'),
  );
  writeFileSync(
    join(root, 'dist', `${name}.mjs`),
    [
      '#!/usr/bin/env node',
      `// ${name} as an ES module entry: the same program as ${name}.cjs, for whatever still names this file.`,
      "import { createRequire } from 'node:module';",
      `createRequire(import.meta.url)('./${name}.cjs');`,
      '',
    ].join('\n'),
  );
  chmodSync(join(root, 'dist', `${name}.cjs`), 0o755);
  chmodSync(join(root, 'dist', `${name}.mjs`), 0o755);
}

copyFileSync(join(root, 'src/bin/common/code-cache.cjs'), join(root, 'dist/code-cache.cjs'));
await Promise.all(entries.map((f) => (PER_EXEC.includes(basename(f, '.ts')) ? buildPerExec(f) : buildEsm(f))));
// CommonJS entries (src/bin/*.cjs: netplugin-node's launcher) are copied as they are.
for (const f of readdirSync(join(root, 'src/bin')).filter((f) => f.endsWith('.cjs'))) {
  const out = join(root, 'dist', f);
  copyFileSync(join(root, 'src/bin', f), out);
  chmodSync(out, 0o755);
}
// netplugin-flows' web UI: plain static files, served from dist/flows-ui (no CDN, no build step).
rmSync(join(root, 'dist/flows-ui'), { recursive: true, force: true });
mkdirSync(join(root, 'dist/flows-ui'), { recursive: true });
for (const f of readdirSync(join(root, 'src/flows/ui')))
  copyFileSync(join(root, 'src/flows/ui', f), join(root, 'dist/flows-ui', f));
// A first code cache for each per-exec bundle, made by one run that compiles
// the top level (a VERSION command); the first ADD and the first DEL that
// succeed on a node add what they compile (code-cache.cjs).
for (const name of PER_EXEC) {
  const cache = join(root, 'dist', `${name}.bundle.cjs.cache`);
  rmSync(cache, { force: true });
  const r = spawnSync(process.execPath, [join(root, 'dist', `${name}.cjs`)], {
    env: { PATH: process.env.PATH ?? '', CNI_COMMAND: 'VERSION' },
    encoding: 'utf8',
  });
  if (r.status !== 0) throw new Error(`build: dist/${name}.cjs VERSION failed (${r.status}): ${r.stdout}${r.stderr}`);
}
