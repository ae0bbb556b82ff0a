// The CNI seam: what the dispatcher (src/cni/dispatch.ts) hands a plugin's
// handlers, and the one internal result representation (converted to each
// spec version on output by src/cni/result.ts).

import type { Logger } from '../log/types.js';
import type { LogThrottle } from '../log/throttle.js';

export const SUPPORTED_VERSIONS = ['0.3.0', '0.3.1', '0.4.0', '1.0.0', '1.1.0'] as const;
export type CniVersion = (typeof SUPPORTED_VERSIONS)[number];

export type CniCommand = 'ADD' | 'DEL' | 'CHECK' | 'VERSION' | 'STATUS' | 'GC';

/** Injected IO: tests and the agent never touch process.* */
export interface CniIO {
  env: Record<string, string | undefined>;
  stdin: string | Buffer;
  stdout: (chunk: string) => void;
  stderr: (chunk: string) => void;
}

export interface CniArgs {
  K8S_POD_NAMESPACE?: string;
  K8S_POD_NAME?: string;
  K8S_POD_INFRA_CONTAINER_ID?: string;
  K8S_POD_UID?: string;
  /** Requested addresses from `IP=`: one IPv4 and/or one IPv6, comma-separated. */
  IP?: string;
  IgnoreUnknown?: string;
  [k: string]: string | undefined;
}

/** Internal result: the CNI 1.1 shape (superset of the older ones). */
export interface CniInterface {
  name: string;
  mac?: string;
  mtu?: number;
  sandbox?: string;
  socketPath?: string;
  pciID?: string;
}
export interface CniIPConfig {
  /** CIDR notation: the address with its prefix length. */
  address: string;
  gateway?: string;
  /** Index into interfaces[]. */
  interface?: number;
}
export interface CniRoute {
  dst: string;
  gw?: string;
  mtu?: number;
  advmss?: number;
  priority?: number;
  table?: number;
  scope?: number;
}
export interface CniDNS {
  nameservers?: string[];
  domain?: string;
  search?: string[];
  options?: string[];
}
export interface CniResult {
  interfaces?: CniInterface[];
  ips?: CniIPConfig[];
  routes?: CniRoute[];
  dns?: CniDNS;
}

/**
 * Everything a handler needs about one invocation, already validated.
 * `Rt`: the plugin's runtime (src/plugins/main/runtime.ts for ours), built by
 * the dispatcher's caller and passed through as `runtime`.
 */
export interface CniContext<Conf = Record<string, unknown>, Rt = undefined> {
  command: CniCommand;
  /** The version results are printed in (netconf cniVersion, or the highest of cniVersions). */
  cniVersion: CniVersion;
  containerId: string;
  netns: string;
  ifname: string;
  args: CniArgs;
  /** CNI_PATH split on ':' */
  path: string[];
  /** The netconf as received (JSON-parsed). Delegation passes this on. */
  rawConf: Record<string, unknown>;
  /** The netconf after the handler's own parse(). */
  conf: Conf;
  /** prevResult converted to the internal representation, when present. */
  prevResult?: CniResult;
  env: Record<string, string | undefined>;
  log: Logger;
  /** What the process serving this invocation lends it (datastores, dataplane, …): PluginSpec.runtime. */
  runtime: Rt;
}

export interface StatusOutcome {
  ok: boolean;
  /** 50 (plugin not available) or 51 (limited connectivity) when !ok. */
  code?: 50 | 51;
  msg?: string;
}

export interface CniHandlers<Conf = Record<string, unknown>, Rt = undefined> {
  /** Validate the raw netconf; throw CniError(7, ...) naming the field, value and fix. */
  parse(raw: Record<string, unknown>, command: CniCommand): Conf;
  add(ctx: CniContext<Conf, Rt>): Promise<CniResult>;
  del(ctx: CniContext<Conf, Rt>): Promise<void>;
  check(ctx: CniContext<Conf, Rt>): Promise<void>;
  status(ctx: CniContext<Conf, Rt>): Promise<void>;
  /** ctx.rawConf['cni.dev/valid-attachments'] holds [{containerID, ifname}]. */
  gc(ctx: CniContext<Conf, Rt>): Promise<void>;
}

/**
 * What an executable gives the dispatcher (src/cni/dispatch.ts: `dispatch(io, plugin): Promise<exitCode>`).
 * A plugin with a runtime (`Rt` not undefined) must be given one: handed to every handler as ctx.runtime.
 */
export type PluginSpec<Conf = Record<string, unknown>, Rt = undefined> = PluginSpecBase<Conf, Rt> &
  (undefined extends Rt ? { runtime?: Rt } : { runtime: Rt });

export interface PluginSpecBase<Conf, Rt> {
  /** 'netplugin' | 'netplugin-ipam' (used in VERSION output and logs). */
  name: string;
  /**
   * Serves many invocations in one process (the agent): the dispatcher keeps each distinct
   * netconf it parsed (by command and stdin) and hands the same frozen objects to later requests.
   */
  resident?: boolean;
  /** Loaded only for commands that need it (VERSION loads nothing). */
  load(): Promise<CniHandlers<Conf, Rt>>;
  /**
   * Optional: the logger for one invocation. Default (src/cni/dispatch.ts):
   * io.stderr plus the netconf's log file, closed when the call ends.
   */
  createLog?(
    rawConf: Record<string, unknown>,
    context: { containerId?: string | undefined; podNamespace?: string | undefined; podName?: string | undefined },
    io: CniIO,
  ): Logger;
  /** Optional, for the default logger: a long-running host's throttle of repeated failures (the agent's). */
  logThrottle?: LogThrottle;
}

/** One entry of GC's `cni.dev/valid-attachments` (read with validAttachments() in src/cni/dispatch.ts). */
export interface CniAttachment {
  containerID: string;
  ifname: string;
}
