// Bottom-level error classes shared by every layer (datastore, k8s, ipam, plugins).
// The CNI layer maps them to spec error codes in one place (src/cni/errors.ts).

/** An error that carries a CNI error code and is safe to show to the runtime as-is. */
export class CniError extends Error {
  override name = 'CniError';
  constructor(
    /** CNI spec code: 1,2,3,4,5,6,7,11,50,51; 100+ are netplugin's own. */
    public readonly code: number,
    message: string,
    public readonly details?: string,
  ) {
    super(message);
  }
}

/** netplugin-specific CNI codes (the spec reserves 100+ for plugins). */
export const ErrorCodes = {
  IncompatibleVersion: 1,
  UnsupportedField: 2,
  UnknownContainer: 3,
  InvalidEnvironment: 4,
  IOFailure: 5,
  DecodeFailure: 6,
  InvalidNetworkConfig: 7,
  TryAgainLater: 11,
  PluginNotAvailable: 50,
  LimitedConnectivity: 51,
  /** IPAM could not satisfy the request (pool exhausted, address taken, cap reached). */
  IpamFailure: 100,
  /** The dataplane (netlink, sysctl, netns) failed. */
  DataplaneFailure: 101,
  /** The orchestrator refused or lacked something (pod missing, annotation invalid). */
  OrchestratorFailure: 102,
  /** A delegated plugin (host-local, ...) failed. */
  DelegateFailure: 103,
  /** CHECK found drift between the result and the system. */
  CheckFailed: 104,
  Internal: 999,
} as const;

/**
 * An error of one layer named by a kind of that layer (WorkloadError, ConfigError): the layer never
 * picks a CNI code; the CNI edge (src/cni/errors.ts) maps each kind to one.
 */
export class KindError<K extends string> extends Error {
  constructor(
    public readonly kind: K,
    message: string,
    /** Shown as the CNI error's details (where to read more). */
    public readonly details?: string,
  ) {
    super(message);
  }
}

export type DatastoreErrorKind = 'NotFound' | 'AlreadyExists' | 'Conflict' | 'Unavailable' | 'Unauthorized' | 'Invalid';

/** The one classification of datastore/API failures (etcd and Kubernetes alike). */
export class DatastoreError extends Error {
  override name = 'DatastoreError';
  constructor(
    public readonly kind: DatastoreErrorKind,
    message: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
  static is(e: unknown, kind?: DatastoreErrorKind): e is DatastoreError {
    return e instanceof DatastoreError && (kind === undefined || e.kind === kind);
  }
}

/** Node's TLS error codes of a server certificate no trusted CA issued (the etcd and API clients word the fix). */
const UNKNOWN_CA_CODES = new Set([
  'UNABLE_TO_VERIFY_LEAF_SIGNATURE',
  'SELF_SIGNED_CERT_IN_CHAIN',
  'DEPTH_ZERO_SELF_SIGNED_CERT',
  'UNABLE_TO_GET_ISSUER_CERT_LOCALLY',
  'UNABLE_TO_GET_ISSUER_CERT',
  'CERT_UNTRUSTED',
]);

export function isUnknownCa(code: string | undefined): boolean {
  return code !== undefined && UNKNOWN_CA_CODES.has(code);
}
