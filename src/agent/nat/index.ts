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
import { ownedTables } from '../../dataplane/nft/table.js';
import { addrOf, poolViews, type PoolView } from '../routes/desired.js';
import { datastoreSource, Informer } from '../../watch/informer.js';

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

export function startNatController(o: { ds: Datastore; log: Logger; run?: (script: string) => void }): NatController {
  const { ds, log } = o;
  // Loaded by the first script that runs: only an agent with the pod network on pays for the binding.
  const tables = ownedTables(o.run);
  let timer: NodeJS.Timeout | undefined;
  let reported = false;
  let stopped = false;
  const apply = async () => {
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
  const schedule = (ms = 20) => {
    if (stopped) return;
    clearTimeout(timer);
    timer = setTimeout(() => void apply(), ms);
  };
  // The shared list+watch layer (re-list on compaction / 410 / a broken watch).
  const onError = (e: Error, source: string) => log.warn('nat: watch failed; re-listing', { source, error: e.message });
  const pools = new Informer(datastoreSource(ds, 'IPPool'), { onChange: () => schedule() }, { onError });
  const nodes = new Informer(datastoreSource(ds, 'Node'), { onChange: () => schedule() }, { onError });
  pools.start();
  nodes.start();
  // Empty lists report no change, yet the first apply must run (it removes our tables
  // left from an earlier run when no pool asks for NAT any more).
  void Promise.all([pools.whenSynced(), nodes.whenSynced()]).then(() => {
    if (!stopped) schedule();
  });
  return {
    stop() {
      stopped = true;
      clearTimeout(timer);
      pools.stop();
      nodes.stop();
    },
  };
}
