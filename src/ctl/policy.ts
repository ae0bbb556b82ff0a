// netpluginctl policy explain: which policies select a pod (per direction, in
// evaluation order), and, given a peer and a port, the rule that decides the
// connection, as the node agent's dataplane does (src/model/policy-eval.ts);
// with --staged, beside each, what the policies would decide with the staged
// changes applied (src/model/staged.ts).
import type { Resource } from '../model/resources.js';
import type { Datastore } from '../datastore/types.js';
import { tryParseIP } from '../net/cidr.js';
import { effectiveTypes, type Protocol, PROTOCOL_NAMES } from '../model/policy.js';
import {
  endpointFromWep,
  endpointViews,
  evaluate,
  evaluateHost,
  policyId,
  policySelects,
  selectsIn,
  sortPolicies,
  stagedId,
  type Decision,
  type EndpointView,
  type PolicyInput,
  type PolicyTier,
  type ProfileInput,
} from '../model/policy-eval.js';
import { agentSettings, failsafeFor } from '../model/agent-config.js';
import {
  pendingPolicies,
  policyHits,
  stagedAction,
  stagedRef,
  stagedTarget,
  type StagedPolicy,
} from '../model/staged.js';
import { CtlError, type CtlIO } from './io.js';

interface ExplainOptions {
  pod: string;
  namespace?: string;
  /** `ns/pod`, `pod` (same namespace) or an address. */
  peer?: string;
  port?: string;
  sourcePort?: string;
  protocol?: string;
  output?: string;
  /** Also what the staged policies would decide (their pending verdicts). */
  staged?: boolean;
}

/** A decision as explain prints it (JSON): the hits as flow records name them. */
function shown(d: Decision): Record<string, unknown> {
  return { verdict: d.verdict, by: d.by, trace: d.trace, hits: policyHits(d.hits) };
}

function podOf(w: Resource<'WorkloadEndpoint'>): string {
  return w.spec.pod ?? w.spec.workload ?? w.metadata.name;
}

