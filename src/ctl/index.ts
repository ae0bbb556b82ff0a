// netpluginctl: the operator's command line. `runCtl` takes argv (without
// node and script) and injected IO and returns the exit code, so tests run
// every command in-process; src/bin/netpluginctl.ts wires it to the process.
import { readFileSync } from 'node:fs';
import { DatastoreError, CniError } from '../errors.js';
import type { Datastore } from '../datastore/types.js';
import { initDatastore } from './datastore-init.js';
import { bool, CtlError, GLOBAL_FLAGS, list, parseFlags, str, suggestFlag, type CtlIO, type CtlSession, type DatastoreConfig, type FlagSpec, type ParsedArgs } from './io.js';
import { cmdDelete, cmdGet, cmdWrite } from './resources.js';
import { cmdIpamCheck, cmdIpamRelease, cmdIpamShow, type CheckOptions } from './ipam.js';
import { defaultPackageDir, detectPod, installCni, resolvePath, uninstallCni, type InstallCniOptions } from './install-cni.js';
import { compareVersions, NETPLUGIN_VERSION, refuseOlderClient } from './version.js';
import { resolveKind } from './kinds.js';
import { cmdLabel, cmdPatch, cmdValidate, completionScript } from './edit.js';
import { applyKubeAccess, defaultCtlConfig, isCtlConfig, readCtlConfig } from './cluster-config.js';

export { initDatastore } from './datastore-init.js';
export type { InitDatastoreOptions, InitDatastoreResult } from './datastore-init.js';
export { CtlError } from './io.js';
export type { CtlIO, DatastoreConfig } from './io.js';
export { installCni, uninstallCni, buildConflist } from './install-cni.js';
export type { InstallCniOptions, InstallCniResult } from './install-cni.js';

const DATASTORE_HELP = `Datastore: --config FILE (a netconf or conflist; the netplugin entry's datastore_type,
etcd_* and kubernetes fields are used; or a config file:
    apiVersion: netplugin.org/v3
    kind: NetpluginAPIConfig
    spec: {datastoreType: etcdv3|kubernetes, etcdEndpoints: URLS, etcdKeyFile, etcdCertFile,
           etcdCACertFile, kubeconfig: PATH, k8sAPIEndpoint: URL, context: NAME}
), else the environment: DATASTORE_TYPE (etcdv3 | kubernetes), ETCD_ENDPOINTS,
ETCD_DISCOVERY_SRV, ETCD_KEY_FILE, ETCD_CERT_FILE, ETCD_CA_CERT_FILE, KUBECONFIG (several files
separated by ':' are merged), K8S_API_ROOT, else /etc/netplugin/netpluginctl.cfg
(NETPLUGINCTL_CONFIG names another).
Kubernetes API: --kubeconfig PATH (implies the kubernetes datastore when nothing else is
configured), --context NAME; without them KUBECONFIG, then ~/.kube/config. Exec credential
plugins (client.authentication.k8s.io v1 and v1beta1) run as kubectl runs them, their
credential cached until it expires.
Logs and errors: --log-format json prints errors as JSON lines on stderr.`;

