// The `inet netplugin` table as nft commands, from the typed model: the static
// base (installed at agent start, kept across restarts), a full resync that
// replaces the table in one transaction (each line attributed to the object it
// programs, so a refused batch can be narrowed to its culprit), and the
// incremental transaction between two desired states, diffed per chain by
// content hash (a chain whose hash did not change is not touched). Only this
// table is ever named: other tables (portmap's, kube-proxy's, the NAT table of
// the node agent) are never touched. All syntax comes from
// src/dataplane/nft/render.ts.
import { HOST_DISPATCH, TABLE, type DesiredState, type EndpointEntry } from './compile.js';
import {
  NftModelError,
  ownerId,
  type BaseChain,
  type Chain,
  type ElemType,
  type NftMap,
  type NftSet,
  type Owner,
  type Rule,
} from '../../dataplane/nft/model.js';
import {
  baseChainCommands,
  chainCommands,
  chainHash,
  elementCommands,
  mapCommand,
  mapElementCommands,
  ruleCommands,
  setCommand,
  tableRef as renderTableRef,
} from '../../dataplane/nft/render.js';

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

const tableRef = (o: { table?: string } | undefined) => renderTableRef(o?.table ?? TABLE);

/** The owner of the base table's own objects. */
const BASE_OWNER: Owner = { kind: 'Base', name: 'base ruleset' };
export const BASE_ID = ownerId(BASE_OWNER);

const IFNAME: ElemType[] = ['ifname'];

/** The base table as model values: its sets, maps and base chains. */
interface BaseTable {
  sets: Array<[string, NftSet]>;
  maps: Array<[string, NftMap]>;
  /** Regular chains the base chains jump to, created empty (the compiler's state fills them). */
  regular: Array<[string, string]>;
  chains: BaseChain[];
}

