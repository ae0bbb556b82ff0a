// The one place where failures of every layer become CNI error codes.
import { CniError, DatastoreError, ErrorCodes, type DatastoreErrorKind } from '../errors.js';
import { redactString } from '../log/redact.js';
import { IpamError, type IpamErrorKind } from '../ipam/index.js';
import { HostLockError, type HostLockErrorKind } from '../hostlock/errors.js';

function firstLine(s: string): string {
  const line = s.split('\n', 1)[0]!.trim();
  return line.length > 300 ? line.slice(0, 300) + '...' : line;
}

/**
 * Datastore kinds to CNI codes. Unavailable (etcd down, API server throttling)
 * and Conflict (a compare-and-swap lost after bounded retries) both succeed if
 * the runtime simply retries, which is what code 11 asks of it. The rest are
 * "the store refused or lacked something" (102), except Invalid: the store
 * rejected a value we derived from configuration, so it is fixed there (7).
 */
const DATASTORE_CODES: Record<DatastoreErrorKind, number> = {
  Unavailable: ErrorCodes.TryAgainLater,
  Conflict: ErrorCodes.TryAgainLater,
  NotFound: ErrorCodes.OrchestratorFailure,
  AlreadyExists: ErrorCodes.OrchestratorFailure,
  Unauthorized: ErrorCodes.OrchestratorFailure,
  Invalid: ErrorCodes.InvalidNetworkConfig,
};

/**
 * IPAM kinds to CNI codes. What the request or the configuration got wrong
 * (an unparsable address, a pool list naming a missing, disabled or
 * other-family pool, an invalid stored pool) is fixed there (7; a handle ID
 * that cannot be formed lacks CNI_CONTAINERID, 4). What the IPAM state cannot
 * give (no pool for the node, exhausted, address taken or outside every
 * enabled pool, a pool reserved for other uses) is netplugin's IPAM failure
 * (100). Lost races and a busy host lock pass with time (11).
 */
const IPAM_CODES: Record<IpamErrorKind, number> = {
  'invalid-request': ErrorCodes.InvalidNetworkConfig,
  'missing-handle': ErrorCodes.InvalidEnvironment,
  'invalid-pool': ErrorCodes.InvalidNetworkConfig,
  'pool-not-found': ErrorCodes.InvalidNetworkConfig,
  'pool-wrong-family': ErrorCodes.InvalidNetworkConfig,
  'pool-disabled': ErrorCodes.InvalidNetworkConfig,
  'pool-use-not-allowed': ErrorCodes.IpamFailure,
  'no-pool-for-node': ErrorCodes.IpamFailure,
  'address-not-in-pool': ErrorCodes.IpamFailure,
  'address-taken': ErrorCodes.IpamFailure,
  exhausted: ErrorCodes.IpamFailure,
  'handle-mismatch': ErrorCodes.IpamFailure,
  'conflict-retries-exhausted': ErrorCodes.TryAgainLater,
};

/**
 * Host lock kinds (src/hostlock) to CNI codes: a busy lock passes with time
 * (11); an unusable one (an unsafe directory or file) needs the node fixed,
 * and the IPAM cannot run without it (100).
 */
const HOST_LOCK_CODES: Record<HostLockErrorKind, number> = {
  timeout: ErrorCodes.TryAgainLater,
  unusable: ErrorCodes.IpamFailure,
};

const DATASTORE_HINTS: Partial<Record<DatastoreErrorKind, string>> = {
  Unavailable: 'try again later',
  Conflict: 'concurrent update; try again later',
  Unauthorized:
    'check the credentials the netconf names (kubernetes.kubeconfig, or ' +
    'etcd_cert_file/etcd_key_file/etcd_ca_cert_file)',
};

/** A NetlinkError from src/native (duck-typed so this module never loads the addon). */
interface NetlinkLike {
  code: string;
  op: string;
  errno?: number;
  subject?: unknown;
  message?: string;
}
function isNetlinkLike(e: unknown): e is NetlinkLike {
  return (
    typeof e === 'object' &&
    e !== null &&
    typeof (e as NetlinkLike).code === 'string' &&
    typeof (e as NetlinkLike).op === 'string'
  );
}
/** Node's fs/child_process system errors: errno name plus the syscall. */
interface SystemErrorLike {
  code: string;
  syscall: string;
  path?: string;
  message: string;
}
function isSystemError(e: unknown): e is SystemErrorLike {
  return (
    e instanceof Error &&
    typeof (e as unknown as SystemErrorLike).code === 'string' &&
    typeof (e as unknown as SystemErrorLike).syscall === 'string'
  );
}

/** Maps anything thrown to a CniError; `internal` tells the caller to log the stack (an unexpected exception). */
export function toCniError(e: unknown): CniError & { internal?: boolean } {
  if (e instanceof CniError) return e;
  if (e instanceof IpamError) return new CniError(IPAM_CODES[e.kind], e.message);
  if (e instanceof HostLockError) return new CniError(HOST_LOCK_CODES[e.kind], e.message);
  if (e instanceof DatastoreError) {
    const hint = DATASTORE_HINTS[e.kind];
    return new CniError(
      DATASTORE_CODES[e.kind] ?? ErrorCodes.Internal,
      `datastore ${e.kind}: ${firstLine(e.message)}${hint ? ` (${hint})` : ''}`,
    );
  }
  if (isNetlinkLike(e)) {
    const subject =
      e.subject === undefined || e.subject === ''
        ? ''
        : ` ${typeof e.subject === 'string' ? e.subject : JSON.stringify(e.subject)}`;
    const text = e.message ? `: ${firstLine(e.message)}` : '';
    return new CniError(
      ErrorCodes.DataplaneFailure,
      `netlink ${e.op}${subject} failed: ${e.code}${text}`,
      e.errno !== undefined ? `errno ${e.errno}` : undefined,
    );
  }
  if (isSystemError(e)) {
    return new CniError(
      ErrorCodes.IOFailure,
      `I/O failure: ${e.syscall}${e.path ? ` ${e.path}` : ''}: ${e.code}`,
      firstLine(e.message),
    );
  }
  const msg = e instanceof Error ? e.message : String(e);
  const err = new CniError(
    ErrorCodes.Internal,
    `internal error: ${firstLine(msg) || (e instanceof Error ? e.name : 'unknown')}`,
  ) as CniError & {
    internal?: boolean;
  };
  err.internal = true;
  return err;
}

/** The error object printed on stdout (CNI spec "Error" result). */
export function errorResult(cniVersion: string, err: CniError): Record<string, unknown> {
  // The runtime logs and shows this (kubectl describe pod): the same redaction as every log line.
  const out: Record<string, unknown> = { cniVersion, code: err.code, msg: redactString(err.message) };
  if (err.details) out['details'] = redactString(err.details);
  return out;
}
