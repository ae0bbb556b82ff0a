// Malformed objects in a store: an etcd value that is not JSON or fails its
// kind's schema, a custom resource with a bad spec, a pod whose endpoint
// annotations do not parse. Any writer with access to one object (a tenant
// editing its pod's annotations, a broken tool) can make one; it must cost
// that object only. So every backend converts and validates per object: a
// list skips a malformed one and names it (ListResult.invalid), a watch turns
// it into a DELETED of its key (consumers drop what they had: a stale endpoint
// or policy is not kept), and only a get of exactly that object fails, with an
// InvalidObjectError naming the object, the field and the fix.
//
// The process keeps one record of the malformed objects its stores have shown
// it (invalidObjects): the agent and kube-controllers log each once per
// object and revision, and export their count per kind as the gauge
// netplugin_datastore_invalid_objects (docs/datastore.md).
import { DatastoreError } from '../errors.js';
import { API_VERSION, NAMESPACED_KINDS, type Kind, type Resource, type SpecOf } from '../model/resources.js';
import type { Registry } from '../observe/metrics.js';
import { KINDS } from './keys.js';

export interface InvalidObject {
  kind: Kind;
  name: string;
  /** Namespaced kinds only. */
  namespace?: string;
  revision?: string;
  /** Where it is stored (etcd key, API path, pod), so an operator can find and repair it. */
  where: string;
  /** Why it is refused: the field(s) and the problem. */
  reason: string;
  /** The stored object as read (parsed JSON, or its text when it is not JSON), for `netpluginctl describe`. */
  raw?: unknown;
}

/** Text of a malformed value kept for describe: enough to see what is wrong, never megabytes. */
const MAX_RAW_TEXT = 4096;

export function rawText(s: string): string {
  return s.length > MAX_RAW_TEXT ? `${s.slice(0, MAX_RAW_TEXT)}... (${s.length} bytes in all)` : s;
}

export function invalidLabel(o: Pick<InvalidObject, 'kind' | 'name' | 'namespace'>): string {
  return `${o.kind} ${NAMESPACED_KINDS.has(o.kind) ? `${o.namespace || 'default'}/` : ''}${o.name}`;
}

/** A get of a malformed object: Invalid, naming it, where it is and the field; carries it for describe. */
export class InvalidObjectError extends DatastoreError {
  constructor(readonly invalid: InvalidObject) {
    super(
      'Invalid',
      `${invalidLabel(invalid)} is malformed (${invalid.where}): ${invalid.reason}; fix or delete it ('netpluginctl ` +
        `describe' shows it as stored)`,
    );
  }
}

/** Fields of a DELETED watch event for a malformed object (types.ts WatchEvent). */
export function invalidTombstone<K extends Kind>(o: InvalidObject): Resource<K> {
  return {
    apiVersion: API_VERSION,
    kind: o.kind as K,
    metadata: {
      name: o.name,
      ...(o.namespace !== undefined ? { namespace: o.namespace } : {}),
      ...(o.revision !== undefined ? { resourceVersion: o.revision } : {}),
    },
    // Only the identity is known: consumers delete by key and keep their own last copy.
    spec: {} as SpecOf<K>,
  };
}

/**
 * Which of a kind's objects one list covered: all of them, one namespace, or only some (a node, a prefix, a selector).
 */
export type ListScope = { complete: true; namespace?: string | undefined } | { complete: false };

const MAX_LOGGED = 10_000;

class InvalidObjects {
  /** store \0 kind \0 namespace \0 name -> the object as last seen malformed. */
  private readonly known = new Map<string, InvalidObject>();
  /** `key@revision` already reported (bounded, oldest first): relists do not repeat a report. */
  private readonly reported = new Set<string>();
  private readonly listeners = new Set<(o: InvalidObject) => void>();

  private key(store: string, kind: Kind, name: string, namespace: string | undefined): string {
    return [store, kind, NAMESPACED_KINDS.has(kind) ? namespace || 'default' : '', name].join('\0');
  }

  /** `o` was read malformed from `store`. */
  seen(store: string, o: InvalidObject): void {
    const k = this.key(store, o.kind, o.name, o.namespace);
    this.known.set(k, o);
    const r = `${k}@${o.revision ?? ''}`;
    if (this.reported.has(r)) return;
    this.reported.add(r);
    if (this.reported.size > MAX_LOGGED) this.reported.delete(this.reported.values().next().value!);
    for (const fn of this.listeners) fn(o);
  }

  /** The object was read valid, or deleted. */
  cleared(store: string, kind: Kind, name: string, namespace: string | undefined): void {
    this.known.delete(this.key(store, kind, name, namespace));
  }

  /**
   * A list of `kind` found `found` malformed: within a complete scope, the ones it did not find are no longer
   * malformed.
   */
  listed(store: string, kind: Kind, scope: ListScope, found: InvalidObject[]): void {
    if (scope.complete) {
      const ns = scope.namespace;
      for (const [k, o] of this.known) {
        if (!k.startsWith(`${store}\0`) || o.kind !== kind) continue;
        if (ns === undefined || (o.namespace || 'default') === ns) this.known.delete(k);
      }
    }
    for (const o of found) this.seen(store, o);
  }

  all(): InvalidObject[] {
    return [...this.known.values()];
  }

  /** Calls `fn` once per malformed object and revision; returns the unsubscribe. */
  onReport(fn: (o: InvalidObject) => void): () => void {
    this.listeners.add(fn);
    return () => this.listeners.delete(fn);
  }
}

/** The malformed objects this process's stores have shown it. */
export const invalidObjects = new InvalidObjects();

/**
 * The gauge netplugin_datastore_invalid_objects{kind} on `registry` (every
 * kind, 0 when none) and one warning per malformed object and revision.
 */
export function observeInvalidObjects(
  registry: Registry,
  log?: { warn(msg: string, fields?: Record<string, unknown>): void },
): () => void {
  const gauge = registry.gauge(
    'netplugin_datastore_invalid_objects',
    'Malformed objects in the datastore this process currently knows of (skipped by lists and watches; see ' +
      'netpluginctl ipam check), by kind.',
    ['kind'],
  );
  registry.onCollect(() => {
    const n = new Map<Kind, number>(KINDS.map((k) => [k, 0]));
    for (const o of invalidObjects.all()) n.set(o.kind, (n.get(o.kind) ?? 0) + 1);
    for (const [kind, v] of n) gauge.set({ kind }, v);
  });
  if (!log) return () => undefined;
  return invalidObjects.onReport((o) =>
    log.warn('datastore: skipping a malformed object (it is treated as absent until fixed)', {
      object: invalidLabel(o),
      where: o.where,
      ...(o.revision !== undefined ? { revision: o.revision } : {}),
      reason: o.reason,
    }),
  );
}
