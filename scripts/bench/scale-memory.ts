// What one agent pays for the rest of the cluster (bench-scale.mjs --remote
// PODS): a throwaway etcd holding PODS workload endpoints of other nodes (and
// their blocks' worth of nothing else), one agent started with policy type
// k8s; its RSS once it serves, its CPU to start (list and index them), and its
// CPU per remote endpoint event (label changes of 1,000 remote endpoints).
import { execFileSync, spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { openDatastore } from '../../src/datastore/index.js';
import { namespaceToProfile } from '../../src/model/profiles.js';
import type { Resource } from '../../src/model/resources.js';
import { startEtcd } from '../../test/support/etcd.js';
import { mapLimit, memoryMiB, processCpuMs, waitSocket } from './lib.mjs';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '../..');
const NAMESPACES = 50;

function wep(i: number, gen: number): Resource<'WorkloadEndpoint'> {
  const ns = `ns${i % NAMESPACES}`;
  const node = `remote-${Math.floor(i / 30)}`;
  const pod = `pod-${i}`;
  return {
    apiVersion: 'netplugin.org/v3',
    kind: 'WorkloadEndpoint',
    metadata: {
      name: `${node}-k8s-${pod}-eth0`,
      namespace: ns,
      labels: {
        app: `app${i % 200}`,
        tier: `t${i % 7}`,
        gen: String(gen),
        'netplugin.org/namespace': ns,
        'netplugin.org/orchestrator': 'k8s',
        'netplugin.org/serviceaccount': 'default',
      },
    },
    spec: {
      orchestrator: 'k8s',
      node,
      containerID: `c${i}`,
      pod,
      endpoint: 'eth0',
      ipNetworks: [`10.${100 + (i >> 16)}.${(i >> 8) & 255}.${i & 255}/32`],
      profiles: [`kns.${ns}`, `ksa.${ns}.default`],
      interfaceName: `npi${i.toString(16).padStart(11, '0')}`,
    },
  } as Resource<'WorkloadEndpoint'>;
}

let live: { kill(): void } | undefined;
/** For the exit handler (Ctrl-C): the agent and etcd of a run in progress, killed, and its dirs removed. */
export function killMemoryRun(): void {
  live?.kill();
}

export async function memoryRun(remote: number): Promise<{
  remote: number;
  rssMiB: number;
  startCpuMs: number;
  startMs: number;
  cpuPerEventMs: number;
  load: string;
}> {
  const tmp = mkdtempSync(join(tmpdir(), 'netplugin-scale-mem-'));
  const etcd = await startEtcd();
  const ds = await openDatastore({ datastore_type: 'etcdv3', etcd_endpoints: etcd.endpoint });
  let agent: ReturnType<typeof spawn> | undefined;
  live = {
    kill() {
      if (agent && agent.exitCode === null) agent.kill('SIGKILL');
      if (etcd.proc && etcd.proc.exitCode === null) etcd.proc.kill('SIGKILL');
      rmSync(tmp, { recursive: true, force: true });
      rmSync(etcd.dataDir, { recursive: true, force: true });
    },
  };
  try {
    await ds.create({
      apiVersion: 'netplugin.org/v3',
      kind: 'ClusterInformation',
      metadata: { name: 'default' },
      spec: { datastoreReady: true },
    } as Resource<'ClusterInformation'>);
    for (let k = 0; k < NAMESPACES; k++)
      await ds.create(namespaceToProfile({ metadata: { name: `ns${k}`, labels: { team: `t${k % 5}` } } }));
    await mapLimit(
      Array.from({ length: remote }, (_, i) => i),
      64,
      (i) => ds.create(wep(i, 0)),
    );
    const conf = {
      cniVersion: '1.0.0',
      name: 'k8s-pod-network',
      type: 'netplugin',
      nodename: 'local',
      etcd_endpoints: etcd.endpoint,
      policy: { type: 'k8s' },
      ipam: { type: 'netplugin-ipam' },
      endpoint_status_dir: join(tmp, 'status'),
    };
    writeFileSync(join(tmp, 'conf'), JSON.stringify({ cniVersion: '1.0.0', name: conf.name, plugins: [conf] }));
    const t0 = performance.now();
    agent = spawn(
      process.execPath,
      [
        join(ROOT, 'dist/netplugin-node.cjs'),
        '--config',
        join(tmp, 'conf'),
        '--socket',
        join(tmp, 'sock'),
        '--nodename',
        'local',
        '--no-routes',
        '--log-level',
        'WARNING',
      ],
      {
        env: { PATH: process.env['PATH'], NETPLUGIN_POLICY_TABLE: `netplugin-mem${process.pid % 10000}` },
        stdio: 'ignore',
      },
    );
    await waitSocket(join(tmp, 'sock'), 120_000, () => (agent!.exitCode !== null ? 'the agent exited' : undefined));
    // The policy controller's informers sync after the socket is up: wait until its CPU stops moving.
    let last = processCpuMs(agent.pid!);
    for (;;) {
      await new Promise((r) => setTimeout(r, 2000));
      const now = processCpuMs(agent.pid!);
      if (now - last < 20) break;
      last = now;
    }
    const startMs = performance.now() - t0 - 2000;
    const startCpuMs = processCpuMs(agent.pid!);
    const rssMiB = memoryMiB(agent.pid!).rss;
    const changes = Math.min(1000, remote);
    const c0 = processCpuMs(agent.pid!);
    await mapLimit(
      Array.from({ length: changes }, (_, i) => i),
      32,
      async (i) => {
        const cur = await ds.get('WorkloadEndpoint', wep(i, 0).metadata.name, wep(i, 0).metadata.namespace);
        await ds.update({ ...cur, metadata: { ...cur.metadata, labels: { ...cur.metadata.labels, gen: '1' } } });
      },
    );
    let prev = processCpuMs(agent.pid!);
    for (;;) {
      await new Promise((r) => setTimeout(r, 1500));
      const now = processCpuMs(agent.pid!);
      if (now - prev < 20) break;
      prev = now;
    }
    const cpuPerEventMs = changes ? (processCpuMs(agent.pid!) - c0) / changes : 0;
    return {
      remote,
      rssMiB,
      startCpuMs,
      startMs,
      cpuPerEventMs,
      load: execFileSync('cat', ['/proc/loadavg'], { encoding: 'utf8' }).split(' ').slice(0, 3).join(' '),
    };
  } finally {
    if (agent && agent.exitCode === null) agent.kill('SIGKILL');
    try {
      execFileSync('nft', ['delete', 'table', 'inet', `netplugin-mem${process.pid % 10000}`], { stdio: 'ignore' });
    } catch {
      /* not created */
    }
    await ds.close().catch(() => undefined);
    await etcd.stop();
    rmSync(tmp, { recursive: true, force: true });
    live = undefined;
  }
}
