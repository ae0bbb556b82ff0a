// Pure operations on an IPAMBlock spec (no I/O). The allocator reads a block,
// applies one of these to a copy, and writes it back with compare-and-swap.
import type { AllocationAttribute, IPAMBlockSpec } from '../model/resources.js';
import { sameHandle } from './handle.js';
import { cidrSize, formatIP, nthAddress, parseCidr, type Cidr } from '../net/cidr.js';

export function newBlockSpec(cidr: Cidr, text: string, affinity: string | null): IPAMBlockSpec {
  const n = Number(cidrSize(cidr));
  return {
    cidr: text,
    affinity,
    allocations: new Array<number | null>(n).fill(null),
    unallocated: Array.from({ length: n }, (_, i) => i),
    attributes: [],
  };
}

/** Throws when a stored block is not self-consistent (hand-edited or written by a buggy tool). */
export function checkBlock(spec: IPAMBlockSpec): Cidr {
  const c = parseCidr(spec.cidr);
  const n = Number(cidrSize(c));
  if (
    !Array.isArray(spec.allocations) ||
    spec.allocations.length !== n ||
    !Array.isArray(spec.unallocated) ||
    !Array.isArray(spec.attributes)
  ) {
    throw new Error(
      `IPAMBlock ${spec.cidr} is malformed: allocations must have ${n} entries (netpluginctl ipam check can repair it)`,
    );
  }
  return c;
}

export function handleAt(spec: IPAMBlockSpec, ord: number): AllocationAttribute | undefined {
  const idx = spec.allocations[ord];
  return idx == null ? undefined : spec.attributes[idx];
}

/** Ordinals held by `handleID`. */
export function ordinalsOf(spec: IPAMBlockSpec, handleID: string): number[] {
  const out: number[] = [];
  spec.allocations.forEach((idx, ord) => {
    if (idx != null && sameHandle(spec.attributes[idx]?.handle_id, handleID)) out.push(ord);
  });
  return out;
}

export function allocatedCount(spec: IPAMBlockSpec): number {
  let n = 0;
  for (const a of spec.allocations) if (a != null) n++;
  return n;
}

export function isEmpty(spec: IPAMBlockSpec): boolean {
  return spec.allocations.every((a) => a == null);
}

function attrIndex(spec: IPAMBlockSpec, attr: AllocationAttribute): number {
  const key = JSON.stringify(attr);
  const found = spec.attributes.findIndex((a) => JSON.stringify(a) === key);
  if (found >= 0) return found;
  spec.attributes.push(attr);
  return spec.attributes.length - 1;
}

/** Allocate the next free ordinal (in `unallocated` order) to `attr`; undefined when full. Mutates. */
export function allocateNext(spec: IPAMBlockSpec, attr: AllocationAttribute): number | undefined {
  while (spec.unallocated.length) {
    const ord = spec.unallocated.shift()!;
    // Tolerate an `unallocated` list that disagrees with `allocations`
    // (allocations is the truth; unallocated is only the hand-out order).
    if (spec.allocations[ord] !== null) continue;
    spec.allocations[ord] = attrIndex(spec, attr);
    return ord;
  }
  return undefined;
}

/** Allocate a specific ordinal; the caller checked that it is free. Mutates. */
export function allocateOrdinal(spec: IPAMBlockSpec, ord: number, attr: AllocationAttribute): void {
  spec.allocations[ord] = attrIndex(spec, attr);
  spec.unallocated = spec.unallocated.filter((o) => o !== ord);
}

/**
 * Free the given ordinals (already-free ones are ignored). Freed ordinals go to the back of the hand-out order, so a
 * just-released address is reused last. Mutates.
 */
export function freeOrdinals(spec: IPAMBlockSpec, ords: number[]): number[] {
  const freed: number[] = [];
  for (const ord of ords) {
    if (spec.allocations[ord] == null) continue;
    spec.allocations[ord] = null;
    spec.unallocated.push(ord);
    freed.push(ord);
  }
  compactAttributes(spec);
  return freed;
}

/** Drop attributes no allocation refers to, renumbering the references. */
function compactAttributes(spec: IPAMBlockSpec): void {
  const used = new Map<number, number>();
  const attrs: AllocationAttribute[] = [];
  spec.allocations = spec.allocations.map((idx) => {
    if (idx == null) return null;
    let n = used.get(idx);
    if (n === undefined) {
      n = attrs.length;
      attrs.push(spec.attributes[idx] ?? { handle_id: null });
      used.set(idx, n);
    }
    return n;
  });
  spec.attributes = attrs;
}

export function addressOf(block: Cidr, ord: number): string {
  return formatIP(nthAddress(block, ord));
}

/** The allocated addresses of a block, in ordinal order, with their attributes (for scans outside IPAM). */
export function allocationsIn(spec: IPAMBlockSpec): Array<{ ip: string; attr: AllocationAttribute | undefined }> {
  const c = checkBlock(spec);
  const out: Array<{ ip: string; attr: AllocationAttribute | undefined }> = [];
  spec.allocations.forEach((idx, ord) => {
    if (idx !== null && idx !== undefined) out.push({ ip: addressOf(c, ord), attr: spec.attributes[idx] });
  });
  return out;
}
