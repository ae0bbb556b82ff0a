// `ipam show`, `ipam check`, `ipam release`: inspection and repair of IPAM
// state. Reads the allocator's objects (pools, blocks, affinities, handles)
// directly; every write goes through the allocator (src/ipam) or a
// compare-and-swap on the object that was inspected, so a concurrent pod ADD
// or DEL is never overwritten.
import { readFileSync, renameSync, writeFileSync } from 'node:fs';
import { dirname, basename, join, resolve } from 'node:path';
import { DatastoreError } from '../errors.js';
import type { AllocationAttribute, Resource } from '../model/resources.js';
import type { Datastore } from '../datastore/types.js';
import { handleName, parseHandleID, sameHandle } from '../ipam/handle.js';
import { cidrSize, containsCidr, containsIP, formatIP, nthAddress, tryParseIP } from '../net/cidr.js';
import { CtlError, progressLine, table, type CtlIO } from './io.js';
import { tryParseCidr } from '../net/cidr.js';
import { formatDuration, settingsFrom } from '../model/kube-controllers-config.js';

/** What the CLI needs from the allocator (src/ipam/index.ts Ipam). */
export interface IpamReleaser {
  releaseByHandle(handleID: string): Promise<string[]>;
  releaseIPs(ips: string[]): Promise<unknown>;
}

interface Snapshot {
  pools: Array<Resource<'IPPool'>>;
  blocks: Array<Resource<'IPAMBlock'>>;
  affinities: Array<Resource<'BlockAffinity'>>;
  handles: Array<Resource<'IPAMHandle'>>;
  weps: Array<Resource<'WorkloadEndpoint'>>;
  nodes: Array<Resource<'Node'>>;
}

async function snapshot(ds: Datastore, withWorkloads: boolean): Promise<Snapshot> {
  const [pools, blocks, affinities, handles, weps, nodes] = await Promise.all([
    ds.list('IPPool'),
    ds.list('IPAMBlock'),
    ds.list('BlockAffinity'),
    ds.list('IPAMHandle'),
    withWorkloads ? ds.list('WorkloadEndpoint') : Promise.resolve({ items: [] as Array<Resource<'WorkloadEndpoint'>> }),
    withWorkloads ? ds.list('Node') : Promise.resolve({ items: [] as Array<Resource<'Node'>> }),
  ]);
  return { pools: pools.items, blocks: blocks.items, affinities: affinities.items, handles: handles.items, weps: weps.items, nodes: nodes.items };
}

interface Allocation {
  ip: string;
  block: string;
  attr: AllocationAttribute;
}

function* allocationsOf(b: Resource<'IPAMBlock'>): Generator<Allocation> {
  const c = tryParseCidr(b.spec.cidr, { strict: false });
  if (!c) return;
  for (let ord = 0; ord < b.spec.allocations.length; ord++) {
    const idx = b.spec.allocations[ord];
    if (idx == null) continue;
    yield { ip: formatIP(nthAddress(c, ord)), block: b.spec.cidr, attr: b.spec.attributes[idx] ?? { handle_id: null } };
  }
}

function affinityNode(a: string | null): string | undefined {
  return a && a.startsWith('host:') ? a.slice(5) : undefined;
}

function pct(n: bigint, d: bigint): string {
  if (d === 0n) return '0%';
  const bp = (n * 10000n) / d;
  return `${bp / 100n}.${String(bp % 100n).padStart(2, '0')}%`;
}

// ---------------------------------------------------------------- show

export interface PoolUsageRow {
  name: string;
  cidr: string;
  size: string;
  blocks: number;
  allocated: number;
  free: string;
  used: string;
  blockDetails?: Array<{ cidr: string; affinity: string | null; allocated: number; free: number }>;
}

