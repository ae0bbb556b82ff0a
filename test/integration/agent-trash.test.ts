// An agent killed with veth deletions pending leaves trashed veths in the
// trash link group (src/dataplane/trash.ts); the next agent deletes them when
// it starts, and leaves alone a link of the group that is not ours. The agent
// runs in a namespace of its own here, so no other agent's purge interferes.
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { DIST } from '../support/cni.js';
import { createNetns, inNetns, removeAllNetns } from '../support/netns.js';
import { TRASH_GROUP } from '../../src/dataplane/index.js';

const procs: ChildProcess[] = [];
const dirs: string[] = [];
afterEach(() => {
  for (const p of procs.splice(0)) p.kill('SIGKILL');
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
  removeAllNetns();
});

const links = (ns: string): Array<{ ifname: string; group: string }> =>
  JSON.parse(inNetns(ns, 'ip', ['-j', 'link', 'show']));

describe('agent start', () => {
  it('deletes the trashed veths an earlier agent left (ours: veth, our MAC, trashed name), not a foreign link of the group', async () => {
    const H = createNetns('agtr');
    const C = createNetns('agtc');
    // What a killed agent leaves: a host veth trashed (down, renamed, in the group), its peer in the pod's netns.
    inNetns(H.name, 'ip', [
      'link',
      'add',
      'npx7f01',
      'address',
      'ee:ee:ee:ee:ee:ee',
      'group',
      String(TRASH_GROUP),
      'type',
      'veth',
      'peer',
      'name',
      'eth0',
      'netns',
      C.name,
    ]);
    inNetns(H.name, 'ip', [
      'link',
      'add',
      'foreign0',
      'group',
      String(TRASH_GROUP),
      'type',
      'veth',
      'peer',
      'name',
      'foreign1',
    ]);
    expect(links(H.name).map((l) => l.ifname)).toContain('npx7f01');

    const d = mkdtempSync(join(tmpdir(), 'np-agtr-'));
    dirs.push(d);
    const p = spawn(
      'ip',
      [
        'netns',
        'exec',
        H.name,
        process.execPath,
        join(DIST, 'netplugin-node.cjs'),
        '--socket',
        join(d, 'cni.sock'),
        '--log-level',
        'INFO',
      ],
      { stdio: ['ignore', 'ignore', 'pipe'] },
    );
    procs.push(p);
    let log = '';
    p.stderr!.on('data', (b) => (log += b));
    const deadline = Date.now() + 30_000;
    const purged = /deleted veths an earlier agent left in the trash group/;
    while ((links(H.name).some((l) => l.ifname === 'npx7f01') || !purged.test(log)) && Date.now() < deadline)
      await new Promise((r) => setTimeout(r, 50));
    expect(
      links(H.name).map((l) => l.ifname),
      log,
    ).not.toContain('npx7f01');
    expect(links(C.name).map((l) => l.ifname)).not.toContain('eth0');
    expect(links(H.name).map((l) => l.ifname)).toContain('foreign0');
    expect(log).toMatch(purged);
  });
});
