#!/usr/bin/env node
// Pod start through containerd 1.6's CRI, as a kubelet starts pods: 20
// RunPodSandbox calls at once, a few rounds, through the agent (the installed
// shim and a running netplugin-node) and per exec (the same shim, no agent: its
// fallback runs the plugin). Reports the CNI ADD as containerd sees it (a
// wrapper in the bin dir stamps each exec of the plugin) and the whole
// RunPodSandbox, p50/p99. A measurement, not a test; the same private
// containerd as test/integration/containerd-cri.test.ts (test/support/containerd.ts).
//
//   npm run bench:cri        (= bash scripts/in-netns node scripts/bench-cri.mjs [--rounds 3] [--pods 20])
//
// The body below is TypeScript, bundled and imported by withBundle (scripts/bench/lib.mjs).
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { startEtcd, summary, waitSocket, withBundle } from './bench/lib.mjs';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const arg = (name, dflt) => {
  const i = process.argv.indexOf(name);
  return i > 0 ? Number(process.argv[i + 1]) : dflt;
};
const ROUNDS = arg('--rounds', 3);
const PODS = arg('--pods', 20);
if (!process.env.NETPLUGIN_HOST_NETNS) {
  console.error('bench-cri: run it in a throwaway node namespace: bash scripts/in-netns node scripts/bench-cri.mjs');
  process.exit(1);
}

