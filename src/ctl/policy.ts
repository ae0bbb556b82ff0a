// netpluginctl policy explain: which policies select a pod (per direction, in
// evaluation order), and, given a peer and a port, the rule that decides the
// connection, as the node agent's dataplane does (src/model/policy-eval.ts).
import type { Resource } from '../model/resources.js';
import type { Datastore } from '../datastore/types.js';
import { tryParseIP } from '../net/cidr.js';
import { effectiveTypes, type Protocol, PROTOCOL_NAMES } from '../model/policy.js';
import {
  endpointFromWep,
  endpointViews,
  evaluate,
  policyId,
  policySelects,
  sortPolicies,
  type EndpointView,
  type PolicyInput,
  type ProfileInput,
} from '../model/policy-eval.js';
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

  const ordered = sortPolicies(policies);
  const selecting = (dir: 'Ingress' | 'Egress') =>
    ordered
      .filter((p) => effectiveTypes(p.spec).includes(dir) && policySelects(p, ep))
      .map((p) => ({ kind: p.kind, name: policyId(p), order: p.spec.order }));
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

  let peerView: EndpointView | undefined;
  let peerAddr: string | undefined;
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
    const inbound = evaluate(ep, views, policies, profiles, { ...conn, direction: 'ingress' });
    const result: Record<string, unknown> = { ingress: inbound };
    // A connection to a pod also needs the peer's egress when the peer is a pod.
    if (peerView) {
      const self = ep.addrs.find((a) => a.includes(':') === peerAddr!.includes(':'))!;
      result['peerEgress'] = evaluate(peerView, views, policies, profiles, {
        direction: 'egress',
        peerAddr: self,
        protocol: protocol as Protocol,
        ...ports,
      });
    }
    result['egress'] = evaluate(ep, views, policies, profiles, { ...conn, direction: 'egress' });
    report['connection'] = {
      peer: o.peer,
      peerAddr,
      protocol,
      port,
      ...(sourcePort !== undefined ? { sourcePort } : {}),
      ...result,
    };
  }

  if (o.output === 'json') {
    io.stdout(JSON.stringify(report, null, 2) + '\n');
    return 0;
  }
  const lines: string[] = [];
  lines.push(
    `Endpoint ${ep.key} (pod ` +
      `${ep.namespace}/${o.pod})${ep.interfaceName ? ` on interface ${ep.interfaceName}` : ''}, addresses ` +
      `${ep.addrs.join(', ')}`,
  );
  lines.push(
    `Labels (own and from profiles): ${
      Object.entries(ep.allLabels)
        .map(([k, v]) => `${k}=${v}`)
        .join(', ') || '(none)'
    }`,
  );
  lines.push(`Profiles: ${(report['profiles'] as string[]).join(', ') || '(none)'}`);
  for (const dir of ['ingress', 'egress'] as const) {
    const sel = report[dir] as Array<{ kind: string; name: string; order?: number }>;
    if (sel.length === 0) lines.push(`${dir}: no policy selects it; its profiles decide`);
    else {
      lines.push(`${dir}: selected by, in evaluation order (traffic no rule matches is denied):`);
      sel.forEach((p, i) => lines.push(`  ${i + 1}. ${p.kind} ${p.name} (order ${p.order ?? 'unset'})`));
    }
  }
  const conn = report['connection'] as Record<string, { verdict: string; by: string; trace: string[] }> | undefined;
  if (conn) {
    const what =
      `${protocol}${port !== undefined ? `/${port}` : ''}` +
      `${sourcePort !== undefined ? ` from port ${sourcePort}` : ''}`;
    const show = (title: string, d: { verdict: string; by: string; trace: string[] }) => {
      lines.push(`${title}: ${d.verdict.toUpperCase()} by ${d.by}`);
      for (const t of d.trace) lines.push(`    ${t}`);
    };
    lines.push('');
    show(`${o.peer} -> ${ns}/${o.pod} ${what}, ingress of ${ns}/${o.pod}`, conn['ingress']!);
    if (conn['peerEgress']) show(`${o.peer} -> ${ns}/${o.pod} ${what}, egress of ${o.peer}`, conn['peerEgress']);
    show(`${ns}/${o.pod} -> ${o.peer} ${what}, egress of ${ns}/${o.pod}`, conn['egress']!);
  }
  io.stdout(lines.join('\n') + '\n');
  return 0;
}
