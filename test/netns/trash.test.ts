// Deferred veth deletion (src/dataplane/trash.ts) in real namespaces: H plays
// the host, C1/C2 are two sandboxes of one pod (same host veth name). A
// trashed veth must free the name and the addresses at once and carry no
// route; the batch deletion and the purge of a crash's leftovers remove it.
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { createNetns, inNetns, removeAllNetns } from '../support/netns.js';
import { netlinkIn } from '../support/netns.js';
import { createTrash, purgeTrash, setupWorkload, type WorkloadSpec } from '../../src/dataplane/index.js';
import type { Netlink } from '../../src/native/index.js';

const HOST_MAC = 'ee:ee:ee:ee:ee:ee';
// A group of this test's own, so a purge here never races another file's.
const GROUP = 0x7e57_0000 + (process.pid & 0xffff);

let H: { name: string; path: string };
let C1: { name: string; path: string };
let C2: { name: string; path: string };
const handles: Array<{ close(): void }> = [];

const nl = (path: string): Netlink => netlinkIn(path, handles);

function spec(over: Partial<WorkloadSpec> = {}): WorkloadSpec {
  return {
    netnsPath: C1.path,
    hostNetnsPath: H.path,
    ifname: 'eth0',
    hostIfname: 'npitrash00001',
    numQueues: 1,
    hostMac: HOST_MAC,
    addresses: ['10.0.0.5/32', 'fd00::5/128'],
    allowIpForwarding: false,
    ...over,
  };
}

const ping = (ns: string, addr: string) => inNetns(ns, 'ping', ['-c', '1', '-w', '5', addr]);
const inGroup = (h: Netlink) => h.linkList().filter((l) => l.group === GROUP);

beforeEach(() => {
  H = createNetns('trh');
  C1 = createNetns('trc');
  C2 = createNetns('trc');
  const h = nl(H.path);
  h.addrAdd('lo', '10.255.0.1/32');
  h.addrAdd('lo', 'fd00:255::1/128', { nodad: true });
  h.sysctlSet('net.ipv6.conf.all.forwarding', 1);
});

afterEach(() => {
  for (const x of handles.splice(0)) x.close();
  removeAllNetns();
});

