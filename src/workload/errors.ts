// What can be wrong with a workload's options, its pod lookup or its readiness
// gates, as kinds of this layer; the CNI edge (toCniError in src/cni/errors.ts)
// maps each kind to its CNI code once.
import { KindError } from '../errors.js';

export type WorkloadErrorKind =
  /** A value that does not parse, or two annotations that exclude each other. */
  | 'malformed'
  /** A well-formed netconf (or CNI_ARGS) setting that cannot be honoured: fixed in the configuration. */
  | 'invalid-setting'
  /** A well-formed pod or namespace annotation that cannot be honoured: the orchestrator's to fix. */
  | 'annotation-not-honoured'
  /** An annotation asks for a feature the netconf's feature_control leaves off. */
  | 'feature-disabled'
  /** CNI_ARGS IP= is not one IPv4 and/or one IPv6 address. */
  | 'invalid-cni-args'
  /** A requested address lies outside every enabled pool. */
  | 'address-not-in-pool'
  /** The API server is unreachable or throttling: retrying later succeeds. */
  | 'api-unavailable'
  /** The pod or namespace cannot be read (missing, not allowed, failed). */
  | 'pod-unreadable'
  /** A readiness gate did not answer 2xx in time. */
  | 'not-ready';

export class WorkloadError extends KindError<WorkloadErrorKind> {
  override name = 'WorkloadError';
  static is(e: unknown, kind?: WorkloadErrorKind): e is WorkloadError {
    return e instanceof WorkloadError && (kind === undefined || e.kind === kind);
  }
}
