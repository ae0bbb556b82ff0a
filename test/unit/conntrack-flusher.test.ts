// The agent's deferred conntrack flush (src/dataplane/conntrack.ts): DELs
// within the delay share one flush, and an ADD reusing an address waits until
// the flush that covers it has run. The flush itself against a real conntrack
// table is test/netns/conntrack.test.ts and test/integration/policy-conntrack.test.ts.
import { describe, expect, it } from 'vitest';
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