const HELP: Record<string, string> = {
  '': `netpluginctl ${NETPLUGIN_VERSION}: manage netplugin resources, IPAM and installation.

Usage: netpluginctl [--config FILE] [--kubeconfig PATH] [--context NAME] [--log-format text|json] <command> [flags]

Commands:
  apply -f FILE|DIR|-        create or update resources (YAML or JSON, one or many documents)
  create -f FILE|DIR|-       create resources; fails if one exists
  replace -f FILE|DIR|-      update existing resources
  get <kind> [name...]       show resources (also KIND/NAME; -o yaml|json|wide|name, -n NS, -A, -l)
  delete <kind> <name...>    delete resources (or -f FILE|DIR)
  validate -f FILE|DIR|-     check manifests without a datastore
  label <kind> <name> k=v    set (k=v) or remove (k-) labels
  patch <kind> <name> -p J   apply a JSON merge patch to spec, labels or annotations
  completion bash|zsh        print a shell completion script
  ipam show                  pool usage (--show-blocks, --ip ADDR)
  ipam check                 find leaked addresses (-o report.json)
  ipam release               release addresses (--ip ADDR, --from-report FILE, --dry-run)
  policy explain POD         policies selecting a pod; with --peer/--port, the rule deciding a connection
  datastore init             mark the datastore initialised (ClusterInformation)
  datastore ready            set datastoreReady (--set=true|false)
  datastore migrate          move from etcd to the Kubernetes datastore (lock, export, import, unlock)
  installation render        the conflist, IP pools and agent settings an Installation implies
  installation apply         reconcile an Installation onto this node and the datastore (--dry-run, --watch)
  upgrade check              what an upgrade to this release needs (exit 1 when something blocks it)
  upgrade owner-refs         save, strip and restore owner references to netplugin.org/v3 objects
  upgrade auto-hep           migrate all-interfaces host endpoints to automatic ones
  upgrade finish             remove allow-all-upgrade and record the new cluster version
  version                    client and cluster version
  install-cni                install the plugin binaries and the CNI conflist on this node
  uninstall-cni              remove them

Kinds: ippool, ipamconfig, node, clusterinformation, hostendpoint,
kubecontrollersconfiguration, profile, networkpolicy, globalnetworkpolicy, workloadendpoint
(singular, plural or short names: pool, hep, kcc, np, gnp, wep...).

${DATASTORE_HELP}

Run 'netpluginctl <command> --help' for a command's flags. Set NETPLUGIN_DEBUG=1 for stack traces.
`,
  apply: `Usage: netpluginctl apply -f FILE|DIR|- [--dry-run]

Creates each resource in FILE (or stdin with -), or updates it when it exists. FILE holds
YAML or JSON: one document, several separated by ---, a JSON array, or a kind: List.
IPPools are validated (masked CIDR, no overlap, block size, selector); cidr and
blockSize cannot change once created. -f DIR reads every .yaml, .yml and .json file in DIR
(not recursive, in name order). --dry-run (or --dry-run=client) checks everything against the
datastore and writes nothing.

Example:
  cat <<EOF | netpluginctl apply -f -
  apiVersion: netplugin.org/v3
  kind: IPPool
  metadata: {name: default-ipv4-ippool}
  spec: {cidr: 10.244.0.0/16, natOutgoing: true, nodeSelector: all()}
  EOF
`,
  create: `Usage: netpluginctl create -f FILE|-

Like apply, but fails for resources that already exist.
`,
  replace: `Usage: netpluginctl replace -f FILE|-

Updates existing resources. When a document carries metadata.resourceVersion (as printed by
get -o yaml), the update only succeeds if nobody changed the resource since.
`,
  get: `Usage: netpluginctl get <kind> [name...] [-o yaml|json|wide|name] [-n NAMESPACE | -A] [-l SELECTOR]
       netpluginctl get <kind>/<name> [<kind>/<name>...]

  -o, --output FORMAT      yaml, json, wide or name (kind/name per line; default: a table)
  --no-headers             tables without the header line
  -n, --namespace NS       namespace of namespaced kinds (networkpolicy, workloadendpoint); default "default"
  -A, --all-namespaces     list namespaced kinds across all namespaces
  -l, --selector EXPR      label selector, e.g. "zone == 'a'", or kubectl's form: zone=a,tier!=db

Examples:
  netpluginctl get ippools -o wide
  netpluginctl get pool default-ipv4-ippool -o yaml
  netpluginctl get wep -A
`,
  delete: `Usage: netpluginctl delete <kind> <name...> [-n NAMESPACE] [--force] [--ignore-not-found] [--dry-run]
       netpluginctl delete -f FILE|DIR|-

Deleting a node also releases its IPAM state: its tunnel addresses and block
affinities (empty blocks go back to their pool), and says what it released.
An IPPool that still has allocated addresses is not deleted unless --force is given
(the addresses then stay allocated until their workloads are deleted).
`,
  ipam: `Usage: netpluginctl ipam show|check|release ...

  ipam show [--show-blocks] [--ip ADDR] [-o json]
  ipam check [-o report.json] [--json]
  ipam release --ip ADDR [--ip ADDR...] [--force] | --from-report FILE
`,
  'policy explain': `Usage: netpluginctl policy explain POD [-n NS] [--peer NS/POD|POD|ADDR] [--port N] [--source-port N] [--protocol P] [-o json]

Shows the pod's endpoint (addresses, labels with those its profiles apply), the
policies that select it for ingress and egress in evaluation order, and with
--peer the rule that decides a connection each way, as the node agent enforces it:
  --peer     the other side: a pod (NS/POD, or POD in -n NS) or an address
  --port     destination port (default: none; rules with ports then do not match)
  --source-port  source port (default: none; rules with source ports then do not match)
  --protocol TCP (default), UDP, SCTP, UDPLite, ICMP, ICMPv6
`,
  'ipam show': `Usage: netpluginctl ipam show [--show-blocks] [--ip ADDR] [-o json]

  --show-blocks   list every block with its pool, node affinity and counts
  --ip ADDR       who holds ADDR: handle, node, namespace/pod, workload endpoint
  -o json         machine-readable output
`,
  'ipam check': `Usage: netpluginctl ipam check [-o FILE] [--json]

Finds leaked addresses: handles whose workload endpoint (etcd) or pod (kubernetes) is gone,
addresses allocated under a handle that has no handle object, handle objects whose block
entries are missing, and blocks affine to nodes that no longer exist. For each leaked handle it
says what netplugin-kube-controllers' IPAM GC does: the allocation's age against leakGracePeriod,
or that GC never releases it (no Kubernetes attributes).

  -o, --output FILE   write the report (JSON) to FILE for 'ipam release --from-report'
  --json              print the report as JSON instead of text

Exit status: 0 when nothing was found, 1 when the check found problems (so a cron job or
an alert can use it), 2 and more for errors running the check.
`,
  'ipam release': `Usage: netpluginctl ipam release --ip ADDR [--ip ADDR...] [--force] [--dry-run]
       netpluginctl ipam release --from-report FILE [--dry-run]

  --dry-run            run every check against the live state and print what would be released

  --ip ADDR            release one address; refused while a workload endpoint uses it or (with
                       Kubernetes access) its pod still exists, unless --force
  --from-report FILE   release what 'ipam check -o FILE' found; each item is checked again first
                       and skipped when it is no longer leaked in the same way
`,
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
  version: `Usage: netpluginctl version [-o json]

Prints the client version and, when a datastore is configured, the cluster version
(ClusterInformation netpluginVersion) and cluster type. A client older than the cluster
warns here and refuses every write (apply, delete, ipam release, datastore init...).
`,
  'install-cni': `Usage: netpluginctl install-cni [flags]

Installs /opt/cni/bin/netplugin and netplugin-ipam (the native shim plus netplugin.fallback,
or a small sh launcher when no shim binary is built) and writes the CNI conflist.
Idempotent; every file is replaced atomically.

  --host-root DIR            the host's / as mounted here (env NETPLUGIN_HOST_ROOT; in a DaemonSet pod:
                             /host): --bin-dir, --conf-dir and --systemd-dir are host paths written
                             under DIR, the package is copied to --host-package-dir on the host, and
                             netplugin.fallback names host paths. In a pod without it, the fallback
                             names no node (CNI calls answer code 11 while the agent is down)
  --host-package-dir DIR     package location on the host with --host-root (default /opt/netplugin)
  --host-node PATH           the host's node (a host path; default /usr/bin/node or /usr/local/bin/node
                             when present; none: no per-exec fallback, code 11 while the agent is down)
  --bin-dir DIR              CNI bin dir (default /opt/cni/bin; env CNI_BIN_DIR)
  --conf-dir DIR             CNI conf dir (default /etc/cni/net.d; env CNI_NET_DIR)
  --conf-name NAME           conflist file name (default 10-netplugin.conflist; env CNI_CONF_NAME)
  --network-name NAME        network name (default k8s-pod-network)
  --cni-version V            conflist cniVersion (default 1.0.0)
  --datastore-type T         etcdv3 (default) or kubernetes (env DATASTORE_TYPE)
  --etcd-endpoints URLS      comma-separated etcd URLs (env ETCD_ENDPOINTS)
  --etcd-discovery-srv D     SRV discovery domain instead of endpoints
  --etcd-key-file, --etcd-cert-file, --etcd-ca-cert-file PATH   etcd TLS
  --etcd-tls-from DIR        copy etcd-key, etcd-cert and etcd-ca found in DIR (a mounted Secret) to
                             <conf-dir>/netplugin-tls/ (0600) and name them in the conflist
  --kubeconfig PATH          kubeconfig the plugin uses (env KUBECONFIG)
  --k8s-api-root URL         API server URL instead of a kubeconfig
  --nodename NAME            node name, when it differs from the hostname
  --mtu N                    pod interface MTU (68-65535)
  --ipam TYPE                netplugin-ipam (default) or host-local (node pod CIDR)
  --subnet CIDR              with --ipam host-local: a plain range instead of the node's pod CIDR
                             (hosts without Kubernetes; repeat for dual stack)
  --policy k8s               enforce Kubernetes NetworkPolicy
  --no-portmap               leave out the chained portmap entry (host ports)
  --log-level L              plugin log level (default info)
  --log-file-path P          plugin log file (default /var/log/netplugin/cni/cni.log; "" disables)
  --from-template FILE       fill __PLACEHOLDERS__ in FILE instead of generating the conflist
  --launcher                 install the sh launcher even when a shim binary exists
  --shim PATH                shim binary to install (default build/shim or prebuilds/linux-<arch>)
  --package-dir DIR          netplugin package dir holding dist/ (default: this installation)
  --agent                    also write a systemd unit for netplugin-node (--systemd-dir, default /etc/systemd/system)
  --init-datastore           also run 'datastore init' against the configured datastore
  -o json                    print what was installed as JSON
  --dry-run                  check everything and print what would be written; write nothing
`,
  validate: `Usage: netpluginctl validate -f FILE|DIR|-

Parses every document and checks it as apply would (kinds, names, IPPool CIDR, block size,
selector, overlaps between the pools given), without a datastore. Exit status 1 when any
document is invalid.
`,
  label: `Usage: netpluginctl label <kind> <name> key=value... [key-...] [--overwrite] [-n NS] [--dry-run]
       netpluginctl label <kind>/<name> ...

Sets labels (key=value) or removes them (key-). Changing an existing label's value needs
--overwrite, as with kubectl.
`,
  patch: `Usage: netpluginctl patch <kind> <name> --type merge -p '{"spec":{"disabled":true}}' [-n NS] [--dry-run]

Applies a JSON merge patch (RFC 7386: objects merge, null removes a field) to spec,
metadata.labels or metadata.annotations, then validates and writes the result as apply does
(retrying when someone else changed the resource meanwhile). Only --type merge is supported.
`,
  completion: `Usage: netpluginctl completion bash|zsh

Prints a completion script: source <(netpluginctl completion bash)
`,
  'uninstall-cni': `Usage: netpluginctl uninstall-cni [--bin-dir DIR] [--conf-dir DIR] [--conf-name NAME] [--agent]

Removes the conflist (only if it is a netplugin one), the plugin executables, the fallback
file, and with --agent the systemd unit.
`,
};

