// A private containerd 1.6 (Debian's, with runc) for tests and the CRI bench,
// in this process's network namespace (the throwaway node namespace of
// scripts/in-netns), driven over CRI as a kubelet drives it (test/support/cri.ts).
//
// Everything is its own: root, state, sockets and config file under `dir`, the
// CRI plugin's CNI `bin_dir`/`conf_dir`, a sandbox image imported from a local
// archive (no registry), a cgroup parent removed at the end. It runs in a
// mount namespace of its own, held by a `sleep` process: `ip netns exec` (how
// scripts/in-netns enters the node namespace) mounts a fresh /sys without the
// cgroup hierarchies runc needs, so they are mounted again there, and the pods'
// network namespace files (containerd 1.6 always bind-mounts them under
// /var/run/netns) land on a directory of ours instead of the host's. A process
// that must open those files (the agent, for the shim's requests) is started
// with `enter` in front of its command line.
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, readFileSync, readlinkSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { CriClient } from './cri.js';
import { MOUNT_CGROUPS_SH } from './netns.js';

const CGROUP_HIERARCHIES = ['cpu', 'cpuacct', 'cpuset', 'memory', 'devices', 'freezer', 'blkio', 'pids', 'systemd'];

export interface ContainerdOptions {
  /** Root, state, runc's root, sockets, config and the pods' netns files go under it (removed by close()). */
  dir: string;
  /** The CRI plugin's one CNI bin_dir (netplugin, portmap and loopback must all be in it). */
  cniBinDir: string;
  cniConfDir: string;
  /** An OCI image archive (test/support/busybox-image.ts) imported into the k8s.io namespace... */
  imageArchive: string;
  /** ...under this name, the CRI plugin's sandbox_image. */
  image: string;
  /** containerd's environment, and so the CNI plugins' (go-cni passes it on). */
  env?: Record<string, string>;
}

export interface Containerd {
  socket: string;
  cri: CriClient;
  /** The cgroup parent for pods (LinuxPodSandboxConfig.cgroup_parent); removed by close(). */
  cgroupParent: string;
  /** Where containerd bind-mounts the pods' network namespaces (its /var/run/netns). */
  netnsDir: string;
  /** A command-line prefix that runs a command in containerd's mount namespace. */
  enter: string[];
  /** containerd's log so far. */
  log(): string;
  /** Stops containerd (SIGTERM; the pods and their shims keep running) and starts it again. */
  restart(): Promise<void>;
  /**
   * Stops and removes every sandbox left, stops containerd (and, after a failed test, kills the
   * shims and pod processes it left), removes its cgroups and files. A process started with
   * `enter` (the agent) is the caller's to stop, after this: the sandboxes' DELs may need it.
   */
  close(): Promise<void>;
}

const BASE_PATH = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin';
let instances = 0;

function configToml(o: ContainerdOptions, socket: string): string {
  const cri = 'plugins."io.containerd.grpc.v1.cri"';
  return `version = 2
root = "${join(o.dir, 'root')}"
state = "${join(o.dir, 'state')}"
# Snapshotters and tracing the tests do not use: fewer plugins to load at each start.
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]

[grpc]
  address = "${socket}"
[ttrpc]
  address = "${socket}.ttrpc"
[debug]
  level = "info"
[plugins."io.containerd.internal.v1.opt"]
  path = "${join(o.dir, 'opt')}"
[${cri}]
  sandbox_image = "${o.image}"
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_selinux = false
  # The sandbox's oom_score_adj (-998) is below what this machine lets even root set:
  # never below containerd's own, as in rootless or nested setups.
  restrict_oom_score_adj = true
[${cri}.containerd]
  # native: plain copies, no overlay mounts (the temp dir may be on any filesystem).
  snapshotter = "native"
  default_runtime_name = "runc"
[${cri}.containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
[${cri}.containerd.runtimes.runc.options]
  SystemdCgroup = false
  Root = "${join(o.dir, 'runc')}"
[${cri}.cni]
  bin_dir = "${o.cniBinDir}"
  conf_dir = "${o.cniConfDir}"
  max_conf_num = 1
`;
}

function waitExit(p: ChildProcess): Promise<void> {
  if (p.exitCode !== null || p.signalCode !== null) return Promise.resolve();
  return new Promise((r) => p.once('exit', () => r()));
}

