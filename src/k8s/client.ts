// Kubernetes API access for the plugin and datastore/kubernetes. Plain
// node:http(s) rather than @kubernetes/client-node: that library costs
// ~150-400 ms to load, and we need a handful of REST calls. The kubeconfig is
// parsed here (JSON directly, YAML via the `yaml` package, loaded only then).
import { readFileSync, statSync } from 'node:fs';
import { dirname, isAbsolute, resolve as resolvePath } from 'node:path';
import type { Agent as HttpAgent, IncomingMessage } from 'node:http';
import { DatastoreError, isUnknownCa, type DatastoreErrorKind } from '../errors.js';
import type { ObjectMeta } from '../model/resources.js';

export interface KubeClientOptions {
  /** Path of a kubeconfig file (recommended). */
  kubeconfig?: string | undefined;
  /**
   * Several kubeconfig files merged as KUBECONFIG=a:b does (the first file that
   * names a cluster, user or context wins, as does the first current-context);
   * used instead of `kubeconfig` when set.
   */
  kubeconfig_paths?: string[] | undefined;
  /** Use this context instead of current-context. */
  context?: string | undefined;
  /**
   * Run `exec` credential plugins (client.authentication.k8s.io v1/v1beta1),
   * caching the credential until it expires. For interactive tools
   * (netpluginctl); the CNI plugin never runs commands from a kubeconfig.
   */
  allow_exec?: boolean | undefined;
  /** API server URL; authenticates with the in-cluster service account token when that file exists. */
  k8s_api_root?: string | undefined;
  /** Per-request deadline in ms (absent or undefined: 10 s). */
  timeoutMs?: number | undefined;
  /**
   * Honour HTTPS_PROXY / HTTP_PROXY / NO_PROXY from this environment, as
   * kubectl does (netpluginctl). The plugin never does: its environment is the
   * container runtime's. A kubeconfig cluster's proxy-url is always honoured.
   */
  proxy_env?: Record<string, string | undefined> | undefined;
  /** Act as this user (and groups): kubectl's --as / --as-group, sent as Impersonate-User / Impersonate-Group. */
  impersonate?: { user: string; groups?: string[] | undefined } | undefined;
}

/** Kubernetes ObjectMeta: the fields our resources carry too, and the rest as the API sends it. */
export interface KubeObjectMeta extends ObjectMeta {
  generateName?: string;
  deletionTimestamp?: string;
  [k: string]: unknown;
}
export interface KubeObject {
  apiVersion?: string;
  kind?: string;
  metadata: KubeObjectMeta;
  spec?: Record<string, unknown>;
  status?: Record<string, unknown>;
  [k: string]: unknown;
}
export interface KubeContainerPort {
  name?: string;
  containerPort: number;
  protocol?: string;
  hostPort?: number;
  hostIP?: string;
}
export interface KubePod extends KubeObject {
  spec?: {
    nodeName?: string;
    serviceAccountName?: string;
    hostNetwork?: boolean;
    containers?: Array<{ name: string; ports?: KubeContainerPort[] }>;
    [k: string]: unknown;
  };
}
export interface KubeList<T = KubeObject> {
  kind?: string;
  apiVersion?: string;
  metadata: { resourceVersion?: string; continue?: string };
  items: T[];
}

export type PatchType = 'merge' | 'strategic' | 'json';
const PATCH_CONTENT_TYPES: Record<PatchType, string> = {
  merge: 'application/merge-patch+json',
  strategic: 'application/strategic-merge-patch+json',
  json: 'application/json-patch+json',
};

export interface RequestOptions {
  timeoutMs?: number;
  contentType?: string;
  query?: Record<string, string | undefined>;
}

export interface WatchEventRaw {
  type: 'ADDED' | 'MODIFIED' | 'DELETED' | 'BOOKMARK' | 'ERROR';
  object: KubeObject;
}
export interface WatchHandle {
  stop(): void;
}
/** Why a watch stream ended: `gone` when the resourceVersion is too old (410): re-list. */
export interface WatchEnd {
  error?: DatastoreError;
  gone?: boolean;
}

