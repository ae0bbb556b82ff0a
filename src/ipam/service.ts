// How other layers get an IPAM instance: createIpam(ds, opts), the one place
// that says which host lock an instance takes. Plugins and the agent's CNI
// path serve this node's pods and pass the node's lock (they own it:
// src/hostlock); cluster-wide callers (kube-controllers, netpluginctl, the
// agent's route controller reading its own block) run on no particular node
// and rely on the datastore's compare-and-swap alone (docs/ipam.md).
import { Ipam, type IpamOptions } from './allocator.js';
import type { IpamHostLock } from './types.js';

type IpamLock =
  /** This node's host lock, made by its owner (the plugins: hostlock's ipamHostLock). */
  | IpamHostLock
  /** No host lock: a caller that is not one of this node's plugin processes. */
  | 'none';

interface CreateIpamOptions extends Omit<IpamOptions, 'lock'> {
  lock: IpamLock;
}

export function createIpam(ds: ConstructorParameters<typeof Ipam>[0], opts: CreateIpamOptions): Ipam {
  const { lock, ...rest } = opts;
  return new Ipam(ds, { ...rest, lock: lock === 'none' ? null : lock });
}
