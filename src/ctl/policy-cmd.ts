// `netpluginctl policy explain`: the policies selecting a pod and the rule
// deciding a connection; the evaluation and its printing are src/ctl/policy.ts
// (loaded when the command runs).
import { bool, CtlError, parseCommand, printHelp, str, type CtlCommand, type CtlGroup } from './io.js';

const POLICY_HELP = {
  'policy explain': `Usage: netpluginctl policy explain POD [-n NS] [--peer NS/POD|POD|ADDR] [--port N]
                                  [--source-port N] [--protocol P] [-o json]

Shows the pod's endpoint (addresses, labels with those its profiles apply), the
policies that select it for ingress and egress in evaluation order, and with
--peer the rule that decides a connection each way, as the node agent enforces it:
  --peer     the other side: a pod (NS/POD, or POD in -n NS) or an address
  --port     destination port (default: none; rules with ports then do not match)
  --source-port  source port (default: none; rules with source ports then do not match)
  --protocol TCP (default), UDP, SCTP, UDPLite, ICMP, ICMPv6
`,
} satisfies Record<string, string>;

const runPolicy: CtlCommand = async (rest, io, s) => {
  const sub = rest[0];
  if (!sub || sub === '--help' || sub === '-h') return printHelp(io, POLICY_HELP['policy explain']);
  if (sub !== 'explain') throw new CtlError(`unknown policy command '${sub}'; try 'netpluginctl policy explain POD'`);
  const p = parseCommand(
    rest.slice(1),
    [
      { name: 'namespace', short: 'n', type: 'string' },
      { name: 'peer', type: 'string' },
      { name: 'port', type: 'string' },
      { name: 'source-port', type: 'string' },
      { name: 'protocol', type: 'string' },
      { name: 'output', short: 'o', type: 'string' },
    ],
    'policy explain',
    s,
  );
  if (bool(p, 'help')) return printHelp(io, POLICY_HELP['policy explain']);
  const [pod, ...extra] = p.positional;
  if (!pod || extra.length)
    throw new CtlError(
      `policy explain takes one pod name, e.g. 'netpluginctl policy explain web-0 -n shop --peer shop/client-1 ` +
        `--port 80'`,
    );
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
  });
};

/** policy explain. */
export const policyGroup: CtlGroup = { commands: { policy: runPolicy }, help: POLICY_HELP };
