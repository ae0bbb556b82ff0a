// The command line of the long-running entries (netplugin-node,
// netplugin-kube-controllers), read one way: a flag parse error exits 2 with
// the usage, --help and --version print and exit 0. Not an entry itself:
// scripts/build.mjs bundles only src/bin/*.ts.

export interface EntryCli {
  program: string;
  usage: string;
}

/** `program: msg` and the usage on stderr, exit status 2. */
export function usageError(cli: EntryCli, msg: string): never {
  process.stderr.write(`${cli.program}: ${msg}\n${cli.usage}`);
  process.exit(2);
}

/**
 * The flags `parse` returns (node:util parseArgs' values); undefined when
 * --help or --version was answered (the caller returns). `version` is called
 * only for --version.
 */
export async function parseEntryFlags<V extends { help?: boolean | undefined; version?: boolean | undefined }>(
  cli: EntryCli,
  version: () => string | Promise<string>,
  parse: () => V,
): Promise<V | undefined> {
  let values: V;
  try {
    values = parse();
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
