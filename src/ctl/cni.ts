// `netpluginctl install-cni` and `uninstall-cni`: flags and environment to
// options, and what was installed printed; the installation itself is
// src/ctl/install-cni.ts.
import { datastoreConfigFromEnv } from '../datastore/index.js';
import { initDatastore } from '../datastore/init.js';
import {
  bool,
  CtlError,
  dryRun,
  list,
  noPositional,
  parseCommand,
  printHelp,
  str,
  type CtlCommand,
  type CtlGroup,
  type DatastoreConfig,
  type FlagSpec,
  DRY_RUN,
} from './io.js';
import {
  defaultPackageDir,
  detectPod,
  installCni,
  optionsDatastore,
  resolvePath,
  uninstallCni,
  type InstallCniOptions,
} from './install-cni.js';
import { datastoreConfig, defaultOpen } from './session.js';

const CNI_HELP = {
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
  --plugin-log-format F      plugin log lines: text (default) or json (env LOG_FORMAT; netconf log_format)
  --from-template FILE       fill __PLACEHOLDERS__ in FILE instead of generating the conflist
  --launcher                 install the sh launcher even when a shim binary exists
  --shim PATH                shim binary to install (default build/shim or prebuilds/linux-<arch>)
  --package-dir DIR          netplugin package dir holding dist/ (default: this installation)
  --agent                    also write a systemd unit for netplugin-node (--systemd-dir, default /etc/systemd/system)
  --init-datastore           also run 'datastore init' against the configured datastore
  -o json                    print what was installed as JSON
  --dry-run                  check everything and print what would be written; write nothing
`,
  'uninstall-cni': `Usage: netpluginctl uninstall-cni [--bin-dir DIR] [--conf-dir DIR] [--conf-name NAME] [--agent]

Removes the conflist (only if it is a netplugin one), the plugin executables, the fallback
file, and with --agent the systemd unit.
`,
} satisfies Record<string, string>;

const INSTALL_FLAGS: FlagSpec[] = [
  ...[
    'host-root',
    'host-package-dir',
    'host-node',
    'etcd-tls-from',
    'bin-dir',
    'conf-dir',
    'conf-name',
    'network-name',
    'cni-version',
    'datastore-type',
    'etcd-endpoints',
    'etcd-discovery-srv',
    'etcd-key-file',
    'etcd-cert-file',
    'etcd-ca-cert-file',
    'kubeconfig',
    'k8s-api-root',
    'nodename',
    'mtu',
    'ipam',
    'policy',
    'log-level',
    'log-file-path',
    'plugin-log-format',
    'from-template',
    'shim',
    'package-dir',
    'systemd-dir',
  ].map((name) => ({ name, type: 'string' as const })),
  { name: 'subnet', type: 'list' },
  { name: 'portmap', type: 'bool' },
  { name: 'launcher', type: 'bool' },
  { name: 'agent', type: 'bool' },
  { name: 'init-datastore', type: 'bool' },
  { name: 'output', short: 'o', type: 'string' },
  DRY_RUN,
];

const runInstallCni: CtlCommand = async (rest, io, s) => {
  const p = parseCommand(rest, INSTALL_FLAGS, 'install-cni', s);
  if (bool(p, 'help')) return printHelp(io, CNI_HELP['install-cni']);
  const configFile = s.configFile;
  noPositional(p, 'install-cni');
  const env = io.env;
  const abs = (v: string | undefined) => (v ? resolvePath(io, v) : undefined);
  const dtFlag = str(p, 'datastore-type');
  if (dtFlag !== undefined && dtFlag !== 'etcdv3' && dtFlag !== 'kubernetes')
    throw new CtlError(`--datastore-type ${JSON.stringify(dtFlag)} is not supported; use etcdv3 or kubernetes`);
  // The environment's datastore settings (DATASTORE_TYPE, ETCD_*, KUBECONFIG, K8S_API_ROOT) are the flags' defaults.
  let envDs: DatastoreConfig;
  try {
    envDs = datastoreConfigFromEnv({
      ...env,
      DATASTORE_TYPE: dtFlag ?? env.DATASTORE_TYPE,
      DATASTORE_TIMEOUT_MS: undefined,
    });
  } catch (e) {
    throw new CtlError((e as Error).message);
  }
  const dt = envDs.datastore_type ?? 'etcdv3';
  const ipam = str(p, 'ipam') ?? 'netplugin-ipam';
  if (ipam !== 'netplugin-ipam' && ipam !== 'host-local')
    throw new CtlError(`--ipam ${JSON.stringify(ipam)} is not supported; use netplugin-ipam or host-local`);
  const policy = str(p, 'policy');
  if (policy !== undefined && policy !== 'k8s')
    throw new CtlError(`--policy ${JSON.stringify(policy)} is not supported; the only policy type is k8s`);
  const mtuText = str(p, 'mtu') ?? env.CNI_MTU;
  const mtu = mtuText === undefined || mtuText === '' ? undefined : Number(mtuText);
  if (mtu !== undefined && !Number.isInteger(mtu))
    throw new CtlError(`--mtu ${JSON.stringify(mtuText)} is not an integer; use e.g. 1450`);
  const kubeconfig = str(p, 'kubeconfig') ?? envDs.kubernetes?.kubeconfig;
  // Not --log-format: that one is netpluginctl's own output format, taken anywhere on the command line.
  const logFormat = str(p, 'plugin-log-format') ?? (env.LOG_FORMAT || undefined);
  if (logFormat !== undefined && logFormat !== 'text' && logFormat !== 'json') {
    const v = JSON.stringify(logFormat);
    throw new CtlError(`--plugin-log-format (or LOG_FORMAT) ${v} is not supported; use text or json`);
  }
  const opts: InstallCniOptions = {
    binDir: resolvePath(io, str(p, 'bin-dir') ?? env.CNI_BIN_DIR ?? '/opt/cni/bin'),
    confDir: resolvePath(io, str(p, 'conf-dir') ?? env.CNI_NET_DIR ?? '/etc/cni/net.d'),
    confName: str(p, 'conf-name') ?? env.CNI_CONF_NAME ?? '10-netplugin.conflist',
    networkName: str(p, 'network-name') ?? 'k8s-pod-network',
    cniVersion: str(p, 'cni-version') ?? '1.0.0',
    datastoreType: dt,
    etcdEndpoints: str(p, 'etcd-endpoints') ?? envDs.etcd_endpoints,
    etcdDiscoverySrv: str(p, 'etcd-discovery-srv') ?? envDs.etcd_discovery_srv,
    etcdKeyFile: abs(str(p, 'etcd-key-file') ?? envDs.etcd_key_file),
    etcdCertFile: abs(str(p, 'etcd-cert-file') ?? envDs.etcd_cert_file),
    etcdCaCertFile: abs(str(p, 'etcd-ca-cert-file') ?? envDs.etcd_ca_cert_file),
    kubeconfig: abs(kubeconfig),
    k8sApiRoot: str(p, 'k8s-api-root') ?? envDs.kubernetes?.k8s_api_root,
    nodename: str(p, 'nodename') ?? env.KUBERNETES_NODE_NAME,
    mtu,
    ipam,
    subnets: list(p, 'subnet'),
    portmap: bool(p, 'portmap') ?? true,
    policy: policy as 'k8s' | undefined,
    logLevel: str(p, 'log-level') ?? 'info',
    logFilePath: str(p, 'log-file-path') ?? '/var/log/netplugin/cni/cni.log',
    logFormat: logFormat as 'text' | 'json' | undefined,
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
  for (const [flag, v] of [
    ['--host-package-dir', opts.hostPackageDir],
    ['--host-node', opts.hostNode],
  ] as const) {
    if (v && !v.startsWith('/'))
      throw new CtlError(`${flag} ${JSON.stringify(v)} must be an absolute path on the host`);
  }
  const packageDir = abs(str(p, 'package-dir')) ?? io.packageDir ?? defaultPackageDir();
  const r = installCni(opts, {
    packageDir,
    nodePath: io.nodePath ?? process.execPath,
    warn: (m) => io.stderr(`warning: ${m}\n`),
    inPod: io.inPod ?? detectPod(),
  });

  let init: string | undefined;
  if (bool(p, 'init-datastore') && !opts.dryRun) {
    // The datastore the installed conflist names, unless --config says otherwise.
    const conf: DatastoreConfig = configFile ? datastoreConfig(configFile, io)! : optionsDatastore(opts);
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
      ? `installed the native shim (${r.shimSource}) as ${opts.binDir}/netplugin and netplugin-ipam; per-exec ` +
          `fallback: ${packageDir}/dist\n`
      : `installed sh launchers as ${opts.binDir}/netplugin and netplugin-ipam (no native shim found; build it for ` +
          `faster pod setup): ${packageDir}/dist\n`,
  );
  for (const f of r.files) io.stdout(`  ${f.path} ${f.action}\n`);
  if (init) io.stdout(`clusterinformation/default ${init}\n`);
  if (opts.agent)
    io.stdout(`agent unit written; start it with: systemctl daemon-reload && systemctl enable --now netplugin-node\n`);
  return 0;
};

const runUninstallCni: CtlCommand = async (rest, io) => {
  const p = parseCommand(
    rest,
    [
      { name: 'bin-dir', type: 'string' },
      { name: 'conf-dir', type: 'string' },
      { name: 'conf-name', type: 'string' },
      { name: 'agent', type: 'bool' },
      { name: 'systemd-dir', type: 'string' },
    ],
    'uninstall-cni',
  );
  if (bool(p, 'help')) return printHelp(io, CNI_HELP['uninstall-cni']);
  noPositional(p, 'uninstall-cni');
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
};

/** install-cni, uninstall-cni. */
export const cniGroup: CtlGroup = {
  commands: { 'install-cni': runInstallCni, 'uninstall-cni': runUninstallCni },
  help: CNI_HELP,
};
