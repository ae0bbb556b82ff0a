// `netpluginctl flows`: the aggregator's flows (netplugin-flows' HTTP API), one
// line per flow as `hubble observe` prints them, or followed live (the API's
// Server-Sent Events).
import { readFileSync } from 'node:fs';
import { bool, CtlError, parseCommand, printHelp, str, type CtlCommand, type CtlIO } from './io.js';
import type { Flow, PolicyHit } from '../flows/record.js';

export const FLOWS_HELP = {
  flows: `Usage: netpluginctl flows [--server URL] [--follow] [--last N] [--action Allow|Deny|Pass]
                         [--namespace NS] [--pod [NS/]NAME] [--policy NAME] [-o wide|json]

Flows from the flow-log aggregator (netplugin-flows), oldest first, one line each:
  TIME: SOURCE -> DESTINATION:PORT PROTOCOL VERDICT (reporter) POLICY
where POLICY is the rule that decided (the last of the enforced trace).

  --server URL       the aggregator's API (default $NETPLUGIN_FLOWS_SERVER, else http://127.0.0.1:8081;
                     e.g. after kubectl -n kube-system port-forward deploy/netplugin-flows 8081)
  --token-file FILE  bearer token for an aggregator started with --api-token-file ($NETPLUGIN_FLOWS_TOKEN)
  -f, --follow       print the last flows, then new and updated ones as they arrive (until interrupted)
  --last N           how many recent flows to print first (default 20)
  --action A         only Allow, Deny or Pass
  --namespace NS     only flows with either end in NS
  --pod [NS/]NAME    only flows with either end the workload NAME (in NS)
  --policy NAME      only flows whose enforced or pending trace names the policy NAME
  -o wide|json       wide: also counters and the pending (staged) verdicts; json: one flow object per line
`,
} satisfies Record<string, string>;

const VERDICT: Record<string, string> = { Allow: 'ALLOWED', Deny: 'DENIED', Pass: 'PASSED' };

function end(type: string, ns: string, name: string): string {
  if (type === 'net') return `${name === 'pub' ? 'world' : 'private-net'} (net/${name})`;
  return `${ns ? `${ns}/` : ''}${name}${type === 'hep' ? ' (host)' : ''}`;
}

function hitText(h: PolicyHit): string {
  const where = h.namespace ? `${h.namespace}/` : '';
  return (
    `${h.kind} ${h.tier && h.kind !== 'KubernetesNetworkPolicy' && h.kind !== 'Profile' ? `${h.tier}:` : ''}` +
    `${where}${h.name}${h.ruleIndex >= 0 ? `[${h.ruleIndex}]` : ''}`
  );
}

function stamp(iso: string): string {
  const d = new Date(iso);
  const mon = d.toLocaleString('en-US', { month: 'short', timeZone: 'UTC' });
  const p = (n: number, w = 2) => String(n).padStart(w, '0');
  return (
    `${mon} ${String(d.getUTCDate()).padStart(2, ' ')} ` +
    `${p(d.getUTCHours())}:${p(d.getUTCMinutes())}:${p(d.getUTCSeconds())}.${p(d.getUTCMilliseconds(), 3)}`
  );
}

/** One flow as a line (hubble observe's shape). */
export function formatFlow(f: Flow, output: 'line' | 'wide' | 'json'): string {
  if (output === 'json') return JSON.stringify(f);
  const port = f.destPort ? `:${f.destPort}` : '';
  const decisive = f.policies.enforced[f.policies.enforced.length - 1];
  let line =
    `${stamp(f.startTime)}: ${end(f.sourceType, f.sourceNamespace, f.sourceName)} -> ` +
    `${end(f.destType, f.destNamespace, f.destName)}${port} ${f.protocol} ${VERDICT[f.action] ?? f.action} (` +
    `${f.reporter})${decisive ? ` ${hitText(decisive)}` : ''}`;
  if (output === 'wide') {
    line +=
      ` packets=${f.packetsIn}/${f.packetsOut} bytes=${f.bytesIn}/${f.bytesOut} conns=${f.connectionsStarted}/` +
      `${f.connectionsCompleted}/${f.connectionsLive}`;
    if (f.policies.pending.length)
      line += ` pending=${f.policies.pending.map((h) => `${hitText(h)}:${h.action}`).join(',')}`;
  }
  return line;
}

async function request(url: string, token: string | undefined, signal?: AbortSignal): Promise<Response> {
  let res: Response;
  try {
    res = await fetch(url, {
      headers: token ? { authorization: `Bearer ${token}` } : {},
      ...(signal ? { signal } : {}),
    });
  } catch (e) {
    if ((e as Error).name === 'AbortError') throw e;
    const cause = (e as { cause?: { code?: string; message?: string } }).cause;
    throw new CtlError(
      `cannot reach the flow aggregator at ${new URL(url).origin}: ` +
        `${cause?.code ?? cause?.message ?? (e as Error).message}; pass --server URL (or port-forward to ` +
        `netplugin-flows)`,
    );
  }
  if (!res.ok) {
    const body = (await res.json().catch(() => ({}))) as { error?: string };
    throw new CtlError(
      `flow aggregator: HTTP ${res.status}: ` +
        `${body.error ?? res.statusText}${res.status === 401 ? ' (pass --token-file FILE)' : ''}`,
    );
  }
  return res;
}

