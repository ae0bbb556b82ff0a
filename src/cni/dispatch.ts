// The CNI dispatcher: one invocation over injected IO. Used by the per-exec
// entry (src/cni/exec.ts) and by the agent (requests from its socket), so it
// never touches process.* and never exits.
import { CniError, ErrorCodes } from '../errors.js';
import { createLogger, loggerOptionsFromConf, type AppLogger, type LogContext } from '../log/logger.js';
import { parseCommand, parseEnv } from './env.js';
import { errorResult, toCniError } from './errors.js';
import { formatResult, parseResult } from './result.js';
import { SUPPORTED_VERSIONS, type CniAttachment, type CniContext, type CniIO, type PluginSpec } from './types.js';
import type { Logger } from '../log/types.js';
import type { LogThrottle } from '../log/throttle.js';
import { mark } from '../observe/timeline.js';
import { HIGHEST_VERSION, assertCommandAllowed, compareVersions, negotiateVersion, parseSemver } from './version.js';

/**
 * Largest network configuration accepted on stdin (documented in
 * docs/security.md): real ones are a few KiB, a GC's attachment list of
 * thousands of pods stays far below it.
 */
export const MAX_STDIN = 1 << 20;
/**
 * Deepest JSON nesting accepted: configurations nest a handful of levels; thousands only exhaust the stack of whatever
 * walks them.
 */
export const MAX_NESTING = 64;

/** Nesting depth of JSON text (brackets outside strings); stops counting past `limit`. */
function nestingDepth(text: string, limit: number): number {
  let depth = 0;
  let max = 0;
  let inString = false;
  for (let i = 0; i < text.length; i++) {
    const ch = text.charCodeAt(i);
    if (inString) {
      if (ch === 0x5c) i++;
      else if (ch === 0x22) inString = false;
    } else if (ch === 0x22) inString = true;
    else if (ch === 0x7b || ch === 0x5b) {
      if (++depth > max && (max = depth) > limit) return max;
    } else if (ch === 0x7d || ch === 0x5d) depth--;
  }
  return max;
}

const utf8 = new TextDecoder('utf-8', { fatal: true });

function decodeStdin(stdin: string | Buffer): { raw?: Record<string, unknown>; error?: CniError } {
  const size = typeof stdin === 'string' ? Buffer.byteLength(stdin) : stdin.length;
  if (size > MAX_STDIN) {
    return {
      error: new CniError(
        ErrorCodes.DecodeFailure,
        `network configuration on stdin is larger than ${MAX_STDIN} bytes (the limit); a netconf is a few KiB`,
      ),
    };
  }
  let text: string;
  try {
    text = typeof stdin === 'string' ? stdin : utf8.decode(stdin);
  } catch {
    return {
      error: new CniError(
        ErrorCodes.DecodeFailure,
        'network configuration on stdin is not valid UTF-8; write the netconf as UTF-8 JSON',
      ),
    };
  }
  if (text.trim() === '') return {};
  if (nestingDepth(text, MAX_NESTING) > MAX_NESTING) {
    return {
      error: new CniError(
        ErrorCodes.DecodeFailure,
        `network configuration on stdin nests deeper than ${MAX_NESTING} levels; no netconf field needs that`,
      ),
    };
  }
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch (e) {
    return {
      error: new CniError(
        ErrorCodes.DecodeFailure,
        `network configuration on stdin is not valid JSON: ${(e as Error).message}`,
      ),
    };
  }
  if (typeof v !== 'object' || v === null || Array.isArray(v)) {
    return {
      error: new CniError(
        ErrorCodes.DecodeFailure,
        `network configuration on stdin must be a JSON object, got ${Array.isArray(v) ? 'an array' : typeof v}`,
      ),
    };
  }
  return { raw: v as Record<string, unknown> };
}

/**
 * VERSION: `{cniVersion, supportedVersions}`. The runtime sends
 * `{"cniVersion": <its newest>}` (possibly nothing). A version newer than ours
 * is answered in our newest, since answering is how it learns what we speak;
 * an older one we cannot speak (0.1.0, 0.2.0) is code 1.
 */
function versionAnswer(raw: Record<string, unknown> | undefined): Record<string, unknown> {
  let v: string = HIGHEST_VERSION;
  if (raw && (raw['cniVersion'] !== undefined || raw['cniVersions'] !== undefined)) {
    try {
      v = negotiateVersion(raw);
    } catch (e) {
      const asked = raw['cniVersion'];
      const newer = typeof asked === 'string' && parseSemver(asked) && compareVersions(asked, HIGHEST_VERSION) > 0;
      if (!newer) throw e;
    }
  }
  return { cniVersion: v, supportedVersions: [...SUPPORTED_VERSIONS] };
}

/** GC's list of attachments still in use; libcni also sends the older spelling `cni.dev/attachments`. */
export function validAttachments(rawConf: Record<string, unknown>): CniAttachment[] {
  const key = rawConf['cni.dev/valid-attachments'] !== undefined ? 'cni.dev/valid-attachments' : 'cni.dev/attachments';
  const list = rawConf[key];
  if (list === undefined || list === null) return [];
  const bad = (what: string) =>
    new CniError(ErrorCodes.InvalidNetworkConfig, `${key}${what}; expected [{"containerID": "...", "ifname": "..."}]`);
  if (!Array.isArray(list)) throw bad(`: got ${typeof list}`);
  return list.map((a, i) => {
    if (typeof a !== 'object' || a === null || typeof a.containerID !== 'string' || typeof a.ifname !== 'string') {
      throw bad(`[${i}]: got ${JSON.stringify(a)}`);
    }
    return { containerID: a.containerID, ifname: a.ifname };
  });
}

