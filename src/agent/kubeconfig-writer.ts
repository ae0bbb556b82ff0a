// The CNI plugin's kubeconfig on the node (/etc/cni/net.d/netplugin-kubeconfig,
// --plugin-kubeconfig). The plugin runs on the host, outside any pod, so it has
// no service-account mount: the agent obtains a token for the plugin's own
// ServiceAccount (netplugin-cni) with the TokenRequest API and writes it with
// the API server's address and CA. Tokens are bound (expiry, audience) and the
// file is rewritten when a third of the token's lifetime is left, so an
// outage of the API server shorter than that never leaves the plugin with an
// expired token. Mode 0600: the token is a credential.
import type { Logger } from '../log/types.js';
import type { KubeClient } from '../k8s/client.js';
import { writeFileAtomic } from '../ctl/install-cni.js';
export const DEFAULT_PLUGIN_SERVICE_ACCOUNT = 'netplugin-cni';
/** One day: short enough to limit a leaked file's use, long enough to ride out API outages. */
export const DEFAULT_TOKEN_SECONDS = 86_400;

interface PluginKubeconfigOptions {
  path: string;
  serviceAccount: string;
  namespace: string;
  /** Authenticated as the agent (its own service account). */
  client: Pick<KubeClient, 'request' | 'server'>;
  /** The API server's CA (PEM), embedded so the file stands alone on the host. */
  ca?: Buffer;
  expirationSeconds?: number;
  /** Token audiences; default: the API server's own. */
  audiences?: string[];
  log: Logger;
  /** Retry delays after a failed request: doubling from minRetryMs to maxRetryMs (default 1 s to 60 s). */
  minRetryMs?: number;
  maxRetryMs?: number;
}

export interface PluginKubeconfig {
  /** Settles after the first successful write (never rejects; failures are logged and retried). */
  readonly firstWrite: Promise<void>;
  /** When the written token expires, and the last error (cleared by a success). */
  status(): { expires?: Date; lastError?: string; writes: number };
  stop(): void;
}

interface TokenRequestStatus {
  status?: { token?: string; expirationTimestamp?: string };
}

/** The kubeconfig text: JSON-quoted scalars, which YAML reads as they are. */
function renderKubeconfig(server: string, token: string, ca: Buffer | undefined, user: string): string {
  const q = (s: string) => JSON.stringify(s);
  return [
    '# Written by netplugin-node for the netplugin CNI plugin; rewritten before the token expires.',
    'apiVersion: v1',
    'kind: Config',
    'clusters:',
    '  - name: netplugin',
    '    cluster:',
    `      server: ${q(server)}`,
    ...(ca ? [`      certificate-authority-data: ${q(ca.toString('base64'))}`] : []),
    'users:',
    `  - name: ${q(user)}`,
    '    user:',
    `      token: ${q(token)}`,
    'contexts:',
    '  - name: netplugin',
    '    context:',
    '      cluster: netplugin',
    `      user: ${q(user)}`,
    'current-context: netplugin',
    '',
  ].join('\n');
}

export function startPluginKubeconfig(o: PluginKubeconfigOptions): PluginKubeconfig {
  const seconds = o.expirationSeconds ?? DEFAULT_TOKEN_SECONDS;
  const minRetry = o.minRetryMs ?? 1000;
  const maxRetry = o.maxRetryMs ?? 60_000;
  const path =
    `/api/v1/namespaces/${encodeURIComponent(o.namespace)}/serviceaccounts/` +
    `${encodeURIComponent(o.serviceAccount)}/token`;
  let stopped = false;
  let timer: NodeJS.Timeout | undefined;
  let failures = 0;
  let expires: Date | undefined;
  let lastError: string | undefined;
  let writes = 0;
  let resolveFirst!: () => void;
  const firstWrite = new Promise<void>((r) => (resolveFirst = r));

  const schedule = (ms: number) => {
    if (stopped) return;
    timer = setTimeout(() => void refresh(), ms);
    timer.unref();
  };

  async function refresh(): Promise<void> {
    if (stopped) return;
    try {
      const res = await o.client.request<TokenRequestStatus>('POST', path, {
        apiVersion: 'authentication.k8s.io/v1',
        kind: 'TokenRequest',
        spec: { expirationSeconds: seconds, ...(o.audiences?.length ? { audiences: o.audiences } : {}) },
      });
      const token = res?.status?.token;
      const exp = res?.status?.expirationTimestamp ? new Date(res.status.expirationTimestamp) : undefined;
      if (!token || !exp || Number.isNaN(exp.getTime()))
        throw new Error('the TokenRequest answer has no status.token or status.expirationTimestamp');
      if (stopped) return;
      writeFileAtomic(o.path, renderKubeconfig(o.client.server, token, o.ca, o.serviceAccount), 0o600);
      writes++;
      failures = 0;
      lastError = undefined;
      expires = exp;
      const lifetime = exp.getTime() - Date.now();
      o.log.info('plugin kubeconfig written', {
        path: o.path,
        serviceAccount: `${o.namespace}/${o.serviceAccount}`,
        expires: exp.toISOString(),
      });
      resolveFirst();
      // Two thirds in; never sooner than the retry floor (a server granting
      // a lifetime of seconds must not make us spin).
      schedule(Math.max(minRetry, Math.floor((lifetime * 2) / 3)));
    } catch (e) {
      failures++;
      lastError = (e as Error).message;
      const delay = Math.min(maxRetry, minRetry * 2 ** Math.min(failures - 1, 16));
      o.log.warn('cannot obtain a token for the plugin kubeconfig; retrying', {
        serviceAccount: `${o.namespace}/${o.serviceAccount}`,
        error: lastError,
        retryInMs: delay,
        ...(expires ? { currentTokenExpires: expires.toISOString() } : {}),
      });
      schedule(delay);
    }
  }

  void refresh();
  return {
    firstWrite,
    status: () => ({ ...(expires ? { expires } : {}), ...(lastError ? { lastError } : {}), writes }),
    stop() {
      stopped = true;
      clearTimeout(timer);
      resolveFirst();
    },
  };
}
