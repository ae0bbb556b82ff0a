// `ipam show`, `ipam check`, `ipam release`: inspection and repair of IPAM
// state, printed. What they print comes from src/ipam: pool usage and who
// holds an address from the allocator (Ipam.usageReport, Ipam.locate), the
// leak report and its repairs from the audit (src/ipam/audit.ts); every
// release goes through the allocator.
import { renameSync, writeFileSync } from 'node:fs';
import { dirname, basename, join, resolve } from 'node:path';
import { DatastoreError } from '../errors.js';
import type { Datastore } from '../datastore/types.js';
import { tryParseIP } from '../net/cidr.js';
import {
  addressHolder,
  auditIpam,
  createIpam,
  migrateHandleName,
  releaseEmptyBlock,
  repairHandle,
  sameHandle,
  type BlockUsage,
  type CheckOptions,
  type Ipam,
  type IpamReport,
  type PoolUsage,
} from '../ipam/index.js';
import { IPAM_ADMIN_HELP } from './ipam-admin.js';
import {
  bool,
  CtlError,
  suggestFlag,
  DRY_RUN,
  dryRun,
  errorLine,
  list,
  noPositional,
  parseCommand,
  printHelp,
  progressLine,
  readJsonFile,
  str,
  table,
  type CtlCommand,
  type CtlGroup,
  type CtlIO,
  type CtlSession,
} from './io.js';

export type { IpamReport } from '../ipam/index.js';

/** What the CLI needs from the allocator (src/ipam/index.ts Ipam). */
interface IpamReleaser {
  releaseByHandle(handleID: string): Promise<string[]>;
  releaseIPs(ips: string[]): Promise<unknown>;
}

/**
 * The allocator for a command. No host lock: the operator runs these from
 * anywhere; the allocator's compare-and-swap keeps it safe.
 */
async function openIpam(ds: Datastore): Promise<Ipam> {
  return createIpam(ds, { lock: 'none' });
}

function pct(n: bigint, d: bigint): string {
  if (d === 0n) return '0%';
  const bp = (n * 10000n) / d;
  return `${bp / 100n}.${String(bp % 100n).padStart(2, '0')}%`;
}

// ---------------------------------------------------------------- show

/** A pool's row in `ipam show` (and its -o json). */
interface PoolUsageRow {
  name: string;
  cidr: string;
  size: string;
  blocks: number;
  allocated: number;
  free: string;
  used: string;
  blockDetails?: Array<{ cidr: string; affinity: string | null; allocated: number; free: number }>;
}

const blockRow = (b: BlockUsage) => ({
  cidr: b.cidr,
  affinity: b.affinity,
  allocated: b.allocated,
  free: b.size - b.allocated,
});
const poolRow = (p: PoolUsage): PoolUsageRow => ({
  name: p.name,
  cidr: p.cidr,
  size: String(p.size),
  blocks: p.blocks,
  allocated: p.allocated,
  free: String(p.free),
  used: pct(BigInt(p.allocated), p.size),
  blockDetails: p.perBlock.map(blockRow),
});

/** Who holds `ipText`; a malformed address is the user's to fix. */
function whoHas(ds: Datastore, ipam: Pick<Ipam, 'locate'>, ipText: string) {
  if (!tryParseIP(ipText)) throw new CtlError(`--ip ${JSON.stringify(ipText)} is not an IPv4 or IPv6 address`);
  return addressHolder(ds, ipam, ipText);
}