export async function cmdPolicyExplain(ds: Datastore, io: CtlIO, o: ExplainOptions): Promise<number> {
  const ns = o.namespace ?? 'default';
  const protocol = (o.protocol ?? 'TCP').toUpperCase() === 'ICMPV6' ? 'ICMPv6' : (o.protocol ?? 'TCP').toUpperCase();
  if (!(PROTOCOL_NAMES as readonly string[]).includes(protocol))
    throw new CtlError(`--protocol ${o.protocol} is not one of ${PROTOCOL_NAMES.join(', ')}`);
  const portArg = (flag: string, v: string | undefined): number | undefined => {
    if (v === undefined) return undefined;
    const n = Number(v);
    if (!Number.isInteger(n) || n < 1 || n > 65535)
      throw new CtlError(`${flag} ${v} is not a port number from 1 to 65535`);
    return n;
  };
  const port = portArg('--port', o.port);
  const sourcePort = portArg('--source-port', o.sourcePort);
  if (o.output !== undefined && o.output !== 'json')
    throw new CtlError(`-o ${o.output}: only json is supported (default: text)`);

  const [weps, nps, gnps, profs] = await Promise.all([
    ds.list('WorkloadEndpoint'),
    ds.list('NetworkPolicy'),
    ds.list('GlobalNetworkPolicy'),
    ds.list('Profile'),
  ]);
  const staged: StagedPolicy[] = [];
  if (o.staged) {
    const lists = await Promise.all([
      ds.list('StagedNetworkPolicy'),
      ds.list('StagedGlobalNetworkPolicy'),
      ds.list('StagedKubernetesNetworkPolicy'),
    ]);
    for (const l of lists) staged.push(...(l.items as StagedPolicy[]));
  }
  const profiles = new Map<string, ProfileInput>(
    profs.items.map((p) => [p.metadata.name, { name: p.metadata.name, spec: p.spec }]),
  );
  const policies: PolicyInput[] = [
    ...nps.items.map(
      (p): PolicyInput => ({
        kind: 'NetworkPolicy',
        name: p.metadata.name,
        namespace: p.metadata.namespace ?? 'default',
        spec: p.spec,
      }),
    ),
    ...gnps.items.map((p): PolicyInput => ({ kind: 'GlobalNetworkPolicy', name: p.metadata.name, spec: p.spec })),
  ];
  const views = endpointViews(
    weps.items.map((w) => endpointFromWep(w)),
    profiles,
  );
  const hep = /^(?:hep|hostendpoint)\/(.+)$/i.exec(o.pod);
  if (hep) return explainHostEndpoint(ds, io, o, hep[1]!, { views, policies, profiles, protocol, port, sourcePort });
  const byPod = (n: string, pod: string) => {
    const i = weps.items.findIndex(
      (w) => (w.metadata.namespace ?? 'default') === n && (podOf(w) === pod || w.metadata.name === pod),
    );
    return i < 0 ? undefined : views[i];
  };
  const ep = byPod(ns, o.pod);
  if (!ep)
    throw new CtlError(
      `no workload endpoint for pod ${ns}/${o.pod}; list them with 'netpluginctl get workloadendpoints -n ${ns}'`,
    );

  const pending = o.staged ? pendingPolicies(policies, staged) : undefined;
  const selectingIn = (set: PolicyInput[], dir: 'Ingress' | 'Egress') =>
    sortPolicies(set)
      .filter((p) => effectiveTypes(p.spec).includes(dir) && policySelects(p, ep))
      .map((p) => ({
        kind: p.staged?.kind ?? p.kind,
        name: p.staged ? stagedId(p.staged) : policyId(p),
        order: p.spec.order,
      }));
  const selecting = (dir: 'Ingress' | 'Egress') => selectingIn(policies, dir);
  const report: Record<string, unknown> = {
    endpoint: ep.key,
    namespace: ep.namespace,
    addresses: ep.addrs,
    interface: ep.interfaceName,
    labels: ep.allLabels,
    profiles: ep.profiles.map((p) => (profiles.has(p) ? p : `${p} (missing)`)),
    ingress: selecting('Ingress'),
    egress: selecting('Egress'),
  };
  if (pending) {
    // The staged objects that change what decides for this endpoint: a Set selecting it, a Delete
    // of a policy selecting it.
    const enforcedIds = new Set(policies.filter((p) => policySelects(p, ep)).map((p) => `${p.kind} ${policyId(p)}`));
    const relevant = staged.filter((s) => {
      const t = stagedTarget(s);
      if (stagedAction(s) === 'Delete') return enforcedIds.has(`${t.kind} ${policyId(t)}`);
      const id = stagedId(stagedRef(s));
      return pending.policies.some(
        (p) => p.staged?.kind === s.kind && stagedId(p.staged) === id && policySelects(p, ep),
      );
    });
    report['staged'] = relevant.map((s) => {
      const t = stagedTarget(s);
      return {
        kind: s.kind,
        name: stagedId(stagedRef(s)),
        stagedAction: stagedAction(s),
        target: `${t.kind} ${policyId(t)}`,
      };
    });
    report['pending'] = {
      ingress: selectingIn(pending.policies, 'Ingress'),
      egress: selectingIn(pending.policies, 'Egress'),
    };
    if (pending.skipped.length) report['stagedSkipped'] = pending.skipped;
  }

  let peerView: EndpointView | undefined;
  let peerAddr: string | undefined;
  let decisions: Record<string, Decision> | undefined;
  let pendingDecisions: Record<string, Decision> | undefined;
  if (o.peer !== undefined) {
    if (tryParseIP(o.peer)) peerAddr = o.peer;
    else {
      const [pns, pname] = o.peer.includes('/') ? o.peer.split('/', 2) : [ns, o.peer];
      peerView = byPod(pns!, pname!);
      if (!peerView)
        throw new CtlError(
          `--peer ${o.peer}: no workload endpoint for pod ${pns}/${pname} (give an address for anything that is not ` +
            `a pod)`,
        );
      peerAddr = peerView.addrs.find((a) => ep.addrs.some((b) => b.includes(':') === a.includes(':')));
      if (!peerAddr) throw new CtlError(`--peer ${o.peer}: it has no address of the same family as ${ns}/${o.pod}`);
    }
    const ports = { ...(port !== undefined ? { port } : {}), ...(sourcePort !== undefined ? { sourcePort } : {}) };
    const conn = { peerAddr, protocol: protocol as Protocol, ...ports };
    const decide = (set: PolicyInput[]) => {
      const result: Record<string, Decision> = {
        ingress: evaluate(ep, views, set, profiles, { ...conn, direction: 'ingress' }),
      };
      // A connection to a pod also needs the peer's egress when the peer is a pod.
      if (peerView) {
        const self = ep.addrs.find((a) => a.includes(':') === peerAddr!.includes(':'))!;
        result['peerEgress'] = evaluate(peerView, views, set, profiles, {
          direction: 'egress',
          peerAddr: self,
          protocol: protocol as Protocol,
          ...ports,
        });
      }
      result['egress'] = evaluate(ep, views, set, profiles, { ...conn, direction: 'egress' });
      return result;
    };
    decisions = decide(policies);
    if (pending) pendingDecisions = decide(pending.policies);
    const asJson = (r: Record<string, Decision>) =>
      Object.fromEntries(Object.entries(r).map(([k, d]) => [k, shown(d)]));
    report['connection'] = {
      peer: o.peer,
      peerAddr,
      protocol,
      port,
      ...(sourcePort !== undefined ? { sourcePort } : {}),
      ...asJson(decisions),
      ...(pendingDecisions ? { pending: asJson(pendingDecisions) } : {}),
    };
  }

  if (o.output === 'json') {
    io.stdout(JSON.stringify(report, null, 2) + '\n');
    return 0;
  }
  const lines: string[] = [];
  lines.push(
    `Endpoint ${ep.key} (pod ${ep.namespace}/${o.pod})${ep.interfaceName ? ` on interface ${ep.interfaceName}` : ''}` +
      `, addresses ${ep.addrs.join(', ')}`,
  );
  lines.push(
    `Labels (own and from profiles): ${
      Object.entries(ep.allLabels)
        .map(([k, v]) => `${k}=${v}`)
        .join(', ') || '(none)'
    }`,
  );
  lines.push(`Profiles: ${(report['profiles'] as string[]).join(', ') || '(none)'}`);
  type Selected = Array<{ kind: string; name: string; order?: number }>;
  const listSelected = (sel: Selected) =>
    sel.forEach((p, i) => lines.push(`  ${i + 1}. ${p.kind} ${p.name} (order ${p.order ?? 'unset'})`));
  const pendingSel = report['pending'] as Record<string, Selected> | undefined;
  for (const dir of ['ingress', 'egress'] as const) {
    const sel = report[dir] as Selected;
    if (sel.length === 0) lines.push(`${dir}: no policy selects it; its profiles decide`);
    else {
      lines.push(`${dir}: selected by, in evaluation order (traffic no rule matches is denied):`);
      listSelected(sel);
    }
    const pendingDir = pendingSel?.[dir];
    if (pendingDir && JSON.stringify(pendingDir) !== JSON.stringify(sel)) {
      if (pendingDir.length === 0)
        lines.push(`${dir} with the staged changes (pending): no policy would select it; its profiles would decide`);
      else {
        lines.push(`${dir} with the staged changes (pending), in evaluation order:`);
        listSelected(pendingDir);
      }
    }
  }
  if (o.staged) {
    const rel = report['staged'] as Array<{ kind: string; name: string; stagedAction: string; target: string }>;
    if (staged.length === 0) lines.push('Staged policies: none exist');
    else if (rel.length === 0)
      lines.push(`Staged policies: ${staged.length} exist; none selects this endpoint or deletes a policy that does`);
    else {
      lines.push('Staged policies for this endpoint:');
      for (const s of rel)
        lines.push(
          `  ${s.kind} ${s.name} (stagedAction ${s.stagedAction}: ` +
            `${s.stagedAction === 'Delete' ? 'removes' : 'sets'} ${s.target})`,
        );
    }
    for (const s of pending?.skipped ?? []) lines.push(`  ${s.ref.kind} ${stagedId(s.ref)} is left out: ${s.reason}`);
  }
  if (decisions) {
    const what =
      `${protocol}${port !== undefined ? `/${port}` : ''}` +
      `${sourcePort !== undefined ? ` from port ${sourcePort}` : ''}`;
    const show = (title: string, key: string) => {
      const d = decisions![key]!;
      lines.push(`${title}: ${d.verdict.toUpperCase()} by ${d.by}`);
      for (const t of d.trace) lines.push(`    ${t}`);
      const p = pendingDecisions?.[key];
      if (!p) return;
      const same = p.verdict === d.verdict && p.by === d.by;
      lines.push(
        `  pending: ${p.verdict.toUpperCase()} by ${p.by}${same ? ' (the staged changes do not change it)' : ''}`,
      );
      if (!same) for (const t of p.trace) lines.push(`    ${t}`);
    };
    lines.push('');
    show(`${o.peer} -> ${ns}/${o.pod} ${what}, ingress of ${ns}/${o.pod}`, 'ingress');
    if (decisions['peerEgress']) show(`${o.peer} -> ${ns}/${o.pod} ${what}, egress of ${o.peer}`, 'peerEgress');
    show(`${ns}/${o.pod} -> ${o.peer} ${what}, egress of ${ns}/${o.pod}`, 'egress');
  }
  io.stdout(lines.join('\n') + '\n');
  return 0;
}

