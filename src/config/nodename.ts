// Which node this plugin runs on: the name the node agent registered with.
import { readFileSync } from 'node:fs';
import { hostname as osHostname } from 'node:os';
import { CniError, ErrorCodes } from '../errors.js';
import { DEFAULT_NODENAME_FILE } from './fields.js';

interface NodenameDeps {
  readFile?: (path: string) => string;
  hostname?: () => string;
}

/**
 * `nodename` from the netconf; else the file the node agent writes (so a node
 * registered under a name other than its hostname works without per-node
 * netconfs); else the lower-cased hostname, because Kubernetes node names are
 * lower-case DNS names even where the kernel hostname is not.
 */
export function resolveNodename(
  conf: { nodename?: string | undefined; nodename_file?: string | undefined },
  deps: NodenameDeps = {},
): string {
  if (conf.nodename) return conf.nodename;
  const file = conf.nodename_file || DEFAULT_NODENAME_FILE;
  const read = deps.readFile ?? ((p: string) => readFileSync(p, 'utf8'));
  try {
    const name = read(file).trim();
    if (name !== '') return name;
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    // Absent means "the agent has not written it (yet)": fall back. Anything
    // else (EACCES, EISDIR) is a broken install we should not paper over.
    if (code !== 'ENOENT' && code !== 'ENOTDIR') {
      throw new CniError(
        ErrorCodes.IOFailure,
        `nodename_file ${file}: cannot read it (${code ?? (e as Error).message}); fix its permissions or set ` +
          `"nodename" in the netconf`,
      );
    }
  }
  return (deps.hostname ?? osHostname)().toLowerCase();
}