async function cmdIpamShow(
  ds: Datastore,
  io: CtlIO,
  ipam: Pick<Ipam, 'usageReport' | 'locate'>,
  args: { showBlocks?: boolean | undefined; ip?: string | undefined; output?: string | undefined },
): Promise<number> {
  const json = args.output === 'json';
  if (args.output !== undefined && !json && args.output !== 'table')
    throw new CtlError(`-o ${JSON.stringify(args.output)} is not supported for ipam show; use json`);
  if (args.ip) {
    const w = await whoHas(ds, ipam, args.ip);
    if (json) {
      io.stdout(JSON.stringify(w, null, 2) + '\n');
      return 0;
    }
    if (!w.pool && !w.block) io.stdout(`${w.ip} is not in any IP pool\n`);
    else if (!w.allocated)
      io.stdout(
        `${w.ip} is free (pool ${w.pool ?? '(none)'}${w.block ? `, block ${w.block}` : ', no block claimed yet'})\n`,
      );
    else {
      const lines = [
        `${w.ip} is allocated`,
        `  pool:      ${w.pool ?? '(none: its pool was deleted)'}`,
        `  block:     ${w.block}`,
        `  handle:    ${w.handle ?? '(none: reserved)'}`,
        `  node:      ${w.node ?? ''}`,
      ];
      if (w.namespace || w.pod) lines.push(`  pod:       ${w.namespace ?? ''}/${w.pod ?? ''}`);
      lines.push(`  endpoint:  ${w.workloadEndpoint ?? '(no workload endpoint: run netpluginctl ipam check)'}`);
      const extra = Object.entries(w.attributes ?? {}).filter(
        ([k]) => !['node', 'namespace', 'pod', 'handle'].includes(k),
      );
      for (const [k, v] of extra) lines.push(`  ${(k + ':').padEnd(10)} ${v}`);
      io.stdout(lines.join('\n') + '\n');
    }
    return 0;
  }
  const report = await ipam.usageReport();
  const u = { pools: report.pools.map(poolRow), orphanBlocks: report.orphanBlocks.map(blockRow) };
  if (json) {
    const strip = (p: PoolUsageRow) => (args.showBlocks ? p : { ...p, blockDetails: undefined });
    io.stdout(JSON.stringify({ pools: u.pools.map(strip), orphanBlocks: u.orphanBlocks }, null, 2) + '\n');
    return 0;
  }
  if (u.pools.length === 0) io.stdout('no IP pools configured (netpluginctl apply -f pool.yaml)\n');
  else
    io.stdout(
      table(
        ['POOL', 'CIDR', 'SIZE', 'BLOCKS', 'ALLOCATED', 'FREE', 'USED'],
        u.pools.map((p) => [p.name, p.cidr, p.size, String(p.blocks), String(p.allocated), p.free, p.used]),
      ),
    );
  if (args.showBlocks) {
    const rows: string[][] = [];
    for (const p of u.pools)
      for (const b of p.blockDetails ?? [])
        rows.push([b.cidr, p.name, b.affinity ?? '', String(b.allocated), String(b.free)]);
    for (const b of u.orphanBlocks)
      rows.push([b.cidr, '(no pool)', b.affinity ?? '', String(b.allocated), String(b.free)]);
    io.stdout(
      '\n' +
        (rows.length ? table(['BLOCK', 'POOL', 'AFFINITY', 'ALLOCATED', 'FREE'], rows) : 'no blocks claimed yet\n'),
    );
  } else if (u.orphanBlocks.length) {
    const n = u.orphanBlocks.reduce((a, b) => a + b.allocated, 0);
    io.stdout(`\n${u.orphanBlocks.length} block(s) outside every pool hold ${n} address(es); see --show-blocks\n`);
  }
  return 0;
}

// ---------------------------------------------------------------- check

function writeAtomic(path: string, data: string): void {
  const tmp = join(dirname(path), `.${basename(path)}.${process.pid}.tmp`);
  writeFileSync(tmp, data, { mode: 0o600 });
  renameSync(tmp, path);
}

