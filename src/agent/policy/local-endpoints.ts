// The local endpoints as the policy compiler gets them: each with the host veth the agent derives
// for it, one endpoint per interface, and the disagreements with what endpoints record reported once.
import type { Logger } from '../../log/types.js';
import type { Resource } from '../../model/resources.js';
import { endpointFromWep } from '../../model/policy-eval.js';
import { endpointStatusKey } from '../../policy-status/index.js';
import type { EndpointInput } from './compile.js';

/** A local endpoint whose recorded `interfaceName` is not the host veth the agent derives for it. */
export interface InterfaceConflict {
  namespace: string;
  /** The endpoint's name. */
  endpoint: string;
  /** The pod (Kubernetes endpoints). */
  pod?: string;
  recorded: string;
  /** What the endpoint is programmed as; undefined when it is not programmed (`shared`). */
  derived?: string;
  /** `recorded`: the recorded name is not the derived one; `shared`: another endpoint that derives the same has it. */
  kind: 'recorded' | 'shared';
  message: string;
}

interface LocalEndpointsOptions {
  nodename: string;
  vethPrefixes: string[];
  log: Logger;
  /** Told once per local endpoint whose recorded host interface the agent does not take (again when that changes). */
  onInterfaceConflict?: ((c: InterfaceConflict) => void) | undefined;
}

export class LocalEndpoints {
  /** Interface conflicts reported: endpoint id → what was reported (reported again only when it changes). */
  private readonly conflicts = new Map<string, string>();

  constructor(private readonly opts: LocalEndpointsOptions) {}

  /**
   * The compiler's endpoints: a local one gets the host veth the agent derives for it (never its
   * recorded interfaceName: a pod annotation on the Kubernetes datastore, so its owner's to edit),
   * and an interface is programmed for one endpoint only: when two derive the same (one pod with two
   * endpoints, or a hash collision), one has it (preferred()) and the other is not programmed.
   * Disagreements are reported. `local`: the programmed local endpoints by endpointStatusKey.
   */
  derive(weps: Array<Resource<'WorkloadEndpoint'>>): {
    endpoints: EndpointInput[];
    local: Map<string, Resource<'WorkloadEndpoint'>>;
  } {
    const endpoints: EndpointInput[] = [];
    const owner = new Map<string, { w: Resource<'WorkloadEndpoint'>; e: EndpointInput }>();
    const found = new Map<string, InterfaceConflict>();
    for (const w of weps) {
      const e = endpointFromWep(w, this.opts.nodename, this.opts.vethPrefixes);
      endpoints.push(e);
      if (w.spec.node !== this.opts.nodename || !e.interfaceName) continue;
      if (w.spec.interfaceName !== e.interfaceName) found.set(wepId(w), conflictOf(w, e.interfaceName, 'recorded'));
      const other = owner.get(e.interfaceName);
      if (other) {
        const [win, lose] = preferred(w, other.w, e.interfaceName) ? [{ w, e }, other] : [other, { w, e }];
        delete lose.e.interfaceName;
        found.set(wepId(lose.w), conflictOf(lose.w, undefined, 'shared', win.w));
        owner.set(win.e.interfaceName!, win);
      } else owner.set(e.interfaceName, { w, e });
    }
    for (const [id, c] of found) {
      const sig = `${c.kind}\0${c.recorded}\0${c.derived ?? ''}`;
      if (this.conflicts.get(id) === sig) continue;
      this.conflicts.set(id, sig);
      this.opts.log.warn(`policy: ${c.message}`, {
        endpoint: `${c.namespace}/${c.endpoint}`,
        recorded: c.recorded,
        programmedAs: c.derived ?? null,
      });
      this.opts.onInterfaceConflict?.(c);
    }
    for (const id of [...this.conflicts.keys()]) if (!found.has(id)) this.conflicts.delete(id);
    const local = new Map<string, Resource<'WorkloadEndpoint'>>();
    for (const { w } of owner.values()) {
      local.set(endpointStatusKey(w.metadata.namespace ?? 'default', w.metadata.name), w);
    }
    return { endpoints, local };
  }
}

/** An endpoint's identity: its name is unique only within its namespace. */
export function wepId(w: Resource<'WorkloadEndpoint'>): string {
  return `${w.metadata.namespace ?? 'default'}/${w.metadata.name}`;
}

/**
 * Whether `a` rather than `b` has interface `ifname` that both derive: the one that records it (the
 * other's record disagrees: another network's veth, or forged), else the newer: created later; in
 * the same second, the greater identity (all agents agree).
 */
function preferred(a: Resource<'WorkloadEndpoint'>, b: Resource<'WorkloadEndpoint'>, ifname: string): boolean {
  const ha = a.spec.interfaceName === ifname;
  if (ha !== (b.spec.interfaceName === ifname)) return ha;
  const ta = a.metadata.creationTimestamp ?? '';
  const tb = b.metadata.creationTimestamp ?? '';
  return ta !== tb ? ta > tb : wepId(a) > wepId(b);
}

function conflictOf(
  w: Resource<'WorkloadEndpoint'>,
  derived: string | undefined,
  kind: InterfaceConflict['kind'],
  winner?: Resource<'WorkloadEndpoint'>,
): InterfaceConflict {
  const namespace = w.metadata.namespace ?? 'default';
  const who = w.spec.pod ? `pod ${namespace}/${w.spec.pod}` : `endpoint ${namespace}/${w.metadata.name}`;
  // The recorded name is the pod owner's text: quoted, bounded.
  const recorded = JSON.stringify(w.spec.interfaceName.slice(0, 64));
  const message =
    kind === 'recorded'
      ? `${who} records host interface ${recorded}, which is not the one this node made for it ` +
        `(${derived}, derived from its namespace and pod); the recorded name is ignored and its policy is ` +
        'programmed on its own interface (on the Kubernetes datastore: remove or correct the annotation ' +
        'cni.netplugin.org/interfaceName)'
      : `${who} derives the host interface of ${winner ? wepId(winner) : 'another endpoint'}, which records ` +
        'it or is newer and keeps it; this endpoint is not programmed (its traffic stays dropped)';
  return {
    namespace,
    endpoint: w.metadata.name,
    ...(w.spec.pod ? { pod: w.spec.pod } : {}),
    recorded: w.spec.interfaceName,
    ...(derived ? { derived } : {}),
    kind,
    message,
  };
}
