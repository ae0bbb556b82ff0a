// When the policy controller applies (src/agent/policy/batch-timer.ts): an
// endpoint's removal waits for company, anything else is prompt and brings a
// waiting batch forward. Fake timers: the order of events, not speed.
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { createBatchTimer } from '../../src/agent/policy/batch-timer.js';

beforeEach(() => void vi.useFakeTimers());
afterEach(() => void vi.useRealTimers());

describe('createBatchTimer', () => {
  it('removals share one batch after the lazy delay; more removals do not push it back', () => {
    let fired = 0;
    const t = createBatchTimer(() => fired++, { delayMs: 5, lazyDelayMs: 100 });
    t.schedule(true);
    vi.advanceTimersByTime(60);
    t.schedule(true);
    vi.advanceTimersByTime(39);
    expect(fired).toBe(0);
    vi.advanceTimersByTime(1);
    expect(fired).toBe(1);
    vi.advanceTimersByTime(500);
    expect(fired).toBe(1);
  });

  it('a prompt change brings a waiting removal batch forward; a removal never delays a prompt one', () => {
    let fired = 0;
    const t = createBatchTimer(() => fired++, { delayMs: 5, lazyDelayMs: 100 });
    t.schedule(true);
    vi.advanceTimersByTime(10);
    t.schedule(false);
    vi.advanceTimersByTime(5);
    expect(fired).toBe(1);
    t.schedule(false);
    t.schedule(true);
    vi.advanceTimersByTime(5);
    expect(fired).toBe(2);
    vi.advanceTimersByTime(500);
    expect(fired).toBe(2);
  });

  it('clear() drops what is waiting', () => {
    let fired = 0;
    const t = createBatchTimer(() => fired++, { delayMs: 5, lazyDelayMs: 100 });
    t.schedule(true);
    t.clear();
    vi.advanceTimersByTime(500);
    expect(fired).toBe(0);
  });
});
