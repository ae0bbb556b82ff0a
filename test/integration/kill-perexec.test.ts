// Not a plugin-* file: the agent project would run it through the shim, whose kill does not stop the agent's work (the
// agent's own SIGKILL: agent-kill.test.ts).
// Crash safety of the one-transaction ADD and DEL, per-exec: the plugin is
// SIGKILLed at random points of 50 ADDs and of 50 DELs. Right after each kill
// the datastore holds no address without its handle, no handle without an
// address, no workload endpoint without its addresses; after the runtime's
// DEL (which a runtime sends after a failed ADD, and repeats after a failed
// DEL) nothing of the pod is left.
import { describe, expect, it } from 'vitest';
import { createNetns } from '../support/netns.js';
import { runCni } from '../support/cni.js';
import type { Kind, Resource } from '../../src/model/resources.js';
import {
  BIN,
  NET_NAME,
  cni,
  expectNothingLeft,
  expectOk,
  k8sArgs,
  mapLimit,
  netconf,
  why,
  type Cluster,
  useCluster,
} from '../support/plugin-harness.js';

const PREFIX = 'npx';
const POOL = { name: 'kill-v4', cidr: '10.77.9.0/24', blockSize: 28 };
let c: Cluster;

useCluster([POOL], (x) => (c = x));

const conf = () => netconf(c, '1.0.0', { host_veth_prefix: PREFIX, log_level: 'info' });

/** Every object of ours in etcd, read in one range: one revision, a consistent snapshot. */
async function snapshot(): Promise<Resource[]> {
  const b64 = (x: string) => Buffer.from(x).toString('base64');
  const r = await fetch(`${c.etcd.endpoint}/v3/kv/range`, {
    method: 'POST',
    body: JSON.stringify({ key: b64('/netplugin/'), range_end: b64('/netplugin0') }),
  });
  const body = (await r.json()) as { kvs?: Array<{ value: string }> };
  return (body.kvs ?? []).map((kv) => JSON.parse(Buffer.from(kv.value, 'base64').toString()) as Resource);
}

/**
 * The datastore's consistency at one instant. A killed plugin's last request
 * may still be applied by etcd after the kill: each is one transaction, so
 * every snapshot must be consistent.
 */
async function audit(): Promise<void> {
  const all = await snapshot();
  const of = <K extends Kind>(k: K) => all.filter((o): o is Resource<K> => o.kind === k);
  const held = new Map<string, string[]>();
  for (const b of of('IPAMBlock')) {
    const base = b.spec.cidr.split('/')[0]!.split('.').map(Number);
    b.spec.allocations.forEach((a, ord) => {
      if (a == null) return;
      const h = b.spec.attributes[a]!.handle_id!;
      const ip = [base[0], base[1], base[2], base[3]! + ord].join('.');
      held.set(h, [...(held.get(h) ?? []), ip]);
    });
  }
  const hs = new Set(of('IPAMHandle').map((h) => h.spec.handleID));
  for (const h of held.keys()) expect(hs.has(h), `address of ${h} without its handle`).toBe(true);
  for (const h of hs) expect(held.get(h)?.length ?? 0, `handle ${h} without an address`).toBeGreaterThan(0);
  for (const w of of('WorkloadEndpoint')) {
    const mine = held.get(`${NET_NAME}.${w.spec.containerID}`) ?? [];
    for (const n of w.spec.ipNetworks)
      expect(mine, `endpoint ${w.metadata.name} names ${n}, which its container does not hold`).toContain(
        n.split('/')[0],
      );
  }
}

/** How long one uninterrupted call takes here (the kill points spread over it). */
async function span(
  command: 'ADD' | 'DEL',
  call: { containerId: string; netns: string; args: string },
): Promise<number> {
  const t0 = performance.now();
  const r = await runCni({ bin: BIN, command, conf: conf(), ...call });
  expect(r.code, why(r)).toBe(0);
  return performance.now() - t0;
}

