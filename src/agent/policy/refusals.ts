// What libnftables or the renderer refuses: such an object is left out of the table (its pods stay
// isolated), told once, and retried when its content changes; a refused full resync is bisected in a
// scratch table to find the objects at fault, so that everything else is programmed.
import { ownerId, type Owner } from '../../dataplane/nft/model.js';
import type { Logger } from '../../log/types.js';
import { TABLE, type DesiredState } from './compile.js';
import { BASE_ID, fullScriptAttributed, ownerFingerprint, withoutOwners, type BaseOptions } from './nft-script.js';

export interface RefusedObject {
  owner: Owner;
  stage: 'model' | 'kernel';
  reason: string;
}

interface RefusalsOptions {
  base: BaseOptions;
  nft: (script: string) => Promise<string>;
  log: Logger;
  onRefused?: ((r: RefusedObject) => void) | undefined;
}

export class KernelRefusals {
  /** Objects libnftables refused: ownerId → the fingerprint of the content refused (retried when it changes). */
  private readonly kernelRefused = new Map<string, string>();
  /** Refusals already reported (stage, ownerId and reason), so each is told once. */
  private readonly told = new Set<string>();
  private readonly scratch: string;

  constructor(private readonly opts: RefusalsOptions) {
    this.scratch = `${opts.base.table ?? TABLE}-check`;
  }

  /** The objects libnftables refused that stay out of `next`: their content is the same. */
  exclusions(next: DesiredState): Set<string> {
    const exclude = new Set<string>();
    for (const [id, fp] of this.kernelRefused) {
      if (ownerFingerprint(next, id) === fp) exclude.add(id);
      else this.kernelRefused.delete(id);
    }
    return exclude;
  }

  /** Logs a refusal once and tells onRefused. */
  tell(r: RefusedObject): void {
    const k = `${r.stage}\0${ownerId(r.owner)}\0${r.reason}`;
    if (this.told.has(k)) return;
    this.told.add(k);
    const o = r.owner;
    this.opts.log.warn(
      `policy: ${o.kind} ${o.namespace ? `${o.namespace}/` : ''}${o.name} left out of the table; its pods stay ` +
        `isolated`,
      { stage: r.stage, reason: r.reason },
    );
    this.opts.onRefused?.(r);
  }
  /** Whether libnftables takes this script, tried in a scratch table that is never hooked and is gone afterwards. */
  private async accepted(d: DesiredState, exclude: ReadonlySet<string>): Promise<boolean> {
    const a = fullScriptAttributed({ ...this.opts.base, table: this.scratch }, d, exclude, { hooks: false });
    try {
      await this.opts.nft(a.script + `delete table inet ${this.scratch}\n`);
      return true;
    } catch {
      return false;
    }
  }
  /**
   * The objects of `d` libnftables refuses: each found as the shortest
   * refused prefix of the objects in script order (the ones before it are
   * the ones it may depend on), by bisection.
   */
  private async culprits(d: DesiredState, exclude: Set<string>): Promise<string[] | undefined> {
    const order = [...new Set(fullScriptAttributed(this.opts.base, d, exclude).lineOwners)];
    if (!(await this.accepted(d, new Set([...exclude, ...order.filter((o) => o !== BASE_ID)])))) return undefined;
    const found: string[] = [];
    let start = 1; // order[0] is the base
    const upto = (k: number) => new Set([...exclude, ...found, ...order.slice(k)]); // keeps order[0..k)
    while (start < order.length) {
      if (await this.accepted(d, upto(order.length))) break;
      let lo = start; // order[0..lo) is accepted
      let hi = order.length; // order[0..hi) is refused
      while (hi - lo > 1) {
        const mid = (lo + hi) >> 1;
        if (await this.accepted(d, upto(mid))) lo = mid;
        else hi = mid;
      }
      found.push(order[hi - 1]!);
      start = hi;
    }
    return found;
  }
  /** A full resync; when refused, its culprits are left out and reported, everything else is programmed. */
  async applyFull(next: DesiredState, exclude: Set<string>): Promise<{ applied: DesiredState; commands: number }> {
    let a = fullScriptAttributed(this.opts.base, next, exclude);
    // Objects the renderer refused (the compiler should have): left out like a kernel refusal.
    for (const u of a.unrendered) {
      const id = ownerId(u.owner);
      exclude.add(id);
      this.kernelRefused.set(id, ownerFingerprint(next, id));
      this.tell({ owner: u.owner, stage: 'model', reason: u.reason });
    }
    try {
      await this.opts.nft(a.script);
      return { applied: withoutOwners(next, exclude), commands: a.lineOwners.length };
    } catch (e) {
      const found = await this.culprits(next, exclude);
      if (!found?.length) throw e; // the base itself, or not reproducible in the scratch table: retried
      for (const id of found) {
        exclude.add(id);
        this.kernelRefused.set(id, ownerFingerprint(next, id));
        this.tell({ owner: a.owners.get(id)!, stage: 'kernel', reason: (e as Error).message.slice(0, 512) });
      }
      a = fullScriptAttributed(this.opts.base, next, exclude);
      await this.opts.nft(a.script);
      return { applied: withoutOwners(next, exclude), commands: a.lineOwners.length };
    }
  }
}
