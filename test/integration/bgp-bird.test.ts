// Two nodes as network namespaces on one link, each with a real BIRD run by
// the agent's supervisor from the renderer's configuration (node-to-node
// mesh): the session establishes, each node's block arrives in the other's
// kernel as a `proto bird` route, a new block is applied with `birdc configure`
// (same BIRD process), a killed BIRD is restarted while the peer keeps the
// route (graceful restart), and a configuration `bird -p` refuses is not used.
import { execFileSync } from 'node:child_process';
import { chmodSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createNetns, deleteNetns, inNetns } from '../support/netns.js';
import { BirdSupervisor } from '../../src/agent/bgp/supervisor.js';
import { renderBirdConfig, type BirdInput } from '../../src/agent/bgp/render.js';
import { parseCidr } from '../../src/net/cidr.js';
import type { Logger } from '../../src/log/types.js';
import { runCtl } from '../../src/ctl/index.js';

async function ctl(argv: string[]): Promise<{ code: number; out: string; err: string }> {
  let out = '';
  let err = '';
  const code = await runCtl(argv, {
    env: {},
    stdout: (s) => (out += s),
    stderr: (s) => (err += s),
    openDatastore: async () => {
      throw new Error('node status needs no datastore');
    },
  });
  return { code, out, err };
}

const logs: string[] = [];
const log: Logger = {
  error: (m) => logs.push(`E ${m}`),
  warn: (m) => logs.push(`W ${m}`),
  info: (m) => logs.push(`I ${m}`),
  debug: () => undefined,
};

const tmp = mkdtempSync(join(tmpdir(), 'bgp-bird-'));
const ns: Record<'a' | 'b', string> = { a: '', b: '' };
const sup: Partial<Record<'a' | 'b', BirdSupervisor>> = {};
const IP = { a: '10.201.0.1', b: '10.201.0.2' };

function input(me: 'a' | 'b', blocks: string[]): BirdInput {
  return {
    me,
    nodes: [
      { metadata: { name: 'a' }, spec: { ipv4Address: `${IP.a}/24` } },
      { metadata: { name: 'b' }, spec: { ipv4Address: `${IP.b}/24` } },
    ],
    configs: [conf],
    peers: [],
    pools: [{ name: 'bgp', spec: { cidr: '10.244.0.0/16', vxlanMode: 'Never', ipipMode: 'Never' } }],
    blocks,
    borrowed: [],
    extraAddresses: [],
    subnets: [parseCidr('10.201.0.0/24')],
    passwords: new Map(),
    runDir: join(tmp, me),
  };
}
const conf = { metadata: { name: 'default' }, spec: { nodeMeshMaxRestartTime: '60s' } };

/** bird runs inside the node's namespace; birdc talks to its socket from anywhere. */
function wrappers(node: 'a' | 'b'): string {
  const dir = join(tmp, `bin-${node}`);
  execFileSync('mkdir', ['-p', dir]);
  writeFileSync(join(dir, 'bird'), `#!/bin/sh\nexec ip netns exec ${ns[node]} /usr/sbin/bird "$@"\n`);
  writeFileSync(join(dir, 'birdc'), '#!/bin/sh\nexec /usr/sbin/birdc "$@"\n');
  for (const f of ['bird', 'birdc']) chmodSync(join(dir, f), 0o755);
  return join(dir, 'bird');
}

async function until<T>(
  what: string,
  fn: () => T | undefined | false | Promise<T | undefined | false>,
  ms = 30_000,
): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}; log:\n${logs.slice(-20).join('\n')}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

const birdRoutes = (node: 'a' | 'b') => inNetns(ns[node], 'ip', ['-4', 'route', 'show', 'proto', 'bird']);

beforeAll(() => {
  ns.a = createNetns('bgpa').name;
  ns.b = createNetns('bgpb').name;
  execFileSync('ip', ['-n', ns.a, 'link', 'add', 'eth0', 'type', 'veth', 'peer', 'name', 'eth0', 'netns', ns.b]);
  for (const n of ['a', 'b'] as const) {
    execFileSync('ip', ['-n', ns[n], 'addr', 'add', `${IP[n]}/24`, 'dev', 'eth0']);
    execFileSync('ip', ['-n', ns[n], 'link', 'set', 'eth0', 'up']);
  }
});

afterAll(async () => {
  for (const s of Object.values(sup)) await s?.stop();
  for (const n of Object.values(ns)) if (n) deleteNetns(n);
  rmSync(tmp, { recursive: true, force: true });
});