const runFlows: CtlCommand = async (rest, io, s) => {
  const p = parseCommand(
    rest,
    [
      { name: 'server', type: 'string' },
      { name: 'token-file', type: 'string' },
      { name: 'follow', short: 'f', type: 'bool' },
      { name: 'last', type: 'string' },
      { name: 'action', type: 'string' },
      { name: 'namespace', short: 'n', type: 'string' },
      { name: 'pod', type: 'string' },
      { name: 'policy', type: 'string' },
      { name: 'output', short: 'o', type: 'string' },
    ],
    'flows',
    s,
  );
  if (bool(p, 'help')) return printHelp(io, FLOWS_HELP.flows);
  if (p.positional.length)
    throw new CtlError(
      `flows takes no arguments (got ${p.positional.join(' ')}); filter with --namespace, --pod, --action or --policy`,
    );
  const o = str(p, 'output');
  if (o !== undefined && o !== 'wide' && o !== 'json') throw new CtlError(`-o ${JSON.stringify(o)}: use wide or json`);
  const output = (o ?? 'line') as 'line' | 'wide' | 'json';
  const action = str(p, 'action');
  if (action !== undefined && !['Allow', 'Deny', 'Pass'].includes(action))
    throw new CtlError(`--action ${JSON.stringify(action)}: use Allow, Deny or Pass`);
  const lastText = str(p, 'last') ?? '20';
  if (!/^\d+$/.test(lastText) || Number(lastText) > 10_000)
    throw new CtlError(`--last ${JSON.stringify(lastText)}: expected a number 0-10000`);
  const last = Number(lastText);
  const server = (str(p, 'server') ?? io.env.NETPLUGIN_FLOWS_SERVER ?? 'http://127.0.0.1:8081').replace(/\/+$/, '');
  if (!/^https?:\/\/[^/]+$/.test(server))
    throw new CtlError(`--server ${JSON.stringify(server)}: expected http(s)://HOST:PORT`);
  const tokenFile = str(p, 'token-file');
  let token = io.env.NETPLUGIN_FLOWS_TOKEN;
  if (tokenFile) {
    try {
      token = readFileSync(tokenFile, 'utf8').trim();
    } catch (e) {
      throw new CtlError(`--token-file ${tokenFile}: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}`);
    }
  }
  const filter = new URLSearchParams();
  if (action) filter.set('action', action);
  const ns = str(p, 'namespace');
  if (ns) filter.set('namespace', ns);
  const pod = str(p, 'pod');
  if (pod) filter.set('endpoint', pod);
  const policy = str(p, 'policy');
  if (policy) filter.set('policy', policy);

  const print = (f: Flow) => io.stdout(formatFlow(f, output) + '\n');
  if (last > 0) {
    const q = new URLSearchParams(filter);
    q.set('sortBy', '-startTime');
    q.set('pageSize', String(last));
    const body = (await (await request(`${server}/api/v1/flows?${q}`, token)).json()) as { items: Flow[] };
    for (const f of body.items.reverse()) print(f);
  }
  if (!bool(p, 'follow')) return 0;
  await follow(io, `${server}/api/v1/flows?${new URLSearchParams([...filter, ['watch', 'true']])}`, token, print);
  return 0;
};

/** Prints each flow of the watch stream until the server ends it or SIGINT/SIGTERM. */
async function follow(io: CtlIO, url: string, token: string | undefined, print: (f: Flow) => void): Promise<void> {
  const ac = new AbortController();
  const stop = () => ac.abort();
  process.once('SIGINT', stop);
  process.once('SIGTERM', stop);
  try {
    const res = await request(url, token, ac.signal);
    const dec = new TextDecoder();
    let buf = '';
    for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
      buf += dec.decode(chunk, { stream: true });
      let i;
      while ((i = buf.indexOf('\n\n')) >= 0) {
        const ev = buf.slice(0, i);
        buf = buf.slice(i + 2);
        const data = ev
          .split('\n')
          .filter((l) => l.startsWith('data:'))
          .map((l) => l.slice(5))
          .join('\n');
        if (data) print(JSON.parse(data) as Flow);
      }
    }
    io.stderr('the flow aggregator ended the stream\n');
  } catch (e) {
    if ((e as Error).name !== 'AbortError') throw e;
  } finally {
    process.off('SIGINT', stop);
    process.off('SIGTERM', stop);
  }
}

export const flowsCommand = runFlows;
