// The block allocator. See docs/ipam.md for the model (pools -> blocks ->
// node affinity -> handles) and the crash-safety invariant:
//
//   for every handle H and block B: handle(H).block[B] >= |ordinals of B held by H|
//
// i.e. a handle never under-counts. ADD raises the handle's count in the same
// transaction (Datastore.txn) as the block CAS that takes the address; DEL frees
// the addresses and deletes the handle in one transaction. On etcd that is all or
// nothing; on Kubernetes the ops run in order (handle before block on ADD, block
// before handle on DEL), so a process killed between them leaves at worst a
// handle whose count is too high, which the next release by that handle clears.
import { DatastoreError } from '../errors.js';
import { IpamError } from './errors.js';
import type { Logger } from '../cni/types.js';
import { API_VERSION, type AllocationAttribute, type BlockAffinitySpec, type IPAMBlockSpec, type IPAMConfigSpec, type Resource } from '../model/resources.js';
import { type Datastore } from '../datastore/types.js';
import { affinityName, blockName } from '../model/names.js';
import { TxnError, type TxnOp } from '../datastore/txn.js';
import { handleName, legacyHandleName, parseHandleID, sameHandle } from './handle.js';
import {
  tryParseCidr,
  containsCidr,
  containsIP,
  cidrSize,
  enclosing,
  formatCidr,
  formatIP,
  ordinalOf,
  parseCidr,
  splitBlocks,
  tryParseIP,
  type Cidr,
  type Family,
  type IP,
} from '../net/cidr.js';
import {
  addressOf,
  allocateNext,
  allocateOrdinal,
  allocatedCount,
  checkBlock,
  freeOrdinals,
  handleAt,
  isEmpty,
  newBlockSpec,
  ordinalsOf,
} from './block.js';
import { checkPoolUse, choosePools, describePools, poolInfo, type PoolInfo, type PoolUse } from './pools.js';
import { DEFAULT_LOCK_PATH, serialize, withHostLock } from './lock.js';

export interface AssignRequest {
  handleID: string;
  node: string;
  /** Stored with each address (namespace, pod, containerID...). `node` and `timestamp` are added. */
  attrs: Record<string, string>;
  assignIPv4: boolean;
  assignIPv6: boolean;
  /** Explicit pools (names or CIDRs), tried in order. */
  ipv4Pools?: string[];
  ipv6Pools?: string[];
  /** Specific addresses (from `IP=` or annotations): at most one per family. When given, exactly these are assigned and assignIPv4/6 are ignored. */
  requestedIPs?: string[];
  /** What the addresses are for (default Workload); pools whose spec.allowedUses leaves it out are never used. */
  use?: PoolUse;
  /** How to name the pool lists and requested addresses in errors (default ipv4_pools / ipv6_pools / IP). */
  fields?: { ipv4Pools?: string; ipv6Pools?: string; requestedIPs?: string };
  /** Writes that commit in the same transaction as the request's last address (the workload endpoint). */
  piggyback?: Piggyback;
}

/**
 * Writes of the caller that go in the transaction that takes the request's
 * last address, so that an ADD costs one datastore write. `ops` is called per
 * attempt with every address the request holds then (`again`: the previous
 * attempt failed on one of these ops, so re-read what they guard); `committed`
 * gets what they stored. Not called at all when the request writes nothing
 * (a retried ADD that already holds its addresses): the caller writes alone.
 */
export interface Piggyback {
  ops(assigned: Assigned[], again: boolean): TxnOp[] | Promise<TxnOp[]>;
  committed(stored: Array<Resource | undefined>): void;
}

/** Extra writes that go in the transaction that frees a handle (the workload endpoint's delete). */
export interface ReleaseOptions {
  /** Guards that fail (the object changed or is gone) drop the op: these writes are best effort. */
  alsoWrite?: TxnOp[];
}

export interface Assigned {
  /** `10.0.0.5/26`: the address with the BLOCK prefix length. */
  address: string;
  ip: string;
  family: Family;
  pool: string;
  block: string;
}

export interface BlockUsage {
  cidr: string;
  affinity: string | null;
  size: number;
  allocated: number;
}

export interface PoolUsage {
  name: string;
  cidr: string;
  family: Family;
  blockSize: number;
  disabled: boolean;
  nodeSelector: string;
  /** Addresses in the pool. */
  size: bigint;
  /** Blocks carved out of the pool so far. */
  blocks: number;
  allocated: number;
  /** size - allocated (unclaimed blocks count as free). */
  free: bigint;
  perBlock: BlockUsage[];
}

/** Where an address stands (Ipam.locate). */
export interface AddressLocation {
  /** The address as formatted canonically. */
  ip: string;
  pool?: string;
  block?: string;
  /** The block's affinity ("host:NODE"), when a block holds the address. */
  affinity?: string | null;
  allocated: boolean;
  /** Who holds it, when its attribute is recorded (handle null: a reserved address). */
  holder?: { handle: string | null; attrs: Record<string, string> };
}

export interface HandleInfo {
  handleID: string;
  blocks: Record<string, number>;
}

export interface Released {
  ip: string;
  handle: string | null;
}

export interface IpamOptions {
  /** Host-wide lock path (default /var/run/netplugin/ipam.lock); null: no host lock. */
  lockPath?: string | null;
  lockTimeoutMs?: number;
  /** CAS attempts per object before giving up (default 10). */
  maxRetries?: number;
  log?: Logger;
  /**
   * Batch concurrent assignments: requests that wait for the same lock and
   * ask for the same thing (node, families, pool lists; no requested IPs) are
   * served by one lock acquisition and one block write per block. Instances
   * with this option on the same datastore and lock path share their queues,
   * so a per-request Ipam (with its own logger) still joins the batch.
   * For a resident process (the node agent); a per-exec process never has
   * more than one request to batch.
   */
  batch?: boolean;
}

/** One assignment waiting in a batch queue. */
interface PendingAssign {
  req: AssignRequest;
  early: Promise<[{ pools: PoolInfo[]; bad: string[] }, IPAMConfigSpec, HandleRes | undefined]>;
  resolve: (v: Assigned[]) => void;
  reject: (e: unknown) => void;
  /** What this request got so far in the batch (per family). */
  done: Assigned[];
  failed?: unknown;
  /** Per-request handle state for raiseHandle. */
  ctx?: Ctx;
}

// Per datastore: batch key -> requests queued for the next lock acquisition.
const batchQueues = new WeakMap<Datastore, Map<string, PendingAssign[]>>();

/** One release waiting in a batch queue. */
interface PendingRelease {
  handleID: string;
  early: Promise<HandleRes | undefined>;
  opts: ReleaseOptions;
  resolve: (v: string[]) => void;
  reject: (e: unknown) => void;
}
// Per datastore: names of the blocks last seen full. A batching Ipam (the
// agent) reads its node's blocks in this set only when no other of its blocks
// has room, so an ADD on a node with many full blocks reads one block, not all.
// A wrong entry costs at most a preference (a freed slot in a block thought
// full is used once the others are full); every write seen here corrects it.
const fullBlocks = new WeakMap<Datastore, Set<string>>();

// Per datastore: lock path -> releases queued for the next lock acquisition.
const releaseQueues = new WeakMap<Datastore, Map<string, PendingRelease[]>>();

const noopLog: Logger = { error() {}, warn() {}, info() {}, debug() {} };

type BlockRes = Resource<'IPAMBlock'>;
type AffRes = Resource<'BlockAffinity'>;
type HandleRes = Resource<'IPAMHandle'>;

const hostAffinity = (node: string) => `host:${node}`;

function isKind(e: unknown, kind: 'NotFound' | 'AlreadyExists' | 'Conflict'): boolean {
  return DatastoreError.is(e, kind);
}


/** Per-assign state: everything read once and reused for the rest of the call. */
interface Ctx {
  req: AssignRequest;
  node: string;
  pools: PoolInfo[];
  badPools: string[];
  config: IPAMConfigSpec;
  affinities: AffRes[];
  handle: HandleRes | undefined;
  /** All blocks, listed lazily the first time a claim or borrow needs them. */
  blocks?: Map<string, BlockRes>;
  nodeLabels?: Record<string, string>;
  /** Set when maxBlocksPerHost stopped a claim (for the final error). */
  capHit?: { family: Family; held: number; max: number };
  /** Set while assigning the request's last family: the caller's writes and what the request got before. */
  piggy?: { p: Piggyback; before: Assigned[] };
}

/**
 * A failure of one family after the other family got its address: that
 * address was released again (dual-stack is all-or-nothing), and the error
 * says so. Only the IPAM's own errors are reworded.
 */
function rolledBack(e: unknown, released: Assigned[]): unknown {
  if (!(e instanceof IpamError)) return e;
  return new IpamError(e.kind, `${e.message} (the ${released.map((d) => `IPv${d.family} address ${d.ip}`).join(' and ')} assigned in the same request was released: dual-stack assignment is all-or-nothing)`);
}

