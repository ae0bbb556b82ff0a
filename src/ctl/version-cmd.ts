// `netpluginctl version`: the client's version and, with a datastore, the
// cluster's (the version rules are src/ctl/version.ts).
import { DatastoreError } from '../errors.js';
import { bool, parseCommand, printHelp, str, type CtlCommand, type CtlGroup } from './io.js';
import { compareVersions, NETPLUGIN_VERSION } from './version.js';

const VERSION_HELP = {
  version: `Usage: netpluginctl version [-o json] [--short]

Prints the client version and, when a datastore is configured, the cluster version
(ClusterInformation netpluginVersion) and cluster type. --short prints the two versions only,
one line each ("Client Version: 3.32.0", "Cluster Version: 3.32.0"), as kubectl and calicoctl do.
A client older than the cluster warns here and refuses every write (apply, delete, ipam release, datastore init...).
`,
} satisfies Record<string, string>;

const runVersion: CtlCommand = async (rest, io, s) => {
  const p = parseCommand(
    rest,
    [
      { name: 'output', short: 'o', type: 'string' },
      { name: 'short', type: 'bool' },
    ],
    'version',
    s,
  );
  if (bool(p, 'help')) return printHelp(io, VERSION_HELP.version);
  const json = str(p, 'output') === 'json';
  const conf = s.config();
  const out: {
    clientVersion: string;
    clusterVersion?: string;
    clusterType?: string;
    datastoreType?: string | undefined;
    clientOlderThanCluster?: boolean;
  } = { clientVersion: NETPLUGIN_VERSION };
  let err: unknown;
  if (conf) {
    out.datastoreType = conf.datastore_type;
    try {
      const ds = await s.datastore();
      const ci = await ds.get('ClusterInformation', 'default');
      out.clusterVersion = ci.spec.netpluginVersion ?? 'unknown';
      if (ci.spec.clusterType) out.clusterType = ci.spec.clusterType;
      if ((compareVersions(NETPLUGIN_VERSION, out.clusterVersion) ?? 0) < 0) out.clientOlderThanCluster = true;
    } catch (e) {
      if (DatastoreError.is(e, 'NotFound'))
        out.clusterVersion = 'unknown (datastore not initialised: run netpluginctl datastore init)';
      else err = e;
    }
  }
  if (json) io.stdout(JSON.stringify(out, null, 2) + '\n');
  else if (bool(p, 'short')) {
    io.stdout(`Client Version: ${out.clientVersion}\n`);
    if (out.clusterVersion) io.stdout(`Cluster Version: ${out.clusterVersion}\n`);
  } else {
    io.stdout(`Client Version:    ${out.clientVersion}\n`);
    if (out.clusterVersion) io.stdout(`Cluster Version:   ${out.clusterVersion}\n`);
    if (out.clusterType) io.stdout(`Cluster Type:      ${out.clusterType}\n`);
  }
  if (out.clientOlderThanCluster)
    io.stderr(
      `warning: this client (${out.clientVersion}) is older than the cluster (${out.clusterVersion}); it refuses to ` +
        `write: install netpluginctl ${out.clusterVersion}\n`,
    );
  if (err) throw err;
  return 0;
};

export const versionGroup: CtlGroup = { commands: { version: runVersion }, help: VERSION_HELP };
