// netpluginctl policy promote: a staged policy becomes the enforced one (stagedAction Set: the
// enforced policy of its namespace and name is created or replaced; Delete: it is deleted), then
// the staged object is removed. Both writes are guarded by the revisions read, so a policy
// changed by someone else meanwhile is never overwritten: on etcd one transaction (all or
// nothing), on the Kubernetes API the enforced write first, then the staged object's removal.
import { DatastoreError } from '../errors.js';
import type { Datastore, TxnOp } from '../datastore/types.js';
import { getIfExists } from '../datastore/cas.js';
import { TxnError } from '../datastore/txn.js';
import type { KubeClient, KubeObject } from '../k8s/client.js';
import { K8S_POLICY_PREFIX } from '../model/k8s-networkpolicy.js';
import { policyId } from '../model/policy-eval.js';
import type { Kind, Resource } from '../model/resources.js';
import {
  isStagedKind,
  promotedObject,
  stagedAction,
  stagedLabel,
  stagedTarget,
  type StagedPolicy,
} from '../model/staged.js';
import { CtlError, type CtlIO, type CtlSession } from './io.js';
import { resolveKind } from './kinds.js';

interface PromoteOptions {
  kind: string;
  name: string;
  namespace?: string | undefined;
  dryRun?: boolean | undefined;
}

const enc = encodeURIComponent;

export async function cmdPolicyPromote(s: CtlSession, io: CtlIO, o: PromoteOptions): Promise<number> {
  const info = resolveKind(o.kind);
  if (!isStagedKind(info.kind)) {
    throw new CtlError(
      'policy promote takes a staged policy (StagedNetworkPolicy, StagedGlobalNetworkPolicy or ' +
        `StagedKubernetesNetworkPolicy), not ${info.kind}`,
    );
  }
  const kind = info.kind;
  const namespace = kind === 'StagedGlobalNetworkPolicy' ? undefined : (o.namespace ?? 'default');
  if (kind === 'StagedGlobalNetworkPolicy' && o.namespace !== undefined) {
    throw new CtlError(`StagedGlobalNetworkPolicy is cluster-scoped; drop -n ${o.namespace}`);
  }
  const ds = o.dryRun ? await s.datastore() : await s.writable();
  let staged: StagedPolicy;
  try {
    staged = (await ds.get(kind, o.name, namespace)) as StagedPolicy;
  } catch (e) {
    if (!DatastoreError.is(e, 'NotFound')) throw e;
    const where = namespace !== undefined ? ` in namespace ${namespace}` : '';
    const list = `netpluginctl get ${kind.toLowerCase()}${namespace !== undefined ? ` -n ${namespace}` : ''}`;
    throw new CtlError(`${kind} ${JSON.stringify(o.name)} not found${where}; list them with '${list}'`);
  }
  const dry = o.dryRun ? ' (dry run)' : '';
  const from = `${stagedLabel(staged)}, stagedAction ${stagedAction(staged)}`;
  const promotion: Promotion = { io, staged, from, dry };
  if (staged.kind === 'StagedKubernetesNetworkPolicy') await promoteToKubernetes(s, ds, promotion);
  else await promoteInDatastore(ds, promotion);
  if (!o.dryRun) io.stdout(`${stagedLabel(staged)} removed\n`);
  else io.stdout(`${stagedLabel(staged)} would be removed${dry}\n`);
  return 0;
}

type Verb = 'created' | 'replaced' | 'deleted' | 'absent';

/** One promotion: the staged object, what it is called in the lines printed (`from`), and the dry-run mark. */
interface Promotion {
  io: CtlIO;
  staged: StagedPolicy;
  from: string;
  /** ' (dry run)' or ''. */
  dry: string;
}

/** The line promote prints about the enforced policy (`dry`: ' (dry run)' or ''). */
function outcome(target: string, verb: Verb, from: string, dry: string): string {
  if (verb === 'absent') return `${target} does not exist: nothing to delete (promoted ${from})${dry}`;
  return `${target} ${dry ? 'would be ' : ''}${verb} (promoted ${from})${dry}`;
}