export interface KubeClient {
  /** The API server URL in use. */
  readonly server: string;
  /** The CA (PEM) the server certificate is checked against, when one is configured. */
  readonly ca?: Buffer;
  request<T = unknown>(method: string, path: string, body?: unknown, opts?: RequestOptions): Promise<T>;
  getPod(namespace: string, name: string, opts?: RequestOptions): Promise<KubePod>;
  getNamespace(name: string, opts?: RequestOptions): Promise<KubeObject>;
  getNode(name: string, opts?: RequestOptions): Promise<KubeObject>;
  patchPod(namespace: string, name: string, patch: unknown, type?: PatchType, opts?: RequestOptions): Promise<KubePod>;
  /** Streams watch events of a collection path until stop() or the server ends it. */
  watch(
    path: string,
    query: Record<string, string | undefined>,
    onEvent: (ev: WatchEventRaw) => void,
    onEnd: (end: WatchEnd) => void,
  ): WatchHandle;
  close(): void;
}

interface Credentials {
  server: string;
  /** Which setting the server came from, for error messages. */
  source: string;
  // undefined when the kubeconfig's *-data field is not a string (ignored, as before).
  ca?: Buffer | undefined;
  caSource?: string;
  cert?: Buffer | undefined;
  key?: Buffer | undefined;
  insecure?: boolean;
  servername?: string;
  token?: () => string | undefined;
  basic?: string;
  /** The cluster's proxy-url. */
  proxyUrl?: string;
}

export const SA_DIR = '/var/run/secrets/kubernetes.io/serviceaccount';

/**
 * The namespace this process's pod runs in ($POD_NAMESPACE, else its service account's), or kube-system outside a pod.
 */
export function ownNamespace(): string {
  if (process.env.POD_NAMESPACE) return process.env.POD_NAMESPACE;
  try {
    return readFileSync(`${SA_DIR}/namespace`, 'utf8').trim() || 'kube-system';
  } catch {
    return 'kube-system';
  }
}

function invalid(msg: string): DatastoreError {
  return new DatastoreError('Invalid', msg);
}

function readFile(field: string, path: string): Buffer {
  try {
    return readFileSync(path);
  } catch (e) {
    throw invalid(`${field}=${path} cannot be read (${(e as NodeJS.ErrnoException).code ?? String(e)}); fix the path`);
  }
}

/** A token file re-read once a minute: bound service account tokens rotate. */
function tokenFromFile(path: string): () => string | undefined {
  let cached: string | undefined;
  let readAt = 0;
  return () => {
    if (Date.now() - readAt > 60_000) {
      try {
        cached = readFileSync(path, 'utf8').trim();
      } catch {
        cached = undefined;
      }
      readAt = Date.now();
    }
    return cached;
  };
}

type Named<T> = { name: string; file: string } & T;
interface KubeconfigDoc {
  currentContext?: string | undefined;
  contexts: Array<Named<{ context?: { cluster?: string; user?: string } }>>;
  clusters: Array<Named<{ cluster?: Record<string, unknown> }>>;
  users: Array<Named<{ user?: Record<string, unknown> }>>;
}

/** Reads and merges kubeconfig files with client-go's rules: first definition of a name wins. */
async function loadKubeconfigs(paths: string[]): Promise<KubeconfigDoc> {
  const out: KubeconfigDoc = { contexts: [], clusters: [], users: [] };
  for (const path of paths) {
    const text = readFile('kubernetes.kubeconfig', path).toString('utf8');
    let doc: unknown;
    try {
      // yaml takes tens of ms to load: a JSON kubeconfig (the plugin's usual one) never loads it.
      doc = text.trimStart().startsWith('{') ? JSON.parse(text) : (await import('yaml')).parse(text);
    } catch (e) {
      throw invalid(`kubernetes.kubeconfig=${path} is not valid YAML/JSON: ${(e as Error).message}`);
    }
    const kc = (doc ?? {}) as {
      'current-context'?: string;
      contexts?: Array<{ name: string }>;
      clusters?: Array<{ name: string }>;
      users?: Array<{ name: string }>;
    };
    out.currentContext ||= kc['current-context'] || undefined;
    for (const key of ['contexts', 'clusters', 'users'] as const) {
      for (const e of kc[key] ?? []) {
        if (e && typeof e.name === 'string' && !out[key].some((x) => x.name === e.name))
          (out[key] as Array<Named<object>>).push({ ...e, file: path });
      }
    }
  }
  return out;
}