function defaultLog(
  rawConf: Record<string, unknown>,
  context: LogContext,
  io: CniIO,
  throttle: LogThrottle | undefined,
): AppLogger {
  return createLogger({ ...loggerOptionsFromConf(rawConf), context, stderr: io.stderr, throttle });
}

/** The handler of each command that answers nothing on success. */
const QUIET_HANDLER = { DEL: 'del', CHECK: 'check', STATUS: 'status', GC: 'gc' } as const;

/** A resident plugin's netconfs as parsed, by command and stdin (PluginSpec.resident). */
interface Parsed {
  raw: Record<string, unknown>;
  conf: unknown;
}
const parsedByPlugin = new WeakMap<object, Map<string, Parsed>>();
/** Distinct netconfs remembered per plugin: a node has a handful (one per network and version). */
const MAX_PARSED = 16;
/** Larger stdins (a GC's list of attachments) are parsed each time, never kept. */
const MAX_PARSED_STDIN = 64 << 10;

function deepFreeze<T>(v: T): T {
  if (typeof v === 'object' && v !== null && !Object.isFrozen(v)) {
    Object.freeze(v);
    for (const x of Object.values(v)) deepFreeze(x);
  }
  return v;
}

/** Runs one CNI invocation; returns the exit code. Output goes only through io. */
export async function dispatch<Conf, Rt>(io: CniIO, plugin: PluginSpec<Conf, Rt>): Promise<number> {
  // Errors are printed in the version the runtime asked for, so it can decode them.
  let outVersion: string = HIGHEST_VERSION;
  let log: Logger | undefined;
  let ownLog: AppLogger | undefined;
  const started = Date.now();
  try {
    const command = parseCommand(io.env);
    // A resident plugin sees the same netconf for every pod: decoded and validated once (the
    // schema is most of a request's CPU before the datastore), then shared, frozen, by the
    // requests with the very same stdin and command.
    let memo: Map<string, Parsed> | undefined;
    let memoKey: string | undefined;
    if (plugin.resident && io.stdin.length <= MAX_PARSED_STDIN) {
      memo = parsedByPlugin.get(plugin) ?? parsedByPlugin.set(plugin, new Map()).get(plugin)!;
      memoKey = `${command}\0${typeof io.stdin === 'string' ? io.stdin : io.stdin.toString('latin1')}`;
    }
    const hit = memoKey !== undefined ? memo!.get(memoKey) : undefined;
    const { raw, error: decodeError } = hit ? { raw: hit.raw, error: undefined } : decodeStdin(io.stdin);
    const asked = raw?.['cniVersion'];
    if (typeof asked === 'string' && asked !== '') outVersion = asked;

    if (command === 'VERSION') {
      if (decodeError) throw decodeError;
      io.stdout(JSON.stringify(versionAnswer(raw)) + '\n');
      return 0;
    }

    const env = parseEnv(io.env);
    if (decodeError) throw decodeError;
    if (!raw)
      throw new CniError(
        ErrorCodes.DecodeFailure,
        `no network configuration on stdin; ${command} needs the netconf JSON on standard input`,
      );
    const cniVersion = negotiateVersion(raw);
    outVersion = cniVersion;

    const logContext = {
      containerId: env.containerId,
      podNamespace: env.args.K8S_POD_NAMESPACE,
      podName: env.args.K8S_POD_NAME,
    };
    if (plugin.createLog) log = plugin.createLog(raw, logContext, io);
    else log = ownLog = defaultLog(raw, logContext, io, plugin.logThrottle);
    log.debug(`${plugin.name} ${command}`, {
      cniVersion,
      netns: env.netns || undefined,
      ifname: env.ifname || undefined,
    });

    assertCommandAllowed(command, cniVersion);
    const handlers = await plugin.load();
    let conf: Conf;
    if (hit) conf = hit.conf as Conf;
    else {
      conf = handlers.parse(raw, command);
      if (memo && memoKey !== undefined) {
        if (memo.size >= MAX_PARSED) memo.delete(memo.keys().next().value!);
        memo.set(memoKey, { raw: deepFreeze(raw), conf: deepFreeze(conf) });
      }
    }
    mark('netconf parsed');
    const prevResult =
      raw['prevResult'] !== undefined && raw['prevResult'] !== null
        ? parseResult(raw['prevResult'], 'prevResult', cniVersion)
        : undefined;
    const ctx: CniContext<Conf, Rt> = {
      command,
      cniVersion,
      containerId: env.containerId,
      netns: env.netns,
      ifname: env.ifname,
      args: env.args,
      path: env.path,
      rawConf: raw,
      conf,
      env: io.env,
      log,
      // Undefined only for a plugin without a runtime (the PluginSpec type requires one otherwise).
      runtime: plugin.runtime as Rt,
      ...(prevResult ? { prevResult } : {}),
    };
    if (command === 'ADD') {
      const result = await handlers.add(ctx);
      io.stdout(JSON.stringify(formatResult(result, cniVersion)) + '\n');
    } else {
      // The other commands print nothing when they succeed.
      await handlers[QUIET_HANDLER[command]](ctx);
    }
    log.debug(`${plugin.name} ${command} done`, { ms: Date.now() - started });
    return 0;
  } catch (e) {
    const err = toCniError(e);
    const l = log ?? (ownLog = createLogger({ stderr: io.stderr }));
    if (err.internal) {
      l.error(`${plugin.name}: unexpected failure`, { stack: e instanceof Error ? e.stack : String(e) });
    } else {
      l.error(`${plugin.name}: ${err.message}`, { code: err.code, ...(err.details ? { details: err.details } : {}) });
    }
    io.stdout(JSON.stringify(errorResult(outVersion, err)) + '\n');
    return 1;
  } finally {
    ownLog?.close();
  }
}
