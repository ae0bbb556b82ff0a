// Issue 11, finding 1: an allocation's identity is exact. Container IDs are
// case-sensitive and both handle parts may contain dots; two sandboxes must
// never share an address, and `ipam check` must see two live endpoints
// holding one address. Real allocator on the in-memory datastore (same CAS
// semantics as etcd and Kubernetes).
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { MemoryDatastore } from '../../src/datastore/memory.js';
import { API_VERSION } from '../../src/model/resources.js';
import { runCtl } from '../../src/ctl/index.js';
import type { IpamReport } from '../../src/ctl/ipam.js';
import { createIpam, type Ipam } from '../../src/ipam/index.js';
import { handleIDFor, handleName, parseHandleID } from '../../src/ipam/handle.js';
import { identify } from '../../src/plugins/main/common.js';
import type { Netconf } from '../../src/config/index.js';

let ds: MemoryDatastore;
let ipam: Ipam;
let dir: string;
beforeEach(async () => {
  ds = new MemoryDatastore();
  ipam = createIpam(ds, { lock: 'none' });
  dir = mkdtempSync(join(tmpdir(), `ipam-identity-${process.pid}-`));
  await ds.create({
    apiVersion: API_VERSION,
    kind: 'IPPool',
    metadata: { name: 'p' },
    spec: { cidr: '10.9.0.0/24', blockSize: 28, ipipMode: 'Never', vxlanMode: 'Never', nodeSelector: 'all()' },
  });
});
afterEach(() => rmSync(dir, { recursive: true, force: true }));

const handleOf = (network: string, containerId: string) =>
  identify({ name: network, nodename: 'n1' } as unknown as Netconf, { containerId, ifname: 'eth0', args: {} }).handleID;

async function assign(handleID: string): Promise<string> {
  const [a] = await ipam.assign({ handleID, node: 'n1', attrs: {}, assignIPv4: true, assignIPv6: false });
  return a!.ip;
}

async function ctl(argv: string[]): Promise<{ code: number; out: string; err: string }> {
  let out = '';
  let err = '';
  const code = await runCtl(argv, {
    env: { ETCD_ENDPOINTS: 'http://127.0.0.1:2379' },
    cwd: dir,
    stdout: (s) => (out += s),
    stderr: (s) => (err += s),
    openDatastore: async () => ds,
  });
  return { code, out, err };
}

