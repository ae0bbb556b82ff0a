// calicoctl's IPAM habits beside show/check/release: `ipam configure`
// (IPAMConfig strictAffinity, maxBlocksPerHost, autoAllocateBlocks), `ipam
// split` of a pool into 2^n equal pools, and what `ipam show
// --show-borrowed` / `--show-configuration` print.
import { API_VERSION, type IPAMConfigSpec, type Resource } from '../model/resources.js';
import type { Datastore } from '../datastore/types.js';
import { casRetry, getIfExists } from '../datastore/cas.js';
import { blockAt, formatCidr, formatIP, nthAddress, parseCidr, tryParseCidr } from '../net/cidr.js';
import {
  CtlError,
  DRY_RUN,
  bool,
  dryRun,
  noPositional,
  parseCommand,
  printHelp,
  str,
  table,
  type CtlIO,
  type CtlSession,
} from './io.js';
import { describeRef } from './validate.js';

export const IPAM_ADMIN_HELP = {
  'ipam configure': `Usage: netpluginctl ipam configure [--strictaffinity=true|false] [--max-blocks-per-host=N]
                                [--autoallocateblocks=true|false] [--dry-run]

Changes the cluster's IPAMConfig (created when missing), as calicoctl ipam configure does.
  --strictaffinity=true       a node takes addresses only from its own blocks: no borrowing
                              from other nodes' blocks (needed e.g. on Windows nodes)
  --max-blocks-per-host=N     at most N blocks per node and family (0: no limit)
  --autoallocateblocks=false  nodes claim no new blocks
`,
  'ipam split': `Usage: netpluginctl ipam split NUMBER (--cidr CIDR | --name POOL) [--dry-run]

Splits an IP pool into NUMBER (a power of 2) equal pools named POOL-0, POOL-1, ... with the
same settings; the pool itself is deleted in the same transaction. Existing blocks and their
allocations stay as they are (each child holds whole blocks, so a child's prefix cannot be
longer than the block size). As with calicoctl, nothing may allocate from the pool meanwhile:
the pool must be disabled (spec.disabled: true) or the datastore locked
('netpluginctl datastore migrate lock'; unlock afterwards).

Example:
  netpluginctl patch ippool big -p '{"spec":{"disabled":true}}'
  netpluginctl ipam split 4 --name big
`,
} satisfies Record<string, string>;

function boolArg(name: string, v: string | undefined): boolean | undefined {
  if (v === undefined) return undefined;
  if (v === 'true' || v === 'false') return v === 'true';
  throw new CtlError(`--${name} takes true or false, not ${JSON.stringify(v)}`);
}

export async function cmdIpamConfigure(io: CtlIO, s: CtlSession, rest: string[]): Promise<number> {
  const p = parseCommand(
    rest,
    [
      { name: 'strictaffinity', type: 'string' },
      { name: 'max-blocks-per-host', type: 'string' },
      { name: 'autoallocateblocks', type: 'string' },
      DRY_RUN,
    ],
    'ipam configure',
    s,
  );
  if (bool(p, 'help')) return printHelp(io, IPAM_ADMIN_HELP['ipam configure']);
  noPositional(p, 'ipam configure');
  const change: IPAMConfigSpec = {};
  const strict = boolArg('strictaffinity', str(p, 'strictaffinity'));
  if (strict !== undefined) change.strictAffinity = strict;
  const auto = boolArg('autoallocateblocks', str(p, 'autoallocateblocks'));
  if (auto !== undefined) change.autoAllocateBlocks = auto;
  const max = str(p, 'max-blocks-per-host');
  if (max !== undefined) {
    if (!/^\d+$/.test(max) || Number(max) > 2 ** 31 - 1)
      throw new CtlError(`--max-blocks-per-host takes a whole number (0: no limit), not ${JSON.stringify(max)}`);
    change.maxBlocksPerHost = Number(max);
  }
  if (!Object.keys(change).length)
    throw new CtlError('ipam configure needs --strictaffinity, --max-blocks-per-host or --autoallocateblocks');
  const ds = await s.writable();
  let before: IPAMConfigSpec = {};
  await casRetry(ds, { kind: 'IPAMConfig', name: 'default' }, async (cur) => {
    before = cur?.spec ?? {};
    const spec = { ...before, ...change };
    if (cur && JSON.stringify(spec) === JSON.stringify(cur.spec)) return undefined;
    if (dryRun(p)) return undefined;
    return cur
      ? { ...cur, spec }
      : { apiVersion: API_VERSION, kind: 'IPAMConfig', metadata: { name: 'default' }, spec };
  });
  const label: Record<keyof IPAMConfigSpec, string> = {
    strictAffinity: 'StrictAffinity',
    maxBlocksPerHost: 'MaxBlocksPerHost',
    autoAllocateBlocks: 'AutoAllocateBlocks',
  };
  for (const [k, v] of Object.entries(change) as Array<[keyof IPAMConfigSpec, unknown]>) {
    const was = before[k];
    io.stdout(
      `${was === v ? `${label[k]} is already` : `${dryRun(p) ? 'Would set' : 'Successfully set'} ${label[k]} to:`} ` +
        `${String(v)}${dryRun(p) ? ' (dry run)' : ''}\n`,
    );
  }
  return 0;
}

