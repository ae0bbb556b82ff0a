// The agent's policy controller in-process, on the in-memory datastore and
// real nftables (its own table in this test's namespace): the first resync
// happens even when a kind lists nothing and lists last; a table changed behind
// its back is repaired by a full resync; status files follow endpoints.
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { MemoryDatastore } from '../../src/datastore/memory.js';
import type { Resource } from '../../src/model/resources.js';
import type { Datastore } from '../../src/datastore/types.js';
import {
  startPolicyController,
  type InterfaceConflict,
  type PolicyController,
} from '../../src/agent/policy/controller.js';
import { endpointStatusKey, statusFilePath } from '../../src/policy-status/index.js';
import { hostVethName } from '../../src/model/names.js';
import { namespaceToProfile } from '../../src/model/profiles.js';
import { nftRun, nftRunAsync } from '../../src/native/nft.js';

const TABLE = 'netplugin-ctrl-test';
const quiet = { error: () => undefined, warn: () => undefined, info: () => undefined, debug: () => undefined } as never;
let ctl: PolicyController | undefined;
let dir: string | undefined;
afterEach(async () => {
  await ctl?.stop();
  ctl = undefined;
  try {
    nftRun(`delete table inet ${TABLE}`);
  } catch {
    // absent
  }
  if (dir) rmSync(dir, { recursive: true, force: true });
});

function wep(name: string, ifname: string, labels: Record<string, string> = {}): Resource<'WorkloadEndpoint'> {
  return {
    apiVersion: 'netplugin.org/v3',
    kind: 'WorkloadEndpoint',
    metadata: { name, namespace: 'x', labels },
    spec: {
      orchestrator: 'k8s',
      node: 'node1',
      containerID: `c-${name}`,
      pod: name,
      endpoint: 'eth0',
      ipNetworks: ['10.66.0.1/32'],
      profiles: ['kns.x'],
      interfaceName: ifname,
    },
  };
}

/** The real store, with the list of one kind answering late (as a slow etcd range or API page would). */
function slowList(ds: Datastore, kind: string, ms: number): Datastore {
  return new Proxy(ds, {
    get(t, k) {
      const v = (t as never)[k] as unknown;
      if (k !== 'list' || typeof v !== 'function')
        return typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(t) : v;
      return async (kd: string, o: unknown) => {
        if (kd === kind) await new Promise((r) => setTimeout(r, ms));
        return (v as (...a: unknown[]) => unknown).call(t, kd, o);
      };
    },
  });
}

async function within<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const t = new Promise<never>(
    (_, rej) => (timer = setTimeout(() => rej(new Error(`${what} did not happen within ${ms} ms`)), ms)),
  );
  try {
    return await Promise.race([p, t]);
  } finally {
    clearTimeout(timer);
  }
}