function help(io: CtlIO, topic: string): number {
  io.stdout(HELP[topic] ?? HELP['']!);
  return 0;
}

function parse(argv: string[], specs: FlagSpec[], command: string): ParsedArgs {
  return parseFlags(argv, [...GLOBAL_FLAGS, ...specs], command);
}

/** Datastore settings from --config (netconf or conflist) or the environment; undefined when none is configured. */
export function datastoreConfig(configFile: string | undefined, io: CtlIO): (DatastoreConfig & { context?: string }) | undefined {
  const env = io.env;
  if (configFile) {
    let raw: unknown;
    try {
      const text = readFileSync(resolvePath(io, configFile), 'utf8');
      if (isCtlConfig(text)) return readCtlConfig(resolvePath(io, configFile), io);
      raw = JSON.parse(text);
    } catch (e) {
      throw new CtlError(`cannot read --config ${configFile}: ${(e as NodeJS.ErrnoException).code === 'ENOENT' ? 'no such file' : (e as Error).message}`);
    }
    let conf = raw as Record<string, unknown>;
    if (conf && Array.isArray(conf.plugins)) {
      const entry = (conf.plugins as Array<Record<string, unknown>>).find((p) => p?.type === 'netplugin');
      if (!entry) throw new CtlError(`--config ${configFile}: the conflist has no entry with "type": "netplugin"`);
      conf = entry;
    }
    if (!conf || typeof conf !== 'object') throw new CtlError(`--config ${configFile}: expected a JSON object (netconf or conflist)`);
    const out: DatastoreConfig = {};
    const t = conf.datastore_type ?? 'etcdv3';
    if (t !== 'etcdv3' && t !== 'kubernetes') throw new CtlError(`--config ${configFile}: datastore_type ${JSON.stringify(t)} is not supported; use "etcdv3" or "kubernetes"`);
    out.datastore_type = t;
    for (const k of ['etcd_endpoints', 'etcd_discovery_srv', 'etcd_key_file', 'etcd_cert_file', 'etcd_ca_cert_file', 'etcd_authority', 'etcd_scheme'] as const) {
      if (typeof conf[k] === 'string') out[k] = conf[k] as string;
    }
    const k8s = conf.kubernetes as { kubeconfig?: string; k8s_api_root?: string } | undefined;
    if (k8s && typeof k8s === 'object') out.kubernetes = { ...(k8s.kubeconfig ? { kubeconfig: k8s.kubeconfig } : {}), ...(k8s.k8s_api_root ? { k8s_api_root: k8s.k8s_api_root } : {}) };
    return out;
  }
  const t = env.DATASTORE_TYPE;
  if (!t && !env.ETCD_ENDPOINTS && !env.ETCD_DISCOVERY_SRV && !env.KUBECONFIG && !env.K8S_API_ROOT) return undefined;
  if (t && t !== 'etcdv3' && t !== 'kubernetes') throw new CtlError(`DATASTORE_TYPE=${t} is not supported; use etcdv3 or kubernetes`);
  const out: DatastoreConfig = {};
  // Without DATASTORE_TYPE, etcd wins when its endpoints are given: KUBECONFIG is set on
  // many admin machines for kubectl and says nothing about where netplugin keeps its data.
  out.datastore_type = (t as DatastoreConfig['datastore_type']) ?? (env.ETCD_ENDPOINTS || env.ETCD_DISCOVERY_SRV ? 'etcdv3' : 'kubernetes');
  if (env.ETCD_ENDPOINTS) out.etcd_endpoints = env.ETCD_ENDPOINTS;
  if (env.ETCD_DISCOVERY_SRV) out.etcd_discovery_srv = env.ETCD_DISCOVERY_SRV;
  if (env.ETCD_KEY_FILE) out.etcd_key_file = env.ETCD_KEY_FILE;
  if (env.ETCD_CERT_FILE) out.etcd_cert_file = env.ETCD_CERT_FILE;
  if (env.ETCD_CA_CERT_FILE) out.etcd_ca_cert_file = env.ETCD_CA_CERT_FILE;
  if (env.KUBECONFIG || env.K8S_API_ROOT) {
    out.kubernetes = {};
    // Several files are merged, as kubectl does (src/k8s/client.ts).
    if (env.KUBECONFIG) out.kubernetes.kubeconfig_paths = env.KUBECONFIG.split(':').filter(Boolean);
    if (env.K8S_API_ROOT) out.kubernetes.k8s_api_root = env.K8S_API_ROOT;
  }
  if (out.datastore_type === 'etcdv3' && !out.etcd_endpoints && !out.etcd_discovery_srv) {
    throw new CtlError('DATASTORE_TYPE=etcdv3 needs ETCD_ENDPOINTS (e.g. http://127.0.0.1:2379) or ETCD_DISCOVERY_SRV');
  }
  return out;
}

