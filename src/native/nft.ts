// nftables for the agent's controllers (NAT, policy), through libnftables in
// the addon (native/core/nft.cc): no `nft` process per change, and a script is one
// atomic transaction. Every caller owns one table and names it in its script;
// nothing here lists or flushes the whole ruleset.
import { addonInstance, openNetns, type NetNS, type NftRawOptions, type NftRawResult } from './index.js';

interface NftOptions {
  /** Output as JSON (for `list` commands). */
  json?: boolean;
  /** Print what was added (with handles): `nft --echo --handle`. */
  echo?: boolean;
  /** Show rule handles in listings. */
  handles?: boolean;
  /**
   * Run in this network namespace (a path such as /var/run/netns/x, or an open handle); default: the calling thread's.
   */
  netns?: string | NetNS;
}

/** The package a node needs for nftables features (Debian/Ubuntu name). */
const NFT_PACKAGE = 'libnftables1';

/** libnftables refused the script (syntax, a missing table, a kernel error) or is not installed. */
export class NftError extends Error {
  override name = 'NftError';
  /** true when libnftables.so.1 could not be loaded at all. */
  readonly missing: boolean;
  /** libnftables' own error text (with the offending line and a caret). */
  readonly detail: string;
  readonly rc: number;
  constructor(r: NftRawResult, what: string) {
    const detail = r.error.trim();
    super(
      r.missing
        ? `nftables is not available: ${detail}; install the ${NFT_PACKAGE} package (apt-get install ${NFT_PACKAGE}) ` +
            `on this node`
        : `nftables refused ${what}: ${detail || `return code ${r.rc}`}`,
    );
    this.missing = r.missing;
    this.detail = detail;
    this.rc = r.rc;
  }
}

function describeScript(script: string): string {
  const first = script.trim().split('\n')[0] ?? '';
  return first.length > 80 ? `"${first.slice(0, 77)}..."` : `"${first}"`;
}

function withNetns<T>(o: NftOptions | undefined, fn: (raw: NftRawOptions) => T): T {
  const raw: NftRawOptions = { json: o?.json ?? false, echo: o?.echo ?? false, handles: o?.handles ?? false };
  if (typeof o?.netns !== 'string') {
    if (o?.netns) raw.netns = o.netns;
    return fn(raw);
  }
  const ns = openNetns(o.netns);
  try {
    raw.netns = ns;
    return fn(raw);
  } finally {
    // The addon dup's the fd for an async run, so closing here is safe either way.
    ns.close();
  }
}

/** Runs an nft script as one transaction; returns nft's output (listings, echo). Throws NftError. */
export function nftRun(script: string, o?: NftOptions): string {
  const r = withNetns(o, (raw) => addonInstance().nftRun(script, raw));
  if (!r.ok) throw new NftError(r, describeScript(script));
  return r.output;
}

/** nftRun on the libuv threadpool: a large ruleset never stalls the agent's event loop. */
export async function nftRunAsync(script: string, o?: NftOptions): Promise<string> {
  const r = await withNetns(o, (raw) => addonInstance().nftRunAsync(script, raw));
  if (!r.ok) throw new NftError(r, describeScript(script));
  return r.output;
}

/** true when libnftables loads; otherwise the message saying what to install. */
export function nftAvailable(): true | string {
  const r = addonInstance().nftRun('', {});
  return r.missing ? new NftError(r, '').message : true;
}
