// profile: each Namespace -> Profile `kns.<namespace>`, each ServiceAccount ->
// Profile `ksa.<namespace>.<name>` (src/model/profiles.ts), on etcd.
import { kubeSource } from '../k8s/list-watch.js';
import type { KubeObject } from '../k8s/client.js';
import * as profiles from '../model/profiles.js';
import { NAMESPACE_PROFILE_PREFIX, SERVICEACCOUNT_PROFILE_PREFIX } from '../model/policy.js';
import { MirrorController, type ControllerContext } from './framework.js';

export function profileController(ctx: ControllerContext): MirrorController {
  const saKey = (o: KubeObject) =>
    profiles.serviceAccountProfileName(o.metadata.namespace ?? 'default', o.metadata.name);
  return new MirrorController(ctx, {
    name: 'profile',
    kind: 'Profile',
    isMirror: (r) =>
      r.metadata.name.startsWith(NAMESPACE_PROFILE_PREFIX) || r.metadata.name.startsWith(SERVICEACCOUNT_PROFILE_PREFIX),
    sources: [
      { source: kubeSource(ctx.kube, '/api/v1/namespaces'), mirrorKeys: (key) => [profiles.namespaceProfileName(key)] },
      {
        source: kubeSource(ctx.kube, '/api/v1/serviceaccounts'),
        mirrorKeys: (_key, obj?: KubeObject, old?: KubeObject) => [saKey((obj ?? old)!)],
      },
    ],
    desired(key, get) {
      const p = profiles.parseProfileName(key);
      if (!p) return undefined;
      if (p.serviceAccount === undefined) {
        const ns = get<KubeObject>(0, p.namespace);
        return ns ? profiles.namespaceToProfile(ns) : undefined;
      }
      const sa = get<KubeObject>(1, `${p.namespace}/${p.serviceAccount}`);
      return sa ? profiles.serviceAccountToProfile(sa) : undefined;
    },
    allKeys: (list) => [
      ...list<KubeObject>(0).map((n) => profiles.namespaceProfileName(n.metadata.name)),
      ...list<KubeObject>(1).map(saKey),
    ],
  });
}