export async function ipamUsage(ds: Datastore): Promise<{ pools: PoolUsageRow[]; orphanBlocks: PoolUsageRow['blockDetails'] }> {
  const s = await snapshot(ds, false);
  const parsedBlocks = s.blocks.map((b) => ({ b, c: tryParseCidr(b.spec.cidr, { strict: false }) }));
  const claimed = new Set<Resource<'IPAMBlock'>>();
  const pools: PoolUsageRow[] = [];
  const detail = (b: Resource<'IPAMBlock'>) => {
    const n = b.spec.allocations.filter((a) => a != null).length;
    return { cidr: b.spec.cidr, affinity: b.spec.affinity, allocated: n, free: b.spec.allocations.length - n };
  };
  for (const p of s.pools) {
    const pc = tryParseCidr(p.spec.cidr, { strict: false });
    if (!pc) continue;
    const mine = parsedBlocks.filter(({ c }) => c && containsCidr(pc, c)).map(({ b }) => b);
    mine.forEach((b) => claimed.add(b));
    const size = cidrSize(pc);
    const allocated = mine.reduce((a, b) => a + b.spec.allocations.filter((x) => x != null).length, 0);
    pools.push({
      name: p.metadata.name,
      cidr: p.spec.cidr,
      size: String(size),
      blocks: mine.length,
      allocated,
      free: String(size - BigInt(allocated)),
      used: pct(BigInt(allocated), size),
      blockDetails: mine.map(detail),
    });
  }
  // Blocks of a pool deleted with --force keep their addresses until released.
  const orphanBlocks = s.blocks.filter((b) => !claimed.has(b)).map(detail);
  return { pools, orphanBlocks };
}

export interface WhoHas {
  ip: string;
  pool?: string;
  block?: string;
  allocated: boolean;
  handle?: string | null;
  attributes?: Record<string, string>;
  node?: string;
  namespace?: string;
  pod?: string;
  workloadEndpoint?: string;
}

export async function whoHas(ds: Datastore, ipText: string): Promise<WhoHas> {
  const ip = tryParseIP(ipText);
  if (!ip) throw new CtlError(`--ip ${JSON.stringify(ipText)} is not an IPv4 or IPv6 address`);
  const text = formatIP(ip);
  const s = await snapshot(ds, true);
  const pool = s.pools.find((p) => {
    const c = tryParseCidr(p.spec.cidr, { strict: false });
    return c && containsIP(c, ip);
  });
  const out: WhoHas = { ip: text, allocated: false, ...(pool ? { pool: pool.metadata.name } : {}) };
  for (const b of s.blocks) {
    const c = tryParseCidr(b.spec.cidr, { strict: false });
    if (!c || !containsIP(c, ip)) continue;
    out.block = b.spec.cidr;
    const idx = b.spec.allocations[Number(ip.value - c.base)];
    if (idx == null) return out;
    const attr = b.spec.attributes[idx] ?? { handle_id: null };
    const sec = attr.secondary ?? {};
    out.allocated = true;
    out.handle = attr.handle_id;
    out.attributes = sec;
    if (sec.node) out.node = sec.node;
    else if (affinityNode(b.spec.affinity)) out.node = affinityNode(b.spec.affinity);
    if (sec.namespace) out.namespace = sec.namespace;
    if (sec.pod) out.pod = sec.pod;
    const wep = s.weps.find((w) => w.spec.ipNetworks.some((n) => n.split('/')[0] === text));
    if (wep) out.workloadEndpoint = `${wep.metadata.namespace ?? 'default'}/${wep.metadata.name}`;
    return out;
  }
  return out;
}

