// Public IPAM API, used in-process by the main plugin, by netplugin-ipam, by
// the node agent and by netpluginctl. The audit (ipam/audit.ts: netpluginctl's
// ipam check and its repairs) is imported on its own, off the per-exec path.
export { Ipam } from './allocator.js';
export { createIpam, type CreateIpamOptions, type IpamLock } from './service.js';
export { createIpamShared, type IpamShared } from './shared.js';
export type { AddressLocation, AssignRequest, Assigned, BlockUsage, HandleInfo, IpamOptions, Piggyback, PoolUsage, ReleaseOptions, Released } from './allocator.js';
export { serialize } from './core.js';
export type { IpamHostLock } from './types.js';
export { DEFAULT_BLOCK_SIZE, BLOCK_SIZE_RANGE, poolInfo, type PoolInfo, type PoolUse } from './pools.js';
export { handleIDFor, parseHandleID, sameHandle } from './handle.js';
export { TUNNEL_HANDLES, releaseNodeIpam, type NodeRelease } from './node-release.js';
export { IpamError, type IpamErrorKind } from './errors.js';
