// install-cni: puts the plugin executables into the CNI bin dir and writes the
// network configuration list the runtime reads. Runs on every node (by hand,
// from a DaemonSet init container, or from configuration management), so it
// is idempotent, and every file appears atomically: a runtime exec'ing the
// plugin mid-install sees the old file or the new one, never a partial one.
import {
  accessSync,
  chmodSync,
  constants as fsConstants,
  closeSync,
  cpSync,
  existsSync,
  fsyncSync,
  mkdirSync,
  openSync,
  readdirSync,
  readFileSync,
  renameSync,
  rmSync,
  statSync,
  writeSync,
} from 'node:fs';
import { basename, dirname, isAbsolute, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseNetconf } from '../config/index.js';
import { CtlError, type CtlIO } from './io.js';
import type { DatastoreSettings } from '../datastore/settings.js';
import { isNetpluginConfig, netpluginEntries, netpluginEntry } from '../config/conflist.js';

const PLUGIN_NAMES = ['netplugin', 'netplugin-ipam'] as const;
const FALLBACK_FILE = 'netplugin.fallback';
const AGENT_UNIT = 'netplugin-node.service';

// Built from flags, each of which may be absent: an optional field may hold undefined.
export interface InstallCniOptions {
  binDir: string;
  confDir: string;
  confName: string;
  datastoreType: 'etcdv3' | 'kubernetes';
  etcdEndpoints?: string | undefined;
  etcdDiscoverySrv?: string | undefined;
  etcdKeyFile?: string | undefined;
  etcdCertFile?: string | undefined;
  etcdCaCertFile?: string | undefined;
  kubeconfig?: string | undefined;
  k8sApiRoot?: string | undefined;
  nodename?: string | undefined;
  mtu?: number | undefined;
  ipam: 'netplugin-ipam' | 'host-local';
  /** host-local ranges without Kubernetes (one range per CIDR); default: the node's pod CIDRs (usePodCidr). */
  subnets?: string[] | undefined;
  portmap: boolean;
  policy?: 'k8s' | undefined;
  logLevel: string;
  /** The plugin's log line format (netconf log_format); text when absent. */
  logFormat?: 'text' | 'json' | undefined;
  /** '' disables file logging. */
  logFilePath: string;
  networkName: string;
  cniVersion: string;
  fromTemplate?: string | undefined;
  /** Force the sh launcher even when a shim binary exists. */
  launcher?: boolean | undefined;
  /** Explicit shim binary (default: build/shim or prebuilds/linux-<arch>). */
  shimPath?: string | undefined;
  /** Also write a systemd unit for the node agent. */
  agent?: boolean | undefined;
  systemdDir: string;
  /**
   * The host's root filesystem as mounted in this (container) process, e.g.
   * /host. binDir, confDir and systemdDir stay host paths and are written
   * under it; the package is copied to hostPackageDir on the host and
   * netplugin.fallback names host paths, never this container's.
   */
  hostRoot?: string | undefined;
  /** Where the package goes on the host with hostRoot (default /opt/netplugin). */
  hostPackageDir?: string | undefined;
  /**
   * A directory holding etcd-key, etcd-cert and etcd-ca (a mounted Secret):
   * those present are copied to <confDir>/netplugin-tls/ (0600) and named in
   * the conflist, unless --etcd-*-file says otherwise.
   */
  etcdTlsFrom?: string | undefined;
  /**
   * The host's node executable (a host path); default: /usr/bin/node or /usr/local/bin/node when present under
   * hostRoot.
   */
  hostNode?: string | undefined;
  /** A conflist rendered elsewhere (installation apply): used as-is instead of generating one. */
  conflist?: Record<string, unknown> | undefined;
  /** Report what would be written ('would write') without touching anything. */
  dryRun?: boolean | undefined;
}

