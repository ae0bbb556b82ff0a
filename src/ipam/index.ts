// The IPAM interface: everything outside src/ipam/ uses only what this file
// exports (test/unit/layers.test.ts keeps it so). Users: the main plugin and
// netplugin-ipam in-process, the node agent, kube-controllers, netpluginctl.
//
// The model (docs/ipam.md has the long form):
// - An IPPool is carved into blocks (blockSize, DEFAULT_BLOCK_SIZE); a block is
//   affine to one node ("host:NODE") and holds that node's addresses, one
//   ordinal each, with the attribute of its holder. A node claims a block when
//   its own are full, borrows from a foreign one only when no pool has room.
// - A handle names one attachment (handleIDFor(network, containerID)); it
//   counts the addresses it holds per block. For every handle H and block B:
//   handle(H).block[B] >= the ordinals of B held by H, so an address never
//   exists without its handle (a crash leaves at worst a count too high).
// - Every write is a compare-and-swap of the datastore; a node's steps run one
//   at a time under the host lock its caller passes (createIpam's `lock`: the
//   plugins' flock, or 'none' for callers that are no plugin process of this
//   node). IPAM makes no lock of its own.
// - Ipam.assign takes the addresses of one request (AssignRequest), either
//   family, from chosen or requested pools; releaseByHandle frees them (DEL);
//   the inspection calls (usage, locate, handles, readiness) read only.
// - Extension point of the transaction: a request's `piggyback` (Piggyback)
//   adds the caller's writes to the transaction that takes its last address,
//   and a release's `alsoWrite` (ReleaseOptions) adds them to the one that
//   frees its handle: the main plugin's workload endpoint rides there, so an
//   ADD or a DEL on etcd is one datastore write.
// - Failures are IpamErrors with a kind; the CNI edge (cni/errors.ts) gives
//   them their codes. Datastore failures pass through as DatastoreErrors.
//
// Inside (not exported): block.ts is the pure block arithmetic (no IO);
// allocate/affinity/assign/batch/release/handle-store are the steps doing
// compare-and-swap IO on blocks, affinities and handles; reads.ts the cached
// reads; state.ts the types the steps share; shared.ts what the instances of
// one owner share (batch queues, blocks seen full); core.ts an instance's
// settings and its exclusive runner.
export { Ipam } from './allocator.js';
export { createIpam } from './service.js';
export { serialize } from './core.js';
export { createIpamShared, type IpamShared } from './shared.js';
export type { AssignRequest, Assigned, BlockUsage, IpamHostLock, Piggyback, PoolUsage } from './types.js';
export { allocationsIn } from './block.js';
export { handleIDFor, parseHandleID, sameHandle } from './handle.js';
export { TUNNEL_HANDLES, releaseNodeIpam } from './node-release.js';
export { IpamError, type IpamErrorKind } from './errors.js';
// netpluginctl's ipam check and its repairs (a bundle that never calls them leaves them out).
export {
  addressHolder,
  auditIpam,
  migrateHandleName,
  releaseEmptyBlock,
  repairHandle,
  type CheckOptions,
  type IpamReport,
} from './audit.js';