async function defaultOpen(conf: DatastoreConfig): Promise<Datastore> {
  const { openDatastore } = await import('../datastore/index.js');
  return openDatastore(conf);
}

class Session implements CtlSession {
  private ds: Datastore | undefined;
  /** --kubeconfig and --context, before the command or among its flags. */
  kubeconfig: string | undefined;
  context: string | undefined;
  constructor(
    private readonly io: CtlIO,
    /** --config, given before the command or among its flags. */
    public configFile: string | undefined,
  ) {}
  config(): DatastoreConfig | undefined {
    let base = datastoreConfig(this.configFile, this.io);
    if (!base && !this.configFile) {
      const dflt = defaultCtlConfig(this.io);
      if (dflt) base = readCtlConfig(dflt, this.io);
    }
    // --kubeconfig alone: the kubernetes datastore in that cluster.
    if (!base && this.kubeconfig) base = { datastore_type: 'kubernetes' };
    if (!base) return undefined;
    return applyKubeAccess(base, this.io, { kubeconfig: this.kubeconfig ? resolvePath(this.io, this.kubeconfig) : undefined, context: this.context });
  }
  async datastore(): Promise<Datastore> {
    if (this.ds) return this.ds;
    const conf = this.config();
    if (!conf) {
      throw new CtlError('no datastore configured: pass --config /etc/cni/net.d/10-netplugin.conflist, or set ETCD_ENDPOINTS (etcd) or DATASTORE_TYPE=kubernetes with KUBECONFIG');
    }
    conf.timeoutMs ??= 10_000;
    this.ds = await (this.io.openDatastore ?? defaultOpen)(conf);
    return this.ds;
  }
  /** The datastore for a command that writes: refused when this client is older than the cluster (SPEC Versioning 3). */
  async writable(): Promise<Datastore> {
    const ds = await this.datastore();
    await refuseOlderClient(ds);
    return ds;
  }
  /** A Kubernetes API client from the datastore settings (KUBECONFIG / K8S_API_ROOT, or in-cluster). */
  async kube(): Promise<import('../k8s/client.js').KubeClient> {
    const { createKubeClient } = await import('../k8s/client.js');
    const client = await createKubeClient({ ...this.config()?.kubernetes, timeoutMs: 10_000 });
    this.closers.push(() => client.close());
    return client;
  }
  /**
   * With Kubernetes access (the kubernetes datastore, or KUBECONFIG beside
   * etcd), `ipam check` and `ipam release` ask the API server whether a pod exists.
   */
  async checkOptions(): Promise<CheckOptions> {
    const conf = this.config();
    if ((conf?.datastore_type !== 'kubernetes' && !conf?.kubernetes?.kubeconfig) || this.io.openDatastore) return {};
    const client = await this.kube();
    return {
      podExists: async (ns, name) => {
        try {
          await client.getPod(ns, name);
          return true;
        } catch (e) {
          if (DatastoreError.is(e, 'NotFound')) return false;
          throw e;
        }
      },
    };
  }
  private readonly closers: Array<() => void> = [];
  async close(): Promise<void> {
    for (const c of this.closers.splice(0)) c();
    const ds = this.ds;
    this.ds = undefined;
    if (ds) await ds.close().catch(() => undefined);
  }
}

