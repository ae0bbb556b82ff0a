// A list+watch cache of one kind: list, watch from the list's revision, and
// re-list when the watch reports the revision gone (compaction / 410) or fails.
// Calls onChange after every change (the controller debounces).
import type { Kind, Resource } from '../../model/resources.js';
import type { Datastore, Watch } from '../../datastore/types.js';
import type { Logger } from '../../cni/types.js';

export interface KindCache<K extends Kind> {
  readonly items: ReadonlyMap<string, Resource<K>>;
  /** Resolves after the first list. */
  readonly synced: Promise<void>;
  stop(): void;
}

export function watchKind<K extends Kind>(ds: Datastore, kind: K, log: Logger, onChange: () => void, retryMs = 1000): KindCache<K> {
  const items = new Map<string, Resource<K>>();
  let w: Watch | undefined;
  let stopped = false;
  let timer: NodeJS.Timeout | undefined;
  let markSynced!: () => void;
  const synced = new Promise<void>((r) => (markSynced = r));

  const relist = async (): Promise<void> => {
    w?.stop();
    w = undefined;
    if (stopped) return;
    try {
      const res = await ds.list(kind);
      if (stopped) return;
      items.clear();
      for (const it of res.items) items.set(it.metadata.name, it);
      markSynced();
      onChange();
      w = ds.watch(kind, { revision: res.revision }, (ev) => {
        if (stopped) return;
        if (ev.type === 'ERROR') {
          log.info(`watch of ${kind} ended; listing again`, { error: ev.error.message });
          schedule(0);
          return;
        }
        if (ev.type === 'DELETED') items.delete(ev.object.metadata.name);
        else items.set(ev.object.metadata.name, ev.object);
        onChange();
      });
    } catch (e) {
      log.warn(`cannot list ${kind}; retrying`, { error: (e as Error).message, retryInMs: retryMs });
      schedule(retryMs);
    }
  };
  const schedule = (ms: number) => {
    clearTimeout(timer);
    timer = setTimeout(() => void relist(), ms);
  };
  void relist();
  return {
    items,
    synced,
    stop() {
      stopped = true;
      clearTimeout(timer);
      w?.stop();
    },
  };
}