describe('handle identity', () => {
  it('containers CAFE01 and cafe01 get different addresses, and DEL of one never frees the other', async () => {
    const upper = handleOf('net', 'CAFE01');
    const lower = handleOf('net', 'cafe01');
    const a = await assign(upper);
    const b = await assign(lower);
    expect(b).not.toBe(a);
    expect(await ipam.releaseByHandle(lower)).toEqual([b]);
    expect(await ipam.handleAddresses(upper)).toEqual([a]);
    // A third pod does not get the address CAFE01 still uses.
    expect(await assign(handleOf('net', 'third'))).not.toBe(a);
  });

  it('container x.y on network net and container y on network net.x are two handles with two addresses', async () => {
    const h1 = handleOf('net', 'x.y');
    const h2 = handleOf('net.x', 'y');
    expect(h1).not.toBe(h2);
    expect(await assign(h1)).not.toBe(await assign(h2));
    expect(parseHandleID(h1)).toEqual({ network: 'net', containerId: 'x.y' });
    expect(parseHandleID(h2)).toEqual({ network: 'net.x', containerId: 'y' });
  });

  it('the format round-trips for dotted names and keeps the old form for dot-free networks', () => {
    expect(handleIDFor('k8s-pod-network', 'abc123')).toBe('k8s-pod-network.abc123');
    for (const [n, c] of [
      ['a.b.c', 'd.e'],
      ['a.', 'b'],
      ['a..b', 'c..d'],
      ['net', 'x'],
    ] as const) {
      expect(parseHandleID(handleIDFor(n, c))).toEqual({ network: n, containerId: c });
    }
    // Object names are valid lower-case Kubernetes names and differ by case of the ID.
    expect(handleName('net.CAFE01')).not.toBe(handleName('net.cafe01'));
    expect(handleName('net.CAFE01')).toMatch(/^[a-z0-9]([a-z0-9.-]*[a-z0-9])?$/);
    expect(handleName(handleIDFor('a.b', 'c'))).toMatch(/^[a-z0-9]([a-z0-9.-]*[a-z0-9])?$/);
  });

  it('a handle stored under its old case-folded name is still released by its exact ID, and `ipam check` migrates it', async () => {
    const id = handleOf('net', 'CAFE02');
    const ip = await assign(id);
    // Rewrite the handle object as the old code stored it: name = lower-cased ID.
    const cur = await ds.get('IPAMHandle', handleName(id));
    await ds.delete('IPAMHandle', cur.metadata.name);
    await ds.create({
      apiVersion: API_VERSION,
      kind: 'IPAMHandle',
      metadata: { name: id.toLowerCase() },
      spec: cur.spec,
    });
    expect(await ipam.handleAddresses(id)).toEqual([ip]);
    // A lower-case sandbox whose new name is that legacy name is refused clearly, never handed the other's handle.
    await expect(assign(handleOf('net', 'cafe02'))).rejects.toThrow(
      /records handle "net.CAFE02".*ipam check --fix|ipam check/,
    );

    await ds.create({
      apiVersion: API_VERSION,
      kind: 'WorkloadEndpoint',
      metadata: { name: 'n1-cni-CAFE02-eth0', namespace: 'default' },
      spec: {
        orchestrator: 'cni',
        node: 'n1',
        containerID: 'CAFE02',
        endpoint: 'eth0',
        ipNetworks: [`${ip}/32`],
        interfaceName: 'npiX',
      },
    });
    const check = await ctl(['ipam', 'check', '-o', 'r.json']);
    expect(check.out).toContain('case-folded legacy names');
    const report = JSON.parse(readFileSync(join(dir, 'r.json'), 'utf8')) as IpamReport;
    expect(report.legacyHandleNames).toEqual([{ handle: id, name: id.toLowerCase(), want: handleName(id) }]);
    expect((await ctl(['ipam', 'release', '--from-report', 'r.json'])).out).toContain(`migrated handle object ${id}`);
    expect((await ds.get('IPAMHandle', handleName(id))).spec.handleID).toBe(id);
    expect((await ctl(['ipam', 'check'])).out).toContain('no problems found');
    expect(await ipam.releaseByHandle(id)).toEqual([ip]);
  });
});

describe('ipam check: two live endpoints holding one address', () => {
  it('is reported with both endpoints', async () => {
    const ip = await assign(handleOf('net', 'aaa1'));
    for (const [cid, pod] of [
      ['aaa1', 'web-a'],
      ['AAA1', 'web-b'],
    ]) {
      await ds.create({
        apiVersion: API_VERSION,
        kind: 'WorkloadEndpoint',
        metadata: { name: `n1-k8s-${pod}-eth0`, namespace: 'ns' },
        spec: {
          orchestrator: 'k8s',
          node: 'n1',
          containerID: cid!,
          pod: pod!,
          endpoint: 'eth0',
          ipNetworks: [`${ip}/32`],
          interfaceName: 'npiX',
        },
      });
    }
    const r = await ctl(['ipam', 'check', '--json']);
    const report = JSON.parse(r.out) as IpamReport;
    expect(report.sharedAddresses).toEqual([
      {
        ip,
        endpoints: [
          { endpoint: 'ns/n1-k8s-web-a-eth0', containerID: 'aaa1' },
          { endpoint: 'ns/n1-k8s-web-b-eth0', containerID: 'AAA1' },
        ],
      },
    ]);
    expect(report.summary.problems).toBeGreaterThan(0);
    expect((await ctl(['ipam', 'check'])).out).toMatch(
      new RegExp(`two or more live endpoints[\\s\\S]*${ip.replaceAll('.', '\\.')}.*web-a.*web-b`),
    );
  });
});
