// The CLI's injected IO, its user-facing error, and a small flag parser.
// Everything goes through CtlIO so tests run commands in-process.
import { readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import type { Datastore } from '../datastore/types.js';
import { closest } from '../config/netconf.js';
import { CniError, DatastoreError } from '../errors.js';

/** What the datastore factory (openDatastore) takes. */
export type { DatastoreConfig } from '../datastore/index.js';
import type { DatastoreConfig } from '../datastore/index.js';

export interface CtlIO {
  env: Record<string, string | undefined>;
  /** Content for `-f -`; a function is called only when a command reads stdin. Absent or undefined: none. */
  stdin?: string | Buffer | (() => Promise<string | Buffer>) | undefined;
  stdout: (chunk: string) => void;
  stderr: (chunk: string) => void;
  /** Datastore factory; default: src/datastore/index.ts, loaded lazily. */
  openDatastore?: (conf: DatastoreConfig) => Promise<Datastore>;
  /** Directory relative paths are resolved against (default process.cwd()). */
  cwd?: string;
  /** Package root (holds dist/, build/, prebuilds/); default: derived from the running bundle. */
  packageDir?: string;
  /** Node executable written into launchers and the fallback file; default process.execPath. */
  nodePath?: string;
  /** Aborted to end a command that runs until interrupted (get -w): SIGINT in the binary. */
  signal?: AbortSignal | undefined;
  /** stderr is a terminal: long operations show a progress line there. */
  stderrIsTTY?: boolean;
  /**
   * install-cni: whether this process runs in a Kubernetes pod; default: detected (src/ctl/install-cni.ts detectPod).
   */
  inPod?: boolean;
}

/** A failure the user caused or can fix: printed as one line, exit code 1. */
export class CtlError extends Error {
  override name = 'CtlError';
  constructor(
    message: string,
    /** Exit code (1 unless stated). */
    public readonly exitCode = 1,
  ) {
    super(message);
  }
}

/** A file the user named could not be read (or parsed): `cannot read <what>: no such file` or the reason. */
export function cannotRead(what: string, e: unknown): CtlError {
  return new CtlError(
    `cannot read ${what}: ${(e as NodeJS.ErrnoException).code === 'ENOENT' ? 'no such file' : (e as Error).message}`,
  );
}

/**
 * A JSON file netpluginctl wrote earlier (report, export, saved owner references), relative to the caller's directory;
 * its shape is the caller's to check.
 */
export function readJsonFile(io: { cwd?: string | undefined }, file: string, what: string): unknown {
  try {
    return JSON.parse(readFileSync(resolve(io.cwd ?? process.cwd(), file), 'utf8'));
  } catch (e) {
    throw cannotRead(`${what} ${file}`, e);
  }
}

type FlagType = 'bool' | 'string' | 'list';
export interface FlagSpec {
  /** Long name without dashes, e.g. 'output'. */
  name: string;
  short?: string;
  type: FlagType;
}

interface ParsedArgs {
  positional: string[];
  flags: Record<string, string | boolean | string[] | undefined>;
}

/**
 * Parses `--name value`, `--name=value`, `-x value`, `-xvalue` (short string
 * flags), `--bool`, `--bool=false`, `--no-bool`. `--` ends flag parsing.
 */
export function parseFlags(argv: string[], specs: FlagSpec[], command: string): ParsedArgs {
  const byLong = new Map(specs.map((s) => [s.name, s]));
  const byShort = new Map(specs.filter((s) => s.short).map((s) => [s.short!, s]));
  const out: ParsedArgs = { positional: [], flags: {} };
  const set = (spec: FlagSpec, value: string | boolean) => {
    if (spec.type === 'list') {
      const cur = (out.flags[spec.name] as string[] | undefined) ?? [];
      cur.push(String(value));
      out.flags[spec.name] = cur;
    } else out.flags[spec.name] = value;
  };
  const unknown = (tok: string) =>
    new CtlError(
      `unknown flag ${tok} for '${command}'${suggestFlag(
        tok,
        specs.map((s) => `--${s.name}`),
      )}; run 'netpluginctl ${command} --help' for the accepted flags`,
    );
  for (let i = 0; i < argv.length; i++) {
    const tok = argv[i]!;
    if (tok === '--') {
      out.positional.push(...argv.slice(i + 1));
      break;
    }
    if (tok.startsWith('--')) {
      const eq = tok.indexOf('=');
      let name = eq >= 0 ? tok.slice(2, eq) : tok.slice(2);
      let inline: string | undefined = eq >= 0 ? tok.slice(eq + 1) : undefined;
      let spec = byLong.get(name);
      if (!spec && name.startsWith('no-') && byLong.get(name.slice(3))?.type === 'bool' && inline === undefined) {
        spec = byLong.get(name.slice(3))!;
        inline = 'false';
        name = spec.name;
      }
      if (!spec) throw unknown(tok);
      if (spec.type === 'bool') {
        if (inline === undefined) set(spec, true);
        else if (inline === 'true' || inline === 'false') set(spec, inline === 'true');
        else throw new CtlError(`flag --${name} takes true or false, not ${JSON.stringify(inline)}`);
        continue;
      }
      if (inline === undefined) {
        if (i + 1 >= argv.length) throw new CtlError(`flag --${name} needs a value`);
        inline = argv[++i]!;
      }
      set(spec, inline);
      continue;
    }
    if (tok.startsWith('-') && tok.length > 1) {
      const spec = byShort.get(tok[1]!);
      if (!spec) throw unknown(tok);
      if (spec.type === 'bool') {
        if (tok.length > 2) throw unknown(tok);
        set(spec, true);
        continue;
      }
      let v = tok.slice(2);
      if (v.startsWith('=')) v = v.slice(1);
      if (v === '') {
        if (i + 1 >= argv.length) throw new CtlError(`flag -${spec.short} (--${spec.name}) needs a value`);
        v = argv[++i]!;
      }
      set(spec, v);
      continue;
    }
    out.positional.push(tok);
  }
  return out;
}

export function str(p: ParsedArgs, name: string): string | undefined {
  const v = p.flags[name];
  return typeof v === 'string' ? v : undefined;
}
export function bool(p: ParsedArgs, name: string): boolean | undefined {
  const v = p.flags[name];
  return typeof v === 'boolean' ? v : undefined;
}
export function list(p: ParsedArgs, name: string): string[] {
  const v = p.flags[name];
  return Array.isArray(v) ? v : [];
}

export async function readStdin(io: CtlIO): Promise<string> {
  const s = typeof io.stdin === 'function' ? await io.stdin() : io.stdin;
  if (s === undefined) throw new CtlError('-f - reads from stdin, but no input was given');
  return typeof s === 'string' ? s : s.toString('utf8');
}

/** Left-aligned columns separated by three spaces, like kubectl. */
export function table(header: string[], rows: string[][]): string {
  const all = [header, ...rows];
  const widths = header.map((_, i) => Math.max(...all.map((r) => (r[i] ?? '').length)));
  return (
    all
      .map((r) =>
        r
          .map((c, i) => (i === r.length - 1 ? c : c.padEnd(widths[i]!)))
          .join('   ')
          .trimEnd(),
      )
      .join('\n') + '\n'
  );
}

/**
 * A progress line on stderr for long loops (ipam check/release over many
 * handles), only on a terminal and for 20 items or more; redrawn at most every
 * 100 ms; done() clears it.
 */
export function progressLine(
  io: CtlIO,
  label: string,
): { tick: (done: number, total: number) => void; done: () => void } {
  if (!io.stderrIsTTY) return { tick: () => {}, done: () => {} };
  let shown = false;
  let last = 0;
  return {
    tick: (d, t) => {
      if (t < 20) return;
      const now = Date.now();
      if (d !== t && now - last < 100) return;
      last = now;
      shown = true;
      io.stderr(`\r\x1b[K${label} ${d}/${t}`);
    },
    done: () => {
      if (shown) io.stderr('\r\x1b[K');
      shown = false;
    },
  };
}

/** "; did you mean --x?" for the known flag closest to `given` (the netconf's typo rule). */
export function suggestFlag(given: string, known: string[]): string {
  const name = given.split('=')[0]!;
  const best = closest(name, known);
  return best && best !== name ? `; did you mean ${best}?` : '';
}

/** What a command group's module gets from netpluginctl's session (src/ctl/session.ts). */
export interface CtlSession {
  /** --config, given before the command or among its flags. */
  configFile: string | undefined;
  /** --kubeconfig and --context, before the command or among its flags. */
  kubeconfig?: string | undefined;
  context?: string | undefined;
  /** --as / --as-group (Kubernetes impersonation). */
  as?: string | undefined;
  asGroups?: string[];
  config(): DatastoreConfig | undefined;
  /** For reads. */
  datastore(): Promise<Datastore>;
  /** For writes: refused when this client is older than the cluster. */
  writable(): Promise<Datastore>;
  /** A Kubernetes API client from the same settings. */
  kube(): Promise<import('../k8s/client.js').KubeClient>;
}

/** The flags every command accepts. */
const GLOBAL_FLAGS: FlagSpec[] = [
  { name: 'config', short: 'c', type: 'string' },
  { name: 'kubeconfig', type: 'string' },
  { name: 'context', type: 'string' },
  { name: 'as', type: 'string' },
  { name: 'as-group', type: 'list' },
  { name: 'help', short: 'h', type: 'bool' },
];

/** Parses a command's flags plus the global ones; a --config among them applies to the session. */
export function parseCommand(
  argv: string[],
  specs: FlagSpec[],
  command: string,
  s?: {
    configFile: string | undefined;
    kubeconfig?: string | undefined;
    context?: string | undefined;
    as?: string | undefined;
    asGroups?: string[];
  },
): ParsedArgs {
  const p = parseFlags(argv, [...GLOBAL_FLAGS, ...specs], command);
  const c = str(p, 'config');
  if (c && s) s.configFile = c;
  // --kubeconfig/--context among a command's flags (install-cni's --kubeconfig is the plugin's, its own flag).
  const k = str(p, 'kubeconfig');
  if (k && s && !specs.some((f) => f.name === 'kubeconfig')) s.kubeconfig = k;
  const ctx = str(p, 'context');
  if (ctx && s) s.context = ctx;
  const as = str(p, 'as');
  if (as && s) s.as = as;
  if (s && list(p, 'as-group').length) s.asGroups = [...(s.asGroups ?? []), ...list(p, 'as-group')];
  return p;
}

/** One netpluginctl command: its arguments after the command word. */
export type CtlCommand = (rest: string[], io: CtlIO, s: CtlSession) => Promise<number>;

/** A command group's module: its commands and the help topics it documents ('ipam', 'ipam show', ...). */
export interface CtlGroup {
  commands: Record<string, CtlCommand>;
  help: Record<string, string>;
}

/** Prints a command's usage text; the exit code of `--help`. */
export function printHelp(io: CtlIO, text: string): number {
  io.stdout(text);
  return 0;
}

export function noPositional(p: ParsedArgs, cmd: string): void {
  if (p.positional.length) throw new CtlError(`'${cmd}' takes no arguments; got ${p.positional.join(' ')}`);
}

/** --dry-run (kubectl's --dry-run=client is accepted too, see src/ctl/index.ts): check everything, write nothing. */
export const DRY_RUN: FlagSpec = { name: 'dry-run', type: 'bool' };
export function dryRun(p: ParsedArgs): boolean {
  return bool(p, 'dry-run') === true;
}

/** The one line an error prints as (text or the JSON log line's msg). */
export function errorLine(e: unknown): string {
  if (e instanceof CtlError) return e.message;
  if (e instanceof DatastoreError) {
    switch (e.kind) {
      case 'Unavailable':
        return `cannot reach the datastore: ${e.message} (check ETCD_ENDPOINTS / KUBECONFIG or --config)`;
      case 'Unauthorized':
        return `the datastore refused our credentials: ${e.message}`;
      default:
        return e.message;
    }
  }
  if (e instanceof CniError) return e.message;
  return e instanceof Error ? e.message : String(e);
}