/** A transaction's guard failed: re-read and try again (retry() handles Conflict). */
function asConflict(e: unknown): never {
  if (DatastoreError.is(e) && TxnError.opOf(e) !== undefined && (e.kind === 'Conflict' || e.kind === 'AlreadyExists' || e.kind === 'NotFound')) {
    throw new DatastoreError('Conflict', e.message, { cause: e });
  }
  throw e;
}

/**
 * etcd refuses a Txn of more than 128 ops (--max-txn-ops): a batch writes per
 * request a handle and the caller's endpoint, plus the block.
 */
const MAX_BATCH_TXN = 60;

export class Ipam {
  private readonly lockPath: string | null;
  private readonly lockTimeoutMs: number | undefined;
  private readonly maxRetries: number;
  private readonly log: Logger;
  private readonly batch: boolean;

  constructor(
    private readonly ds: Datastore,
    opts: IpamOptions = {},
  ) {
    this.lockPath = opts.lockPath === undefined ? DEFAULT_LOCK_PATH : opts.lockPath;
    this.lockTimeoutMs = opts.lockTimeoutMs;
    this.maxRetries = Math.max(1, opts.maxRetries ?? 10);
    this.log = opts.log ?? noopLog;
    this.batch = opts.batch === true;
  }

  // ---------------------------------------------------------------- locking

  private exclusive<T>(key: string | undefined, fn: () => Promise<T>): Promise<T> {
    if (this.lockPath) {
      const path = this.lockPath;
      return serialize(`ipam-lock:${path}`, () => withHostLock(path, fn, { timeoutMs: this.lockTimeoutMs }));
    }
    return key ? serialize(`ipam-node:${key}`, fn) : fn();
  }

  /** Run `fn` until it does not hit a CAS conflict, at most maxRetries times. */
  private async retry<T>(what: string, fn: (attempt: number) => Promise<T>): Promise<T> {
    for (let attempt = 0; ; attempt++) {
      try {
        return await fn(attempt);
      } catch (e) {
        if (!isKind(e, 'Conflict')) throw e;
        if (attempt + 1 >= this.maxRetries) {
          throw new IpamError(
            'conflict-retries-exhausted',
            `${what}: gave up after ${this.maxRetries} conflicting concurrent writes; the IPAM data is heavily contended, try again`,
          );
        }
        this.log.debug('ipam: CAS conflict, retrying', { what, attempt });
        // Jittered exponential backoff so racing writers spread out.
        const base = Math.min(2 ** attempt, 64);
        await new Promise((r) => setTimeout(r, base * (0.5 + Math.random())));
      }
    }
  }

  // ---------------------------------------------------------------- reads

  private async loadConfig(): Promise<IPAMConfigSpec> {
    try {
      return (await this.ds.get('IPAMConfig', 'default')).spec;
    } catch (e) {
      if (isKind(e, 'NotFound')) return {};
      throw e;
    }
  }

  private async loadPools(): Promise<{ pools: PoolInfo[]; bad: string[] }> {
    const { items } = await this.ds.list('IPPool');
    const pools: PoolInfo[] = [];
    const bad: string[] = [];
    for (const r of items) {
      try {
        pools.push(poolInfo(r));
      } catch (e) {
        bad.push((e as Error).message);
        this.log.warn('ipam: ignoring invalid IPPool', { pool: r.metadata.name, error: (e as Error).message });
      }
    }
    return { pools, bad };
  }

  /**
   * The handle object of exactly `handleID` (byte-exact, see ipam/handle.ts).
   * A handle written before identities became exact lives under its
   * case-folded name: it is used when it records this very ID, so a DEL after
   * an upgrade still releases what the ADD took.
   */
  private async getHandle(handleID: string): Promise<HandleRes | undefined> {
    const read = async (name: string) => {
      try {
        return await this.ds.get('IPAMHandle', name);
      } catch (e) {
        if (isKind(e, 'NotFound')) return undefined;
        throw e;
      }
    };
    const name = handleName(handleID);
    const h = await read(name);
    if (h && !sameHandle(h.spec.handleID, handleID)) {
      throw new IpamError(
        'handle-mismatch',
        `IPAMHandle ${name} records handle ${JSON.stringify(h.spec.handleID)}, not ${JSON.stringify(handleID)} (a handle written before IDs became case-exact); run \`netpluginctl ipam check --fix\` to migrate it`,
      );
    }
    if (h || legacyHandleName(handleID) === name) return h;
    const old = await read(legacyHandleName(handleID));
    return old && sameHandle(old.spec.handleID, handleID) ? old : undefined;
  }

  private async getBlock(cidrText: string): Promise<BlockRes | undefined> {
    try {
      return await this.ds.get('IPAMBlock', blockName(cidrText));
    } catch (e) {
      if (isKind(e, 'NotFound')) return undefined;
      throw e;
    }
  }

  private async nodeAffinities(node: string): Promise<AffRes[]> {
    const { items } = await this.ds.list('BlockAffinity', { namePrefix: `${node}-ipv` });
    return items.filter((a) => a.spec.node === node);
  }

  private async loadBlocks(ctx: Ctx): Promise<Map<string, BlockRes>> {
    if (!ctx.blocks) {
      const { items } = await this.ds.list('IPAMBlock');
      ctx.blocks = new Map(items.map((b) => [b.metadata.name, b]));
    }
    return ctx.blocks;
  }

  private async labelsOf(ctx: Ctx): Promise<Record<string, string>> {
    if (!ctx.nodeLabels) {
      try {
        ctx.nodeLabels = (await this.ds.get('Node', ctx.node)).metadata.labels ?? {};
      } catch (e) {
        if (!isKind(e, 'NotFound')) throw e;
        this.log.debug('ipam: Node resource not found; matching pool nodeSelectors against no labels', { node: ctx.node });
        ctx.nodeLabels = {};
      }
    }
    return ctx.nodeLabels;
  }

  // ---------------------------------------------------------------- handle

  /**
   * The write that makes the handle count `atLeast` addresses in `cidr`, for
   * the transaction that takes the address: a create guarded by the handle's
   * absence (a repeated ADD shows up here as AlreadyExists), an update guarded
   * by its revision, or nothing when it already counts them.
   */
  private handleOp(ctx: Ctx, cidr: string, atLeast: number): TxnOp | undefined {
    const id = ctx.req.handleID;
    const h = ctx.handle;
    if (!h) return { op: 'create', res: { apiVersion: API_VERSION, kind: 'IPAMHandle', metadata: { name: handleName(id) }, spec: { handleID: id, block: { [cidr]: atLeast } } } };
    if ((h.spec.block[cidr] ?? 0) >= atLeast) return undefined;
    return { op: 'update', res: { ...h, spec: { ...h.spec, block: { ...h.spec.block, [cidr]: atLeast } } } };
  }

  /**
   * Lower the handle's count for `cidr` to `count` (deleting the entry at 0 and
   * the handle when no entry is left). Only ever called after the block no
   * longer holds more than `count` addresses of the handle.
   */
  private async lowerHandle(handleID: string, cidr: string, count: number | ((cur: number) => number), current?: HandleRes): Promise<HandleRes | undefined> {
    let h = current;
    return this.retry(`updating IPAM handle ${handleID}`, async (attempt) => {
      if (attempt > 0 || !h) h = await this.getHandle(handleID);
      if (!h) return undefined;
      const cur = h.spec.block[cidr] ?? 0;
      const next = Math.max(0, typeof count === 'function' ? count(cur) : count);
      // Never raise here, and nothing to do when already there.
      if (next >= cur) return h;
      const block = { ...h.spec.block };
      if (next > 0) block[cidr] = next;
      else delete block[cidr];
      if (Object.keys(block).length === 0) {
        try {
          await this.ds.delete('IPAMHandle', h.metadata.name, { revision: h.metadata.resourceVersion });
        } catch (e) {
          if (!isKind(e, 'NotFound')) throw e;
        }
        return undefined;
      }
      h = await this.ds.update({ ...h, spec: { ...h.spec, block } });
      return h;
    });
  }

  // ---------------------------------------------------------------- block writes