async function cmdIpamCheck(
  ds: Datastore,
  io: CtlIO,
  args: { output?: string | undefined; json?: boolean | undefined },
  opts: CheckOptions = {},
): Promise<number> {
  const bar = progressLine(io, 'ipam check: handles');
  const r = await auditIpam(ds, { ...opts, progress: bar.tick });
  bar.done();
  if (args.output) writeAtomic(resolve(io.cwd ?? process.cwd(), args.output), JSON.stringify(r, null, 2) + '\n');
  // Exit 1 when something was found, so cron jobs and alerts can use the status.
  const status = r.summary.problems === 0 ? 0 : 1;
  if (args.json) {
    io.stdout(JSON.stringify(r, null, 2) + '\n');
    return status;
  }
  const out: string[] = [];
  out.push(
    `checked ${r.summary.allocated} allocated address(es), ${r.summary.handles} handle(s), ` +
      `${r.summary.workloadEndpoints} workload endpoint(s), ${r.summary.nodes} node(s)`,
  );
  for (const n of r.notes) out.push(`note: ${n}`);
  if (r.leakedHandles.length) {
    out.push('', `leaked handles (${r.leakedHandles.length}):`);
    for (const l of r.leakedHandles) {
      out.push(`  ${l.handle}  ${l.ips.join(',')}  ${l.reason}`);
      if (l.gc && 'never' in l.gc) out.push(`      GC: ${l.gc.never}`);
      else if (l.gc) {
        // GC counts the grace period from when it first sees the leak; the allocation's age bounds that from above.
        const age = l.gc.allocatedAgo ? `allocated ${l.gc.allocatedAgo} ago; ` : '';
        out.push(
          `      GC: ${age}` +
            (l.gc.afterGracePeriod
              ? `past leakGracePeriod ${l.gc.leakGracePeriod}: released at GC's next scan once it has seen the leak ` +
                `that long`
              : `released once it has looked leaked for leakGracePeriod ${l.gc.leakGracePeriod}`),
        );
      }
    }
  }
  if (r.allocationsWithoutHandle.length) {
    out.push('', `addresses allocated without a handle object (${r.allocationsWithoutHandle.length}):`);
    for (const a of r.allocationsWithoutHandle) out.push(`  ${a.ip}  handle ${a.handle}  block ${a.block}`);
  }
  if (r.handlesWithMissingBlockEntries.length) {
    out.push('', `handles whose block entries are missing (${r.handlesWithMissingBlockEntries.length}):`);
    for (const h of r.handlesWithMissingBlockEntries)
      out.push(
        `  ${h.handle}  missing ${Object.entries(h.missing)
          .map(([b, n]) => `${n} in ${b}`)
          .join(', ')}`,
      );
  }
  if (r.orphanedAffinities.length) {
    out.push('', `blocks affine to nodes that no longer exist (${r.orphanedAffinities.length}):`);
    for (const o of r.orphanedAffinities) out.push(`  ${o.block}  node ${o.node}  ${o.allocated} allocated`);
  }
  if (r.sharedAddresses.length) {
    out.push(
      '',
      `addresses held by two or more live endpoints (${r.sharedAddresses.length}); delete all but one of the pods:`,
    );
    for (const a of r.sharedAddresses)
      out.push(`  ${a.ip}  ${a.endpoints.map((e) => `${e.endpoint} (container ${e.containerID})`).join(', ')}`);
  }
  if (r.legacyHandleNames.length) {
    out.push(
      '',
      `handle objects under case-folded legacy names (${r.legacyHandleNames.length}); release --from-report migrates ` +
        `them:`,
    );
    for (const h of r.legacyHandleNames) out.push(`  ${h.handle}  stored as ${h.name}, expected ${h.want}`);
  }
  if (r.invalidObjects.length) {
    out.push(
      '',
      `malformed objects, skipped by every list and watch until repaired (${r.invalidObjects.length}); see ` +
        `'netpluginctl describe KIND NAME', then fix or delete them:`,
    );
    for (const o of r.invalidObjects)
      out.push(
        `  ${o.kind} ${o.namespace !== undefined ? `${o.namespace}/` : ''}${o.name}  ${o.where}`,
        `      ${o.reason}`,
      );
  }
  if (r.summary.problems === 0) out.push('no problems found');
  else {
    out.push('', `${r.summary.leakedAddresses} leaked address(es), ${r.summary.problems} problem(s) in total`);
    out.push(
      args.output
        ? `report written to ${args.output}; review it, then run: netpluginctl ipam release --from-report ` +
            `${args.output}`
        : 'write a report with -o FILE, review it, then run: netpluginctl ipam release --from-report FILE',
    );
  }
  io.stdout(out.join('\n') + '\n');
  return status;
}

// ---------------------------------------------------------------- release

