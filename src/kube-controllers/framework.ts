// What every controller shares: the clients, the logger, the metrics, the
// current settings, and the mirror pattern (sources in Kubernetes -> derived
// objects in our datastore, reconciled per key through a work queue, with a
// full resync at start that also removes mirrors whose source is gone).
import { DatastoreError } from '../errors.js';
import type { Logger } from '../log/types.js';
import type { KubeClient } from '../k8s/client.js';
import type { Kind, Resource } from '../model/resources.js';
import type { Datastore } from '../datastore/types.js';
import type { Registry } from '../observe/metrics.js';
import { Informer, type ListWatchSource } from '../watch/informer.js';
import { datastoreSource } from '../datastore/list-watch.js';
import { createWorkQueue, type WorkQueue } from '../watch/queue.js';
import type { Settings } from '../model/kube-controllers-config.js';

export interface ControllerContext {
  ds: Datastore;
  kube: KubeClient;
  log: Logger;
  registry: Registry;
  /** The current settings (KubeControllersConfiguration `default`), re-read on every use. */
  settings(): Settings;
  /** Called when the settings changed (controllers re-apply what depends on them). */
  onSettings(fn: () => void): void;
}

export interface Controller {
  readonly name: string;
  start(): void;
  /** Every informer listed once and the start-up resync queued. */
  readonly synced: boolean;
  /** Every watch stream is open. */
  readonly watching: boolean;
  stop(): Promise<void>;
}

/** Metrics every controller reports, labelled by controller. */
export function controllerMetrics(registry: Registry) {
  return {
    synced: registry.counter(
      'netplugin_kube_controllers_objects_synced_total',
      'Objects a controller reconciled (written or confirmed up to date)',
      ['controller'],
    ),
    errors: registry.counter(
      'netplugin_kube_controllers_errors_total',
      'Reconcile or watch errors, by controller (retried with backoff)',
      ['controller'],
    ),
    depth: registry.gauge('netplugin_kube_controllers_queue_depth', 'Keys waiting or being reconciled, by controller', [
      'controller',
    ]),
    released: registry.counter(
      'netplugin_kube_controllers_ipam_addresses_released_total',
      'Addresses released by the node controller, by reason (leaked: GC; node-deleted)',
      ['reason'],
    ),
  };
}

/**
 * A controller's work queue: failures are counted, logged (naming `what` the
 * key is) and retried with backoff; its depth is reported as a metric.
 */
export function controllerQueue(
  ctx: ControllerContext,
  name: string,
  what: (key: string) => string,
  handle: (key: string) => Promise<void>,
): WorkQueue {
  const m = controllerMetrics(ctx.registry);
  const q = createWorkQueue({
    handle,
    onError: (key, err, n) => {
      m.errors.inc({ controller: name });
      ctx.log.warn(`${name} controller: reconciling ${what(key)} failed; retrying with backoff`, {
        error: describeError(err),
        failures: n,
      });
    },
  });
  ctx.registry.onCollect(() => m.depth.set({ controller: name }, q.depth));
  return q;
}

/** An informer's onError for a controller: counted and logged (the informer re-lists by itself). */
export function watchErrors(ctx: ControllerContext, name: string): (err: Error, source: string) => void {
  const m = controllerMetrics(ctx.registry);
  return (err, source) => {
    m.errors.inc({ controller: name });
    ctx.log.warn(`${name} controller: watch of ${source} broke; re-listing with backoff`, { error: err.message });
  };
}

/** The message of a thrown value, for log fields. */
export function describeError(e: unknown): string {
  return e instanceof Error ? e.message : String(e);
}

/** Labels and spec equal (the parts a mirror owns). */
function sameContent(a: Resource, b: Resource): boolean {
  return (
    JSON.stringify(sortKeys(a.spec)) === JSON.stringify(sortKeys(b.spec)) &&
    JSON.stringify(sortKeys(a.metadata.labels ?? {})) === JSON.stringify(sortKeys(b.metadata.labels ?? {}))
  );
}

function sortKeys(v: unknown): unknown {
  if (Array.isArray(v)) return v.map(sortKeys);
  if (v && typeof v === 'object')
    return Object.fromEntries(
      Object.entries(v as Record<string, unknown>)
        .sort(([a], [b]) => a.localeCompare(b))
        .map(([k, x]) => [k, sortKeys(x)]),
    );
  return v;
}

/**
 * Makes the datastore object at `key` (`ns/name` or `name`) equal `desired`,
 * or absent when desired is undefined. CAS on the object read; a Conflict
 * throws and the queue retries. Returns what it did.
 */