  /**
   * Allocate one address in `block` for the request: one transaction that
   * raises the handle and takes the slot (compare-and-swap on both, plus the
   * caller's piggybacked writes when this is the request's last address).
   * `ordinal` asks for a specific address. Returns undefined when the block
   * turned out full, deleted or gone (the caller moves on).
   */
  private async allocateIn(ctx: Ctx, block: BlockRes, pool: PoolInfo, ordinal?: number): Promise<Assigned | undefined> {
    const handleID = ctx.req.handleID;
    const attr: AllocationAttribute = {
      handle_id: handleID,
      secondary: { ...ctx.req.attrs, node: ctx.node, timestamp: new Date().toISOString(), handle: handleID },
    };
    let cur: BlockRes | undefined = block;
    // Slots the handle held before this call: a new one found on a retry was
    // taken by an earlier attempt whose later ops failed (ordered writes).
    const before = new Set(ordinalsOf(block.spec, handleID));
    let tried = false;
    let extraFailed = false;
    let held = 0;
    const result = await this.retry(`allocating in IPAM block ${block.spec.cidr}`, async (attempt) => {
      if (attempt > 0) [cur, ctx.handle] = await Promise.all([this.getBlock(block.spec.cidr), this.getHandle(handleID)]);
      if (!cur || cur.spec.deleted) return undefined;
      const cidr = checkBlock(cur.spec);
      const mine = ordinalsOf(cur.spec, handleID);
      held = mine.length;
      let ord: number | undefined = mine.find((o) => !before.has(o) && (ordinal === undefined || o === ordinal));
      let spec: IPAMBlockSpec | undefined;
      if (ord === undefined && ordinal !== undefined) {
        const owner = handleAt(cur.spec, ordinal);
        if (cur.spec.allocations[ordinal] != null) {
          const ip = addressOf(cidr, ordinal);
          if (owner && sameHandle(owner.handle_id, handleID)) {
            // Same container asking again (a retried ADD): the address is already its own.
            return { ip, ord: ordinal, cidr };
          }
          const who = owner?.handle_id ? `handle ${owner.handle_id}` : 'reserved, no handle';
          const pod = owner?.secondary?.namespace && owner.secondary.pod ? `, pod ${owner.secondary.namespace}/${owner.secondary.pod}` : '';
          throw new IpamError('address-taken', `${ip} is already assigned (${who}${pod}); choose a free address or release it first`);
        }
        spec = structuredClone(cur.spec);
        allocateOrdinal(spec, ordinal, attr);
        ord = ordinal;
      } else if (ord === undefined) {
        spec = structuredClone(cur.spec);
        ord = allocateNext(spec, attr);
        if (ord === undefined) return undefined;
      }
      const ip = addressOf(cidr, ord);
      // The handle counts the address in the very write that takes it: there
      // is no moment at which the address exists without its handle.
      const hop = this.handleOp(ctx, cur.spec.cidr, spec ? held + 1 : held);
      const ops: TxnOp[] = [...(hop ? [hop] : []), ...(spec ? [{ op: 'update' as const, res: { ...cur, spec } }] : [])];
      const piggy = ctx.piggy;
      const got: Assigned = { address: `${ip}/${cidr.prefix}`, ip, family: cidr.family, pool: pool.name, block: cur.spec.cidr };
      const extra = piggy ? await piggy.p.ops([...piggy.before, got], extraFailed) : [];
      ops.push(...extra);
      if (!ops.length) return { ip, ord, cidr };
      tried = true;
      let out: Array<Resource | undefined>;
      try {
        out = await this.ds.txn(ops);
      } catch (e) {
        const i = TxnError.opOf(e);
        if (i !== undefined && i >= ops.length - extra.length) extraFailed = true;
        asConflict(e);
      }
      if (hop) ctx.handle = out[0] as HandleRes;
      if (spec) {
        const stored = out[hop ? 1 : 0] as BlockRes;
        ctx.blocks?.set(cur.metadata.name, stored);
        this.noteBlock(stored);
      }
      if (piggy && extra.length) piggy.p.committed(out.slice(ops.length - extra.length));
      return { ip, ord, cidr };
    });
    if (!result) {
      // Ordered writes (Kubernetes) may have raised the handle before a block
      // write that lost: put the count back to what the block really holds
      // (harmless if skipped: the next release by this handle fixes it).
      if (tried) ctx.handle = await this.lowerHandle(handleID, block.spec.cidr, held, ctx.handle);
      return undefined;
    }
    return {
      address: `${result.ip}/${result.cidr.prefix}`,
      ip: result.ip,
      family: result.cidr.family,
      pool: pool.name,
      block: block.spec.cidr,
    };
  }

  private async deleteAffinity(aff: AffRes): Promise<void> {
    try {
      await this.ds.delete('BlockAffinity', aff.metadata.name, { revision: aff.metadata.resourceVersion });
    } catch (e) {
      if (isKind(e, 'NotFound') || isKind(e, 'Conflict')) return;
      throw e;
    }
  }

  private async confirmAffinity(aff: AffRes, node: string, cidrText: string): Promise<AffRes> {
    return this.retry(`confirming block affinity ${aff.metadata.name}`, async (attempt) => {
      let cur: AffRes | undefined = aff;
      if (attempt > 0) {
        try {
          cur = await this.ds.get('BlockAffinity', aff.metadata.name);
        } catch (e) {
          if (!isKind(e, 'NotFound')) throw e;
          cur = undefined;
        }
      }
      if (!cur) {
        // Removed by a cleanup that thought the claim was abandoned: the
        // block is ours, so record the affinity again.
        return this.ds.create<'BlockAffinity'>({
          apiVersion: API_VERSION,
          kind: 'BlockAffinity',
          metadata: { name: affinityName(node, cidrText) },
          spec: { state: 'confirmed', node, cidr: cidrText },
        });
      }
      if (cur.spec.state === 'confirmed') return cur;
      return this.ds.update({ ...cur, spec: { ...cur.spec, state: 'confirmed' } });
    });
  }

  private async createPendingAffinity(node: string, cidrText: string): Promise<AffRes> {
    const spec: BlockAffinitySpec = { state: 'pending', node, cidr: cidrText };
    try {
      return await this.ds.create<'BlockAffinity'>({ apiVersion: API_VERSION, kind: 'BlockAffinity', metadata: { name: affinityName(node, cidrText) }, spec });
    } catch (e) {
      if (!isKind(e, 'AlreadyExists')) throw e;
      // Our own leftover (the name contains our node): a claim that crashed.
      return this.ds.get('BlockAffinity', affinityName(node, cidrText));
    }
  }

  /**
   * Two-phase claim of a block that does not exist yet: pending affinity,
   * create the block (AlreadyExists: another node won), confirm. Returns the
   * block, or undefined when another node got it.
   */
  private async claimNewBlock(ctx: Ctx, cidr: Cidr): Promise<BlockRes | undefined> {
    const text = formatCidr(cidr);
    const aff = await this.createPendingAffinity(ctx.node, text);
    let block: BlockRes;
    try {
      block = await this.ds.create<'IPAMBlock'>({
        apiVersion: API_VERSION,
        kind: 'IPAMBlock',
        metadata: { name: blockName(text) },
        spec: newBlockSpec(cidr, text, hostAffinity(ctx.node)),
      });
    } catch (e) {
      if (!isKind(e, 'AlreadyExists')) throw e;
      const other = await this.getBlock(text);
      if (other && other.spec.affinity === hostAffinity(ctx.node)) {
        block = other; // our own earlier claim that crashed before confirming
      } else {
        this.log.debug('ipam: lost the race for a block', { block: text, winner: other?.spec.affinity });
        await this.deleteAffinity(aff);
        if (other) ctx.blocks?.set(other.metadata.name, other);
        return undefined;
      }
    }
    const confirmed = await this.confirmAffinity(aff, ctx.node, text);
    ctx.affinities.push(confirmed);
    ctx.blocks?.set(block.metadata.name, block);
    this.log.info('ipam: claimed block', { block: text, node: ctx.node });
    return block;
  }

  /** Claim an existing block that has no affinity (created for an explicit address, or its node went away). */
  private async claimUnaffineBlock(ctx: Ctx, block: BlockRes): Promise<BlockRes | undefined> {
    const text = block.spec.cidr;
    const aff = await this.createPendingAffinity(ctx.node, text);
    let cur: BlockRes | undefined = block;
    const got = await this.retry(`claiming block ${text}`, async (attempt) => {
      if (attempt > 0) cur = await this.getBlock(text);
      if (!cur || cur.spec.deleted) return undefined;
      if (cur.spec.affinity === hostAffinity(ctx.node)) return cur;
      if (cur.spec.affinity !== null) return undefined;
      return this.ds.update({ ...cur, spec: { ...cur.spec, affinity: hostAffinity(ctx.node) } });
    });
    if (!got) {
      await this.deleteAffinity(aff);
      return undefined;
    }
    ctx.affinities.push(await this.confirmAffinity(aff, ctx.node, text));
    ctx.blocks?.set(got.metadata.name, got);
    return got;
  }

  // ---------------------------------------------------------------- assignment

  private ownAffinities(ctx: Ctx, family: Family): AffRes[] {
    return ctx.affinities.filter((a) => a.spec.node === ctx.node && a.spec.cidr.includes(':') === (family === 6));
  }