function baseTable(opts: BaseOptions): BaseTable {
  const pod = (dir: 'in' | 'out', p: string) => ({ m: 'ifname' as const, dir, name: p, prefix: true });
  const notKnown = (dir: 'in' | 'out'): Rule[] => [
    ...opts.vethPrefixes.map(
      (p): Rule => ({
        matches: [pod(dir, p), { m: 'ifnameSet', dir, set: 'wl-known', neg: true }],
        verdict: { v: 'drop' },
        comment: 'pod interface not programmed yet',
      }),
    ),
    // The plugin marks a host veth name here when it creates or deletes the veth: a pod re-created
    // under the name stays isolated until the agent programmed the endpoint now behind it.
    {
      matches: [{ m: 'ifnameSet', dir, set: 'wl-stale' }],
      verdict: { v: 'drop' },
      comment: 'pod interface re-created, not programmed yet',
    },
  ];
  const established: Rule = {
    matches: [{ m: 'ctState', states: ['established', 'related'] }],
    verdict: { v: 'accept' },
    comment: 'replies of allowed connections',
  };
  // A TCP packet that opens no connection cannot start one here: a pod's connection whose
  // conntrack entry the agent deleted (a policy change denies it) would otherwise be picked up
  // again by its next segment (nf_conntrack_tcp_loose), and, when the side the change denies as a
  // destination sends first, checked as a connection the other way round. Established flows keep
  // their entries (an agent restart keeps the table's), so only a flow without one is dropped.
  const midStream = (dir: 'in' | 'out'): Rule => ({
    matches: [{ m: 'ifnameSet', dir, set: 'wl-known' }, { m: 'ctState', states: ['new'] }, { m: 'tcpNotSyn' }],
    stmts: [{ s: 'counter' }],
    verdict: { v: 'drop' },
    comment: 'pod TCP without SYN and without a conntrack entry: no pick-up mid-stream',
  });
  const drop = (matches: Rule['matches'], why: string): Rule => ({
    matches,
    stmts: [{ s: 'counter' }],
    verdict: { v: 'drop' },
    comment: why,
  });
  const accept = (matches: Rule['matches'], why: string): Rule => ({ matches, verdict: { v: 'accept' }, comment: why });
  const set = (type: ElemType[], comment: string): NftSet => ({ type, comment, elements: new Map() });
  // What a pod sends, checked before conntrack and before any accept: never to the node's
  // loopback (route_localnet on the host veth would deliver it), only from its own MAC and
  // addresses (whatever the node's rp_filter; IPv6 has none). A pod the agent does not know
  // has no entries, so everything it sends is dropped here too.
  const sourceChecks = opts.vethPrefixes.flatMap((p): Rule[] => [
    drop([pod('in', p), { m: 'nets', family: 4, dir: 'd', nets: ['127.0.0.0/8'] }], 'pod to the node loopback'),
    drop([pod('in', p), { m: 'nets', family: 6, dir: 'd', nets: ['::1'] }], 'pod to the node loopback'),
    drop(
      [pod('in', p), { m: 'ifnameSet', dir: 'in', set: 'wl-has-mac' }, { m: 'ifnameMacSet', set: 'wl-mac', neg: true }],
      'pod source MAC is not its own',
    ),
    // Link-local (neighbour and router discovery, never forwarded) and the unspecified
    // address (duplicate address detection, MLD) stay allowed.
    accept([pod('in', p), { m: 'nets', family: 6, dir: 's', nets: ['fe80::/10'] }], 'pod link-local source'),
    accept(
      [pod('in', p), { m: 'nets', family: 6, dir: 's', nets: ['::'] }, { m: 'l4proto', proto: 58 }],
      'pod ICMPv6 from ::',
    ),
    drop(
      [pod('in', p), { m: 'ifnameAddrSet', family: 4, set: 'wl-src4', neg: true }],
      'pod IPv4 source is not its own',
    ),
    drop(
      [pod('in', p), { m: 'ifnameAddrSet', family: 6, set: 'wl-src6', neg: true }],
      'pod IPv6 source is not its own',
    ),
  ]);
  // A base chain of pod traffic: pods not (or no longer) programmed dropped, established accepted,
  // mid-stream packets refused, then `extra` and the pod's own chain through `map` (the pod's side: `dir`).
  const podChain = (
    name: string,
    hook: BaseChain['hook'],
    dir: 'in' | 'out',
    map: 'from-wl' | 'to-wl',
    comment: string,
    extra: Rule[] = [],
  ): BaseChain => ({
    name,
    hook,
    priority: 'filter',
    policy: 'accept',
    comment,
    rules: [...notKnown(dir), established, midStream(dir), ...extra, { matches: [], verdict: { v: 'vmap', dir, map } }],
  });
  return {
    sets: [
      ['wl-known', { type: IFNAME, comment: 'pod interfaces whose policy is programmed', elements: new Map() }],
      ['wl-stale', set(IFNAME, 'pod interfaces made or removed since they were programmed')],
      ['wl-src4', set(['ifname', 'ipv4_addr'], 'pod interface . an IPv4 address of its pod')],
      ['wl-src6', set(['ifname', 'ipv6_addr'], 'pod interface . an IPv6 address of its pod')],
      ['wl-mac', set(['ifname', 'ether_addr'], 'pod interface . the MAC of its pod')],
      ['wl-has-mac', { type: IFNAME, comment: 'pod interfaces whose MAC is recorded', elements: new Map() }],
    ],
    regular: Object.values(HOST_DISPATCH).map((d) => [d.name, d.comment]),
    maps: [
      ['to-wl', { key: IFNAME, data: 'verdict', comment: 'traffic to a pod: its ingress chain' }],
      ['from-wl', { key: IFNAME, data: 'verdict', comment: 'traffic from a pod: its egress chain' }],
    ],
    // Egress (of the sending pod) and ingress (of the receiving pod) are two base chains on the
    // forward hook: an `accept` in one ends only that chain, the other still decides.
    chains: [
      {
        name: 'prerouting',
        hook: 'prerouting',
        priority: 'raw',
        policy: 'accept',
        comment: 'what pods send: own addresses and MAC, never loopback',
        rules: sourceChecks,
      },
      podChain('forward', 'forward', 'in', 'from-wl', 'egress of pods: the sender decides'),
      podChain('forward-in', 'forward', 'out', 'to-wl', 'ingress of pods: the receiver decides'),
      podChain('input', 'input', 'in', 'from-wl', 'pods to the node: the sender decides', [
        {
          matches: [
            { m: 'ifnameSet', dir: 'in', set: 'wl-known' },
            { m: 'icmpv6Type', types: ['nd-neighbor-solicit', 'nd-neighbor-advert', 'nd-router-solicit'] },
          ],
          verdict: { v: 'accept' },
          comment: 'neighbour discovery with the host',
        },
      ]),
      ...hostBaseChains(),
    ],
  };
}