/** The staged object's removal, guarded by the revision promoted. */
function removeStaged(staged: StagedPolicy): TxnOp {
  return deleteOp(staged.kind, staged.metadata.name, staged.metadata.namespace, staged.metadata.resourceVersion);
}

function deleteOp(kind: Kind, name: string, namespace: string | undefined, revision: string | undefined): TxnOp {
  return {
    op: 'delete',
    kind,
    name,
    ...(namespace !== undefined ? { namespace } : {}),
    ...(revision !== undefined ? { revision } : {}),
  };
}

/** StagedNetworkPolicy and StagedGlobalNetworkPolicy: both writes in the datastore. */
async function promoteInDatastore(ds: Datastore, { io, staged, from, dry }: Promotion): Promise<void> {
  const t = stagedTarget(staged);
  const target = `${t.kind} ${policyId(t)}`;
  if (t.kind === 'NetworkPolicy' && t.name.startsWith(K8S_POLICY_PREFIX)) {
    // knp.default.* mirror Kubernetes NetworkPolicies: a write here would be undone (etcd) or is refused (Kubernetes).
    const k8sName = t.name.slice(K8S_POLICY_PREFIX.length);
    throw new CtlError(
      `${stagedLabel(staged)} would write ${target}, ` +
        `which mirrors the Kubernetes NetworkPolicy ${t.namespace}/${k8sName}; ` +
        `stage that one as a StagedKubernetesNetworkPolicy named ${JSON.stringify(k8sName)} instead`,
    );
  }
  const existing = await getIfExists(ds, t.kind, t.name, t.namespace);
  const ops: TxnOp[] = [];
  let verb: Verb = 'absent';
  if (stagedAction(staged) === 'Delete') {
    if (existing) {
      ops.push(deleteOp(t.kind, t.name, t.namespace, existing.metadata.resourceVersion));
      verb = 'deleted';
    }
  } else {
    const promoted = promotedObject(staged);
    if (promoted.kind === 'KubernetesNetworkPolicy')
      throw new Error('unreachable: a Kubernetes policy in the datastore path');
    const res = promoted.res as Resource;
    if (existing) {
      res.metadata.resourceVersion = existing.metadata.resourceVersion;
      if (existing.metadata.uid) res.metadata.uid = existing.metadata.uid;
      if (existing.metadata.creationTimestamp) res.metadata.creationTimestamp = existing.metadata.creationTimestamp;
      ops.push({ op: 'update', res });
      verb = 'replaced';
    } else {
      ops.push({ op: 'create', res });
      verb = 'created';
    }
  }
  ops.push(removeStaged(staged));
  const done = outcome(target, verb, from, '');
  if (dry) {
    io.stdout(`${outcome(target, verb, from, dry)}\n`);
    return;
  }
  try {
    await ds.txn(ops);
  } catch (e) {
    const op = TxnError.opOf(e);
    if (op === undefined || !(e instanceof DatastoreError)) throw e;
    const what = op === ops.length - 1 ? stagedLabel(staged) : target;
    const why =
      e.kind === 'Conflict' || e.kind === 'AlreadyExists' || e.kind === 'NotFound'
        ? `${what} changed while promoting`
        : `writing ${what} failed`;
    if (ds.atomicTxn)
      throw new CtlError(`${why} (${e.message}); nothing was changed: run 'netpluginctl policy promote' again`);
    // Kubernetes: ordered writes; the enforced policy may be written already.
    if (op === ops.length - 1 && ops.length > 1) {
      throw new CtlError(
        `${done}, but ${stagedLabel(staged)} was not removed: ${why} (${e.message}); ` +
          "check it and delete it with 'netpluginctl delete'",
      );
    }
    throw new CtlError(`${why} (${e.message}); nothing was changed: run 'netpluginctl policy promote' again`);
  }
  io.stdout(`${done}\n`);
}

