// BIRD's control socket, read with `birdc`: `show protocols` parsed into the
// sessions the agent reports (/readyz, metrics) and `netpluginctl node status`
// prints. Below both: the agent runs BIRD, the CLI only reads it. The protocol
// names are model/bgp.ts's (the renderer's), so the peer type and address come
// back from the name.
import { execFile } from 'node:child_process';
import { dirname, join } from 'node:path';
import { peerOfProtocol, type PeerType } from '../model/bgp.js';

interface ProtocolRow {
  name: string;
  proto: string;
  table: string;
  state: string;
  since: string;
  info: string;
}

export interface BgpSession {
  protocol: string;
  peerAddress: string;
  peerType: PeerType;
  family: 4 | 6;
  /** BIRD's protocol state (up, start, down ...). */
  state: string;
  since: string;
  /** The BGP state (Established, Active, Connect ...) and BIRD's last error, if any. */
  info: string;
  established: boolean;
}

/** birdc next to bird (Debian installs both in /usr/sbin). */
export function birdcPath(birdPath: string): string {
  return join(dirname(birdPath), 'birdc');
}

export function runBirdc(birdc: string, socket: string, args: string[], timeoutMs = 5000): Promise<string> {
  return new Promise((resolve, reject) => {
    execFile(birdc, ['-s', socket, ...args], { timeout: timeoutMs, encoding: 'utf8' }, (err, stdout, stderr) => {
      if (err) reject(new Error(`birdc ${args.join(' ')}: ${(stderr || stdout || err.message).trim()}`));
      else resolve(stdout);
    });
  });
}

/** The rows of `show protocols` (with `timeformat protocol iso long`: Since is a date and a time). */
export function parseShowProtocols(text: string): ProtocolRow[] {
  const out: ProtocolRow[] = [];
  for (const line of text.split('\n')) {
    const f = line.trim().split(/\s+/);
    if (f.length < 6 || f[0] === 'Name' || line.startsWith('BIRD ')) continue;
    const dated = /^\d{4}-\d{2}-\d{2}$/.test(f[4]!) && /^\d{2}:\d{2}:\d{2}/.test(f[5] ?? '');
    const since = dated ? `${f[4]} ${f[5]}` : f[4]!;
    out.push({ name: f[0]!, proto: f[1]!, table: f[2]!, state: f[3]!, since, info: f.slice(dated ? 6 : 5).join(' ') });
  }
  return out;
}

export function bgpSessions(rows: readonly ProtocolRow[]): BgpSession[] {
  const out: BgpSession[] = [];
  for (const r of rows) {
    if (r.proto !== 'BGP') continue;
    const p = peerOfProtocol(r.name);
    if (!p) continue;
    out.push({
      protocol: r.name,
      peerAddress: p.address,
      peerType: p.type,
      family: p.family,
      state: r.state,
      since: r.since,
      info: r.info,
      established: /^Established\b/.test(r.info),
    });
  }
  return out;
}

export async function readSessions(birdc: string, socket: string): Promise<BgpSession[]> {
  return bgpSessions(parseShowProtocols(await runBirdc(birdc, socket, ['show', 'protocols'])));
}