export async function applyMirror<K extends Kind>(
  ds: Datastore,
  kind: K,
  key: string,
  desired: Resource<K> | undefined,
): Promise<'created' | 'updated' | 'deleted' | 'unchanged'> {
  const [namespace, name] = key.includes('/') ? (key.split('/', 2) as [string, string]) : [undefined, key];
  let current: Resource<K> | undefined;
  try {
    current = await ds.get(kind, name, namespace);
  } catch (e) {
    if (!DatastoreError.is(e, 'NotFound')) throw e;
  }
  if (!desired) {
    if (!current) return 'unchanged';
    try {
      await ds.delete(kind, name, { ...(namespace ? { namespace } : {}), revision: current.metadata.resourceVersion! });
    } catch (e) {
      if (!DatastoreError.is(e, 'NotFound')) throw e;
    }
    return 'deleted';
  }
  if (!current) {
    await ds.create(desired);
    return 'created';
  }
  if (sameContent(current, desired)) return 'unchanged';
  await ds.update({
    ...desired,
    metadata: { ...current.metadata, labels: desired.metadata.labels ?? {} },
  } as Resource<K>);
  return 'updated';
}

interface MirrorSource<T> {
  source: ListWatchSource<T>;
  /** The mirror keys a change of this source object affects. */
  mirrorKeys(key: string, obj: T | undefined, old: T | undefined): string[];
}

interface MirrorControllerSpec {
  name: string;
  kind: Kind;
  /** Whether a datastore object of `kind` is one of ours (name prefix). */
  isMirror(res: Resource): boolean;
  // biome-ignore lint/suspicious/noExplicitAny: sources of different resource types
  sources: Array<MirrorSource<any>>;
  /** The desired mirror at `key`, from the source caches (`get` reads source i's cache). */
  desired(key: string, get: <T>(i: number, key: string) => T | undefined): Resource | undefined;
  /** Every mirror key the sources currently call for (the start-up resync). */
  allKeys(list: <T>(i: number) => T[]): string[];
}

/**
 * Sources -> mirrors of one kind. The mirror kind is watched too: a mirror
 * edited or deleted by hand is put back, one whose source went away while we
 * were down is deleted by the resync.
 */
export class MirrorController implements Controller {
  readonly name: string;
  private readonly informers: Array<Informer<unknown>>;
  private readonly mirrors: Informer<Resource>;
  private readonly queue: WorkQueue;
  private started = false;
  private resynced = false;

  constructor(
    ctx: ControllerContext,
    private readonly spec: MirrorControllerSpec,
  ) {
    this.name = spec.name;
    const m = controllerMetrics(ctx.registry);
    const onError = watchErrors(ctx, spec.name);
    this.queue = controllerQueue(
      ctx,
      spec.name,
      (key) => `${spec.kind} ${key}`,
      async (key) => {
        const desired = this.spec.desired(key, (i, k) => this.informers[i]!.get(k) as never);
        const did = await applyMirror(ctx.ds, spec.kind, key, desired);
        m.synced.inc({ controller: spec.name });
        if (did !== 'unchanged') ctx.log.info(`${spec.name} controller: ${did} ${spec.kind} ${key}`);
      },
    );
    this.informers = spec.sources.map(
      (s) =>
        new Informer(
          s.source,
          {
            onChange: (key, obj, old) => {
              if (!this.resynced) return; // the start-up resync queues everything
              for (const k of s.mirrorKeys(key, obj, old)) this.queue.add(k);
            },
          },
          { onError },
        ),
    );
    this.mirrors = new Informer(
      datastoreSource(ctx.ds, spec.kind) as ListWatchSource<Resource>,
      {
        onChange: (key, obj, old) => {
          if (!this.resynced) return;
          if (spec.isMirror((obj ?? old)!)) this.queue.add(key);
        },
      },
      { onError },
    );
  }

  start(): void {
    if (this.started) return;
    this.started = true;
    for (const i of [...this.informers, this.mirrors]) i.start();
    void Promise.all([...this.informers, this.mirrors].map((i) => i.whenSynced())).then(() => {
      if (!this.started) return;
      const keys = new Set(this.spec.allKeys((i) => this.informers[i]!.list() as never));
      for (const r of this.mirrors.list()) if (this.spec.isMirror(r)) keys.add(this.mirrors.source.keyOf(r));
      this.resynced = true;
      for (const k of keys) this.queue.add(k);
    });
  }

  get synced(): boolean {
    return this.resynced;
  }

  get watching(): boolean {
    return [...this.informers, this.mirrors].every((i) => i.watching);
  }

  /** Resolves when the queue has nothing left (tests, shutdown). */
  idle(): Promise<void> {
    return this.queue.idle();
  }

  async stop(): Promise<void> {
    this.started = false;
    for (const i of [...this.informers, this.mirrors]) i.stop();
    await this.queue.stop();
  }
}