const src = (p) => JSON.stringify(join(root, p));
const body = `
import { spawn } from 'node:child_process';
import { chmodSync, copyFileSync, mkdirSync, mkdtempSync, readFileSync, renameSync, rmSync,
  writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomUUID } from 'node:crypto';
import { startContainerd } from ${src('test/support/containerd.ts')};
import { busyboxRootfsTar, ociArchive } from ${src('test/support/busybox-image.ts')};
import { openDatastore } from ${src('src/datastore/index.ts')};
import { API_VERSION } from ${src('src/model/resources.ts')};
import { runCtl } from ${src('src/ctl/index.ts')};

const IMAGE = 'localhost/netplugin-bench/busybox:cri';

export async function run({ endpoint, rounds, pods, waitSocket }) {
  const tmp = mkdtempSync(join(tmpdir(), 'netplugin-bench-cri-'));
  const ds = await openDatastore({ datastore_type: 'etcdv3', etcd_endpoints: endpoint });
  const results = [];
  let version = '';
  try {
    const info = { datastoreReady: true, clusterType: 'bench' };
    await ds.create({ apiVersion: API_VERSION, kind: 'ClusterInformation', metadata: { name: 'default' }, spec: info });
    const pool = { cidr: '10.201.0.0/24', blockSize: 26, natOutgoing: true };
    await ds.create({ apiVersion: API_VERSION, kind: 'IPPool', metadata: { name: 'bench-cri' }, spec: pool });
    const archive = ociArchive(tmp, busyboxRootfsTar(tmp), IMAGE, ['sleep', 'infinity']);
    const bin = join(tmp, 'bin');
    const conf = join(tmp, 'net.d');
    const args = ['install-cni', '--bin-dir', bin, '--conf-dir', conf, '--etcd-endpoints', endpoint];
    args.push('--nodename', 'bench-node', '--log-file-path', '');
    const io = { env: {}, stdout: () => {}, stderr: (s) => process.stderr.write(s), inPod: false };
    const code = await runCtl(args, { ...io, packageDir: ${src('')}, nodePath: process.execPath });
    if (code !== 0) throw new Error('install-cni failed');
    const file = join(conf, '10-netplugin.conflist');
    const conflist = JSON.parse(readFileSync(file, 'utf8'));
    const lock = join(tmp, 'ipam.lock');
    Object.assign(conflist.plugins[0], { host_veth_prefix: 'nbc', ipam_lock_file: lock, log_level: 'warning' });
    writeFileSync(file, JSON.stringify(conflist, null, 2));
    for (const p of ['portmap', 'loopback']) copyFileSync(join('/usr/lib/cni', p), join(bin, p));
    // The stamp: the installed shim moves to bin/real/ (with its fallback file,
    // which it reads beside itself); bin/netplugin logs each exec's start and end.
    mkdirSync(join(bin, 'real'));
    renameSync(join(bin, 'netplugin'), join(bin, 'real/netplugin'));
    renameSync(join(bin, 'netplugin.fallback'), join(bin, 'real/netplugin.fallback'));
    const stamps = join(tmp, 'stamps');
    const wrapper = [
      '#!/bin/sh',
      's=$(date +%s%N)',
      '"' + join(bin, 'real/netplugin') + '"',
      'rc=$?',
      'echo "$CNI_COMMAND $s $(date +%s%N)" >> "' + stamps + '"',
      'exit $rc',
    ];
    writeFileSync(join(bin, 'netplugin'), wrapper.join('\\n') + '\\n');
    chmodSync(join(bin, 'netplugin'), 0o755);

    for (const mode of ['through the agent', 'per exec']) {
      const socket = join(tmp, mode === 'per exec' ? 'no-agent.sock' : 'run/cni.sock');
      process.stderr.write('bench-cri: ' + mode + '\\n');
      const ctd = await startContainerd({
        dir: join(tmp, 'containerd-' + results.length),
        cniBinDir: bin,
        cniConfDir: conf,
        imageArchive: archive,
        image: IMAGE,
        env: { NETPLUGIN_AGENT_SOCKET: socket },
      });
      let agent;
      try {
        version = (await ctd.cri.version()).runtimeVersion;
        if (mode !== 'per exec') {
          const argv = [...ctd.enter, process.execPath, ${src('dist/netplugin-node.mjs')}, '--socket', socket];
          argv.push('--log-level', 'WARNING', '--health-addr', 'off');
          agent = spawn(argv[0], argv.slice(1), { stdio: ['ignore', 'ignore', 'inherit'] });
          await waitSocket(socket, 30_000, () => (agent.exitCode !== null ? 'the agent exited' : undefined));
        }
        const run = [];
        rmSync(stamps, { force: true });
        for (let r = 0; r < rounds; r++) {
          const ids = await Promise.all(Array.from({ length: pods }, async (_, i) => {
            const uid = randomUUID();
            const t0 = process.hrtime.bigint();
            const metadata = { name: 'bench-' + i, namespace: 'bench', uid };
            const linux = { cgroupParent: ctd.cgroupParent + '/pod' + uid };
            const id = await ctd.cri.runPodSandbox({ metadata, hostname: 'bench-' + i, linux });
            run.push(Number(process.hrtime.bigint() - t0) / 1e6);
            return id;
          }));
          await Promise.all(ids.map((id) => ctd.cri.stopPodSandbox(id)));
          await Promise.all(ids.map((id) => ctd.cri.removePodSandbox(id)));
        }
        const lines = readFileSync(stamps, 'utf8').trim().split('\\n').map((l) => l.split(' '));
        const add = lines.filter((f) => f[0] === 'ADD').map((f) => (Number(f[2]) - Number(f[1])) / 1e6);
        results.push({ mode, add, run });
      } finally {
        await ctd.close();
        if (agent && agent.exitCode === null && agent.signalCode === null) {
          const exited = new Promise((r) => agent.once('exit', r));
          agent.kill('SIGTERM');
          const t = setTimeout(() => agent.kill('SIGKILL'), 10_000);
          await exited;
          clearTimeout(t);
        }
      }
    }
  } finally {
    await ds.close().catch(() => undefined);
    rmSync(tmp, { recursive: true, force: true });
  }
  return { version, results };
}
`;

const etcd = await startEtcd();
try {
  const args = { endpoint: etcd.endpoint, rounds: ROUNDS, pods: PODS, waitSocket };
  // test/support/cri.ts loads its .proto beside the module: beside the bundle here.
  const besides = [join(root, 'test/support/cri-api.proto')];
  const { version, results } = await withBundle(root, 'bench-cri', body, ({ run }) => run(args), { besides });
  const ms = (x) => Math.round(x);
  console.log(`containerd ${version} CRI, ${PODS} RunPodSandbox at once x ${ROUNDS} rounds (ms)`);
  console.table(
    Object.fromEntries(
      results.flatMap(({ mode, add, run: rps }) => {
        const a = summary(add);
        const r = summary(rps);
        return [
          [`${mode}: CNI ADD`, { p50: ms(a.p50), p99: ms(a.p99), max: ms(Math.max(...add)), n: a.n }],
          [`${mode}: RunPodSandbox`, { p50: ms(r.p50), p99: ms(r.p99), max: ms(Math.max(...rps)), n: r.n }],
        ];
      }),
    ),
  );
} finally {
  etcd.stop();
}