async function parseKubeconfig(
  paths: string[],
  opts: { context?: string | undefined; allowExec?: boolean | undefined } = {},
): Promise<Credentials> {
  const kc = await loadKubeconfigs(paths);
  const path = paths.join(':');
  const ctxName = opts.context || kc.currentContext || kc.contexts[0]?.name;
  const ctxEntry = kc.contexts.find((c) => c.name === ctxName);
  const ctx = ctxEntry?.context;
  if (!ctx) {
    const known = kc.contexts.map((c) => c.name).join(', ') || 'none';
    throw invalid(
      opts.context
        ? `context ${JSON.stringify(opts.context)} is not in ${path} (contexts: ${known})`
        : `kubernetes.kubeconfig=${path}: current-context ${JSON.stringify(ctxName ?? '')} is not among its ` +
            `contexts; set current-context`,
    );
  }
  const clusterEntry = kc.clusters.find((c) => c.name === ctx.cluster);
  const userEntry = kc.users.find((u) => u.name === ctx.user);
  const where = `kubernetes.kubeconfig=${path}`;
  const cluster = clusterEntry?.cluster;
  if (!cluster || typeof cluster.server !== 'string')
    throw invalid(
      `${where}: cluster ${JSON.stringify(ctx.cluster ?? '')} of context ${ctxName} is missing or has no server`,
    );
  const user = (userEntry?.user ?? {}) as Record<string, unknown>;
  // Relative paths are relative to the file that defined the entry.
  const relTo = (file: string | undefined) => (p: unknown) =>
    typeof p === 'string' ? (isAbsolute(p) ? p : resolvePath(dirname(file ?? paths[0]!), p)) : undefined;
  const relCluster = relTo(clusterEntry?.file);
  const rel = relTo(userEntry?.file);
  const b64 = (field: string, v: unknown) => {
    if (typeof v !== 'string') return undefined;
    const buf = Buffer.from(v, 'base64');
    if (!buf.length) throw invalid(`${where}: ${field} is not base64 data`);
    return buf;
  };
  const creds: Credentials = { server: cluster.server.replace(/\/+$/, ''), source: where };
  if (cluster['certificate-authority-data']) {
    creds.ca = b64('certificate-authority-data', cluster['certificate-authority-data']);
    creds.caSource = `certificate-authority-data of cluster ${ctx.cluster} in ${path}`;
  } else if (cluster['certificate-authority']) {
    const f = relCluster(cluster['certificate-authority'])!;
    creds.ca = readFile(`${where}: certificate-authority`, f);
    creds.caSource = `certificate-authority=${f}`;
  }
  if (cluster['insecure-skip-tls-verify'] === true) creds.insecure = true;
  if (typeof cluster['proxy-url'] === 'string' && cluster['proxy-url']) creds.proxyUrl = cluster['proxy-url'];
  if (typeof cluster['tls-server-name'] === 'string') creds.servername = cluster['tls-server-name'];
  if (user['client-certificate-data']) creds.cert = b64('client-certificate-data', user['client-certificate-data']);
  else if (user['client-certificate'])
    creds.cert = readFile(`${where}: client-certificate`, rel(user['client-certificate'])!);
  if (user['client-key-data']) creds.key = b64('client-key-data', user['client-key-data']);
  else if (user['client-key']) creds.key = readFile(`${where}: client-key`, rel(user['client-key'])!);
  if (!!creds.cert !== !!creds.key)
    throw invalid(`${where}: user ${ctx.user} has a client certificate without a key (or a key without a certificate)`);
  if (typeof user.token === 'string' && user.token) {
    const t = user.token;
    creds.token = () => t;
  } else if (typeof user.tokenFile === 'string') {
    creds.token = tokenFromFile(rel(user.tokenFile)!);
  } else if (typeof user.username === 'string' && typeof user.password === 'string') {
    creds.basic = Buffer.from(`${user.username}:${user.password}`).toString('base64');
  } else if (user.exec && opts.allowExec) {
    // Only a kubeconfig with an exec user loads the credential helper runner.
    const { execCredential } = await import('./exec-credential.js');
    const cred = execCredential(user.exec, {
      user: String(ctx.user),
      where,
      cluster: {
        server: creds.server,
        ...(creds.ca ? { 'certificate-authority-data': creds.ca.toString('base64') } : {}),
      },
      dir: dirname(userEntry?.file ?? paths[0]!),
    });
    const first = cred();
    if (first.clientCertificateData && first.clientKeyData) {
      creds.cert = Buffer.from(first.clientCertificateData);
      creds.key = Buffer.from(first.clientKeyData);
    }
    if (first.token) creds.token = () => cred().token;
  } else if (user.exec || user['auth-provider']) {
    throw invalid(
      `${where}: user ${ctx.user} authenticates with ${user.exec ? 'exec' : 'auth-provider'}, which the CNI plugin ` +
        `does not run; use a token, tokenFile or client certificate (e.g. a service account token)` +
        `${user.exec ? ' (netpluginctl runs exec plugins)' : ''}`,
    );
  }
  return creds;
}

