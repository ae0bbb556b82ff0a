// When the policy controller applies (src/agent/policy/batch-timer.ts): an
// endpoint's removal waits for company, anything else is prompt and brings a
// waiting batch forward. Fake timers: the order of events, not speed.
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { createBatchTimer } from '../../src/agent/policy/batch-timer.js';
import { isKnownOrUnsure } from '../../src/agent/policy/known.js';

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

describe('isKnownOrUnsure (whether the ADD marks a name stale)', () => {
  const state = (...names: string[]) => ({ endpoints: new Map(names.map((n) => [n, {}])) });
  it('unsure before the first resync; known when applied or being applied; else not', () => {
    expect(isKnownOrUnsure('npa1', undefined, undefined)).toBe(true);
    expect(isKnownOrUnsure('npa1', state('npa1'), undefined)).toBe(true);
    expect(isKnownOrUnsure('npa1', state(), state('npa1'))).toBe(true);
    expect(isKnownOrUnsure('npa1', state('npa2'), state('npa3'))).toBe(false);
    expect(isKnownOrUnsure('npa1', state(), undefined)).toBe(false);
  });
});
