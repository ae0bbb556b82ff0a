'use strict';
// Runs a per-exec bundle (dist/<name>.bundle.cjs) with a V8 code cache kept
// beside it (<bundle>.cache), so a per-exec plugin start does not parse and
// compile half a megabyte of JavaScript again on every pod ADD and DEL. Node 20
// has no module compile cache, so the bundle is compiled here with vm.Script
// and its cachedData, and run with the same arguments Node's CommonJS loader
// passes a module.
//
// A cache is used only when its header names the build of the bundle (the
// build id the build writes as the bundle's last line): V8 itself checks only
// the source's length, its own version and its flags, and bytecode for another
// source of the same length would run wrong code. A missing, stale, corrupt or
// rejected cache costs one ordinary compile, never a failure; the process then
// writes a fresh cache (best effort: a read-only package just stays uncached).
// The cache holds what the process compiled up to its exit, so the functions a
// pod ADD runs are in it, not only the top level.
const fs = require('node:fs');
const path = require('node:path');
const vm = require('node:vm');
const Module = require('node:module');

const MAGIC = 'netplugin-code-cache 1 ';
const BUILD_ID = /\n\/\/# netplugin-build ([0-9a-f]{16,64})\s*$/;

/** The build id on a bundle's last line, or undefined. */
function buildId(source) {
  const m = BUILD_ID.exec(source.slice(-120));
  return m ? m[1] : undefined;
}

/** The cache's V8 data when its header names `id`; undefined otherwise. */
function readCache(file, id) {
  let buf;
  try {
    buf = fs.readFileSync(file);
  } catch {
    return undefined;
  }
  const nl = buf.indexOf(10);
  if (nl < 0 || nl > 200) return undefined;
  const head = buf.toString('latin1', 0, nl);
  if (!head.startsWith(MAGIC) || head.slice(MAGIC.length) !== id) return undefined;
  return buf.subarray(nl + 1);
}

/** Writes the cache atomically (temp file + rename): a concurrent start reads the old one or the new one. */
function writeCache(file, id, data) {
  const tmp = `${file}.tmp-${process.pid}`;
  try {
    fs.writeFileSync(tmp, Buffer.concat([Buffer.from(`${MAGIC}${id}\n`, 'latin1'), data]), { mode: 0o644 });
    fs.renameSync(tmp, file);
    return true;
  } catch {
    try {
      fs.unlinkSync(tmp);
    } catch {
      // nothing was written
    }
    return false;
  }
}

/**
 * Compiles and runs `bundle` as a CommonJS module. Returns how the cache was
 * used: 'hit' (accepted), or why it was not ('missing', 'stale' for another
 * build or a broken header, 'rejected' by V8), for tests and NETPLUGIN_CODE_CACHE_DEBUG.
 */
function runBundle(bundle) {
  const source = fs.readFileSync(bundle, 'utf8');
  const id = buildId(source);
  const cacheFile = `${bundle}.cache`;
  const exists = id !== undefined && fs.existsSync(cacheFile);
  const cachedData = id !== undefined ? readCache(cacheFile, id) : undefined;
  // Module.wrap gives the same wrapper (and so the same line numbers) as require().
  // No import() in the bundle (the build turns them into require()): Node 20 gives code compiled
  // here no dynamic import callback once it comes from a code cache.
  const script = new vm.Script(Module.wrap(source), { filename: bundle, cachedData });
  const state = cachedData === undefined ? (exists ? 'stale' : 'missing') : script.cachedDataRejected ? 'rejected' : 'hit';
  if (process.env.NETPLUGIN_CODE_CACHE_DEBUG) process.stderr.write(`netplugin code cache: ${state} (${cacheFile})\n`);
  if (state !== 'hit' && id !== undefined) {
    // At exit, so the cache also holds the functions this command compiled lazily.
    process.once('exit', () => {
      const ok = writeCache(cacheFile, id, script.createCachedData());
      if (process.env.NETPLUGIN_CODE_CACHE_DEBUG) process.stderr.write(`netplugin code cache: ${ok ? 'written' : 'not written'} (${cacheFile})\n`);
    });
  }
  const mod = { exports: {} };
  const fn = script.runInThisContext({ displayErrors: true });
  fn.call(mod.exports, mod.exports, Module.createRequire(bundle), mod, bundle, path.dirname(bundle));
  return state;
}

module.exports = { runBundle, buildId, readCache, writeCache, MAGIC };
