// The node's own kernel settings (sysctls) the agent keeps: a desired value per
// key in, only the keys whose value differs written. Pod-side and host-veth
// sysctls belong to the workload (workload.ts), not here.
import { netlink } from '../native/index.js';

/** Reads and writes sysctls (`net.*` keys in sysctl(8)'s dotted form). */
export interface SysctlIO {
  get(key: string): string;
  set(key: string, value: string): void;
}

/** The sysctls of the calling thread's network namespace (the addon loads on first use). */
export function nodeSysctls(): SysctlIO {
  return {
    get: (key) => withNetlink((nl) => nl.sysctlGet(key)),
    set: (key, value) => withNetlink((nl) => nl.sysctlSet(key, value)),
  };
}

function withNetlink<T>(fn: (nl: ReturnType<typeof netlink>) => T): T {
  const nl = netlink();
  try {
    return fn(nl);
  } finally {
    nl.close();
  }
}

/** Writes each key whose value differs from `want`; returns the keys it changed (none: all were right). */
export function applySysctls(want: Readonly<Record<string, string>>, io: SysctlIO = nodeSysctls()): string[] {
  const changed: string[] = [];
  for (const [key, value] of Object.entries(want)) {
    if (io.get(key) === value) continue;
    io.set(key, value);
    changed.push(key);
  }
  return changed;
}
