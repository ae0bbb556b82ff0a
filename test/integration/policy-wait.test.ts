// The policy-setup wait against a real directory: the test writes the status
// file to stand in for the node agent.
import { EventEmitter } from 'node:events';
import { existsSync } from 'node:fs';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import {
  clearPolicyStatus,
  endpointStatusKey,
  isStatusFileName,
  statusFileName,
  statusFilePath,
  waitForPolicyProgrammed,
  writePolicyStatus,
  type ProgrammedSignal,
} from '../../src/policy-status/index.js';

let root: string;
const key = 'worker--1-k8s-web--0-eth0';

beforeEach(async () => {
  root = await mkdtemp(join(tmpdir(), `netplugin-policy-wait-${process.pid}-`));
});
afterEach(async () => {
  await rm(root, { recursive: true, force: true });
});

describe('waitForPolicyProgrammed', () => {
  it('resolves programmed when the status file appears (after 1 s), not at the timeout', async () => {
    const statusDir = join(root, 'endpoint-status');
    const waiting = waitForPolicyProgrammed({ endpointKey: key, statusDir, timeoutMs: 30_000 }).then((r) => ({
      ...r,
      resolvedAt: Date.now(),
    }));
    await new Promise((r) => setTimeout(r, 1000));
    // The documented format, written the way the agent does (temp + rename is
    // the agent's job; a direct write must work too).
    await writeFile(
      join(statusDir, statusFileName(key)),
      JSON.stringify({ programmed: true, at: new Date().toISOString(), endpoint: key }),
    );
    const writtenAt = Date.now();
    const r = await waiting;
    expect(r.programmed).toBe(true);
    expect(r.via).toBe('file');
    expect(r.reason).toBeUndefined();
    expect(r.resolvedAt).toBeGreaterThanOrEqual(writtenAt);
  });

  it('creates the status directory when it is missing', async () => {
    const statusDir = join(root, 'a', 'b');
    const waiting = waitForPolicyProgrammed({ endpointKey: key, statusDir, timeoutMs: 30_000 });
    await new Promise((r) => setTimeout(r, 50));
    expect(existsSync(statusDir)).toBe(true);
    await writePolicyStatus(key, { statusDir });
    expect((await waiting).programmed).toBe(true);
  });

  it('a file that already exists resolves at once', async () => {
    await writePolicyStatus(key, { statusDir: root, containerID: 'c1' });
    const r = await waitForPolicyProgrammed({
      endpointKey: key,
      statusDir: root,
      timeoutMs: 30_000,
      containerId: 'c1',
    });
    expect(r).toMatchObject({ programmed: true, via: 'file' });
  });

  it('returns programmed:false after the timeout when no file appears', async () => {
    const lines: string[] = [];
    const log = { error: () => {}, warn: () => {}, debug: () => {}, info: (m: string) => lines.push(m) };
    const r = await waitForPolicyProgrammed({ endpointKey: key, statusDir: root, timeoutMs: 1500, log });
    expect(r).toMatchObject({ programmed: false, reason: 'timeout' });
    expect(lines[0]).toContain(`policy for endpoint ${key} was not reported programmed`);
  });

  it('ignores a stale file of another container and a file saying programmed:false', async () => {
    await writePolicyStatus(key, { statusDir: root, containerID: 'old-container' });
    await writePolicyStatus('other-endpoint', { statusDir: root });
    const waiting = waitForPolicyProgrammed({
      endpointKey: key,
      statusDir: root,
      timeoutMs: 30_000,
      containerId: 'new-container',
    });
    let settled = false;
    void waiting.then(() => (settled = true));
    await writePolicyStatus(key, { statusDir: root, containerID: 'new-container', programmed: false });
    await new Promise((r) => setTimeout(r, 400));
    expect(settled).toBe(false);
    await writePolicyStatus(key, { statusDir: root, containerID: 'new-container' });
    expect(await waiting).toMatchObject({ programmed: true, via: 'file' });
  });

  it('the in-process signal (agent path) releases the wait', async () => {
    const ee = new EventEmitter();
    const signal: ProgrammedSignal = {
      onProgrammed(k, cb) {
        ee.on(k, cb);
        return () => ee.off(k, cb);
      },
    };
    const waiting = waitForPolicyProgrammed({ endpointKey: key, statusDir: root, timeoutMs: 30_000, signal });
    await new Promise((r) => setTimeout(r, 200));
    expect(ee.listenerCount(key)).toBe(1);
    ee.emit('unrelated-endpoint');
    ee.emit(key);
    expect(await waiting).toMatchObject({ programmed: true, via: 'signal' });
    expect(ee.listenerCount(key)).toBe(0);
  });

  it('the signal for another container of the endpoint does not release the wait', async () => {
    const ee = new EventEmitter();
    const signal: ProgrammedSignal = {
      onProgrammed(k, cb) {
        ee.on(k, cb);
        return () => ee.off(k, cb);
      },
    };
    const waiting = waitForPolicyProgrammed({
      endpointKey: key,
      statusDir: root,
      timeoutMs: 30_000,
      containerId: 'new',
      signal,
    });
    let settled = false;
    void waiting.then(() => (settled = true));
    await new Promise((r) => setTimeout(r, 100));
    ee.emit(key, 'old');
    await new Promise((r) => setTimeout(r, 200));
    expect(settled).toBe(false);
    ee.emit(key, 'new');
    expect(await waiting).toMatchObject({ programmed: true, via: 'signal' });
  });

  it('a zero timeout does not wait', async () => {
    expect(await waitForPolicyProgrammed({ endpointKey: key, statusDir: root, timeoutMs: 0 })).toEqual({
      programmed: false,
      reason: 'disabled',
      waitedMs: 0,
    });
  });
});

describe('status file contract', () => {
  it('names are safe file names derived from the endpoint name', () => {
    expect(statusFileName('n1-k8s-web-eth0')).toBe('n1-k8s-web-eth0.json');
    expect(statusFileName('../etc/passwd')).toBe('%2E.%2Fetc%2Fpasswd.json');
  });

  it('the same endpoint name in two namespaces has two files; the earlier format (no namespace) is told apart', () => {
    const a = statusFileName(endpointStatusKey('x', 'node1-k8s-web-eth0'));
    const b = statusFileName(endpointStatusKey('y', 'node1-k8s-web-eth0'));
    expect(a).toBe('x%2Fnode1-k8s-web-eth0.json');
    expect(b).not.toBe(a);
    expect([a, b].every(isStatusFileName)).toBe(true);
    expect(isStatusFileName('node1-k8s-web-eth0.json')).toBe(false);
  });

  it('writePolicyStatus writes the documented JSON atomically and clearPolicyStatus removes it', async () => {
    const p = await writePolicyStatus(key, { statusDir: root, containerID: 'c9' });
    expect(p).toBe(statusFilePath(key, root));
    const body = JSON.parse(await readFile(p, 'utf8'));
    expect(body).toMatchObject({ programmed: true, endpoint: key, containerID: 'c9' });
    expect(Number.isNaN(Date.parse(body.at))).toBe(false);
    await clearPolicyStatus(key, root);
    expect(existsSync(p)).toBe(false);
    await clearPolicyStatus(key, root);
  });
});