/**
 * Host endpoint policy: base chains after the pods' own (priority filter + 10: a pod's egress
 * policy decides first), before DNAT (dstnat - 10) and before conntrack (raw + 10), each jumping
 * to its dispatch chain. Established connections are accepted first, so a resync or an agent
 * restart never cuts the host's connections; loopback never meets host endpoint policy.
 */
function hostBaseChains(): BaseChain[] {
  const est: Rule = {
    matches: [{ m: 'ctState', states: ['established', 'related'] }],
    verdict: { v: 'accept' },
    comment: 'replies of allowed connections',
  };
  const lo = (dir: 'in' | 'out'): Rule => ({
    matches: [{ m: 'ifname', dir, name: 'lo' }],
    verdict: { v: 'accept' },
    comment: 'loopback',
  });
  const to = (k: keyof typeof HOST_DISPATCH): Rule => ({
    matches: [],
    verdict: { v: 'jump', chain: HOST_DISPATCH[k].name },
  });
  const chain = (
    name: string,
    hook: BaseChain['hook'],
    priority: number,
    comment: string,
    rules: Rule[],
  ): BaseChain => ({
    name,
    hook,
    priority,
    policy: 'accept',
    comment,
    rules,
  });
  return [
    chain('hep-input', 'input', 10, 'host endpoints: to the host', [est, lo('in'), to('in')]),
    chain('hep-output', 'output', 10, 'host endpoints: from the host', [est, lo('out'), to('out')]),
    chain('hep-fwd-in', 'forward', 10, 'host endpoints: forwarded, the ingress side', [est, to('fwdIn')]),
    chain('hep-fwd-out', 'forward', 10, 'host endpoints: forwarded, the egress side', [est, to('fwdOut')]),
    chain('hep-prednat', 'prerouting', -110, 'host endpoints: before DNAT', [est, lo('in'), to('pre')]),
    chain('hep-raw-in', 'prerouting', -290, 'host endpoints: untracked, inbound', [lo('in'), to('rawIn')]),
    chain('hep-raw-out', 'output', -290, 'host endpoints: untracked, outbound', [lo('out'), to('rawOut')]),
  ];
}

/**
 * The base chains and maps, as `add` commands. A pod interface (by prefix)
 * that is not in @wl-known is dropped in both directions: a new pod is
 * isolated from the moment its veth exists until its chains are programmed.
 */
export function baseCommands(opts: BaseOptions, render: { hooks?: boolean } = {}): string[] {
  const T = tableRef(opts);
  const b = baseTable(opts);
  return [
    `add table ${T}`,
    ...b.sets.map(([n, s]) => setCommand(T, n, s)),
    ...b.maps.map(([n, m]) => mapCommand(T, n, m)),
    ...b.regular.map(([n, comment]) => chainCommands(T, n, { comment, rules: [], owner: BASE_OWNER })[0]!),
    ...b.chains.flatMap((c) =>
      render.hooks === false
        ? chainCommands(T, c.name, { comment: c.comment, rules: c.rules, owner: BASE_OWNER })
        : baseChainCommands(T, c),
    ),
  ];
}

export function emptyState(): DesiredState {
  return { chains: new Map(), sets: new Map(), endpoints: new Map(), refused: [] };
}

/** A script whose every line is attributed to the object it programs. */
interface AttributedScript {
  script: string;
  /** ownerId of each line (index 0 is line 1). */
  lineOwners: string[];
  /** The owners, by ownerId. */
  owners: Map<string, Owner>;
  /** Objects the renderer refused (left out of the script), with why. */
  unrendered: Array<{ owner: Owner; reason: string }>;
}

/** Interface entries of one endpoint (wl-known last: a pod is let through once its chains and map entries exist). */
function entryAdds(T: string, entries: Array<[string, EndpointEntry]>): string[] {
  if (entries.length === 0) return [];
  return [
    ...sourceElements(T, 'add', entries),
    ...mapElementCommands(
      T,
      'add',
      'to-wl',
      IFNAME,
      entries.map(([i, e]) => [[i], e.to]),
    ),
    ...mapElementCommands(
      T,
      'add',
      'from-wl',
      IFNAME,
      entries.map(([i, e]) => [[i], e.from]),
    ),
    ...elementCommands(
      T,
      'add',
      'wl-known',
      IFNAME,
      entries.map(([i]) => [i]),
    ),
  ];
}

