// `netpluginctl policy explain`: the policies selecting a pod and the rule
// deciding a connection (with --staged, also what the staged policies would
// decide); `netpluginctl policy promote`: a staged policy made the enforced one.
// The work is in src/ctl/policy.ts and src/ctl/promote.ts (loaded when the
// command runs).
import { bool, CtlError, DRY_RUN, dryRun, parseCommand, printHelp, str, type CtlCommand, type CtlGroup } from './io.js';

const POLICY_HELP = {
  policy: `Usage: netpluginctl policy explain POD [-n NS] [--peer NS/POD|POD|ADDR] [--port N] [--staged] [-o json]
       netpluginctl policy promote KIND/NAME [-n NS] [--dry-run]

Commands:
  explain POD         policies selecting a pod (or hep/NAME: a host endpoint); with --peer/--port, the
                      rule deciding a connection
  promote KIND/NAME   make a staged policy the enforced one (or delete it, for stagedAction: Delete)
`,
  'policy explain': `Usage: netpluginctl policy explain POD [-n NS] [--peer NS/POD|POD|ADDR] [--port N]
         [--source-port N] [--protocol P] [--staged] [-o json]
       netpluginctl policy explain hep/NAME [--peer ADDR] [--port N] [--protocol P] [-o json]

Shows the pod's endpoint (addresses, labels with those its profiles apply), the
policies that select it for ingress and egress in evaluation order, and with
--peer the rule that decides a connection each way, as the node agent enforces it:
  --peer     the other side: a pod (NS/POD, or POD in -n NS) or an address
  --port     destination port (default: none; rules with ports then do not match)
  --source-port  source port (default: none; rules with source ports then do not match)
  --protocol TCP (default), UDP, SCTP, UDPLite, ICMP, ICMPv6
  --staged   also the pending verdicts: what the policies would decide with every staged
             policy (StagedNetworkPolicy, StagedGlobalNetworkPolicy,
             StagedKubernetesNetworkPolicy) applied, naming the staged policy that decides
For a host endpoint (hep/NAME or hostendpoint/NAME): its policies for the host's
own traffic, forwarded traffic (applyOnForward), before DNAT (preDNAT) and untracked
(doNotTrack), its node's failsafe ports (AgentConfiguration), and with --peer ADDR
each one's decision (ingress: from the peer to the host; egress: to the peer).
`,
  'policy promote': `Usage: netpluginctl policy promote KIND/NAME [-n NS] [--dry-run]
       netpluginctl policy promote KIND NAME [-n NS] [--dry-run]

Makes a staged policy the enforced one, then removes the staged object:
  StagedNetworkPolicy NS/NAME         -> NetworkPolicy NS/NAME
  StagedGlobalNetworkPolicy NAME      -> GlobalNetworkPolicy NAME
  StagedKubernetesNetworkPolicy NS/NAME -> the Kubernetes NetworkPolicy NS/NAME
                                         (networking.k8s.io/v1, written through the Kubernetes API)
With stagedAction: Set the enforced policy is created or replaced with the staged spec (and the
staged object's labels and annotations); with stagedAction: Delete it is deleted.
On the etcd datastore both writes are one transaction: both happen or neither. On the
Kubernetes datastore, and for a StagedKubernetesNetworkPolicy, the enforced policy is written
first and the staged object removed after it; a failure in between is reported and leaves
the staged object to remove or promote again. A StagedKubernetesNetworkPolicy needs the
Kubernetes API also with the etcd datastore (--kubeconfig or KUBECONFIG): netplugin-kube-controllers
then mirrors the policy into etcd as NetworkPolicy NS/knp.default.NAME.
  KIND       snp, sgnp, sknp or the kinds' full names
  -n NS      the namespace of a namespaced staged policy (default: default)
  --dry-run  print what would be written and removed; change nothing
`,
} satisfies Record<string, string>;

const runPolicy: CtlCommand = async (rest, io, s) => {
  const sub = rest[0];
  if (!sub || sub === '--help' || sub === '-h') return printHelp(io, POLICY_HELP.policy);
  if (sub === 'promote') return runPromote(rest.slice(1), io, s);
  if (sub !== 'explain')
    throw new CtlError(
      `unknown policy command '${sub}'; ` +
        "try 'netpluginctl policy explain POD' or 'netpluginctl policy promote KIND/NAME'",
    );
  const p = parseCommand(
    rest.slice(1),
    [
      { name: 'namespace', short: 'n', type: 'string' },
      { name: 'peer', type: 'string' },
      { name: 'port', type: 'string' },
      { name: 'source-port', type: 'string' },
      { name: 'protocol', type: 'string' },
      { name: 'staged', type: 'bool' },
      { name: 'output', short: 'o', type: 'string' },
    ],
    'policy explain',
    s,
  );
  if (bool(p, 'help')) return printHelp(io, POLICY_HELP['policy explain']);
  const [pod, ...extra] = p.positional;
  if (!pod || extra.length)
    throw new CtlError(
      'policy explain takes one pod name, ' +
        "e.g. 'netpluginctl policy explain web-0 -n shop --peer shop/client-1 --port 80'",
    );
  // A lazily loaded command: explain brings the whole policy evaluation.
  const { cmdPolicyExplain } = await import('./policy.js');
  const opt = (n: string) => str(p, n);
  return cmdPolicyExplain(await s.datastore(), io, {
    pod,
    ...(opt('namespace') ? { namespace: opt('namespace')! } : {}),
    ...(opt('peer') ? { peer: opt('peer')! } : {}),
    ...(opt('port') ? { port: opt('port')! } : {}),
    ...(opt('source-port') ? { sourcePort: opt('source-port')! } : {}),
    ...(opt('protocol') ? { protocol: opt('protocol')! } : {}),
    ...(opt('output') ? { output: opt('output')! } : {}),
    ...(bool(p, 'staged') ? { staged: true } : {}),
  });
};

const runPromote: CtlCommand = async (rest, io, s) => {
  const p = parseCommand(rest, [{ name: 'namespace', short: 'n', type: 'string' }, DRY_RUN], 'policy promote', s);
  if (bool(p, 'help')) return printHelp(io, POLICY_HELP['policy promote']);
  const args = p.positional;
  let kind: string | undefined;
  let name: string | undefined;
  if (args.length === 1 && args[0]!.includes('/')) [kind, name] = args[0]!.split('/', 2);
  else if (args.length === 2) [kind, name] = args;
  if (!kind || !name) {
    throw new CtlError(
      `policy promote takes KIND/NAME (or KIND NAME), e.g. 'netpluginctl policy promote snp/allow-web -n shop'`,
    );
  }
  // A lazily loaded command (rarely run).
  const { cmdPolicyPromote } = await import('./promote.js');
  return cmdPolicyPromote(s, io, { kind, name, namespace: str(p, 'namespace'), dryRun: dryRun(p) });
};

/** policy explain, policy promote. */
export const policyGroup: CtlGroup = { commands: { policy: runPolicy }, help: POLICY_HELP };
