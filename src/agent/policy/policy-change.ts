// Which established connections a batch's policy change may cut: what a batch saw, and the
// addresses of the endpoints whose policy the next batch changed.
import type { Resource } from '../../model/resources.js';
import { endpointViews, policyId, policySelects, type EndpointView } from '../../model/policy-eval.js';
import type { EndpointInput, PolicyInput, ProfileInput } from './compile.js';
import { wepId } from './local-endpoints.js';

/** What one batch saw: the objects (by identity: the informers keep an unchanged object) and the endpoints' views. */
export interface Seen {
  weps: Map<string, Resource<'WorkloadEndpoint'>>;
  policies: Map<string, PolicyInput>;
  profiles: Map<string, ProfileInput>;
  views: Map<string, { view: EndpointView; sig: string }>;
  /** Endpoints programmed on this node (they have an interface). */
  local: Set<string>;
}

export function snapshot(
  weps: Array<Resource<'WorkloadEndpoint'>>,
  endpoints: EndpointInput[],
  policies: PolicyInput[],
  profiles: Map<string, ProfileInput>,
  was: Seen | undefined,
): Seen {
  const now: Seen = { weps: new Map(), policies: new Map(), profiles, views: new Map(), local: new Set() };
  for (const p of policies) now.policies.set(`${p.kind}/${policyId(p)}`, p);
  // A profile change can change any endpoint's labels (namespace labels, labelsToApply): all views anew.
  const reuse = was !== undefined && !changedKeys(was.profiles, profiles).length;
  const fresh: EndpointInput[] = [];
  const freshIds: string[] = [];
  weps.forEach((w, i) => {
    const id = wepId(w);
    now.weps.set(id, w);
    if (endpoints[i]!.interfaceName) now.local.add(id);
    const old = reuse && was.weps.get(id) === w ? was.views.get(id) : undefined;
    if (old) now.views.set(id, old);
    else {
      fresh.push(endpoints[i]!);
      freshIds.push(id);
    }
  });
  endpointViews(fresh, profiles).forEach((v, i) => {
    const sig = JSON.stringify([v.allLabels, v.nsLabels, v.addrs, v.ports, v.profiles]);
    now.views.set(freshIds[i]!, { view: v, sig });
  });
  return now;
}

/** Keys whose value is not the same object in both maps (added, removed or replaced). */
function changedKeys<T extends { spec: unknown }>(a: Map<string, T>, b: Map<string, T>): string[] {
  const out: string[] = [];
  for (const [k, v] of a) {
    const w = b.get(k)?.spec;
    // A relist after a watch failure brings equal objects anew: compared by content then.
    if (w !== v.spec && (w === undefined || JSON.stringify(w) !== JSON.stringify(v.spec))) out.push(k);
  }
  for (const k of b.keys()) if (!a.has(k)) out.push(k);
  return out;
}

/**
 * The addresses whose conntrack entries are checked after a batch: the established connections of
 * the endpoints whose policy the batch changed, so that a flow the new policy denies is cut at once
 * (the base chains accept established traffic before any policy); entries of allowed flows are left
 * alone. Changed are:
 * - an endpoint (on any node) whose labels, namespace labels, addresses, ports or profiles
 *   changed: its own policy, and its membership in the selections of other endpoints' rules;
 * - a local endpoint selected by a policy that was added, removed or changed (old or new version);
 * - a local endpoint naming a profile that was added, removed or changed.
 * A new endpoint has no connection yet (dropped until programmed); a deleted one's are flushed by DEL.
 */
export function affectedAddresses(was: Seen, now: Seen): string[] {
  const out = new Set<string>();
  const take = (v: EndpointView | undefined) => v?.addrs.forEach((a) => out.add(a));
  for (const [id, n] of now.views) {
    const o = was.views.get(id);
    if (!o || o === n || o.sig === n.sig) continue;
    take(o.view);
    take(n.view);
  }
  const profiles = new Set(changedKeys(was.profiles, now.profiles));
  const policies = changedKeys(was.policies, now.policies).map(
    (k) => [was.policies.get(k), now.policies.get(k)] as const,
  );
  if (profiles.size === 0 && policies.length === 0) return [...out];
  for (const id of now.local) {
    const n = now.views.get(id)!.view;
    const o = was.views.get(id)?.view;
    if (!o) continue;
    const selects = ([op, np]: (typeof policies)[number]) =>
      (np !== undefined && policySelects(np, n)) || (op !== undefined && policySelects(op, o));
    if (n.profiles.some((p) => profiles.has(p)) || policies.some(selects)) take(n);
  }
  return [...out];
}