describe('policy controller', () => {
  it('resyncs once every kind is listed, even an empty one listed last; repairs a table changed behind its back', async () => {
    const mem = new MemoryDatastore();
    await mem.create(namespaceToProfile({ metadata: { name: 'x' } }));
    // The interface the agent programs is the one it derives (namespace x, pod node1-k8s-a-eth0).
    const ifname = hostVethName('npt', 'x.node1-k8s-a-eth0');
    const key = endpointStatusKey('x', 'node1-k8s-a-eth0');
    await mem.create(wep('node1-k8s-a-eth0', ifname));
    dir = mkdtempSync(join(tmpdir(), `policy-ctl-${process.pid}-`));
    ctl = await startPolicyController({
      ds: slowList(mem, 'GlobalNetworkPolicy', 300),
      nodename: 'node1',
      log: quiet,
      base: { vethPrefixes: ['npt'], table: TABLE },
      statusDir: dir,
      nft: (s) => nftRunAsync(s),
    });
    await within(ctl.synced, 15_000, 'the first resync');
    expect(nftRun(`list table inet ${TABLE}`)).toContain(`chain to-${ifname}`);
    expect(existsSync(statusFilePath(key, dir))).toBe(true);

    // Someone deletes the endpoint's chain map entry and chain by hand: the next incremental batch is
    // refused (it flushes a chain that is gone), and the controller resyncs the whole table.
    nftRun(
      `delete element inet ${TABLE} to-wl { "${ifname}" }\nflush chain inet ${TABLE} to-${ifname}\ndelete chain inet ${TABLE} to-${ifname}`,
    );
    await mem.create({
      apiVersion: 'netplugin.org/v3',
      kind: 'NetworkPolicy',
      metadata: { name: 'deny', namespace: 'x' },
      spec: { selector: 'all()', types: ['Ingress'] },
    });
    const deadline = Date.now() + 15_000;
    let listing = '';
    while (Date.now() < deadline) {
      listing = nftRun(`list table inet ${TABLE}`);
      if (listing.includes(`chain to-${ifname} {`) && listing.includes(`chain to-${ifname}-pol`)) break;
      await new Promise((r) => setTimeout(r, 100));
    }
    expect(listing).toContain(`chain to-${ifname}-pol`);
    expect(listing).toContain(`"${ifname}" : jump to-${ifname}`);

    // The endpoint goes away: its chains and its status file too.
    await mem.delete('WorkloadEndpoint', 'node1-k8s-a-eth0', { namespace: 'x' });
    const end2 = Date.now() + 15_000;
    while (Date.now() < end2 && existsSync(statusFilePath(key, dir))) await new Promise((r) => setTimeout(r, 100));
    expect(existsSync(statusFilePath(key, dir))).toBe(false);
    expect(nftRun(`list table inet ${TABLE}`)).not.toContain(ifname);
  });

  it('an interface is programmed for one endpoint only: two that derive the same, the newer has it, the other is reported', async () => {
    const mem = new MemoryDatastore();
    await mem.create(namespaceToProfile({ metadata: { name: 'x' } }));
    // One pod with two endpoints: both derive the host veth of x.p (the plugin keys it by pod).
    const ifname = hostVethName('npt', 'x.p');
    const older = wep('node1-k8s-p-eth0', ifname);
    older.spec.pod = 'p';
    older.metadata.creationTimestamp = '2026-01-01T00:00:00Z';
    const newer = wep('node1-k8s-p-net1', ifname);
    newer.spec = { ...newer.spec, pod: 'p', endpoint: 'net1', ipNetworks: ['10.66.0.2/32'] };
    newer.metadata.creationTimestamp = '2026-01-01T00:00:05Z';
    await mem.create(older);
    await mem.create(newer);
    const seen: InterfaceConflict[] = [];
    dir = mkdtempSync(join(tmpdir(), `policy-ctl-${process.pid}-`));
    ctl = await startPolicyController({
      ds: mem,
      nodename: 'node1',
      log: quiet,
      base: { vethPrefixes: ['npt'], table: TABLE },
      statusDir: dir,
      nft: (s) => nftRunAsync(s),
      onInterfaceConflict: (c) => seen.push(c),
    });
    await within(ctl.synced, 15_000, 'the first resync');
    const listing = nftRun(`list table inet ${TABLE}`);
    // The endpoint chain is the newer endpoint's (its drops name it), and only its status is reported.
    expect(listing).toContain('x/node1-k8s-p-net1 ingress: end of profiles kns.x');
    expect(listing).not.toContain('node1-k8s-p-eth0');
    expect(seen.map((c) => [c.kind, c.endpoint, c.derived ?? null])).toEqual([['shared', 'node1-k8s-p-eth0', null]]);
    expect(existsSync(statusFilePath(endpointStatusKey('x', 'node1-k8s-p-net1'), dir))).toBe(true);
    expect(existsSync(statusFilePath(endpointStatusKey('x', 'node1-k8s-p-eth0'), dir))).toBe(false);
  });

  it('same-named endpoints in two namespaces: each signal and status file is its own', async () => {
    const mem = new MemoryDatastore();
    for (const ns of ['x', 'y']) await mem.create(namespaceToProfile({ metadata: { name: ns } }));
    dir = mkdtempSync(join(tmpdir(), `policy-ctl-${process.pid}-`));
    const base = { vethPrefixes: ['npt'], table: TABLE };
    ctl = await startPolicyController({
      ds: mem,
      nodename: 'node1',
      log: quiet,
      base,
      statusDir: dir,
      nft: (s) => nftRunAsync(s),
    });
    await within(ctl.synced, 15_000, 'the first resync');
    const name = 'node1-k8s-twin-eth0';
    const reports = (n: number) =>
      new Promise<void>((r) => {
        const t = setInterval(() => got.length >= n && (clearInterval(t), r()), 20);
      });
    const got: Array<[string, string]> = [];
    for (const ns of ['x', 'y']) ctl.signal.onProgrammed(endpointStatusKey(ns, name), (cid) => got.push([ns, cid]));
    const inX = wep(name, hostVethName('npt', 'x.twin'));
    inX.spec = { ...inX.spec, pod: 'twin', containerID: 'cx' };
    await mem.create(inX);
    await within(reports(1), 15_000, 'x programmed');
    const inY = wep(name, hostVethName('npt', 'y.twin'));
    inY.metadata.namespace = 'y';
    inY.spec = { ...inY.spec, pod: 'twin', containerID: 'cy', ipNetworks: ['10.66.0.9/32'] };
    await mem.create(inY);
    await within(reports(2), 15_000, 'y programmed');
    expect(got).toEqual([
      ['x', 'cx'],
      ['y', 'cy'],
    ]);
    for (const [ns, cid] of [
      ['x', 'cx'],
      ['y', 'cy'],
    ] as const) {
      expect(JSON.parse(readFileSync(statusFilePath(endpointStatusKey(ns, name), dir), 'utf8'))).toMatchObject({
        containerID: cid,
      });
    }
  });
});

