// IPAM audit: what `netpluginctl ipam check` reports and what `ipam release
// --from-report` repairs. Reads the allocator's objects (pools, blocks,
// affinities, handles) with the workload endpoints and nodes, and finds
// leaked addresses (handles whose workload is gone), allocations without a
// handle object, handle objects whose block entries are missing, blocks
// affine to nodes that no longer exist, addresses two live endpoints share,
// and handle objects under legacy names. Every repair is a compare-and-swap
// on the object that was inspected, so a concurrent pod ADD or DEL is never
// overwritten; releases go through the allocator (Ipam).
import { DatastoreError } from '../errors.js';
import type { AllocationAttribute, Resource } from '../model/resources.js';
import type { Datastore, InvalidObject } from '../datastore/types.js';
import { KINDS } from '../datastore/keys.js';
import { parseWorkloadEndpointName } from '../model/names.js';
import { handleName, parseHandleID, sameHandle } from './handle.js';
import { formatIP, nthAddress, tryParseCidr, tryParseIP } from '../net/cidr.js';
import type { AddressLocation } from './allocator.js';
import { formatDuration, settingsFrom } from '../model/kube-controllers-config.js';

/** What the audit reads: the allocator's blocks and handles, the workload endpoints and nodes that own them. */
interface Snapshot {
  blocks: Array<Resource<'IPAMBlock'>>;
  handles: Array<Resource<'IPAMHandle'>>;
  weps: Array<Resource<'WorkloadEndpoint'>>;
  nodes: Array<Resource<'Node'>>;
  /** Malformed objects of every kind, which the lists above skip. */
  invalid: InvalidObject[];
}

async function snapshot(ds: Datastore): Promise<Snapshot> {
  const [blocks, handles, weps, nodes] = await Promise.all([
    ds.list('IPAMBlock'),
    ds.list('IPAMHandle'),
    ds.list('WorkloadEndpoint'),
    ds.list('Node'),
  ]);
  // The other kinds are read only for their malformed objects: the check is where an operator finds them all.
  const rest = await Promise.all(
    KINDS.filter((k) => !['IPAMBlock', 'IPAMHandle', 'WorkloadEndpoint', 'Node'].includes(k)).map((k) => ds.list(k)),
  );
  const invalid = [blocks, handles, weps, nodes, ...rest].flatMap((l) => l.invalid ?? []);
  return { blocks: blocks.items, handles: handles.items, weps: weps.items, nodes: nodes.items, invalid };
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
  return a?.startsWith('host:') ? a.slice(5) : undefined;
}

