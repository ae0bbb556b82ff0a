// Compare-and-swap retries. Every IPAM write is guarded by the revision it
// read (or by the object's absence); a writer that loses re-reads and tries
// again, with jittered exponential backoff so racing writers spread out, and
// gives up after maxRetries with a "try again later" (conflict-retries-exhausted).
import { DatastoreError } from '../errors.js';
import { TxnError } from '../datastore/txn.js';
import { IpamError } from './errors.js';
import { isKind, type IpamCore } from './core.js';

/** A transaction's guard failed: re-read and try again (retry() handles Conflict). */
export function asConflict(e: unknown): never {
  if (
    DatastoreError.is(e) &&
    TxnError.opOf(e) !== undefined &&
    (e.kind === 'Conflict' || e.kind === 'AlreadyExists' || e.kind === 'NotFound')
  ) {
    throw new DatastoreError('Conflict', e.message, { cause: e });
  }
  throw e;
}

/** Run `fn` until it does not hit a CAS conflict, at most maxRetries times. */
export async function retry<T>(core: IpamCore, what: string, fn: (attempt: number) => Promise<T>): Promise<T> {
  for (let attempt = 0; ; attempt++) {
    try {
      return await fn(attempt);
    } catch (e) {
      if (!isKind(e, 'Conflict')) throw e;
      if (attempt + 1 >= core.maxRetries) {
        throw new IpamError(
          'conflict-retries-exhausted',
          `${what}: gave up after ${core.maxRetries} conflicting concurrent writes; the IPAM data is heavily ` +
            `contended, try again`,
        );
      }
      core.log.debug('ipam: CAS conflict, retrying', { what, attempt });
      // Jittered exponential backoff so racing writers spread out.
      const base = Math.min(2 ** attempt, 64);
      await new Promise((r) => setTimeout(r, base * (0.5 + Math.random())));
    }
  }
}
