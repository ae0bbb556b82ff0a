// netpluginctl's session: where the datastore settings come from (--config,
// the environment, the netpluginctl config file, --kubeconfig/--context) and
// the datastore and Kubernetes clients a command opens, closed after it.
import { readFileSync } from 'node:fs';
import type { Datastore } from '../datastore/types.js';
import { datastoreConfigFromEnv, datastoreEnvGiven, openDatastore } from '../datastore/index.js';
import { datastoreSettingsOf } from '../datastore/settings.js';
import { createKubeClient, type KubeClient } from '../k8s/client.js';
import { netpluginEntry } from '../config/conflist.js';
import { cannotRead, CtlError, type CtlIO, type CtlSession, type DatastoreConfig } from './io.js';
import { resolvePath } from './install-cni.js';
import { refuseOlderClient } from './version.js';
import { applyKubeAccess, defaultCtlConfig, isCtlConfig, readCtlConfig } from './cluster-config.js';

/** The datastore settings, as the top-level help explains them. */
export const DATASTORE_HELP = `Datastore: --config FILE (a netconf or conflist; the netplugin entry's datastore_type,
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
--as USER [--as-group GROUP...] acts as another user (the API server's impersonation, as kubectl).
A cluster's proxy-url in the kubeconfig is used, else HTTPS_PROXY / HTTP_PROXY with NO_PROXY
(loopback and localhost are never proxied), through HTTP CONNECT.
Logs and errors: --log-format json prints every error and warning as a JSON line on stderr.`;

/** Datastore settings from --config (netconf or conflist) or the environment; undefined when none is configured. */
export function datastoreConfig(
  configFile: string | undefined,
  io: CtlIO,
): (DatastoreConfig & { context?: string }) | undefined {
  const env = io.env;
  if (configFile) {
    let raw: unknown;
    try {
      const text = readFileSync(resolvePath(io, configFile), 'utf8');
      if (isCtlConfig(text)) return readCtlConfig(resolvePath(io, configFile), io);
      raw = JSON.parse(text);
    } catch (e) {
      throw cannotRead(`--config ${configFile}`, e);
    }
    let conf = raw as Record<string, unknown>;
    if (conf && Array.isArray(conf.plugins)) {
      const entry = netpluginEntry(conf.plugins);
      if (!entry) throw new CtlError(`--config ${configFile}: the conflist has no entry with "type": "netplugin"`);
      conf = entry;
    }
    if (!conf || typeof conf !== 'object')
      throw new CtlError(`--config ${configFile}: expected a JSON object (netconf or conflist)`);
    const { datastore_type: t = 'etcdv3', ...settings } = datastoreSettingsOf(conf);
    if (t !== 'etcdv3' && t !== 'kubernetes')
      throw new CtlError(
        `--config ${configFile}: datastore_type ${JSON.stringify(t)} is not supported; use "etcdv3" or "kubernetes"`,
      );
    return { datastore_type: t, ...settings };
  }
  if (!datastoreEnvGiven(env)) return undefined;
  try {
    return datastoreConfigFromEnv(env, { cli: true });
  } catch (e) {
    // A setting the user can fix: one line, exit code 1, like every other CtlError.
    throw new CtlError((e as Error).message);
  }
}

export async function defaultOpen(conf: DatastoreConfig): Promise<Datastore> {
  return openDatastore(conf);
}

export class Session implements CtlSession {
  private ds: Datastore | undefined;
  /** --kubeconfig and --context, before the command or among its flags. */
  kubeconfig: string | undefined;
  context: string | undefined;
  /** --as and --as-group: impersonation on the Kubernetes API. */
  as: string | undefined;
  asGroups: string[] = [];
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
    return applyKubeAccess(base, this.io, {
      kubeconfig: this.kubeconfig ? resolvePath(this.io, this.kubeconfig) : undefined,
      context: this.context,
      as: this.as,
      asGroups: this.asGroups,
    });
  }
  async datastore(): Promise<Datastore> {
    if (this.ds) return this.ds;
    const conf = this.config();
    if (!conf) {
      throw new CtlError(
        'no datastore configured: pass --config /etc/cni/net.d/10-netplugin.conflist, or set ETCD_ENDPOINTS (etcd) ' +
          'or DATASTORE_TYPE=kubernetes with KUBECONFIG',
      );
    }
    conf.timeoutMs ??= 10_000;
    this.ds = await (this.io.openDatastore ?? defaultOpen)(conf);
    return this.ds;
  }
  /** The datastore for a command that writes: refused when this client is older than the cluster (docs/upgrade.md). */
  async writable(): Promise<Datastore> {
    const ds = await this.datastore();
    await refuseOlderClient(ds);
    return ds;
  }
  /** A Kubernetes API client from the datastore settings (KUBECONFIG / K8S_API_ROOT, or in-cluster). */
  async kube(): Promise<KubeClient> {
    const client = await createKubeClient({ ...this.config()?.kubernetes, timeoutMs: 10_000 });
    this.closers.push(() => client.close());
    return client;
  }
  private readonly closers: Array<() => void> = [];
  async close(): Promise<void> {
    for (const c of this.closers.splice(0)) c();
    const ds = this.ds;
    this.ds = undefined;
    if (ds) await ds.close().catch(() => undefined);
  }
}
