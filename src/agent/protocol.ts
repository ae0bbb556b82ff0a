// The wire protocol between the native CNI shim (native/shim/shim.cc) and the
// agent's CNI server (server.ts); docs/agent.md has the byte layout. One
// request per connection:
//
//   shim  -> agent   'N' 'P' 'C' <version>  u32be length  JSON request
//   agent -> shim    0x06                                  ("accepted")
//   agent -> shim    'N' 'P' 'R' <version>  u8 exit status  u32be stdout length
//                    u32be stderr length  stdout bytes  stderr bytes
//
//   request  = { plugin: "netplugin" | "netplugin-ipam", env: {NAME: value, ...}, stdin: string }
//
// env is the shim's whole environment (what the per-exec plugin would see as
// process.env); stdin is the runtime's stdin as a UTF-8 string (the netconf is
// JSON, which is UTF-8). The response is binary so that the shim, which is
// static C++ on the hot path, only reads two lengths and copies bytes: it has
// no JSON parser. Both directions carry the same version; the agent answers
// only requests of its own version, so a shim and an agent of different
// releases never reach the response (the shim falls back, see below).
//
// The "accepted" byte is the commit point. The agent sends it once it has
// parsed the request and before it starts running it. A connection that ends
// before it (agent down, agent refusing another protocol version, peer not
// root) means the request never ran: the shim runs the per-exec fallback.
// A connection that ends after it means the agent may have done part of the
// work: the shim never re-runs it and reports CNI code 11 (try again later).

const MAGIC = Buffer.from([0x4e, 0x50, 0x43]); // "NPC": a request
const RESPONSE_MAGIC = Buffer.from([0x4e, 0x50, 0x52]); // "NPR": a response
/** 1: JSON response. 2: binary response (the request is unchanged). */
export const PROTOCOL_VERSION = 2;
export const HEADER_LEN = 8; // magic (3) + version (1) + length (4)
/** magic (3) + version (1) + exit status (1) + stdout length (4) + stderr length (4) */
export const RESPONSE_HEADER_LEN = 13;
/** Largest stdout + stderr the shim takes (native/shim/shim.cc kMaxAnswer). */
export const MAX_RESPONSE = 64 << 20;
export const ACCEPTED = 0x06;
/** Largest request body the agent takes (a netconf with prevResult is a few KiB). */
const MAX_REQUEST = 16 << 20;
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

/**
 * The response frame. An exit status outside 0-255 (a process cannot exit
 * with one) is sent as 1, a failure; strings go as UTF-8 (a lone surrogate
 * becomes U+FFFD).
 */
export function encodeResponse(res: ShimResponse): Buffer {
  const out = Buffer.from(res.stdout, 'utf8');
  const err = Buffer.from(res.stderr ?? '', 'utf8');
  if (out.length + err.length > MAX_RESPONSE) {
    throw new ProtocolError(
      `response of ${out.length + err.length} bytes exceeds the shim's ${MAX_RESPONSE}-byte limit`,
    );
  }
  const head = Buffer.alloc(RESPONSE_HEADER_LEN);
  RESPONSE_MAGIC.copy(head, 0);
  head[3] = PROTOCOL_VERSION;
  head[4] = Number.isInteger(res.code) && res.code >= 0 && res.code <= 255 ? res.code : 1;
  head.writeUInt32BE(out.length, 5);
  head.writeUInt32BE(err.length, 9);
  return Buffer.concat([head, out, err]);
}

/** Reads a whole response frame (what the shim does, for tests and tools); throws ProtocolError. */
export function decodeResponse(frame: Buffer): ShimResponse {
  if (frame.length < RESPONSE_HEADER_LEN)
    throw new ProtocolError(`response of ${frame.length} bytes is shorter than its ${RESPONSE_HEADER_LEN}-byte header`);
  if (!frame.subarray(0, 3).equals(RESPONSE_MAGIC))
    throw new ProtocolError('not a netplugin agent response (bad magic)');
  if (frame[3] !== PROTOCOL_VERSION) {
    throw new ProtocolError(`agent speaks protocol version ${frame[3]}, this side speaks ${PROTOCOL_VERSION}`);
  }
  const outLen = frame.readUInt32BE(5);
  const errLen = frame.readUInt32BE(9);
  if (outLen + errLen > MAX_RESPONSE)
    throw new ProtocolError(`response of ${outLen + errLen} bytes exceeds the ${MAX_RESPONSE}-byte limit`);
  const end = RESPONSE_HEADER_LEN + outLen + errLen;
  if (frame.length < end) throw new ProtocolError(`response is truncated: ${frame.length} of ${end} bytes`);
  const stdout = frame.toString('utf8', RESPONSE_HEADER_LEN, RESPONSE_HEADER_LEN + outLen);
  const stderr = frame.toString('utf8', RESPONSE_HEADER_LEN + outLen, end);
  const code = frame.readUInt8(4);
  return stderr ? { code, stdout, stderr } : { code, stdout };
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
  if (!o.env || typeof o.env !== 'object' || Array.isArray(o.env))
    throw new ProtocolError('request.env is not an object');
  for (const [k, val] of Object.entries(o.env)) {
    if (typeof val !== 'string') throw new ProtocolError(`request.env.${k} is not a string`);
  }
  return { plugin: o.plugin, env: o.env as Record<string, string>, stdin: o.stdin };
}