  /**
   * The node's blocks inside `pool`, in address order. Repairs what a crash
   * can leave behind: a pending affinity (confirm it when the block is ours,
   * drop it otherwise) and an affinity whose block is gone.
   */
  private async *ownBlocks(ctx: Ctx, pool: PoolInfo): AsyncGenerator<BlockRes> {
    const mine = this.ownAffinities(ctx, pool.cidr.family)
      .map((a) => ({ a, c: tryParseCidr(a.spec.cidr) }))
      .filter((x): x is { a: AffRes; c: Cidr } => !!x.c && containsCidr(pool.cidr, x.c))
      .sort((x, y) => (x.c.base < y.c.base ? -1 : x.c.base > y.c.base ? 1 : 0));
    const live = mine.filter((x) => x.a.spec.state !== 'pendingDeletion');
    // The agent reads the blocks it last saw full only when the others have no room.
    const full = this.batch ? this.fullSet() : undefined;
    const isFull = (x: { a: AffRes }) => !!full?.has(blockName(x.a.spec.cidr));
    for (const group of [live.filter((x) => !isFull(x)), live.filter(isFull)]) {
      if (!group.length) continue;
      // Read them in one round trip: a node usually holds one or two per pool.
      const got = await Promise.all(group.map(({ a }) => ctx.blocks?.get(blockName(a.spec.cidr)) ?? this.getBlock(a.spec.cidr)));
      for (const [i, { a }] of group.entries()) {
        const b = got[i];
        if (!b || b.spec.affinity !== hostAffinity(ctx.node)) {
          this.log.info('ipam: removing stale block affinity', { affinity: a.metadata.name, block: b?.spec.affinity ?? 'missing' });
          await this.deleteAffinity(a);
          ctx.affinities = ctx.affinities.filter((x) => x !== a);
          continue;
        }
        if (a.spec.state === 'pending') {
          const c = await this.confirmAffinity(a, ctx.node, a.spec.cidr);
          ctx.affinities = ctx.affinities.map((x) => (x === a ? c : x));
        }
        this.noteBlock(b);
        yield b;
      }
    }
  }

  private fullSet(): Set<string> {
    let set = fullBlocks.get(this.ds);
    if (!set) fullBlocks.set(this.ds, (set = new Set()));
    return set;
  }

  /** Records whether a block just read or written has room (see fullBlocks). */
  private noteBlock(b: BlockRes): void {
    if (b.spec.allocations.some((x) => x == null) && !b.spec.deleted) this.fullSet().delete(b.metadata.name);
    else this.fullSet().add(b.metadata.name);
  }

  private heldBlocks(ctx: Ctx, family: Family): number {
    return this.ownAffinities(ctx, family).filter((a) => a.spec.state !== 'pendingDeletion').length;
  }

  private canClaim(ctx: Ctx, family: Family): boolean {
    if (ctx.config.autoAllocateBlocks === false) return false;
    const max = ctx.config.maxBlocksPerHost ?? 0;
    if (max > 0) {
      const held = this.heldBlocks(ctx, family);
      if (held >= max) {
        ctx.capHit = { family, held, max };
        return false;
      }
    }
    return true;
  }

  private async fromOwnBlocks(ctx: Ctx, pool: PoolInfo): Promise<Assigned | undefined> {
    for await (const b of this.ownBlocks(ctx, pool)) {
      if (!b.spec.allocations.some((x) => x == null)) continue;
      const got = await this.allocateIn(ctx, b, pool);
      if (got) return got;
    }
    return undefined;
  }

  private async fromNewBlock(ctx: Ctx, pool: PoolInfo): Promise<Assigned | undefined> {
    if (!this.canClaim(ctx, pool.cidr.family)) return undefined;
    const blocks = await this.loadBlocks(ctx);
    for (const c of splitBlocks(pool.cidr, pool.blockSize)) {
      const name = blockName(formatCidr(c));
      const existing = blocks.get(name);
      let b: BlockRes | undefined;
      if (!existing) b = await this.claimNewBlock(ctx, c);
      else if (existing.spec.affinity === null && !existing.spec.deleted && existing.spec.allocations.some((x) => x == null)) {
        b = await this.claimUnaffineBlock(ctx, existing);
      }
      if (!b) continue;
      const got = await this.allocateIn(ctx, b, pool);
      if (got) return got;
      if (!this.canClaim(ctx, pool.cidr.family)) return undefined;
    }
    return undefined;
  }

  /** Take a free address from a block that is not ours (strictAffinity off). */
  private async borrow(ctx: Ctx, pool: PoolInfo): Promise<Assigned | undefined> {
    if (ctx.config.strictAffinity) return undefined;
    const blocks = [...(await this.loadBlocks(ctx)).values()].filter((b) => {
      const c = tryParseCidr(b.spec.cidr);
      return c && containsCidr(pool.cidr, c) && b.spec.affinity !== hostAffinity(ctx.node) && !b.spec.deleted && b.spec.allocations.some((x) => x == null);
    });
    // Start at a random block so borrowers on different nodes spread out
    // instead of all fighting over the first one.
    const start = blocks.length ? Math.floor(Math.random() * blocks.length) : 0;
    for (let i = 0; i < blocks.length; i++) {
      const b = blocks[(start + i) % blocks.length]!;
      const got = await this.allocateIn(ctx, b, pool);
      if (got) {
        this.log.debug('ipam: borrowed an address from another node\'s block', { block: b.spec.cidr, owner: b.spec.affinity, ip: got.ip });
        return got;
      }
    }
    return undefined;
  }

  /**
   * The pools an automatic assignment of `family` may use, in order, and
   * whether the order is automatic (own blocks in any pool come first) or
   * the request's explicit list. Throws when no pool qualifies.
   */
  private async selectPools(ctx: Ctx, family: Family): Promise<{ pools: PoolInfo[]; ownFirst: boolean }> {
    const fields = ctx.req.fields ?? {};
    const explicit = family === 4 ? ctx.req.ipv4Pools : ctx.req.ipv6Pools;
    const field = (family === 4 ? fields.ipv4Pools : fields.ipv6Pools) ?? (family === 4 ? 'ipv4_pools' : 'ipv6_pools');
    const pools = await choosePools({ family, pools: ctx.pools, explicit, field, node: ctx.node, labels: () => this.labelsOf(ctx), badPools: ctx.badPools , use: ctx.req.use ?? 'Workload' });
    return { pools, ownFirst: !(explicit && explicit.length) };
  }

  /**
   * Whether an ADD on `node` could get an address of each family now (CNI
   * STATUS): the pools it would choose, and at least one free address among
   * them. Undefined when ready, else what is wrong. Uses the same pool choice
   * as assign().
   */
  async readiness(q: { node: string; families: Family[]; ipv4Pools?: string[] | undefined; ipv6Pools?: string[] | undefined }): Promise<string | undefined> {
    const [{ pools, bad }, usage] = await Promise.all([this.loadPools(), this.usage()]);
    let labels: Record<string, string> | undefined;
    const ctxLabels = async () => {
      if (!labels) {
        try {
          labels = (await this.ds.get('Node', q.node)).metadata.labels ?? {};
        } catch (e) {
          if (!isKind(e, 'NotFound')) throw e;
          labels = {};
        }
      }
      return labels;
    };
    for (const family of q.families) {
      const explicit = family === 4 ? q.ipv4Pools : q.ipv6Pools;
      let chosen: PoolInfo[];
      try {
        chosen = await choosePools({ family, pools, explicit, field: family === 4 ? 'ipam.ipv4_pools' : 'ipam.ipv6_pools', node: q.node, labels: ctxLabels, badPools: bad });
      } catch (e) {
        if (e instanceof IpamError) return e.message;
        throw e;
      }
      const names = new Set(chosen.map((p) => p.name));
      const used = usage.filter((u) => names.has(u.name));
      if (used.every((u) => u.free === 0n)) return `IPv${family} pools ${used.map((u) => `${u.name} (${u.cidr})`).join(', ')} have no free address`;
    }
    return undefined;
  }

  private async assignAuto(ctx: Ctx, family: Family): Promise<Assigned> {
    const { pools, ownFirst } = await this.selectPools(ctx, family);
    if (ownFirst) {
      // Without an explicit order, use blocks the node already holds in any
      // selected pool before claiming a new one anywhere.
      for (const p of pools) {
        const got = await this.fromOwnBlocks(ctx, p);
        if (got) return got;
      }
    }
    for (const p of pools) {
      const got = (ownFirst ? undefined : await this.fromOwnBlocks(ctx, p)) ?? (await this.fromNewBlock(ctx, p)) ?? (await this.borrow(ctx, p));
      if (got) return got;
    }
    if (ctx.capHit && ctx.capHit.family === family) {
      const { held, max } = ctx.capHit;
      throw new IpamError(
        'exhausted',
        `node '${ctx.node}' already holds ${held} IPv${family} blocks (IPAMConfig maxBlocksPerHost=${max}) and they are full${ctx.config.strictAffinity ? '' : ', and no other block has a free address'}; raise it or free addresses`,
      );
    }
    const strict = ctx.config.strictAffinity ? ' (IPAMConfig strictAffinity is on, so blocks of other nodes are not used)' : '';
    const noAuto = ctx.config.autoAllocateBlocks === false ? ' (IPAMConfig autoAllocateBlocks is off)' : '';
    throw new IpamError('exhausted', `no free IPv${family} address for node '${ctx.node}' in pool${pools.length > 1 ? 's' : ''} ${pools.map((p) => `${p.name} (${p.cidrText})`).join(', ')}: exhausted${strict}${noAuto}; add a pool or free addresses`);
  }