function errorLine(e: unknown): string {
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

export async function runCtl(argv: string[], io: CtlIO): Promise<number> {
  // The command is the first positional word; global flags may come before it.
  let i = 0;
  let configFile: string | undefined;
  const globals: { kubeconfig?: string; context?: string; 'log-format'?: string } = {};
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
    const g = /^--(kubeconfig|context|log-format)(?:=(.*))?$/.exec(a);
    if (g) {
      const v = g[2] ?? argv[i + 1];
      if (v === undefined) return fail(io, new CtlError(`--${g[1]} needs a value`));
      globals[g[1] as keyof typeof globals] = v;
      i += g[2] === undefined ? 2 : 1;
      continue;
    }
    return fail(io, new CtlError(`unknown flag ${a}${suggestFlag(a, ['--config', '--kubeconfig', '--context', '--log-format', '--help', '--version'])}; run 'netpluginctl --help'`));
  }
  const after = argv.slice(i + 1);
  const logFormat = globals['log-format'] ?? pairFlag(after, '--log-format') ?? after.find((a) => a.startsWith('--log-format='))?.slice('--log-format='.length);
  if (logFormat !== undefined && logFormat !== 'text' && logFormat !== 'json') {
    return fail(io, new CtlError(`--log-format ${JSON.stringify(logFormat)} is not text or json`));
  }
  const json = logFormat === 'json';
  const cmd = argv[i];
  const rest = stripPair(argv.slice(i + 1), '--log-format');
  if (!cmd || cmd === 'help') return help(io, rest.join(' '));
  const session = new Session(io, configFile);
  session.kubeconfig = globals.kubeconfig;
  session.context = globals.context;
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

function fail(io: CtlIO, e: unknown, json = false): number {
  if (json) {
    io.stderr(JSON.stringify({ time: new Date().toISOString(), level: 'ERROR', msg: errorLine(e), ...(e instanceof CtlError ? { exitCode: e.exitCode } : {}) }) + '\n');
    return e instanceof CtlError ? e.exitCode : 1;
  }
  io.stderr(`error: ${errorLine(e)}\n`);
  if (io.env.NETPLUGIN_DEBUG === '1' && e instanceof Error && e.stack) io.stderr(e.stack + '\n');
  return e instanceof CtlError ? e.exitCode : 1;
}

async function dispatch(cmd: string, rest: string[], io: CtlIO, s: Session): Promise<number> {
  switch (cmd) {
    case 'apply':
    case 'create':
    case 'replace': {
      const p = parse(rest, [{ name: 'filename', short: 'f', type: 'string' }, DRY_RUN], cmd);
      if (bool(p, 'help')) return help(io, cmd);
      cfg(p, s);
      const file = str(p, 'filename');
      if (!file) throw new CtlError(`${cmd} needs -f FILE (or -f - for stdin)`);
      if (p.positional.length) throw new CtlError(`${cmd} takes no arguments besides -f FILE; got ${p.positional.join(' ')}`);
      return cmdWrite(await s.writable(), io, file, cmd, dryRun(p));
    }
    case 'validate': {
      const p = parse(rest, [{ name: 'filename', short: 'f', type: 'string' }], cmd);
      if (bool(p, 'help')) return help(io, cmd);
      const file = str(p, 'filename');
      if (!file) throw new CtlError('validate needs -f FILE|DIR|-');
      noPositional(p, cmd);
      return cmdValidate(io, file);
    }
    case 'label':
    case 'patch': {
      const p = parse(
        rest,
        [
          { name: 'namespace', short: 'n', type: 'string' },
          { name: 'overwrite', type: 'bool' },
          { name: 'type', type: 'string' },
          { name: 'patch', short: 'p', type: 'string' },
          DRY_RUN,
        ],
        cmd,
      );
      if (bool(p, 'help')) return help(io, cmd);
      cfg(p, s);
      // Check the arguments before connecting.
      const t = (await import('./edit.js')).target(p.positional, str(p, 'namespace'), cmd);
      if (cmd === 'label') (await import('./edit.js')).parseLabelArgs(t.rest);
      const common = { positional: p.positional, namespace: str(p, 'namespace'), dryRun: dryRun(p) };
      return cmd === 'label'
        ? cmdLabel(await s.writable(), io, { ...common, overwrite: bool(p, 'overwrite') })
        : cmdPatch(await s.writable(), io, { ...common, type: str(p, 'type'), patch: str(p, 'patch') });
    }
    case 'completion': {
      const shell = rest[0];
      if (!shell || shell === '--help' || shell === '-h') return help(io, cmd);
      io.stdout(completionScript(shell, Object.keys(HELP).filter((k) => k && !k.includes(' ')), COMPLETION_FLAGS));
      return 0;
    }
    case 'get': {
      const p = parse(
        rest,
        [
          { name: 'output', short: 'o', type: 'string' },
          { name: 'namespace', short: 'n', type: 'string' },
          { name: 'all-namespaces', short: 'A', type: 'bool' },
          { name: 'selector', short: 'l', type: 'string' },
          { name: 'no-headers', type: 'bool' },
        ],
        cmd,
      );
      if (bool(p, 'help')) return help(io, cmd);
      cfg(p, s);
      let [kind, ...names] = p.positional;
      // get KIND/NAME [KIND/NAME...], as kubectl takes them.
      if (kind?.includes('/')) {
        const refs = p.positional.map((r) => r.split('/', 2) as [string, string | undefined]);
        const kinds = new Set(refs.map(([k]) => resolveKind(k).kind));
        if (kinds.size > 1 || refs.some(([, n]) => !n)) throw new CtlError(`get KIND/NAME: give names of one kind, each as KIND/NAME (got ${p.positional.join(' ')})`);
        kind = refs[0]![0];
        names = refs.map(([, n]) => n!);
      }
      if (!kind) throw new CtlError(`get needs a kind, e.g. 'netpluginctl get ippools'`);
      // Resolve the kind before connecting so a typo fails fast.
      resolveKind(kind);
      return cmdGet(await s.datastore(), io, {
        kind,
        names,
        namespace: str(p, 'namespace'),
        allNamespaces: bool(p, 'all-namespaces'),
        output: str(p, 'output'),
        selector: str(p, 'selector'),
        noHeaders: bool(p, 'no-headers'),
      });
    }
    case 'delete': {
      const p = parse(
        rest,
        [
          { name: 'filename', short: 'f', type: 'string' },
          { name: 'namespace', short: 'n', type: 'string' },
          { name: 'force', type: 'bool' },
          { name: 'ignore-not-found', type: 'bool' },
          DRY_RUN,
        ],
        cmd,
      );
      if (bool(p, 'help')) return help(io, cmd);
      cfg(p, s);
      const [kind, ...names] = p.positional;
      if (kind && !str(p, 'filename')) resolveKind(kind);
      return cmdDelete(await s.writable(), io, {
        kind,
        names,
        file: str(p, 'filename'),
        namespace: str(p, 'namespace'),
        force: bool(p, 'force'),
        ignoreNotFound: bool(p, 'ignore-not-found'),
        dryRun: dryRun(p),
      });
    }
    case 'policy': {
      const sub = rest[0];
      if (!sub || sub === '--help' || sub === '-h') return help(io, 'policy explain');
      if (sub !== 'explain') throw new CtlError(`unknown policy command '${sub}'; try 'netpluginctl policy explain POD'`);
      const p = parse(
        rest.slice(1),
        [
          { name: 'namespace', short: 'n', type: 'string' },
          { name: 'peer', type: 'string' },
          { name: 'port', type: 'string' },
          { name: 'source-port', type: 'string' },
          { name: 'protocol', type: 'string' },
          { name: 'output', short: 'o', type: 'string' },
        ],
        'policy explain',
      );
      if (bool(p, 'help')) return help(io, 'policy explain');
      cfg(p, s);
      const [pod, ...extra] = p.positional;
      if (!pod || extra.length) throw new CtlError(`policy explain takes one pod name, e.g. 'netpluginctl policy explain web-0 -n shop --peer shop/client-1 --port 80'`);
      const { cmdPolicyExplain } = await import('./policy.js');
      const opt = (n: string) => str(p, n);
      return cmdPolicyExplain(await s.datastore(), io, {
        pod,
        ...(opt('namespace') ? { namespace: opt('namespace')! } : {}),
        ...(opt('peer') ? { peer: opt('peer')! } : {}),
        ...(opt('port') ? { port: opt('port')! } : {}),
        ...(opt('source-port') ? { sourcePort: opt('source-port')! } : {}),
        ...(opt('protocol') ? { protocol: opt('protocol')! } : {}),
        ...(opt('output') ? { output: opt('output')! } : {}),
      });
    }
    case 'ipam': {
      const sub = rest[0];
      if (!sub || sub === '--help' || sub === '-h') return help(io, 'ipam');
      const args = rest.slice(1);
      if (sub === 'show') {
        const p = parse(args, [{ name: 'show-blocks', type: 'bool' }, { name: 'ip', type: 'string' }, { name: 'output', short: 'o', type: 'string' }], 'ipam show');
        if (bool(p, 'help')) return help(io, 'ipam show');
        cfg(p, s);
        noPositional(p, 'ipam show');
        return cmdIpamShow(await s.datastore(), io, { showBlocks: bool(p, 'show-blocks'), ip: str(p, 'ip'), output: str(p, 'output') });
      }
      if (sub === 'check') {
        const p = parse(args, [{ name: 'output', short: 'o', type: 'string' }, { name: 'json', type: 'bool' }], 'ipam check');
        if (bool(p, 'help')) return help(io, 'ipam check');
        cfg(p, s);
        noPositional(p, 'ipam check');
        const out = str(p, 'output');
        if (out === 'json') throw new CtlError(`ipam check -o takes a report file name; use --json to print the report`);
        try {
          return await cmdIpamCheck(await s.datastore(), io, { output: out, json: bool(p, 'json') }, await s.checkOptions());
        } catch (e) {
          // 1 means "problems found"; a check that could not run is 2.
          throw new CtlError(errorLine(e), 2);
        }
      }
      if (sub === 'release') {
        const p = parse(args, [{ name: 'ip', type: 'list' }, { name: 'from-report', type: 'string' }, { name: 'force', type: 'bool' }, DRY_RUN], 'ipam release');
        if (bool(p, 'help')) return help(io, 'ipam release');
        cfg(p, s);
        noPositional(p, 'ipam release');
        const ds = await s.writable();
        const { Ipam } = await import('../ipam/index.js');
        // No host lock: the operator runs this from anywhere; the allocator's compare-and-swap keeps it safe.
        const ipam = new Ipam(ds, { lockPath: null });
        return cmdIpamRelease(ds, io, ipam, { ips: list(p, 'ip'), fromReport: str(p, 'from-report'), force: bool(p, 'force'), dryRun: dryRun(p) }, await s.checkOptions());
      }
      throw new CtlError(`unknown ipam command ${JSON.stringify(sub)}; use show, check or release`);
    }
    case 'datastore': {
      const sub = rest[0];
      if (!sub || sub === '--help' || sub === '-h') return help(io, 'datastore');
      const args = rest.slice(1);
      if (sub === 'init') {
        const p = parse(args, [{ name: 'cluster-type', type: 'string' }, { name: 'output', short: 'o', type: 'string' }], 'datastore init');
        if (bool(p, 'help')) return help(io, 'datastore init');
        cfg(p, s);
        noPositional(p, 'datastore init');
        const r = await initDatastore(await s.writable(), { clusterType: str(p, 'cluster-type') });
        if (str(p, 'output') === 'json') io.stdout(JSON.stringify(r.clusterInformation, null, 2) + '\n');
        else {
          const ci = r.clusterInformation.spec;
          io.stdout(`clusterinformation/default ${r.action}: version ${ci.netpluginVersion}, type ${ci.clusterType ?? '(none)'}, ready ${ci.datastoreReady}, guid ${ci.clusterGUID}\n`);
        }
        return 0;
      }
      if (sub === 'ready') {
        const p = parse(args, [{ name: 'set', type: 'string' }], 'datastore ready');
        if (bool(p, 'help')) return help(io, 'datastore ready');
        cfg(p, s);
        noPositional(p, 'datastore ready');
        const v = str(p, 'set');
        if (v !== 'true' && v !== 'false') throw new CtlError(`datastore ready needs --set=true or --set=false`);
        const r = await initDatastore(await s.writable(), { datastoreReady: v === 'true' });
        io.stdout(`clusterinformation/default datastoreReady=${r.clusterInformation.spec.datastoreReady}\n`);
        return 0;
      }
      if (sub === 'migrate') return (await import('./migrate.js')).cmdMigrate(args, io, s);
      throw new CtlError(`unknown datastore command ${JSON.stringify(sub)}; use init, ready or migrate`);
    }
    case 'version': {
      const p = parse(rest, [{ name: 'output', short: 'o', type: 'string' }], cmd);
      if (bool(p, 'help')) return help(io, cmd);
      cfg(p, s);
      const json = str(p, 'output') === 'json';
      const conf = s.config();
      const out: { clientVersion: string; clusterVersion?: string; clusterType?: string; datastoreType?: string; clientOlderThanCluster?: boolean } = { clientVersion: NETPLUGIN_VERSION };
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
          if (DatastoreError.is(e, 'NotFound')) out.clusterVersion = 'unknown (datastore not initialised: run netpluginctl datastore init)';
          else err = e;
        }
      }
      if (json) io.stdout(JSON.stringify(out, null, 2) + '\n');
      else {
        io.stdout(`Client Version:    ${out.clientVersion}\n`);
        if (out.clusterVersion) io.stdout(`Cluster Version:   ${out.clusterVersion}\n`);
        if (out.clusterType) io.stdout(`Cluster Type:      ${out.clusterType}\n`);
      }
      if (out.clientOlderThanCluster) io.stderr(`warning: this client (${out.clientVersion}) is older than the cluster (${out.clusterVersion}); it refuses to write: install netpluginctl ${out.clusterVersion}\n`);
      if (err) throw err;
      return 0;
    }
    case 'install-cni':
      return cmdInstallCni(rest, io, s);
    case 'installation':
      return (await import('./installation.js')).cmdInstallation(rest, io, s);
    case 'upgrade':
      return (await import('./upgrade.js')).cmdUpgrade(rest, io, s);
    case 'uninstall-cni': {
      const p = parse(
        rest,
        [
          { name: 'bin-dir', type: 'string' },
          { name: 'conf-dir', type: 'string' },
          { name: 'conf-name', type: 'string' },
          { name: 'agent', type: 'bool' },
          { name: 'systemd-dir', type: 'string' },
        ],
        cmd,
      );
      if (bool(p, 'help')) return help(io, cmd);
      noPositional(p, cmd);
      const removed = uninstallCni({
        binDir: str(p, 'bin-dir') ?? io.env.CNI_BIN_DIR ?? '/opt/cni/bin',
        confDir: str(p, 'conf-dir') ?? io.env.CNI_NET_DIR ?? '/etc/cni/net.d',
        confName: str(p, 'conf-name') ?? io.env.CNI_CONF_NAME ?? '10-netplugin.conflist',
        agent: bool(p, 'agent'),
        systemdDir: str(p, 'systemd-dir') ?? '/etc/systemd/system',
      });
      for (const r of removed) io.stdout(`removed ${r}\n`);
      if (!removed.length) io.stdout('nothing to remove\n');
      return 0;
    }
    default:
      throw new CtlError(`unknown command ${JSON.stringify(cmd)}; run 'netpluginctl --help'`);
  }
}