async function resolveCredentials(opts: KubeClientOptions): Promise<Credentials> {
  if (opts.kubeconfig_paths?.length || opts.kubeconfig) {
    return parseKubeconfig(opts.kubeconfig_paths?.length ? opts.kubeconfig_paths : [opts.kubeconfig!], {
      context: opts.context,
      allowExec: opts.allow_exec,
    });
  }
  const saToken = `${SA_DIR}/token`;
  const saCa = `${SA_DIR}/ca.crt`;
  const exists = (p: string) => {
    try {
      return statSync(p).isFile();
    } catch {
      return false;
    }
  };
  let server: string;
  let source: string;
  if (opts.k8s_api_root) {
    let u: URL;
    try {
      u = new URL(opts.k8s_api_root);
    } catch {
      throw invalid(`kubernetes.k8s_api_root=${opts.k8s_api_root} is not a URL; use e.g. https://10.96.0.1:443`);
    }
    if (u.protocol !== 'http:' && u.protocol !== 'https:')
      throw invalid(`kubernetes.k8s_api_root=${opts.k8s_api_root} must be an http:// or https:// URL`);
    server = opts.k8s_api_root.replace(/\/+$/, '');
    source = `kubernetes.k8s_api_root=${opts.k8s_api_root}`;
  } else if (process.env.KUBERNETES_SERVICE_HOST) {
    const h = process.env.KUBERNETES_SERVICE_HOST;
    server = `https://${h.includes(':') ? `[${h}]` : h}:${process.env.KUBERNETES_SERVICE_PORT || '443'}`;
    source = 'the in-cluster service (KUBERNETES_SERVICE_HOST)';
  } else {
    throw invalid(
      'no Kubernetes API access configured: set kubernetes.kubeconfig (recommended) or kubernetes.k8s_api_root in ' +
        'the netconf',
    );
  }
  const creds: Credentials = { server, source };
  if (exists(saToken)) creds.token = tokenFromFile(saToken);
  if (server.startsWith('https:') && exists(saCa)) {
    creds.ca = readFileSync(saCa);
    creds.caSource = saCa;
  }
  return creds;
}

