// Flow records: what a node agent reports (FlowRecord, one per key and flush
// interval) and what the aggregator serves (Flow, one flat object per key and
// 15 s bucket). The record is validated here, at the aggregator's boundary: an
// agent is authenticated by its certificate, but its records still come from a
// node that may be compromised, so every field is checked and bounded.
import { HIT_ACTIONS, HIT_KINDS, type HitAction, type PolicyHit } from '../model/policy-hit.js';

export const REPORTERS = ['Src', 'Dst'] as const;

/** Every counter at 0: a record before its first packet or connection is counted. */
export function zeroCounters(): FlowCounters {
  return {
    packetsIn: 0,
    packetsOut: 0,
    bytesIn: 0,
    bytesOut: 0,
    connectionsStarted: 0,
    connectionsCompleted: 0,
    connectionsLive: 0,
  };
}
export type Reporter = (typeof REPORTERS)[number];
export const ACTIONS = HIT_ACTIONS;
export type Action = HitAction;
const ENDPOINT_TYPES = ['wep', 'hep', 'net'] as const;
type EndpointType = (typeof ENDPOINT_TYPES)[number];
export type { PolicyHit };

/** One side of a flow. Outside addresses are type `net`, name `pub` or `pvt`, namespace ''. */
export interface FlowEndpoint {
  type: EndpointType;
  /** '' for a host endpoint or a network. */
  namespace: string;
  /** Pod (workload) name, host endpoint name, or `pub` / `pvt` for a network. */
  name: string;
  labels: Record<string, string>;
}

export interface PolicyTrace {
  enforced: PolicyHit[];
  /** Staged policies' verdicts for the same traffic: reported, never enforced. */
  pending: PolicyHit[];
}

/** The counters of a flow (exact: from conntrack accounting). */
interface FlowCounters {
  packetsIn: number;
  packetsOut: number;
  bytesIn: number;
  bytesOut: number;
  connectionsStarted: number;
  connectionsCompleted: number;
  /** Connections open at the end of the interval (a gauge, not summed across intervals of one reporter). */
  connectionsLive: number;
}

export const COUNTERS = [
  'packetsIn',
  'packetsOut',
  'bytesIn',
  'bytesOut',
  'connectionsStarted',
  'connectionsCompleted',
  'connectionsLive',
] as const;

/** What an agent sends: one aggregated flow of one flush interval. Times are unix seconds. */
export interface FlowRecord extends FlowCounters {
  reporter: Reporter;
  action: Action;
  source: FlowEndpoint;
  dest: FlowEndpoint;
  /** 0 when the protocol has no ports (ICMP). */
  destPort: number;
  /** TCP, UDP, SCTP, ICMP, ICMPv6, or the IP protocol number as a decimal string. */
  protocol: string;
  policies: PolicyTrace;
  startTime: number;
  endTime: number;
}

/** What the API serves: one flat object per key and bucket. Times are RFC 3339. */
export interface Flow extends FlowCounters {
  startTime: string;
  endTime: string;
  action: Action;
  reporter: Reporter;
  protocol: string;
  sourceType: EndpointType;
  sourceNamespace: string;
  sourceName: string;
  sourceLabels: Record<string, string>;
  destType: EndpointType;
  destNamespace: string;
  destName: string;
  destLabels: Record<string, string>;
  destPort: number;
  policies: PolicyTrace;
}

const NAMED_PROTOCOLS = ['TCP', 'UDP', 'SCTP', 'ICMP', 'ICMPv6'];
const MAX_NAME = 253;
const MAX_LABELS = 64;
const MAX_LABEL_VALUE = 317; // a qualified key: 253 prefix + '/' + 63 name
const MAX_HITS = 64;

/** A record an agent sent that the aggregator cannot take; the message names the field and the value. */
export class FlowRecordError extends Error {
  override name = 'FlowRecordError';
}

function fail(path: string, msg: string, v: unknown): never {
  const shown = JSON.stringify(v);
  throw new FlowRecordError(
    `${path}: ${msg} (got ${shown === undefined ? 'nothing' : shown.length > 80 ? `${shown.slice(0, 80)}...` : shown})`,
  );
}

function oneOf<T extends string>(path: string, v: unknown, allowed: readonly T[]): T {
  if (typeof v !== 'string' || !(allowed as readonly string[]).includes(v))
    fail(path, `expected one of ${allowed.join(', ')}`, v);
  return v as T;
}

function text(path: string, v: unknown, max = MAX_NAME): string {
  // biome-ignore lint/suspicious/noControlCharactersInRegex: refusing control characters is the point
  if (typeof v !== 'string' || v.length > max || /[\u0000-\u001f]/.test(v))
    fail(path, `expected a string of at most ${max} printable characters`, v);
  return v;
}

function count(path: string, v: unknown): number {
  if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < 0) fail(path, 'expected a non-negative integer', v);
  return v;
}

function labels(path: string, v: unknown): Record<string, string> {
  if (v === undefined) return {};
  if (typeof v !== 'object' || v === null || Array.isArray(v)) fail(path, 'expected an object of string labels', v);
  const entries = Object.entries(v);
  if (entries.length > MAX_LABELS) fail(path, `at most ${MAX_LABELS} labels`, entries.length);
  const out: Record<string, string> = {};
  for (const [k, val] of entries.sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))) {
    text(`${path} key`, k, MAX_LABEL_VALUE);
    out[k] = text(`${path}.${k}`, val, 63);
  }
  return out;
}

