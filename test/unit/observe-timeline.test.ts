// The per-request timeline (src/observe/timeline.ts): off unless the process starts with
// NETPLUGIN_TIMELINE=1, then steps marked anywhere under a request, across awaits, land in its
// timeline, and the finished timeline is one stderr line.
import { afterEach, describe, expect, it, vi } from 'vitest';

async function load(on: boolean) {
  vi.resetModules();
  if (on) vi.stubEnv('NETPLUGIN_TIMELINE', '1');
  else vi.stubEnv('NETPLUGIN_TIMELINE', '');
  return import('../../src/observe/timeline.js');
}

function capture() {
  const lines: string[] = [];
  const spy = vi.spyOn(process.stderr, 'write').mockImplementation((s: string | Uint8Array) => {
    lines.push(String(s));
    return true;
  });
  return { lines, spy };
}

afterEach(() => {
  vi.unstubAllEnvs();
  vi.restoreAllMocks();
});

describe('request timeline', () => {
  it('records the steps of each request apart, across awaits, and prints one line per request', async () => {
    const t = await load(true);
    const { lines } = capture();
    const req = (name: string, ms: number) =>
      t.withTimeline('ADD', performance.now(), async () => {
        t.mark(`${name} start`);
        await new Promise((r) => setTimeout(r, ms));
        t.mark(`${name} end`);
        return name;
      });
    expect(await Promise.all([req('a', 20), req('b', 5)])).toEqual(['a', 'b']);
    const got = lines.filter((l) => l.startsWith('netplugin-timeline ')).map((l) => JSON.parse(l.slice(19)));
    expect(got).toHaveLength(2);
    const a = got.find((x) => x.marks[0][0] === 'a start');
    expect(a.command).toBe('ADD');
    expect(a.marks.map((m: [string, number]) => m[0])).toEqual(['a start', 'a end', 'done']);
    expect(a.marks[1][1]).toBeGreaterThanOrEqual(a.marks[0][1]);
    // A mark outside any request is dropped.
    t.mark('nobody');
    expect(lines.join('')).not.toContain('nobody');
  });

  it('off by default: nothing recorded, nothing printed, the result passes through', async () => {
    const t = await load(false);
    const { lines } = capture();
    const r = await t.withTimeline('ADD', performance.now(), async () => {
      t.mark('step');
      return 42;
    });
    expect(r).toBe(42);
    expect(lines.filter((l) => l.includes('netplugin-timeline'))).toEqual([]);
  });
});