/** interface . address, for each address `pick` gives of each entry. */
function pairs(entries: Array<[string, EndpointEntry]>, pick: (e: EndpointEntry) => string[]): string[][] {
  return entries.flatMap(([i, e]) => pick(e).map((a) => [i, a]));
}

/** An endpoint's own addresses and MAC, the sources it may send from. */
function sourceElements(T: string, kind: 'add' | 'delete', entries: Array<[string, EndpointEntry]>): string[] {
  const withMac = entries.filter(([, e]) => e.mac !== undefined);
  return [
    ...elementCommands(
      T,
      kind,
      'wl-src4',
      ['ifname', 'ipv4_addr'],
      pairs(entries, (e) => e.v4),
    ),
    ...elementCommands(
      T,
      kind,
      'wl-src6',
      ['ifname', 'ipv6_addr'],
      pairs(entries, (e) => e.v6),
    ),
    ...elementCommands(
      T,
      kind,
      'wl-mac',
      ['ifname', 'ether_addr'],
      withMac.map(([i, e]) => [i, e.mac!]),
    ),
    ...elementCommands(
      T,
      kind,
      'wl-has-mac',
      IFNAME,
      withMac.map(([i]) => [i]),
    ),
  ];
}

/**
 * Interface entries taken out. Each is added first (a no-op when present): a
 * delete of an absent element would refuse the whole batch.
 */
function entryDeletes(T: string, entries: Array<[string, EndpointEntry]>): string[] {
  if (entries.length === 0) return [];
  const out: string[] = [];
  const maps = [
    ['to-wl', (e: EndpointEntry) => e.to],
    ['from-wl', (e: EndpointEntry) => e.from],
  ] as const;
  for (const [map, pick] of maps) {
    out.push(
      ...mapElementCommands(
        T,
        'add',
        map,
        IFNAME,
        entries.map(([i, e]) => [[i], pick(e)]),
      ),
    );
    out.push(
      ...mapElementCommands(
        T,
        'delete',
        map,
        IFNAME,
        entries.map(([i]) => [[i], undefined]),
      ),
    );
  }
  out.push(
    ...elementCommands(
      T,
      'add',
      'wl-known',
      IFNAME,
      entries.map(([i]) => [i]),
    ),
  );
  out.push(
    ...elementCommands(
      T,
      'delete',
      'wl-known',
      IFNAME,
      entries.map(([i]) => [i]),
    ),
  );
  out.push(...sourceElements(T, 'add', entries), ...sourceElements(T, 'delete', entries));
  return out;
}

function setAdds(T: string, name: string, s: NftSet): string[] {
  return [setCommand(T, name, s), ...elementCommands(T, 'add', name, s.type, s.elements.values())];
}

/**
 * The whole table from nothing, replacing what is there, in one transaction
 * (no gap for existing pods), leaving out the objects in `exclude` (ownerIds).
 * Order: base, sets, policy and profile chains, then each endpoint's chains
 * and interface entries.
 */