/** Who holds an address, as `ipam show --ip` and `ipam release --ip` see it. */
interface AddressHolder {
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

/**
 * The allocator's answer for `ipText` (Ipam.locate) with the node (from the
 * allocation's attributes, else the block's affinity) and the workload
 * endpoint whose ipNetworks name the address.
 */
export async function addressHolder(
  ds: Datastore,
  ipam: { locate(ip: string): Promise<AddressLocation> },
  ipText: string,
): Promise<AddressHolder> {
  const [at, weps] = await Promise.all([ipam.locate(ipText), ds.list('WorkloadEndpoint')]);
  const out: AddressHolder = { ip: at.ip, allocated: false, ...(at.pool ? { pool: at.pool } : {}) };
  if (!at.block) return out;
  out.block = at.block;
  if (!at.allocated) return out;
  const holder = at.holder ?? { handle: null, attrs: {} };
  const sec = holder.attrs;
  out.allocated = true;
  out.handle = holder.handle;
  out.attributes = sec;
  const node = sec.node || affinityNode(at.affinity ?? null);
  if (node) out.node = node;
  if (sec.namespace) out.namespace = sec.namespace;
  if (sec.pod) out.pod = sec.pod;
  const wep = weps.items.find((w) => w.spec.ipNetworks.some((n) => n.split('/')[0] === at.ip));
  if (wep) out.workloadEndpoint = `${wep.metadata.namespace ?? 'default'}/${wep.metadata.name}`;
  return out;
}

interface LeakedHandle {
  handle: string;
  ips: string[];
  node?: string;
  namespace?: string;
  pod?: string;
  reason: string;
  /** What netplugin-kube-controllers' IPAM GC does with it (only handles with Kubernetes attributes). */
  gc?: { leakGracePeriod: string; allocatedAgo?: string; afterGracePeriod: boolean } | { never: string };
}
interface UnhandledAllocation {
  ip: string;
  handle: string;
  block: string;
}
interface HandleMissingEntries {
  handle: string;
  /** block cidr -> count the handle records but the block does not hold. */
  missing: Record<string, number>;
  /** Addresses the handle still really holds. */
  held: number;
}
interface OrphanedAffinity {
  block: string;
  node: string;
  allocated: number;
}

/** One address in the ipNetworks of endpoints of different containers: two live pods answer for it. */
interface SharedAddress {
  ip: string;
  endpoints: Array<{ endpoint: string; containerID: string }>;
}
/** A handle object stored under a name other than handleName(its ID): written before handle IDs became case-exact. */
interface LegacyHandleName {
  handle: string;
  name: string;
  want: string;
}

/** An object the datastore holds malformed (skipped by every list and watch until repaired). */
interface InvalidObjectEntry {
  kind: string;
  name: string;
  namespace?: string;
  where: string;
  reason: string;
}

export interface IpamReport {
  version: 1;
  generatedAt: string;
  datastoreType: string;
  summary: {
    allocated: number;
    handles: number;
    workloadEndpoints: number;
    nodes: number;
    leakedAddresses: number;
    problems: number;
  };
  leakedHandles: LeakedHandle[];
  allocationsWithoutHandle: UnhandledAllocation[];
  handlesWithMissingBlockEntries: HandleMissingEntries[];
  orphanedAffinities: OrphanedAffinity[];
  sharedAddresses: SharedAddress[];
  legacyHandleNames: LegacyHandleName[];
  /** Absent in reports written before it existed. */
  invalidObjects: InvalidObjectEntry[];
  notes: string[];
}

/** Container ID of a workload handle (ipam/handle.ts); undefined for other handles (no separator). */
function containerOf(handle: string): string | undefined {
  return parseHandleID(handle)?.containerId;
}

/** What the audit may ask beyond the datastore. */
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

export async function auditIpam(ds: Datastore, opts: CheckOptions = {}): Promise<IpamReport> {
  const s = await snapshot(ds);
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
  // A malformed endpoint may still be a live pod's: its addresses are never reported leaked
  // (a release would hand them to another pod); the endpoint itself is reported below.
  const unreadable = new Set<string>();
  for (const o of s.invalid) {
    if (o.kind !== 'WorkloadEndpoint') continue;
    // etcd: the stored JSON, if it parses; Kubernetes: the pod (datastore/kubernetes.ts podEndpoint).
    const raw = o.raw as { pod?: unknown; spec?: { containerID?: unknown; pod?: unknown } } | undefined;
    if (typeof raw?.spec?.containerID === 'string') byContainer.add(raw.spec.containerID);
    if (typeof raw?.pod === 'string') unreadable.add(raw.pod);
    const pod = typeof raw?.spec?.pod === 'string' ? raw.spec.pod : parseWorkloadEndpointName(o.name)?.workload;
    if (pod) unreadable.add(`${o.namespace ?? 'default'}/${pod}`);
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
      if (!handleObjs.has(key))
        allocationsWithoutHandle.push({ ip: a.ip, handle: a.attr.handle_id, block: b.spec.cidr });
    }
  }