const DEFAULT_HOST_PACKAGE_DIR = '/opt/netplugin';
/** Secret keys (file names in the mount) and the netconf fields they fill. */
const ETCD_TLS_FILES = [
  ['etcd-key', 'etcdKeyFile', 'etcd_key_file'],
  ['etcd-cert', 'etcdCertFile', 'etcd_cert_file'],
  ['etcd-ca', 'etcdCaCertFile', 'etcd_ca_cert_file'],
] as const;
const ETCD_TLS_DIR = 'netplugin-tls';
/** Host paths where a distribution or the Node.js tarball puts node. */
const HOST_NODE_CANDIDATES = ['/usr/bin/node', '/usr/local/bin/node'];
/** What the per-exec entries need at run time (dist/ bundles load these lazily). */
const PACKAGE_PARTS = ['package.json', 'dist', 'prebuilds', 'node_modules'];

/**
 * True when this process runs in a Kubernetes pod (a service-account mount):
 * its paths (node, the package) are never the host's, where the runtime runs
 * the shim. Docker's and podman's marker files are not used: kind nodes and
 * development containers run the runtime in the same container, so there the
 * container is the host.
 */
export function detectPod(root = '/'): boolean {
  return existsSync(join(root, 'var/run/secrets/kubernetes.io/serviceaccount'));
}

interface InstalledFile {
  path: string;
  action: 'written' | 'unchanged' | 'would write';
}

interface InstallCniResult {
  kind: 'shim' | 'launcher';
  /** Absent when the sh launcher was installed. */
  shimSource?: string | undefined;
  files: InstalledFile[];
  conflist: Record<string, unknown>;
  warnings: string[];
}

/**
 * The package root: the nearest ancestor of this module holding our package.json (dist/ when bundled, src/ctl in
 * tests).
 */
export function defaultPackageDir(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  for (let i = 0; i < 6; i++) {
    const pj = join(dir, 'package.json');
    if (existsSync(pj)) {
      try {
        if ((JSON.parse(readFileSync(pj, 'utf8')) as { name?: string }).name === 'netplugin') return dir;
      } catch {
        // not ours; keep walking
      }
    }
    dir = dirname(dir);
  }
  throw new CtlError('cannot find the netplugin package directory (with dist/); pass --package-dir');
}

/** Candidate shim binaries, most specific first. */
export function shimCandidates(pkgDir: string): string[] {
  return [join(pkgDir, 'build/shim/netplugin-shim'), join(pkgDir, `prebuilds/linux-${process.arch}/netplugin-shim`)];
}

function sameFile(path: string, data: Buffer, mode: number): boolean {
  try {
    const st = statSync(path);
    if (!st.isFile() || (st.mode & 0o7777) !== mode || st.size !== data.length) return false;
    return readFileSync(path).equals(data);
  } catch {
    return false;
  }
}

/**
 * Writes `path` so that readers see either the old or the new content: a temp
 * file in the same directory (same filesystem, so rename is atomic), fsync'd
 * and chmod'ed before the rename. Renaming over a running executable is fine
 * (the old inode lives on), unlike writing into it (ETXTBSY).
 */
export function writeFileAtomic(path: string, data: Buffer | string, mode: number): InstalledFile {
  const buf = typeof data === 'string' ? Buffer.from(data) : data;
  if (sameFile(path, buf, mode)) return { path, action: 'unchanged' };
  const tmp = join(dirname(path), `.${basename(path)}.tmp-${process.pid}-${Math.random().toString(36).slice(2, 8)}`);
  try {
    const fd = openSync(tmp, 'wx', mode);
    try {
      let off = 0;
      while (off < buf.length) off += writeSync(fd, buf, off, buf.length - off);
      fsyncSync(fd);
    } finally {
      closeSync(fd);
    }
    // openSync's mode is filtered by the umask.
    chmodSync(tmp, mode);
    renameSync(tmp, path);
  } catch (e) {
    rmSync(tmp, { force: true });
    throw e;
  }
  return { path, action: 'written' };
}

/**
 * The per-exec entry the launcher runs: dist/<plugin>.cjs (the bundle through its
 * code cache, as the shim's fallback prefers it), or dist/<plugin>.mjs in a package built before it.
 */
function perExecEntry(pkgDir: string, plugin: string): string {
  return existsSync(join(pkgDir, 'dist', `${plugin}.cjs`)) ? `${plugin}.cjs` : `${plugin}.mjs`;
}

