// `netpluginctl completion bash|zsh`: a shell completion script for the
// commands, the kinds of the commands that take one, and the common flags.
import { CtlError, printHelp, type CtlCommand } from './io.js';
import { CTL_KINDS } from './kinds.js';

export const COMPLETION_HELP = {
  completion: `Usage: netpluginctl completion bash|zsh

Prints a completion script: source <(netpluginctl completion bash)
`,
} satisfies Record<string, string>;

/** The flags completed after a dash. */
const COMPLETION_FLAGS = ['--config', '--kubeconfig', '--context', '--log-format', '--help', '--version', '-o', '-n', '-A', '-l', '-f', '--no-headers', '--dry-run', '--force', '--overwrite', '--type', '-p'];

/** The completion command; `commands` lists the command words it completes. */
export function completionCommand(commands: () => string[]): CtlCommand {
  return async (rest, io) => {
    const shell = rest[0];
    if (!shell || shell === '--help' || shell === '-h') return printHelp(io, COMPLETION_HELP.completion);
    io.stdout(completionScript(shell, commands(), COMPLETION_FLAGS));
    return 0;
  };
}

/** Shell completion: commands, then kinds for the commands that take one, then flags. */
export function completionScript(shell: string, commands: string[], flags: string[]): string {
  const kinds = [...new Set(CTL_KINDS.flatMap((k) => [k.kind.toLowerCase(), ...k.aliases]))].sort();
  const cmds = commands.join(' ');
  const kindCmds = 'get|delete|label|patch';
  const fl = flags.join(' ');
  if (shell === 'bash') {
    return `# netpluginctl bash completion: source <(netpluginctl completion bash)
_netpluginctl() {
  local cur=\${COMP_WORDS[COMP_CWORD]} cmd="" i
  for ((i = 1; i < COMP_CWORD; i++)); do
    case "\${COMP_WORDS[i]}" in -*) ;; *) cmd="\${COMP_WORDS[i]}"; break ;; esac
  done
  if [[ "$cur" == -* ]]; then COMPREPLY=($(compgen -W "${fl}" -- "$cur")); return; fi
  if [[ -z "$cmd" ]]; then COMPREPLY=($(compgen -W "${cmds}" -- "$cur")); return; fi
  case "$cmd" in
    ${kindCmds}) COMPREPLY=($(compgen -W "${kinds.join(' ')}" -- "$cur")) ;;
    ipam) COMPREPLY=($(compgen -W "show check release" -- "$cur")) ;;
    datastore) COMPREPLY=($(compgen -W "init ready" -- "$cur")) ;;
    completion) COMPREPLY=($(compgen -W "bash zsh" -- "$cur")) ;;
  esac
}
complete -F _netpluginctl netpluginctl
`;
  }
  if (shell === 'zsh') {
    return `#compdef netpluginctl
# netpluginctl zsh completion: source <(netpluginctl completion zsh)
_netpluginctl() {
  local -a cmds kinds flags
  cmds=(${cmds})
  kinds=(${kinds.join(' ')})
  flags=(${fl})
  if [[ "$words[CURRENT]" == -* ]]; then compadd -- $flags; return; fi
  if (( CURRENT == 2 )); then compadd -- $cmds; return; fi
  case "$words[2]" in
    ${kindCmds}) compadd -- $kinds ;;
    ipam) compadd -- show check release ;;
    datastore) compadd -- init ready ;;
    completion) compadd -- bash zsh ;;
  esac
}
if [[ "$funcstack[1]" == "_netpluginctl" ]]; then _netpluginctl "$@"; else compdef _netpluginctl netpluginctl; fi
`;
  }
  throw new CtlError(`completion ${JSON.stringify(shell)}: use bash or zsh`);
}
