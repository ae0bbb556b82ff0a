// The agent's flow records: the kernel's verdicts (NFLOG tags of the deciding
// rules) joined with conntrack (connections and their accounting), aggregated
// per flush interval into one record per key (reporter, action, source, dest,
// port, protocol, policy trace). Pure: the events come in, records go out; the
// agent feeds it (src/agent/flows/index.ts).
//
// - Allowed connections are counted from conntrack: a NEW event starts one, its
//   counters come from the entries' accounting (a dump at each flush for the
//   live ones, the DESTROY event for the rest), and it completes when TCP
//   reaches TIME_WAIT/CLOSE or the entry is destroyed. Its trace is the last
//   tag seen for the same flow (direction, protocol, addresses, port): the
//   NFLOG rate limit may drop a connection's own sample, never the connection.
// - Denied packets never make a conntrack entry: they are counted from their
//   NFLOG samples (packets and bytes; under the rate limit these are samples,
//   the deny rules' counters hold the totals).
// - Each local end reports: the source's egress decision as `Src`, the
//   destination's ingress decision as `Dst`.
import { zeroCounters, type FlowEndpoint, type FlowRecord, type PolicyHit, type Reporter } from '../../flows/record.js';
import type { ConntrackEvent, NflogPacket } from '../../dataplane/flowlog.js';
import { hitOfTag, parseFlowTag, type TagRef } from './tags.js';
import { classifyOutside } from './outside.js';

/** An endpoint as the aggregator names it, and whether it is on this node (it then reports). */
export interface ResolvedEndpoint {
  endpoint: FlowEndpoint;
  local: boolean;
}

/** What the staged policies would do with a flow (filled by their evaluator); [] without one. */
export type PendingEvaluator = (flow: {
  reporter: Reporter;
  source: FlowEndpoint;
  dest: FlowEndpoint;
  sourceAddr: string;
  destAddr: string;
  destPort: number;
  protocol: number;
}) => PolicyHit[];

interface FlowAggregatorOptions {
  /** The endpoint an address belongs to (undefined: outside the cluster's endpoints). */
  resolve(addr: string): ResolvedEndpoint | undefined;
  /** The tag refs of the policy table (the compiler's). */
  refs(): ReadonlyMap<string, TagRef>;
  pending?: PendingEvaluator;
  /** Unix seconds (default: the clock). */
  now?: () => number;
  /** How long a flow's attribution is remembered without a new sample (default 10 min). */
  attributionTtlSeconds?: number;
}

interface Counters {
  po: number;
  bo: number;
  pr: number;
  br: number;
}

interface Conn {
  proto: number;
  src: string;
  dst: string;
  dport: number;
  /** Started in the current interval (seen NEW, not yet reported). */
  fresh: boolean;
  done: boolean;
  cur: Counters;
  reported: Counters;
}

const PROTOCOLS: Record<number, string> = { 1: 'ICMP', 6: 'TCP', 17: 'UDP', 58: 'ICMPv6', 132: 'SCTP' };
const TCP_TIME_WAIT = 7;
const ZERO: Counters = { po: 0, bo: 0, pr: 0, br: 0 };

function protocolName(n: number): string {
  return PROTOCOLS[n] ?? String(n);
}

function flowId(dir: 'ingress' | 'egress', proto: number, src: string, dst: string, dport: number): string {
  return `${dir} ${proto} ${src} ${dst} ${dport}`;
}

/** The connection's flow as the rules saw it: after DNAT, the endpoint that answers. */
function connOf(e: ConntrackEvent): Omit<Conn, 'fresh' | 'done' | 'cur' | 'reported'> {
  const dnat = e.replySrc !== undefined && e.replySrc !== e.dst;
  const dport = (dnat ? e.replySport : e.dport) ?? 0;
  const icmp = e.protocol === 1 || e.protocol === 58;
  return { proto: e.protocol, src: e.src, dst: dnat ? e.replySrc! : e.dst, dport: icmp ? 0 : dport };
}

function countersOf(e: ConntrackEvent): Counters | undefined {
  if (e.packetsOrig === undefined) return undefined;
  return { po: e.packetsOrig, bo: e.bytesOrig ?? 0, pr: e.packetsReply ?? 0, br: e.bytesReply ?? 0 };
}

export class FlowAggregator {
  private readonly o: FlowAggregatorOptions;
  private readonly now: () => number;
  /** Connections of local endpoints by conntrack id (or tuple when the kernel gave no id). */
  private conns = new Map<string, Conn>();
  /** Flow → its last attribution and when it was seen. */
  private known = new Map<string, { hit: PolicyHit; at: number }>();
  private records = new Map<string, FlowRecord>();
  private start: number;
  /** Samples whose ref the table does not know (an older table), and untagged log lines. */
  unknownTags = 0;
  /** Samples read. */
  samples = 0;

  constructor(o: FlowAggregatorOptions) {
    this.o = o;
    this.now = o.now ?? (() => Date.now() / 1000);
    this.start = this.now();
  }

  /** NFLOG samples: attributions of allowed flows, and denied packets. */
  onNflog(packets: readonly NflogPacket[]): void {
    const refs = this.o.refs();
    const t = this.now();
    for (const p of packets) {
      this.samples++;
      const tag = parseFlowTag(p.prefix);
      const hit = tag && hitOfTag(tag, refs);
      if (!tag || !hit) {
        this.unknownTags++;
        continue;
      }
      const dport = p.protocol === 1 || p.protocol === 58 ? 0 : (p.dport ?? 0);
      const reporter: Reporter = tag.dir === 'egress' ? 'Src' : 'Dst';
      const rec = this.record(reporter, tag.action, p.src, p.dst, dport, p.protocol, hit);
      if (!rec) continue;
      if (tag.action === 'Allow') {
        this.known.set(flowId(tag.dir, p.protocol, p.src, p.dst, dport), { hit, at: t });
      } else if (reporter === 'Src') {
        rec.packetsOut += 1;
        rec.bytesOut += p.length;
      } else {
        rec.packetsIn += 1;
        rec.bytesIn += p.length;
      }
    }
  }

