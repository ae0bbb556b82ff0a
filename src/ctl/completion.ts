// `netpluginctl completion bash|zsh|fish`: a completion script that asks
// netpluginctl itself what to offer (`netpluginctl __complete WORDS...`, the
// words typed so far, the last one being completed). The answer comes from
// the help texts (every command and subcommand the overview lists, every flag
// its usage names), the kinds, and the datastore for resource names, so the
// scripts never fall behind the commands.
import { bool, CtlError, parseFlags, printHelp, type CtlCommand, type CtlSession } from './io.js';
import { CTL_KINDS, resolveKind } from './kinds.js';
import { NAMESPACED_KINDS } from '../model/resources.js';
import { isStagedKind } from '../model/staged.js';

export const COMPLETION_HELP = {
  completion: `Usage: netpluginctl completion bash|zsh|fish

Prints a completion script that completes commands, subcommands, flags, kinds and the names
of resources in the datastore (asking netpluginctl, with the same --config or environment):
  bash:  source <(netpluginctl completion bash)
  zsh:   source <(netpluginctl completion zsh)     (after compinit)
  fish:  netpluginctl completion fish | source
`,
} satisfies Record<string, string>;

const SHELLS = ['bash', 'zsh', 'fish'];

/** Commands whose first argument is a kind (and the second a resource name). */
const KIND_COMMANDS = new Set(['get', 'describe', 'delete', 'label', 'patch', 'edit']);

/** Values of flags that take one of a few. */
const FLAG_VALUES: Record<string, string[]> = {
  '-o': ['yaml', 'json', 'wide', 'name', 'jsonpath=', 'custom-columns='],
  '--output': ['yaml', 'json', 'wide', 'name', 'jsonpath=', 'custom-columns='],
  '--log-format': ['text', 'json'],
  '--type': ['merge', 'json'],
};

/** Flags that take a value (the next word is that value, not a positional). */
const VALUE_FLAGS = new Set([
  '-o',
  '--output',
  '-n',
  '--namespace',
  '-l',
  '--selector',
  '-f',
  '--filename',
  '-p',
  '--patch',
  '--config',
  '-c',
  '--kubeconfig',
  '--context',
  '--log-format',
  '--type',
  '--sort-by',
  '--as',
  '--as-group',
  '--ip',
  '--name',
  '--cidr',
  '--node',
  '--log',
  '--metrics-url',
  '-d',
  '--dir',
  '--to',
  '--from-report',
]);

/** The command tree the overview lists: "ipam show ..." -> ipam: [show]. */
function commandTree(topHelp: string): Map<string, string[]> {
  const tree = new Map<string, string[]>();
  const section = topHelp.split(/\nCommands:\n/)[1]?.split(/\n\n/)[0] ?? '';
  for (const line of section.split('\n')) {
    const m = /^ {2}([a-z][a-z-]*)(?: ([a-z][a-z-]*)(?=\s|$))?/.exec(line);
    if (!m) continue;
    const subs = tree.get(m[1]!) ?? [];
    if (m[2] && !subs.includes(m[2])) subs.push(m[2]);
    tree.set(m[1]!, subs);
  }
  return tree;
}

/** Every flag a usage text names. */
function flagsIn(text: string | undefined): string[] {
  if (!text) return [];
  return [...new Set([...text.matchAll(/(?<![\w-])(--?[a-zA-Z][a-zA-Z-]*)/g)].map((m) => m[1]!))];
}

interface CompletionSource {
  topHelp: string;
  /** Help topics: 'get', 'ipam show', ... (also the lazily loaded groups'). */
  help: () => Promise<Record<string, string>>;
}

