// The one list+watch (src/watch/informer.ts) over a source written here: a
// versioned store with a history that can be compacted, and watch streams the
// test can end, hold silent or feed late events. What the informer's three
// uses rely on: re-list on 410 / compaction (and the deletions missed meanwhile
// reported), a read-through or write-through result never overtaken by an
// older event or list, answers only while the watch is open, and the
// silent-watch guard dropping a stream that outlived the server's timeout.
import { afterEach, describe, expect, it } from 'vitest';
import {
  Informer,
  type InformerOptions,
  type ListWatchSource,
  type SourceEvent,
  type ListWatchEnd,
} from '../../src/watch/informer.js';

interface Obj {
  name: string;
  rv: string;
  v: string;
}

interface Stream {
  from: string;
  stopped: boolean;
  emit(ev: SourceEvent<Obj>): void;
  end(e: ListWatchEnd): void;
}

/** A store with one global revision, a history of changes and compaction, as etcd and the API server keep. */
class Store implements ListWatchSource<Obj> {
  readonly name = 'test store';
  watchEndsWithinMs?: number;
  rev = 0;
  compactedTo = 0;
  lists = 0;
  failLists = false;
  readonly objects = new Map<string, Obj>();
  readonly history: Array<{ rev: number; ev: SourceEvent<Obj> }> = [];
  readonly streams: Stream[] = [];

  write(name: string, v: string, o: { quiet?: boolean } = {}): Obj {
    const obj = { name, rv: String(++this.rev), v };
    const type = this.objects.has(name) ? 'MODIFIED' : 'ADDED';
    this.objects.set(name, obj);
    this.record({ type, object: obj }, o.quiet);
    return obj;
  }

  remove(name: string, o: { quiet?: boolean } = {}): void {
    const obj = this.objects.get(name);
    if (!obj) return;
    this.objects.delete(name);
    this.record({ type: 'DELETED', object: { ...obj, rv: String(++this.rev) } }, o.quiet);
  }

  /** `quiet`: written while no stream hears it (a disconnect); only a re-list or a resumed watch sees it. */
  private record(ev: SourceEvent<Obj>, quiet = false): void {
    this.history.push({ rev: this.rev, ev });
    if (!quiet) for (const s of this.streams) if (!s.stopped) s.emit(ev);
  }

  compact(): void {
    this.compactedTo = this.rev;
    this.history.length = 0;
  }

  get open(): Stream | undefined {
    return this.streams.filter((s) => !s.stopped).at(-1);
  }

  async list(): Promise<{ items: Obj[]; revision: string }> {
    this.lists++;
    await new Promise((r) => setImmediate(r));
    if (this.failLists) throw new Error('store unavailable');
    return { items: [...this.objects.values()].map((o) => ({ ...o })), revision: String(this.rev) };
  }

  watch(revision: string, onEvent: (ev: SourceEvent<Obj>) => void, onEnd: (end: ListWatchEnd) => void) {
    const s: Stream = {
      from: revision,
      stopped: false,
      emit: (ev) => setImmediate(() => !s.stopped && onEvent(ev)),
      end: (e) => {
        if (s.stopped) return;
        s.stopped = true;
        setImmediate(() => onEnd(e));
      },
    };
    this.streams.push(s);
    if (Number(revision) < this.compactedTo) s.end({ gone: true });
    else for (const h of this.history) if (h.rev > Number(revision)) s.emit(h.ev);
    return { stop: () => void (s.stopped = true) };
  }

  keyOf(o: Obj): string {
    if (!o.name) throw new Error('no name');
    return o.name;
  }

  revisionOf(o: Obj): string {
    return o.rv;
  }
}

const informers: Array<Informer<Obj>> = [];
afterEach(() => {
  for (const i of informers.splice(0)) i.stop();
});

