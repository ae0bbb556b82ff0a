// ADD makes the veth pair while the IPAM transaction commits (its addresses
// are known just before it is sent). Here the first transaction loses: another
// writer fills the block between the choice and the commit. The pod must end
// with the committed address only (the pair is made again), no route may
// point at the first guess, and an ADD that then fails leaves no veth.
// In-process plugin on a real etcd, real namespaces and veths.
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { dispatch } from '../../src/cni/dispatch.js';
import type { PluginSpec } from '../../src/cni/types.js';
import type { Netconf } from '../../src/config/index.js';
import type { Datastore, TxnOp } from '../../src/datastore/types.js';
import { API_VERSION, type Resource } from '../../src/model/resources.js';
import { blockName } from '../../src/model/names.js';
import { containsIP, tryParseCidr, tryParseIP } from '../../src/net/cidr.js';
import { createIpam } from '../../src/ipam/index.js';
import { createPluginRuntime, type PluginRuntime } from '../../src/plugins/main/runtime.js';
import { assertThrowawayHostNetns } from '../support/cni.js';
import { createNetns, removeAllNetns } from '../support/netns.js';
import {
  addrs,
  expectNothingLeft,
  hostLinksWithPrefix,
  hostPoolRoutes,
  link,
  netconf,
  startCluster,
  type Cluster,
} from '../support/plugin-harness.js';

const PREFIX = 'nps';
const FOREIGN = 'other-net.foreign';
let c: Cluster;
let runtime: PluginRuntime | undefined;

beforeAll(async () => {
  assertThrowawayHostNetns();
  c = await startCluster([{ name: 'spec-v4', cidr: '10.77.60.0/27', blockSize: 28 }]);
});
afterEach(async () => {
  await runtime?.close();
  runtime = undefined;
  removeAllNetns();
});
afterAll(async () => {
  removeAllNetns();
  await c?.close();
});

/** Another writer takes every free slot of the block (with its handle), as another node's borrowing would. */
async function fillBlock(cidr: string): Promise<void> {
  const b = await c.ds.get('IPAMBlock', blockName(cidr));
  const spec = structuredClone(b.spec);
  spec.attributes.push({ handle_id: FOREIGN });
  const free = spec.allocations.flatMap((a, i) => (a == null ? [i] : []));
  for (const i of free) spec.allocations[i] = spec.attributes.length - 1;
  spec.unallocated = [];
  let h: Resource<'IPAMHandle'> | undefined;
  try {
    h = await c.ds.get('IPAMHandle', FOREIGN);
  } catch {
    h = undefined;
  }
  const handle: Resource<'IPAMHandle'> = {
    apiVersion: API_VERSION,
    kind: 'IPAMHandle',
    metadata: h ? h.metadata : { name: FOREIGN },
    spec: { handleID: FOREIGN, block: { ...(h?.spec.block ?? {}), [cidr]: free.length } },
  };
  await c.ds.txn([
    { op: 'update', res: { ...b, spec } },
    h ? { op: 'update', res: handle } : { op: 'create', res: handle },
  ]);
}

/**
 * A runtime whose datastore lets `beforeCommit` act once (once armed), just
 * before the next transaction that writes a workload endpoint (an ADD's) is sent, and
 * records the addresses that transaction named.
 */
function runtimeWith(beforeCommit: (addresses: string[]) => Promise<void>): {
  rt: PluginRuntime;
  arm: () => void;
  firstGuess: () => string[];
} {
  let armed = false;
  let guess: string[] = [];
  const rt = createPluginRuntime({
    wrapDatastore: (ds: Datastore) =>
      new Proxy(ds, {
        get(target, prop, receiver) {
          if (prop === 'txn') {
            return async (ops: TxnOp[], o?: Parameters<Datastore['txn']>[1]) => {
              const wep = ops.find(
                (x): x is { op: 'create'; res: Resource<'WorkloadEndpoint'> } =>
                  x.op === 'create' && x.res.kind === 'WorkloadEndpoint',
              );
              if (armed && wep) {
                armed = false;
                guess = wep.res.spec.ipNetworks.map((n) => n.split('/')[0]!);
                await beforeCommit(guess);
              }
              return target.txn(ops, o);
            };
          }
          const v = Reflect.get(target, prop, receiver) as unknown;
          return typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(target) : v;
        },
      }),
  });
  runtime = rt;
  return { rt, arm: () => void (armed = true), firstGuess: () => guess };
}

