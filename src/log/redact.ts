// Secrets never reach any output: fields whose names say "secret" are masked
// whole, and secret-looking text inside any string (a kubeconfig pasted into
// an error, an Authorization header in any case, a PEM key, a JWT, the
// user:password@ of a URL) is masked in place. The one redaction for every
// output: log lines (file, stderr, agent) and the CNI error JSON on stdout.

export const REDACTED = '[REDACTED]';

/** Field names whose values are secrets whatever they hold. */
const SECRET_KEY = new RegExp(
  '(^|[-_.])(token|password|passwd|secret|authorization|cookie|bearer|credentials?|private[-_]?key|' +
    'client[-_]key[-_]data|key[-_]data|auth[-_]token)$|^(token|password|secret|authorization)',
  'i',
);

const PEM = /-----BEGIN ([A-Z ]*)PRIVATE KEY-----[\s\S]*?(-----END \1PRIVATE KEY-----|$)/g;
const BEARER = /\b(Bearer|Basic)\s+[A-Za-z0-9._~+/=-]+/gi;
// `scheme://user:pass@host`: the userinfo of any URL.
const USERINFO = /\b([a-z][a-z0-9+.-]*:\/\/)[^\s/@"'<>]+@/gi;
// A JWT (service-account tokens): three base64url parts, the first two JSON objects ("eyJ").
const JWT = /\beyJ[A-Za-z0-9_-]{4,}\.eyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]*/g;
// `token: abc`, `"password":"abc"`, `client-key-data: LS0t...` in YAML, JSON or k=v text.
const INLINE = new RegExp(
  String.raw`(["']?\b[\w-]*(?:token|password|passwd|secret|key-data|key_data|authorization)["']?\s*[:=]\s*)` +
    String.raw`("[^"]*"|'[^']*'|[^\s,;}]+)`,
  'gi',
);

function isSecretKey(key: string): boolean {
  return SECRET_KEY.test(key);
}

export function redactString(s: string): string {
  if (s.length < 6) return s;
  return s
    .replace(PEM, REDACTED)
    .replace(BEARER, (_m, scheme: string) => `${scheme} ${REDACTED}`)
    .replace(USERINFO, (_m, scheme: string) => `${scheme}${REDACTED}@`)
    .replace(JWT, REDACTED)
    .replace(INLINE, (_m, k: string) => k + REDACTED);
}

/** Deep copy with secrets masked; cycles and depth are bounded so a log call never throws. */
export function redact(value: unknown, depth = 0, seen: WeakSet<object> = new WeakSet()): unknown {
  if (typeof value === 'string') return redactString(value);
  if (typeof value !== 'object' || value === null) return value;
  if (seen.has(value) || depth > 6) return '[...]';
  seen.add(value);
  if (value instanceof Error) return redactString(value.message);
  if (Array.isArray(value)) return value.map((v) => redact(v, depth + 1, seen));
  if (Buffer.isBuffer(value)) return `<${value.length} bytes>`;
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(value)) {
    // A kubeconfig given inline (not as a path) is a credential in itself.
    if (isSecretKey(k) || (k.toLowerCase() === 'kubeconfig' && typeof v === 'string' && v.includes('\n')))
      out[k] = REDACTED;
    else out[k] = redact(v, depth + 1, seen);
  }
  return out;
}