function launcherScript(node: string, pkgDir: string, plugin: string, entry: string): string {
  const q = (s: string) => `'${s.replace(/'/g, `'\\''`)}'`;
  return [
    '#!/bin/sh',
    `# ${plugin}: written by netpluginctl install-cni (no native shim was available).`,
    '# NODE_EXTRA_CA_CERTS would make every start read a CA bundle (~34 ms per pod operation).',
    `exec env -u NODE_EXTRA_CA_CERTS ${q(node)} ${q(join(pkgDir, 'dist', entry))} "$@"`,
    '',
  ].join('\n');
}

/**
 * The datastore settings the options name: the conflist entry's, and the
 * store `install-cni --init-datastore` opens. The etcd fields only for etcdv3.
 */
export function optionsDatastore(o: InstallCniOptions): DatastoreSettings {
  const s: DatastoreSettings = { datastore_type: o.datastoreType };
  if (o.datastoreType === 'etcdv3') {
    if (o.etcdEndpoints) s.etcd_endpoints = o.etcdEndpoints;
    if (o.etcdDiscoverySrv) s.etcd_discovery_srv = o.etcdDiscoverySrv;
    if (o.etcdKeyFile) s.etcd_key_file = o.etcdKeyFile;
    if (o.etcdCertFile) s.etcd_cert_file = o.etcdCertFile;
    if (o.etcdCaCertFile) s.etcd_ca_cert_file = o.etcdCaCertFile;
  }
  if (o.kubeconfig || o.k8sApiRoot) {
    s.kubernetes = {
      ...(o.kubeconfig ? { kubeconfig: o.kubeconfig } : {}),
      ...(o.k8sApiRoot ? { k8s_api_root: o.k8sApiRoot } : {}),
    };
  }
  return s;
}

/** The netplugin entry and the conflist, generated from the options. */
function buildConflist(o: InstallCniOptions): Record<string, unknown> {
  const entry: Record<string, unknown> = { type: 'netplugin', log_level: o.logLevel };
  if (o.logFilePath !== '') entry.log_file_path = o.logFilePath;
  // text is the plugin's default: a conflist without the field says the same.
  if (o.logFormat === 'json') entry.log_format = 'json';
  // The kubernetes block goes last, after ipam and policy (as the entry has always been written).
  const { kubernetes, ...store } = optionsDatastore(o);
  Object.assign(entry, store);
  if (o.nodename) entry.nodename = o.nodename;
  if (o.mtu !== undefined) entry.mtu = o.mtu;
  entry.ipam =
    o.ipam === 'host-local'
      ? {
          type: 'host-local',
          ranges: o.subnets?.length ? o.subnets.map((subnet) => [{ subnet }]) : [[{ subnet: 'usePodCidr' }]],
        }
      : { type: 'netplugin-ipam' };
  if (o.policy) entry.policy = { type: o.policy };
  if (kubernetes) entry.kubernetes = kubernetes;
  const plugins: unknown[] = [entry];
  // docs/install.md: the port-mapping entry is on by default; chaining needs CNI >= 0.3.0 (cniVersion is 1.0.0).
  if (o.portmap) plugins.push({ type: 'portmap', snat: true, capabilities: { portMappings: true } });
  return { name: o.networkName, cniVersion: o.cniVersion, plugins };
}

const PLACEHOLDER = /__([A-Z0-9_]+)__/g;

/** Template placeholders and the flag that fills each. */
const TEMPLATE_VARS: Record<
  string,
  { flag: string; value: (o: InstallCniOptions) => string | number | undefined; raw?: boolean }