/** --dry-run (kubectl's --dry-run=client is accepted too): check everything, write nothing. */
const DRY_RUN: FlagSpec = { name: 'dry-run', type: 'bool' };
function dryRun(p: ParsedArgs): boolean {
  return bool(p, 'dry-run') === true;
}
/** kubectl's --dry-run=client|none|server spelled as our boolean flag. */
function normalizeDryRun(argv: string[]): string[] {
  return argv.map((a) => {
    if (a === '--dry-run=client') return '--dry-run';
    if (a === '--dry-run=none') return '--dry-run=false';
    if (a === '--dry-run=server') throw new CtlError('--dry-run=server is not supported: netpluginctl checks locally; use --dry-run (or --dry-run=client)');
    return a;
  });
}

const COMPLETION_FLAGS = ['--config', '--kubeconfig', '--context', '--log-format', '--help', '--version', '-o', '-n', '-A', '-l', '-f', '--no-headers', '--dry-run', '--force', '--overwrite', '--type', '-p'];

function cfg(p: ParsedArgs, s: Session): void {
  const c = str(p, 'config');
  if (c) s.configFile = c;
  const k = str(p, 'kubeconfig');
  if (k) s.kubeconfig = k;
  const ctx = str(p, 'context');
  if (ctx) s.context = ctx;
}