  private async assignSpecific(ctx: Ctx, ip: IP, text: string): Promise<Assigned> {
    const field = ctx.req.fields?.requestedIPs ?? 'IP';
    const canonical = formatIP(ip);
    const containing = ctx.pools.filter((p) => containsIP(p.cidr, ip));
    const pool = containing.find((p) => !p.disabled);
    if (!pool) {
      if (containing.length) {
        throw new IpamError('address-not-in-pool', `${field}: ${canonical} is in pool ${containing[0]!.name} (${containing[0]!.cidrText}), which is disabled; disabled pools give out no new addresses`);
      }
      throw new IpamError('address-not-in-pool', `${field}: ${text} is not in a configured pool (pools: ${describePools(ctx.pools)}); request an address inside an IPPool`);
    }
    checkPoolUse(pool, ctx.req.use ?? 'Workload', field, canonical);
    const blockCidr = enclosing(ip, pool.blockSize);
    const blockText = formatCidr(blockCidr);
    const ord = ordinalOf(blockCidr, ip);
    for (let round = 0; round < this.maxRetries; round++) {
      let b = await this.getBlock(blockText);
      if (!b) {
        // Claim the block for this node when allowed (the pod lives here, so
        // the block's routes point the right way); otherwise create it
        // unaffine: an explicit address is always allowed, even at the cap.
        if (this.canClaim(ctx, ip.family)) b = await this.claimNewBlock(ctx, blockCidr);
        else {
          try {
            b = await this.ds.create<'IPAMBlock'>({
              apiVersion: API_VERSION,
              kind: 'IPAMBlock',
              metadata: { name: blockName(blockText) },
              spec: newBlockSpec(blockCidr, blockText, null),
            });
          } catch (e) {
            if (!isKind(e, 'AlreadyExists')) throw e;
          }
        }
        b ??= await this.getBlock(blockText);
        if (!b) continue;
      }
      const got = await this.allocateIn(ctx, b, pool, ord);
      if (got) return got;
      // The block was deleted under us (an empty block being released): go round.
    }
    throw new IpamError('conflict-retries-exhausted', `${field}: could not allocate ${canonical}: its block ${blockText} kept changing; try again`);
  }

  /**
   * Assign addresses to a handle. Dual-stack is all-or-nothing: when one
   * family fails, what the other got in this call is released again.
   */
  async assign(req: AssignRequest): Promise<Assigned[]> {
    if (!req.handleID) throw new IpamError('missing-handle', 'IPAM handle ID is empty (network name and CNI_CONTAINERID are both needed)');
    if (!req.node) throw new IpamError('invalid-request', "node name is empty: set 'nodename' in the netconf");
    const field = req.fields?.requestedIPs ?? 'IP';
    const requested: Array<{ ip: IP; text: string }> = [];
    for (const raw of req.requestedIPs ?? []) {
      const text = raw.trim();
      if (!text) continue;
      const ip = tryParseIP(text);
      if (!ip) throw new IpamError('invalid-request', `${field}: '${text}' is not an IPv4 or IPv6 address`);
      if (requested.some((r) => r.ip.family === ip.family)) {
        throw new IpamError('invalid-request', `${field}: more than one IPv${ip.family} address requested (${requested.find((r) => r.ip.family === ip.family)!.text}, ${text}); give at most one IPv4 and one IPv6 address`);
      }
      requested.push({ ip, text });
    }
    if (!requested.length && !req.assignIPv4 && !req.assignIPv6) {
      throw new IpamError('invalid-request', 'ipam: assign_ipv4 and assign_ipv6 are both "false": nothing to assign; set one to "true"');
    }
    // Reads that need no lock start before waiting for it: pools and config
    // change only by operator action, and the handle only by this container's
    // own ADD/DEL, which the runtime serialises. This also opens the datastore
    // connection outside the lock, so holders keep it for less time.
    const early = Promise.all([this.loadPools(), this.loadConfig(), this.getHandle(req.handleID)]);
    early.catch(() => undefined); // awaited below; do not let a failure go unhandled while we wait
    if (this.batch && !requested.length) return this.enqueue(req, early);
    return this.exclusive(req.node, () => this.assignLocked(req, requested, early));
  }

  // ---------------------------------------------------------------- batching

  /**
   * Queue an assignment for the next lock acquisition. Requests that arrive
   * while a batch waits for the lock join it; only requests asking for the
   * same thing share a queue, so one set of reads and pool choices serves
   * all of them.
   */
  private enqueue(req: AssignRequest, early: PendingAssign['early']): Promise<Assigned[]> {
    const key = JSON.stringify([this.lockPath, req.node, req.assignIPv4, req.assignIPv6, req.ipv4Pools ?? [], req.ipv6Pools ?? [], req.fields ?? {}]);
    return new Promise<Assigned[]>((resolve, reject) => {
      this.joinBatch(batchQueues, key, { req, early, resolve, reject, done: [] }, req.node, (items) => this.assignBatchLocked(items));
    });
  }

  /**
   * Queue `item` for the next acquisition of the lock: the first of a key
   * waits for the lock, whoever arrives meanwhile joins it, and `serve` gets
   * them all once the lock is held. Later arrivals start the next batch.
   */
  private joinBatch<T extends { reject: (e: unknown) => void }>(
    store: WeakMap<Datastore, Map<string, T[]>>,
    key: string,
    item: T,
    lockKey: string | undefined,
    serve: (items: T[]) => Promise<void>,
  ): void {
    let queues = store.get(this.ds);
    if (!queues) store.set(this.ds, (queues = new Map()));
    const waiting = queues.get(key);
    if (waiting) {
      waiting.push(item);
      return;
    }
    const items = [item];
    const all = queues;
    all.set(key, items);
    this.exclusive(lockKey, () => {
      if (all.get(key) === items) all.delete(key);
      return serve(items);
    }).catch((e) => {
      if (all.get(key) === items) all.delete(key);
      for (const it of items) it.reject(e);
    });
  }

  private async assignBatchLocked(items: PendingAssign[]): Promise<void> {
    if (items.length === 1) {
      const it = items[0]!;
      await this.assignLocked(it.req, [], it.early).then(it.resolve, it.reject);
      return;
    }
    const settled = await Promise.allSettled(items.map((it) => it.early));
    const batch: PendingAssign[] = [];
    let shared: [{ pools: PoolInfo[]; bad: string[] }, IPAMConfigSpec] | undefined;
    for (const [i, it] of items.entries()) {
      const r = settled[i]!;
      if (r.status === 'rejected') {
        it.reject(r.reason);
      } else if (r.value[2]) {
        // A retried ADD (its handle exists): the one-by-one path returns what it holds.
        await this.assignLocked(it.req, [], it.early).then(it.resolve, it.reject);
      } else {
        shared ??= [r.value[0], r.value[1]];
        batch.push(it);
      }
    }
    if (!batch.length || !shared) return;
    if (batch.length === 1) {
      const it = batch[0]!;
      await this.assignLocked(it.req, [], it.early).then(it.resolve, it.reject);
      return;
    }
    const req = batch[0]!.req;
    const [{ pools, bad }, config] = shared;
    const affinities = await this.nodeAffinities(req.node);
    this.log.debug('ipam: serving a batch of assignments under the host lock', { node: req.node, size: batch.length, affinities: affinities.length });
    const ctx: Ctx = { req, node: req.node, pools, badPools: bad, config, affinities, handle: undefined };
    for (const it of batch) it.ctx = { ...ctx, req: it.req, handle: undefined };
    const families = [req.assignIPv4 ? 4 : 0, req.assignIPv6 ? 6 : 0].filter(Boolean) as Family[];
    for (const family of families) {
      let queue = batch.filter((it) => it.failed === undefined);
      while (queue.length) {
        let individual: PendingAssign[];
        try {
          ({ rest: queue, individual } = await this.batchFromOwnBlocks(ctx, family, queue, family === families[families.length - 1]));
        } catch (e) {
          // Pool selection or a block read failed for the whole batch: each
          // request goes its own way (and reports its own error).
          this.log.debug('ipam: batch step failed; assigning one by one', { error: String(e) });
          // Those served before the failure keep their address.
          individual = queue.filter((it) => !it.done.some((d) => d.family === family));
          queue = [];
        }
        const last = family === families[families.length - 1];
        for (const it of individual) await this.assignOneOfBatch(ctx, it, family, last);
        // The node's blocks are full: one request the one-by-one way (it
        // claims a new block or borrows), then the rest as a batch again.
        const next = queue.shift();
        if (next) await this.assignOneOfBatch(ctx, next, family, last);
      }
    }
    const failed = batch.filter((it) => it.failed !== undefined);
    for (const it of batch) if (it.failed === undefined) it.resolve(it.done);
    for (const it of failed) {
      // The handle did not exist before this batch: release all of it, which
      // also drops a count raised for an address not taken.
      try {
        await this.releaseLocked(it.req.handleID);
      } catch (re) {
        this.log.error('ipam: could not roll back a failed assignment', { handle: it.req.handleID, error: String(re) });
      }
      const e = it.failed;
      it.reject(it.done.length ? rolledBack(e, it.done) : e);
    }
  }

