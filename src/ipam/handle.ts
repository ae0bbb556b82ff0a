// Allocation identity: the IPAM handle of one attachment, how it is formed,
// compared, parsed back and stored. The one place that knows the format; every
// other module calls these.
//
// Format: `<network>.<containerID>` with every '.' of the network name doubled.
// The CNI spec lets both parts contain dots, so the plain join was ambiguous
// (container `x.y` on network `net` and container `y` on network `net.x` both
// gave `net.x.y` and shared an address). A container ID starts with a letter
// or digit (checked at the edge), so the separator is the first '.' not paired
// with a following one. Networks without a dot (the usual case) keep the
// handles they always had.
//
// Comparison is byte-exact: container IDs are case-sensitive (`CAFE01` and
// `cafe01` are two sandboxes), so a handle never matches another case.
import { createHash } from 'node:crypto';

export function handleIDFor(network: string, containerId: string): string {
  return `${network.replaceAll('.', '..')}.${containerId}`;
}

/** The network and container ID of a handle; undefined when it is not in the format above. */
export function parseHandleID(id: string): { network: string; containerId: string } | undefined {
  let net = '';
  for (let i = 0; i < id.length; i++) {
    if (id[i] !== '.') {
      net += id[i];
    } else if (id[i + 1] === '.') {
      net += '.';
      i++;
    } else {
      const containerId = id.slice(i + 1);
      return net !== '' && containerId !== '' ? { network: net, containerId } : undefined;
    }
  }
  return undefined;
}

export function sameHandle(a: string | null | undefined, b: string | null | undefined): boolean {
  return a != null && b != null && a === b;
}

/** Handles that were valid Kubernetes object names already keep their name. */
const PLAIN_NAME = /^[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?$/;

/**
 * The IPAMHandle object name. Kubernetes names are lower-case, and folding
 * case made `net.CAFE01` and `net.cafe01` one object; any handle that is not
 * already a valid lower-case name is stored as a readable lower-case stem
 * plus a hash of the exact ID. The object also records the exact ID
 * (spec.handleID), which readers compare byte-exactly, so even a contrived
 * name clash is refused rather than shared.
 */
export function handleName(handleID: string): string {
  if (PLAIN_NAME.test(handleID) && !/\.\.|\.-|-\./.test(handleID)) return handleID;
  const stem = handleID
    .toLowerCase()
    .replace(/[^a-z0-9-]+/g, '-')
    .replace(/^-+|-+$/g, '')
    .slice(0, 180);
  const digest = createHash('sha256').update(handleID).digest('hex').slice(0, 32);
  return `${stem || 'handle'}.h-${digest}`;
}

/**
 * The name handles had before identities became exact (case folded); read as a fallback until `netpluginctl ipam check
 * --fix` migrates them.
 */
export function legacyHandleName(handleID: string): string {
  return handleID.toLowerCase();
}