function readReport(file: string, io: CtlIO): IpamReport {
  const r = readJsonFile(io, file, 'report') as Partial<IpamReport>;
  if (
    r?.version !== 1 ||
    !Array.isArray(r.leakedHandles) ||
    !Array.isArray(r.allocationsWithoutHandle) ||
    !Array.isArray(r.handlesWithMissingBlockEntries)
  ) {
    throw new CtlError(`${file} is not a report from 'netpluginctl ipam check -o FILE' (version 1)`);
  }
  r.orphanedAffinities ??= [];
  r.sharedAddresses ??= [];
  r.legacyHandleNames ??= [];
  r.invalidObjects ??= [];
  return r as IpamReport;
}

const sameSet = (a: string[], b: string[]) => a.length === b.length && [...a].sort().join() === [...b].sort().join();

async function cmdIpamRelease(
  ds: Datastore,
  io: CtlIO,
  ipam: IpamReleaser & Pick<Ipam, 'locate'>,
  args: { ips: string[]; fromReport?: string | undefined; force?: boolean | undefined; dryRun?: boolean | undefined },
  opts: CheckOptions = {},
): Promise<number> {
  // --dry-run: every check runs against the live state; nothing is released.
  const verb = args.dryRun ? 'would release' : 'released';
  const releaser: IpamReleaser = args.dryRun ? { releaseByHandle: async () => [], releaseIPs: async () => [] } : ipam;
  if (args.fromReport && args.ips.length) throw new CtlError(`give either --ip or --from-report, not both`);
  if (!args.fromReport && !args.ips.length)
    throw new CtlError(`ipam release needs --ip ADDR or --from-report FILE (from 'netpluginctl ipam check -o FILE')`);
  let failed = 0;
  if (args.ips.length) {
    for (const ipText of args.ips) {
      const w = await whoHas(ds, ipam, ipText);
      if (!w.allocated) {
        io.stderr(`error: ${w.ip} is not allocated\n`);
        failed++;
        continue;
      }
      if (w.workloadEndpoint && !args.force) {
        io.stderr(
          `error: ${w.ip} is in use by workload endpoint ${w.workloadEndpoint}; delete the workload instead, or pass ` +
            `--force\n`,
        );
        failed++;
        continue;
      }
      if (w.namespace && w.pod && !args.force && opts.podExists && (await opts.podExists(w.namespace, w.pod))) {
        io.stderr(
          `error: ${w.ip} belongs to pod ${w.namespace}/${w.pod}, which still exists; delete the pod instead, or ` +
            `pass --force\n`,
        );
        failed++;
        continue;
      }
      await releaser.releaseIPs([w.ip]);
      io.stdout(`${verb} ${w.ip}${w.handle ? ` (handle ${w.handle})` : ''}\n`);
    }
    return failed ? 1 : 0;
  }
  const report = readReport(args.fromReport!, io);
  // The report may be stale: a workload may have come back or the address been
  // reused. Only what is still leaked now, in the same way, is released.
  const now = await auditIpam(ds, opts);
  let released = 0;
  let skipped = 0;
  const bar = progressLine(io, 'ipam release: handles');
  let n = 0;
  for (const l of report.leakedHandles) {
    bar.tick(++n, report.leakedHandles.length);
    const cur = now.leakedHandles.find((c) => sameHandle(c.handle, l.handle));
    if (!cur || !sameSet(cur.ips, l.ips)) {
      io.stdout(
        `skipped handle ${l.handle}: no longer leaked as reported ` +
          `(${cur ? `now holds ${cur.ips.join(',')}` : 'its workload exists or it was released'})\n`,
      );
      skipped++;
      continue;
    }
    try {
      const ips = await releaser.releaseByHandle(l.handle);
      // releaseByHandle follows the handle object; addresses whose handle object is gone are freed by address.
      const rest = l.ips.filter((ip) => !ips.includes(ip));
      if (rest.length) await releaser.releaseIPs(rest);
      io.stdout(`${verb} handle ${l.handle}: ${l.ips.join(',')}\n`);
      released++;
    } catch (e) {
      failed++;
      io.stderr(`error: releasing handle ${l.handle}: ${(e as Error).message}\n`);
    }
  }
  bar.done();
  for (const a of report.allocationsWithoutHandle) {
    if (report.leakedHandles.some((l) => l.ips.includes(a.ip))) continue;
    const still = now.allocationsWithoutHandle.find((c) => c.ip === a.ip && sameHandle(c.handle, a.handle));
    if (!still) {
      io.stdout(`skipped ${a.ip}: it has a handle object now or was released\n`);
      skipped++;
      continue;
    }
    try {
      await releaser.releaseIPs([a.ip]);
      io.stdout(`${verb} ${a.ip} (handle ${a.handle} had no handle object)\n`);
      released++;
    } catch (e) {
      failed++;
      io.stderr(`error: releasing ${a.ip}: ${(e as Error).message}\n`);
    }
  }
  for (const h of report.handlesWithMissingBlockEntries) {
    const still = now.handlesWithMissingBlockEntries.find((c) => sameHandle(c.handle, h.handle));
    if (!still) {
      skipped++;
      io.stdout(`skipped handle object ${h.handle}: consistent now\n`);
      continue;
    }
    try {
      await repairHandle(ds, h.handle, still.held);
      io.stdout(`repaired handle object ${h.handle}\n`);
      released++;
    } catch (e) {
      failed++;
      io.stderr(`error: repairing handle object ${h.handle}: ${(e as Error).message}\n`);
    }
  }
  for (const o of report.orphanedAffinities) {
    const still = now.orphanedAffinities.find((c) => c.block === o.block && c.node === o.node);
    if (!still || still.allocated > 0) {
      io.stdout(
        `skipped block ${o.block}: ` +
          (!still
            ? 'its node exists again or the block was released'
            : `still holds ${still.allocated} address(es); release the leaked handles first, then check again`) +
          '\n',
      );
      skipped++;
      continue;
    }
    try {
      if (!args.dryRun) await releaseEmptyBlock(ds, o.block, o.node);
      io.stdout(`${verb} block ${o.block} (node ${o.node} is gone)\n`);
      released++;
    } catch (e) {
      failed++;
      io.stderr(`error: releasing block ${o.block}: ${(e as Error).message}\n`);
    }
  }
  for (const m of report.legacyHandleNames) {
    if (!now.legacyHandleNames.some((c) => sameHandle(c.handle, m.handle) && c.name === m.name)) {
      skipped++;
      io.stdout(`skipped handle object ${m.handle}: already migrated\n`);
      continue;
    }
    try {
      await migrateHandleName(ds, m);
      io.stdout(`migrated handle object ${m.handle}: ${m.name} -> ${m.want}\n`);
      released++;
    } catch (e) {
      failed++;
      io.stderr(`error: migrating handle object ${m.handle}: ${(e as Error).message}\n`);
    }
  }
  io.stdout(`${released} item(s) released or repaired, ${skipped} skipped, ${failed} failed\n`);
  return failed ? 1 : 0;
}