const TIERS: Array<[PolicyTier, string]> = [
  ['normal', "the host's own traffic"],
  ['forward', 'forwarded traffic (applyOnForward)'],
  ['preDNAT', 'before DNAT (preDNAT)'],
  ['doNotTrack', 'untracked (doNotTrack)'],
];

/**
 * `policy explain hep/NAME`: a host endpoint's policies per tier, its node's failsafe ports, and
 * with --peer each tier's decision for a connection, as the agent's host endpoint chains take them.
 */
async function explainHostEndpoint(
  ds: Datastore,
  io: CtlIO,
  o: ExplainOptions,
  name: string,
  c: {
    views: EndpointView[];
    policies: PolicyInput[];
    profiles: Map<string, ProfileInput>;
    protocol: string;
    port?: number | undefined;
    sourcePort?: number | undefined;
  },
): Promise<number> {
  const [heps, configs] = await Promise.all([ds.list('HostEndpoint'), ds.list('AgentConfiguration')]);
  const h = heps.items.find((x) => x.metadata.name === name);
  if (!h) throw new CtlError(`no HostEndpoint ${JSON.stringify(name)}; list them with 'netpluginctl get hep'`);
  if (o.peer !== undefined && !tryParseIP(o.peer)) {
    throw new CtlError(`--peer ${o.peer}: give an address for a host endpoint's peer`);
  }
  const settings = agentSettings(h.spec.node, configs.items);
  const input = {
    key: name,
    namespace: '',
    labels: h.metadata.labels ?? {},
    profiles: h.spec.profiles ?? [],
    addrs: h.spec.expectedIPs ?? [],
    ports: h.spec.ports ?? [],
  };
  // As the agent sees it: no namespace, so no namespace labels.
  const ep: EndpointView = { ...endpointViews([input], c.profiles)[0]!, nsLabels: {} };
  const all = [...c.views, ep];
  const globals = sortPolicies(c.policies.filter((p) => p.kind === 'GlobalNetworkPolicy'));
  const selecting = (tier: PolicyTier, dir: 'Ingress' | 'Egress') =>
    globals
      .filter((p) => selectsIn(p, tier, dir, ep))
      .map((p) => ({ kind: p.kind, name: policyId(p), order: p.spec.order }));
  const report: Record<string, unknown> = {
    hostEndpoint: name,
    node: h.spec.node,
    interface: h.spec.interfaceName ?? null,
    expectedIPs: h.spec.expectedIPs ?? [],
    labels: ep.allLabels,
    profiles: ep.profiles.map((p) => (c.profiles.has(p) ? p : `${p} (missing)`)),
    failsafeInbound: settings.failsafeInbound,
    failsafeOutbound: settings.failsafeOutbound,
    tiers: Object.fromEntries(
      TIERS.map(([t]) => [t, { ingress: selecting(t, 'Ingress'), egress: selecting(t, 'Egress') }]),
    ),
  };
  if (o.peer !== undefined) {
    const conn = {
      peerAddr: o.peer,
      protocol: c.protocol as Protocol,
      ...(c.port !== undefined ? { port: c.port } : {}),
      ...(c.sourcePort !== undefined ? { sourcePort: c.sourcePort } : {}),
    };
    const decisions: Record<string, unknown> = {};
    for (const [t] of TIERS) {
      for (const direction of ['ingress', 'egress'] as const) {
        // Failsafe ports come first in every chain but the forwarded ones.
        const ports = direction === 'ingress' ? settings.failsafeInbound : settings.failsafeOutbound;
        const safe = t !== 'forward' && failsafeFor(ports, c.protocol, c.port, o.peer);
        const by = safe && `failsafe port ${safe.protocol}/${safe.port}${safe.net ? ` from ${safe.net}` : ''}`;
        decisions[`${t}.${direction}`] = by
          ? { verdict: 'allow', by, trace: [] }
          : evaluateHost(ep, all, c.policies, c.profiles, { ...conn, direction }, t);
      }
    }
    report['connection'] = { peer: o.peer, protocol: c.protocol, port: c.port, decisions };
  }
  if (o.output === 'json') {
    io.stdout(JSON.stringify(report, null, 2) + '\n');
    return 0;
  }
  const lines: string[] = [];
  const iface = h.spec.interfaceName ?? '(none: not enforced)';
  lines.push(
    `HostEndpoint ${name} on node ${h.spec.node}, interface ${iface}, expected IPs ${ep.addrs.join(', ') || '(none)'}`,
  );
  const labels = Object.entries(ep.allLabels).map(([k, v]) => `${k}=${v}`);
  lines.push(`Labels (own and from profiles): ${labels.join(', ') || '(none)'}`);
  lines.push(`Profiles: ${(report['profiles'] as string[]).join(', ') || '(none)'}`);
  const ports = (l: typeof settings.failsafeInbound) =>
    l.map((p) => `${p.protocol.toLowerCase()} ${p.port}${p.net ? ` (${p.net})` : ''}`).join(', ') || '(off)';
  lines.push(`Failsafe inbound: ${ports(settings.failsafeInbound)}`);
  lines.push(`Failsafe outbound: ${ports(settings.failsafeOutbound)}`);
  for (const [t, title] of TIERS) {
    for (const dir of ['Ingress', 'Egress'] as const) {
      const sel = selecting(t, dir);
      const names = sel.map((p) => `${p.name} (order ${p.order ?? 'unset'})`);
      if (sel.length) lines.push(`${title}, ${dir.toLowerCase()}: ${names.join(', ')}`);
    }
  }
  type Shown = { verdict: string; by: string; trace: string[] };
  const conn = report['connection'] as { decisions: Record<string, Shown> } | undefined;
  if (conn) {
    lines.push('');
    for (const [t, title] of TIERS) {
      for (const d of ['ingress', 'egress'] as const) {
        const x = conn.decisions[`${t}.${d}`]!;
        const what =
          `${o.peer} ${d === 'ingress' ? '->' : '<-'} ${name} ${c.protocol}` +
          `${c.port !== undefined ? `/${c.port}` : ''}`;
        lines.push(`${title}, ${d} (${what}): ${x.verdict.toUpperCase()} by ${x.by}`);
        for (const tr of x.trace) lines.push(`    ${tr}`);
      }
    }
  }
  io.stdout(lines.join('\n') + '\n');
  return 0;
}
