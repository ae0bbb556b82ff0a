// policy: each networking.k8s.io/v1 NetworkPolicy `ns/name` -> our
// NetworkPolicy `knp.default.<name>` in `ns` (src/model/k8s-networkpolicy.ts), on etcd.
import { kubeSource } from '../k8s/list-watch.js';
import {
  convertK8sNetworkPolicy,
  K8S_POLICY_PREFIX,
  PolicyConversionError,
  type KubeNetworkPolicy,
} from '../model/k8s-networkpolicy.js';
import { MirrorController, controllerMetrics, type ControllerContext } from './framework.js';

const NETWORKPOLICIES_PATH = '/apis/networking.k8s.io/v1/networkpolicies';

export function policyController(ctx: ControllerContext): MirrorController {
  const m = controllerMetrics(ctx.registry);
  const mirrorKey = (o: KubeNetworkPolicy) =>
    `${o.metadata.namespace ?? 'default'}/${K8S_POLICY_PREFIX}${o.metadata.name}`;
  return new MirrorController(ctx, {
    name: 'policy',
    kind: 'NetworkPolicy',
    isMirror: (r) => r.metadata.name.startsWith(K8S_POLICY_PREFIX),
    sources: [
      {
        source: kubeSource(ctx.kube, NETWORKPOLICIES_PATH),
        mirrorKeys: (_k, obj?: KubeNetworkPolicy, old?: KubeNetworkPolicy) => [mirrorKey((obj ?? old)!)],
      },
    ],
    desired(key, get) {
      const [ns, name] = key.split('/', 2) as [string, string];
      const np = get<KubeNetworkPolicy>(0, `${ns}/${name.slice(K8S_POLICY_PREFIX.length)}`);
      if (!np) return undefined;
      try {
        return convertK8sNetworkPolicy(np);
      } catch (e) {
        if (!(e instanceof PolicyConversionError)) throw e;
        // The API server validates these fields, so this is an object it did not
        // check (an old server, a direct etcd write). No mirror beats a wrong one.
        m.errors.inc({ controller: 'policy' });
        ctx.log.error(
          `policy controller: NetworkPolicy ${ns}/${np.metadata.name} cannot be converted; it is not enforced`,
          { error: e.message },
        );
        return undefined;
      }
    },
    allKeys: (list) => list<KubeNetworkPolicy>(0).map(mirrorKey),
  });
}