export function fullScriptAttributed(
  base: BaseOptions,
  d: DesiredState,
  exclude: ReadonlySet<string> = new Set(),
  render: { hooks?: boolean } = {},
): AttributedScript {
  const T = tableRef(base);
  const lines: string[] = [];
  const lineOwners: string[] = [];
  const owners = new Map<string, Owner>();
  const unrendered: AttributedScript['unrendered'] = [];
  // One object's commands: a value the renderer refuses leaves out that object only.
  const emit = (owner: Owner, make: () => string[]) => {
    const id = ownerId(owner);
    let cmds: string[];
    try {
      cmds = make();
    } catch (e) {
      if (!(e instanceof NftModelError) || owner.kind === 'Base') throw e;
      unrendered.push({ owner, reason: e.message });
      return;
    }
    owners.set(id, owner);
    for (const c of cmds) {
      lines.push(c);
      lineOwners.push(id);
    }
  };
  emit(BASE_OWNER, () => [`add table ${T}`, `delete table ${T}`, ...baseCommands(base, render)]);
  for (const [name, s] of d.sets) {
    const o = s.owner ?? { kind: 'Set', name };
    if (!exclude.has(ownerId(o))) emit(o, () => setAdds(T, name, s));
  }
  // Chains grouped by owner: all of one owner's chains exist before their rules (they jump to each other).
  const groups = new Map<string, { owner: Owner; chains: Array<[string, Chain]> }>();
  for (const [name, c] of d.chains) {
    const id = ownerId(c.owner);
    let g = groups.get(id);
    if (!g) groups.set(id, (g = { owner: c.owner, chains: [] }));
    g.chains.push([name, c]);
  }
  const entriesBy = new Map<string, Array<[string, EndpointEntry]>>();
  for (const [ifn, e] of d.endpoints) {
    const id = ownerId(e.owner);
    let l = entriesBy.get(id);
    if (!l) entriesBy.set(id, (l = []));
    l.push([ifn, e]);
  }
  // Endpoints jump to policy and profile chains, host endpoint dispatch to host endpoint chains.
  const RANK: Partial<Record<Owner['kind'], number>> = { Endpoint: 1, HostEndpoint: 1, HostDispatch: 2 };
  const rank = (g: { owner: Owner }) => RANK[g.owner.kind] ?? 0;
  const ordered = [...groups.values()].sort((a, b) => rank(a) - rank(b));
  for (const g of ordered) {
    const id = ownerId(g.owner);
    if (exclude.has(id)) continue;
    emit(g.owner, () => {
      const cmds = g.chains.map(([n, c]) => chainCommands(T, n, { ...c, rules: [] })[0]!);
      for (const [n, c] of g.chains) cmds.push(...ruleCommands(T, n, c.rules));
      cmds.push(...entryAdds(T, entriesBy.get(id) ?? []));
      return cmds;
    });
  }
  return { script: lines.join('\n') + '\n', lineOwners, owners, unrendered };
}

/** The whole table from nothing, replacing what is there, in one transaction (no gap for existing pods). */
export function fullScript(base: BaseOptions, d: DesiredState): string {
  return fullScriptAttributed(base, d).script;
}

/**
 * The commands turning table content `a` into `b`. A chain whose content hash
 * is unchanged is not touched; a changed one is flushed and refilled, or
 * re-created when its comment changed (nft keeps the first comment). Order:
 * sets and their elements, new chains, interface entries that go, flushes,
 * re-created chains, rules, interface entries that come (wl-known last), then
 * what went away (chains flushed before any is deleted, so references are gone).
 */
export function diffCommands(
  a: DesiredState,
  b: DesiredState,
  opts?: { table?: string },
  stale: ReadonlySet<string> = new Set(),
): string[] {
  const T = tableRef(opts);
  const cmds: string[] = [];
  for (const [name, s] of b.sets) {
    const old = a.sets.get(name);
    if (old === s) continue; // shared with the previous state by the incremental compiler: unchanged
    if (!old || old.type.join() !== s.type.join()) {
      if (old) throw new Error(`set ${name} changed type`); // names hash their content's kind, so this cannot happen
      cmds.push(...setAdds(T, name, s));
    } else {
      const gone = [...old.elements].filter(([k]) => !s.elements.has(k)).map(([, v]) => v);
      const added = [...s.elements].filter(([k]) => !old.elements.has(k)).map(([, v]) => v);
      cmds.push(...elementCommands(T, 'delete', name, s.type, gone), ...elementCommands(T, 'add', name, s.type, added));
    }
  }
  const created: string[] = [];
  const refilled: string[] = [];
  const recreated: string[] = [];
  for (const [name, c] of b.chains) {
    const old = a.chains.get(name);
    if (!old) created.push(name);
    else if (old !== c && chainHash(old) !== chainHash(c)) {
      (old.comment === c.comment ? refilled : recreated).push(name);
    }
  }
  for (const name of created) cmds.push(chainCommands(T, name, { ...b.chains.get(name)!, rules: [] })[0]!);
  // Interface entries: gone, or changed (another chain, another endpoint behind the name).
  const gone: Array<[string, EndpointEntry]> = [];
  const come: Array<[string, EndpointEntry]> = [];
  const recreatedSet = new Set(recreated);
  // A changed entry (other chains, addresses or MAC) goes and comes in the same transaction; its
  // interface is never seen half-programmed. Another endpoint (or revision: a re-ADD) behind the
  // same name keeps its entries; the stale mark the plugin set when it made the veth goes below.
  const again: string[] = [];
  for (const [ifn, e] of a.endpoints) {
    const n = b.endpoints.get(ifn);
    if (!n) gone.push([ifn, e]);
    else if (n !== e) {
      const rebuilt = recreatedSet.has(e.to) || recreatedSet.has(e.from);
      if (rebuilt || entryContent(n) !== entryContent(e)) gone.push([ifn, e]);
      else if (n.rev !== e.rev || JSON.stringify(n.owner) !== JSON.stringify(e.owner)) again.push(ifn);
    }
  }
  const goneSet = new Set(gone.map(([i]) => i));
  for (const [ifn, e] of b.endpoints) if (!a.endpoints.has(ifn) || goneSet.has(ifn)) come.push([ifn, e]);
  cmds.push(...entryDeletes(T, gone));
  const removedChains = [...a.chains.keys()].filter((c) => !b.chains.has(c));
  for (const name of [...refilled, ...recreated, ...removedChains]) cmds.push(`flush chain ${T} ${name}`);
  for (const name of recreated) {
    cmds.push(`delete chain ${T} ${name}`, chainCommands(T, name, { ...b.chains.get(name)!, rules: [] })[0]!);
  }
  for (const name of [...created, ...refilled, ...recreated]) {
    cmds.push(...ruleCommands(T, name, b.chains.get(name)!.rules));
  }
  cmds.push(
    ...entryAdds(T, come),
    ...elementCommands(
      T,
      'add',
      'wl-known',
      IFNAME,
      again.map((i) => [i]),
    ),
  );
  // Names the plugin marked stale, now programmed for the endpoint behind them (or gone): unmarked.
  const touched = new Set([...come.map(([i]) => i), ...again, ...gone.map(([i]) => i)]);
  const unmark = [...touched].filter((i) => stale.has(i)).map((i) => [i]);
  cmds.push(...elementCommands(T, 'add', 'wl-stale', IFNAME, unmark));
  cmds.push(...elementCommands(T, 'delete', 'wl-stale', IFNAME, unmark));
  for (const c of removedChains) cmds.push(`delete chain ${T} ${c}`);
  for (const name of a.sets.keys()) if (!b.sets.has(name)) cmds.push(`delete set ${T} ${name}`);
  return cmds;
}

