// kubeconfig `exec` credential plugins (EKS `aws eks get-token`, GKE
// `gke-gcloud-auth-plugin`, AKS `kubelogin`, OIDC helpers), run the way
// client-go runs them: the command from the user entry with its args and env,
// KUBERNETES_EXEC_INFO describing the request, an ExecCredential of the same
// apiVersion (client.authentication.k8s.io/v1 or v1beta1) on stdout, cached
// until its expirationTimestamp. Synchronous on purpose: netpluginctl asks for
// a token before each request, and a plugin runs once per expiry.
import { execFileSync } from 'node:child_process';
import { isAbsolute, resolve } from 'node:path';
import { DatastoreError } from '../errors.js';

const EXEC_API_VERSIONS = ['client.authentication.k8s.io/v1', 'client.authentication.k8s.io/v1beta1'] as const;

interface ExecCredentialStatus {
  token?: string;
  clientCertificateData?: string;
  clientKeyData?: string;
  expirationTimestamp?: string;
}

interface ExecConfig {
  apiVersion?: unknown;
  command?: unknown;
  args?: unknown;
  env?: unknown;
  interactiveMode?: unknown;
  provideClusterInfo?: unknown;
  installHint?: unknown;
}

/** Renewed this long before expiry, so a request never carries a token that expires in flight. */
const SKEW_MS = 10_000;

function invalid(msg: string): DatastoreError {
  return new DatastoreError('Invalid', msg);
}

/**
 * Returns a function that yields a current credential, running the plugin on
 * the first call and again once the cached one expires.
 */
export function execCredential(
  raw: unknown,
  ctx: { user: string; where: string; cluster: Record<string, string>; dir: string; env?: NodeJS.ProcessEnv },
): () => ExecCredentialStatus {
  const exec = (raw ?? {}) as ExecConfig;
  const what = `${ctx.where}: user ${ctx.user}: exec`;
  const apiVersion = exec.apiVersion;
  if (typeof apiVersion !== 'string' || !(EXEC_API_VERSIONS as readonly string[]).includes(apiVersion)) {
    throw invalid(
      `${what}: apiVersion ${JSON.stringify(apiVersion ?? '')} is not supported; use ${EXEC_API_VERSIONS.join(' or ')}`,
    );
  }
  if (typeof exec.command !== 'string' || !exec.command) throw invalid(`${what}: command is missing`);
  const args = Array.isArray(exec.args) ? exec.args.map(String) : [];
  const env: Record<string, string> = {};
  for (const e of Array.isArray(exec.env) ? exec.env : []) {
    const { name, value } = (e ?? {}) as { name?: unknown; value?: unknown };
    if (typeof name !== 'string') throw invalid(`${what}: env entries need a name`);
    env[name] = String(value ?? '');
  }
  const mode = exec.interactiveMode;
  if (apiVersion.endsWith('/v1') && mode === undefined)
    throw invalid(`${what}: interactiveMode is required with ${apiVersion} (Never, IfAvailable or Always)`);
  if (mode !== undefined && mode !== 'Never' && mode !== 'IfAvailable' && mode !== 'Always')
    throw invalid(`${what}: interactiveMode ${JSON.stringify(mode)} is not Never, IfAvailable or Always`);
  if (mode === 'Always')
    throw invalid(
      `${what}: interactiveMode Always needs a terminal for the plugin, which netpluginctl does not give it; log in ` +
        `first (the plugin's cache then answers non-interactively) or use IfAvailable`,
    );
  // client-go: a command with a path separator is relative to the kubeconfig's directory.
  const command =
    exec.command.includes('/') && !isAbsolute(exec.command) ? resolve(ctx.dir, exec.command) : exec.command;
  const hint = typeof exec.installHint === 'string' ? ` (${exec.installHint.trim()})` : '';

  let cached: ExecCredentialStatus | undefined;
  let expiresAt = Infinity;
  const run = (): ExecCredentialStatus => {
    const info = {
      apiVersion,
      kind: 'ExecCredential',
      spec: { interactive: false, ...(exec.provideClusterInfo === true ? { cluster: ctx.cluster } : {}) },
    };
    let out: string;
    try {
      out = execFileSync(command, args, {
        env: { ...(ctx.env ?? process.env), ...env, KUBERNETES_EXEC_INFO: JSON.stringify(info) },
        encoding: 'utf8',
        stdio: ['ignore', 'pipe', 'pipe'],
        timeout: 60_000,
        maxBuffer: 4 << 20,
      });
    } catch (e) {
      const err = e as NodeJS.ErrnoException & { status?: number; stderr?: string };
      if (err.code === 'ENOENT') throw invalid(`${what}: command ${JSON.stringify(command)} not found${hint}`);
      const tail = (err.stderr ?? '').trim().split('\n').slice(-3).join(' | ');
      throw new DatastoreError(
        'Unauthorized',
        `${what}: ${command} failed ` +
          `(${err.status != null ? `exit status ${err.status}` : (err.code ?? err.message)})` +
          `${tail ? `: ${tail}` : ''}`,
      );
    }
    let cred: { apiVersion?: string; kind?: string; status?: ExecCredentialStatus };
    try {
      cred = JSON.parse(out);
    } catch {
      throw invalid(`${what}: ${command} printed no ExecCredential JSON: ${out.slice(0, 200)}`);
    }
    if (cred.kind !== 'ExecCredential')
      throw invalid(`${what}: ${command} printed kind ${JSON.stringify(cred.kind ?? '')}, not ExecCredential`);
    if (cred.apiVersion !== apiVersion)
      throw invalid(
        `${what}: the plugin is configured for ${apiVersion} but ${command} answered ` +
          `${JSON.stringify(cred.apiVersion ?? '')}`,
      );
    const st = cred.status ?? {};
    if (!st.token && !(st.clientCertificateData && st.clientKeyData))
      throw invalid(
        `${what}: ${command} returned neither status.token nor status.clientCertificateData with clientKeyData`,
      );
    if (!!st.clientCertificateData !== !!st.clientKeyData)
      throw invalid(`${what}: ${command} returned a client certificate without a key (or a key without a certificate)`);
    const exp = st.expirationTimestamp ? Date.parse(st.expirationTimestamp) : Infinity;
    if (Number.isNaN(exp))
      throw invalid(
        `${what}: ${command} returned expirationTimestamp ${JSON.stringify(st.expirationTimestamp)}, not RFC 3339`,
      );
    expiresAt = exp;
    return st;
  };
  return () => {
    if (!cached || Date.now() > expiresAt - SKEW_MS) cached = run();
    return cached;
  };
}
