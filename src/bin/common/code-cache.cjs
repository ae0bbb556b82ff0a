'use strict';
// Runs a per-exec bundle (dist/<name>.bundle.cjs) with a V8 code cache kept
// beside it (<bundle>.cache), so a per-exec plugin start does not parse and
// compile half a megabyte of JavaScript again on every pod ADD and DEL. Node 20
// has no module compile cache, so the bundle is compiled here with vm.Script
// and its cachedData, and run with the arguments Node's CommonJS loader passes
// a module.
//
// A cache is used only when its header names the build of the bundle (the
// build id the build writes as the bundle's last line): V8 itself checks only
// the source's length, its own version and its flags, and bytecode made for
// another source of the same length would run the wrong code. A missing,
// stale, corrupt or rejected cache costs one ordinary compile, never a failure.
//
// V8 compiles most functions on their first call, and a cache holds what the
// process had compiled when it was made. So the cache is written at exit, and
// rewritten once by each CNI command it has not seen succeed yet (the header
// lists them): the build's cache (one VERSION run) holds the top level, the
// first ADD adds what an ADD runs, the first DEL what a DEL adds to that. Writes
// are best effort: a read-only package just keeps the cache it has.
const fs = require('node:fs');
const path = require('node:path');
const vm = require('node:vm');
const Module = require('node:module');

const MAGIC = 'netplugin-code-cache 1';
const BUILD_ID = /\n\/\/# netplugin-build ([0-9a-f]{16,64})\s*$/;

/** The build id on a bundle's last line, or undefined. */
function buildId(source) {
  const m = BUILD_ID.exec(source.slice(-120));
  return m ? m[1] : undefined;
}

/** The cache's V8 data and the commands it has seen, when its header names `id`; undefined otherwise. */
function readCache(file, id) {
  let buf;
  try {
    buf = fs.readFileSync(file);
  } catch {
    return undefined;
  }
  const nl = buf.indexOf(10);
  if (nl < 0 || nl > 300) return undefined;
  const [magic, version, cacheId, seen = ''] = buf.toString('latin1', 0, nl).split(' ');
  if (`${magic} ${version}` !== MAGIC || cacheId !== id) return undefined;
  return { data: buf.subarray(nl + 1), seen: seen ? seen.split(',') : [] };
}

/** Writes the cache atomically (temp file + rename): a concurrent start reads the old one or the new one. */
function writeCache(file, id, seen, data) {
  const tmp = `${file}.tmp-${process.pid}`;
  try {
    fs.writeFileSync(tmp, Buffer.concat([Buffer.from(`${MAGIC} ${id} ${seen.join(',')}\n`, 'latin1'), data]), {
      mode: 0o644,
    });
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

function writable(dir) {
  try {
    fs.accessSync(dir, fs.constants.W_OK);
    return true;
  } catch {
    return false;
  }
}

/**
 * Compiles and runs `bundle` as a CommonJS module. Returns how the cache was
 * used: 'hit' (accepted), or why not: 'missing', 'stale' (another build, or
 * not a cache at all) or 'rejected' (by V8: another Node version or V8 flags).
 * NETPLUGIN_CODE_CACHE_DEBUG=1 reports it, and each cache write, on stderr.
 */
function runBundle(bundle) {
  const debug = process.env.NETPLUGIN_CODE_CACHE_DEBUG
    ? (m) => process.stderr.write(`netplugin code cache: ${m} (${bundle}.cache)\n`)
    : undefined;
  const source = fs.readFileSync(bundle, 'utf8');
  const id = buildId(source);
  const cacheFile = `${bundle}.cache`;
  const cache = id !== undefined ? readCache(cacheFile, id) : undefined;
  // Module.wrap gives the same wrapper (and so the same line numbers) as require().
  const script = new vm.Script(Module.wrap(source), { filename: bundle, cachedData: cache?.data });
  const state =
    cache === undefined
      ? fs.existsSync(cacheFile)
        ? 'stale'
        : 'missing'
      : script.cachedDataRejected
        ? 'rejected'
        : 'hit';
  debug?.(state);
  // Only a plain command name goes into the header (the runtime sets CNI_COMMAND; anything else trains nothing).
  const command = process.env.CNI_COMMAND ?? 'none';
  const known = /^[A-Za-z]{1,16}$/.test(command);
  const seen = state === 'hit' ? cache.seen : [];
  const train = known && !seen.includes(command);
  if (id !== undefined && (state !== 'hit' || train) && writable(path.dirname(bundle))) {
    // At exit, so the cache also holds the functions this command compiled. A failed
    // command (bad netconf, datastore down) stopped early: it replaces a cache that was
    // not usable, but does not count as the command's training.
    process.once('exit', (code) => {
      if (state === 'hit' && code !== 0) return;
      const list = train && code === 0 ? [...seen, command] : seen;
      const ok = writeCache(cacheFile, id, list, script.createCachedData());
      debug?.(ok ? `written for ${list.join(',') || 'nothing yet'}` : 'not written');
    });
  }
  const mod = { exports: {} };
  const fn = script.runInThisContext({ displayErrors: true });
  fn.call(mod.exports, mod.exports, Module.createRequire(bundle), mod, bundle, path.dirname(bundle));
  return state;
}

module.exports = { runBundle, buildId, readCache, writeCache, MAGIC };
