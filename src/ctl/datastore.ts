// `netpluginctl datastore init|ready|migrate`: the datastore's
// ClusterInformation (src/datastore/init.ts) and the etcd to Kubernetes
// migration (src/ctl/migrate.ts).
import { initDatastore } from '../datastore/init.js';
import { bool, CtlError, noPositional, parseCommand, printHelp, str, type CtlCommand, type CtlGroup } from './io.js';
import { NETPLUGIN_VERSION } from './version.js';

const DATASTORE_GROUP_HELP = {
  datastore: `Usage: netpluginctl datastore init [--cluster-type k8s,bgp]
       netpluginctl datastore ready --set=true|false
       netpluginctl datastore migrate lock|export|import|unlock
`,
  'datastore init': `Usage: netpluginctl datastore init [--cluster-type TYPES]

Creates or updates ClusterInformation "default": a random clusterGUID (kept when present),
clusterType (merged with the stored one), netpluginVersion ${NETPLUGIN_VERSION}, and
datastoreReady true when not set. Safe to run any number of times.
`,
  'datastore ready': `Usage: netpluginctl datastore ready --set=true|false

Sets ClusterInformation datastoreReady (false pauses plugins and agents that honour it).
`,
} satisfies Record<string, string>;

const runDatastore: CtlCommand = async (rest, io, s) => {
  const sub = rest[0];
  if (!sub || sub === '--help' || sub === '-h') return printHelp(io, DATASTORE_GROUP_HELP.datastore);
  const args = rest.slice(1);
  if (sub === 'init') {
    const p = parseCommand(
      args,
      [
        { name: 'cluster-type', type: 'string' },
        { name: 'output', short: 'o', type: 'string' },
      ],
      'datastore init',
      s,
    );
    if (bool(p, 'help')) return printHelp(io, DATASTORE_GROUP_HELP['datastore init']);
    noPositional(p, 'datastore init');
    const r = await initDatastore(await s.writable(), { clusterType: str(p, 'cluster-type') });
    if (str(p, 'output') === 'json') io.stdout(JSON.stringify(r.clusterInformation, null, 2) + '\n');
    else {
      const ci = r.clusterInformation.spec;
      io.stdout(
        `clusterinformation/default ${r.action}: version ${ci.netpluginVersion}, type ${ci.clusterType ?? '(none)'}, ` +
          `ready ${ci.datastoreReady}, guid ${ci.clusterGUID}\n`,
      );
    }
    return 0;
  }
  if (sub === 'ready') {
    const p = parseCommand(args, [{ name: 'set', type: 'string' }], 'datastore ready', s);
    if (bool(p, 'help')) return printHelp(io, DATASTORE_GROUP_HELP['datastore ready']);
    noPositional(p, 'datastore ready');
    const v = str(p, 'set');
    if (v !== 'true' && v !== 'false') throw new CtlError(`datastore ready needs --set=true or --set=false`);
    const r = await initDatastore(await s.writable(), { datastoreReady: v === 'true' });
    io.stdout(`clusterinformation/default datastoreReady=${r.clusterInformation.spec.datastoreReady}\n`);
    return 0;
  }
  // A lazily loaded command (large, rarely run), as the groups of ctl/index.ts.
  if (sub === 'migrate') return (await import('./migrate.js')).cmdMigrate(args, io, s);
  throw new CtlError(`unknown datastore command ${JSON.stringify(sub)}; use init, ready or migrate`);
};

/** datastore init, ready, migrate. */
export const datastoreGroup: CtlGroup = { commands: { datastore: runDatastore }, help: DATASTORE_GROUP_HELP };
