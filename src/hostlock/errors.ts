// The host lock's failures, apart from the lock so that src/cni/errors.ts maps them without loading it.
export type HostLockErrorKind =
  /** Not obtained in time: retrying later succeeds (CNI code 11). */
  | 'timeout'
  /** Cannot be used at all: its directory or file is unsafe, or cannot be created. */
  | 'unusable';

/** A host lock's failure; src/cni/errors.ts maps the kinds to CNI codes. */
export class HostLockError extends Error {
  override name = 'HostLockError';
  constructor(
    readonly kind: HostLockErrorKind,
    message: string,
  ) {
    super(message);
  }
}