/** Whether a diff between `a` and `b` touches interface entries (then the stale marks are worth reading). */
export function entriesChanged(a: DesiredState, b: DesiredState): boolean {
  if (a.endpoints === b.endpoints) return false;
  if (a.endpoints.size !== b.endpoints.size) return true;
  for (const [i, e] of b.endpoints) if (a.endpoints.get(i) !== e) return true;
  return false;
}

/** The interface names in @wl-stale, from its listing (names are of the interface alphabet, quoted). */
export function staleNames(listing: string): Set<string> {
  const m = /elements = \{([^}]*)\}/.exec(listing);
  return new Set(m ? [...m[1]!.matchAll(/"([A-Za-z0-9_.-]{1,15})"/g)].map((x) => x[1]!) : []);
}

/** What an interface entry programs (its chains, addresses and MAC), without whose it is. */
function entryContent(e: EndpointEntry): string {
  return JSON.stringify([e.to, e.from, e.v4, e.v6, e.mac]);
}

/** `d` without the objects of `exclude` (ownerIds): what a batch that left them out programmed. */
export function withoutOwners(d: DesiredState, exclude: ReadonlySet<string>): DesiredState {
  if (exclude.size === 0) return d;
  const out = emptyState();
  out.refused = d.refused;
  for (const [n, s] of d.sets) if (!exclude.has(ownerId(s.owner ?? { kind: 'Set', name: n }))) out.sets.set(n, s);
  for (const [n, c] of d.chains) if (!exclude.has(ownerId(c.owner))) out.chains.set(n, c);
  for (const [i, e] of d.endpoints) if (!exclude.has(ownerId(e.owner))) out.endpoints.set(i, e);
  return out;
}

/** What `id` (an ownerId) has in `d`: its chains, sets and interface entries, as one comparable string. */
export function ownerFingerprint(d: DesiredState, id: string): string {
  const parts: string[] = [];
  for (const [n, c] of d.chains) if (ownerId(c.owner) === id) parts.push(`${n}:${chainHash(c)}`);
  for (const [n, s] of d.sets) {
    if (ownerId(s.owner ?? { kind: 'Set', name: n }) !== id) continue;
    parts.push(`${n}:${JSON.stringify([...s.elements.keys()].sort())}`);
  }
  for (const [i, e] of d.endpoints) if (ownerId(e.owner) === id) parts.push(`${i}:${JSON.stringify(e)}`);
  return parts.join('\n');
}
