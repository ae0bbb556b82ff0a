// The IPAM's own failures. The domain says what went wrong (a kind) and how
// to fix it (the message); it never picks a CNI error code. The CNI edge
// (toCniError in src/cni/errors.ts) maps each kind to its code, once, for
// both plugins. Datastore failures stay DatastoreErrors (they keep their own
// mapping: unreachable or contended is "try again").

export type IpamErrorKind =
  /** The request itself is wrong: an unparsable address, two of one family, nothing to assign, no node name. */
  | 'invalid-request'
  /** No handle ID could be formed (the network name or CNI_CONTAINERID is missing). */
  | 'missing-handle'
  /** A stored IPPool is invalid (its CIDR, block size, selector…). */
  | 'invalid-pool'
  /** An explicitly listed pool (name or CIDR) does not exist. */
  | 'pool-not-found'
  /** An explicitly listed pool is of the other address family. */
  | 'pool-wrong-family'
  /** An explicitly listed pool is disabled. */
  | 'pool-disabled'
  /** The pool's spec.allowedUses leaves out what the address is for (a Tunnel pool asked for a workload address). */
  | 'pool-use-not-allowed'
  /** No enabled pool of the family selects the node. */
  | 'no-pool-for-node'
  /** A requested address lies in no enabled pool. */
  | 'address-not-in-pool'
  /** A requested address is held by someone else. */
  | 'address-taken'
  /** The selected pools have no free address for the node (or the node's block cap is reached). */
  | 'exhausted'
  /** A stored handle records another ID than asked for (written before IDs became case-exact). */
  | 'handle-mismatch'
  /** Compare-and-swap lost too often to concurrent writers: retrying later succeeds. */
  | 'conflict-retries-exhausted';

export class IpamError extends Error {
  override name = 'IpamError';
  constructor(
    public readonly kind: IpamErrorKind,
    message: string,
  ) {
    super(message);
  }
  static is(e: unknown, kind?: IpamErrorKind): e is IpamError {
    return e instanceof IpamError && (kind === undefined || e.kind === kind);
  }
}