> = {
  NETWORK_NAME: { flag: '--network-name', value: (o) => o.networkName },
  CNI_VERSION: { flag: '--cni-version', value: (o) => o.cniVersion },
  DATASTORE_TYPE: { flag: '--datastore-type', value: (o) => o.datastoreType },
  ETCD_ENDPOINTS: { flag: '--etcd-endpoints', value: (o) => o.etcdEndpoints },
  ETCD_KEY_FILE: { flag: '--etcd-key-file', value: (o) => o.etcdKeyFile },
  ETCD_CERT_FILE: { flag: '--etcd-cert-file', value: (o) => o.etcdCertFile },
  ETCD_CA_CERT_FILE: { flag: '--etcd-ca-cert-file', value: (o) => o.etcdCaCertFile },
  KUBECONFIG_FILEPATH: { flag: '--kubeconfig', value: (o) => o.kubeconfig },
  NODENAME: { flag: '--nodename', value: (o) => o.nodename },
  CNI_MTU: { flag: '--mtu', value: (o) => o.mtu, raw: true },
  LOG_LEVEL: { flag: '--log-level', value: (o) => o.logLevel },
  LOG_FILE_PATH: { flag: '--log-file-path', value: (o) => o.logFilePath },
  LOG_FORMAT: { flag: '--plugin-log-format', value: (o) => o.logFormat ?? 'text' },
  IPAM_TYPE: { flag: '--ipam', value: (o) => o.ipam },
};

/** Fills `__NAME__` placeholders (JSON-escaped inside strings; CNI_MTU bare) and checks the result is a conflist. */
function renderTemplate(text: string, o: InstallCniOptions, file: string): Record<string, unknown> {
  const missing = new Set<string>();
  const out = text.replace(PLACEHOLDER, (m, name: string) => {
    const v = TEMPLATE_VARS[name];
    if (!v) {
      missing.add(
        `${m} (unknown placeholder; known: ${Object.keys(TEMPLATE_VARS)
          .map((k) => `__${k}__`)
          .join(', ')})`,
      );
      return m;
    }
    const val = v.value(o);
    if (val === undefined || val === '') {
      missing.add(`${m} (set ${v.flag})`);
      return m;
    }
    return v.raw ? String(val) : JSON.stringify(String(val)).slice(1, -1);
  });
  if (missing.size) throw new CtlError(`--from-template ${file}: no value for ${[...missing].join(', ')}`);
  let conf: unknown;
  try {
    conf = JSON.parse(out);
  } catch (e) {
    throw new CtlError(`--from-template ${file}: the filled-in template is not valid JSON: ${(e as Error).message}`);
  }
  if (typeof conf !== 'object' || conf === null || !Array.isArray((conf as { plugins?: unknown }).plugins)) {
    throw new CtlError(`--from-template ${file}: expected a conflist (an object with a "plugins" array)`);
  }
  return conf as Record<string, unknown>;
}

/** Checks the netplugin entries the way the plugin will parse them, so a broken conflist is never installed. */
function checkConflist(conf: Record<string, unknown>, warn: (m: string) => void): void {
  const plugins = conf.plugins as Array<Record<string, unknown>>;
  if (typeof conf.name !== 'string' || !conf.name) throw new CtlError('conflist: "name" is missing');
  const entries = netpluginEntries(plugins);
  if (entries.length === 0) throw new CtlError('conflist: no plugin entry with "type": "netplugin"');
  for (const p of entries) {
    try {
      parseNetconf({ name: conf.name, cniVersion: conf.cniVersion, ...p }, { pluginType: 'netplugin', warn });
    } catch (e) {
      throw new CtlError(`conflist would be rejected by the plugin: ${(e as Error).message}`);
    }
  }
}