  /** Serve what fits in the node's own blocks, one transaction per block (per MAX_BATCH_TXN requests). */
  private async batchFromOwnBlocks(ctx: Ctx, family: Family, queue: PendingAssign[], last: boolean): Promise<{ rest: PendingAssign[]; individual: PendingAssign[] }> {
    const { pools, ownFirst } = await this.selectPools(ctx, family);
    // With an explicit list the first pool's new block comes before the next
    // pool's own blocks, which the one-by-one path handles.
    const candidates = ownFirst ? pools : pools.slice(0, 1);
    let rest = queue;
    const individual: PendingAssign[] = [];
    for (const p of candidates) {
      if (!rest.length) break;
      for await (const first of this.ownBlocks(ctx, p)) {
        let b: BlockRes | undefined = first;
        while (b && rest.length) {
          const free = b.spec.allocations.filter((x) => x == null).length;
          if (!free) break;
          const take = rest.slice(0, Math.min(free, MAX_BATCH_TXN));
          const r = await this.allocateBatchIn(ctx, b, p, take, last);
          rest = [...r.unserved, ...rest.slice(take.length)];
          individual.push(...r.failed);
          if (r.served === 0) break;
          b = r.block;
        }
        if (!rest.length) break;
      }
    }
    return { rest, individual };
  }

  /**
   * One transaction for several requests: every request's handle (created:
   * the handle did not exist before the batch), the block's compare-and-swap
   * that takes all their addresses, and each request's piggybacked writes
   * when this is its last family. Returns the requests the block had no room
   * for and those that must go one by one (their own write's guard failed, or
   * the shared transaction failed).
   */
  private async allocateBatchIn(
    ctx: Ctx,
    block: BlockRes,
    pool: PoolInfo,
    take: PendingAssign[],
    last: boolean,
  ): Promise<{ unserved: PendingAssign[]; failed: PendingAssign[]; served: number; block: BlockRes | undefined }> {
    const cidrText = block.spec.cidr;
    const c = checkBlock(block.spec);
    const timestamp = new Date().toISOString();
    let ready = [...take];
    const failed: PendingAssign[] = [];
    let cur: BlockRes | undefined = block;
    let got: Array<{ it: PendingAssign; ord: number }>;
    try {
      got = await this.retry(`allocating in IPAM block ${cidrText}`, async (attempt) => {
        if (attempt > 0) cur = await this.getBlock(cidrText);
        if (!cur || cur.spec.deleted) return [];
        checkBlock(cur.spec);
        const spec: IPAMBlockSpec = structuredClone(cur.spec);
        const out: Array<{ it: PendingAssign; ord: number }> = [];
        for (const it of ready) {
          const handleID = it.req.handleID;
          const ord = allocateNext(spec, { handle_id: handleID, secondary: { ...it.req.attrs, node: ctx.node, timestamp, handle: handleID } });
          if (ord === undefined) break;
          out.push({ it, ord });
        }
        if (!out.length) return [];
        // Who each op belongs to (undefined: the shared block write).
        const owner: Array<PendingAssign | undefined> = [];
        const ops: TxnOp[] = [];
        for (const { it } of out) {
          const hop = this.handleOp(it.ctx!, cidrText, ordinalsOf(cur.spec, it.req.handleID).length + 1);
          if (hop) {
            ops.push(hop);
            owner.push(it);
          }
        }
        const blockOp = ops.length;
        ops.push({ op: 'update', res: { ...cur, spec } });
        owner.push(undefined);
        const extraFrom = ops.length;
        for (const { it, ord } of out) {
          if (!last || !it.req.piggyback) continue;
          const ip = addressOf(c, ord);
          const x = await it.req.piggyback.ops([...it.done, { address: `${ip}/${c.prefix}`, ip, family: c.family, pool: pool.name, block: cidrText }], false);
          ops.push(...x);
          owner.push(...x.map(() => it));
        }
        let res: Array<Resource | undefined>;
        try {
          res = await this.ds.txn(ops);
        } catch (e) {
          const i = TxnError.opOf(e);
          const who = i === undefined ? undefined : owner[i];
          if (who && i! < blockOp) {
            // That request's own handle write failed (it exists after all, or
            // the write did not go through): it goes alone; the rest try again.
            this.log.debug('ipam: handle write failed in a batch; assigning that request alone', { handle: who.req.handleID, error: String(e) });
            ready = ready.filter((x) => x !== who);
            failed.push(who);
            throw new DatastoreError('Conflict', (e as Error).message, { cause: e });
          }
          // The block moved: re-read and try again. Anything else (a
          // piggybacked write's guard, an outage) sends the batch one by one.
          if (i === blockOp) asConflict(e);
          throw e;
        }
        for (const [i, o] of owner.entries()) if (o && i < blockOp) o.ctx!.handle = res[i] as HandleRes;
        cur = res[blockOp] as BlockRes;
        ctx.blocks?.set(cur.metadata.name, cur);
        this.noteBlock(cur);
        for (const { it } of out) {
          const idx = owner.flatMap((o, i) => (o === it && i >= extraFrom ? [i] : []));
          if (idx.length) it.req.piggyback!.committed(idx.map((i) => res[i]));
        }
        return out;
      });
    } catch (e) {
      // The shared write failed (or may have been applied without an answer):
      // each request is tried again on its own, which first looks for an
      // address its handle already holds.
      this.log.warn('ipam: batched block write failed; assigning its requests one by one', { block: cidrText, size: ready.length, error: String(e) });
      return { unserved: [], failed: [...failed, ...ready], served: 0, block: undefined };
    }
    for (const { it, ord } of got) {
      const ip = addressOf(c, ord);
      it.done.push({ address: `${ip}/${c.prefix}`, ip, family: c.family, pool: pool.name, block: cidrText });
    }
    const served = new Set(got.map((g) => g.it));
    // Nothing was written for these (the block filled up meanwhile): they move on.
    const unserved = ready.filter((it) => !served.has(it));
    return { unserved, failed, served: got.length, block: cur };
  }

  /** The one-by-one path for a member of a batch; records the outcome on it. */
  private async assignOneOfBatch(ctx: Ctx, it: PendingAssign, family: Family, last: boolean): Promise<void> {
    const own: Ctx = { ...ctx, req: it.req, handle: undefined, capHit: undefined, ...(last && it.req.piggyback ? { piggy: { p: it.req.piggyback, before: it.done } } : {}) };
    try {
      own.handle = await this.getHandle(it.req.handleID);
      // A failed shared write may have been applied after all: an address of
      // this family that the handle holds is this request's.
      const have = own.handle ? (await this.addressesOfHandle(own.handle)).find((a) => a.family === family && !it.done.some((d) => d.ip === a.ip)) : undefined;
      if (have) {
        it.done.push({ ...have, pool: ctx.pools.find((p) => containsIP(p.cidr, tryParseIP(have.ip)!))?.name ?? '' });
        return;
      }
      it.done.push(await this.assignAuto(own, family));
    } catch (e) {
      it.failed = e;
    } finally {
      // Claims and repairs it made are the node's state for the rest of the batch.
      ctx.affinities = own.affinities;
      if (own.blocks) ctx.blocks = own.blocks;
      if (it.ctx) it.ctx.handle = own.handle;
    }
  }

