// natOutgoing: traffic from an address in a `natOutgoing: true` pool to a
// destination outside every pool and not a node address of the cluster is
// masqueraded to the node's address. The rules live in our own tables
// (`ip netplugin-nat`, `ip6 netplugin-nat`), replaced atomically as a whole on
// every change (one libnftables transaction: never a moment without them);
// nothing else in the ruleset is touched. natScript computes the tables (pure);
// dataplane/nft/table.ts runs the script when it changed.
import type { Logger } from '../../log/types.js';
import type { Datastore } from '../../datastore/types.js';
import { formatCidr } from '../../net/cidr.js';
import { flushConntrack } from '../../dataplane/conntrack.js';
import { nftRun } from '../../dataplane/nft/run.js';
import { ownedTables } from '../../dataplane/nft/table.js';
import { addrOf, poolViews, type PoolView } from '../routes/desired.js';
import { Informer } from '../../watch/informer.js';
import { datastoreSource } from '../../datastore/list-watch.js';
import {
  FLOATING_TABLE,
  floatingScript,
  heldBy,
  parseTranslations,
  resolveFloatingIPs,
  type FloatingConflict,
  type FloatingInvalid,
} from './floating.js';

export const NAT_TABLE = 'netplugin-nat';

interface NatInput {
  pools: readonly PoolView[];
  /** Node addresses of the cluster (any family). */
  nodeIPs: readonly string[];
}

/** The nft script that makes our NAT tables exactly what `input` asks for. */
export function natScript(input: NatInput): string {
  const out: string[] = [];
  for (const family of [4, 6] as const) {
    const fam = family === 4 ? 'ip' : 'ip6';
    const type = family === 4 ? 'ipv4_addr' : 'ipv6_addr';
    const pools = input.pools.filter((p) => p.cidr.family === family);
    const nat = pools.filter((p) => p.spec.natOutgoing && !p.spec.disabled);
    const nodes = input.nodeIPs.filter((ip) => ip.includes(':') === (family === 6));
    // Create-then-delete makes the delete valid when the table does not exist yet.
    out.push(`table ${fam} ${NAT_TABLE} {}`, `delete table ${fam} ${NAT_TABLE}`);
    if (!nat.length) continue;
    const elems = (xs: string[]) => (xs.length ? ` elements = { ${[...new Set(xs)].join(', ')} };` : '');
    out.push(
      `table ${fam} ${NAT_TABLE} {`,
      `  set pools { type ${type}; flags interval; auto-merge;${elems(pools.map((p) => formatCidr(p.cidr)))} }`,
      `  set nat-pools { type ${type}; flags interval; auto-merge;${elems(nat.map((p) => formatCidr(p.cidr)))} }`,
      `  set nodes { type ${type};${elems(nodes)} }`,
      `  chain postrouting {`,
      `    type nat hook postrouting priority srcnat; policy accept;`,
      `    ${fam} saddr @nat-pools ${fam} daddr != @pools ${fam} daddr != @nodes masquerade fully-random`,
      `  }`,
      `}`,
    );
  }
  return out.join('\n') + '\n';
}

export interface NatController {
  stop(): void;
}

interface NatOptions {
  ds: Datastore;
  log: Logger;
  run?: (script: string) => void;
  /** This node: its endpoints' floating IPs are translated here (none without it). */
  node?: string;
  /** A floating IP claimed by an endpoint of this node that another endpoint holds (reported once). */
  onFloatingConflict?: (c: FloatingConflict) => void;
  /** An endpoint of this node with an ipNATs entry left out (reported once). */
  onFloatingInvalid?: (i: FloatingInvalid) => void;
  /** Connections to floating IPs this node no longer translates are cut (tests replace it). */
  flush?: (addrs: string[]) => void;
}

