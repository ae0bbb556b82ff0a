// netpluginctl: the operator's command line. `runCtl` takes argv (without
// node and script) and injected IO and returns the exit code, so tests run
// every command in-process; src/bin/netpluginctl.ts wires it to the process.
//
// This file is the dispatcher only: global flags, the command table and its
// help topics, errors. Each command group lives in its own file with its
// usage text (resources.ts, edit.ts, ipam.ts, policy-cmd.ts, datastore.ts, cni.ts,
// version-cmd.ts, installation.ts, upgrade.ts, completion.ts); the datastore
// settings and clients are session.ts. A new group exports a CtlGroup and is
// added to GROUPS below.
import { CtlError, errorLine, suggestFlag, type CtlCommand, type CtlGroup, type CtlIO } from './io.js';
import { NETPLUGIN_VERSION } from './version.js';
import { DATASTORE_HELP, Session } from './session.js';
import { resourcesGroup } from './resources.js';
import { editGroup } from './edit.js';
import { ipamGroup } from './ipam.js';
import { datastoreGroup } from './datastore.js';
import { versionGroup } from './version-cmd.js';
import { cniGroup } from './cni.js';
import { policyGroup } from './policy-cmd.js';
import { COMPLETION_HELP, completionCommands } from './completion.js';

/** The flags every command takes (for the "did you mean" of an unknown one). */
const GLOBAL_FLAGS = [
  '--config',
  '--kubeconfig',
  '--context',
  '--log-format',
  '--as',
  '--as-group',
  '--help',
  '--version',
];

export { initDatastore } from './datastore-init.js';

const TOP_HELP = `netpluginctl ${NETPLUGIN_VERSION}: manage netplugin resources, IPAM and installation.

Usage: netpluginctl [--config FILE] [--kubeconfig PATH] [--context NAME] [--as USER]
                   [--log-format text|json] <command> [flags]

Commands:
  apply -f FILE|DIR|-        create or update resources (YAML or JSON, one or many documents)
  create -f FILE|DIR|-       create resources; fails if one exists
  replace -f FILE|DIR|-      update existing resources
  get <kind> [name...]       show resources (also KIND/NAME; -o yaml|json|wide|name, -n NS, -A, -l)
  describe <kind> [name...]  show resources for a person, with where mirrored ones come from
  delete <kind> <name...>    delete resources (or -f FILE|DIR)
  validate -f FILE|DIR|-     check manifests without a datastore
  label <kind> <name> k=v    set (k=v) or remove (k-) labels
  patch <kind> <name> -p J   apply a JSON merge patch (or --type json: RFC 6902) to spec, labels or annotations
  edit <kind> <name>         edit a resource in $KUBE_EDITOR / $EDITOR (kubectl's validation and conflict loop)
  completion bash|zsh|fish   print a shell completion script (commands, flags, kinds, resource names)
  ipam show                  pool usage (--show-blocks, --show-borrowed, --show-configuration, --ip ADDR, -o json|yaml)
  ipam check                 find leaked addresses (-o report.json)
  ipam release               release addresses (--ip ADDR, --from-report FILE, --dry-run: "would release")
  ipam configure             IPAMConfig: --strictaffinity, --max-blocks-per-host, --autoallocateblocks
  ipam split N --name POOL   split a disabled pool into N (a power of 2) equal pools
  node diags                 one tar.gz of this node's state for a bug report (nft, routes, datastore view...)
  policy explain POD         policies selecting a pod (hep/NAME: a host endpoint); with --peer/--port,
                             the deciding rule (--staged)
  policy promote KIND/NAME   make a staged policy the enforced one (snp, sgnp, sknp; --dry-run)
  datastore init             mark the datastore initialised (ClusterInformation)
  datastore ready            set datastoreReady (--set=true|false)
  datastore migrate          move from etcd to the Kubernetes datastore (lock, export, import, unlock)
  installation render        the conflist, IP pools and agent settings an Installation implies
  installation apply         reconcile an Installation onto this node and the datastore (--dry-run, --watch)
  flows                      flows from the flow-log aggregator (--follow, --action, --namespace, --pod, --policy)
  upgrade check              what an upgrade to this release needs (exit 1 when something blocks it)
  upgrade owner-refs         save, strip and restore owner references to netplugin.org/v3 objects
  upgrade auto-hep           migrate all-interfaces host endpoints to automatic ones
  upgrade finish             remove allow-all-upgrade and record the new cluster version
  version                    client and cluster version (--short)
  install-cni                install the plugin binaries and the CNI conflist on this node
  uninstall-cni              remove them

Kinds: ippool, ipamconfig, node, clusterinformation, hostendpoint,
kubecontrollersconfiguration, profile, networkpolicy, globalnetworkpolicy, workloadendpoint,
stagednetworkpolicy, stagedglobalnetworkpolicy, stagedkubernetesnetworkpolicy
(singular, plural or short names: pool, hep, kcc, np, gnp, wep, snp, sgnp, sknp...).

${DATASTORE_HELP}

Run 'netpluginctl <command> --help' for a command's flags. Set NETPLUGIN_DEBUG=1 for stack traces.
`;