export async function cmdIpamShow(ds: Datastore, io: CtlIO, args: { showBlocks?: boolean; ip?: string; output?: string }): Promise<number> {
  const json = args.output === 'json';
  if (args.output !== undefined && !json && args.output !== 'table') throw new CtlError(`-o ${JSON.stringify(args.output)} is not supported for ipam show; use json`);
  if (args.ip) {
    const w = await whoHas(ds, args.ip);
    if (json) {
      io.stdout(JSON.stringify(w, null, 2) + '\n');
      return 0;
    }
    if (!w.pool && !w.block) io.stdout(`${w.ip} is not in any IP pool\n`);
    else if (!w.allocated) io.stdout(`${w.ip} is free (pool ${w.pool ?? '(none)'}${w.block ? `, block ${w.block}` : ', no block claimed yet'})\n`);
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
      const extra = Object.entries(w.attributes ?? {}).filter(([k]) => !['node', 'namespace', 'pod', 'handle'].includes(k));
      for (const [k, v] of extra) lines.push(`  ${(k + ':').padEnd(10)} ${v}`);
      io.stdout(lines.join('\n') + '\n');
    }
    return 0;
  }
  const u = await ipamUsage(ds);
  if (json) {
    const strip = (p: PoolUsageRow) => (args.showBlocks ? p : { ...p, blockDetails: undefined });
    io.stdout(JSON.stringify({ pools: u.pools.map(strip), orphanBlocks: u.orphanBlocks }, null, 2) + '\n');
    return 0;
  }
  if (u.pools.length === 0) io.stdout('no IP pools configured (netpluginctl apply -f pool.yaml)\n');
  else io.stdout(table(['POOL', 'CIDR', 'SIZE', 'BLOCKS', 'ALLOCATED', 'FREE', 'USED'], u.pools.map((p) => [p.name, p.cidr, p.size, String(p.blocks), String(p.allocated), p.free, p.used])));
  if (args.showBlocks) {
    const rows: string[][] = [];
    for (const p of u.pools) for (const b of p.blockDetails ?? []) rows.push([b.cidr, p.name, b.affinity ?? '', String(b.allocated), String(b.free)]);
    for (const b of u.orphanBlocks ?? []) rows.push([b.cidr, '(no pool)', b.affinity ?? '', String(b.allocated), String(b.free)]);
    io.stdout('\n' + (rows.length ? table(['BLOCK', 'POOL', 'AFFINITY', 'ALLOCATED', 'FREE'], rows) : 'no blocks claimed yet\n'));
  } else if (u.orphanBlocks?.length) {
    const n = u.orphanBlocks.reduce((a, b) => a + b.allocated, 0);
    io.stdout(`\n${u.orphanBlocks.length} block(s) outside every pool hold ${n} address(es); see --show-blocks\n`);
  }
  return 0;
}

// ---------------------------------------------------------------- check

export interface LeakedHandle {
  handle: string;
  ips: string[];
  node?: string;
  namespace?: string;
  pod?: string;
  reason: string;
  /** What netplugin-kube-controllers' IPAM GC does with it (only handles with Kubernetes attributes). */
  gc?: { leakGracePeriod: string; allocatedAgo?: string; afterGracePeriod: boolean } | { never: string };
}
export interface UnhandledAllocation {
  ip: string;
  handle: string;
  block: string;
}
export interface HandleMissingEntries {
  handle: string;
  /** block cidr -> count the handle records but the block does not hold. */
  missing: Record<string, number>;
  /** Addresses the handle still really holds. */
  held: number;
}
export interface OrphanedAffinity {
  block: string;
  node: string;
  allocated: number;
}

/** One address in the ipNetworks of endpoints of different containers: two live pods answer for it. */
export interface SharedAddress {
  ip: string;
  endpoints: Array<{ endpoint: string; containerID: string }>;
}
/** A handle object stored under a name other than handleName(its ID): written before handle IDs became case-exact. */
export interface LegacyHandleName {
  handle: string;
  name: string;
  want: string;
}

export interface IpamReport {
  version: 1;
  generatedAt: string;
  datastoreType: string;
  summary: { allocated: number; handles: number; workloadEndpoints: number; nodes: number; leakedAddresses: number; problems: number };
  leakedHandles: LeakedHandle[];
  allocationsWithoutHandle: UnhandledAllocation[];
  handlesWithMissingBlockEntries: HandleMissingEntries[];
  orphanedAffinities: OrphanedAffinity[];
  sharedAddresses: SharedAddress[];
  legacyHandleNames: LegacyHandleName[];
  notes: string[];
}

/** Container ID of a workload handle (ipam/handle.ts); undefined for other handles (no separator). */
function containerOf(handle: string): string | undefined {
  return parseHandleID(handle)?.containerId;
}