export function startNatController(o: NatOptions): NatController {
  const { ds, log } = o;
  // Loaded by the first script that runs: only an agent with the pod network on pays for the binding.
  const tables = ownedTables(o.run);
  const floatingTables = ownedTables(o.run);
  let timer: NodeJS.Timeout | undefined;
  let reported = false;
  let stopped = false;
  // What this node translated last (floating -> internal), and the problems already reported.
  let translated = new Map<string, string>();
  let seen = new Set<string>();
  let floatingFailed = false;
  let first = true;
  const applyFloating = async (): Promise<boolean> => {
    if (o.node === undefined || !weps) return true;
    if (first && !o.run) translated = await previousTranslations();
    first = false;
    const view = resolveFloatingIPs(weps.list(), poolViews(pools.list()));
    const mine = heldBy(view, o.node);
    const fresh = new Set<string>();
    for (const c of view.conflicts) {
      if (c.refused.node !== o.node) continue;
      const k = `c ${c.external} ${c.refused.endpoint} ${c.holder.endpoint}`;
      fresh.add(k);
      if (seen.has(k)) continue;
      log.warn('floating IP held by an older endpoint: not translated for this one', {
        floatingIP: c.external,
        endpoint: c.refused.endpoint,
        holder: c.holder.endpoint,
        holderNode: c.holder.node,
      });
      o.onFloatingConflict?.(c);
    }
    for (const i of view.invalid) {
      if (i.node !== o.node) continue;
      const k = `i ${i.endpoint} ${i.problem}`;
      fresh.add(k);
      if (seen.has(k)) continue;
      log.warn(`floating IP of endpoint ${i.endpoint} ignored: ${i.problem}`, { endpoint: i.endpoint });
      o.onFloatingInvalid?.(i);
    }
    seen = fresh;
    try {
      if ((await floatingTables.apply(floatingScript(mine))) && (mine.length || translated.size)) {
        log.info('floating IPs translated', {
          floatingIPs: mine.map((c) => `${c.external}->${c.internal} (${c.endpoint})`),
        });
      }
      floatingFailed = false;
    } catch (e) {
      if (!floatingFailed)
        log.error('cannot program floating IPs (nftables); their traffic is not translated', {
          error: (e as Error).message,
        });
      floatingFailed = true;
      return false;
    }
    // Connections still translated to an address that no longer holds the floating IP here would
    // keep flowing through their conntrack entries: cut them.
    const now = new Map(mine.map((c) => [c.external, c.internal]));
    const gone = [...translated].filter(([e, i]) => now.get(e) !== i).map(([e]) => e);
    translated = now;
    if (gone.length) (o.flush ?? defaultFlush)(gone);
    return true;
  };
  // What an earlier run of the agent left in the table (none: nothing to cut).
  const previousTranslations = async (): Promise<Map<string, string>> => {
    const out = new Map<string, string>();
    for (const map of ['fip4', 'fip6']) {
      try {
        for (const [e, i] of parseTranslations(nftRun(`list map inet ${FLOATING_TABLE} ${map}\n`))) out.set(e, i);
      } catch {
        /* no table or no such map */
      }
    }
    return out;
  };
  const defaultFlush = (addrs: string[]) => flushConntrack(addrs, log);
  const apply = async () => {
    const floatingOk = await applyFloating();
    if (!floatingOk) schedule(5000);
    const input: NatInput = {
      pools: poolViews(pools.list()),
      nodeIPs: nodes
        .list()
        .flatMap((n) => [addrOf(n.spec.ipv4Address), addrOf(n.spec.ipv6Address)].filter((x): x is string => !!x)),
    };
    try {
      if (!(await tables.apply(natScript(input)))) return;
      reported = false;
      log.info('natOutgoing rules updated', {
        natPools: input.pools.filter((p) => p.spec.natOutgoing && !p.spec.disabled).map((p) => p.name),
      });
    } catch (e) {
      if (!reported)
        log.error('cannot program natOutgoing (nftables); pods in natOutgoing pools keep their source address', {
          error: (e as Error).message,
        });
      reported = true;
      schedule(5000);
    }
  };
  // One apply at a time: the floating part remembers what it translated between runs.
  let running: Promise<void> = Promise.resolve();
  const schedule = (ms = 20) => {
    if (stopped) return;
    clearTimeout(timer);
    timer = setTimeout(() => {
      running = running.then(apply).catch((e: Error) => log.warn('nat: apply failed', { error: e.message }));
    }, ms);
  };
  // The shared list+watch layer (re-list on compaction / 410 / a broken watch).
  const onError = (e: Error, source: string) => log.warn('nat: watch failed; re-listing', { source, error: e.message });
  const pools = new Informer(datastoreSource(ds, 'IPPool'), { onChange: () => schedule() }, { onError });
  const nodes = new Informer(datastoreSource(ds, 'Node'), { onChange: () => schedule() }, { onError });
  // Endpoints only when floating IPs are translated here.
  const weps =
    o.node !== undefined
      ? new Informer(datastoreSource(ds, 'WorkloadEndpoint'), { onChange: () => schedule() }, { onError })
      : undefined;
  pools.start();
  nodes.start();
  weps?.start();
  // Empty lists report no change, yet the first apply must run (it removes our tables
  // left from an earlier run when no pool asks for NAT any more).
  void Promise.all([pools.whenSynced(), nodes.whenSynced(), weps?.whenSynced()]).then(() => {
    if (!stopped) schedule();
  });
  return {
    stop() {
      stopped = true;
      clearTimeout(timer);
      pools.stop();
      nodes.stop();
      weps?.stop();
    },
  };
}