  /** Conntrack NEW and DESTROY events. */
  onConntrack(events: readonly ConntrackEvent[]): void {
    for (const e of events) {
      const k = e.id !== undefined ? `#${e.id}` : `${e.protocol} ${e.src} ${e.sport} ${e.dst} ${e.dport}`;
      if (e.type === 'new') {
        const c = connOf(e);
        if (!this.isLocal(c.src) && !this.isLocal(c.dst)) continue;
        this.conns.set(k, { ...c, fresh: true, done: false, cur: { ...ZERO }, reported: { ...ZERO } });
      } else if (e.type === 'destroy') {
        const c = this.conns.get(k);
        if (!c) continue;
        c.cur = countersOf(e) ?? c.cur;
        c.done = true;
      }
    }
  }

  /**
   * The interval's records (then a new interval starts). `snapshot`: the conntrack entries now,
   * for the live connections' counters; an entry of a local endpoint seen for the first time (the
   * agent started after it) is tracked from here, its earlier traffic left out.
   */
  flush(snapshot: readonly ConntrackEvent[] = []): FlowRecord[] {
    const t = this.now();
    for (const e of snapshot) {
      const k = e.id !== undefined ? `#${e.id}` : `${e.protocol} ${e.src} ${e.sport} ${e.dst} ${e.dport}`;
      let c = this.conns.get(k);
      const cur = countersOf(e);
      if (!c) {
        // Closing or closed TCP the agent does not track: one it already counted complete (its entry
        // stays in TIME_WAIT for minutes), or one that ended before the agent knew it.
        if (e.tcpState !== undefined && e.tcpState >= TCP_TIME_WAIT) continue;
        const f = connOf(e);
        if (!this.isLocal(f.src) && !this.isLocal(f.dst)) continue;
        c = { ...f, fresh: false, done: false, cur: cur ?? { ...ZERO }, reported: cur ?? { ...ZERO } };
        this.conns.set(k, c);
      }
      if (cur) c.cur = cur;
      if (e.tcpState !== undefined && e.tcpState >= TCP_TIME_WAIT) c.done = true;
    }
    for (const [k, c] of this.conns) {
      const d: Counters = {
        po: Math.max(0, c.cur.po - c.reported.po),
        bo: Math.max(0, c.cur.bo - c.reported.bo),
        pr: Math.max(0, c.cur.pr - c.reported.pr),
        br: Math.max(0, c.cur.br - c.reported.br),
      };
      for (const [reporter, dir, local] of [
        ['Src', 'egress', c.src],
        ['Dst', 'ingress', c.dst],
      ] as const) {
        if (!this.isLocal(local)) continue;
        const hit = this.known.get(flowId(dir, c.proto, c.src, c.dst, c.dport))?.hit;
        const rec = this.record(reporter, 'Allow', c.src, c.dst, c.dport, c.proto, hit);
        if (!rec) continue;
        // From the reporting endpoint: the source sends the original direction, the destination receives it.
        const [outP, outB, inP, inB] = reporter === 'Src' ? [d.po, d.bo, d.pr, d.br] : [d.pr, d.br, d.po, d.bo];
        rec.packetsOut += outP;
        rec.bytesOut += outB;
        rec.packetsIn += inP;
        rec.bytesIn += inB;
        if (c.fresh) rec.connectionsStarted += 1;
        if (c.done) rec.connectionsCompleted += 1;
        else rec.connectionsLive += 1;
      }
      c.fresh = false;
      c.reported = c.cur;
      if (c.done) this.conns.delete(k);
    }
    const ttl = this.o.attributionTtlSeconds ?? 600;
    for (const [k, v] of this.known) if (t - v.at > ttl) this.known.delete(k);
    const out = [...this.records.values()];
    for (const r of out) r.endTime = Math.max(r.startTime, t);
    this.records = new Map();
    this.start = t;
    return out;
  }

  private isLocal(addr: string): boolean {
    return this.o.resolve(addr)?.local === true;
  }

  /** The interval's record of this key (made on first use); undefined when the reporter's end is not local. */
  private record(
    reporter: Reporter,
    action: 'Allow' | 'Deny',
    src: string,
    dst: string,
    dport: number,
    proto: number,
    hit: PolicyHit | undefined,
  ): FlowRecord | undefined {
    const s = this.o.resolve(src);
    const d = this.o.resolve(dst);
    if (!(reporter === 'Src' ? s?.local : d?.local)) return undefined;
    const source = s?.endpoint ?? classifyOutside(src);
    const dest = d?.endpoint ?? classifyOutside(dst);
    const enforced = hit ? [hit] : [];
    const ends = [source.type, source.namespace, source.name, dest.type, dest.namespace, dest.name];
    const key = JSON.stringify([reporter, action, ...ends, dport, proto, enforced]);
    let r = this.records.get(key);
    if (!r) {
      const flow = { reporter, source, dest, sourceAddr: src, destAddr: dst, destPort: dport, protocol: proto };
      const pending = this.o.pending?.(flow) ?? [];
      r = {
        reporter,
        action,
        source,
        dest,
        destPort: dport,
        protocol: protocolName(proto),
        policies: { enforced, pending },
        startTime: this.start,
        endTime: this.start,
        ...zeroCounters(),
      };
      this.records.set(key, r);
    }
    return r;
  }
}
