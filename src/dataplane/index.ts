// The dataplane's per-pod face: a plain WorkloadSpec in, veth + addresses +
// routes + sysctls out, all through the rtnetlink addon (loaded on first use,
// not on import). The node's other kernel parts (routing.ts, nft/, sysctl.ts,
// syscalls.ts) are imported by their path, so the per-pod path loads none of them.
export { linkLocalFromMac } from './names.js';
export {
  setupWorkload,
  createWorkloadSetup,
  teardownWorkload,
  teardownWorkloadAsync,
  checkWorkload,
  GATEWAY_V4,
  HostLinkInUseError,
} from './workload.js';
export type { WorkloadSpec, WorkloadState, TeardownOptions } from './spec.js';
export { createTrash, purgeTrash, TRASH_GROUP, type Trash } from './trash.js';
export { createConntrackFlusher, flushConntrack, type ConntrackFlusher } from './conntrack.js';
