// The rules of the BGP resources (BGPConfiguration, BGPPeer, Node.spec.bgp)
// that depend on more than one field or on the object's name: one home, used
// by the zod schemas (so the CLI and every datastore read apply them) and by
// the BIRD renderer, which re-parses every value it writes.
import { formatIP, tryParseIP, type IP } from '../net/cidr.js';
import { parseDuration } from './kube-controllers-config.js';
import type { BGPConfigurationSpec, BGPPeerSpec } from './resources.js';

export const DEFAULT_AS_NUMBER = 64512;
/** Where the agent keeps BIRD's configuration and control socket (--bird-run-dir); the Installation renders it. */
export const DEFAULT_BIRD_RUN_DIR = '/var/run/netplugin/bird';
/** BIRD's binary unless the agent's --bird-path says otherwise (birdc is taken from its directory). */
export const DEFAULT_BIRD_PATH = '/usr/sbin/bird';
/** BIRD's configuration file and control socket in the run dir (the agent writes them, netpluginctl reads them). */
export const BIRD_CONFIG_FILE = 'bird.conf';
export const BIRD_CONTROL_SOCKET = 'bird.ctl';
export const DEFAULT_BGP_PORT = 179;
/** BIRD's default graceful restart time, also the default of maxRestartTime. */
export const DEFAULT_RESTART_MS = 120_000;
const BGP_CONFIG_DEFAULT = 'default';
const BGP_CONFIG_NODE_PREFIX = 'node.';
/** The kernel's TCP_MD5SIG_MAXKEYLEN. */
const MAX_PASSWORD_BYTES = 80;

/** How a BGP session's peer was configured; the BIRD protocol's name says it. */
export type PeerType = 'node-to-node mesh' | 'global' | 'node specific';

/** Protocol name prefixes, which the session reader maps back to the peer type. */
const PROTOCOL_PREFIX: Record<PeerType, string> = {
  'node-to-node mesh': 'Mesh_',
  global: 'Global_',
  'node specific': 'Node_',
};

/**
 * The BIRD protocol of a peer: a symbol from its type, address (and port), letters, digits and `_`
 * only. The renderer names sessions so; peerOfProtocol reads the peer back from a name.
 */
export function protocolName(type: PeerType, ip: IP, port: number | undefined): string {
  const a = formatIP(ip).replace(/[.:]/g, '_');
  return `${PROTOCOL_PREFIX[type]}${a}${port !== undefined ? `_port_${port}` : ''}`;
}

/** The peer behind a name protocolName made, or undefined for another protocol. */
export function peerOfProtocol(name: string): { type: PeerType; address: string; family: 4 | 6 } | undefined {
  for (const [type, prefix] of Object.entries(PROTOCOL_PREFIX) as Array<[PeerType, string]>) {
    if (!name.startsWith(prefix)) continue;
    const rest = name.slice(prefix.length).replace(/_port_\d+$/, '');
    const v4 = rest.split('_');
    if (v4.length === 4 && v4.every((x) => /^\d{1,3}$/.test(x))) return { type, address: v4.join('.'), family: 4 };
    return { type, address: rest.replace(/_/g, ':'), family: 6 };
  }
  return undefined;
}

/** One problem: the field under `spec` (dotted) and what is wrong with it and how to fix it. */
export interface FieldProblem {
  path: string;
  message: string;
}

interface PeerAddress {
  ip: IP;
  port?: number | undefined;
}

/** `ADDR`, `ADDR:PORT` (IPv4) or `[ADDR]:PORT` (IPv6); undefined when malformed. */
export function parsePeerIP(s: string): PeerAddress | undefined {
  const v6port = /^\[([0-9a-fA-F:.]+)\]:(\d{1,5})$/.exec(s);
  const v4port = /^([0-9.]+):(\d{1,5})$/.exec(s);
  const m = v6port ?? v4port;
  const ip = tryParseIP(m ? m[1]! : s);
  if (!ip || ip.family !== (v6port ? 6 : m ? 4 : ip.family)) return undefined;
  if (!m) return /^[0-9a-fA-F:.]+$/.test(s) ? { ip } : undefined;
  const port = Number(m[2]);
  return port >= 1 && port <= 65535 ? { ip, port } : undefined;
}

