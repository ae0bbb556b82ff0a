// Where netpluginctl finds its datastore on an operator's machine, besides a
// node's conflist (--config /etc/cni/net.d/10-netplugin.conflist):
//   - a config file in the calicoctl.cfg form (--config FILE, or
//     /etc/netplugin/netpluginctl.cfg when nothing else is configured):
//       apiVersion: netplugin.org/v3
//       kind: NetpluginAPIConfig
//       spec: { datastoreType: kubernetes, kubeconfig: ~/.kube/config, context: prod }
//   - the Kubernetes API the way kubectl finds it: --kubeconfig, KUBECONFIG
//     with several files (merged), ~/.kube/config, --context, and exec
//     credential plugins (src/k8s/exec-credential.ts).
import { existsSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { cannotRead, CtlError, type CtlIO, type DatastoreConfig } from './io.js';
import { kubeconfigPathsFromEnv } from '../datastore/index.js';

const DEFAULT_CTL_CONFIG = '/etc/netplugin/netpluginctl.cfg';
const CTL_CONFIG_KIND = 'NetpluginAPIConfig';
const CTL_CONFIG_API_VERSION = 'netplugin.org/v3';

/** spec field -> DatastoreConfig field (etcd) */
const ETCD_FIELDS = {
  etcdEndpoints: 'etcd_endpoints',
  etcdDiscoverySrv: 'etcd_discovery_srv',
  etcdKeyFile: 'etcd_key_file',
  etcdCertFile: 'etcd_cert_file',
  etcdCACertFile: 'etcd_ca_cert_file',
} as const;
const KNOWN_SPEC = new Set(['datastoreType', ...Object.keys(ETCD_FIELDS), 'kubeconfig', 'k8sAPIEndpoint', 'context']);

/** True when `text` is a NetpluginAPIConfig document (YAML or JSON) rather than a netconf. */
export function isCtlConfig(text: string): boolean {
  return new RegExp(`^\\s*"?kind"?\\s*:\\s*"?${CTL_CONFIG_KIND}\\b`, 'm').test(text);
}

/** Parses a NetpluginAPIConfig; errors name the file and the field. */
function parseCtlConfig(text: string, file: string, io: CtlIO): DatastoreConfig & { context?: string } {
  let doc: unknown;
  try {
    // yaml loads only for this file form (createRequire keeps it out of the start-up path).
    doc = createRequire(import.meta.url)('yaml').parse(text);
  } catch (e) {
    throw new CtlError(`--config ${file}: not valid YAML: ${(e as Error).message}`);
  }
  const d = (doc ?? {}) as { apiVersion?: unknown; kind?: unknown; spec?: Record<string, unknown> };
  if (d.kind !== CTL_CONFIG_KIND)
    throw new CtlError(`--config ${file}: kind ${JSON.stringify(d.kind)} is not ${CTL_CONFIG_KIND}`);
  if (d.apiVersion !== CTL_CONFIG_API_VERSION)
    throw new CtlError(`--config ${file}: apiVersion ${JSON.stringify(d.apiVersion)} is not ${CTL_CONFIG_API_VERSION}`);
  const spec = d.spec ?? {};
  for (const k of Object.keys(spec)) {
    if (!KNOWN_SPEC.has(k))
      throw new CtlError(`--config ${file}: spec.${k} is not a known field; use ${[...KNOWN_SPEC].join(', ')}`);
    if (typeof spec[k] !== 'string') throw new CtlError(`--config ${file}: spec.${k} must be a string`);
  }
  const t = spec['datastoreType'] ?? 'etcdv3';
  if (t !== 'etcdv3' && t !== 'kubernetes')
    throw new CtlError(`--config ${file}: spec.datastoreType ${JSON.stringify(t)} is not etcdv3 or kubernetes`);
  const out: DatastoreConfig & { context?: string } = { datastore_type: t };
  for (const [from, to] of Object.entries(ETCD_FIELDS)) if (spec[from]) out[to] = spec[from] as string;
  const home = io.env.HOME;
  const expand = (p: string) => (p.startsWith('~/') && home ? join(home, p.slice(2)) : p);
  if (spec['kubeconfig'] || spec['k8sAPIEndpoint']) {
    out.kubernetes = {
      ...(spec['kubeconfig'] ? { kubeconfig: expand(spec['kubeconfig'] as string) } : {}),
      ...(spec['k8sAPIEndpoint'] ? { k8s_api_root: spec['k8sAPIEndpoint'] as string } : {}),
    };
  }
  if (spec['context']) out.context = spec['context'] as string;
  if (t === 'etcdv3' && !out.etcd_endpoints && !out.etcd_discovery_srv)
    throw new CtlError(
      `--config ${file}: spec.datastoreType etcdv3 needs spec.etcdEndpoints (e.g. https://10.0.0.1:2379)`,
    );
  return out;
}

/** The default config file, when it exists: NETPLUGINCTL_CONFIG or /etc/netplugin/netpluginctl.cfg. */
export function defaultCtlConfig(io: CtlIO): string | undefined {
  const p = io.env.NETPLUGINCTL_CONFIG || DEFAULT_CTL_CONFIG;
  return existsSync(p) ? p : undefined;
}

export function readCtlConfig(file: string, io: CtlIO): DatastoreConfig & { context?: string } {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (e) {
    throw cannotRead(`--config ${file}`, e);
  }
  return parseCtlConfig(text, file, io);
}

/**
 * Fills in how to reach the Kubernetes API, as kubectl does: --kubeconfig,
 * else the configured file, else KUBECONFIG (several files, merged), else
 * ~/.kube/config; --context; exec credential plugins allowed.
 */
export function applyKubeAccess(
  conf: DatastoreConfig & { context?: string },
  io: CtlIO,
  flags: {
    kubeconfig?: string | undefined;
    context?: string | undefined;
    as?: string | undefined;
    asGroups?: string[] | undefined;
  },
): DatastoreConfig {
  const { context: fileContext, ...out } = conf;
  const needsApi =
    out.datastore_type === 'kubernetes' || flags.kubeconfig !== undefined || out.kubernetes !== undefined;
  if (!needsApi) {
    if (flags.as || flags.asGroups?.length) {
      throw new CtlError(
        '--as and --as-group impersonate a Kubernetes user: they need the kubernetes datastore ' +
          '(DATASTORE_TYPE=kubernetes, or --kubeconfig)',
      );
    }
    return out;
  }
  const k = { ...(out.kubernetes ?? {}) };
  if (flags.kubeconfig) {
    k.kubeconfig_paths = [flags.kubeconfig];
    delete k.kubeconfig;
  } else if (!k.kubeconfig && !k.k8s_api_root) {
    const paths = kubeconfigPathsFromEnv(io.env);
    const home = io.env.HOME ? join(io.env.HOME, '.kube/config') : undefined;
    if (paths.length) k.kubeconfig_paths = paths;
    else if (home && existsSync(home)) k.kubeconfig_paths = [home];
  }
  const context = flags.context ?? fileContext;
  if (context) k.context = context;
  k.allow_exec = true;
  // kubectl's habits: HTTPS_PROXY/NO_PROXY from the environment, --as/--as-group.
  k.proxy_env = io.env;
  if (flags.asGroups?.length && !flags.as)
    throw new CtlError('--as-group needs --as USER (the API server impersonates a user with groups, not groups alone)');
  if (flags.as) k.impersonate = { user: flags.as, groups: flags.asGroups };
  return { ...out, kubernetes: k };
}
