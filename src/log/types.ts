// The logging interface every layer writes to. It lives at the bottom (log/),
// so the agent, IPAM, the datastores and the controllers depend on logging,
// not on the CNI layer that happens to hand a logger to a plugin command.
export interface Logger {
  error(msg: string, fields?: Record<string, unknown>): void;
  warn(msg: string, fields?: Record<string, unknown>): void;
  info(msg: string, fields?: Record<string, unknown>): void;
  debug(msg: string, fields?: Record<string, unknown>): void;
}
