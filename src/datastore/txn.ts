// Multi-object transactions: the write ops of Datastore.txn(), the error that
// names the op whose guard failed, and the ordered-writes fallback for a
// backend without multi-object transactions (the Kubernetes API).
import { DatastoreError, type DatastoreErrorKind } from '../errors.js';
import { NAMESPACED_KINDS, type Kind, type Resource } from '../model/resources.js';
import type { CallOptions, Datastore, TxnOp } from './types.js';

export type { TxnOp };

/**
 * A transaction whose guard failed (or whose write failed): `failedOp` is the index of the op. Nothing was written
 * (etcd, memory).
 */
export class TxnError extends DatastoreError {
  constructor(
    kind: DatastoreErrorKind,
    message: string,
    readonly failedOp: number,
    options?: { cause?: unknown },
  ) {
    super(kind, message, options);
  }
  /** The index of the op that failed, when `e` is a transaction's failure. */
  static opOf(e: unknown): number | undefined {
    return e instanceof TxnError ? e.failedOp : undefined;
  }
}

export function opKind(op: TxnOp): Kind {
  return 'res' in op ? op.res.kind : op.kind;
}

function opName(op: TxnOp): string {
  return 'res' in op ? op.res.metadata.name : op.name;
}

/** The object an op writes, as messages name it (`create IPAMHandle net.abc`). */
export function describeOp(op: TxnOp): string {
  const kind = opKind(op);
  const ns = 'res' in op ? op.res.metadata.namespace : op.namespace;
  return `${op.op} ${kind} ${NAMESPACED_KINDS.has(kind) ? `${ns || 'default'}/` : ''}${opName(op)}`;
}

/** Identity of the object an op writes: two ops of one transaction must not write the same object. */
export function opIdentity(op: TxnOp): string {
  const kind = opKind(op);
  const ns = NAMESPACED_KINDS.has(kind) ? ('res' in op ? op.res.metadata.namespace : op.namespace) || 'default' : '';
  return `${kind}/${ns}/${opName(op)}`;
}

export function checkDistinct(ops: TxnOp[]): void {
  const seen = new Map<string, number>();
  ops.forEach((op, i) => {
    const id = opIdentity(op);
    const prev = seen.get(id);
    if (prev !== undefined)
      throw new DatastoreError('Invalid', `transaction writes ${id} twice (ops ${prev} and ${i}); one op per object`);
    seen.set(id, i);
  });
}

/**
 * Ordered writes for a backend without multi-object transactions: the ops run
 * one after the other, in the caller's order, and the first failure stops the
 * rest. What was written before it stays written, so callers order their ops
 * so that every prefix is a safe state (docs/ipam.md, crash safety).
 */
export async function orderedTxn(
  ds: Pick<Datastore, 'get' | 'create' | 'update' | 'delete'>,
  ops: TxnOp[],
  opts?: CallOptions,
): Promise<Array<Resource | undefined>> {
  checkDistinct(ops);
  const out: Array<Resource | undefined> = [];
  for (const [i, op] of ops.entries()) {
    try {
      if (op.op === 'create') out.push(await ds.create(op.res, opts));
      else if (op.op === 'update') out.push(await ds.update(op.res, opts));
      else if (op.op === 'check') {
        // Not atomic with the writes here (no multi-object transaction): checked when its turn comes.
        const cur = await ds.get(op.kind, op.name, op.namespace, opts);
        if (cur.metadata.resourceVersion !== op.revision)
          throw new DatastoreError(
            'Conflict',
            `${describeOp(op)}: modified (have ${op.revision}, store has ${cur.metadata.resourceVersion})`,
          );
        out.push(undefined);
      } else {
        await ds.delete(op.kind, op.name, { namespace: op.namespace, revision: op.revision, ...opts });
        out.push(undefined);
      }
    } catch (e) {
      if (e instanceof DatastoreError)
        throw new TxnError(
          e.kind,
          `${e.message} (op ${i} of a transaction of ${ops.length}; the ops before it were written)`,
          i,
          { cause: e },
        );
      throw e;
    }
  }
  return out;
}
