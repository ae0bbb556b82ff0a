import { describe, expect, it } from 'vitest';
import { createKeyedQueue, createLimiter } from '../../src/agent/serialize.js';

function deferred<T = void>() {
  let resolve!: (v: T) => void;
  let reject!: (e: Error) => void;
  const promise = new Promise<T>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  return { promise, resolve, reject };
}

/** Lets every already-queued promise callback run. */
const settle = () => new Promise<void>((r) => setImmediate(r));

describe('createKeyedQueue', () => {
  it('runs work for one key strictly one after another, in order', async () => {
    const q = createKeyedQueue();
    const started: string[] = [];
    const gates = [deferred(), deferred(), deferred()];
    const results = ['a', 'b', 'c'].map((name, i) =>
      q.run('c1', async () => {
        started.push(name);
        await gates[i]!.promise;
        return name;
      }),
    );
    await settle();
    expect(started).toEqual(['a']);
    gates[1]!.resolve(); // finishing b early must not let it start before a ends
    await settle();
    expect(started).toEqual(['a']);
    gates[0]!.resolve();
    await settle();
    expect(started).toEqual(['a', 'b', 'c']);
    gates[2]!.resolve();
    expect(await Promise.all(results)).toEqual(['a', 'b', 'c']);
  });

  it('runs different keys concurrently', async () => {
    const q = createKeyedQueue();
    const started: string[] = [];
    const gate = deferred();
    const a = q.run('c1', async () => {
      started.push('c1');
      await gate.promise;
    });
    const b = q.run('c2', async () => {
      started.push('c2');
      await gate.promise;
    });
    await settle();
    expect(started.sort()).toEqual(['c1', 'c2']);
    expect(q.size).toBe(2);
    gate.resolve();
    await Promise.all([a, b]);
  });

  it('keeps going after a failure and hands each caller its own outcome', async () => {
    const q = createKeyedQueue();
    const first = q.run('c1', () => Promise.reject(new Error('ADD failed')));
    const second = q.run('c1', () => 'DEL ran');
    const third = q.run('c1', () => {
      throw new Error('sync throw');
    });
    await expect(first).rejects.toThrow('ADD failed');
    await expect(second).resolves.toBe('DEL ran');
    await expect(third).rejects.toThrow('sync throw');
  });

  it('forgets keys once their work settles', async () => {
    const q = createKeyedQueue();
    await Promise.all([q.run('c1', () => 1), q.run('c1', () => 2), q.run('c2', () => 3)]);
    await settle();
    expect(q.size).toBe(0);
  });
});

describe('createLimiter', () => {
  it('runs at most max at once and starts waiters as slots free up', async () => {
    const lim = createLimiter(2);
    const gates = [deferred(), deferred(), deferred()];
    const started: number[] = [];
    const runs = gates.map((g, i) =>
      lim.run(async () => {
        started.push(i);
        await g.promise;
        return i;
      }),
    );
    await settle();
    expect(started).toEqual([0, 1]);
    expect(lim.active).toBe(2);
    expect(lim.waiting).toBe(1);
    gates[1]!.resolve();
    await settle();
    expect(started).toEqual([0, 1, 2]);
    gates[0]!.reject(new Error('x'));
    gates[2]!.resolve();
    await expect(runs[0]).rejects.toThrow('x');
    expect(await runs[2]).toBe(2);
    expect(lim.active).toBe(0);
  });

  it('rejects a non-positive bound naming it', () => {
    expect(() => createLimiter(0)).toThrow(/maxConcurrent must be a positive integer, got 0/);
    expect(() => createLimiter(1.5)).toThrow(RangeError);
  });
});