/** The Kubernetes API client promote writes Kubernetes NetworkPolicies with; a clear error when there is none. */
async function kubeFor(s: CtlSession, ds: Datastore, staged: StagedPolicy): Promise<KubeClient> {
  const conf = s.config();
  if (ds.type !== 'kubernetes' && !conf?.kubernetes && !process.env.KUBERNETES_SERVICE_HOST) {
    const ns = staged.metadata.namespace ?? 'default';
    throw new CtlError(
      `${stagedLabel(staged)} promotes to a Kubernetes NetworkPolicy (networking.k8s.io/v1), ` +
        'written through the Kubernetes API, ' +
        `and no Kubernetes API is configured beside the ${ds.type} datastore: pass --kubeconfig PATH or set ` +
        `KUBECONFIG. ` +
        'netplugin-kube-controllers then mirrors it into the datastore as NetworkPolicy ' +
        `${ns}/${K8S_POLICY_PREFIX}${staged.metadata.name}`,
    );
  }
  return s.kube();
}

/**
 * StagedKubernetesNetworkPolicy: the Kubernetes NetworkPolicy through the API, then the staged object
 * from the datastore.
 */
async function promoteToKubernetes(s: CtlSession, ds: Datastore, { io, staged, from, dry }: Promotion): Promise<void> {
  const kube = await kubeFor(s, ds, staged);
  const ns = staged.metadata.namespace ?? 'default';
  const name = staged.metadata.name;
  const target = `Kubernetes NetworkPolicy ${ns}/${name}`;
  const coll = `/apis/networking.k8s.io/v1/namespaces/${enc(ns)}/networkpolicies`;
  let existing: KubeObject | undefined;
  try {
    existing = await kube.request<KubeObject>('GET', `${coll}/${enc(name)}`);
  } catch (e) {
    if (!DatastoreError.is(e, 'NotFound')) throw e;
  }
  const mirrored =
    ds.type === 'etcdv3'
      ? `; netplugin-kube-controllers mirrors it into etcd as NetworkPolicy ${ns}/${K8S_POLICY_PREFIX}${name}`
      : '';
  let verb: Verb = 'absent';
  let write: (() => Promise<unknown>) | undefined;
  if (stagedAction(staged) === 'Delete') {
    if (existing) {
      const preconditions = { resourceVersion: existing.metadata.resourceVersion, uid: existing.metadata.uid };
      write = () =>
        kube.request('DELETE', `${coll}/${enc(name)}`, { kind: 'DeleteOptions', apiVersion: 'v1', preconditions });
      verb = 'deleted';
    }
  } else {
    const promoted = promotedObject(staged);
    if (promoted.kind !== 'KubernetesNetworkPolicy')
      throw new Error('unreachable: a netplugin policy in the Kubernetes path');
    const obj = promoted.object as unknown as KubeObject;
    if (existing) {
      obj.metadata.resourceVersion = existing.metadata.resourceVersion;
      write = () => kube.request('PUT', `${coll}/${enc(name)}`, obj);
      verb = 'replaced';
    } else {
      write = () => kube.request('POST', coll, obj);
      verb = 'created';
    }
  }
  const done = `${outcome(target, verb, from, '')}${verb === 'absent' ? '' : mirrored}`;
  if (dry) {
    io.stdout(`${outcome(target, verb, from, dry)}${verb === 'absent' ? '' : mirrored}\n`);
    return;
  }
  try {
    await write?.();
  } catch (e) {
    if (!(e instanceof DatastoreError)) throw e;
    if (e.kind === 'Conflict' || e.kind === 'AlreadyExists' || e.kind === 'NotFound') {
      throw new CtlError(
        `${target} changed while promoting (${e.message}); ` +
          "nothing was changed: run 'netpluginctl policy promote' again",
      );
    }
    throw new CtlError(`writing ${target} failed (${e.message}); nothing was changed`);
  }
  io.stdout(`${done}\n`);
  try {
    await ds.delete(staged.kind, name, { namespace: ns, revision: staged.metadata.resourceVersion });
  } catch (e) {
    if (!(e instanceof DatastoreError)) throw e;
    const why = e.kind === 'Conflict' || e.kind === 'NotFound' ? 'it changed while promoting' : 'removing it failed';
    throw new CtlError(
      `${target} is written, but ${stagedLabel(staged)} was not removed: ${why} (${e.message}); ` +
        "check it and delete it with 'netpluginctl delete'",
    );
  }
}
