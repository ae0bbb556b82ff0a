// 50 pods ADDed and DELed concurrently (10 plugin processes at a time, as a busy
// kubelet would): every pod gets its own address, the blocks are claimed without
// lost updates, and nothing is left afterwards.
import { describe, expect, it } from 'vitest';
import { hostVethName } from '../../src/model/names.js';
import { createNetns } from '../support/netns.js';
import {
  addrs,
  cni,
  expectNothingLeft,
  hostLinksWithPrefix,
  hostPoolRoutes,
  ipamState,
  mapLimit,
  netconf,
  why,
  wepNames,
  type Cluster,
  useCluster,
} from '../support/plugin-harness.js';

const PREFIX = 'npc';
// /28 blocks: 50 pods need four blocks, so concurrent ADDs also race to claim blocks.
const POOL = { name: 'conc-v4', cidr: '10.77.9.0/24', blockSize: 28 };
const N = 50;
const PARALLEL = 10;
let c: Cluster;

useCluster([POOL], (x) => (c = x));

describe('concurrency', () => {
  it(`${N} concurrent ADDs get distinct addresses; ${N} concurrent DELs leave nothing`, async () => {
    const conf = netconf(c, '1.0.0', { host_veth_prefix: PREFIX, log_level: 'info' });
    const pods = Array.from({ length: N }, () => createNetns('cc'));
    const calls = pods.map((p, i) => ({ containerId: `conc${i}-${process.pid}`, netns: p.path }));

    const adds = await mapLimit(calls, PARALLEL, (call) => cni('ADD', conf, call));
    const failed = adds.map((r, i) => (r.code === 0 ? undefined : `pod ${i}: ${why(r)}`)).filter(Boolean);
    expect(failed, 'failed ADDs').toEqual([]);

    const ips = adds.map((r) => r.json.ips[0].address as string);
    expect(new Set(ips).size, `duplicate addresses: ${ips.join(' ')}`).toBe(N);
    pods.forEach((p, i) => {
      expect(
        addrs('eth0', p.name)
          .filter((a) => a.family === 'inet')
          .map((a) => `${a.local}/${a.prefixlen}`),
        p.name,
      ).toEqual([ips[i]]);
    });
    expect(hostLinksWithPrefix(PREFIX).sort()).toEqual(calls.map((cl) => hostVethName(PREFIX, cl.containerId)).sort());
    expect(hostPoolRoutes(c.pools)).toHaveLength(N);
    const st = await ipamState(c.ds);
    expect(st.handles).toHaveLength(N);
    expect(st.allocations).toHaveLength(N);
    expect(await wepNames(c.ds)).toHaveLength(N);

    const dels = await mapLimit(calls, PARALLEL, (call) => cni('DEL', conf, call));
    const delFailed = dels.map((r, i) => (r.code === 0 ? undefined : `pod ${i}: ${why(r)}`)).filter(Boolean);
    expect(delFailed, 'failed DELs').toEqual([]);
    await expectNothingLeft(c, PREFIX);
  });
});