/** Checks one endpoint ({type, namespace, name, labels}); labels come back sorted by key. */
export function parseEndpoint(path: string, v: unknown): FlowEndpoint {
  if (typeof v !== 'object' || v === null) fail(path, 'expected {type, namespace, name, labels}', v);
  const o = v as Record<string, unknown>;
  const type = oneOf(`${path}.type`, o.type, ENDPOINT_TYPES);
  const name = text(`${path}.name`, o.name);
  if (!name) fail(`${path}.name`, 'must not be empty', name);
  if (type === 'net' && name !== 'pub' && name !== 'pvt') fail(`${path}.name`, 'a net endpoint is pub or pvt', name);
  return {
    type,
    namespace: text(`${path}.namespace`, o.namespace ?? ''),
    name,
    labels: labels(`${path}.labels`, o.labels),
  };
}

function hits(path: string, v: unknown): PolicyHit[] {
  if (v === undefined) return [];
  if (!Array.isArray(v) || v.length > MAX_HITS) fail(path, `expected a list of at most ${MAX_HITS} hits`, v);
  return v.map((h: unknown, i) => {
    const p = `${path}[${i}]`;
    if (typeof h !== 'object' || h === null) fail(p, 'expected {kind, namespace, name, tier, action, ruleIndex}', h);
    const o = h as Record<string, unknown>;
    const ruleIndex = o.ruleIndex;
    if (typeof ruleIndex !== 'number' || !Number.isInteger(ruleIndex) || ruleIndex < -1 || ruleIndex > 1_000_000)
      fail(`${p}.ruleIndex`, 'expected an integer >= -1', ruleIndex);
    return {
      kind: oneOf(`${p}.kind`, o.kind, HIT_KINDS),
      namespace: text(`${p}.namespace`, o.namespace ?? ''),
      name: text(`${p}.name`, o.name),
      tier: text(`${p}.tier`, o.tier ?? ''),
      action: oneOf(`${p}.action`, o.action, ACTIONS),
      ruleIndex,
    };
  });
}

/** Checks a policy trace ({enforced: [hit], pending: [hit]}). */
export function parsePolicyTrace(path: string, v: unknown): PolicyTrace {
  const pol = (v ?? {}) as Record<string, unknown>;
  if (typeof pol !== 'object' || Array.isArray(pol)) fail(path, 'expected {enforced, pending}', v);
  return { enforced: hits(`${path}.enforced`, pol.enforced), pending: hits(`${path}.pending`, pol.pending) };
}

/** Checks the protocol field: a name or an IP protocol number. */
export function parseProtocol(path: string, v: unknown): string {
  if (typeof v !== 'string' || !(NAMED_PROTOCOLS.includes(v) || (/^\d{1,3}$/.test(v) && Number(v) <= 255))) {
    fail(path, `expected ${NAMED_PROTOCOLS.join(', ')} or an IP protocol number 0-255`, v);
  }
  return v;
}

/** Checks the numbers of a record: port, times (unix seconds) and counters. */
export function checkNumbers(path: string, destPort: unknown, startTime: unknown, endTime: unknown): void {
  if (typeof destPort !== 'number' || !Number.isInteger(destPort) || destPort < 0 || destPort > 65535)
    fail(`${path}.destPort`, 'expected a port 0-65535', destPort);
  if (typeof startTime !== 'number' || !Number.isFinite(startTime) || startTime < 0)
    fail(`${path}.startTime`, 'expected unix seconds', startTime);
  if (typeof endTime !== 'number' || !Number.isFinite(endTime) || endTime < startTime)
    fail(`${path}.endTime`, 'expected unix seconds, not before startTime', endTime);
}

export function checkCount(path: string, v: unknown): number {
  return count(path, v);
}

export function checkChoice<T extends string>(path: string, v: unknown, allowed: readonly T[]): T {
  return oneOf(path, v, allowed);
}

/** Checks one record from an agent and returns it normalised (labels sorted, defaults filled). */
export function parseFlowRecord(v: unknown, path = 'record'): FlowRecord {
  if (typeof v !== 'object' || v === null || Array.isArray(v)) fail(path, 'expected a flow record object', v);
  const o = v as Record<string, unknown>;
  const protocol = parseProtocol(`${path}.protocol`, o.protocol);
  const { destPort, startTime, endTime } = o as { destPort: number; startTime: number; endTime: number };
  checkNumbers(path, destPort, startTime, endTime);
  const rec: FlowRecord = {
    reporter: oneOf(`${path}.reporter`, o.reporter, REPORTERS),
    action: oneOf(`${path}.action`, o.action, ACTIONS),
    source: parseEndpoint(`${path}.source`, o.source),
    dest: parseEndpoint(`${path}.dest`, o.dest),
    destPort,
    protocol,
    policies: parsePolicyTrace(`${path}.policies`, o.policies),
    startTime,
    endTime,
    ...zeroCounters(),
  };
  for (const c of COUNTERS) rec[c] = count(`${path}.${c}`, o[c] ?? 0);
  return rec;
}

/** unix seconds -> RFC 3339 (UTC, milliseconds only when there are any). */
export function rfc3339(unixSeconds: number): string {
  const iso = new Date(Math.round(unixSeconds * 1000)).toISOString();
  return iso.endsWith('.000Z') ? `${iso.slice(0, -5)}Z` : iso;
}
