// The wire protocol between the native CNI shim (native/shim/shim.cc) and the
// agent's CNI server (server.ts). One request per connection:
//
//   shim  -> agent   'N' 'P' 'C' <version=1>  u32be length  JSON request
//   agent -> shim    0x06                                   ("accepted")
//   agent -> shim    u32be length  JSON response
//
//   request  = { plugin: "netplugin" | "netplugin-ipam", env: {NAME: value, ...}, stdin: string }
//   response = { code: <exit status>, stdout: string, stderr?: string }
//
// env is the shim's whole environment (what the per-exec plugin would see as
// process.env); stdin is the runtime's stdin as a UTF-8 string (the netconf is
// JSON, which is UTF-8). Unknown response fields are ignored by the shim.
//
// The "accepted" byte is the commit point. The agent sends it once it has
// parsed the request and before it starts running it. A connection that ends
// before it (agent down, old agent rejecting a newer protocol version, peer
// not root) means the request never ran: the shim runs the per-exec fallback.
// A connection that ends after it means the agent may have done part of the
// work: the shim never re-runs it and reports CNI code 11 (try again later).

export const MAGIC = Buffer.from([0x4e, 0x50, 0x43]); // "NPC"
export const PROTOCOL_VERSION = 1;
export const HEADER_LEN = 8; // magic (3) + version (1) + length (4)
export const ACCEPTED = 0x06;
/** Largest request body the agent takes (a netconf with prevResult is a few KiB). */
export const MAX_REQUEST = 16 << 20;
export const DEFAULT_SOCKET = '/var/run/netplugin/cni.sock';

export interface ShimRequest {
  plugin: string;
  env: Record<string, string>;
  stdin: string;
}

export interface ShimResponse {
  code: number;
  stdout: string;
  stderr?: string;
}

export class ProtocolError extends Error {
  override name = 'ProtocolError';
}

export function encodeRequest(req: ShimRequest): Buffer {
  const body = Buffer.from(JSON.stringify(req), 'utf8');
  const head = Buffer.alloc(HEADER_LEN);
  MAGIC.copy(head, 0);
  head[3] = PROTOCOL_VERSION;
  head.writeUInt32BE(body.length, 4);
  return Buffer.concat([head, body]);
}

export function encodeResponse(res: ShimResponse): Buffer {
  const body = Buffer.from(JSON.stringify(res), 'utf8');
  const head = Buffer.alloc(4);
  head.writeUInt32BE(body.length, 0);
  return Buffer.concat([head, body]);
}

/**
 * Body length announced by a request header, once HEADER_LEN bytes are in;
 * throws ProtocolError for a foreign or newer peer.
 */
export function requestBodyLength(head: Buffer): number {
  if (head.length < HEADER_LEN) throw new ProtocolError('short header');
  if (!head.subarray(0, 3).equals(MAGIC)) throw new ProtocolError('not a netplugin shim request (bad magic)');
  if (head[3] !== PROTOCOL_VERSION) {
    throw new ProtocolError(`shim speaks protocol version ${head[3]}, this agent speaks ${PROTOCOL_VERSION}`);
  }
  const len = head.readUInt32BE(4);
  if (len > MAX_REQUEST) throw new ProtocolError(`request of ${len} bytes exceeds the ${MAX_REQUEST}-byte limit`);
  return len;
}

export function decodeRequestBody(body: Buffer): ShimRequest {
  let v: unknown;
  try {
    v = JSON.parse(body.toString('utf8'));
  } catch (e) {
    throw new ProtocolError(`request body is not JSON: ${(e as Error).message}`);
  }
  const o = v as Partial<ShimRequest> | null;
  if (!o || typeof o !== 'object') throw new ProtocolError('request body is not an object');
  if (typeof o.plugin !== 'string') throw new ProtocolError('request.plugin is not a string');
  if (typeof o.stdin !== 'string') throw new ProtocolError('request.stdin is not a string');
  if (!o.env || typeof o.env !== 'object' || Array.isArray(o.env)) throw new ProtocolError('request.env is not an object');
  for (const [k, val] of Object.entries(o.env)) {
    if (typeof val !== 'string') throw new ProtocolError(`request.env.${k} is not a string`);
  }
  return { plugin: o.plugin, env: o.env as Record<string, string>, stdin: o.stdin };
}
