// What the agent's ADD asks its policy controller before marking a pod interface name stale
// (src/dataplane/nft/programmed.ts): whether the table may hold an entry for the name at all.

/**
 * Whether the table may hold an entry for the interface name (in @wl-known): true when the
 * controller has not resynced yet, or the name is in the applied state or in the one a batch in
 * flight applies. The agent's ADD marks a name stale only then (elsewhere the interface is dropped
 * already, as a name not in @wl-known, and the mark would cost an nft run for nothing).
 */
export function isKnownOrUnsure(
  ifname: string,
  current: { endpoints: ReadonlyMap<string, unknown> } | undefined,
  applying: { endpoints: ReadonlyMap<string, unknown> } | undefined,
): boolean {
  return current === undefined || current.endpoints.has(ifname) || !!applying?.endpoints.has(ifname);
}
