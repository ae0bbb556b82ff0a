// Compare-and-swap writes of one object, with the retry every writer of a
// shared object needs, written once: read what is stored, write guarded by
// its revision (or by its absence), and on a lost race read again and retry.
// The guards themselves are the Datastore's (types.ts); this is only the loop.
import { DatastoreError } from '../errors.js';
import type { Kind, Resource } from '../model/resources.js';
import type { Datastore, TxnOp } from './types.js';

/** Attempts before the last guard failure is returned to the caller. */
const CAS_ATTEMPTS = 7;

/** The object as stored now, or undefined when there is none. */
export async function getIfExists<K extends Kind>(
  ds: Pick<Datastore, 'get'>,
  kind: K,
  name: string,
  namespace?: string,
): Promise<Resource<K> | undefined> {
  try {
    return await ds.get(kind, name, namespace);
  } catch (e) {
    if (DatastoreError.is(e, 'NotFound')) return undefined;
    throw e;
  }
}

/**
 * The write of `res` over `cur` (what was read): a create guarded by the
 * object's absence, or an update guarded by the revision `cur` was read at.
 */
export function casOp<K extends Kind>(
  res: Resource<K>,
  cur: Resource<K> | undefined,
): TxnOp & { op: 'create' | 'update'; res: Resource<K> } {
  if (!cur) return { op: 'create', res };
  return {
    op: 'update',
    res: { ...res, metadata: { ...res.metadata, resourceVersion: cur.metadata.resourceVersion! } },
  };
}

interface CasWritten<K extends Kind> {
  /** What the store holds now, with its new revision. */
  stored: Resource<K>;
  /** What the write replaced (undefined: it created the object). */
  prev?: Resource<K>;
}

/** `next` had nothing to write: `stored` is the object as read (undefined when absent). */
interface CasUnchanged<K extends Kind> {
  unchanged: true;
  stored: Resource<K> | undefined;
}

type Next<K extends Kind, R> = (cur: Resource<K> | undefined) => R | Promise<R>;

/**
 * Writes `next(cur)` over the object as stored (`cur`, undefined when absent)
 * with compare-and-swap, reading again and retrying while another writer wins
 * the race (AlreadyExists on a create, Conflict or NotFound on an update), up
 * to `attempts` writes; then the last guard failure is thrown. With
 * `assumeAbsent` the first attempt creates without reading (the common case
 * of a writer that makes new objects costs one round trip). `next` may be
 * async, and may return undefined for "nothing to write" (then nothing is
 * written and the result is `{unchanged: true, stored: cur}`); it runs again on
 * every attempt, so it must only compute (a throw from it is passed on).
 */
export async function casRetry<K extends Kind>(
  ds: CasStore,
  ref: CasRef<K>,
  next: Next<K, Resource<K>>,
  opts?: CasOptions,
): Promise<CasWritten<K>>;
export async function casRetry<K extends Kind>(
  ds: CasStore,
  ref: CasRef<K>,
  next: Next<K, Resource<K> | undefined>,
  opts?: CasOptions,
): Promise<CasWritten<K> | CasUnchanged<K>>;
export async function casRetry<K extends Kind>(
  ds: CasStore,
  ref: CasRef<K>,
  next: Next<K, Resource<K> | undefined>,
  opts: CasOptions = {},
): Promise<CasWritten<K> | CasUnchanged<K>> {
  const attempts = opts.attempts ?? CAS_ATTEMPTS;
  for (let attempt = 1; ; attempt++) {
    const cur =
      attempt === 1 && opts.assumeAbsent ? undefined : await getIfExists(ds, ref.kind, ref.name, ref.namespace);
    const res = await next(cur);
    if (res === undefined) return { unchanged: true, stored: cur };
    const op = casOp(res, cur);
    try {
      const stored = op.op === 'create' ? await ds.create(op.res) : await ds.update(op.res);
      return { stored, ...(cur ? { prev: cur } : {}) };
    } catch (e) {
      const lostRace = cur
        ? DatastoreError.is(e, 'Conflict') || DatastoreError.is(e, 'NotFound')
        : DatastoreError.is(e, 'AlreadyExists');
      if (!lostRace || attempt >= attempts) throw e;
    }
  }
}

type CasStore = Pick<Datastore, 'get' | 'create' | 'update'>;
interface CasRef<K extends Kind> {
  kind: K;
  name: string;
  namespace?: string;
}
interface CasOptions {
  attempts?: number;
  assumeAbsent?: boolean;
}