describe('deferred veth deletion (trash group)', () => {
  it('frees the host veth name and the addresses when teardown returns; the new sandbox gets the traffic; one group deletion removes the old pair', async () => {
    const h = nl(H.path);
    // A long delay: the old pair must still exist while the new sandbox is set up.
    const trash = createTrash({ hostNetnsPath: H.path, group: GROUP, delayMs: 60_000 });
    try {
      const first = setupWorkload(spec());
      expect(ping(C1.name, '10.255.0.1')).toMatch(/1 received/);
      const r = await trash.teardown({
        netnsPath: C1.path,
        hostNetnsPath: H.path,
        ifname: 'eth0',
        hostIfname: 'npitrash00001',
        hostMac: HOST_MAC,
      });
      expect(r).toEqual({ removed: true });
      expect(trash.pending()).toBe(1);

      // The old host end: renamed out of the pod's name, down, in the group, no route left.
      expect(h.linkFind('npitrash00001')).toBeUndefined();
      const old = h.linkGet(first.hostIndex);
      expect(old.name).toMatch(/^npx[0-9a-f]+$/);
      expect(old.up).toBe(false);
      expect(old.group).toBe(GROUP);
      expect(h.routeList({ family: 4 }).filter((x) => x.oif === first.hostIndex)).toEqual([]);
      expect(h.routeList({ family: 6 }).filter((x) => x.oif === first.hostIndex)).toEqual([]);
      // The old container end is still there (deleted with the batch), down and renamed,
      // so the interface name is free in the pod's namespace too.
      const oldCont = nl(C1.path).linkGet(first.containerIndex);
      expect(oldCont.name).toMatch(/^npx[0-9a-f]+$/);
      expect(oldCont.up).toBe(false);
      expect(nl(C1.path).linkFind('eth0')).toBeUndefined();

      // Same pod name (same host veth name), same addresses, at once.
      const second = setupWorkload(spec({ netnsPath: C2.path }));
      expect(second.hostIndex).not.toBe(first.hostIndex);
      expect(ping(C2.name, '10.255.0.1')).toMatch(/1 received/);
      expect(ping(C2.name, 'fd00:255::1')).toMatch(/1 received/);
      // Traffic to the pod's addresses goes to the new sandbox, not to the trashed pair.
      expect(ping(H.name, '10.0.0.5')).toMatch(/1 received/);
      const v4 = h.routeList({ family: 4 }).filter((x) => x.dst === '10.0.0.5/32');
      expect(v4.map((x) => x.oif)).toEqual([second.hostIndex]);

      await trash.close();
      expect(trash.pending()).toBe(0);
      expect(h.linkFind(first.hostIndex)).toBeUndefined();
      expect(inGroup(h)).toEqual([]);
      expect(nl(C1.path).linkFind(first.containerIndex)).toBeUndefined();
      // The new sandbox is untouched by the batch.
      expect(h.linkGet('npitrash00001').index).toBe(second.hostIndex);
      expect(ping(C2.name, '10.255.0.1')).toMatch(/1 received/);
    } finally {
      await trash.close();
    }
  });

  it('a runtime may ADD the same interface into the same namespace right after DEL: the name is free and the new pair works', async () => {
    const h = nl(H.path);
    const trash = createTrash({ hostNetnsPath: H.path, group: GROUP, delayMs: 60_000 });
    try {
      const first = setupWorkload(spec());
      await trash.teardown({
        netnsPath: C1.path,
        hostNetnsPath: H.path,
        ifname: 'eth0',
        hostIfname: 'npitrash00001',
        hostMac: HOST_MAC,
      });
      const again = setupWorkload(spec());
      expect(again.containerIndex).not.toBe(first.containerIndex);
      expect(ping(C1.name, '10.255.0.1')).toMatch(/1 received/);
      expect(ping(H.name, '10.0.0.5')).toMatch(/1 received/);
      await trash.close();
      expect(h.linkFind(first.hostIndex)).toBeUndefined();
      expect(nl(C1.path).linkGet('eth0').index).toBe(again.containerIndex);
      expect(ping(C1.name, '10.255.0.1')).toMatch(/1 received/);
    } finally {
      await trash.close();
    }
  });

  it('deletes a batch with one group deletion after the delay (no close)', async () => {
    const h = nl(H.path);
    const trash = createTrash({ hostNetnsPath: H.path, group: GROUP, delayMs: 5 });
    try {
      setupWorkload(spec({ hostIfname: 'npitrash00001' }));
      setupWorkload(spec({ netnsPath: C2.path, hostIfname: 'npitrash00002', addresses: ['10.0.0.6/32'] }));
      await Promise.all([
        trash.teardown({
          netnsPath: C1.path,
          hostNetnsPath: H.path,
          ifname: 'eth0',
          hostIfname: 'npitrash00001',
          hostMac: HOST_MAC,
        }),
        trash.teardown({ hostNetnsPath: H.path, ifname: 'eth0', hostIfname: 'npitrash00002', hostMac: HOST_MAC }),
      ]);
      const deadline = Date.now() + 30_000;
      while (trash.pending() > 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
      expect(trash.pending()).toBe(0);
      expect(inGroup(h)).toEqual([]);
      expect(h.linkList().filter((l) => l.kind === 'veth')).toEqual([]);
    } finally {
      await trash.close();
    }
  });

  it('keeps the ownership checks: a link of the name that is not our veth is not trashed', async () => {
    const h = nl(H.path);
    const trash = createTrash({ hostNetnsPath: H.path, group: GROUP, delayMs: 60_000 });
    try {
      // A veth of the pod's name but with a foreign MAC, no netns given: not ours.
      inNetns(H.name, 'ip', [
        'link',
        'add',
        'npitrash00001',
        'address',
        '02:00:00:00:00:01',
        'type',
        'veth',
        'peer',
        'name',
        'other0',
      ]);
      const r = await trash.teardown({
        hostNetnsPath: H.path,
        ifname: 'eth0',
        hostIfname: 'npitrash00001',
        hostMac: HOST_MAC,
      });
      expect(r).toEqual({ removed: false });
      expect(h.linkGet('npitrash00001').group).toBe(0);
      expect(trash.pending()).toBe(0);
    } finally {
      await trash.close();
    }
  });

  it('a link the group deletion cannot delete (lo) in the group: after a few failed tries ours go one by one, it stays', async () => {
    const h = nl(H.path);
    const errors: string[] = [];
    const trash = createTrash({
      hostNetnsPath: H.path,
      group: GROUP,
      delayMs: 5,
      log: { info: () => undefined, error: (m) => errors.push(m) },
    });
    try {
      h.linkSet('lo', { group: GROUP });
      const first = setupWorkload(spec());
      await trash.teardown({
        netnsPath: C1.path,
        hostNetnsPath: H.path,
        ifname: 'eth0',
        hostIfname: 'npitrash00001',
        hostMac: HOST_MAC,
      });
      const deadline = Date.now() + 30_000;
      while (trash.pending() > 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
      expect(trash.pending()).toBe(0);
      expect(h.linkFind(first.hostIndex)).toBeUndefined();
      expect(h.linkGet('lo').group).toBe(GROUP);
      expect(errors.filter((m) => /deleting the trashed veths failed/.test(m)).length).toBeGreaterThanOrEqual(3);
    } finally {
      await trash.close();
    }
  });

  it('the addon refuses group 0 (the default group of every link) and a group out of range, by rejecting', async () => {
    const h = nl(H.path);
    await expect(h.linkDelGroupAsync(0)).rejects.toThrow(/linkDelGroupAsync: group must be an integer 1\.\.4294967295/);
    await expect(h.linkDelGroupAsync(2 ** 32)).rejects.toThrow(TypeError);
    expect(h.linkGet('lo').group).toBe(0);
    // An empty group: the kernel says ENODEV (the trash treats that as done).
    await expect(h.linkDelGroupAsync(GROUP)).rejects.toMatchObject({ code: 'ENODEV', subject: `group ${GROUP}` });
  });

  it('a crash with deletions pending: purgeTrash (agent start, CNI GC) deletes our leftovers and leaves a foreign link of the group alone', async () => {
    const h = nl(H.path);
    // An "agent" that dies before its batch runs: nothing closes this trash.
    const crashed = createTrash({ hostNetnsPath: H.path, group: GROUP, delayMs: 600_000 });
    setupWorkload(spec());
    setupWorkload(spec({ netnsPath: C2.path, hostIfname: 'npitrash00002', addresses: ['10.0.0.6/32'] }));
    await crashed.teardown({
      netnsPath: C1.path,
      hostNetnsPath: H.path,
      ifname: 'eth0',
      hostIfname: 'npitrash00001',
      hostMac: HOST_MAC,
    });
    await crashed.teardown({
      netnsPath: C2.path,
      hostNetnsPath: H.path,
      ifname: 'eth0',
      hostIfname: 'npitrash00002',
      hostMac: HOST_MAC,
    });
    expect(inGroup(h)).toHaveLength(2);

    expect(await purgeTrash({ hostMac: HOST_MAC, hostNetnsPath: H.path, group: GROUP })).toBe(2);
    expect(inGroup(h)).toEqual([]);
    expect(nl(C1.path).linkFind('eth0')).toBeUndefined();
    expect(nl(C2.path).linkFind('eth0')).toBeUndefined();
    expect(await purgeTrash({ hostMac: HOST_MAC, hostNetnsPath: H.path, group: GROUP })).toBe(0);

    // Someone else's link put in the group: one of ours is deleted by itself, theirs stays.
    setupWorkload(spec());
    await crashed.teardown({
      netnsPath: C1.path,
      hostNetnsPath: H.path,
      ifname: 'eth0',
      hostIfname: 'npitrash00001',
      hostMac: HOST_MAC,
    });
    inNetns(H.name, 'ip', ['link', 'add', 'foreign0', 'type', 'veth', 'peer', 'name', 'foreign1']);
    inNetns(H.name, 'ip', ['link', 'set', 'foreign0', 'group', String(GROUP)]);
    expect(await purgeTrash({ hostMac: HOST_MAC, hostNetnsPath: H.path, group: GROUP })).toBe(1);
    expect(inGroup(h).map((l) => l.name)).toEqual(['foreign0']);
    inNetns(H.name, 'ip', ['link', 'del', 'foreign0']);
    await crashed.close();
  });
});