// ---------------------------------------------------------------- commands

const IPAM_HELP = {
  ipam: `Usage: netpluginctl ipam show|check|release|configure|split ...

  ipam show [--show-blocks] [--show-borrowed] [--show-configuration] [--ip ADDR] [-o json|yaml]
  ipam check [-o report.json] [--json]
  ipam release --ip ADDR [--ip ADDR...] [--force] | --from-report FILE [--dry-run]
  ipam configure [--strictaffinity=true|false] [--max-blocks-per-host=N] [--autoallocateblocks=true|false]
  ipam split NUMBER (--name POOL | --cidr CIDR)
`,
  'ipam show': `Usage: netpluginctl ipam show [--show-blocks] [--show-borrowed] [--show-configuration]
                           [--ip ADDR] [-o json|yaml]

  --show-blocks          list every block with its pool, node affinity and counts
  --show-borrowed        addresses a node took from a block affine to another node
  --show-configuration   the IPAMConfig in effect (strict affinity, block limits)
  --ip ADDR              who holds ADDR: handle, node, namespace/pod, workload endpoint
  -o json|yaml           machine-readable output (with the sections asked for)
`,
  'ipam check': `Usage: netpluginctl ipam check [-o FILE] [--json]

Finds leaked addresses: handles whose workload endpoint (etcd) or pod (kubernetes) is gone,
addresses allocated under a handle that has no handle object, handle objects whose block
entries are missing, and blocks affine to nodes that no longer exist. For each leaked handle it
says what netplugin-kube-controllers' IPAM GC does: the allocation's age against leakGracePeriod,
or that GC never releases it (no Kubernetes attributes).

  -o, --output FILE   write the report (JSON) to FILE for 'ipam release --from-report'
  --json              print the report as JSON instead of text

Exit status: 0 when nothing was found, 1 when the check found problems (so a cron job or
an alert can use it), 2 and more for errors running the check.
`,
  'ipam release': `Usage: netpluginctl ipam release --ip ADDR [--ip ADDR...] [--force] [--dry-run]
       netpluginctl ipam release --from-report FILE [--dry-run]

  --dry-run            run every check against the live state and print what would be released

  --ip ADDR            release one address; refused while a workload endpoint uses it or (with
                       Kubernetes access) its pod still exists, unless --force
  --from-report FILE   release what 'ipam check -o FILE' found; each item is checked again first
                       and skipped when it is no longer leaked in the same way
`,
} satisfies Record<string, string>;