function inform(store: Store, opts: InformerOptions<Obj> = {}): { inf: Informer<Obj>; changes: string[] } {
  const changes: string[] = [];
  const inf = new Informer<Obj>(
    store,
    { onChange: (key, obj) => changes.push(obj ? `${key}=${obj.v}` : `${key} deleted`) },
    { backoffMs: 5, maxBackoffMs: 20, ...opts },
  );
  informers.push(inf);
  inf.start();
  return { inf, changes };
}

async function until(what: string, ok: () => boolean): Promise<void> {
  const deadline = Date.now() + 15_000;
  while (!ok()) {
    if (Date.now() > deadline) throw new Error(`gave up waiting for: ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

describe('Informer: re-list on 410 / compaction', () => {
  it('a watch whose revision is compacted re-lists, and reports what changed and what was deleted meanwhile', async () => {
    const store = new Store();
    store.write('a', '1');
    store.write('b', '1');
    const { inf, changes } = inform(store);
    await inf.whenSynced();
    await until('the watch is open', () => inf.open);

    // Disconnected: changes nobody hears, then the history is compacted past the informer's revision.
    store.open!.stopped = true;
    store.remove('a', { quiet: true });
    store.write('c', '1', { quiet: true });
    store.compact();
    store.streams.at(-1)!.stopped = false;
    store.streams.at(-1)!.end({}); // the server's own end: the informer resumes from its revision, which is gone

    await until('re-listed', () => store.lists === 2 && inf.open);
    expect(inf.keys().sort()).toEqual(['b', 'c']);
    expect(changes).toEqual(['a=1', 'b=1', 'c=1', 'a deleted']);
    // The new watch starts from the new list's revision.
    expect(store.open!.from).toBe(String(store.rev));
  });

  it('a normal end resumes from the last revision (no re-list) unless the user asks for a re-list', async () => {
    const resuming = new Store();
    resuming.write('a', '1');
    const r = inform(resuming);
    await until('open', () => r.inf.open);
    resuming.write('a', '2');
    await until('the event arrives', () => r.inf.get('a')?.v === '2');
    resuming.open!.end({});
    await until('a new watch', () => resuming.streams.length === 2 && r.inf.open);
    expect(resuming.streams[1]!.from).toBe('2');
    expect(resuming.lists).toBe(1);

    const relisting = new Store();
    const l = inform(relisting, { afterTimeout: 'relist' });
    await until('open', () => l.inf.open);
    relisting.open!.end({});
    await until('re-listed', () => relisting.lists === 2 && l.inf.open);
  });
});

describe('Informer: results from outside the watch against its events', () => {
  it('a read-through result newer than the watch is kept; an older event neither overwrites nor deletes it', async () => {
    const store = new Store();
    store.write('p', 'old');
    const { inf } = inform(store);
    await until('open', () => inf.open);

    // A GET answered by a faster replica: revision 3, while the watch still owes revision 2.
    store.open!.stopped = true;
    const mid = store.write('p', 'mid', { quiet: true });
    const newest = store.write('p', 'new', { quiet: true });
    inf.offer({ ...newest });
    expect(inf.get('p')?.v).toBe('new');

    const stream = store.streams.at(-1)!;
    stream.stopped = false;
    stream.emit({ type: 'MODIFIED', object: mid });
    stream.emit({ type: 'DELETED', object: { ...mid } });
    await until('the watch applied revision 2', () => inf.revision === mid.rv);
    expect(inf.get('p')?.v).toBe('new');

    // The event of the same revision and later ones are the watch's again.
    stream.emit({ type: 'MODIFIED', object: newest });
    store.write('p', 'later');
    await until('the later event', () => inf.get('p')?.v === 'later');
  });

  it('a read-through result not newer than the watch is dropped (the watch may have deleted it already)', async () => {
    const store = new Store();
    const ghost = store.write('ghost', '1');
    const { inf } = inform(store);
    await until('open', () => inf.open);
    store.remove('ghost');
    await until('the deletion', () => inf.revision === String(store.rev));
    inf.offer({ ...ghost });
    expect(inf.get('ghost')).toBeUndefined();
  });

  it('a write-through newer than a re-list survives it; an older one is replaced by the list', async () => {
    const store = new Store();
    store.write('w', '1');
    store.write('x', '1');
    const { inf } = inform(store);
    await until('open', () => inf.open);
    // Our own write, and the store's answer written through before the watch (or a re-list) sees it.
    store.open!.stopped = true;
    inf.put({ name: 'w', rv: '99', v: 'ours' });
    inf.put({ name: 'x', rv: '1', v: 'stale' }); // not newer than what the cache holds: ignored
    expect(inf.get('x')?.v).toBe('1');
    store.streams.at(-1)!.stopped = false;
    store.streams.at(-1)!.end({ error: new Error('broken') });
    await until('re-listed', () => store.lists === 2 && inf.open);
    expect(inf.get('w')).toEqual({ name: 'w', rv: '99', v: 'ours' });
  });
});

describe('Informer: answers only while its watch is open', () => {
  it('is not open (and takes no read-through) from a broken watch until a list succeeds again', async () => {
    const store = new Store();
    store.write('a', '1');
    const errors: string[] = [];
    const { inf } = inform(store, { onError: (e, _s, retry) => errors.push(`${retry?.phase}: ${e.message}`) });
    await until('open', () => inf.open);
    expect(inf.synced).toBe(true);

    store.failLists = true;
    store.open!.end({ error: new Error('connection reset') });
    await until('the list failed', () => errors.some((e) => e.startsWith('list:')));
    expect(inf.open).toBe(false);
    expect(inf.synced).toBe(true); // it has listed once: a controller may still work from the old view
    inf.offer({ name: 'a', rv: '50', v: 'read-through' });
    expect(inf.get('a')?.v).toBe('1');
    expect(errors[0]).toBe('watch: connection reset');

    store.failLists = false;
    await until('open again', () => inf.open);
    inf.offer({ name: 'a', rv: '50', v: 'read-through' });
    expect(inf.get('a')?.v).toBe('read-through');
  });

  it('a malformed event (no identity) is not applied: the stream is dropped and the collection re-listed', async () => {
    const store = new Store();
    const { inf } = inform(store);
    await until('open', () => inf.open);
    store.open!.emit({ type: 'ADDED', object: { name: '', rv: '7', v: 'x' } });
    await until('re-listed', () => store.lists === 2 && inf.open);
    expect(inf.keys()).toEqual([]);
  });

  it('a listed object without identity is left out and reported; the rest of the list stands', async () => {
    const store = new Store();
    store.write('a', '1');
    store.objects.set('', { name: '', rv: '9', v: 'bad' });
    const errors: string[] = [];
    const { inf } = inform(store, { onError: (e) => errors.push(e.message) });
    await until('open', () => inf.open);
    expect(inf.keys()).toEqual(['a']);
    expect(errors).toEqual(['test store: listed object skipped: no name']);
  });
});

describe('Informer: the silent-watch guard', () => {
  it('drops a stream still open well past the server timeout and re-lists; a stream that ends in time is left alone', async () => {
    const store = new Store();
    store.watchEndsWithinMs = 40;
    store.write('a', '1');
    const { inf } = inform(store, { silentGraceMs: 40, afterTimeout: 'relist' });
    await until('open', () => inf.open);
    const first = store.open!;
    // Half-open: the stream neither ends nor delivers.
    await until('the guard re-listed', () => store.lists >= 2 && inf.open);
    expect(first.stopped).toBe(true);

    const noGuard = new Store();
    noGuard.write('a', '1');
    const n = inform(noGuard, { silentGraceMs: 40 });
    await until('open', () => n.inf.open);
    await new Promise((r) => setTimeout(r, 200));
    expect(noGuard.lists).toBe(1);
    expect(noGuard.streams).toHaveLength(1);
  });
});