describe('per-exec ADD and DEL killed with SIGKILL at random points', () => {
  it('50 ADDs and 50 DELs: consistent right after each kill, nothing left after the runtime DEL', async () => {
    const probeNs = createNetns('pk');
    const probe = { containerId: `probe-${process.pid}`, netns: probeNs.path, args: k8sArgs('kill', 'probe') };
    // How long an uninterrupted call takes, kept current (the machine's load changes during the
    // run): every call that ends on its own updates it.
    const est = { ADD: await span('ADD', probe), DEL: await span('DEL', probe) };
    const seen = (command: 'ADD' | 'DEL', ms: number) => (est[command] = est[command] * 0.7 + ms * 0.3);
    const timed = async (
      command: 'ADD' | 'DEL',
      call: { containerId: string; netns: string; args: string },
      kill?: number,
    ) => {
      const t0 = performance.now();
      const r = await runCni({
        bin: BIN,
        command,
        conf: conf(),
        ...call,
        ...(kill !== undefined ? { killAfterMs: kill } : {}),
      });
      if (r.signal !== 'SIGKILL') seen(command, performance.now() - t0);
      return r;
    };
    let killedAdds = 0;
    let addsCommitted = 0;
    let killedDels = 0;
    let delsCommitted = 0;
    const handleOf = async (cid: string) =>
      (await c.ds.list('IPAMHandle')).items.some((h) => h.spec.handleID === `${NET_NAME}.${cid}`);
    // Start-up is most of a per-exec call and the write comes at its end, so the kill points
    // spread from a third of a call to past its end (some calls finish first).
    const killAt = (command: 'ADD' | 'DEL') => est[command] * (0.3 + Math.random() * 1.2);
    await mapLimit(
      Array.from({ length: 50 }, (_, i) => i),
      2,
      async (i) => {
        const ns = createNetns('pk');
        const call = { containerId: `ka${i}-${process.pid}`, netns: ns.path, args: k8sArgs('kill', `a-${i}`) };
        const add = await timed('ADD', call, killAt('ADD'));
        if (add.signal === 'SIGKILL') {
          killedAdds++;
          if (await handleOf(call.containerId)) addsCommitted++;
        } else expect(add.code, why(add)).toBe(0);
        await audit();
        // The runtime DELs a sandbox whose ADD failed (and every sandbox it removes).
        expectOk(await timed('DEL', call));
        await audit();
      },
    );
    await mapLimit(
      Array.from({ length: 50 }, (_, i) => i),
      2,
      async (i) => {
        const ns = createNetns('pk');
        const call = { containerId: `kd${i}-${process.pid}`, netns: ns.path, args: k8sArgs('kill', `d-${i}`) };
        expectOk(await timed('ADD', call));
        // The snapshot sees what an ADD wrote (else the audit would prove nothing).
        const kinds = (await snapshot()).filter((o) => JSON.stringify(o).includes(call.containerId)).map((o) => o.kind);
        expect(new Set(kinds)).toEqual(new Set(['IPAMHandle', 'IPAMBlock', 'WorkloadEndpoint']));
        const del = await timed('DEL', call, killAt('DEL'));
        if (del.signal === 'SIGKILL') {
          killedDels++;
          if (!(await handleOf(call.containerId))) delsCommitted++;
        } else expect(del.code, why(del)).toBe(0);
        await audit();
        // The runtime repeats a DEL that failed; a DEL that succeeded is idempotent.
        expectOk(await cni('DEL', conf(), call));
        await audit();
      },
    );
    console.log(
      `per-exec: ${killedAdds}/50 ADDs killed (${addsCommitted} after their transaction; a call takes ~` +
        `${Math.round(est.ADD)} ms), ${killedDels}/50 DELs killed (${delsCommitted} after their transaction; ~` +
        `${Math.round(est.DEL)} ms)`,
    );
    // Not an assertion on speed: that the exercise really killed processes.
    expect(killedAdds).toBeGreaterThan(0);
    expect(killedDels).toBeGreaterThan(0);
    await expectNothingLeft(c, PREFIX);
  }, 600_000);
});
