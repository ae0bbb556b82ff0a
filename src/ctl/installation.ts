// `netpluginctl installation render|apply`: the operator's reconcile of the
// Installation resource (src/model/installation.ts) onto a node and the
// datastore, as a command. apply is idempotent (a second run changes nothing
// and says so), never touches existing IP pools (docs/upgrade.md: running pods
// keep their addresses) and with --watch re-runs whenever the Installation
// changes in the Kubernetes API.
import { existsSync, mkdirSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { DatastoreError } from '../errors.js';
import type { Datastore } from '../datastore/types.js';
import { ETCD_SETTINGS } from '../datastore/settings.js';
import {
  checkFlowResource,
  FLOW_KINDS,
  InstallationError,
  OPERATOR_API_VERSION,
  OPERATOR_GROUP,
  parseInstallation,
  renderInstallation,
  type Installation,
  type RenderDatastore,
  type Rendered,
} from '../model/installation.js';
import { initDatastore } from '../datastore/init.js';
import { flowsManifest } from '../model/flows-manifest.js';
import { installCni, type InstallDeps } from './install-cni.js';
import { writeFileAtomic } from '../atomic-write.js';
import { SA_DIR, type KubeClient } from '../k8s/client.js';
import {
  bool,
  CtlError,
  parseCommand,
  str,
  type CtlIO,
  type CtlSession,
  type DatastoreConfig,
  DRY_RUN,
  dryRun,
  printHelp,
} from './io.js';
import { defaultPackageDir, resolvePath } from './install-cni.js';
import { readDocuments, writeResource } from './resources.js';
import { getIfExists } from '../datastore/cas.js';
import { NETPLUGIN_VERSION, NODE_IMAGE_REPOSITORY, nodeImage, refuseOlderClient } from './version.js';

export const PLUGIN_KUBECONFIG = 'netplugin-kubeconfig';
/** The file installation render -o DIR writes the flow-log aggregator's manifest to (deploy/ ships it too). */
export const FLOWS_MANIFEST = 'netplugin-flows.yaml';
const INSTALLATIONS_PATH = `/apis/${OPERATOR_GROUP}/v1/installations`;

export interface LoadedInstallation {
  installation: Installation;
  /** Flow-log aggregator / flow UI resources found beside it (3.30+), by kind. */
  flowResources: string[];
}

function fromDocs(docs: Array<{ doc: unknown; where: string }>): LoadedInstallation {
  let installation: Installation | undefined;
  const flowResources: string[] = [];
  for (const { doc, where } of docs) {
    const o = (doc ?? {}) as { apiVersion?: unknown; kind?: unknown; metadata?: { name?: unknown } };
    try {
      if (o.kind === 'Installation') {
        if (installation)
          throw new InstallationError('a second Installation: the operator reads exactly one, named default');
        installation = parseInstallation(doc);
      } else if ((FLOW_KINDS as readonly unknown[]).includes(o.kind)) {
        checkFlowResource(o);
        flowResources.push(`${String(o.kind).toLowerCase()}/default`);
      } else {
        throw new InstallationError(
          `kind ${JSON.stringify(o.kind)} is not an operator resource; expected Installation (or ` +
            `${FLOW_KINDS.join(', ')}) in ${OPERATOR_API_VERSION}`,
        );
      }
    } catch (e) {
      if (e instanceof InstallationError) throw new CtlError(`${where}: ${e.message}`);
      throw e;
    }
  }
  if (!installation)
    throw new CtlError(
      `no Installation found; the file needs apiVersion: ${OPERATOR_API_VERSION}, kind: Installation, metadata.name: ` +
        `default`,
    );
  return { installation, flowResources };
}

export async function loadInstallation(file: string, io: CtlIO): Promise<LoadedInstallation> {
  return fromDocs(await readDocuments(file, io));
}

/** The Installation "default" from the Kubernetes API. */
export async function fetchInstallation(client: KubeClient): Promise<LoadedInstallation> {
  try {
    return fromDocs([
      { doc: await client.request('GET', `${INSTALLATIONS_PATH}/default`), where: `${INSTALLATIONS_PATH}/default` },
    ]);
  } catch (e) {
    if (DatastoreError.is(e, 'NotFound'))
      throw new CtlError(
        `no Installation "default" in the cluster (${client.server}); create one (deploy/installation-example.yaml) ` +
          `or pass -f FILE`,
      );
    throw e;
  }
}

export interface NodePaths {
  binDir: string;
  confDir: string;
  confName: string;
  /** Where the pod's service account is mounted (token, ca.crt). */
  serviceAccountDir: string;
}

/** In a cluster the plugin gets its own kubeconfig (written by apply) next to the conflist. */
function inCluster(io: CtlIO, p: NodePaths): boolean {
  return !!io.env.KUBERNETES_SERVICE_HOST && existsSync(join(p.serviceAccountDir, 'token'));
}

/**
 * The Kubernetes access the plugin's netconf takes from netpluginctl's: the
 * netconf has only kubernetes.kubeconfig (one file: the first of a merged
 * list) and kubernetes.k8s_api_root (docs/netconf.md); the CLI's context and
 * exec-plugin settings would make the plugin reject the conflist.
 */
function pluginKubernetes(k: NonNullable<DatastoreConfig['kubernetes']>): NonNullable<RenderDatastore['kubernetes']> {
  const kubeconfig = k.kubeconfig ?? k.kubeconfig_paths?.[0];
  return { ...(kubeconfig ? { kubeconfig } : {}), ...(k.k8s_api_root ? { k8s_api_root: k.k8s_api_root } : {}) };
}

/** The datastore settings written into the conflist: netpluginctl's own, with the plugin kubeconfig in a cluster. */
export function pluginDatastore(conf: DatastoreConfig | undefined, io: CtlIO, p: NodePaths): RenderDatastore {
  const d: RenderDatastore = conf
    ? {
        datastore_type: conf.datastore_type ?? 'etcdv3',
        ...Object.fromEntries(ETCD_SETTINGS.filter((k) => conf[k]).map((k) => [k, conf[k]])),
        ...(conf.kubernetes ? { kubernetes: pluginKubernetes(conf.kubernetes) } : {}),
      }
    : { datastore_type: 'kubernetes' };
  // The plugin runs on the host, where this pod's service account mount does not exist.
  if (inCluster(io, p) || (!conf && d.datastore_type === 'kubernetes'))
    d.kubernetes = { ...d.kubernetes, kubeconfig: join(p.confDir, PLUGIN_KUBECONFIG) };
  return d;
}

/** The node agent's DaemonSet, whose flags the Installation sets (agentArgs). */
export const NODE_DAEMONSET = 'netplugin-node-daemonset.yaml';

/**
 * Sets the agent flags `--name=value` in the DaemonSet text: each replaces the line of the same flag,
 * commented out or not (the shipped file lists every flag the Installation sets).
 */
export function setAgentArgs(text: string, args: string[]): string {
  for (const a of args) {
    const name = /^--[a-z0-9-]+/.exec(a)![0];
    const flag = new RegExp(`^(\\s*)(?:#\\s*)?- ${name}=.*$`, 'm');
    if (!flag.test(text))
      throw new CtlError(`${NODE_DAEMONSET} has no ${name} line to set; the package's deploy/ is not this version's`);
    text = text.replace(flag, (_m, indent: string) => `${indent}- ${a}`);
  }
  return text;
}

/**
 * The Kubernetes manifests of the package's deploy/ with every container image set to `image`:
 * file name -> text, comments kept (only the `image:` lines change, and in the node DaemonSet the
 * agent flags `agentArgs`).
 */
export function renderManifests(deployDir: string, image: string, agentArgs: string[] = []): Map<string, string> {
  const out = new Map<string, string>();
  const line = new RegExp(
    `^(\\s*(?:-\\s+)?image:\\s*)["']?[^\\s"']*${NODE_IMAGE_REPOSITORY.replace('/', '\\/')}:[^\\s"']+["']?[ \\t]*$`,
    'gm',
  );
  for (const f of readdirSync(deployDir)
    .filter((n) => /\.ya?ml$/.test(n))
    .sort()) {
    const text = readFileSync(join(deployDir, f), 'utf8').replace(line, (_m, head: string) => `${head}${image}`);
    out.set(f, f === NODE_DAEMONSET ? setAgentArgs(text, agentArgs) : text);
  }
  return out;
}

/**
 * The flow-log aggregator's manifest when the FlowLogAggregator "default" exists (with the web UI when
 * the FlowUI "default" does too); undefined without it. A FlowUI alone is served by nothing: an error.
 */
export function renderFlows(flowResources: string[], image: string): string | undefined {
  const aggregator = flowResources.includes('flowlogaggregator/default');
  const ui = flowResources.includes('flowui/default');
  if (ui && !aggregator)
    throw new CtlError(
      'FlowUI "default" needs a FlowLogAggregator "default" beside it: the web UI is served by the flow-log ' +
        'aggregator (netplugin-flows)',
    );
  return aggregator ? flowsManifest({ image, ui }) : undefined;
}

/** `installation render`: the conflist, the IPPools and the agent settings, printed or written to DIR. */
export async function cmdInstallationRender(
  io: CtlIO,
  o: {
    file: string;
    outDir?: string | undefined;
    datastore: RenderDatastore;
    confName: string;
    registry?: string | undefined;
    packageDir?: string;
  },
): Promise<number> {
  const image = o.registry === undefined ? undefined : nodeImage(o.registry);
  if (image && !o.outDir) throw new CtlError('installation render --registry writes the manifests: give -o DIR too');
  const { installation, flowResources } = await loadInstallation(o.file, io);
  const r = renderInstallation(installation, { datastore: o.datastore });
  // The aggregator runs the one node image (with --registry, from that registry).
  const flows = renderFlows(flowResources, image ?? nodeImage());
  if (!o.outDir) {
    io.stdout(
      JSON.stringify(
        {
          conflist: r.conflist,
          ippools: r.pools,
          agent: r.agent,
          ...(flowResources.length ? { flowResources } : {}),
          ...(flows ? { flowsManifest: flows } : {}),
        },
        null,
        2,
      ) + '\n',
    );
    return 0;
  }
  mkdirSync(o.outDir, { recursive: true });
  const files = [
    writeFileAtomic(join(o.outDir, o.confName), JSON.stringify(r.conflist, null, 2) + '\n', 0o644),
    writeFileAtomic(
      join(o.outDir, 'ippools.json'),
      JSON.stringify({ apiVersion: 'v1', kind: 'List', items: r.pools }, null, 2) + '\n',
      0o644,
    ),
    writeFileAtomic(join(o.outDir, 'agent.json'), JSON.stringify(r.agent, null, 2) + '\n', 0o644),
  ];
  if (flows) files.push(writeFileAtomic(join(o.outDir, FLOWS_MANIFEST), flows, 0o644));
  if (image) {
    const dir = join(o.outDir, 'manifests');
    mkdirSync(dir, { recursive: true });
    for (const [name, text] of renderManifests(
      join(o.packageDir ?? defaultPackageDir(), 'deploy'),
      image,
      r.agent.agentArgs,
    ))
      files.push(writeFileAtomic(join(dir, name), text, 0o644));
  }
  for (const f of files) io.stdout(`${f.path} ${f.action}\n`);
  return 0;
}

export interface ApplyOptions extends NodePaths {
  dryRun: boolean;
  deps: InstallDeps;
}

/** One change (or non-change) apply made, as printed. */
export interface Change {
  what: string;
  action: string;
}

function pluginKubeconfig(io: CtlIO, saDir: string): string {
  const h = io.env.KUBERNETES_SERVICE_HOST!;
  const server = `https://${h.includes(':') ? `[${h}]` : h}:${io.env.KUBERNETES_SERVICE_PORT || '443'}`;
  const token = readFileSync(join(saDir, 'token'), 'utf8').trim();
  const caFile = join(saDir, 'ca.crt');
  const cluster: Record<string, unknown> = { server };
  if (existsSync(caFile)) cluster['certificate-authority-data'] = readFileSync(caFile).toString('base64');
  const kc = {
    apiVersion: 'v1',
    kind: 'Config',
    clusters: [{ name: 'local', cluster }],
    users: [{ name: 'netplugin', user: { token } }],
    contexts: [{ name: 'netplugin-context', context: { cluster: 'local', user: 'netplugin' } }],
    'current-context': 'netplugin-context',
  };
  return JSON.stringify(kc, null, 2) + '\n';
}

/** The reconcile, once: files on this node, then pools and ClusterInformation in the datastore. */
export async function applyInstallation(
  io: CtlIO,
  ds: Datastore,
  conf: DatastoreConfig | undefined,
  inst: LoadedInstallation,
  o: ApplyOptions,
): Promise<Change[]> {
  await refuseOlderClient(ds);
  const rendered: Rendered = renderInstallation(inst.installation, { datastore: pluginDatastore(conf, io, o) });
  const changes: Change[] = [];
  if (inCluster(io, o)) {
    const path = join(o.confDir, PLUGIN_KUBECONFIG);
    const text = pluginKubeconfig(io, o.serviceAccountDir);
    const same = existsSync(path) && readFileSync(path, 'utf8') === text;
    if (o.dryRun) changes.push({ what: path, action: same ? 'unchanged' : 'would write' });
    else {
      mkdirSync(o.confDir, { recursive: true });
      changes.push({ what: path, action: writeFileAtomic(path, text, 0o600).action });
    }
  }
  const r = installCni(
    {
      binDir: o.binDir,
      confDir: o.confDir,
      confName: o.confName,
      datastoreType: rendered.agent.datastoreType as 'etcdv3' | 'kubernetes',
      ipam: rendered.agent.ipam,
      portmap: rendered.agent.hostPorts,
      logLevel: rendered.agent.logSeverity,
      logFilePath: '/var/log/netplugin/cni/cni.log',
      networkName: String(rendered.conflist.name),
      cniVersion: String(rendered.conflist.cniVersion),
      systemdDir: '/etc/systemd/system',
      conflist: rendered.conflist,
      dryRun: o.dryRun,
    },
    o.deps,
  );
  for (const f of r.files) changes.push({ what: f.path, action: f.action });

  // Pools only into an empty datastore: changing or adding pools under running pods is the user's call
  // (docs/upgrade.md).
  const existing = await ds.list('IPPool');
  if (existing.items.length === 0) {
    for (const p of rendered.pools) {
      if (o.dryRun) changes.push({ what: `ippool/${p.metadata.name}`, action: `would create (${p.spec.cidr})` });
      else
        changes.push({
          what: `ippool/${p.metadata.name}`,
          action: `${await writeResource(ds, p, 'create')} (${p.spec.cidr})`,
        });
    }
  } else {
    const names = existing.items.map((p) => p.metadata.name).sort();
    changes.push({
      what: 'ippools',
      action: `unchanged (${names.length} exist: ${names.join(', ')}; existing pools are never changed by apply)`,
    });
  }

  if (o.dryRun) {
    const ci = await getIfExists(ds, 'ClusterInformation', 'default');
    const types = (ci?.spec.clusterType ?? '').split(',');
    const same =
      ci &&
      ci.spec.netpluginVersion === NETPLUGIN_VERSION &&
      types.includes('k8s') &&
      types.includes('operator') &&
      ci.spec.clusterGUID &&
      ci.spec.datastoreReady !== undefined;
    changes.push({
      what: 'clusterinformation/default',
      action: !ci ? 'would create' : same ? 'unchanged' : 'would update',
    });
  } else {
    const ci = await initDatastore(ds, { clusterType: 'k8s,operator' });
    changes.push({ what: 'clusterinformation/default', action: ci.action });
  }
  // The aggregator is a Deployment, not a node's business: apply checks the resources and names the manifest.
  renderFlows(inst.flowResources, nodeImage());
  // The agent's flags are the DaemonSet's (or the systemd unit's), not files apply writes: it names them.
  if (rendered.agent.bgp) {
    const args = rendered.agent.agentArgs.join(' ');
    changes.push({
      what: 'netpluginNetwork.bgp',
      action:
        `accepted (Enabled: the node agent runs with ${args}, as in the DaemonSet installation render -o DIR ` +
        `--registry REG writes; systemd: NETPLUGIN_EXTRA_ARGS)`,
    });
  }
  for (const f of inst.flowResources) {
    changes.push({
      what: f,
      action:
        `accepted (served by netplugin-flows: kubectl apply -f the ${FLOWS_MANIFEST} that installation render ` +
        `-o DIR writes${f === 'flowui/default' ? ', which then serves the UI' : ''})`,
    });
  }
  return changes;
}

function countChanges(changes: Change[]): number {
  return changes.filter((c) => !c.action.startsWith('unchanged') && !c.action.startsWith('accepted')).length;
}

export function printChanges(io: CtlIO, changes: Change[], dryRun: boolean): void {
  for (const c of changes) io.stdout(`${c.what} ${c.action}\n`);
  const changed = countChanges(changes);
  io.stdout(
    changed === 0
      ? 'no changes: the node and the datastore already match the Installation\n'
      : `${changed} ${dryRun ? 'change(s) would be made (dry run: nothing written)' : 'change(s) made'}\n`,
  );
}

/**
 * `installation apply --watch`: reconciles from the Installation in the
 * Kubernetes API now and after each change, until `signal` aborts. A failed
 * reconcile is printed and retried on the next change.
 */
export async function watchInstallation(
  io: CtlIO,
  ds: Datastore,
  conf: DatastoreConfig | undefined,
  client: KubeClient,
  o: ApplyOptions,
  signal: AbortSignal,
): Promise<void> {
  let lastSpec = '';
  let printed = false;
  const reconcile = async (raw: unknown, resync = false) => {
    const spec = JSON.stringify((raw as { spec?: unknown }).spec ?? {});
    if (spec === lastSpec) return;
    lastSpec = spec;
    try {
      const inst = fromDocs([{ doc: raw, where: `${INSTALLATIONS_PATH}/default` }]);
      const changes = await applyInstallation(io, ds, conf, inst, o);
      // A resync that found nothing to do stays quiet; the first run and every change are printed.
      if (!printed || !resync || countChanges(changes) > 0) printChanges(io, changes, o.dryRun);
      printed = true;
    } catch (e) {
      io.stderr(`error: ${(e as Error).message}\n`);
    }
  };
  while (!signal.aborted) {
    let rv: string | undefined;
    let failed = false;
    // Each re-list reconciles even an unchanged Installation (a resync, about once a minute):
    // files on the node that something else rewrote are put back.
    lastSpec = '';
    try {
      const cur = await client.request<{ metadata: { resourceVersion?: string }; items: unknown[] }>(
        'GET',
        INSTALLATIONS_PATH,
        undefined,
        { query: { fieldSelector: 'metadata.name=default' } },
      );
      rv = cur.metadata.resourceVersion;
      if (cur.items[0]) await reconcile(cur.items[0], true);
      else io.stderr(`waiting for Installation "default" to be created\n`);
    } catch (e) {
      failed = true;
      io.stderr(`error: cannot read the Installation: ${(e as Error).message}\n`);
    }
    // Until the stream ends (server timeout, 410 Gone, error): then list again.
    await new Promise<void>((resolve) => {
      if (signal.aborted) return resolve();
      if (failed) {
        const t = setTimeout(resolve, 2000);
        signal.addEventListener('abort', () => (clearTimeout(t), resolve()), { once: true });
        return;
      }
      let chain = Promise.resolve();
      const onAbort = () => {
        h.stop();
        resolve();
      };
      const h = client.watch(
        INSTALLATIONS_PATH,
        { fieldSelector: 'metadata.name=default', resourceVersion: rv, timeoutSeconds: '60' },
        (ev) => {
          if (ev.type === 'ADDED' || ev.type === 'MODIFIED') chain = chain.then(() => reconcile(ev.object));
        },
        () => {
          signal.removeEventListener('abort', onAbort);
          void chain.then(() => setTimeout(resolve, signal.aborted ? 0 : 500));
        },
      );
      signal.addEventListener('abort', onAbort, { once: true });
    });
  }
}

export const INSTALLATION_HELP: Record<string, string> = {
  installation: `Usage: netpluginctl installation render -f FILE [-o DIR [--registry REG]]
       netpluginctl installation apply [-f FILE] [--cni-bin-dir D] [--cni-conf-dir D] [--dry-run] [--watch]
       (without -f: the Installation "default" from the Kubernetes API)

The operator's Installation resource (${OPERATOR_API_VERSION}, kind Installation, name default;
see deploy/installation-example.yaml and docs/upgrade.md).
`,
  'installation render': `Usage: netpluginctl installation render -f FILE|- [-o DIR [--registry REG]]

Validates the Installation in FILE and prints, as JSON, the CNI conflist, the IPPools it implies
(default-ipv4-ippool / default-ipv6-ippool unless named) and the agent settings. With -o DIR the
three are written as DIR/10-netplugin.conflist, DIR/ippools.json and DIR/agent.json. Pure: reads
nothing but FILE; the conflist names the datastore netpluginctl is configured for.

With a FlowLogAggregator "default" in FILE, also the flow-log aggregator's Deployment, Service,
ServiceAccount and TLS Secret (JSON key flowsManifest, or DIR/netplugin-flows.yaml), serving the web UI when a
FlowUI "default" is there too (docs/flows.md).

  --registry REG   also write the package's Kubernetes manifests (deploy/*.yaml) to DIR/manifests/,
                   every container image set to REG/${NODE_IMAGE_REPOSITORY}:${NETPLUGIN_VERSION}, the image
                   \`scripts/build-image --push REG\` pushes (REG: host[:port][/path])
`,
  'installation apply': `Usage: netpluginctl installation apply [-f FILE|-] [flags]

Without -f, the Installation "default" is read from the Kubernetes API.

The operator's reconcile, once: writes the conflist (atomically) and installs the plugin binaries
as install-cni does, writes the plugin's kubeconfig when running in a cluster, creates the
Installation's IP pools only when the datastore has no pool at all (existing pools are never
changed), and initialises ClusterInformation. Prints each file and object with what happened;
a second run changes nothing and says so.

  -f, --filename FILE        the Installation (default: "default" from the Kubernetes API)
  --cni-bin-dir DIR          default /opt/cni/bin (env CNI_BIN_DIR)
  --cni-conf-dir DIR         default /etc/cni/net.d (env CNI_NET_DIR)
  --conf-name NAME           default 10-netplugin.conflist (env CNI_CONF_NAME)
  --service-account-dir DIR  where the pod's service account is mounted (default ${SA_DIR})
  --dry-run                  print what would change; write nothing
  --watch                    keep running: reconcile again whenever the Installation "default"
                             changes in the Kubernetes API (SIGTERM/SIGINT stop it)
`,
};

function nodePaths(io: CtlIO, binDir?: string, confDir?: string, confName?: string, saDir?: string): NodePaths {
  return {
    binDir: resolvePath(io, binDir ?? io.env.CNI_BIN_DIR ?? '/opt/cni/bin'),
    confDir: resolvePath(io, confDir ?? io.env.CNI_NET_DIR ?? '/etc/cni/net.d'),
    confName: confName ?? io.env.CNI_CONF_NAME ?? '10-netplugin.conflist',
    serviceAccountDir: resolvePath(io, saDir ?? SA_DIR),
  };
}

export async function cmdInstallation(rest: string[], io: CtlIO, s: CtlSession): Promise<number> {
  const sub = rest[0];
  if (!sub || sub === '--help' || sub === '-h') return (io.stdout(INSTALLATION_HELP.installation!), 0);
  const args = rest.slice(1);
  const topic = `installation ${sub}`;
  if (sub === 'render') {
    const p = parseCommand(
      args,
      [
        { name: 'filename', short: 'f', type: 'string' },
        { name: 'output', short: 'o', type: 'string' },
        { name: 'cni-conf-dir', type: 'string' },
        { name: 'conf-name', type: 'string' },
        { name: 'registry', type: 'string' },
      ],
      topic,
      s,
    );
    if (bool(p, 'help')) return printHelp(io, INSTALLATION_HELP[topic]!);
    const file = str(p, 'filename');
    if (!file) throw new CtlError('installation render needs -f FILE (the Installation; - for stdin)');
    const paths = nodePaths(io, undefined, str(p, 'cni-conf-dir'), str(p, 'conf-name'));
    const out = str(p, 'output');
    return cmdInstallationRender(io, {
      file,
      outDir: out ? resolvePath(io, out) : undefined,
      datastore: pluginDatastore(s.config(), io, paths),
      confName: paths.confName,
      registry: str(p, 'registry'),
      ...(io.packageDir ? { packageDir: io.packageDir } : {}),
    });
  }
  if (sub === 'apply') {
    const p = parseCommand(
      args,
      [
        { name: 'filename', short: 'f', type: 'string' },
        ...['cni-bin-dir', 'cni-conf-dir', 'conf-name', 'service-account-dir', 'package-dir'].map((name) => ({
          name,
          type: 'string' as const,
        })),
        DRY_RUN,
        { name: 'watch', type: 'bool' },
      ],
      topic,
      s,
    );
    if (bool(p, 'help')) return printHelp(io, INSTALLATION_HELP[topic]!);
    const file = str(p, 'filename');
    const watch = bool(p, 'watch') ?? false;
    if (file && watch)
      throw new CtlError(
        'installation apply --watch follows the Installation "default" in the Kubernetes API; drop -f (or apply the ' +
          'file with kubectl first)',
      );
    // Validate the file before connecting anywhere.
    let inst = file ? await loadInstallation(file, io) : undefined;
    if (!inst && !watch) inst = await fetchInstallation(await s.kube());
    const pkgDir = str(p, 'package-dir');
    const o: ApplyOptions = {
      ...nodePaths(
        io,
        str(p, 'cni-bin-dir'),
        str(p, 'cni-conf-dir'),
        str(p, 'conf-name'),
        str(p, 'service-account-dir'),
      ),
      dryRun: dryRun(p),
      deps: {
        packageDir: pkgDir ? resolvePath(io, pkgDir) : (io.packageDir ?? defaultPackageDir()),
        nodePath: io.nodePath ?? process.execPath,
        warn: (m) => io.stderr(`warning: ${m}\n`),
      },
    };
    const ds = await s.datastore();
    if (!watch) {
      printChanges(io, await applyInstallation(io, ds, s.config(), inst!, o), o.dryRun);
      return 0;
    }
    const ac = new AbortController();
    const stop = () => ac.abort();
    process.once('SIGTERM', stop);
    process.once('SIGINT', stop);
    try {
      await watchInstallation(io, ds, s.config(), await s.kube(), o, ac.signal);
    } finally {
      process.off('SIGTERM', stop);
      process.off('SIGINT', stop);
    }
    return 0;
  }
  throw new CtlError(`unknown installation command ${JSON.stringify(sub)}; use render or apply`);
}
