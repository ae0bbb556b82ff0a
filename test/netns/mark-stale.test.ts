// markStale (src/dataplane/nft/programmed.ts): the names of concurrent calls
// share nft runs, and still each call gets its own outcome. Against a real
// table in the namespace the test runs in (scripts/in-netns), under a table
// name of its own, removed afterwards.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { markStale } from '../../src/dataplane/nft/programmed.js';
import { nftRun } from '../../src/native/nft.js';

const T = 'nqmarkstale';

beforeAll(() => {
  nftRun(`add table inet ${T}\nadd set inet ${T} wl-stale { type ifname; }\n`);
});
afterAll(() => {
  nftRun(`delete table inet ${T}\n`);
});

const staleNames = (): string[] =>
  [...nftRun(`list set inet ${T} wl-stale`).matchAll(/"([^"]+)"/g)].map((m) => m[1]!).sort();

describe('markStale', () => {
  it('marks every name of concurrent calls; a bad name fails its own call only', async () => {
    const names = Array.from({ length: 12 }, (_, i) => `nqm${i}`);
    const results = await Promise.allSettled([
      ...names.map((n) => markStale(n, T)),
      // Longer than an interface name may be (15 bytes): nft refuses it.
      markStale('nqm-far-too-long-for-an-interface', T),
    ]);
    expect(results.slice(0, names.length).map((r) => r.status)).toEqual(names.map(() => 'fulfilled'));
    expect(results.slice(0, names.length).map((r) => (r as PromiseFulfilledResult<string>).value)).toEqual(
      names.map(() => 'forgotten'),
    );
    expect(results[names.length]!.status).toBe('rejected');
    expect(staleNames()).toEqual([...names].sort());
  });

  it("'no-table' for every call when the node has no policy table", async () => {
    const r = await Promise.all([markStale('nqmx1', 'nqnotable'), markStale('nqmx2', 'nqnotable')]);
    expect(r).toEqual(['no-table', 'no-table']);
  });
});