/** Go duration -> whole seconds (BIRD's unit), undefined when malformed. */
export function durationSeconds(s: string): number | undefined {
  const ms = parseDuration(s);
  return ms === undefined ? undefined : Math.ceil(ms / 1000);
}

/**
 * Why BIRD cannot take this password, or undefined when it can. BIRD 2's
 * strings have no escapes (a `"` ends one), so only printable ASCII other than
 * `"` and `\` is written; the kernel limits a TCP-MD5 key to 80 bytes.
 */
export function passwordProblem(pw: string): string | undefined {
  if (pw.length === 0) return 'the password is empty';
  if (Buffer.byteLength(pw) > MAX_PASSWORD_BYTES)
    return `the password is longer than ${MAX_PASSWORD_BYTES} bytes (the kernel's TCP-MD5 key limit)`;
  if (!/^[\x20-\x7e]+$/.test(pw) || /["\\]/.test(pw)) {
    return 'the password may only contain printable ASCII characters other than " and \\ (BIRD cannot quote others)';
  }
  return undefined;
}

/** The node a `node.<name>` BGPConfiguration applies to, undefined for `default`; throws on other names. */
export function bgpConfigurationNode(name: string): string | undefined {
  if (name === BGP_CONFIG_DEFAULT) return undefined;
  if (name.startsWith(BGP_CONFIG_NODE_PREFIX) && name.length > BGP_CONFIG_NODE_PREFIX.length) {
    return name.slice(BGP_CONFIG_NODE_PREFIX.length);
  }
  throw new Error(`BGPConfiguration name ${JSON.stringify(name)} is invalid: use "default" or "node.<node name>"`);
}

/** The rules on a BGPConfiguration that depend on its name. */
export function bgpConfigurationNameProblems(name: string, spec: BGPConfigurationSpec): FieldProblem[] {
  let node: string | undefined;
  try {
    node = bgpConfigurationNode(name);
  } catch (e) {
    return [{ path: 'metadata.name', message: (e as Error).message }];
  }
  if (node !== undefined && spec.nodeToNodeMeshEnabled !== undefined) {
    return [
      {
        path: 'spec.nodeToNodeMeshEnabled',
        message: `is only valid on the "default" BGPConfiguration, not on ${JSON.stringify(name)}; set it there`,
      },
    ];
  }
  return [];
}

/** The rules on a BGPPeer spec across fields (each field's own shape is the schema's). */
export function bgpPeerProblems(spec: BGPPeerSpec): FieldProblem[] {
  const out: FieldProblem[] = [];
  if (spec.peerIP !== undefined && spec.peerSelector !== undefined) {
    out.push({ path: 'peerSelector', message: 'peerIP and peerSelector are exclusive; set one of them' });
  }
  if (spec.peerIP === undefined && spec.peerSelector === undefined) {
    out.push({ path: 'peerIP', message: 'a BGPPeer needs peerIP (with asNumber) or peerSelector; set one of them' });
  }
  if (spec.peerIP !== undefined && spec.asNumber === undefined) {
    out.push({ path: 'asNumber', message: "is required with peerIP (the peer's AS number)" });
  }
  if (spec.peerSelector !== undefined && spec.asNumber !== undefined) {
    out.push({ path: 'asNumber', message: "applies to peerIP only; the selected nodes' AS numbers are used" });
  }
  if (spec.node !== undefined && spec.nodeSelector !== undefined) {
    out.push({
      path: 'nodeSelector',
      message: 'node and nodeSelector are exclusive; set one of them (neither: every node)',
    });
  }
  if (spec.peerIP !== undefined && !parsePeerIP(spec.peerIP)) {
    out.push({ path: 'peerIP', message: `${JSON.stringify(spec.peerIP)} is not ADDR, ADDR:PORT or [IPv6]:PORT` });
  }
  const pw = spec.password;
  if (pw && (pw.secretKeyRef === undefined) === (pw.file === undefined)) {
    out.push({ path: 'password', message: 'set exactly one of password.secretKeyRef and password.file' });
  }
  if (spec.maxRestartTime !== undefined && durationSeconds(spec.maxRestartTime) === undefined) {
    out.push({
      path: 'maxRestartTime',
      message: `${JSON.stringify(spec.maxRestartTime)} is not a duration such as 120s or 2m`,
    });
  }
  return out;
}