export async function cmdIpamSplit(io: CtlIO, s: CtlSession, rest: string[]): Promise<number> {
  const p = parseCommand(
    rest,
    [{ name: 'cidr', type: 'string' }, { name: 'name', type: 'string' }, DRY_RUN],
    'ipam split',
    s,
  );
  if (bool(p, 'help')) return printHelp(io, IPAM_ADMIN_HELP['ipam split']);
  const [numText, ...extra] = p.positional;
  if (extra.length) throw new CtlError(`ipam split takes one NUMBER; unexpected ${extra.join(' ')}`);
  if (!numText || !/^\d+$/.test(numText))
    throw new CtlError(
      `ipam split needs the number of pools, a power of 2: e.g. 'netpluginctl ipam split 2 --name POOL'`,
    );
  const n = Number(numText);
  if (n < 2 || (n & (n - 1)) !== 0)
    throw new CtlError(`ipam split ${numText}: the number of pools must be a power of 2 (2, 4, 8...)`);
  const byName = str(p, 'name');
  const byCidr = str(p, 'cidr');
  if (!byName === !byCidr) throw new CtlError('ipam split needs exactly one of --name POOL or --cidr CIDR');
  const ds = await s.writable();
  const pools = (await ds.list('IPPool')).items;
  let pool: Resource<'IPPool'> | undefined;
  if (byName) pool = pools.find((x) => x.metadata.name === byName);
  else {
    const c = tryParseCidr(byCidr!, { strict: false });
    if (!c) throw new CtlError(`--cidr ${JSON.stringify(byCidr)} is not a CIDR`);
    pool = pools.find((x) => x.spec.cidr === formatCidr(c));
  }
  if (!pool)
    throw new CtlError(
      `no IP pool ${byName ? `named ${JSON.stringify(byName)}` : `with CIDR ${byCidr}`}; see 'netpluginctl get ` +
        `ippools'`,
    );
  const cidr = parseCidr(pool.spec.cidr, { strict: false });
  const bits = Math.log2(n);
  const childPrefix = cidr.prefix + bits;
  const blockSize = pool.spec.blockSize ?? (cidr.family === 4 ? 26 : 122);
  if (childPrefix > blockSize) {
    throw new CtlError(
      `${describeRef('IPPool', pool.metadata.name)} (${pool.spec.cidr}, blockSize ${blockSize}) cannot be split in ` +
        `${n}: each part would be a /${childPrefix}, smaller than one block; split it in at most ` +
        `${2 ** (blockSize - cidr.prefix)}`,
    );
  }
  const ci = await getIfExists(ds, 'ClusterInformation', 'default');
  const locked = ci?.spec.datastoreReady === false;
  if (!pool.spec.disabled && !locked) {
    throw new CtlError(
      `${describeRef('IPPool', pool.metadata.name)} is in use for new allocations; disable it first ('netpluginctl ` +
        `patch ippool ${pool.metadata.name} -p '{"spec":{"disabled":true}}'') or lock the datastore ('netpluginctl ` +
        `datastore migrate lock'), then split`,
    );
  }
  const children: Array<Resource<'IPPool'>> = [];
  for (let i = 0; i < n; i++) {
    const c = blockAt(cidr, childPrefix, BigInt(i));
    const name = `${pool.metadata.name}-${i}`;
    if (pools.some((x) => x.metadata.name === name))
      throw new CtlError(
        `an IP pool named ${JSON.stringify(name)} exists already; rename or delete it before splitting`,
      );
    children.push({
      apiVersion: API_VERSION,
      kind: 'IPPool',
      metadata: {
        name,
        ...(pool.metadata.labels ? { labels: pool.metadata.labels } : {}),
        ...(pool.metadata.annotations ? { annotations: pool.metadata.annotations } : {}),
      },
      spec: { ...pool.spec, cidr: formatCidr(c), blockSize },
    });
  }
  if (!dryRun(p)) {
    // One transaction (etcd); on Kubernetes the children are created before the pool goes.
    await ds.txn([
      ...children.map((res) => ({ op: 'create' as const, res })),
      {
        op: 'delete',
        kind: 'IPPool',
        name: pool.metadata.name,
        ...(pool.metadata.resourceVersion ? { revision: pool.metadata.resourceVersion } : {}),
      },
    ]);
  }
  const dry = dryRun(p) ? ' (dry run)' : '';
  for (const c of children) io.stdout(`ippool/${c.metadata.name} created: ${c.spec.cidr}${dry}\n`);
  io.stdout(`ippool/${pool.metadata.name} deleted: split into ${n} pools${dry}\n`);
  if (locked) io.stdout(`the datastore is locked: run 'netpluginctl datastore migrate unlock' when done\n`);
  return 0;
}