/**
 * With Kubernetes access (the kubernetes datastore, or KUBECONFIG beside
 * etcd), `ipam check` and `ipam release` ask the API server whether a pod exists.
 */
async function checkOptions(io: CtlIO, s: CtlSession): Promise<CheckOptions> {
  const conf = s.config();
  // KUBECONFIG reaches the session as kubeconfig_paths (all its files, merged); --config as kubeconfig.
  const kubeAccess = !!(
    conf?.kubernetes?.kubeconfig ||
    conf?.kubernetes?.kubeconfig_paths?.length ||
    conf?.kubernetes?.k8s_api_root
  );
  if ((conf?.datastore_type !== 'kubernetes' && !kubeAccess) || io.openDatastore) return {};
  const client = await s.kube();
  return {
    podExists: async (ns, name) => {
      try {
        await client.getPod(ns, name);
        return true;
      } catch (e) {
        if (DatastoreError.is(e, 'NotFound')) return false;
        throw e;
      }
    },
  };
}

const runIpam: CtlCommand = async (rest, io, s) => {
  const sub = rest[0];
  if (!sub || sub === '--help' || sub === '-h') return printHelp(io, IPAM_HELP.ipam);
  const args = rest.slice(1);
  if (sub === 'show') {
    const p = parseCommand(
      args,
      [
        { name: 'show-blocks', type: 'bool' },
        { name: 'show-borrowed', type: 'bool' },
        { name: 'show-configuration', type: 'bool' },
        { name: 'ip', type: 'string' },
        { name: 'output', short: 'o', type: 'string' },
      ],
      'ipam show',
      s,
    );
    if (bool(p, 'help')) return printHelp(io, IPAM_HELP['ipam show']);
    noPositional(p, 'ipam show');
    const output = str(p, 'output');
    if (output !== undefined && !['json', 'yaml', 'table'].includes(output))
      throw new CtlError(`-o ${JSON.stringify(output)} is not supported for ipam show; use json or yaml`);
    const ds = await s.datastore();
    return ipamShowWithExtras(ds, io, await openIpam(ds), {
      showBlocks: bool(p, 'show-blocks'),
      showBorrowed: bool(p, 'show-borrowed'),
      showConfiguration: bool(p, 'show-configuration'),
      ip: str(p, 'ip'),
      output,
    });
  }
  // The admin commands (ipam-admin.ts) are loaded only by the commands and flags that use them.
  if (sub === 'configure') return (await import('./ipam-admin.js')).cmdIpamConfigure(io, s, args);
  if (sub === 'split') return (await import('./ipam-admin.js')).cmdIpamSplit(io, s, args);
  if (sub === 'check') {
    const p = parseCommand(
      args,
      [
        { name: 'output', short: 'o', type: 'string' },
        { name: 'json', type: 'bool' },
      ],
      'ipam check',
      s,
    );
    if (bool(p, 'help')) return printHelp(io, IPAM_HELP['ipam check']);
    noPositional(p, 'ipam check');
    const out = str(p, 'output');
    if (out === 'json') throw new CtlError(`ipam check -o takes a report file name; use --json to print the report`);
    try {
      return await cmdIpamCheck(
        await s.datastore(),
        io,
        { output: out, json: bool(p, 'json') },
        await checkOptions(io, s),
      );
    } catch (e) {
      // 1 means "problems found"; a check that could not run is 2.
      throw new CtlError(errorLine(e), 2);
    }
  }
  if (sub === 'release') {
    const p = parseCommand(
      args,
      [{ name: 'ip', type: 'list' }, { name: 'from-report', type: 'string' }, { name: 'force', type: 'bool' }, DRY_RUN],
      'ipam release',
      s,
    );
    if (bool(p, 'help')) return printHelp(io, IPAM_HELP['ipam release']);
    noPositional(p, 'ipam release');
    const ds = await s.writable();
    return cmdIpamRelease(
      ds,
      io,
      await openIpam(ds),
      { ips: list(p, 'ip'), fromReport: str(p, 'from-report'), force: bool(p, 'force'), dryRun: dryRun(p) },
      await checkOptions(io, s),
    );
  }
  throw new CtlError(
    `unknown ipam command ` +
      `${JSON.stringify(sub)}${suggestFlag(sub, ['show', 'check', 'release', 'configure', 'split'])}; use show, ` +
      `check, release, configure or split`,
  );
};