function networkError(c: Credentials, err: NodeJS.ErrnoException): DatastoreError {
  const code = err.code ?? '';
  const at = `Kubernetes API at ${c.server}`;
  const mk = (k: DatastoreErrorKind, m: string) => new DatastoreError(k, m, { cause: err });
  if (code === 'ECONNREFUSED')
    return mk('Unavailable', `${at} is unreachable: connection refused (ECONNREFUSED); check ${c.source}`);
  if (code === 'ENOTFOUND' || code === 'EAI_AGAIN')
    return mk('Unavailable', `${at} is unreachable: host name does not resolve (${code}); check ${c.source}`);
  if (isUnknownCa(code)) {
    return mk(
      'Unauthorized',
      `TLS handshake with ${c.server} failed: certificate signed by unknown authority (${code}); ` +
        (c.caSource
          ? `${c.caSource} does not hold the CA that issued the server certificate`
          : `no CA configured in ${c.source}: add certificate-authority(-data)`),
    );
  }
  if (code === 'ERR_TLS_CERT_ALTNAME_INVALID')
    return mk(
      'Unauthorized',
      `TLS handshake with ${c.server} failed: ${err.message}; use a server address the certificate names (or ` +
        `tls-server-name)`,
    );
  if (/BAD_CERTIFICATE|UNKNOWN_CA|CERTIFICATE_REQUIRED|ALERT_HANDSHAKE_FAILURE/i.test(code + err.message)) {
    return mk(
      'Unauthorized',
      `TLS handshake with ${c.server} failed: the server rejected the client certificate (${code || err.message}); ` +
        `check the user's client-certificate in ${c.source}`,
    );
  }
  return mk('Unavailable', `${at} failed: ${err.message}${code ? ` (${code})` : ''}; check ${c.source}`);
}

/** Maps an HTTP error status and the server's Status body to our classification. */
export function statusError(
  server: string,
  method: string,
  path: string,
  status: number,
  body: string,
): DatastoreError {
  let message = body.trim().slice(0, 500);
  let reason = '';
  try {
    const s = JSON.parse(body) as { message?: string; reason?: string };
    if (s.message) message = s.message;
    if (s.reason) reason = s.reason;
  } catch {
    // not a Status object (a proxy's HTML page, ...): keep the text
  }
  const what = `${method} ${path}`;
  let kind: DatastoreErrorKind;
  if (status === 404) kind = 'NotFound';
  else if (status === 409) kind = reason === 'AlreadyExists' ? 'AlreadyExists' : 'Conflict';
  else if (status === 401 || status === 403) kind = 'Unauthorized';
  else if (status === 429 || status >= 500) kind = 'Unavailable';
  else if (status === 410) kind = 'Conflict';
  else kind = 'Invalid';
  const hint =
    status === 401
      ? ': the API server did not accept our credentials (token or client certificate)'
      : status === 403
        ? ': the account lacks RBAC permission for this'
        : status === 429
          ? ': the API server is throttling; retry later'
          : status >= 500
            ? ': API server error; retry later'
            : '';
  return new DatastoreError(
    kind,
    `Kubernetes API ${server}: ${what} -> ${status}${reason ? ` ${reason}` : ''}: ${message}${hint}`,
  );
}

