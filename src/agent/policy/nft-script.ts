// nft scripts for the `inet netplugin` table: the static base (installed at
// agent start, kept across restarts), a full resync that replaces the table in
// one transaction, and the incremental transaction between two desired states.
// Only this table is ever named: other tables (portmap's, kube-proxy's, the
// NAT table of the node agent) are never touched.
import { TABLE, nftComment, sameRules, type DesiredState, type SetState } from './compile.js';

export interface BaseOptions {
  /** Host veth name prefixes of pods (netconf host_veth_prefix; default npi). */
  vethPrefixes: string[];
  /**
   * The table's name in family inet (default `netplugin`). Only for several
   * agents sharing one network namespace (the test suites run side by side);
   * each then owns its own table.
   */
  table?: string;
}

const tableRef = (o: { table?: string } | undefined) => `inet ${o?.table ?? TABLE}`;

const ND = 'icmpv6 type { nd-neighbor-solicit, nd-neighbor-advert, nd-router-solicit }';

/**
 * The base chains and maps, as `add` commands. A pod interface (by prefix)
 * that is not in @wl-known is dropped in both directions: a new pod is
 * isolated from the moment its veth exists until its chains are programmed.
 */
export function baseCommands(opts: BaseOptions): string[] {
  const T = tableRef(opts);
  const cmds = [
    `add table ${T}`,
    `add set ${T} wl-known { type ifname; ${nftComment('pod interfaces whose policy is programmed')}; }`,
    `add map ${T} to-wl { type ifname : verdict; ${nftComment('traffic to a pod: its ingress chain')}; }`,
    `add map ${T} from-wl { type ifname : verdict; ${nftComment('traffic from a pod: its egress chain')}; }`,
    // Egress (of the sending pod) and ingress (of the receiving pod) are two base chains on the
    // forward hook: an `accept` in one ends only that chain, the other still decides.
    `add chain ${T} forward { type filter hook forward priority filter; policy accept; ${nftComment('egress of pods: the sender decides')}; }`,
    `add chain ${T} forward-in { type filter hook forward priority filter; policy accept; ${nftComment('ingress of pods: the receiver decides')}; }`,
    `add chain ${T} input { type filter hook input priority filter; policy accept; }`,
  ];
  for (const p of opts.vethPrefixes) {
    cmds.push(`add rule ${T} forward iifname "${p}*" iifname != @wl-known drop ${nftComment('pod interface not programmed yet')}`);
    cmds.push(`add rule ${T} forward-in oifname "${p}*" oifname != @wl-known drop ${nftComment('pod interface not programmed yet')}`);
    cmds.push(`add rule ${T} input iifname "${p}*" iifname != @wl-known drop ${nftComment('pod interface not programmed yet')}`);
  }
  cmds.push(
    `add rule ${T} forward ct state established,related accept ${nftComment('replies of allowed connections')}`,
    `add rule ${T} forward iifname vmap @from-wl`,
    `add rule ${T} forward-in ct state established,related accept ${nftComment('replies of allowed connections')}`,
    `add rule ${T} forward-in oifname vmap @to-wl`,
    `add rule ${T} input ct state established,related accept ${nftComment('replies of allowed connections')}`,
    `add rule ${T} input iifname @wl-known ${ND} accept ${nftComment('neighbour discovery with the host')}`,
    `add rule ${T} input iifname vmap @from-wl`,
  );
  return cmds;
}

const q = (ifname: string) => `"${ifname}"`;

function setDecl(T: string, name: string, s: SetState): string {
  return `add set ${T} ${name} { type ${s.type};${s.flags ? ` flags ${s.flags};` : ''} }`;
}

function elements(T: string, kind: 'add' | 'delete', where: string, items: Iterable<string>): string[] {
  const out: string[] = [];
  let batch: string[] = [];
  const flush = () => {
    if (batch.length) out.push(`${kind} element ${T} ${where} { ${batch.join(', ')} }`);
    batch = [];
  };
  for (const e of items) {
    batch.push(e);
    if (batch.length >= 500) flush();
  }
  flush();
  return out;
}

/** The whole table from nothing, replacing what is there, in one transaction (no gap for existing pods). */
export function fullScript(base: BaseOptions, d: DesiredState): string {
  const T = tableRef(base);
  const cmds = [`add table ${T}`, `delete table ${T}`, ...baseCommands(base)];
  cmds.push(...diffCommands(emptyState(), d, base));
  return cmds.join('\n') + '\n';
}

export function emptyState(): DesiredState {
  return { chains: new Map(), sets: new Map(), toWl: new Map(), fromWl: new Map() };
}

/**
 * The commands turning table content `a` into `b`: new sets and chains first,
 * set elements, refilled chains, map elements, then what went away
 * (chains flushed before any is deleted, so references between them are gone).
 */
export function diffCommands(a: DesiredState, b: DesiredState, opts?: { table?: string }): string[] {
  const T = tableRef(opts);
  const cmds: string[] = [];
  for (const [name, s] of b.sets) {
    const old = a.sets.get(name);
    if (old === s) continue; // shared with the previous state by the incremental compiler: unchanged
    if (!old || old.type !== s.type) {
      if (old) throw new Error(`set ${name} changed type`); // names hash their content's kind, so this cannot happen
      cmds.push(setDecl(T, name, s));
      cmds.push(...elements(T, 'add', name, s.elements));
    } else {
      const gone = [...old.elements].filter((e) => !s.elements.has(e));
      const added = [...s.elements].filter((e) => !old.elements.has(e));
      cmds.push(...elements(T, 'delete', name, gone), ...elements(T, 'add', name, added));
    }
  }
  const newChains = [...b.chains.keys()].filter((c) => !a.chains.has(c));
  for (const c of newChains) cmds.push(`add chain ${T} ${c}`);
  for (const [name, rules] of b.chains) {
    const old = a.chains.get(name);
    if (old === rules || (old && sameRules(old, rules))) continue;
    if (old) cmds.push(`flush chain ${T} ${name}`);
    for (const r of rules) cmds.push(`add rule ${T} ${name} ${r}`);
  }
  const removedChains = [...a.chains.keys()].filter((c) => !b.chains.has(c));
  // Map entries: the verdict of an interface changes only when its chain name does.
  const known = (m: Map<string, string>) => new Set(m.keys());
  for (const [map, am, bm] of [['to-wl', a.toWl, b.toWl], ['from-wl', a.fromWl, b.fromWl]] as const) {
    const del = [...am].filter(([k, v]) => bm.get(k) !== v).map(([k]) => q(k));
    const add = [...bm].filter(([k, v]) => am.get(k) !== v).map(([k, v]) => `${q(k)} : ${v}`);
    cmds.push(...elements(T, 'delete', map, del), ...elements(T, 'add', map, add));
  }
  const ka = new Set([...known(a.toWl), ...known(a.fromWl)]);
  const kb = new Set([...known(b.toWl), ...known(b.fromWl)]);
  // wl-known last among additions: a pod is let through only once its chains and map entries exist.
  cmds.push(...elements(T, 'delete', 'wl-known', [...ka].filter((k) => !kb.has(k)).map(q)));
  cmds.push(...elements(T, 'add', 'wl-known', [...kb].filter((k) => !ka.has(k)).map(q)));
  for (const c of removedChains) cmds.push(`flush chain ${T} ${c}`);
  for (const c of removedChains) cmds.push(`delete chain ${T} ${c}`);
  for (const name of a.sets.keys()) if (!b.sets.has(name)) cmds.push(`delete set ${T} ${name}`);
  return cmds;
}