describe('BIRD supervised by the agent, node-to-node mesh', () => {
  it("establishes the session and installs the other node's block as proto bird", async () => {
    for (const n of ['a', 'b'] as const) {
      sup[n] = new BirdSupervisor({ birdPath: wrappers(n), runDir: join(tmp, n), log, pollMs: 200 });
      const r = await sup[n]!.apply(renderBirdConfig(input(n, n === 'a' ? ['10.244.1.0/26'] : ['10.244.2.0/26'])));
      expect(r).toEqual({ ok: true });
    }
    await until(
      'the session to be Established',
      () => sup.a!.status().established === 1 && sup.b!.status().established === 1,
    );
    expect(sup.a!.status().sessions[0]).toMatchObject({
      peerAddress: IP.b,
      peerType: 'node-to-node mesh',
      family: 4,
      established: true,
    });
    await until("a's block at b", () => birdRoutes('b').includes(`10.244.1.0/26 via ${IP.a} dev eth0`));
    await until("b's block at a", () => birdRoutes('a').includes(`10.244.2.0/26 via ${IP.b} dev eth0`));
  });

  it('netpluginctl node status shows the Established peer, as a table and as JSON', async () => {
    await until("b's session Established", () => sup.b!.status().established === 1);
    const t = await ctl(['node', 'status', '--bird-run-dir', join(tmp, 'b')]);
    expect(t.err).toBe('');
    expect(t.code).toBe(0);
    expect(t.out).toMatch(/^BIRD is running \(version 2\.\d+\.\d+\)/);
    expect(t.out).toMatch(/\| PEER ADDRESS \| PEER TYPE +\| STATE \| SINCE +\| INFO +\|/);
    expect(t.out).toMatch(
      new RegExp(
        `\\| ${IP.a.replace(/\./g, '\\.')} +\\| node-to-node mesh \\| up +\\| \\d{4}-\\d\\d-\\d\\d [\\d:]+ \\| ` +
          `Established`,
      ),
    );
    expect(t.out).toContain('No IPv6 peers found.');
    const j = await ctl(['node', 'status', '--bird-run-dir', join(tmp, 'b'), '-o', 'json']);
    expect(JSON.parse(j.out)).toMatchObject({
      bgp: 'enabled',
      bird: { running: true },
      peers: [{ peerAddress: IP.a, peerType: 'node-to-node mesh', established: true }],
    });
    const off = await ctl(['node', 'status', '--bird-run-dir', join(tmp, 'nowhere')]);
    expect(off.code).toBe(1);
    expect(off.err).toMatch(/BGP is not enabled on this node: no BIRD configuration in .*nowhere/);
  });

  it('applies a new block with birdc configure: same BIRD process, session stays up', async () => {
    const pid = sup.a!.status().pid;
    expect(await sup.a!.apply(renderBirdConfig(input('a', ['10.244.1.0/26', '10.244.1.64/26'])))).toEqual({ ok: true });
    await until('the new block at b', () => birdRoutes('b').includes('10.244.1.64/26'));
    expect(sup.a!.status().pid).toBe(pid);
    expect(sup.a!.status().restarts).toBe(0);
  });

  it('refuses a configuration bird -p rejects and keeps the running one', async () => {
    const pid = sup.a!.status().pid;
    const r = await sup.a!.apply({
      config: 'protocol nonsense {',
      secrets: new Map(),
      peers: [],
      advertised: { 4: [], 6: [] },
      warnings: [],
    });
    expect(r.ok).toBe(false);
    expect(r.error).toMatch(/bird -p refused the rendered configuration: .*syntax error/);
    expect(sup.a!.status()).toMatchObject({ running: true, pid });
  });

  it('restarts a killed BIRD; the peer keeps the route meanwhile (graceful restart)', async () => {
    const pid = sup.a!.status().pid!;
    process.kill(pid, 'SIGKILL');
    await until('BIRD to be gone', () => sup.a!.status().pid !== pid);
    // The peer holds a's routes as stale during the restart time instead of withdrawing them.
    expect(birdRoutes('b')).toContain('10.244.1.0/26');
    await until('a restarted BIRD', () => sup.a!.status().running && sup.a!.status().pid !== pid);
    expect(sup.a!.status().restarts).toBe(1);
    await until('the session back', () => sup.a!.status().established === 1);
    expect(birdRoutes('b')).toContain('10.244.1.0/26');
  });

  it('node status says clearly when BIRD is not running', async () => {
    await sup.b!.stop();
    const r = await ctl(['node', 'status', '--bird-run-dir', join(tmp, 'b')]);
    expect(r.code).toBe(1);
    expect(r.err).toMatch(/BIRD is not running on this node \(birdc show protocols: .*\); the agent restarts it/);
    expect(r.err).not.toMatch(/\n\s+at /);
  });
});