export interface CheckOptions {
  /**
   * Kubernetes datastore: whether the pod exists at all. Workload endpoints there
   * are pods carrying the plugin's annotations, so a pod whose ADD is still running
   * (or whose annotation write failed) has no endpoint yet but its addresses are
   * not leaked.
   */
  podExists?: (namespace: string, name: string) => Promise<boolean>;
  /** Called as handles are checked (progress lines on a terminal). */
  progress?: (done: number, total: number) => void;
}

export async function ipamCheck(ds: Datastore, opts: CheckOptions = {}): Promise<IpamReport> {
  const s = await snapshot(ds, true);
  const notes: string[] = [];
  // Container IDs are case-sensitive: `CAFE01` and `cafe01` are two sandboxes.
  const byContainer = new Set(s.weps.map((w) => w.spec.containerID));
  const byPodIps = new Map<string, Set<string>>();
  for (const w of s.weps) {
    const pod = w.spec.pod ?? w.spec.workload;
    if (!pod) continue;
    const k = `${w.metadata.namespace ?? 'default'}/${pod}`;
    const set = byPodIps.get(k) ?? new Set<string>();
    for (const n of w.spec.ipNetworks) {
      const ip = tryParseIP(n.split('/')[0]!);
      if (ip) set.add(formatIP(ip));
    }
    byPodIps.set(k, set);
  }
  const nodeNames = new Set(s.nodes.map((n) => n.metadata.name));
  const handleObjs = new Map(s.handles.map((h) => [h.spec.handleID || h.metadata.name, h]));

  // Group allocations by handle.
  const held = new Map<string, { ips: string[]; perBlock: Map<string, number>; attr: AllocationAttribute }>();
  let allocated = 0;
  const allocationsWithoutHandle: UnhandledAllocation[] = [];
  for (const b of s.blocks) {
    for (const a of allocationsOf(b)) {
      allocated++;
      // handle_id null marks a reserved address (gateway, hand-reserved): never a leak.
      if (a.attr.handle_id == null) continue;
      const key = a.attr.handle_id;
      const g = held.get(key) ?? { ips: [], perBlock: new Map<string, number>(), attr: a.attr };
      g.ips.push(a.ip);
      g.perBlock.set(b.spec.cidr, (g.perBlock.get(b.spec.cidr) ?? 0) + 1);
      held.set(key, g);
      if (!handleObjs.has(key)) allocationsWithoutHandle.push({ ip: a.ip, handle: a.attr.handle_id, block: b.spec.cidr });
    }
  }

  // IPAM GC's grace period, as netplugin-kube-controllers reads it.
  let grace: number | undefined;
  try {
    grace = settingsFrom((await ds.get('KubeControllersConfiguration', 'default')).spec).settings.leakGracePeriodMs;
  } catch (e) {
    if (!DatastoreError.is(e, 'NotFound')) throw e;
    notes.push('KubeControllersConfiguration default does not exist: netplugin-kube-controllers (IPAM GC) has not run against this datastore');
  }
  const gcOf = (sec: Record<string, string>): LeakedHandle['gc'] => {
    if (!sec.namespace || !sec.pod) return { never: 'no Kubernetes attributes (namespace, pod): GC never releases it; release it by hand' };
    if (grace === undefined) return undefined;
    const at = sec.timestamp ? Date.parse(sec.timestamp) : NaN;
    const age = Number.isNaN(at) ? undefined : Math.max(0, Date.now() - at);
    return { leakGracePeriod: formatDuration(grace), ...(age !== undefined ? { allocatedAgo: formatDuration(Math.floor(age / 1000) * 1000) } : {}), afterGracePeriod: age !== undefined && age >= grace };
  };
  const leakedHandles: LeakedHandle[] = [];
  let done = 0;
  for (const [, g] of held) {
    opts.progress?.(++done, held.size);
    const handle = g.attr.handle_id!;
    const sec = g.attr.secondary ?? {};
    const cid = containerOf(handle);
    const gc = gcOf(sec);
    const base = { handle, ips: g.ips, ...(sec.node ? { node: sec.node } : {}), ...(sec.namespace ? { namespace: sec.namespace } : {}), ...(sec.pod ? { pod: sec.pod } : {}), ...(gc ? { gc } : {}) };
    if (cid === undefined) {
      // Not a workload handle (tunnel address and the like): owned by its node.
      if (sec.node && nodeNames.size > 0 && !nodeNames.has(sec.node)) leakedHandles.push({ ...base, reason: `node ${sec.node} no longer exists` });
      continue;
    }
    if (byContainer.has(cid)) continue;
    // A pod recreated under the same name has a new container ID but may still
    // hold these addresses (the endpoint is rewritten in place): only the
    // addresses matter then.
    if (sec.namespace && sec.pod) {
      const podIps = byPodIps.get(`${sec.namespace}/${sec.pod}`);
      if (podIps && g.ips.some((ip) => podIps.has(ip))) continue;
      if (!podIps && opts.podExists && (await opts.podExists(sec.namespace, sec.pod))) continue;
      // Without Kubernetes access the pod cannot be looked up: say so rather than claim it is gone.
      const gone = opts.podExists ? `pod ${sec.namespace}/${sec.pod} no longer exists` : `no workload endpoint for pod ${sec.namespace}/${sec.pod} (the pod was not looked up: no Kubernetes access; set KUBECONFIG)`;
      leakedHandles.push({ ...base, reason: podIps ? `pod ${sec.namespace}/${sec.pod} exists but no longer uses these addresses` : gone });
      continue;
    }
    leakedHandles.push({ ...base, reason: `no workload endpoint has container ID ${cid}` });
  }

  const handlesWithMissingBlockEntries: HandleMissingEntries[] = [];
  for (const h of s.handles) {
    const g = held.get(h.spec.handleID || h.metadata.name);
    const missing: Record<string, number> = {};
    for (const [block, n] of Object.entries(h.spec.block ?? {})) {
      const have = g?.perBlock.get(block) ?? 0;
      if (n > have) missing[block] = n - have;
    }
    if (Object.keys(missing).length) handlesWithMissingBlockEntries.push({ handle: h.spec.handleID || h.metadata.name, missing, held: g?.ips.length ?? 0 });
  }

  const orphanedAffinities: OrphanedAffinity[] = [];
  if (nodeNames.size === 0) {
    notes.push('no Node resources exist (node agents not running?), so block affinities were not checked against nodes');
  } else {
    for (const b of s.blocks) {
      const node = affinityNode(b.spec.affinity);
      if (node && !nodeNames.has(node)) orphanedAffinities.push({ block: b.spec.cidr, node, allocated: b.spec.allocations.filter((x) => x != null).length });
    }
  }
  // Two live endpoints (different containers) holding one address: traffic for
  // it reaches one of them at random. IPAM never hands an address out twice,
  // so this is a broken datastore or a handle mix-up; it is reported, not
  // repaired (which pod keeps it is the operator's call).
  const byIp = new Map<string, SharedAddress['endpoints']>();
  for (const w of s.weps) {
    for (const n of w.spec.ipNetworks) {
      const ip = tryParseIP(n.split('/')[0]!);
      if (!ip) continue;
      const list = byIp.get(formatIP(ip)) ?? [];
      if (!list.some((e) => e.containerID === w.spec.containerID)) list.push({ endpoint: `${w.metadata.namespace ?? 'default'}/${w.metadata.name}`, containerID: w.spec.containerID });
      byIp.set(formatIP(ip), list);
    }
  }
  const sharedAddresses = [...byIp].filter(([, l]) => l.length > 1).map(([ip, endpoints]) => ({ ip, endpoints }));
  const legacyHandleNames = s.handles
    .filter((h) => h.spec.handleID && h.metadata.name !== handleName(h.spec.handleID))
    .map((h) => ({ handle: h.spec.handleID, name: h.metadata.name, want: handleName(h.spec.handleID) }));
  const leakedAddresses = new Set([...leakedHandles.flatMap((l) => l.ips), ...allocationsWithoutHandle.map((a) => a.ip)]).size;
  return {
    version: 1,
    generatedAt: new Date().toISOString(),
    datastoreType: ds.type,
    summary: {
      allocated,
      handles: s.handles.length,
      workloadEndpoints: s.weps.length,
      nodes: s.nodes.length,
      leakedAddresses,
      problems: leakedHandles.length + allocationsWithoutHandle.length + handlesWithMissingBlockEntries.length + orphanedAffinities.length + sharedAddresses.length + legacyHandleNames.length,
    },
    leakedHandles,
    allocationsWithoutHandle,
    handlesWithMissingBlockEntries,
    orphanedAffinities,
    sharedAddresses,
    legacyHandleNames,
    notes,
  };
}

