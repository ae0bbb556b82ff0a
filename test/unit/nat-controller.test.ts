// The natOutgoing controller (src/agent/nat) fed by the shared watch layer
// (src/watch/informer.ts) over the in-memory datastore: the scripts it hands
// to nftables after its first lists, on changes, and after a broken watch.
import { afterEach, describe, expect, it } from 'vitest';
import { MemoryDatastore } from '../../src/datastore/memory.js';
import type { WatchEvent } from '../../src/datastore/types.js';
import { NAT_TABLE, startNatController, type NatController } from '../../src/agent/nat/index.js';
import type { Logger } from '../../src/log/types.js';
import { API_VERSION, type Resource } from '../../src/model/resources.js';

const log: Logger = { error: () => undefined, warn: () => undefined, info: () => undefined, debug: () => undefined };

function pool(name: string, cidr: string): Resource<'IPPool'> {
  return { apiVersion: API_VERSION, kind: 'IPPool', metadata: { name }, spec: { cidr, natOutgoing: true } };
}

async function until(what: string, ok: () => boolean): Promise<void> {
  for (let i = 0; i < 1500 && !ok(); i++) await new Promise((r) => setTimeout(r, 10));
  if (!ok()) throw new Error(`timed out waiting for ${what}`);
}

const masquerades = (script: string | undefined, cidr: string) =>
  !!script && script.includes('masquerade') && script.includes(cidr);

let ctl: NatController | undefined;
afterEach(() => ctl?.stop());

describe('nat controller on the watch layer', () => {
  it('applies once after its first lists even when they are empty (removing our tables left from an earlier run)', async () => {
    const scripts: string[] = [];
    ctl = startNatController({ ds: new MemoryDatastore(), log, run: (s) => void scripts.push(s) });
    await until('the first apply', () => scripts.length > 0);
    expect(scripts[0]).toContain(`delete table ip ${NAT_TABLE}`);
    expect(scripts[0]).not.toContain('masquerade');
  });

  it('follows pool changes through the watch', async () => {
    const ds = new MemoryDatastore();
    const scripts: string[] = [];
    ctl = startNatController({ ds, log, run: (s) => void scripts.push(s) });
    await until('the first apply', () => scripts.length > 0);
    await ds.create(pool('p1', '10.244.0.0/16'));
    await until('the pool masqueraded', () => masquerades(scripts.at(-1), '10.244.0.0/16'));
    await ds.delete('IPPool', 'p1');
    await until('the pool gone', () => !scripts.at(-1)!.includes('masquerade'));
  });

  it('re-lists after a broken watch and picks up what it missed', async () => {
    const ds = new MemoryDatastore();
    const scripts: string[] = [];
    // The first IPPool watch is dead: it delivers nothing until it reports its end.
    let dead: ((ev: WatchEvent<'IPPool'>) => void) | undefined;
    const watch = ds.watch.bind(ds);
    ds.watch = ((kind, opts, onEvent) => {
      if (kind === 'IPPool' && !dead) {
        dead = onEvent as (ev: WatchEvent<'IPPool'>) => void;
        return { stop: () => undefined };
      }
      return watch(kind, opts, onEvent);
    }) as MemoryDatastore['watch'];
    ctl = startNatController({ ds, log, run: (s) => void scripts.push(s) });
    await until('the first apply', () => scripts.length > 0 && !!dead);
    await ds.create(pool('p2', '10.245.0.0/16'));
    await new Promise((r) => setTimeout(r, 100));
    expect(scripts.some((s) => masquerades(s, '10.245.0.0/16'))).toBe(false); // missed while the watch is dead
    dead!({ type: 'ERROR', error: new Error('revision compacted') });
    await until('the re-list applied the missed pool', () => masquerades(scripts.at(-1), '10.245.0.0/16'));
  });
});
