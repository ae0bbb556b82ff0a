// The keyed work queue (dedupe, re-run after a change during a run, per-key
// retry with backoff, stop) and the kube-controllers settings parser.
import { describe, expect, it } from 'vitest';
import { createWorkQueue } from '../../src/watch/queue.js';
import { parseDuration, settingsFrom, DEFAULT_SETTINGS } from '../../src/model/kube-controllers-config.js';
import { endpointLabels } from '../../src/kube-controllers/workloadendpoint.js';
import { leakReason, syncedNodeLabels } from '../../src/kube-controllers/node.js';

describe('work queue', () => {
  it('runs a key once however often it is added while waiting, and again when added while running', async () => {
    const runs: string[] = [];
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const q = createWorkQueue({
      concurrency: 1,
      handle: async (k) => {
        runs.push(k);
        if (k === 'a' && runs.length === 1) await gate;
      },
    });
    q.add('a'); // starts running
    q.add('b');
    q.add('b');
    q.add('a'); // while running: once more afterwards
    q.add('a');
    expect(q.depth).toBe(2);
    release();
    await q.idle();
    expect(runs).toEqual(['a', 'b', 'a']);
  });

  it('retries a failing key with growing delays and reports each failure', async () => {
    const at: number[] = [];
    const errors: number[] = [];
    const q = createWorkQueue({
      baseDelayMs: 20,
      handle: async () => {
        at.push(Date.now());
        if (at.length < 4) throw new Error('datastore down');
      },
      onError: (_k, _e, n) => errors.push(n),
    });
    q.add('x');
    await q.idle();
    expect(at).toHaveLength(4);
    expect(errors).toEqual([1, 2, 3]);
    // 20, 40, 80 ms at least between attempts.
    expect(at[1]! - at[0]!).toBeGreaterThanOrEqual(19);
    expect(at[3]! - at[2]!).toBeGreaterThanOrEqual(79);
  });

  it('stop cancels retries and waits for running handlers', async () => {
    let done = false;
    let calls = 0;
    const q = createWorkQueue({
      baseDelayMs: 10_000,
      handle: async (k) => {
        calls++;
        if (k === 'fail') throw new Error('x');
        await new Promise((r) => setTimeout(r, 30));
        done = true;
      },
    });
    q.add('fail');
    q.add('slow');
    await new Promise((r) => setTimeout(r, 5));
    expect(q.retrying).toBe(1);
    await q.stop();
    expect(done).toBe(true);
    expect(q.retrying).toBe(0);
    q.add('after');
    expect(calls).toBe(2);
  });
});

describe('kube-controllers settings', () => {
  it('parses Go durations', () => {
    expect(parseDuration('15m')).toBe(900_000);
    expect(parseDuration('1m30s')).toBe(90_000);
    expect(parseDuration('0s')).toBe(0);
    expect(parseDuration('1.5h')).toBe(5_400_000);
    expect(parseDuration('250ms')).toBe(250);
    expect(parseDuration('15')).toBeUndefined();
    expect(parseDuration('m')).toBeUndefined();
  });
  it('uses defaults for what is missing and names what is malformed', () => {
    expect(settingsFrom(undefined)).toEqual({ settings: DEFAULT_SETTINGS, problems: [] });
    const r = settingsFrom({
      controllers: {
        node: { leakGracePeriod: '0s', reconcilerPeriod: '10ms', hostEndpoint: { autoCreate: 'Yes' as never } },
      },
    });
    expect(r.settings).toEqual({ leakGracePeriodMs: 0, reconcilerPeriodMs: 60_000, autoHostEndpoints: false });
    expect(r.problems.join('\n')).toContain('spec.controllers.node.reconcilerPeriod="10ms"');
    expect(r.problems.join('\n')).toContain('spec.controllers.node.hostEndpoint.autoCreate="Yes"');
  });
});

describe('label and leak rules', () => {
  it("endpoint labels: the pod's, but our netplugin.org/* ones stay", () => {
    expect(
      endpointLabels(
        { a: '1', 'netplugin.org/namespace': 'evil' },
        { a: '0', old: 'x', 'netplugin.org/namespace': 'app' },
      ),
    ).toEqual({ a: '1', 'netplugin.org/namespace': 'app' });
  });
  it("node labels: the Kubernetes Node's plus our own", () => {
    expect(syncedNodeLabels({ zone: 'b' }, { zone: 'a', gone: 'x', 'netplugin.org/role': 'edge' })).toEqual({
      zone: 'b',
      'netplugin.org/role': 'edge',
    });
  });
  it('leak reasons', () => {
    const attrs = { namespace: 'n', pod: 'p', node: 'n1', podUID: 'u1' };
    const pod = (o: { uid?: string; node?: string; ips?: string[] }) => ({
      metadata: { name: 'p', uid: o.uid ?? 'u1' },
      spec: { nodeName: o.node ?? 'n1' },
      status: o.ips ? { podIPs: o.ips.map((ip) => ({ ip })) } : {},
    });
    expect(leakReason(attrs, '10.0.0.1', undefined)).toContain('does not exist');
    expect(leakReason(attrs, '10.0.0.1', pod({ uid: 'u2' }))).toContain('re-created');
    expect(leakReason(attrs, '10.0.0.1', pod({ node: 'n2' }))).toContain('runs on node n2');
    expect(leakReason(attrs, '10.0.0.1', pod({ ips: ['10.0.0.2'] }))).toContain('not 10.0.0.1');
    expect(leakReason(attrs, '10.0.0.1', pod({ ips: ['10.0.0.1'] }))).toBeUndefined();
    expect(leakReason(attrs, '10.0.0.1', pod({}))).toBeUndefined(); // no addresses reported yet
    expect(leakReason({ namespace: 'n', pod: 'p' }, '10.0.0.1', pod({ uid: 'other' }))).toBeUndefined(); // no UID recorded
  });
});