async function run(
  rt: PluginRuntime,
  command: 'ADD' | 'DEL',
  containerId: string,
  netns: string,
): Promise<{ code: number; json: Record<string, unknown> }> {
  const plugin: PluginSpec<Netconf, PluginRuntime> = {
    name: 'netplugin',
    load: async () => (await import('../../src/plugins/main/index.js')).handlers,
    runtime: rt,
  };
  let stdout = '';
  const env = {
    CNI_COMMAND: command,
    CNI_CONTAINERID: containerId,
    CNI_NETNS: netns,
    CNI_IFNAME: 'eth0',
    CNI_PATH: '/nonexistent',
    CNI_ARGS: `IgnoreUnknown=1;K8S_POD_NAMESPACE=spec;K8S_POD_NAME=${containerId}`,
  };
  const conf = netconf(c, '1.0.0', { host_veth_prefix: PREFIX, log_level: 'error' });
  const code = await dispatch(
    { env, stdin: JSON.stringify(conf), stdout: (s) => (stdout += s), stderr: () => undefined },
    plugin,
  );
  return { code, json: stdout ? (JSON.parse(stdout) as Record<string, unknown>) : {} };
}

async function releaseForeign(): Promise<void> {
  await createIpam(c.ds, { lock: 'none' }).releaseByHandle(FOREIGN);
}

describe('the veth pair made while the IPAM transaction commits', () => {
  it('a transaction that loses is retried in another block, and the pod gets the committed address, not the first guess', async () => {
    const { rt, arm, firstGuess } = runtimeWith(async (guess) => {
      const ip = tryParseIP(guess[0]!)!;
      const b = (await c.ds.list('IPAMBlock')).items.find((x) => containsIP(tryParseCidr(x.spec.cidr)!, ip));
      await fillBlock(b!.spec.cidr);
    });
    // A first pod claims the node's block, so the next ADD's first guess is in that block.
    const first = createNetns('sp');
    expect((await run(rt, 'ADD', 'spec-first', first.path)).code).toBe(0);
    arm();
    const pod = createNetns('sp');
    const r = await run(rt, 'ADD', 'spec-second', pod.path);
    expect(r.code, JSON.stringify(r.json)).toBe(0);
    const got = (r.json['ips'] as Array<{ address: string }>)[0]!.address.split('/')[0]!;
    const guess = firstGuess();
    expect(guess).toHaveLength(1);
    expect(got).not.toBe(guess[0]);
    // The pod has the committed address only; the host routes it, and nothing routes the first guess.
    expect(
      addrs('eth0', pod.name)
        .filter((a) => a.family === 'inet')
        .map((a) => a.local),
    ).toEqual([got]);
    const routes = hostPoolRoutes(c.pools);
    expect(routes.some((x) => x.startsWith(`${got} `) || x.startsWith(`${got}/32 `))).toBe(true);
    expect(routes.some((x) => x.startsWith(`${guess[0]} `) || x.startsWith(`${guess[0]}/32 `))).toBe(false);
    const weps = (await c.ds.list('WorkloadEndpoint')).items.filter((w) => w.spec.containerID === 'spec-second');
    expect(weps.map((w) => w.spec.ipNetworks)).toEqual([[`${got}/32`]]);
    expect((await run(rt, 'DEL', 'spec-second', pod.path)).code).toBe(0);
    expect((await run(rt, 'DEL', 'spec-first', first.path)).code).toBe(0);
    await releaseForeign();
    await expectNothingLeft(c, PREFIX);
  });

  it('an ADD whose transaction loses and then finds no address leaves no veth behind', async () => {
    // The other writer fills the whole pool (both /28 blocks) before the commit.
    const { rt, arm } = runtimeWith(async () => {
      await createIpam(c.ds, { lock: 'none' }).assign({
        handleID: `${FOREIGN}-claim`,
        node: 'other-node',
        attrs: {},
        assignIPv4: true,
        assignIPv6: false,
      });
      for (const b of (await c.ds.list('IPAMBlock')).items) await fillBlock(b.spec.cidr);
    });
    // The node holds a block (an ADD and DEL keep the node's last block), so the first guess is an update of it.
    const warm = createNetns('sp');
    const plain = createPluginRuntime();
    try {
      expect((await run(plain, 'ADD', 'spec-warm', warm.path)).code).toBe(0);
      expect((await run(plain, 'DEL', 'spec-warm', warm.path)).code).toBe(0);
    } finally {
      await plain.close();
    }
    arm();
    const pod = createNetns('sp');
    const r = await run(rt, 'ADD', 'spec-full', pod.path);
    expect(r.code, JSON.stringify(r.json)).not.toBe(0);
    expect(String(r.json['msg'])).toMatch(/no free IPv4 address|exhausted/);
    expect(link('eth0', pod.name)).toBeUndefined();
    expect(hostLinksWithPrefix(PREFIX)).toEqual([]);
    expect(hostPoolRoutes(c.pools)).toEqual([]);
    expect((await c.ds.list('WorkloadEndpoint')).items).toEqual([]);
    await createIpam(c.ds, { lock: 'none' }).releaseByHandle(`${FOREIGN}-claim`);
    await releaseForeign();
    await expectNothingLeft(c, PREFIX);
  });
});