/**
 * ipam show plus calicoctl's --show-borrowed and --show-configuration, and
 * -o yaml (the JSON document as YAML). The pool usage itself is cmdIpamShow's.
 */
async function ipamShowWithExtras(
  ds: Datastore,
  io: CtlIO,
  ipam: Pick<Ipam, 'usageReport' | 'locate'>,
  args: {
    showBlocks?: boolean | undefined;
    showBorrowed?: boolean | undefined;
    showConfiguration?: boolean | undefined;
    ip?: string | undefined;
    output?: string | undefined;
  },
): Promise<number> {
  const structured = args.output === 'json' || args.output === 'yaml';
  const extras = Boolean(args.showBorrowed || args.showConfiguration);
  if (args.ip && extras)
    throw new CtlError('--ip shows one address; it cannot be combined with --show-borrowed or --show-configuration');
  // Only --show-borrowed / --show-configuration load the admin module.
  const admin = extras ? await import('./ipam-admin.js') : undefined;
  if (!structured) {
    // calicoctl prints only the section asked for when one of these flags is given.
    if (admin && args.showConfiguration) io.stdout(admin.configurationTable(await admin.ipamConfiguration(ds)));
    if (admin && args.showBorrowed)
      io.stdout((args.showConfiguration ? '\n' : '') + admin.borrowedTable(await admin.borrowedAddresses(ds)));
    if (extras && !args.showBlocks) return 0;
    if (extras) io.stdout('\n');
    return cmdIpamShow(ds, io, ipam, {
      showBlocks: args.showBlocks,
      ip: args.ip,
      output: args.output === 'table' ? undefined : args.output,
    });
  }
  let json = '';
  const code = await cmdIpamShow(ds, { ...io, stdout: (c) => (json += c) }, ipam, {
    showBlocks: args.showBlocks,
    ip: args.ip,
    output: 'json',
  });
  const doc = JSON.parse(json) as Record<string, unknown>;
  if (admin && args.showConfiguration) doc.configuration = await admin.ipamConfiguration(ds);
  if (admin && args.showBorrowed) doc.borrowed = await admin.borrowedAddresses(ds);
  // yaml takes tens of ms to load: only -o yaml pays for it.
  io.stdout(args.output === 'yaml' ? (await import('yaml')).stringify(doc) : JSON.stringify(doc, null, 2) + '\n');
  return code;
}

/** ipam show, check, release, configure, split. */
export const ipamGroup: CtlGroup = { commands: { ipam: runIpam }, help: { ...IPAM_HELP, ...IPAM_ADMIN_HELP } };