/** Starts the mount-namespace holder: cgroups mounted again, our netns dir on /var/run/netns. */
async function startHolder(netnsDir: string): Promise<ChildProcess> {
  const script = [
    'set -eu',
    MOUNT_CGROUPS_SH,
    'mount --bind "$NETNS_DIR" /var/run/netns',
    'echo ready',
    'exec sleep infinity',
  ].join('\n');
  const p = spawn('unshare', ['-m', '--propagation', 'private', 'sh', '-c', script], {
    env: { PATH: BASE_PATH, NETNS_DIR: netnsDir },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  await new Promise<void>((resolve, reject) => {
    p.stdout!.on('data', (d: Buffer) => {
      out += d;
      if (out.includes('ready')) resolve();
    });
    p.stderr!.on('data', (d: Buffer) => (out += d));
    p.once('exit', (code) => {
      reject(new Error(`the mount namespace for containerd could not be set up (exit ${code}): ${out}`));
    });
  });
  return p;
}

export async function startContainerd(o: ContainerdOptions): Promise<Containerd> {
  mkdirSync(o.dir, { recursive: true });
  const socket = join(o.dir, 'containerd.sock');
  const config = join(o.dir, 'config.toml');
  const netnsDir = join(o.dir, 'netns');
  mkdirSync(netnsDir, { recursive: true });
  writeFileSync(config, configToml(o, socket));
  const cgroupParent = `/netplugin-cri-${process.pid}-${++instances}`;
  const holder = await startHolder(netnsDir);
  const enter = ['nsenter', '-t', String(holder.pid), '-m', '--'];
  let log = '';
  let proc: ChildProcess | undefined;
  const cri = new CriClient(socket);

  const start = async () => {
    const p = spawn(enter[0]!, [...enter.slice(1), 'containerd', '--config', config], {
      env: { PATH: BASE_PATH, ...(o.env ?? {}) },
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    proc = p;
    p.stderr!.on('data', (d: Buffer) => {
      log += d;
      if (log.length > 4 << 20) log = log.slice(-(2 << 20));
    });
    const deadline = Date.now() + 30_000;
    for (;;) {
      if (p.exitCode !== null || p.signalCode !== null) {
        throw new Error(`containerd exited (${p.exitCode ?? p.signalCode}):\n${log.slice(-4000)}`);
      }
      if (existsSync(socket)) {
        try {
          await cri.version();
          return;
        } catch {
          /* the CRI service is not up yet */
        }
      }
      if (Date.now() > deadline) {
        throw new Error(`containerd's CRI did not answer on ${socket} within 30 s:\n${log.slice(-4000)}`);
      }
      await new Promise((r) => setTimeout(r, 50));
    }
  };
  const stop = async () => {
    const p = proc;
    if (!p) return;
    p.kill('SIGTERM');
    const t = setTimeout(() => p.kill('SIGKILL'), 15_000);
    await waitExit(p);
    clearTimeout(t);
  };

  /** Pids of what containerd started and left: its shims (in our mount namespace), the processes in our pod cgroups. */
  const leftovers = (): number[] => {
    const pids = new Set<number>();
    const mnt = readlinkSync(`/proc/${holder.pid}/ns/mnt`);
    for (const e of readdirSync('/proc')) {
      if (!/^\d+$/.test(e)) continue;
      try {
        const shim = readFileSync(`/proc/${e}/comm`, 'utf8').startsWith('containerd-shim');
        if (shim && readlinkSync(`/proc/${e}/ns/mnt`) === mnt) pids.add(Number(e));
      } catch {
        /* gone */
      }
    }
    try {
      const find = ['find', `/sys/fs/cgroup/pids${cgroupParent}`, '-name', 'cgroup.procs', '-exec', 'cat', '{}', '+'];
      const procs = execFileSync(enter[0]!, [...enter.slice(1), ...find], {
        encoding: 'utf8',
        stdio: ['ignore', 'pipe', 'ignore'],
      });
      for (const l of procs.split('\n')) if (/^\d+$/.test(l)) pids.add(Number(l));
    } catch {
      /* no such cgroup: no pod was ever started */
    }
    return [...pids];
  };

  try {
    await start();
    const ctr = ['--address', socket, '-n', 'k8s.io', 'images', 'import', '--snapshotter', 'native', o.imageArchive];
    execFileSync('ctr', ctr, { stdio: ['ignore', 'ignore', 'pipe'] });
  } catch (e) {
    await stop();
    holder.kill('SIGKILL');
    cri.close();
    throw e;
  }

  return {
    socket,
    cri,
    cgroupParent,
    netnsDir,
    enter,
    log: () => log,
    async restart() {
      await stop();
      await start();
    },
    async close() {
      try {
        if (proc && proc.exitCode === null && proc.signalCode === null) {
          for (const s of await cri.listPodSandbox().catch(() => [])) {
            await cri.stopPodSandbox(s.id).catch(() => undefined);
            await cri.removePodSandbox(s.id).catch(() => undefined);
          }
        }
      } finally {
        cri.close();
        await stop();
        // Only after a failed test: what containerd could not stop (pods, their shims).
        for (const pid of leftovers()) {
          try {
            process.kill(pid, 'SIGKILL');
          } catch {
            /* gone */
          }
        }
        const dirs = CGROUP_HIERARCHIES.map((h) => `/sys/fs/cgroup/${h}${cgroupParent}`).join(' ');
        const rmCgroups = `for d in ${dirs}; do
          if [ -d $d ]; then find $d -depth -type d -exec rmdir {} + || exit 1; fi
        done`;
        for (let i = 0; i < 50; i++) {
          try {
            execFileSync(enter[0]!, [...enter.slice(1), 'sh', '-c', rmCgroups], { stdio: 'ignore' });
            break;
          } catch {
            await new Promise((r) => setTimeout(r, 100)); // a killed process leaves its cgroup a moment later
          }
        }
        holder.kill('SIGKILL');
        await waitExit(holder);
        rmSync(o.dir, { recursive: true, force: true });
      }
    },
  };
}

/** iptables rules (every table) that mention one of these ids: what portmap left of a pod. */
export function iptablesRulesFor(ids: string[]): string[] {
  const out: string[] = [];
  for (const cmd of ['iptables-save', 'ip6tables-save']) {
    const text = execFileSync(cmd, { encoding: 'utf8' });
    for (const l of text.split('\n')) if (ids.some((id) => l.includes(id))) out.push(l);
  }
  return out;
}