function checkOptions(o: InstallCniOptions): void {
  for (const [flag, v] of [
    ['--bin-dir', o.binDir],
    ['--conf-dir', o.confDir],
  ] as const) {
    if (!isAbsolute(v)) throw new CtlError(`${flag} ${JSON.stringify(v)} must be an absolute path`);
  }
  if (!/^[A-Za-z0-9][A-Za-z0-9_.-]*\.(conflist|conf|json)$/.test(o.confName)) {
    throw new CtlError(
      `--conf-name ${JSON.stringify(o.confName)} must be a file name ending in .conflist (e.g. 10-netplugin.conflist)`,
    );
  }
  if (o.mtu !== undefined && (!Number.isInteger(o.mtu) || o.mtu < 68 || o.mtu > 65535)) {
    throw new CtlError(`--mtu ${o.mtu} is out of range; use 68-65535 (e.g. 1450 under VXLAN, 1480 under IP-in-IP)`);
  }
  if (o.subnets?.length && o.ipam !== 'host-local')
    throw new CtlError(
      '--subnet is for --ipam host-local; netplugin-ipam takes its addresses from IPPools (netpluginctl apply)',
    );
  for (const sn of o.subnets ?? []) {
    if (!/^[0-9a-fA-F.:]+\/\d{1,3}$/.test(sn))
      throw new CtlError(`--subnet ${JSON.stringify(sn)} is not a CIDR; use e.g. 10.88.0.0/16`);
  }
  if (o.fromTemplate || o.conflist) return;
  if (o.datastoreType === 'etcdv3' && !o.etcdEndpoints && !o.etcdDiscoverySrv) {
    throw new CtlError(
      '--datastore-type etcdv3 needs --etcd-endpoints URL[,URL] (or --etcd-discovery-srv DOMAIN, or ETCD_ENDPOINTS ' +
        'in the environment)',
    );
  }
  if (o.datastoreType === 'kubernetes' && !o.kubeconfig && !o.k8sApiRoot) {
    throw new CtlError(
      '--datastore-type kubernetes needs --kubeconfig PATH (or --k8s-api-root URL, or KUBECONFIG in the environment)',
    );
  }
  if (o.policy === 'k8s' && !o.kubeconfig && !o.k8sApiRoot) {
    throw new CtlError('--policy k8s needs --kubeconfig PATH: the plugin reads pod labels from the API server');
  }
}

export interface InstallDeps {
  packageDir: string;
  nodePath: string;
  warn: (msg: string) => void;
  /** This process runs in a Kubernetes pod (detectPod); without hostRoot its paths are not recorded. */
  inPod?: boolean;
}

function isExecutable(p: string): boolean {
  try {
    accessSync(p, fsConstants.X_OK);
    return statSync(p).isFile();
  } catch {
    return false;
  }
}

/**
 * Copies the parts of the package the per-exec fallback runs to `dest` (under
 * the host root) through a sibling temp dir swapped in by rename, so a shim
 * never runs a half-copied package; between the two renames the directory is
 * briefly absent and the shim answers code 11 (retry).
 */
function copyPackage(pkg: string, dest: string): void {
  const tmp = `${dest}.tmp-${process.pid}`;
  const old = `${dest}.old-${process.pid}`;
  rmSync(tmp, { recursive: true, force: true });
  mkdirSync(tmp, { recursive: true });
  try {
    for (const part of PACKAGE_PARTS) {
      if (existsSync(join(pkg, part))) cpSync(join(pkg, part), join(tmp, part), { recursive: true, dereference: true });
    }
    if (existsSync(dest)) renameSync(dest, old);
    renameSync(tmp, dest);
  } finally {
    rmSync(tmp, { recursive: true, force: true });
    rmSync(old, { recursive: true, force: true });
  }
}

/** The node and package paths netplugin.fallback records: host paths, or no node when they cannot be known. */
function fallbackPaths(
  o: InstallCniOptions,
  deps: InstallDeps,
  warn: (m: string) => void,
): { node: string; pkg: string; files: InstalledFile[] } {
  if (!o.hostRoot) {
    if (deps.inPod) {
      warn(
        `install-cni runs in a Kubernetes pod, so its node (${deps.nodePath}) and package (${deps.packageDir}) are ` +
          `not paths on the host; ` +
          'netplugin.fallback names no node, and CNI calls answer code 11 (retry) while the agent is down. Mount the ' +
          'host root filesystem in the pod and pass --host-root to install a fallback',
      );
      return { node: '', pkg: deps.packageDir, files: [] };
    }
    return { node: deps.nodePath, pkg: deps.packageDir, files: [] };
  }
  const hostPkg = o.hostPackageDir ?? DEFAULT_HOST_PACKAGE_DIR;
  if (!o.dryRun) copyPackage(deps.packageDir, join(o.hostRoot, hostPkg));
  let node = o.hostNode;
  if (node !== undefined && node !== '' && !isExecutable(join(o.hostRoot, node))) {
    throw new CtlError(`--host-node ${node}: ${join(o.hostRoot, node)} is not an executable file`);
  }
  node ??= HOST_NODE_CANDIDATES.find((c) => isExecutable(join(o.hostRoot!, c))) ?? '';
  if (!node) {
    warn(
      `the host has no node (${HOST_NODE_CANDIDATES.join(', ')} under ${o.hostRoot}): there is no per-exec fallback, ` +
        `and CNI calls answer code 11 (retry) while the agent is down`,
    );
  }
  return {
    node,
    pkg: hostPkg,
    files: [{ path: join(o.hostRoot, hostPkg), action: o.dryRun ? 'would write' : 'written' }],
  };
}