describe('policy controller: programming lag', () => {
  it('counts from a change until a batch with it applied: growing while nftables refuses, 0 once applied', async () => {
    const mem = new MemoryDatastore();
    await mem.create(namespaceToProfile({ metadata: { name: 'x' } }));
    dir = mkdtempSync(join(tmpdir(), `policy-ctl-${process.pid}-`));
    let refuse = false;
    const nft = (s: string) => (refuse ? Promise.reject(new Error('refused for the test')) : nftRunAsync(s));
    ctl = await startPolicyController({
      ds: mem,
      nodename: 'node1',
      log: quiet,
      base: { vethPrefixes: ['npt'], table: TABLE },
      statusDir: dir,
      nft,
    });
    await within(ctl.synced, 15_000, 'the first resync');
    await until('no lag after the resync', 5_000, () => ctl!.programmingLagSeconds() === 0);
    refuse = true;
    await mem.create(wep('node1-k8s-lag-eth0', hostVethName('npt', 'x.lag')));
    await new Promise((r) => setTimeout(r, 1_200));
    // The batch failed (and is retried with backoff): the change is still pending.
    expect(ctl.programmingLagSeconds()).toBeGreaterThanOrEqual(1);
    refuse = false;
    await until('the change programmed', 20_000, () => ctl!.current().endpoints.size === 1);
    await until('no lag once applied', 5_000, () => ctl!.programmingLagSeconds() === 0);
  });
});

async function until(what: string, ms: number, ok: () => boolean): Promise<void> {
  const end = Date.now() + ms;
  while (Date.now() < end && !ok()) await new Promise((r) => setTimeout(r, 50));
  if (!ok()) throw new Error(`${what} did not happen within ${ms} ms`);
}