/** The candidates for the last word of `words` (the words after "netpluginctl"). */
async function complete(words: string[], src: CompletionSource, s: CtlSession): Promise<string[]> {
  const cur = words[words.length - 1] ?? '';
  const before = words.slice(0, -1);
  const tree = commandTree(src.topHelp);
  const positional: string[] = [];
  let namespace: string | undefined;
  for (let i = 0; i < before.length; i++) {
    const w = before[i]!;
    if (w.startsWith('-')) {
      const [name, inline] = w.split('=', 2) as [string, string | undefined];
      if (VALUE_FLAGS.has(name) && inline === undefined) {
        const v = before[++i];
        if ((name === '-n' || name === '--namespace') && v) namespace = v;
        if ((name === '--config' || name === '-c') && v) s.configFile = v;
        if (name === '--kubeconfig' && v) s.kubeconfig = v;
        if (name === '--context' && v) s.context = v;
      }
      continue;
    }
    positional.push(w);
  }
  const prev = before[before.length - 1];
  const pick = (c: string[]) => c.filter((x) => x.startsWith(cur)).sort();
  if (prev && VALUE_FLAGS.has(prev)) return pick(FLAG_VALUES[prev] ?? []);
  const [cmd, sub] = positional;
  const help = await src.help();
  if (cur.startsWith('-')) {
    const topic = cmd && sub && help[`${cmd} ${sub}`] ? `${cmd} ${sub}` : (cmd ?? '');
    return pick([
      ...new Set([
        ...flagsIn(help[topic] ?? help[cmd ?? '']),
        '--config',
        '--kubeconfig',
        '--context',
        '--log-format',
        '--help',
      ]),
    ]);
  }
  if (!cmd) return pick([...tree.keys(), 'help']);
  if (cmd === 'help') return positional.length === 1 ? pick([...tree.keys()]) : [];
  if (cmd === 'completion') return positional.length === 1 ? pick(SHELLS) : [];
  const subs = tree.get(cmd) ?? [];
  if (subs.length && positional.length === 1) return pick(subs);
  // policy promote KIND/NAME: the staged kinds, then their objects.
  if (cmd === 'policy' && sub === 'promote' && positional.length === 2) {
    if (cur.includes('/')) return pick(await names(cur.split('/')[0]!, namespace, s, true));
    return pick(CTL_KINDS.filter((k) => isStagedKind(k.kind)).flatMap((k) => [k.kind.toLowerCase(), ...k.aliases]));
  }
  if (!KIND_COMMANDS.has(cmd)) return [];
  const kinds = [...new Set(CTL_KINDS.flatMap((k) => [k.kind.toLowerCase(), ...k.aliases]))];
  if (positional.length === 1) {
    if (cur.includes('/')) return pick(await names(cur.split('/')[0]!, namespace, s, true));
    return pick(kinds);
  }
  if (positional[1]!.includes('/')) return pick(await names(cur.split('/')[0]!, namespace, s, true));
  return pick(await names(positional[1]!, namespace, s, false));
}

/** Resource names of a kind from the datastore; nothing when it cannot be read (completion never fails loudly). */
async function names(
  kind: string,
  namespace: string | undefined,
  s: CtlSession,
  qualified: boolean,
): Promise<string[]> {
  try {
    const info = resolveKind(kind);
    const ds = await s.datastore();
    const ns = NAMESPACED_KINDS.has(info.kind) ? (namespace ?? 'default') : undefined;
    const items = (await ds.list(info.kind, { namespace: ns, timeoutMs: 3000 })).items;
    return items.map((r) => (qualified ? `${kind}/${r.metadata.name}` : r.metadata.name));
  } catch {
    return [];
  }
}

/** `completion SHELL` and the hidden `__complete WORDS...` the scripts call. */
export function completionCommands(src: CompletionSource): Record<string, CtlCommand> {
  return {
    completion: async (rest, io) => {
      const p = parseFlags(rest, [{ name: 'help', short: 'h', type: 'bool' }], 'completion');
      const shell = p.positional[0];
      if (!shell || bool(p, 'help')) return printHelp(io, COMPLETION_HELP.completion);
      io.stdout(completionScript(shell));
      return 0;
    },
    __complete: async (rest, io, s) => {
      for (const c of await complete(rest, src, s)) io.stdout(`${c}\n`);
      return 0;
    },
  };
}

/** The script for one shell; each asks `netpluginctl __complete` with the words typed so far. */
function completionScript(shell: string): string {
  if (shell === 'bash') {
    return `# netpluginctl bash completion: source <(netpluginctl completion bash)
_netpluginctl() {
  local IFS=$'\\n'
  COMPREPLY=($(netpluginctl __complete "\${COMP_WORDS[@]:1:COMP_CWORD}" 2>/dev/null))
  # A value to type on (jsonpath=, custom-columns=): no space after it.
  if [[ \${#COMPREPLY[@]} -eq 1 && "\${COMPREPLY[0]}" == *= ]]; then compopt -o nospace 2>/dev/null; fi
}
complete -o default -F _netpluginctl netpluginctl
`;
  }
  if (shell === 'zsh') {
    return `#compdef netpluginctl
# netpluginctl zsh completion: source <(netpluginctl completion zsh) (after compinit)
_netpluginctl() {
  local -a cands
  cands=("\${(@f)$(netpluginctl __complete "\${(@)words[2,CURRENT]}" 2>/dev/null)}")
  cands=(\${cands:#})
  compadd -Q -- $cands
}
if [[ "$funcstack[1]" == "_netpluginctl" ]]; then _netpluginctl "$@"; else compdef _netpluginctl netpluginctl; fi
`;
  }
  if (shell === 'fish') {
    return `# netpluginctl fish completion: netpluginctl completion fish | source
function __netpluginctl_complete
    set -l words (commandline -opc)
    set -e words[1]
    netpluginctl __complete $words (commandline -ct) 2>/dev/null
end
complete -c netpluginctl -f -a '(__netpluginctl_complete)'
`;
  }
  throw new CtlError(`completion ${JSON.stringify(shell)}: use ${SHELLS.join(', ')}`);
}
