// `netpluginctl node diags`: one tar.gz per node for a bug report, as
// `calicoctl node diags` and `cilium sysdump` give: the agent's logs (paths
// given), netplugin's nftables tables, routes, neighbours, the bridge FDB,
// links and addresses, the datastore's view of the node (Node, its workload
// endpoints, IPAM blocks and affinities, ClusterInformation), versions, and
// the agent's /metrics when it answers. Each part that cannot be collected is
// named in errors.txt; the archive is written anyway.
import { execFile } from 'node:child_process';
import { copyFileSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { hostname, release, tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import { DEFAULT_HEALTH_ADDR } from '../observe/health.js';
import type { Datastore } from '../datastore/types.js';
import {
  bool,
  CtlError,
  list,
  noPositional,
  parseCommand,
  printHelp,
  str,
  type CtlCommand,
  type CtlGroup,
  type CtlIO,
} from './io.js';
import { resolvePath } from './install-cni.js';
import { NETPLUGIN_VERSION } from './version.js';
import { NODE_STATUS_HELP } from './node-status.js';

export const NODE_HELP: Record<string, string> = {
  node: `Usage: netpluginctl node diags [--node NAME] [--log FILE...] [--metrics-url URL] [-d DIR]
       netpluginctl node status [--bird-run-dir DIR] [-o json]
`,
  'node status': NODE_STATUS_HELP,
  'node diags': `Usage: netpluginctl node diags [--node NAME] [--log FILE...] [--metrics-url URL] [-d DIR]

Collects what a bug report needs from this node into DIR/netplugin-diags-NODE-TIME.tar.gz (run it
on each node concerned, e.g. with kubectl exec into the agent pod):
  versions.txt                 netpluginctl, kernel, nft, ip, cluster version
  nft.txt                      every nftables table whose name starts with netplugin
  routes.txt, neighbours.txt   ip route / ip neigh (IPv4 and IPv6, all tables)
  fdb.txt, links.txt           bridge fdb; ip -d link and ip addr
  datastore/*.yaml             the Node, its workload endpoints, IPAM blocks and block affinities,
                               ClusterInformation (as the datastore holds them)
  logs/                        the files given with --log (the agent's log, the plugin's log...)
  metrics.txt                  the agent's /metrics (default http://${DEFAULT_HEALTH_ADDR}/metrics)
  errors.txt                   what could not be collected, and why

  --node NAME          the node's name in the datastore (default: this host's name)
  --log FILE           a log file to include (repeatable)
  --metrics-url URL    where the agent serves /metrics
  -d, --dir DIR        where to write the archive (default: the current directory)
`,
};

function run(cmd: string, args: string[]): Promise<string> {
  return new Promise((resolve, reject) => {
    execFile(cmd, args, { maxBuffer: 64 << 20, timeout: 20_000 }, (err, stdout, stderr) => {
      if (err) reject(new Error(`${cmd} ${args.join(' ')}: ${(stderr || err.message).trim()}`));
      else resolve(stdout);
    });
  });
}

export async function cmdNodeDiags(
  ds: Datastore | undefined,
  io: CtlIO,
  args: {
    node?: string | undefined;
    logs: string[];
    metricsUrl?: string | undefined;
    dir?: string | undefined;
    datastoreError?: string | undefined;
  },
): Promise<{ archive: string; errors: string[] }> {
  const node = args.node ?? hostname();
  if (!/^[A-Za-z0-9.-]+$/.test(node)) throw new CtlError(`--node ${JSON.stringify(node)} is not a node name`);
  const stamp = new Date().toISOString().replace(/[-:]/g, '').replace(/\..*$/, '');
  const name = `netplugin-diags-${node}-${stamp}`;
  const work = mkdtempSync(join(tmpdir(), 'netplugin-diags-'));
  const root = join(work, name);
  mkdirSync(join(root, 'datastore'), { recursive: true });
  const errors: string[] = [];
  const put = (file: string, text: string) => writeFileSync(join(root, file), text);
  const section = async (title: string, f: () => Promise<string>) => {
    try {
      return `### ${title}\n${await f()}\n`;
    } catch (e) {
      errors.push(`${title}: ${(e as Error).message}`);
      return `### ${title}\n(failed: ${(e as Error).message})\n`;
    }
  };
  try {
    // Host state: each command on its own, so one missing tool costs only its part.
    const nftTables = async () => {
      const tables = (await run('nft', ['list', 'tables']))
        .split('\n')
        .map((l) => /^table (\S+) (netplugin\S*)$/.exec(l.trim()))
        .filter((m): m is RegExpExecArray => !!m);
      if (!tables.length) return '(no netplugin tables)\n';
      let out = '';
      for (const m of tables)
        out += await section(`nft list table ${m[1]} ${m[2]}`, () => run('nft', ['list', 'table', m[1]!, m[2]!]));
      return out;
    };
    put('nft.txt', await section('nftables', nftTables));
    put(
      'routes.txt',
      (await section('ip -4 route show table all', () => run('ip', ['-4', 'route', 'show', 'table', 'all']))) +
        (await section('ip -6 route show table all', () => run('ip', ['-6', 'route', 'show', 'table', 'all']))) +
        (await section('ip rule', () => run('ip', ['rule', 'show']))),
    );
    put(
      'neighbours.txt',
      (await section('ip -4 neigh', () => run('ip', ['-4', 'neigh', 'show']))) +
        (await section('ip -6 neigh', () => run('ip', ['-6', 'neigh', 'show']))),
    );
    put('fdb.txt', await section('bridge fdb', () => run('bridge', ['fdb', 'show'])));
    put(
      'links.txt',
      (await section('ip -d link', () => run('ip', ['-d', 'link', 'show']))) +
        (await section('ip addr', () => run('ip', ['addr', 'show']))),
    );

    // The datastore's view of this node.
    let clusterVersion = '(unknown)';
    if (ds) {
      // yaml takes tens of ms to load: only this dump pays for it.
      const YAML = await import('yaml');
      const dump = async (file: string, what: string, f: () => Promise<unknown>) => {
        try {
          put(join('datastore', file), YAML.stringify(await f()));
        } catch (e) {
          errors.push(`${what}: ${(e as Error).message}`);
        }
      };
      await dump('node.yaml', `Node ${node}`, () => ds.get('Node', node));
      await dump('workloadendpoints.yaml', 'workload endpoints', async () =>
        (await ds.list('WorkloadEndpoint')).items.filter((w) => w.spec.node === node),
      );
      await dump('blocks.yaml', 'IPAM blocks', async () =>
        (await ds.list('IPAMBlock')).items.filter(
          (b) => b.spec.affinity === `host:${node}` || b.spec.attributes.some((a) => a.secondary?.node === node),
        ),
      );
      await dump('affinities.yaml', 'block affinities', async () =>
        (await ds.list('BlockAffinity')).items.filter((a) => a.spec.node === node),
      );
      await dump('clusterinformation.yaml', 'ClusterInformation', async () => {
        const ci = await ds.get('ClusterInformation', 'default');
        clusterVersion = ci.spec.netpluginVersion ?? clusterVersion;
        return ci;
      });
    } else errors.push(`datastore: ${args.datastoreError ?? 'none configured'}`);

    put(
      'versions.txt',
      [
        `netpluginctl: ${NETPLUGIN_VERSION}`,
        `cluster: ${clusterVersion}`,
        `node: ${node}`,
        `host: ${hostname()}`,
        `kernel: ${release()}`,
        `node.js: ${process.version}`,
        `collected: ${new Date().toISOString()}`,
        '',
      ].join('\n') +
        (await section('nft --version', () => run('nft', ['--version']))) +
        (await section('ip -V', () => run('ip', ['-V']))),
    );

    if (args.logs.length) {
      mkdirSync(join(root, 'logs'));
      const seen = new Set<string>();
      for (const l of args.logs) {
        let b = basename(l);
        while (seen.has(b)) b = `_${b}`;
        seen.add(b);
        try {
          copyFileSync(resolvePath(io, l), join(root, 'logs', b));
        } catch (e) {
          errors.push(
            `log ${l}: ${(e as NodeJS.ErrnoException).code === 'ENOENT' ? 'no such file' : (e as Error).message}`,
          );
        }
      }
    }

    const metricsUrl = args.metricsUrl ?? `http://${DEFAULT_HEALTH_ADDR}/metrics`;
    try {
      const res = await fetch(metricsUrl, { signal: AbortSignal.timeout(5000) });
      if (!res.ok) throw new Error(`HTTP ${res.status}`);
      put('metrics.txt', await res.text());
    } catch (e) {
      errors.push(`metrics ${metricsUrl}: ${(e as Error).message} (is the agent running? pass --metrics-url)`);
    }

    put('errors.txt', errors.length ? errors.join('\n') + '\n' : '(none)\n');
    const dir = resolvePath(io, args.dir ?? '.');
    const archive = join(dir, `${name}.tar.gz`);
    await run('tar', ['-czf', archive, '-C', work, name]);
    return { archive, errors };
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
}

const runNode: CtlCommand = async (rest, io, s) => {
  const sub = rest[0];
  if (!sub || sub === '--help' || sub === '-h') return printHelp(io, NODE_HELP.node!);
  // A lazily loaded command (it reads BIRD through birdc).
  if (sub === 'status') return (await import('./node-status.js')).cmdNodeStatus(rest.slice(1), io, s);
  if (sub !== 'diags')
    throw new CtlError(
      `unknown node command ${JSON.stringify(sub)}; use diags or status (to delete a node: netpluginctl delete node ` +
        `NAME)`,
    );
  const p = parseCommand(
    rest.slice(1),
    [
      { name: 'node', type: 'string' },
      { name: 'log', type: 'list' },
      { name: 'metrics-url', type: 'string' },
      { name: 'dir', short: 'd', type: 'string' },
    ],
    'node diags',
    s,
  );
  if (bool(p, 'help')) return printHelp(io, NODE_HELP['node diags']!);
  noPositional(p, 'node diags');
  // Diagnostics are collected even when the datastore is down: that is often why they are wanted.
  let ds: Datastore | undefined;
  let datastoreError: string | undefined;
  try {
    ds = await s.datastore();
  } catch (e) {
    datastoreError = (e as Error).message;
  }
  const r = await cmdNodeDiags(ds, io, {
    node: str(p, 'node'),
    logs: list(p, 'log'),
    metricsUrl: str(p, 'metrics-url'),
    dir: str(p, 'dir'),
    datastoreError,
  });
  io.stdout(`wrote ${r.archive}\n`);
  if (r.errors.length)
    io.stderr(`warning: ${r.errors.length} part(s) could not be collected; see errors.txt in the archive\n`);
  return 0;
};

export const nodeGroup: CtlGroup = { commands: { node: runNode }, help: NODE_HELP };