  // IPAM GC's grace period, as netplugin-kube-controllers reads it.
  let grace: number | undefined;
  try {
    grace = settingsFrom((await ds.get('KubeControllersConfiguration', 'default')).spec).settings.leakGracePeriodMs;
  } catch (e) {
    if (!DatastoreError.is(e, 'NotFound')) throw e;
    notes.push(
      'KubeControllersConfiguration default does not exist: netplugin-kube-controllers (IPAM GC) has not run against ' +
        'this datastore',
    );
  }
  const gcOf = (sec: Record<string, string>): LeakedHandle['gc'] => {
    if (!sec.namespace || !sec.pod)
      return { never: 'no Kubernetes attributes (namespace, pod): GC never releases it; release it by hand' };
    if (grace === undefined) return undefined;
    const at = sec.timestamp ? Date.parse(sec.timestamp) : NaN;
    const age = Number.isNaN(at) ? undefined : Math.max(0, Date.now() - at);
    return {
      leakGracePeriod: formatDuration(grace),
      ...(age !== undefined ? { allocatedAgo: formatDuration(Math.floor(age / 1000) * 1000) } : {}),
      afterGracePeriod: age !== undefined && age >= grace,
    };
  };
  const leakedHandles: LeakedHandle[] = [];
  let done = 0;
  for (const [, g] of held) {
    opts.progress?.(++done, held.size);
    const handle = g.attr.handle_id!;
    const sec = g.attr.secondary ?? {};
    const cid = containerOf(handle);
    const gc = gcOf(sec);
    const base = {
      handle,
      ips: g.ips,
      ...(sec.node ? { node: sec.node } : {}),
      ...(sec.namespace ? { namespace: sec.namespace } : {}),
      ...(sec.pod ? { pod: sec.pod } : {}),
      ...(gc ? { gc } : {}),
    };
    if (cid === undefined) {
      // Not a workload handle (tunnel address and the like): owned by its node.
      if (sec.node && nodeNames.size > 0 && !nodeNames.has(sec.node))
        leakedHandles.push({ ...base, reason: `node ${sec.node} no longer exists` });
      continue;
    }
    if (byContainer.has(cid)) continue;
    // A pod recreated under the same name has a new container ID but may still
    // hold these addresses (the endpoint is rewritten in place): only the
    // addresses matter then.
    if (sec.namespace && sec.pod && unreadable.has(`${sec.namespace}/${sec.pod}`)) {
      notes.push(
        `handle ${handle} (${g.ips.join(',')}) belongs to pod ${sec.namespace}/${sec.pod}, whose workload endpoint ` +
          `is malformed: not checked until it is repaired`,
      );
      continue;
    }
    if (sec.namespace && sec.pod) {
      const podIps = byPodIps.get(`${sec.namespace}/${sec.pod}`);
      if (podIps && g.ips.some((ip) => podIps.has(ip))) continue;
      if (!podIps && opts.podExists && (await opts.podExists(sec.namespace, sec.pod))) continue;
      // Without Kubernetes access the pod cannot be looked up: say so rather than claim it is gone.
      const gone = opts.podExists
        ? `pod ${sec.namespace}/${sec.pod} no longer exists`
        : `no workload endpoint for pod ${sec.namespace}/${sec.pod} (the pod was not looked up: no Kubernetes ` +
          `access; set KUBECONFIG)`;
      leakedHandles.push({
        ...base,
        reason: podIps ? `pod ${sec.namespace}/${sec.pod} exists but no longer uses these addresses` : gone,
      });
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
    if (Object.keys(missing).length)
      handlesWithMissingBlockEntries.push({
        handle: h.spec.handleID || h.metadata.name,
        missing,
        held: g?.ips.length ?? 0,
      });
  }

  const orphanedAffinities: OrphanedAffinity[] = [];
  if (nodeNames.size === 0) {
    notes.push(
      'no Node resources exist (node agents not running?), so block affinities were not checked against nodes',
    );
  } else {
    for (const b of s.blocks) {
      const node = affinityNode(b.spec.affinity);
      if (node && !nodeNames.has(node))
        orphanedAffinities.push({
          block: b.spec.cidr,
          node,
          allocated: b.spec.allocations.filter((x) => x != null).length,
        });
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
      if (!list.some((e) => e.containerID === w.spec.containerID))
        list.push({
          endpoint: `${w.metadata.namespace ?? 'default'}/${w.metadata.name}`,
          containerID: w.spec.containerID,
        });
      byIp.set(formatIP(ip), list);
    }
  }
  const sharedAddresses = [...byIp].filter(([, l]) => l.length > 1).map(([ip, endpoints]) => ({ ip, endpoints }));
  const legacyHandleNames = s.handles
    .filter((h) => h.spec.handleID && h.metadata.name !== handleName(h.spec.handleID))
    .map((h) => ({ handle: h.spec.handleID, name: h.metadata.name, want: handleName(h.spec.handleID) }));
  const invalidObjects: InvalidObjectEntry[] = s.invalid.map((o) => ({
    kind: o.kind,
    name: o.name,
    ...(o.namespace !== undefined ? { namespace: o.namespace } : {}),
    where: o.where,
    reason: o.reason,
  }));
  const leakedAddresses = new Set([
    ...leakedHandles.flatMap((l) => l.ips),
    ...allocationsWithoutHandle.map((a) => a.ip),
  ]).size;
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
      problems:
        leakedHandles.length +
        allocationsWithoutHandle.length +
        handlesWithMissingBlockEntries.length +
        orphanedAffinities.length +
        sharedAddresses.length +
        legacyHandleNames.length +
        invalidObjects.length,
    },
    leakedHandles,
    allocationsWithoutHandle,
    handlesWithMissingBlockEntries,
    orphanedAffinities,
    sharedAddresses,
    legacyHandleNames,
    invalidObjects,
    notes,
  };
}

/** Recomputes a handle object's per-block counts from the blocks; deletes it when it holds nothing. CAS-guarded. */
export async function repairHandle(ds: Datastore, handleID: string, heldNow: number): Promise<void> {
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
  throw new Error(`handle ${handleID} kept changing while being repaired; run ipam check again`);
}

/** Deletes an empty block and its affinity (the node that claimed it is gone). */
export async function releaseEmptyBlock(ds: Datastore, cidr: string, node: string): Promise<void> {
  const blocks = await ds.list('IPAMBlock');
  const b = blocks.items.find((x) => x.spec.cidr === cidr);
  if (b) {
    if (b.spec.allocations.some((a) => a != null)) throw new Error(`block ${cidr} has allocations again`);
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
export async function migrateHandleName(ds: Datastore, m: LegacyHandleName): Promise<void> {
  const old = await ds.get('IPAMHandle', m.name);
  if (!sameHandle(old.spec.handleID, m.handle))
    throw new Error(`object ${m.name} now records handle ${old.spec.handleID}; run ipam check again`);
  const created = await ds.create<'IPAMHandle'>({
    apiVersion: old.apiVersion,
    kind: 'IPAMHandle',
    metadata: { name: m.want },
    spec: { ...old.spec },
  });
  try {
    await ds.delete('IPAMHandle', m.name, { revision: old.metadata.resourceVersion });
  } catch (e) {
    await ds.delete('IPAMHandle', m.want, { revision: created.metadata.resourceVersion }).catch(() => undefined);
    throw e;
  }
}