describe('policy controller: one bad object costs its own rules only', () => {
  it('programs a new pod while an endpoint with a quote, newline and space in its interface name, address, name and labels is present', async () => {
    const mem = new MemoryDatastore();
    await mem.create(namespaceToProfile({ metadata: { name: 'x' } }));
    // The recorded interfaceName is not taken (the agent derives the host veth), the address is refused by the model.
    const bad = wep('node1-k8s-bad-eth0', 'npt"x\ny z', { app: 'a"b\nc d' });
    bad.spec.pod = 'bad';
    bad.spec.ipNetworks = ['10.66.0.9/32', '10.66.0.10"\n 1/32'];
    await mem.create(bad);
    await mem.create({
      apiVersion: 'netplugin.org/v3',
      kind: 'NetworkPolicy',
      metadata: { name: 'p "q"\nr', namespace: 'x' },
      spec: {
        selector: 'all()',
        types: ['Ingress'],
        ingress: [{ action: 'Allow', source: { selector: "app == 'a\"b\nc d'" } }],
      },
    });
    dir = mkdtempSync(join(tmpdir(), `policy-ctl-${process.pid}-`));
    const refused: string[] = [];
    ctl = await startPolicyController({
      ds: mem,
      nodename: 'node1',
      log: quiet,
      base: { vethPrefixes: ['npt'], table: TABLE },
      statusDir: dir,
      nft: (s) => nftRunAsync(s),
      onRefused: (r) => refused.push(`${r.stage} ${r.owner.kind} ${r.owner.namespace}/${r.owner.name} ${r.owner.pod}`),
    });
    await within(ctl.synced, 15_000, 'the first resync');
    const good = wep('node1-k8s-good-eth0', 'nptgood');
    good.spec.ipNetworks = ['10.66.0.2/32'];
    await mem.create(good);
    const goodIf = hostVethName('npt', 'x.node1-k8s-good-eth0');
    await until('the new pod programmed', 15_000, () =>
      nftRun(`list table inet ${TABLE}`).includes(`"${goodIf}" : jump to-${goodIf}`),
    );
    const listing = nftRun(`list table inet ${TABLE}`);
    await until('the new pod reported programmed', 15_000, () =>
      existsSync(statusFilePath(endpointStatusKey('x', 'node1-k8s-good-eth0'), dir!)),
    );
    // The bad endpoint's valid address counts as a peer, the other is left out; the policy's name is in
    // its comments, made safe.
    expect(listing).toContain('comment "NetworkPolicy x/p ?q??r ingress"');
    expect(listing).toMatch(/10\.66\.0\.9/);
    expect(listing).not.toMatch(/10\.66\.0\.10/);
    expect(refused).toEqual(['model Endpoint x/node1-k8s-bad-eth0 bad']);
  });

  it('isolates an object libnftables refuses: the rest is programmed, the culprit is reported once and not retried until it changes', async () => {
    const mem = new MemoryDatastore();
    await mem.create(namespaceToProfile({ metadata: { name: 'x' } }));
    const [ifA, ifB, ifC] = ['a', 'b', 'c'].map((p) => hostVethName('npt', `x.node1-k8s-${p}-eth0`));
    await mem.create(wep('node1-k8s-a-eth0', ifA!));
    await mem.create(wep('node1-k8s-b-eth0', ifB!));
    dir = mkdtempSync(join(tmpdir(), `policy-ctl-${process.pid}-`));
    // Real libnftables, refusing (as the kernel would) any batch that programs b's chains.
    let refusedBatches = 0;
    const nft = async (s: string) => {
      if (s.includes('add chain') && s.includes(` to-${ifB} `)) {
        refusedBatches++;
        throw new Error(`nftables refused "add chain ... to-${ifB}": Could not process rule: Invalid argument`);
      }
      return nftRunAsync(s);
    };
    const refused: string[] = [];
    ctl = await startPolicyController({
      ds: mem,
      nodename: 'node1',
      log: quiet,
      base: { vethPrefixes: ['npt'], table: TABLE },
      statusDir: dir,
      nft,
      onRefused: (r) => refused.push(`${r.stage} ${r.owner.namespace}/${r.owner.name}`),
    });
    await within(ctl.synced, 15_000, 'the first resync');
    let listing = nftRun(`list table inet ${TABLE}`);
    expect(listing).toContain(`"${ifA}" : jump to-${ifA}`);
    expect(listing).not.toContain(ifB);
    expect(refused).toEqual(['kernel x/node1-k8s-b-eth0']);
    // A third pod comes: programmed by an incremental batch; the culprit is not tried again.
    const before = refusedBatches;
    await mem.create(wep('node1-k8s-c-eth0', ifC!));
    await until('the third pod programmed', 15_000, () =>
      nftRun(`list table inet ${TABLE}`).includes(`"${ifC}" : jump to-${ifC}`),
    );
    expect(refusedBatches).toBe(before);
    listing = nftRun(`list table inet ${TABLE}`);
    expect(listing).not.toContain(ifB);
    expect(refused).toHaveLength(1);
    // No scratch table left behind.
    expect(nftRun('list tables')).not.toContain(`${TABLE}-check`);
  });
});
