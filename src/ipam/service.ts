// How other layers get an IPAM instance: createIpam(ds, opts), the one place
// that decides which host-wide lock an instance takes. Plugins and the
// agent's CNI path serve this node's pods and serialise on the node's lock;
// cluster-wide callers (kube-controllers, netpluginctl, the agent's route
// controller reading its own block) run on no particular node and rely on the
// datastore's compare-and-swap alone (docs/ipam.md).
import { Ipam, type IpamOptions } from './allocator.js';
import { hostLockPath } from './lock.js';

export type IpamLock =
  /** This node's lock (hostLockPath of the netconf's ipam_lock_file and the environment). */
  | { file?: string | undefined; env: Record<string, string | undefined> }
  /** No host lock: a caller that is not one of this node's plugin processes. */
  | 'none';

export interface CreateIpamOptions extends Omit<IpamOptions, 'lockPath'> {
  lock: IpamLock;
}

export function createIpam(ds: ConstructorParameters<typeof Ipam>[0], opts: CreateIpamOptions): Ipam {
  const { lock, ...rest } = opts;
  return new Ipam(ds, { ...rest, lockPath: lock === 'none' ? null : hostLockPath(lock.file, lock.env) });
}