export function installCni(opts: InstallCniOptions, deps: InstallDeps): InstallCniResult {
  let o = opts;
  checkOptions(o);
  const warnings: string[] = [];
  const warn = (m: string) => {
    warnings.push(m);
    deps.warn(m);
  };
  const pkg = deps.packageDir;
  for (const p of PLUGIN_NAMES) {
    if (!existsSync(join(pkg, 'dist', `${p}.mjs`))) {
      throw new CtlError(
        `${join(pkg, 'dist', `${p}.mjs`)} is missing; build the package first (npm run build) or pass --package-dir`,
      );
    }
  }
  // etcd TLS files from a Secret mount: copied next to the conflist, named in it.
  const tlsCopies: Array<{ from: string; to: string }> = [];
  const tlsFrom = o.etcdTlsFrom;
  if (tlsFrom && existsSync(tlsFrom)) {
    for (const [file, opt] of ETCD_TLS_FILES) {
      const from = join(tlsFrom, file);
      if (!existsSync(from) || o[opt]) continue;
      const to = join(o.confDir, ETCD_TLS_DIR, file);
      o = { ...o, [opt]: to };
      tlsCopies.push({ from, to });
    }
  }
  // Build and validate the conflist before touching anything, so a bad flag changes nothing.
  let conflist: Record<string, unknown>;
  if (o.conflist) conflist = o.conflist;
  else if (o.fromTemplate) {
    let text: string;
    try {
      text = readFileSync(o.fromTemplate, 'utf8');
    } catch (e) {
      throw new CtlError(`cannot read --from-template ${o.fromTemplate}: ${(e as Error).message}`);
    }
    conflist = renderTemplate(text, o, o.fromTemplate);
    // A template without TLS placeholders still gets the copied files.
    const entry = netpluginEntry(conflist.plugins);
    for (const [, opt, field] of ETCD_TLS_FILES)
      if (entry && o[opt] && entry[field] === undefined && tlsCopies.length) entry[field] = o[opt];
  } else conflist = buildConflist(o);
  checkConflist(conflist, warn);

  let shim: string | undefined;
  if (o.shimPath) {
    if (!existsSync(o.shimPath)) throw new CtlError(`--shim ${o.shimPath} does not exist`);
    shim = o.shimPath;
  } else if (!o.launcher) shim = shimCandidates(pkg).find((p) => existsSync(p));

  // Host paths as this process sees them.
  const onHost = (p: string) => (o.hostRoot ? join(o.hostRoot, p) : p);
  const binDir = onHost(o.binDir);
  const confDir = onHost(o.confDir);
  const write = (path: string, data: Buffer | string, mode: number): InstalledFile =>
    o.dryRun
      ? {
          path,
          action: sameFile(path, typeof data === 'string' ? Buffer.from(data) : data, mode)
            ? 'unchanged'
            : 'would write',
        }
      : writeFileAtomic(path, data, mode);
  if (!o.dryRun) {
    mkdirSync(binDir, { recursive: true });
    mkdirSync(confDir, { recursive: true });
  }
  const files: InstalledFile[] = [];
  if (tlsCopies.length && !o.dryRun) mkdirSync(onHost(join(o.confDir, ETCD_TLS_DIR)), { recursive: true, mode: 0o700 });
  for (const c of tlsCopies) files.push(write(onHost(c.to), readFileSync(c.from), 0o600));
  const fb = fallbackPaths(o, deps, warn);
  files.push(...fb.files);
  if (shim) {
    const bin = readFileSync(shim);
    // The fallback file first: a shim that finds no agent reads it, so it must exist before the shim does.
    files.push(write(join(binDir, FALLBACK_FILE), `${fb.node}\n${fb.pkg}\n`, 0o644));
    for (const p of PLUGIN_NAMES) files.push(write(join(binDir, p), bin, 0o755));
  } else {
    if (!fb.node)
      throw new CtlError(
        'no native shim binary to install, and the sh launcher needs node on the host; build the shim (npm run ' +
          'build:shim) or pass --host-root',
      );
    for (const p of PLUGIN_NAMES)
      files.push(write(join(binDir, p), launcherScript(fb.node, fb.pkg, p, perExecEntry(pkg, p)), 0o755));
    if (!o.dryRun) rmSync(join(binDir, FALLBACK_FILE), { force: true });
  }
  files.push(write(join(confDir, o.confName), JSON.stringify(conflist, null, 2) + '\n', 0o644));

  if (o.agent) {
    // The shipped unit (deploy/netplugin-node.service) is written for a package at
    // /opt/netplugin and node at /usr/bin/node; point it at this installation.
    const shipped = join(pkg, 'deploy', AGENT_UNIT);
    const unit = existsSync(shipped)
      ? readFileSync(shipped, 'utf8')
          .replaceAll('/usr/bin/node', fb.node || deps.nodePath)
          .replaceAll('/opt/netplugin', fb.pkg)
      : [
          '[Unit]',
          'Description=netplugin node agent (serves CNI requests from the netplugin shim)',
          'After=network-online.target',
          'Wants=network-online.target',
          '',
          '[Service]',
          `ExecStart=${fb.node || deps.nodePath} ${join(fb.pkg, 'dist/netplugin-node.cjs')} --log-level ` +
            `${o.logLevel.toUpperCase()}`,
          'Restart=always',
          'RestartSec=2',
          '',
          '[Install]',
          'WantedBy=multi-user.target',
          '',
        ].join('\n');
    if (!o.dryRun) mkdirSync(onHost(o.systemdDir), { recursive: true });
    files.push(write(join(onHost(o.systemdDir), AGENT_UNIT), unit, 0o644));
  }

  // Runtimes use the lexically first configuration file in the directory.
  const first = (existsSync(confDir) ? readdirSync(confDir) : [])
    .filter((f) => /\.(conflist|conf|json)$/.test(f) && !f.startsWith('.'))
    .sort()[0];
  if (first && first !== o.confName)
    warn(
      `${join(confDir, first)} sorts before ${o.confName}; the container runtime will use it instead. Remove it or ` +
        `choose a --conf-name that sorts first`,
    );
  return { kind: shim ? 'shim' : 'launcher', shimSource: shim, files, conflist, warnings };
}

/** Removes what installCni wrote; the conflist only if it holds a netplugin entry. */
export function uninstallCni(o: {
  binDir: string;
  confDir: string;
  confName: string;
  agent?: boolean | undefined;
  systemdDir: string;
}): string[] {
  const removed: string[] = [];
  const rm = (p: string) => {
    if (existsSync(p)) {
      rmSync(p, { force: true });
      removed.push(p);
    }
  };
  const conf = join(o.confDir, o.confName);
  if (existsSync(conf)) {
    let ours = false;
    try {
      ours = isNetpluginConfig(JSON.parse(readFileSync(conf, 'utf8')));
    } catch {
      ours = false;
    }
    if (!ours) throw new CtlError(`${conf} is not a netplugin configuration; not removing it (check --conf-name)`);
    // The configuration goes first so the runtime stops calling the plugin before it disappears.
    rm(conf);
  }
  for (const p of PLUGIN_NAMES) rm(join(o.binDir, p));
  rm(join(o.binDir, FALLBACK_FILE));
  if (o.agent) rm(join(o.systemdDir, AGENT_UNIT));
  return removed;
}

export function resolvePath(io: CtlIO, p: string): string {
  return resolve(io.cwd ?? process.cwd(), p);
}
