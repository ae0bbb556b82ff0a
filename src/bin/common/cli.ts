// The command line of the long-running entries (netplugin-node, netplugin-kube-controllers,
// netplugin-flows), read one way: a flag parse error exits 2 with the usage, --help and --version
// print and exit 0, the logging and listener flags are checked alike. Not an entry itself:
// scripts/build.mjs bundles only src/bin/*.ts.
import { parseArgs } from 'node:util';
import { createLogger, LOG_FORMATS, normalizeLevel, type LogFormat, type LogThrottle } from '../../log/index.js';
import type { Logger } from '../../log/types.js';
import { parseListenAddr } from '../../observe/health.js';

export interface EntryCli {
  program: string;
  usage: string;
}

/** `program: msg` and the usage on stderr, exit status 2. */
export function usageError(cli: EntryCli, msg: string): never {
  process.stderr.write(`${cli.program}: ${msg}\n${cli.usage}`);
  process.exit(2);
}

/** String flags by name, for parseArgs. */
export function stringFlags<K extends string>(...names: K[]): Record<K, { type: 'string' }> {
  return Object.fromEntries(names.map((n) => [n, { type: 'string' }])) as Record<K, { type: 'string' }>;
}

const HELP_VERSION = { help: { type: 'boolean', short: 'h' }, version: { type: 'boolean' } } as const;

type FlagOptions = Record<string, { type: 'string' | 'boolean'; short?: string }>;
/** What parseArgs returns for `O`: a string or a boolean per flag given. */
type FlagValues<O extends FlagOptions> = { [K in keyof O]?: O[K] extends { type: 'boolean' } ? boolean : string };

/**
 * The flags of `options` (plus --help and --version); undefined when --help or --version was
 * answered (the caller returns). `version` is called only for --version.
 */
export async function parseEntryFlags<O extends FlagOptions>(
  cli: EntryCli,
  version: () => string | Promise<string>,
  options: O,
): Promise<FlagValues<O> | undefined> {
  let values: FlagValues<O & typeof HELP_VERSION>;
  try {
    values = parseArgs({ options: { ...options, ...HELP_VERSION }, allowPositionals: false }).values as never;
  } catch (e) {
    usageError(cli, (e as Error).message);
  }
  if (values.help) {
    process.stdout.write(cli.usage);
    return undefined;
  }
  if (values.version) {
    process.stdout.write(`${cli.program} ${await version()}\n`);
    return undefined;
  }
  return values;
}

interface LoggingFlags {
  'log-level'?: string | undefined;
  'log-format'?: string | undefined;
}

/** --log-level and --log-format checked, and the entry's logger on stderr. */
export function entryLogger(cli: EntryCli, values: LoggingFlags, throttle?: LogThrottle): Logger {
  const level = values['log-level'] ?? 'INFO';
  if (!normalizeLevel(level)) usageError(cli, `--log-level '${level}' is not one of ERROR, WARNING, INFO, DEBUG`);
  const format = values['log-format'] ?? 'text';
  if (!(LOG_FORMATS as readonly string[]).includes(format))
    usageError(cli, `--log-format '${format}' is not one of ${LOG_FORMATS.join(', ')}`);
  return createLogger({
    level,
    format: format as LogFormat,
    stderr: (s) => process.stderr.write(s),
    context: { component: cli.program },
    ...(throttle ? { throttle } : {}),
  });
}

/** Each listener flag given (`off` where `offAllowed`) is an address to listen on, else a usage error. */
export function checkListenFlags(cli: EntryCli, flags: Record<string, string | undefined>, offAllowed = false): void {
  for (const [flag, addr] of Object.entries(flags)) {
    if (addr === undefined || (offAllowed && addr === 'off')) continue;
    try {
      parseListenAddr(addr);
    } catch (e) {
      usageError(cli, `--${flag}: ${(e as Error).message}`);
    }
  }
}

/** Logs `program: what` with the error and exits 1: a part of the entry that cannot start. */
export function fatalExit(cli: EntryCli, log: Logger): (what: string, e: unknown) => never {
  return (what, e) => {
    log.error(`${cli.program}: ${what}`, { error: e instanceof Error ? e.message : String(e) });
    process.exit(1);
  };
}
