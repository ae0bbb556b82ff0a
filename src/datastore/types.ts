// The datastore seam: the model's resources (src/model/resources.ts) read with
// a revision and written with compare-and-swap, one object or a transaction of
// several. Backends: etcd v3 (etcd.ts), Kubernetes API (kubernetes.ts),
// in-memory (memory.ts, tests and tools).
import type { Kind, Resource } from '../model/resources.js';
import type { InvalidObject } from './invalid.js';
export type { InvalidObject } from './invalid.js';

/**
 * One write of a transaction (Datastore.txn; the helpers are in txn.ts), with the guard it carries:
 * - create: the object must not exist;
 * - update: the object must still be at `res.metadata.resourceVersion`;
 * - delete: the object must exist, and be at `revision` when one is given;
 * - check: writes nothing; the object must exist at `revision` (a transaction
 *   that relies on an object it read, e.g. the IP pool an address comes from,
 *   fails if that object changed or went meanwhile).
 */
export type TxnOp =
  | { op: 'create'; res: Resource }
  | { op: 'update'; res: Resource }
  | { op: 'delete'; kind: Kind; name: string; namespace?: string; revision?: string }
  | { op: 'check'; kind: Kind; name: string; namespace?: string; revision: string };

export interface ListOptions {
  /** Absent or undefined: every namespace. */
  namespace?: string | undefined;
  /** A label selector in the src/selector language, matched against metadata.labels. */
  labelSelector?: string | undefined;
  /** Only names starting with this prefix. */
  namePrefix?: string;
  /**
   * Only this node's WorkloadEndpoints (spec.node); other kinds refuse it
   * (Invalid). The Kubernetes backend asks the API server for the node's
   * pods only (field selector spec.nodeName).
   */
  node?: string;
}

/**
 * Callers pass the object's own namespace and resourceVersion, which a
 * cluster-scoped or never-stored object lacks: undefined means "none".
 */
export interface DeleteOptions {
  namespace?: string | undefined;
  /** Delete only if the object is still at this revision. */
  revision?: string | undefined;
}

export interface WatchOptions {
  /** Continue from this revision (a list's); absent: from now. */
  revision?: string | undefined;
  namespace?: string | undefined;
}

export interface ListResult<K extends Kind> {
  items: Array<Resource<K>>;
  /** Revision of the store at which the list was read; pass to watch() to continue from it. */
  revision: string;
  /**
   * Malformed objects in the list's scope, left out of `items` (src/datastore/invalid.ts): a list
   * never fails on one object. Absent when there are none.
   */
  invalid?: InvalidObject[];
}

export type WatchEvent<K extends Kind> =
  | { type: 'ADDED' | 'MODIFIED'; object: Resource<K> }
  /**
   * With `invalid`: the object is now malformed (or was deleted while malformed). Consumers
   * drop what they have of it, so nothing acts on a stale copy (an endpoint's pod becomes
   * unknown: isolated). `object` is then its last valid state where the backend still has it
   * (etcd's previous value, a pod's last endpoint), else its identity only (metadata; empty spec).
   */
  | { type: 'DELETED'; object: Resource<K>; invalid?: InvalidObject }
  /** The requested revision is gone (compacted / 410); the watcher must re-list. */
  | { type: 'ERROR'; error: Error };

export interface Watch {
  stop(): void;
}

export interface CallOptions {
  /** Per-call deadline in ms (default: the store's deadline). */
  timeoutMs?: number;
  /** Read from the store itself, never from a read cache in front of it (readiness checks: the store must answer). */
  fresh?: boolean;
  /**
   * get() may answer with the object as this process last wrote it (the
   * agent remembers its own handle and endpoint writes), which another writer
   * may have changed since. Only for a read whose answer is used to guard a
   * write by its revision: a stale answer then costs a failed compare and a
   * re-read, never a wrong write. Ignored by stores without that memory.
   */
  recent?: boolean;
}

/**
 * Every method throws DatastoreError (src/errors.ts) classified as NotFound,
 * AlreadyExists, Conflict, Unavailable, Unauthorized or Invalid.
 */
export interface Datastore {
  readonly type: 'etcdv3' | 'kubernetes' | 'memory';
  /**
   * txn() is all or nothing (etcd, memory). Absent: its ops may stop half way (ordered writes, Kubernetes), and callers
   * order them for that.
   */
  readonly atomicTxn?: boolean;
  get<K extends Kind>(kind: K, name: string, namespace?: string, opts?: CallOptions): Promise<Resource<K>>;
  list<K extends Kind>(kind: K, opts?: ListOptions & CallOptions): Promise<ListResult<K>>;
  /** Fails with AlreadyExists. Returns the stored object with its resourceVersion. */
  create<K extends Kind>(res: Resource<K>, opts?: CallOptions): Promise<Resource<K>>;
  /** Compare-and-swap on res.metadata.resourceVersion (required); Conflict when it moved. */
  update<K extends Kind>(res: Resource<K>, opts?: CallOptions): Promise<Resource<K>>;
  /** With `revision`, deletes only if unchanged (Conflict otherwise). NotFound when absent. */
  delete<K extends Kind>(kind: K, name: string, opts?: DeleteOptions & CallOptions): Promise<void>;
  /**
   * Several writes, each guarded as its op says (src/datastore/txn.ts): on etcd
   * and in memory all or nothing, one revision; on Kubernetes the ops run in
   * order and stop at the first failure (the API has no multi-object
   * transaction). Fails with a TxnError naming the op whose guard failed.
   * Returns per op the stored object (create/update) or undefined (delete).
   */
  txn(ops: TxnOp[], opts?: CallOptions): Promise<Array<Resource | undefined>>;
  watch<K extends Kind>(kind: K, opts: WatchOptions, onEvent: (ev: WatchEvent<K>) => void): Watch;
  close(): Promise<void>;
}