  private async assignLocked(
    req: AssignRequest,
    requested: Array<{ ip: IP; text: string }>,
    early: Promise<[{ pools: PoolInfo[]; bad: string[] }, IPAMConfigSpec, HandleRes | undefined]>,
  ): Promise<Assigned[]> {
    // Affinities are what the node's own writers change: read them under the lock.
    const [[{ pools, bad }, config, handle], affinities] = await Promise.all([early, this.nodeAffinities(req.node)]);
    this.log.debug('ipam: state read under the host lock', { handle: req.handleID, affinities: affinities.length });
    const ctx: Ctx = { req, node: req.node, pools, badPools: bad, config, affinities, handle };

    const families: Family[] = requested.length ? requested.map((r) => r.ip.family) : ([req.assignIPv4 ? 4 : 0, req.assignIPv6 ? 6 : 0].filter(Boolean) as Family[]);
    // A retried ADD for the same container gets what it already holds.
    const existing = handle ? await this.addressesOfHandle(handle) : [];
    const done: Assigned[] = [];
    try {
      for (const family of families) {
        const want = requested.find((r) => r.ip.family === family);
        const have = existing.find((a) => a.family === family && (!want || a.ip === formatIP(want.ip)));
        if (have) {
          done.push({ ...have, pool: pools.find((p) => containsIP(p.cidr, { family, value: tryParseIP(have.ip)!.value }))?.name ?? '' });
          continue;
        }
        // The caller's writes go with the request's last address.
        if (req.piggyback && family === families[families.length - 1]) ctx.piggy = { p: req.piggyback, before: [...done] };
        done.push(want ? await this.assignSpecific(ctx, want.ip, want.text) : await this.assignAuto(ctx, family));
      }
      return done;
    } catch (e) {
      const fresh = done.filter((d) => !existing.some((x) => x.ip === d.ip));
      if (fresh.length) {
        try {
          await this.releaseForHandle(req.handleID, fresh.map((d) => d.ip));
        } catch (re) {
          this.log.error('ipam: could not roll back a partial dual-stack assignment', { handle: req.handleID, error: String(re) });
        }
        throw rolledBack(e, fresh);
      } else if (!existing.length) {
        // Nothing assigned: do not leave a handle behind that allocateIn raised.
        await this.releaseLocked(req.handleID).catch(() => undefined);
      }
      throw e;
    }
  }

  // ---------------------------------------------------------------- release

  private async addressesOfHandle(h: HandleRes): Promise<Array<{ ip: string; family: Family; address: string; block: string }>> {
    const out: Array<{ ip: string; family: Family; address: string; block: string }> = [];
    const blocks = await Promise.all(Object.keys(h.spec.block).map((c) => this.getBlock(c)));
    for (const b of blocks) {
      if (!b) continue;
      const c = checkBlock(b.spec);
      for (const ord of ordinalsOf(b.spec, h.spec.handleID)) {
        const ip = addressOf(c, ord);
        out.push({ ip, family: c.family, address: `${ip}/${c.prefix}`, block: b.spec.cidr });
      }
    }
    return out;
  }

  /**
   * Free ordinals chosen by `pick` in one block (CAS, retried), then apply the
   * empty-block policy. Returns what was freed with the handle each belonged to.
   */
  private async freeInBlock(cidrText: string, pick: (spec: IPAMBlockSpec) => number[]): Promise<Released[]> {
    let freedBlock: BlockRes | undefined;
    const released = await this.retry(`releasing addresses in IPAM block ${cidrText}`, async () => {
      const b = await this.getBlock(cidrText);
      if (!b) return [];
      const c = checkBlock(b.spec);
      const ords = pick(b.spec);
      if (!ords.length) return [];
      const spec = structuredClone(b.spec);
      const owners = ords.map((o) => handleAt(spec, o)?.handle_id ?? null);
      freeOrdinals(spec, ords);
      freedBlock = await this.ds.update({ ...b, spec });
      this.noteBlock(freedBlock);
      return ords.map((o, i) => ({ ip: addressOf(c, o), handle: owners[i] ?? null }));
    });
    if (freedBlock && isEmpty(freedBlock.spec)) await this.maybeReleaseBlock(freedBlock);
    return released;
  }

  /**
   * Empty-block policy: an empty block goes back to the pool unless it is its
   * node's last block in that pool (a node keeps one per pool, so a pod
   * churning on a quiet node does not claim and release a block every time).
   * Unaffine empty blocks always go. Order: delete the block (CAS on the
   * revision we just wrote, so a racing allocation wins), then the affinity.
   */
  private async maybeReleaseBlock(b: BlockRes): Promise<void> {
    const blockCidr = tryParseCidr(b.spec.cidr);
    if (!blockCidr) return;
    let aff: AffRes | undefined;
    const node = b.spec.affinity?.startsWith('host:') ? b.spec.affinity.slice(5) : undefined;
    if (node) {
      const [{ pools }, affs] = await Promise.all([this.loadPools(), this.nodeAffinities(node)]);
      const pool = pools.find((p) => containsCidr(p.cidr, blockCidr));
      aff = affs.find((a) => a.spec.cidr === b.spec.cidr);
      if (pool && !pool.disabled) {
        const others = affs.filter((a) => {
          const c = tryParseCidr(a.spec.cidr);
          return a.spec.state === 'confirmed' && a.spec.cidr !== b.spec.cidr && !!c && containsCidr(pool.cidr, c);
        });
        if (!others.length) return;
      }
    }
    try {
      await this.ds.delete('IPAMBlock', b.metadata.name, { revision: b.metadata.resourceVersion });
    } catch (e) {
      if (isKind(e, 'Conflict') || isKind(e, 'NotFound')) return; // someone allocated meanwhile: keep it
      throw e;
    }
    if (aff) await this.deleteAffinity(aff);
    this.log.info('ipam: released empty block', { block: b.spec.cidr, node });
  }

  /** Release the given addresses of one handle (rollback of a partial assignment). */
  private async releaseForHandle(handleID: string, ips: string[]): Promise<void> {
    const h = await this.getHandle(handleID);
    if (!h) return;
    const wanted = new Set(ips);
    for (const cidrText of Object.keys(h.spec.block)) {
      const c = tryParseCidr(cidrText);
      if (!c) continue;
      const freed = await this.freeInBlock(cidrText, (spec) => ordinalsOf(spec, handleID).filter((o) => wanted.has(addressOf(c, o))));
      if (freed.length) await this.lowerHandle(handleID, cidrText, (cur) => cur - freed.length);
    }
  }

  /**
   * Free every slot of the handle and delete the handle (with the caller's
   * extra writes) in one transaction: each block's compare-and-swap, the
   * handle's delete at the revision read. On Kubernetes the ops run in order,
   * the extra writes first (the endpoint goes before its addresses), then the
   * blocks, then the handle, so a crash leaves at worst a handle that
   * over-counts (docs/ipam.md).
   */
  private async releaseLocked(handleID: string, early?: Promise<HandleRes | undefined>, opts: ReleaseOptions = {}): Promise<string[]> {
    let extra = [...(opts.alsoWrite ?? [])];
    // Conflicts (a concurrent assignment moved the block) are retried with the
    // allocator's jittered backoff, reading the handle and blocks again.
    return this.retry(`releasing IPAM handle ${handleID}`, async (attempt) => {
      const h = attempt === 0 && early ? await early : await this.getHandle(handleID);
      const blocks = h ? await Promise.all(Object.keys(h.spec.block).map((c) => this.getBlock(c))) : [];
      const ops: TxnOp[] = [...extra];
      const released: string[] = [];
      const freed: Array<{ at: number; empty: boolean }> = [];
      for (const b of blocks) {
        if (!b) continue;
        const ords = ordinalsOf(b.spec, handleID);
        if (!ords.length) continue;
        const c = checkBlock(b.spec);
        const spec = structuredClone(b.spec);
        freeOrdinals(spec, ords);
        freed.push({ at: ops.length, empty: isEmpty(spec) });
        ops.push({ op: 'update', res: { ...b, spec } });
        released.push(...ords.map((o) => addressOf(c, o)));
      }
      // The handle's counts may be higher than what the blocks held (an ADD
      // killed between ordered writes): that is expected and disappears here.
      if (h) ops.push({ op: 'delete', kind: 'IPAMHandle', name: h.metadata.name, revision: h.metadata.resourceVersion! });
      if (!ops.length) return released;
      let out: Array<Resource | undefined>;
      try {
        out = await this.ds.txn(ops);
      } catch (e) {
        // An extra write whose object changed or went is dropped (best effort);
        // a block or the handle that moved is read again.
        const i = TxnError.opOf(e);
        if (i !== undefined && i < extra.length && DatastoreError.is(e) && e.kind !== 'Unavailable') extra = extra.filter((_, j) => j !== i);
        asConflict(e);
      }
      for (const f of freed) this.noteBlock(out[f.at] as BlockRes);
      for (const f of freed) if (f.empty) await this.maybeReleaseBlock(out[f.at] as BlockRes);
      return released;
    });
  }

  /**
   * Release every address of the handle. Idempotent: an unknown handle
   * releases nothing and succeeds. `alsoWrite` goes in the same transaction.
   */
  async releaseByHandle(handleID: string, opts: ReleaseOptions = {}): Promise<string[]> {
    // The handle is only changed by this container's own ADD/DEL: read it
    // (and connect) before waiting for the lock.
    const early = this.getHandle(handleID);
    early.catch(() => undefined);
    if (this.batch) return this.enqueueRelease({ handleID, early, opts });
    return this.exclusive(undefined, () => this.releaseLocked(handleID, early, opts));
  }