/** An address allocated on one node from a block affine to another (calicoctl's "borrowed"). */
export interface BorrowedAddress {
  ip: string;
  borrowingNode: string;
  block: string;
  blockOwner: string;
  handle: string | null;
  allocatedTo: string;
}

export async function borrowedAddresses(ds: Datastore): Promise<BorrowedAddress[]> {
  const out: BorrowedAddress[] = [];
  for (const b of (await ds.list('IPAMBlock')).items) {
    const owner = b.spec.affinity?.startsWith('host:') ? b.spec.affinity.slice(5) : undefined;
    const cidr = tryParseCidr(b.spec.cidr);
    if (!cidr) continue;
    b.spec.allocations.forEach((a, ord) => {
      if (a == null) return;
      const attr = b.spec.attributes[a];
      const node = attr?.secondary?.node;
      if (!node || node === owner) return;
      const who =
        attr?.secondary?.namespace && attr.secondary.pod
          ? `${attr.secondary.namespace}/${attr.secondary.pod}`
          : (attr?.secondary?.type ?? '');
      out.push({
        ip: formatIP(nthAddress(cidr, ord)),
        borrowingNode: node,
        block: b.spec.cidr,
        blockOwner: owner ?? '(none)',
        handle: attr?.handle_id ?? null,
        allocatedTo: who,
      });
    });
  }
  return out.sort((x, y) => x.block.localeCompare(y.block) || x.ip.localeCompare(y.ip, undefined, { numeric: true }));
}

export function borrowedTable(rows: BorrowedAddress[]): string {
  if (!rows.length) return 'no borrowed addresses\n';
  return table(
    ['IP', 'BORROWING-NODE', 'BLOCK', 'BLOCK OWNER', 'HANDLE', 'ALLOCATED-TO'],
    rows.map((r) => [r.ip, r.borrowingNode, r.block, r.blockOwner, r.handle ?? '', r.allocatedTo]),
  );
}

/** The IPAMConfig in effect (defaults when none is stored). */
export async function ipamConfiguration(ds: Datastore): Promise<Required<IPAMConfigSpec>> {
  const c = (await getIfExists(ds, 'IPAMConfig', 'default'))?.spec ?? {};
  return {
    strictAffinity: c.strictAffinity ?? false,
    maxBlocksPerHost: c.maxBlocksPerHost ?? 0,
    autoAllocateBlocks: c.autoAllocateBlocks ?? true,
  };
}

export function configurationTable(c: Required<IPAMConfigSpec>): string {
  return table(
    ['PROPERTY', 'VALUE'],
    [
      ['StrictAffinity', String(c.strictAffinity)],
      ['AutoAllocateBlocks', String(c.autoAllocateBlocks)],
      ['MaxBlocksPerHost', String(c.maxBlocksPerHost)],
    ],
  );
}
