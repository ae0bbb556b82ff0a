// `netpluginctl node status`: the BGP state of this node from the BIRD the
// agent runs (--bgp on): whether BIRD runs, and its sessions per address
// family, read from BIRD's control socket in the agent's --bird-run-dir.
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { birdcPath, bgpSessions, parseShowProtocols, runBirdc, type BgpSession } from '../bird/client.js';
import { BIRD_CONFIG_FILE, BIRD_CONTROL_SOCKET, DEFAULT_BIRD_PATH, DEFAULT_BIRD_RUN_DIR } from '../model/bgp.js';
import { bool, CtlError, noPositional, parseCommand, printHelp, str, type CtlCommand, type CtlIO } from './io.js';

export const NODE_STATUS_HELP = `Usage: netpluginctl node status [--bird-run-dir DIR] [--bird-path PATH] [-o json]

Shows whether BIRD runs on this node and its BGP sessions per address family (PEER ADDRESS,
PEER TYPE: node-to-node mesh, global or node specific, STATE, SINCE, INFO), read from BIRD's
control socket. Run it on the node (e.g. kubectl exec into the agent pod).

  --bird-run-dir DIR   the agent's --bird-run-dir (default ${DEFAULT_BIRD_RUN_DIR})
  --bird-path PATH     the agent's --bird-path; birdc is taken from its directory (default ${DEFAULT_BIRD_PATH})
  -o, --output json    machine-readable output
`;

export interface NodeStatus {
  bgp: 'enabled' | 'disabled';
  bird: { running: boolean; version?: string | undefined; error?: string | undefined };
  peers: BgpSession[];
}

export async function nodeStatus(runDir: string, birdPath: string): Promise<NodeStatus> {
  if (!existsSync(join(runDir, BIRD_CONFIG_FILE))) return { bgp: 'disabled', bird: { running: false }, peers: [] };
  const socket = join(runDir, BIRD_CONTROL_SOCKET);
  try {
    const out = await runBirdc(birdcPath(birdPath), socket, ['show', 'protocols']);
    const version = /^BIRD (\S+) ready\./m.exec(out)?.[1];
    return { bgp: 'enabled', bird: { running: true, version }, peers: bgpSessions(parseShowProtocols(out)) };
  } catch (e) {
    return { bgp: 'enabled', bird: { running: false, error: (e as Error).message }, peers: [] };
  }
}

function table(rows: string[][]): string {
  const w = rows[0]!.map((_, i) => Math.max(...rows.map((r) => r[i]!.length)));
  const line = `+${w.map((n) => '-'.repeat(n + 2)).join('+')}+\n`;
  const fmt = (r: string[]) => `| ${r.map((c, i) => c.padEnd(w[i]!)).join(' | ')} |\n`;
  return line + fmt(rows[0]!) + line + rows.slice(1).map(fmt).join('') + line;
}

export function formatNodeStatus(s: NodeStatus, runDir: string): string {
  let out =
    `BIRD is running (version ${s.bird.version ?? 'unknown'}), control socket ` +
    `${join(runDir, BIRD_CONTROL_SOCKET)}\n`;
  for (const fam of [4, 6] as const) {
    const peers = s.peers.filter((p) => p.family === fam);
    out += `\nIPv${fam} BGP status\n`;
    if (!peers.length) {
      out += `No IPv${fam} peers found.\n`;
      continue;
    }
    out += table([
      ['PEER ADDRESS', 'PEER TYPE', 'STATE', 'SINCE', 'INFO'],
      ...peers.map((p) => [p.peerAddress, p.peerType, p.state, p.since, p.info]),
    ]);
  }
  return out;
}

export const cmdNodeStatus: CtlCommand = async (rest, io: CtlIO, s) => {
  const p = parseCommand(
    rest,
    [
      { name: 'bird-run-dir', type: 'string' },
      { name: 'bird-path', type: 'string' },
      { name: 'output', short: 'o', type: 'string' },
    ],
    'node status',
    s,
  );
  if (bool(p, 'help')) return printHelp(io, NODE_STATUS_HELP);
  noPositional(p, 'node status');
  const output = str(p, 'output');
  if (output !== undefined && output !== 'json')
    throw new CtlError(`-o ${JSON.stringify(output)} is not supported by node status; use -o json or no -o`);
  const runDir = str(p, 'bird-run-dir') ?? DEFAULT_BIRD_RUN_DIR;
  const st = await nodeStatus(runDir, str(p, 'bird-path') ?? DEFAULT_BIRD_PATH);
  if (output === 'json') {
    io.stdout(JSON.stringify(st, null, 2) + '\n');
    return st.bird.running ? 0 : 1;
  }
  if (st.bgp === 'disabled') {
    throw new CtlError(
      `BGP is not enabled on this node: no BIRD configuration in ${runDir} (the agent runs BIRD with --bgp on; give ` +
        `its --bird-run-dir if it differs)`,
    );
  }
  if (!st.bird.running) {
    throw new CtlError(
      `BIRD is not running on this node (${st.bird.error}); the agent restarts it: check the agent's log for "bgp:" ` +
        `lines`,
    );
  }
  io.stdout(formatNodeStatus(st, runDir));
  return 0;
};
