// libnftables through the addon (src/native/nft.ts), in namespaces made here:
// the scripts program real kernel tables, read back with the nft command.
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { readdirSync, readlinkSync } from 'node:fs';
import { createNetns, inNetns, removeAllNetns } from '../support/netns.js';
import { openNetns } from '../../src/native/index.js';
import { NftError, nftAvailable, nftRun, nftRunAsync } from '../../src/native/nft.js';

let A: { name: string; path: string };
let B: { name: string; path: string };

beforeEach(() => {
  A = createNetns('nfta');
  B = createNetns('nftb');
});
afterEach(() => removeAllNetns());

const listTables = (ns: string) => inNetns(ns, 'nft', ['list', 'tables']);

describe('nftRun', () => {
  it('is available on this machine', () => {
    expect(nftAvailable()).toBe(true);
  });

  it('programs a table in the named namespace only, and reads it back as text and JSON', () => {
    nftRun(
      'add table inet nptest\nadd chain inet nptest c { type filter hook forward priority 0; policy accept; }\nadd ' +
        'rule inet nptest c ip saddr 10.1.2.3 drop comment "why"',
      { netns: A.path },
    );
    expect(listTables(A.name)).toContain('table inet nptest');
    expect(listTables(B.name)).not.toContain('nptest');
    const text = nftRun('list table inet nptest', { netns: A.path });
    expect(text).toMatch(/ip saddr 10\.1\.2\.3 drop comment "why"/);
    const json = JSON.parse(nftRun('list table inet nptest', { netns: A.path, json: true })) as {
      nftables: Array<Record<string, unknown>>;
    };
    expect(json.nftables.some((o) => 'rule' in o)).toBe(true);
  });

  it('applies a script atomically: one bad line leaves nothing of it behind', () => {
    nftRun('add table inet keep', { netns: A.path });
    let err: unknown;
    try {
      nftRun('add table inet half\nadd chain inet half c\nadd rule inet half c tcp dport 70000 drop', {
        netns: A.path,
      });
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(NftError);
    expect((err as NftError).missing).toBe(false);
    expect((err as NftError).message).toMatch(/nftables refused "add table inet half": .*out of range/s);
    const tables = listTables(A.name);
    expect(tables).toContain('table inet keep');
    expect(tables).not.toContain('half');
  });

  it('accepts an open NetNS handle and runs on the threadpool without leaving the thread namespace or fds behind', async () => {
    const fdsBefore = readdirSync('/proc/self/fd').length;
    const nsBefore = readlinkSync('/proc/thread-self/ns/net');
    const ns = openNetns(B.path);
    try {
      await Promise.all(Array.from({ length: 8 }, (_, i) => nftRunAsync(`add table ip par${i}`, { netns: ns })));
    } finally {
      ns.close();
    }
    const tables = listTables(B.name);
    for (let i = 0; i < 8; i++) expect(tables).toContain(`table ip par${i}`);
    await expect(nftRunAsync('add rule ip nosuch c drop', { netns: B.path })).rejects.toThrow(NftError);
    expect(readlinkSync('/proc/thread-self/ns/net')).toBe(nsBefore);
    expect(readdirSync('/proc/self/fd').length).toBe(fdsBefore);
  });

  it('names the field of a bad argument', () => {
    expect(() => nftRun(42 as unknown as string)).toThrow(/script must be/);
    expect(() => nftRun('list tables', { netns: '/etc/hostname' })).toThrow(/not a network namespace/);
  });
});
