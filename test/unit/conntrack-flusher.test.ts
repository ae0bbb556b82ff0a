// The agent's deferred conntrack flush (src/dataplane/conntrack.ts): DELs
// within the delay share one flush, and an ADD reusing an address waits until
// the flush that covers it has run; the journal lets a killed agent's next
// start flush what it left. The flush itself against a real conntrack
// table is test/netns/conntrack.test.ts and test/integration/policy-conntrack.test.ts.
import { mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { createConntrackFlusher } from '../../src/dataplane/conntrack.js';

const log = { debug: () => undefined, warn: () => undefined };

describe('createConntrackFlusher', () => {
  it('batches the addresses deferred within the delay into one flush', async () => {
    const calls: string[][] = [];
    const f = createConntrackFlusher({ log, delayMs: 20, flush: (a) => void calls.push([...a]) });
    f.defer(['10.0.0.1']);
    f.defer(['10.0.0.2', 'fd00::2']);
    expect(calls).toEqual([]);
    await f.settled(['10.0.0.1']);
    expect(calls).toEqual([['10.0.0.1', '10.0.0.2', 'fd00::2']]);
    f.defer(['10.0.0.3']);
    await f.settled(['10.0.0.3/32']);
    expect(calls).toEqual([['10.0.0.1', '10.0.0.2', 'fd00::2'], ['10.0.0.3']]);
  });

  it('settled() waits for a pending flush of the address (with or without its prefix) and not for other addresses', async () => {
    const flushed: string[] = [];
    const f = createConntrackFlusher({ log, delayMs: 50, flush: (a) => void flushed.push(...a) });
    f.defer(['10.0.0.9']);
    let other = false;
    await f.settled(['10.0.0.8/32']).then(() => (other = true));
    expect(other).toBe(true);
    expect(flushed).toEqual([]);
    await f.settled(['10.0.0.9/32']);
    expect(flushed).toEqual(['10.0.0.9']);
  });

  it('an ADD reusing a queued address runs the pending dump at once, not at the timer', async () => {
    const flushed: string[][] = [];
    const f = createConntrackFlusher({ log, delayMs: 60_000, flush: (a) => void flushed.push([...a]) });
    f.defer(['10.0.0.20']);
    f.defer(['10.0.0.21']);
    await f.settled(['10.0.0.21/32']);
    expect(flushed).toEqual([['10.0.0.20', '10.0.0.21']]);
    // Nothing left for the timer: close() has nothing to run.
    await f.close();
    expect(flushed).toHaveLength(1);
  });

  it('close() runs what is pending at once; a flush that throws still settles its waiters', async () => {
    const flushed: string[] = [];
    const f = createConntrackFlusher({ log, delayMs: 60_000, flush: (a) => void flushed.push(...a) });
    f.defer(['10.0.1.1']);
    await f.close();
    expect(flushed).toEqual(['10.0.1.1']);
    const g = createConntrackFlusher({
      log,
      delayMs: 1,
      flush: () => {
        throw new Error('boom');
      },
    });
    g.defer(['10.0.1.2']);
    await expect(g.settled(['10.0.1.2'])).resolves.toBeUndefined();
  });
});

describe('the journal of deferred flushes', () => {
  const dir = mkdtempSync(join(tmpdir(), 'conntrack-journal-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('an agent killed with flushes pending: the next start flushes the journaled addresses before anything else, then empties the journal', async () => {
    const path = join(dir, 'killed');
    const flushed: string[][] = [];
    const first = createConntrackFlusher({
      log,
      delayMs: 60_000,
      journal: path,
      flush: (a) => void flushed.push([...a]),
    });
    first.defer(['10.0.2.1']);
    first.defer(['fd00::2:1', '10.0.2.1']);
    // Written before defer() returned.
    expect(readFileSync(path, 'latin1').split('\n').filter(Boolean)).toEqual(['10.0.2.1', 'fd00::2:1', '10.0.2.1']);
    expect(flushed).toEqual([]);
    // "Killed": the first flusher never runs its batch. The next one flushes at creation.
    const next = createConntrackFlusher({ log, delayMs: 1, journal: path, flush: (a) => void flushed.push([...a]) });
    expect(flushed).toEqual([['10.0.2.1', 'fd00::2:1']]);
    expect(readFileSync(path, 'latin1')).toBe('');
    await next.close();
  });

  it('emptied once nothing is pending; lines that are not addresses are ignored', async () => {
    const path = join(dir, 'normal');
    writeFileSync(path, 'garbage\n../etc\n10.0.3.9\n');
    const flushed: string[][] = [];
    const f = createConntrackFlusher({ log, delayMs: 1, journal: path, flush: (a) => void flushed.push([...a]) });
    expect(flushed).toEqual([['10.0.3.9']]);
    f.defer(['10.0.3.1']);
    expect(readFileSync(path, 'latin1')).toBe('10.0.3.1\n');
    await f.settled(['10.0.3.1']);
    expect(flushed).toEqual([['10.0.3.9'], ['10.0.3.1']]);
    expect(readFileSync(path, 'latin1')).toBe('');
    await f.close();
  });

  it('a journal path that is a symlink is not followed (the flusher works without a journal)', async () => {
    const target = join(dir, 'target');
    writeFileSync(target, '10.0.4.4\n');
    const link = join(dir, 'link');
    symlinkSync(target, link);
    const warned: string[] = [];
    const flushed: string[][] = [];
    const f = createConntrackFlusher({
      log: { debug: () => undefined, warn: (m) => void warned.push(m) },
      delayMs: 1,
      journal: link,
      flush: (a) => void flushed.push([...a]),
    });
    expect(flushed).toEqual([]);
    expect(warned.some((m) => m.includes('journal unusable'))).toBe(true);
    f.defer(['10.0.4.5']);
    await f.settled(['10.0.4.5']);
    expect(flushed).toEqual([['10.0.4.5']]);
    expect(readFileSync(target, 'latin1')).toBe('10.0.4.4\n');
    await f.close();
  });
});