function noPositional(p: ParsedArgs, cmd: string): void {
  if (p.positional.length) throw new CtlError(`'${cmd}' takes no arguments; got ${p.positional.join(' ')}`);
}

const INSTALL_FLAGS: FlagSpec[] = [
  ...['host-root', 'host-package-dir', 'host-node', 'etcd-tls-from', 'bin-dir', 'conf-dir', 'conf-name', 'network-name', 'cni-version', 'datastore-type', 'etcd-endpoints', 'etcd-discovery-srv', 'etcd-key-file', 'etcd-cert-file', 'etcd-ca-cert-file', 'kubeconfig', 'k8s-api-root', 'nodename', 'mtu', 'ipam', 'policy', 'log-level', 'log-file-path', 'from-template', 'shim', 'package-dir', 'systemd-dir'].map(
    (name) => ({ name, type: 'string' as const }),
  ),
  { name: 'subnet', type: 'list' },
  { name: 'portmap', type: 'bool' },
  { name: 'launcher', type: 'bool' },
  { name: 'agent', type: 'bool' },
  { name: 'init-datastore', type: 'bool' },
  { name: 'output', short: 'o', type: 'string' },
  { name: 'dry-run', type: 'bool' },
];

async function cmdInstallCni(rest: string[], io: CtlIO, s: Session): Promise<number> {
  const p = parse(rest, INSTALL_FLAGS, 'install-cni');
  if (bool(p, 'help')) return help(io, 'install-cni');
  cfg(p, s);
  const configFile = s.configFile;
  noPositional(p, 'install-cni');
  const env = io.env;
  const abs = (v: string | undefined) => (v ? resolvePath(io, v) : undefined);
  const dt = str(p, 'datastore-type') ?? env.DATASTORE_TYPE ?? 'etcdv3';
  if (dt !== 'etcdv3' && dt !== 'kubernetes') throw new CtlError(`--datastore-type ${JSON.stringify(dt)} is not supported; use etcdv3 or kubernetes`);
  const ipam = str(p, 'ipam') ?? 'netplugin-ipam';
  if (ipam !== 'netplugin-ipam' && ipam !== 'host-local') throw new CtlError(`--ipam ${JSON.stringify(ipam)} is not supported; use netplugin-ipam or host-local`);
  const policy = str(p, 'policy');
  if (policy !== undefined && policy !== 'k8s') throw new CtlError(`--policy ${JSON.stringify(policy)} is not supported; the only policy type is k8s`);
  const mtuText = str(p, 'mtu') ?? env.CNI_MTU;
  const mtu = mtuText === undefined || mtuText === '' ? undefined : Number(mtuText);
  if (mtu !== undefined && !Number.isInteger(mtu)) throw new CtlError(`--mtu ${JSON.stringify(mtuText)} is not an integer; use e.g. 1450`);
  const kubeconfig = str(p, 'kubeconfig') ?? env.KUBECONFIG?.split(':')[0];
  const opts: InstallCniOptions = {
    binDir: resolvePath(io, str(p, 'bin-dir') ?? env.CNI_BIN_DIR ?? '/opt/cni/bin'),
    confDir: resolvePath(io, str(p, 'conf-dir') ?? env.CNI_NET_DIR ?? '/etc/cni/net.d'),
    confName: str(p, 'conf-name') ?? env.CNI_CONF_NAME ?? '10-netplugin.conflist',
    networkName: str(p, 'network-name') ?? 'k8s-pod-network',
    cniVersion: str(p, 'cni-version') ?? '1.0.0',
    datastoreType: dt,
    etcdEndpoints: str(p, 'etcd-endpoints') ?? env.ETCD_ENDPOINTS,
    etcdDiscoverySrv: str(p, 'etcd-discovery-srv') ?? env.ETCD_DISCOVERY_SRV,
    etcdKeyFile: abs(str(p, 'etcd-key-file') ?? env.ETCD_KEY_FILE),
    etcdCertFile: abs(str(p, 'etcd-cert-file') ?? env.ETCD_CERT_FILE),
    etcdCaCertFile: abs(str(p, 'etcd-ca-cert-file') ?? env.ETCD_CA_CERT_FILE),
    kubeconfig: abs(kubeconfig),
    k8sApiRoot: str(p, 'k8s-api-root') ?? env.K8S_API_ROOT,
    nodename: str(p, 'nodename') ?? env.KUBERNETES_NODE_NAME,
    mtu,
    ipam,
    subnets: list(p, 'subnet'),
    portmap: bool(p, 'portmap') ?? true,
    policy: policy as 'k8s' | undefined,
    logLevel: str(p, 'log-level') ?? 'info',
    logFilePath: str(p, 'log-file-path') ?? '/var/log/netplugin/cni/cni.log',
    fromTemplate: abs(str(p, 'from-template')),
    launcher: bool(p, 'launcher'),
    shimPath: abs(str(p, 'shim')),
    agent: bool(p, 'agent'),
    systemdDir: resolvePath(io, str(p, 'systemd-dir') ?? '/etc/systemd/system'),
    hostRoot: abs(str(p, 'host-root') ?? env.NETPLUGIN_HOST_ROOT),
    hostPackageDir: str(p, 'host-package-dir'),
    hostNode: str(p, 'host-node'),
    etcdTlsFrom: abs(str(p, 'etcd-tls-from')),
    dryRun: dryRun(p),
  };
  for (const [flag, v] of [['--host-package-dir', opts.hostPackageDir], ['--host-node', opts.hostNode]] as const) {
    if (v && !v.startsWith('/')) throw new CtlError(`${flag} ${JSON.stringify(v)} must be an absolute path on the host`);
  }
  const packageDir = abs(str(p, 'package-dir')) ?? io.packageDir ?? defaultPackageDir();
  const r = installCni(opts, { packageDir, nodePath: io.nodePath ?? process.execPath, warn: (m) => io.stderr(`warning: ${m}\n`), inPod: io.inPod ?? detectPod() });

  let init: string | undefined;
  if (bool(p, 'init-datastore') && !opts.dryRun) {
    // The datastore the installed conflist names, unless --config says otherwise.
    const conf: DatastoreConfig = configFile
      ? datastoreConfig(configFile, io)!
      : {
          datastore_type: opts.datastoreType,
          ...(opts.etcdEndpoints ? { etcd_endpoints: opts.etcdEndpoints } : {}),
          ...(opts.etcdDiscoverySrv ? { etcd_discovery_srv: opts.etcdDiscoverySrv } : {}),
          ...(opts.etcdKeyFile ? { etcd_key_file: opts.etcdKeyFile } : {}),
          ...(opts.etcdCertFile ? { etcd_cert_file: opts.etcdCertFile } : {}),
          ...(opts.etcdCaCertFile ? { etcd_ca_cert_file: opts.etcdCaCertFile } : {}),
          ...(opts.kubeconfig || opts.k8sApiRoot
            ? { kubernetes: { ...(opts.kubeconfig ? { kubeconfig: opts.kubeconfig } : {}), ...(opts.k8sApiRoot ? { k8s_api_root: opts.k8sApiRoot } : {}) } }
            : {}),
        };
    conf.timeoutMs = 10_000;
    const ds = await (io.openDatastore ?? defaultOpen)(conf);
    try {
      const res = await initDatastore(ds, { clusterType: opts.datastoreType === 'kubernetes' ? 'k8s' : undefined });
      init = res.action;
    } finally {
      await ds.close().catch(() => undefined);
    }
  }

  if (str(p, 'output') === 'json') {
    io.stdout(JSON.stringify({ ...r, packageDir, ...(init ? { datastoreInit: init } : {}) }, null, 2) + '\n');
    return 0;
  }
  if (opts.dryRun) {
    io.stdout(`dry run: nothing written; install-cni would write:\n`);
    for (const f of r.files) io.stdout(`  ${f.path}\n`);
    io.stdout(JSON.stringify(r.conflist, null, 2) + '\n');
    return 0;
  }
  io.stdout(
    r.kind === 'shim'
      ? `installed the native shim (${r.shimSource}) as ${opts.binDir}/netplugin and netplugin-ipam; per-exec fallback: ${packageDir}/dist\n`
      : `installed sh launchers as ${opts.binDir}/netplugin and netplugin-ipam (no native shim found; build it for faster pod setup): ${packageDir}/dist\n`,
  );
  for (const f of r.files) io.stdout(`  ${f.path} ${f.action}\n`);
  if (init) io.stdout(`clusterinformation/default ${init}\n`);
  if (opts.agent) io.stdout(`agent unit written; start it with: systemctl daemon-reload && systemctl enable --now netplugin-node\n`);
  return 0;
}