function writeAtomic(path: string, data: string): void {
  const tmp = join(dirname(path), `.${basename(path)}.${process.pid}.tmp`);
  writeFileSync(tmp, data, { mode: 0o600 });
  renameSync(tmp, path);
}

export async function cmdIpamCheck(ds: Datastore, io: CtlIO, args: { output?: string; json?: boolean }, opts: CheckOptions = {}): Promise<number> {
  const bar = progressLine(io, 'ipam check: handles');
  const r = await ipamCheck(ds, { ...opts, progress: bar.tick });
  bar.done();
  if (args.output) writeAtomic(resolve(io.cwd ?? process.cwd(), args.output), JSON.stringify(r, null, 2) + '\n');
  // Exit 1 when something was found, so cron jobs and alerts can use the status.
  const status = r.summary.problems === 0 ? 0 : 1;
  if (args.json) {
    io.stdout(JSON.stringify(r, null, 2) + '\n');
    return status;
  }
  const out: string[] = [];
  out.push(`checked ${r.summary.allocated} allocated address(es), ${r.summary.handles} handle(s), ${r.summary.workloadEndpoints} workload endpoint(s), ${r.summary.nodes} node(s)`);
  for (const n of r.notes) out.push(`note: ${n}`);
  if (r.leakedHandles.length) {
    out.push('', `leaked handles (${r.leakedHandles.length}):`);
    for (const l of r.leakedHandles) {
      out.push(`  ${l.handle}  ${l.ips.join(',')}  ${l.reason}`);
      if (l.gc && 'never' in l.gc) out.push(`      GC: ${l.gc.never}`);
      else if (l.gc) {
        // GC counts the grace period from when it first sees the leak; the allocation's age bounds that from above.
        const age = l.gc.allocatedAgo ? `allocated ${l.gc.allocatedAgo} ago; ` : '';
        out.push(`      GC: ${age}${l.gc.afterGracePeriod ? `past leakGracePeriod ${l.gc.leakGracePeriod}: released at GC's next scan once it has seen the leak that long` : `released once it has looked leaked for leakGracePeriod ${l.gc.leakGracePeriod}`}`);
      }
    }
  }
  if (r.allocationsWithoutHandle.length) {
    out.push('', `addresses allocated without a handle object (${r.allocationsWithoutHandle.length}):`);
    for (const a of r.allocationsWithoutHandle) out.push(`  ${a.ip}  handle ${a.handle}  block ${a.block}`);
  }
  if (r.handlesWithMissingBlockEntries.length) {
    out.push('', `handles whose block entries are missing (${r.handlesWithMissingBlockEntries.length}):`);
    for (const h of r.handlesWithMissingBlockEntries) out.push(`  ${h.handle}  missing ${Object.entries(h.missing).map(([b, n]) => `${n} in ${b}`).join(', ')}`);
  }
  if (r.orphanedAffinities.length) {
    out.push('', `blocks affine to nodes that no longer exist (${r.orphanedAffinities.length}):`);
    for (const o of r.orphanedAffinities) out.push(`  ${o.block}  node ${o.node}  ${o.allocated} allocated`);
  }
  if (r.sharedAddresses.length) {
    out.push('', `addresses held by two or more live endpoints (${r.sharedAddresses.length}); delete all but one of the pods:`);
    for (const a of r.sharedAddresses) out.push(`  ${a.ip}  ${a.endpoints.map((e) => `${e.endpoint} (container ${e.containerID})`).join(', ')}`);
  }
  if (r.legacyHandleNames.length) {
    out.push('', `handle objects under case-folded legacy names (${r.legacyHandleNames.length}); release --from-report migrates them:`);
    for (const h of r.legacyHandleNames) out.push(`  ${h.handle}  stored as ${h.name}, expected ${h.want}`);
  }
  if (r.summary.problems === 0) out.push('no problems found');
  else {
    out.push('', `${r.summary.leakedAddresses} leaked address(es), ${r.summary.problems} problem(s) in total`);
    out.push(args.output ? `report written to ${args.output}; review it, then run: netpluginctl ipam release --from-report ${args.output}` : 'write a report with -o FILE, review it, then run: netpluginctl ipam release --from-report FILE');
  }
  io.stdout(out.join('\n') + '\n');
  return status;
}

// ---------------------------------------------------------------- release

function readReport(file: string, io: CtlIO): IpamReport {
  let raw: unknown;
  try {
    raw = JSON.parse(readFileSync(resolve(io.cwd ?? process.cwd(), file), 'utf8'));
  } catch (e) {
    throw new CtlError(`cannot read report ${file}: ${(e as NodeJS.ErrnoException).code === 'ENOENT' ? 'no such file' : (e as Error).message}`);
  }
  const r = raw as Partial<IpamReport>;
  if (!r || r.version !== 1 || !Array.isArray(r.leakedHandles) || !Array.isArray(r.allocationsWithoutHandle) || !Array.isArray(r.handlesWithMissingBlockEntries)) {
    throw new CtlError(`${file} is not a report from 'netpluginctl ipam check -o FILE' (version 1)`);
  }
  r.orphanedAffinities ??= [];
  r.sharedAddresses ??= [];
  r.legacyHandleNames ??= [];
  return r as IpamReport;
}

const sameSet = (a: string[], b: string[]) => a.length === b.length && [...a].sort().join() === [...b].sort().join();

export async function cmdIpamRelease(
  ds: Datastore,
  io: CtlIO,
  ipam: IpamReleaser,
  args: { ips: string[]; fromReport?: string; force?: boolean; dryRun?: boolean },
  opts: CheckOptions = {},
): Promise<number> {
  // --dry-run: every check runs against the live state; nothing is released.
  const verb = args.dryRun ? 'would release' : 'released';
  if (args.dryRun) {
    ipam = { releaseByHandle: async () => [], releaseIPs: async () => [] };
  }
  if (args.fromReport && args.ips.length) throw new CtlError(`give either --ip or --from-report, not both`);
  if (!args.fromReport && !args.ips.length) throw new CtlError(`ipam release needs --ip ADDR or --from-report FILE (from 'netpluginctl ipam check -o FILE')`);
  let failed = 0;
  if (args.ips.length) {
    for (const ipText of args.ips) {
      const w = await whoHas(ds, ipText);
      if (!w.allocated) {
        io.stderr(`error: ${w.ip} is not allocated\n`);
        failed++;
        continue;
      }
      if (w.workloadEndpoint && !args.force) {
        io.stderr(`error: ${w.ip} is in use by workload endpoint ${w.workloadEndpoint}; delete the workload instead, or pass --force\n`);
        failed++;
        continue;
      }
      if (w.namespace && w.pod && !args.force && opts.podExists && (await opts.podExists(w.namespace, w.pod))) {
        io.stderr(`error: ${w.ip} belongs to pod ${w.namespace}/${w.pod}, which still exists; delete the pod instead, or pass --force\n`);
        failed++;
        continue;
      }
      await ipam.releaseIPs([w.ip]);
      io.stdout(`${verb} ${w.ip}${w.handle ? ` (handle ${w.handle})` : ''}\n`);
    }
    return failed ? 1 : 0;
  }
  const report = readReport(args.fromReport!, io);
  // The report may be stale: a workload may have come back or the address been
  // reused. Only what is still leaked now, in the same way, is released.
  const now = await ipamCheck(ds, opts);
  let released = 0;
  let skipped = 0;
  const bar = progressLine(io, 'ipam release: handles');
  let n = 0;
  for (const l of report.leakedHandles) {
    bar.tick(++n, report.leakedHandles.length);
    const cur = now.leakedHandles.find((c) => sameHandle(c.handle, l.handle));
    if (!cur || !sameSet(cur.ips, l.ips)) {
      io.stdout(`skipped handle ${l.handle}: no longer leaked as reported (${cur ? `now holds ${cur.ips.join(',')}` : 'its workload exists or it was released'})\n`);
      skipped++;
      continue;
    }
    try {
      const ips = await ipam.releaseByHandle(l.handle);
      // releaseByHandle follows the handle object; addresses whose handle object is gone are freed by address.
      const rest = l.ips.filter((ip) => !ips.includes(ip));
      if (rest.length) await ipam.releaseIPs(rest);
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
      await ipam.releaseIPs([a.ip]);
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
        `skipped block ${o.block}: ${!still ? 'its node exists again or the block was released' : `still holds ${still.allocated} address(es); release the leaked handles first, then check again`}\n`,
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

/** Recomputes a handle object's per-block counts from the blocks; deletes it when it holds nothing. CAS-guarded. */
async function repairHandle(ds: Datastore, handleID: string, heldNow: number): Promise<void> {
  for (let attempt = 0; attempt < 5; attempt++) {
    // Found by the exact ID it records: its object name may be a legacy (case-folded) one.
    const h = (await ds.list('IPAMHandle')).items.find((x) => sameHandle(x.spec.handleID, handleID));
    if (!h) return;
    const name = h.metadata.name;
    try {
      if (heldNow === 0) {
        await ds.delete('IPAMHandle', name, { revision: h.metadata.resourceVersion });
        return;
      }
      const counts: Record<string, number> = {};
      const all = await ds.list('IPAMBlock');
      for (const b of all.items) {
        let n = 0;
        for (const a of allocationsOf(b)) if (sameHandle(a.attr.handle_id, handleID)) n++;
        if (n) counts[b.spec.cidr] = n;
      }
      await ds.update({ ...h, spec: { ...h.spec, block: counts } });
      return;
    } catch (e) {
      if (!DatastoreError.is(e, 'Conflict')) throw e;
    }
  }
  throw new CtlError(`handle ${handleID} kept changing while being repaired; run ipam check again`);
}

/** Deletes an empty block and its affinity (the node that claimed it is gone). */
async function releaseEmptyBlock(ds: Datastore, cidr: string, node: string): Promise<void> {
  const blocks = await ds.list('IPAMBlock');
  const b = blocks.items.find((x) => x.spec.cidr === cidr);
  if (b) {
    if (b.spec.allocations.some((a) => a != null)) throw new CtlError(`block ${cidr} has allocations again`);
    await ds.delete('IPAMBlock', b.metadata.name, { revision: b.metadata.resourceVersion });
  }
  const affs = await ds.list('BlockAffinity');
  for (const a of affs.items) {
    if (a.spec.cidr === cidr && a.spec.node === node) {
      try {
        await ds.delete('BlockAffinity', a.metadata.name, { revision: a.metadata.resourceVersion });
      } catch (e) {
        if (!DatastoreError.is(e, 'NotFound')) throw e;
      }
    }
  }
}


/**
 * Moves a handle object from its case-folded legacy name to handleName(ID):
 * create the new object, then delete the old one only if unchanged (CAS), so a
 * concurrent DEL that released it wins and the copy is removed again.
 */
async function migrateHandleName(ds: Datastore, m: LegacyHandleName): Promise<void> {
  const old = await ds.get('IPAMHandle', m.name);
  if (!sameHandle(old.spec.handleID, m.handle)) throw new CtlError(`object ${m.name} now records handle ${old.spec.handleID}; run ipam check again`);
  const created = await ds.create<'IPAMHandle'>({ apiVersion: old.apiVersion, kind: 'IPAMHandle', metadata: { name: m.want }, spec: { ...old.spec } });
  try {
    await ds.delete('IPAMHandle', m.name, { revision: old.metadata.resourceVersion });
  } catch (e) {
    await ds.delete('IPAMHandle', m.want, { revision: created.metadata.resourceVersion }).catch(() => undefined);
    throw e;
  }
}