export async function createKubeClient(opts: KubeClientOptions): Promise<KubeClient> {
  const creds = await resolveCredentials(opts);
  const secure = creds.server.startsWith('https:');
  // node:https pulls in node:tls: only an https API server pays for it (per-exec plugin start-up).
  const { Agent: HttpsAgentCtor, request: httpsRequest } = secure
    ? await import('node:https')
    : { Agent: undefined, request: undefined };
  const { Agent: HttpAgentCtor, request: httpRequest } = await import('node:http');
  const agent: HttpAgent = secure
    ? new HttpsAgentCtor!({
        keepAlive: true,
        ca: creds.ca,
        cert: creds.cert,
        key: creds.key,
        rejectUnauthorized: !creds.insecure,
        servername: creds.servername,
      })
    : new HttpAgentCtor({ keepAlive: true });
  const doRequest = secure ? httpsRequest! : httpRequest;
  const defaultTimeout = opts.timeoutMs ?? 10_000;
  const base = new URL(creds.server);
  if (creds.proxyUrl || opts.proxy_env) {
    // Only a proxied API server loads the CONNECT tunnel.
    const { parseProxyUrl, proxyFromEnv, tunnelThrough } = await import('./proxy.js');
    const proxy = creds.proxyUrl ? parseProxyUrl(creds.proxyUrl, `proxy-url in ${creds.source}`) : undefined;
    const envProxy = proxy ? undefined : proxyFromEnv(base, opts.proxy_env ?? {});
    const via =
      proxy ??
      (envProxy ? parseProxyUrl(envProxy, base.protocol === 'https:' ? 'HTTPS_PROXY' : 'HTTP_PROXY') : undefined);
    if (via) {
      tunnelThrough(agent, via, secure, defaultTimeout);
      creds.source +=
        ` (through the proxy ${via.host}` +
        `${proxy ? ', its proxy-url' : ` from ${base.protocol === 'https:' ? 'HTTPS_PROXY' : 'HTTP_PROXY'}`})`;
    }
  }
  const basePath = base.pathname.replace(/\/+$/, '');

  const urlFor = (path: string, query?: Record<string, string | undefined>) => {
    const q = new URLSearchParams();
    for (const [k, v] of Object.entries(query ?? {})) if (v !== undefined) q.set(k, v);
    const qs = q.toString();
    return `${basePath}${path}${qs ? (path.includes('?') ? '&' : '?') + qs : ''}`;
  };
  const headers = (contentType?: string, len?: number) => {
    const h: Record<string, string | number | string[]> = { Accept: 'application/json' };
    const t = creds.token?.();
    if (t) h.Authorization = `Bearer ${t}`;
    else if (creds.basic) h.Authorization = `Basic ${creds.basic}`;
    if (contentType) h['Content-Type'] = contentType;
    if (len !== undefined) h['Content-Length'] = len;
    if (opts.impersonate) {
      h['Impersonate-User'] = opts.impersonate.user;
      if (opts.impersonate.groups?.length) h['Impersonate-Group'] = opts.impersonate.groups;
    }
    return h;
  };

  /**
   * A kept-alive connection that the server closed for idleness just as we
   * reused it fails the request before any answer (ECONNRESET, EPIPE). A read
   * is then sent once more, on a fresh connection: the idle ones are as old as
   * the failed one, so they go first. A write is not: it may have been applied.
   */
  const mayResend = (method: string) => method === 'GET' || method === 'HEAD';
  const dropIdleConnections = () => {
    for (const sockets of Object.values(agent.freeSockets)) for (const s of sockets ?? []) s.destroy();
  };

  function request<T>(
    method: string,
    path: string,
    body?: unknown,
    ro: RequestOptions = {},
    resend = mayResend(method),
  ): Promise<T> {
    const timeoutMs = ro.timeoutMs ?? defaultTimeout;
    const deadline = Date.now() + timeoutMs;
    const payload = body === undefined ? undefined : Buffer.from(JSON.stringify(body));
    return new Promise<T>((resolve, reject) => {
      let settled = false;
      let answered = false;
      const fail = (e: DatastoreError) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        req.destroy();
        reject(e);
      };
      const req = doRequest(
        {
          protocol: base.protocol,
          hostname: base.hostname.replace(/^\[|\]$/g, ''),
          port: base.port,
          method,
          path: urlFor(path, ro.query),
          agent,
          headers: headers(payload ? (ro.contentType ?? 'application/json') : undefined, payload?.length),
        },
        (res: IncomingMessage) => {
          answered = true;
          const chunks: Buffer[] = [];
          res.on('data', (c: Buffer) => chunks.push(c));
          res.on('error', (e) => fail(networkError(creds, e)));
          res.on('end', () => {
            if (settled) return;
            const text = Buffer.concat(chunks).toString('utf8');
            const status = res.statusCode ?? 0;
            if (status < 200 || status > 299) return fail(statusError(creds.server, method, path, status, text));
            settled = true;
            clearTimeout(timer);
            try {
              resolve((text ? JSON.parse(text) : undefined) as T);
            } catch {
              reject(
                new DatastoreError(
                  'Unavailable',
                  `Kubernetes API ${creds.server}: ${method} ${path} returned a body that is not JSON: ` +
                    `${text.slice(0, 200)}`,
                ),
              );
            }
          });
        },
      );
      const timer = setTimeout(
        () =>
          fail(
            new DatastoreError(
              'Unavailable',
              `Kubernetes API ${creds.server}: ${method} ${path} did not answer within ${timeoutMs} ms; check ` +
                `${creds.source} and the API server's health`,
            ),
          ),
        timeoutMs,
      );
      req.on('error', (e: NodeJS.ErrnoException) => {
        if (resend && !settled && !answered && req.reusedSocket && (e.code === 'ECONNRESET' || e.code === 'EPIPE')) {
          settled = true;
          clearTimeout(timer);
          dropIdleConnections();
          return resolve(
            request<T>(method, path, body, { ...ro, timeoutMs: Math.max(1, deadline - Date.now()) }, false),
          );
        }
        fail(networkError(creds, e));
      });
      req.end(payload);
    });
  }

  function watch(
    path: string,
    query: Record<string, string | undefined>,
    onEvent: (ev: WatchEventRaw) => void,
    onEnd: (end: WatchEnd) => void,
  ): WatchHandle {
    let stopped = false;
    let ended = false;
    const end = (e: WatchEnd) => {
      if (ended || stopped) return;
      ended = true;
      clearTimeout(connectTimer);
      onEnd(e);
    };
    const req = doRequest(
      {
        protocol: base.protocol,
        hostname: base.hostname.replace(/^\[|\]$/g, ''),
        port: base.port,
        method: 'GET',
        path: urlFor(path, { ...query, watch: '1' }),
        agent,
        headers: headers(),
      },
      (res: IncomingMessage) => {
        clearTimeout(connectTimer);
        const status = res.statusCode ?? 0;
        if (status !== 200) {
          let text = '';
          res.on('data', (c: Buffer) => (text += c.toString('utf8')));
          res.on('end', () =>
            end({ error: statusError(creds.server, 'WATCH', path, status, text), gone: status === 410 }),
          );
          return;
        }
        let buf = '';
        res.on('data', (c: Buffer) => {
          buf += c.toString('utf8');
          let nl: number;
          while ((nl = buf.indexOf('\n')) >= 0) {
            const line = buf.slice(0, nl).trim();
            buf = buf.slice(nl + 1);
            if (!line || stopped) continue;
            let ev: WatchEventRaw;
            try {
              ev = JSON.parse(line) as WatchEventRaw;
            } catch {
              end({
                error: new DatastoreError(
                  'Unavailable',
                  `Kubernetes API ${creds.server}: watch ${path} sent a line that is not JSON`,
                ),
              });
              req.destroy();
              return;
            }
            if (ev.type === 'ERROR') {
              const st = ev.object as unknown as { code?: number };
              end({
                error: statusError(creds.server, 'WATCH', path, st.code ?? 500, JSON.stringify(ev.object)),
                gone: st.code === 410,
              });
              req.destroy();
              return;
            }
            onEvent(ev);
          }
        });
        res.on('end', () => end({}));
        res.on('error', (e) => end({ error: networkError(creds, e) }));
      },
    );
    // Only the connection has a deadline: a watch stays open indefinitely.
    const connectTimer = setTimeout(() => {
      end({
        error: new DatastoreError(
          'Unavailable',
          `Kubernetes API ${creds.server}: watch ${path} did not answer within ${defaultTimeout} ms`,
        ),
      });
      req.destroy();
    }, defaultTimeout);
    req.on('error', (e: NodeJS.ErrnoException) => end({ error: networkError(creds, e) }));
    req.end();
    return {
      stop: () => {
        stopped = true;
        clearTimeout(connectTimer);
        req.destroy();
      },
    };
  }

  const enc = encodeURIComponent;
  return {
    server: creds.server,
    ...(creds.ca ? { ca: creds.ca } : {}),
    request,
    getPod: (ns, name, ro) => request<KubePod>('GET', `/api/v1/namespaces/${enc(ns)}/pods/${enc(name)}`, undefined, ro),
    getNamespace: (name, ro) => request<KubeObject>('GET', `/api/v1/namespaces/${enc(name)}`, undefined, ro),
    getNode: (name, ro) => request<KubeObject>('GET', `/api/v1/nodes/${enc(name)}`, undefined, ro),
    patchPod: (ns, name, patch, type = 'merge', ro) =>
      request<KubePod>('PATCH', `/api/v1/namespaces/${enc(ns)}/pods/${enc(name)}`, patch, {
        ...ro,
        contentType: PATCH_CONTENT_TYPES[type],
      }),
    watch,
    close: () => agent.destroy(),
  };
}