  /**
   * Queue a release for the next lock acquisition (batching, as for
   * assignments): the releases that waited together are served by one
   * transaction per MAX_BATCH_TXN of them.
   */
  private enqueueRelease(item: Omit<PendingRelease, 'resolve' | 'reject'>): Promise<string[]> {
    return new Promise<string[]>((resolve, reject) => {
      // Without a host lock, batched releases still queue behind each other (per store) to meet in one batch.
      this.joinBatch(releaseQueues, String(this.lockPath), { ...item, resolve, reject }, this.lockPath ? undefined : 'releases', async (items) => {
        for (let i = 0; i < items.length; i += MAX_BATCH_TXN) await this.releaseBatchLocked(items.slice(i, i + MAX_BATCH_TXN));
      });
    });
  }

  /**
   * Several releases in one transaction: every block they hold addresses in
   * (one compare-and-swap each, all their slots freed), their handles'
   * deletes and their extra writes. Any failure sends each release its own
   * way (releaseLocked, with its retries), which is idempotent.
   */
  private async releaseBatchLocked(items: PendingRelease[]): Promise<void> {
    const one = async (it: PendingRelease) => this.releaseLocked(it.handleID, it.early, it.opts).then(it.resolve, it.reject);
    if (items.length === 1) return one(items[0]!);
    try {
      const handles = await Promise.all(items.map((it) => it.early));
      const cidrs = [...new Set(handles.flatMap((h) => (h ? Object.keys(h.spec.block) : [])))];
      const blocks = (await Promise.all(cidrs.map((c) => this.getBlock(c)))).filter((b): b is BlockRes => !!b);
      const ops: TxnOp[] = items.flatMap((it) => it.opts.alsoWrite ?? []);
      const released = new Map<PendingRelease, string[]>(items.map((it) => [it, []]));
      const freed: Array<{ at: number; empty: boolean }> = [];
      for (const b of blocks) {
        const c = checkBlock(b.spec);
        const spec = structuredClone(b.spec);
        const ords: number[] = [];
        for (const [i, it] of items.entries()) {
          if (!handles[i]) continue;
          const mine = ordinalsOf(b.spec, it.handleID);
          ords.push(...mine);
          released.get(it)!.push(...mine.map((o) => addressOf(c, o)));
        }
        if (!ords.length) continue;
        freeOrdinals(spec, ords);
        freed.push({ at: ops.length, empty: isEmpty(spec) });
        ops.push({ op: 'update', res: { ...b, spec } });
      }
      for (const h of handles) if (h) ops.push({ op: 'delete', kind: 'IPAMHandle', name: h.metadata.name, revision: h.metadata.resourceVersion! });
      const out = ops.length ? await this.ds.txn(ops) : [];
      for (const f of freed) this.noteBlock(out[f.at] as BlockRes);
      for (const it of items) it.resolve(released.get(it)!);
      for (const f of freed) if (f.empty) await this.maybeReleaseBlock(out[f.at] as BlockRes).catch((e) => this.log.debug('ipam: empty block kept', { error: String(e) }));
    } catch (e) {
      this.log.debug('ipam: batched release failed; releasing one by one', { size: items.length, error: String(e) });
      for (const it of items) await one(it);
    }
  }

  /** Release specific addresses whoever holds them (operator repair). Addresses already free are skipped. */
  async releaseIPs(ips: string[]): Promise<Released[]> {
    const parsed = ips.map((s) => {
      const ip = tryParseIP(s);
      if (!ip) throw new IpamError('invalid-request', `'${s}' is not an IPv4 or IPv6 address`);
      return ip;
    });
    return this.exclusive(undefined, async () => {
      const { items } = await this.ds.list('IPAMBlock');
      const out: Released[] = [];
      for (const ip of parsed) {
        const b = items.find((x) => {
          const c = tryParseCidr(x.spec.cidr);
          return c && containsIP(c, ip);
        });
        if (!b) continue;
        const c = parseCidr(b.spec.cidr);
        const ord = ordinalOf(c, ip);
        const freed = await this.freeInBlock(b.spec.cidr, (spec) => (spec.allocations[ord] != null ? [ord] : []));
        for (const f of freed) {
          if (f.handle) await this.lowerHandle(f.handle, b.spec.cidr, (cur) => cur - 1);
          out.push(f);
        }
      }
      return out;
    });
  }

  // ---------------------------------------------------------------- inspection

  /** The addresses (plain IPs) the handle holds now. */
  async handleAddresses(handleID: string): Promise<string[]> {
    const h = await this.getHandle(handleID);
    return h ? (await this.addressesOfHandle(h)).map((a) => a.ip) : [];
  }

  async usage(): Promise<PoolUsage[]> {
    return (await this.usageReport()).pools;
  }

  /**
   * Pool usage (pools in name order, each with the blocks inside its CIDR) and
   * the orphan blocks: blocks inside no pool (their pool was deleted with
   * --force or resized), which keep their addresses until released.
   */
  async usageReport(): Promise<{ pools: PoolUsage[]; orphanBlocks: BlockUsage[] }> {
    const [{ pools }, { items: blocks }] = await Promise.all([this.loadPools(), this.ds.list('IPAMBlock')]);
    const claimed = new Set<BlockRes>();
    const parsed = blocks.map((b) => ({ b, c: tryParseCidr(b.spec.cidr) }));
    const blockUsage = (b: BlockRes, c: Cidr | undefined): BlockUsage => ({
      cidr: b.spec.cidr,
      affinity: b.spec.affinity,
      size: c ? Number(cidrSize(c)) : b.spec.allocations.length,
      allocated: allocatedCount(b.spec),
    });
    const usage = pools
      .sort((a, b) => a.name.localeCompare(b.name))
      .map((p) => {
        const perBlock: BlockUsage[] = [];
        for (const { b, c } of parsed) {
          if (!c || !containsCidr(p.cidr, c)) continue;
          claimed.add(b);
          perBlock.push(blockUsage(b, c));
        }
        const allocated = perBlock.reduce((n, b) => n + b.allocated, 0);
        const size = cidrSize(p.cidr);
        return {
          name: p.name,
          cidr: p.cidrText,
          family: p.cidr.family,
          blockSize: p.blockSize,
          disabled: p.disabled,
          nodeSelector: p.selector.toString(),
          size,
          blocks: perBlock.length,
          allocated,
          free: size - BigInt(allocated),
          perBlock,
        };
      });
    const orphanBlocks = parsed.filter(({ b }) => !claimed.has(b)).map(({ b, c }) => blockUsage(b, c));
    return { pools: usage, orphanBlocks };
  }

  /** Who holds `ip`: its handle and attributes, or undefined when it is free or in no block. */
  async whoHas(ipText: string): Promise<{ handle: string | null; attrs: Record<string, string>; block: string } | undefined> {
    const at = await this.locate(ipText);
    return at.holder && at.block ? { handle: at.holder.handle, attrs: at.holder.attrs, block: at.block } : undefined;
  }

  /**
   * Where `ip` stands: the (valid) pool containing it, the block containing it
   * (when one was claimed), that block's affinity, whether the address is
   * allocated and, when its attribute is recorded, who holds it.
   */
  async locate(ipText: string): Promise<AddressLocation> {
    const ip = tryParseIP(ipText);
    if (!ip) throw new IpamError('invalid-request', `'${ipText}' is not an IPv4 or IPv6 address`);
    const { pools } = await this.loadPools();
    let block: BlockRes | undefined;
    const pool = pools.find((p) => containsIP(p.cidr, ip));
    if (pool) block = await this.getBlock(formatCidr(enclosing(ip, pool.blockSize)));
    if (!block) {
      // Pool deleted or resized since: search the blocks themselves.
      const { items } = await this.ds.list('IPAMBlock');
      block = items.find((b) => {
        const c = tryParseCidr(b.spec.cidr);
        return c && containsIP(c, ip);
      });
    }
    const out: AddressLocation = { ip: formatIP(ip), allocated: false, ...(pool ? { pool: pool.name } : {}) };
    if (!block) return out;
    out.block = block.spec.cidr;
    out.affinity = block.spec.affinity;
    const ord = ordinalOf(parseCidr(block.spec.cidr), ip);
    if (block.spec.allocations[ord] == null) return out;
    out.allocated = true;
    const attr = handleAt(block.spec, ord);
    if (attr) out.holder = { handle: attr.handle_id, attrs: { ...(attr.secondary ?? {}) } };
    return out;
  }

  /** Every handle, or only those of exactly `network` (see ipam/handle.ts; object names fold case, so this filters on the recorded IDs). */
  async listHandles(opts: { network?: string } = {}): Promise<HandleInfo[]> {
    const { items } = await this.ds.list('IPAMHandle');
    return items
      .filter((h) => opts.network === undefined || parseHandleID(h.spec.handleID)?.network === opts.network)
      .map((h) => ({ handleID: h.spec.handleID, blocks: { ...h.spec.block } }));
  }
}