/** Groups loaded only when their command runs (large, and rarely used). */
const lazyGroups: Record<string, CtlCommand> = {
  installation: async (rest, io, s) => (await import('./installation.js')).cmdInstallation(rest, io, s),
  upgrade: async (rest, io, s) => (await import('./upgrade.js')).cmdUpgrade(rest, io, s),
  node: async (rest, io, s) => (await import('./node-diags.js')).nodeGroup.commands.node!(rest, io, s),
  flows: async (rest, io, s) => (await import('./flows.js')).flowsCommand(rest, io, s),
};

const GROUPS: CtlGroup[] = [resourcesGroup, ipamGroup, policyGroup, datastoreGroup, versionGroup, cniGroup, editGroup];

/**
 * Help topics: '' (the overview), each command, and 'group sub' for
 * subcommands; `netpluginctl help TOPIC` and the completion's command list
 * read them. A null prototype, so a topic is only ever an own entry.
 */
const HELP: Record<string, string> = Object.assign(
  Object.create(null) as Record<string, string>,
  { '': TOP_HELP },
  ...GROUPS.map((g) => g.help),
  COMPLETION_HELP,
);

/** Command word -> command; a null prototype, so 'constructor' or '__proto__' is an unknown command. */
const COMMANDS: Record<string, CtlCommand> = Object.assign(
  Object.create(null) as Record<string, CtlCommand>,
  ...GROUPS.map((g) => g.commands),
  lazyGroups,
  completionCommands({
    topHelp: TOP_HELP,
    // The lazily loaded groups' topics too: completion is rare, and must know every flag.
    help: async () => ({
      ...HELP,
      ...(await import('./installation.js')).INSTALLATION_HELP,
      ...(await import('./upgrade.js')).UPGRADE_HELP,
      ...(await import('./node-diags.js')).NODE_HELP,
      ...(await import('./flows.js')).FLOWS_HELP,
      'datastore migrate': (await import('./migrate.js')).MIGRATE_HELP,
    }),
  }),
);

function help(io: CtlIO, topic: string): number {
  io.stdout(HELP[topic] ?? TOP_HELP);
  return 0;
}

async function dispatch(cmd: string, rest: string[], io: CtlIO, s: Session): Promise<number> {
  const run = COMMANDS[cmd];
  if (!run)
    throw new CtlError(
      `unknown command ${JSON.stringify(cmd)}${suggestFlag(
        cmd,
        Object.keys(COMMANDS).filter((c) => !c.startsWith('__')),
      )}; run 'netpluginctl --help'`,
    );
  return run(rest, io, s);
}

