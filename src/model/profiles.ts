// Kubernetes Namespaces and ServiceAccounts as Profiles: the profiles every
// pod endpoint names (`kns.<namespace>`, `ksa.<namespace>.<serviceaccount>`,
// see src/workload/workload.ts). A profile's labelsToApply are added to the labels
// of the endpoints that name it, which is how a NetworkPolicy's
// namespaceSelector finds pods: by their namespace's labels, prefixed `pcns.`
// (service account labels: `pcsa.`), so they never clash with pod labels.
// Pure functions: the policy controller (mirrors on etcd) and the kubernetes
// datastore (derived on read) share them.
import { API_VERSION, type ObjectMeta, type Resource } from './resources.js';
import {
  NAMESPACE_LABEL_PREFIX,
  NAMESPACE_NAME_LABEL,
  NAMESPACE_PROFILE_PREFIX as PROFILE_NAMESPACE_PREFIX,
  SERVICEACCOUNT_LABEL_PREFIX,
  SERVICEACCOUNT_PROFILE_PREFIX as PROFILE_SERVICEACCOUNT_PREFIX,
} from './policy.js';

interface KubeMetaLike {
  metadata: Pick<ObjectMeta, 'name' | 'namespace' | 'labels' | 'resourceVersion' | 'uid' | 'creationTimestamp'>;
}

export function namespaceProfileName(namespace: string): string {
  return `${PROFILE_NAMESPACE_PREFIX}${namespace}`;
}

export function serviceAccountProfileName(namespace: string, name: string): string {
  return `${PROFILE_SERVICEACCOUNT_PREFIX}${namespace}.${name}`;
}

function prefixed(prefix: string, labels: Record<string, string> | undefined): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(labels ?? {})) out[`${prefix}${k}`] = v;
  return out;
}

/**
 * `kns.<ns>`: the namespace's labels (prefixed `pcns.`) plus its name.
 * Like Calico's namespace profiles it allows all traffic: with no
 * NetworkPolicy selecting a pod, Kubernetes allows everything.
 */
export function namespaceToProfile(ns: KubeMetaLike): Resource<'Profile'> {
  return {
    apiVersion: API_VERSION,
    kind: 'Profile',
    metadata: { name: namespaceProfileName(ns.metadata.name) },
    spec: {
      labelsToApply: {
        ...prefixed(NAMESPACE_LABEL_PREFIX, ns.metadata.labels),
        [NAMESPACE_NAME_LABEL]: ns.metadata.name,
      },
      ingress: [{ action: 'Allow' }],
      egress: [{ action: 'Allow' }],
    },
  };
}

/** `ksa.<ns>.<name>`: the service account's labels, prefixed `pcsa.`. No rules: the namespace profile decides. */
export function serviceAccountToProfile(sa: KubeMetaLike): Resource<'Profile'> {
  const ns = sa.metadata.namespace || 'default';
  return {
    apiVersion: API_VERSION,
    kind: 'Profile',
    metadata: { name: serviceAccountProfileName(ns, sa.metadata.name) },
    spec: { labelsToApply: prefixed(SERVICEACCOUNT_LABEL_PREFIX, sa.metadata.labels) },
  };
}

/**
 * `kns.web` -> {namespace: 'web'}; `ksa.web.builder` -> {namespace: 'web', serviceAccount: 'builder'}; else undefined.
 */
export function parseProfileName(name: string): { namespace: string; serviceAccount?: string } | undefined {
  if (name.startsWith(PROFILE_NAMESPACE_PREFIX)) {
    const ns = name.slice(PROFILE_NAMESPACE_PREFIX.length);
    return ns ? { namespace: ns } : undefined;
  }
  if (name.startsWith(PROFILE_SERVICEACCOUNT_PREFIX)) {
    // Namespace names cannot contain '.', so the first '.' after the prefix splits them.
    const rest = name.slice(PROFILE_SERVICEACCOUNT_PREFIX.length);
    const dot = rest.indexOf('.');
    if (dot <= 0 || dot === rest.length - 1) return undefined;
    return { namespace: rest.slice(0, dot), serviceAccount: rest.slice(dot + 1) };
  }
  return undefined;
}