export async function runCtl(argv: string[], io: CtlIO): Promise<number> {
  // The command is the first positional word; global flags may come before it.
  let i = 0;
  let configFile: string | undefined;
  const globals: { kubeconfig?: string; context?: string; 'log-format'?: string; as?: string } = {};
  const asGroups: string[] = [];
  while (i < argv.length && argv[i]!.startsWith('-')) {
    const a = argv[i]!;
    if (a === '-h' || a === '--help') return help(io, '');
    if (a === '-c' || a === '--config') {
      configFile = argv[i + 1];
      if (configFile === undefined) return fail(io, new CtlError('--config needs a file'));
      i += 2;
      continue;
    }
    if (a.startsWith('--config=')) {
      configFile = a.slice('--config='.length);
      i++;
      continue;
    }
    if (a === '--version') {
      argv = ['version'];
      i = 0;
      break;
    }
    const g = /^--(kubeconfig|context|log-format|as|as-group)(?:=(.*))?$/.exec(a);
    if (g) {
      const v = g[2] ?? argv[i + 1];
      if (v === undefined) return fail(io, new CtlError(`--${g[1]} needs a value`));
      if (g[1] === 'as-group') asGroups.push(v);
      else globals[g[1] as keyof typeof globals] = v;
      i += g[2] === undefined ? 2 : 1;
      continue;
    }
    return fail(io, new CtlError(`unknown flag ${a}${suggestFlag(a, GLOBAL_FLAGS)}; run 'netpluginctl --help'`));
  }
  const after = argv.slice(i + 1);
  const logFormat =
    globals['log-format'] ??
    pairFlag(after, '--log-format') ??
    after.find((a) => a.startsWith('--log-format='))?.slice('--log-format='.length);
  if (logFormat !== undefined && logFormat !== 'text' && logFormat !== 'json') {
    return fail(io, new CtlError(`--log-format ${JSON.stringify(logFormat)} is not text or json`));
  }
  const json = logFormat === 'json';
  // --log-format json: every error and warning line a command prints (a name not found among
  // several, a failed document of many) is a JSON line too, not only the final error.
  if (json) io = { ...io, stderr: jsonStderr(io.stderr) };
  const cmd = argv[i];
  const rest = stripPair(argv.slice(i + 1), '--log-format');
  if (!cmd || cmd === 'help') return help(io, rest.join(' '));
  const session = new Session(io, configFile);
  session.kubeconfig = globals.kubeconfig;
  session.context = globals.context;
  session.as = globals.as;
  session.asGroups = asGroups;
  try {
    return await dispatch(cmd, normalizeDryRun(rest), io, session);
  } catch (e) {
    return fail(io, e, json);
  } finally {
    await session.close();
  }
}

function pairFlag(argv: string[], flag: string): string | undefined {
  const j = argv.indexOf(flag);
  return j >= 0 ? argv[j + 1] : undefined;
}
/** --log-format is accepted anywhere; commands never see it. */
function stripPair(argv: string[], flag: string): string[] {
  const out: string[] = [];
  for (let j = 0; j < argv.length; j++) {
    if (argv[j] === flag) {
      j++;
      continue;
    }
    if (argv[j]!.startsWith(`${flag}=`)) continue;
    out.push(argv[j]!);
  }
  return out;
}

/** Turns the `error: ...` and `warning: ...` lines written to stderr into JSON log lines. */
function jsonStderr(write: (chunk: string) => void): (chunk: string) => void {
  return (chunk) => {
    // Progress lines (a terminal's \r redraws) and already-JSON lines pass through.
    if (chunk.startsWith('\r') || chunk.startsWith('{')) return write(chunk);
    const out = chunk
      .split('\n')
      .filter((l, idx, all) => l !== '' || idx < all.length - 1)
      .map((l) => {
        const m = /^(error|warning): (.*)$/.exec(l);
        return JSON.stringify({
          time: new Date().toISOString(),
          level: m?.[1] === 'warning' ? 'WARNING' : m ? 'ERROR' : 'INFO',
          msg: m ? m[2] : l,
        });
      });
    write(out.join('\n') + '\n');
  };
}

function fail(io: CtlIO, e: unknown, json = false): number {
  if (json) {
    io.stderr(
      JSON.stringify({
        time: new Date().toISOString(),
        level: 'ERROR',
        msg: errorLine(e),
        ...(e instanceof CtlError ? { exitCode: e.exitCode } : {}),
      }) + '\n',
    );
    return e instanceof CtlError ? e.exitCode : 1;
  }
  io.stderr(`error: ${errorLine(e)}\n`);
  if (io.env.NETPLUGIN_DEBUG === '1' && e instanceof Error && e.stack) io.stderr(e.stack + '\n');
  return e instanceof CtlError ? e.exitCode : 1;
}

/** kubectl's --dry-run=client|none|server spelled as our boolean flag. */
function normalizeDryRun(argv: string[]): string[] {
  return argv.map((a) => {
    if (a === '--dry-run=client') return '--dry-run';
    if (a === '--dry-run=none') return '--dry-run=false';
    if (a === '--dry-run=server')
      throw new CtlError(
        '--dry-run=server is not supported: netpluginctl checks locally; use --dry-run (or --dry-run=client)',
      );
    return a;
  });
}
