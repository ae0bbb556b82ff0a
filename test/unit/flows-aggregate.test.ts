// The agent's flow aggregation (src/agent/flows/aggregate.ts) on canned kernel events: exact
// connection counts from conntrack, attribution kept when the rate limit drops a sample, denied
// packets from their samples, outside addresses as net/pub|pvt, tags read back.
import { describe, expect, it } from 'vitest';
import { FlowAggregator } from '../../src/agent/flows/aggregate.js';
import { formatFlowTag, parseFlowTag, type TagRef } from '../../src/agent/flows/tags.js';
import { isPrivateAddress } from '../../src/agent/flows/outside.js';
import type { ConntrackEvent, NflogPacket } from '../../src/dataplane/flowlog.js';

const A = '10.173.0.2';
const B = '10.173.0.3';
const refs = new Map<string, TagRef>([
  ['0123456789ab', { kind: 'KubernetesNetworkPolicy', namespace: 'y', name: 'allow-a', tier: '' }],
]);
const eps: Record<string, string> = { [A]: 'a', [B]: 'b' };

function agg(): FlowAggregator {
  return new FlowAggregator({
    resolve: (addr) =>
      eps[addr]
        ? {
            endpoint: { type: 'wep', namespace: eps[addr] === 'a' ? 'x' : 'y', name: eps[addr]!, labels: {} },
            local: true,
          }
        : undefined,
    refs: () => refs,
    now: () => 1000,
  });
}

const sample = (prefix: string, src = A, dst = B, sport = 40000): NflogPacket => ({
  prefix,
  family: 4,
  protocol: 6,
  src,
  dst,
  sport,
  dport: 80,
  length: 60,
  indev: 3,
  outdev: 4,
});
const ct = (type: ConntrackEvent['type'], id: number, o: Partial<ConntrackEvent> = {}): ConntrackEvent => ({
  type,
  family: 4,
  protocol: 6,
  src: A,
  dst: B,
  sport: 40000 + id,
  dport: 80,
  replySrc: B,
  replyDst: A,
  replySport: 80,
  replyDport: 40000 + id,
  id,
  ...o,
});

describe('flow aggregation on the node', () => {
  it('reads back its tags and refuses other prefixes', () => {
    const t = { action: 'Deny' as const, dir: 'egress' as const, ruleIndex: -1, ref: 'eop' };
    expect(parseFlowTag(formatFlowTag(t))).toEqual(t);
    expect(
      formatFlowTag({ action: 'Allow', dir: 'ingress', ruleIndex: 3, ref: '0123456789ab' }).length,
    ).toBeLessThanOrEqual(64);
    expect(parseFlowTag('netplugin NetworkPolicy x/p ingress rule 0: ')).toBeUndefined();
    expect(parseFlowTag('np1 A I 0 ../x')).toBeUndefined();
  });

  it('counts every connection once from conntrack and keeps the attribution when samples are dropped', () => {
    const g = agg();
    // One sample (the others were over the rate limit), three connections.
    g.onNflog([sample('np1 A I 0 0123456789ab')]);
    g.onConntrack([ct('new', 1), ct('new', 2), ct('new', 3)]);
    const acct = { packetsOrig: 6, bytesOrig: 400, packetsReply: 4, bytesReply: 300 };
    const r1 = g.flush([
      ct('dump', 1, { ...acct, tcpState: 7 }),
      ct('dump', 2, { ...acct, tcpState: 3 }),
      ct('dump', 3, { ...acct, tcpState: 3 }),
    ]);
    const dst = r1.find((r) => r.reporter === 'Dst')!;
    expect(dst.policies.enforced).toEqual([
      { kind: 'KubernetesNetworkPolicy', namespace: 'y', name: 'allow-a', tier: '', action: 'Allow', ruleIndex: 0 },
    ]);
    expect(dst).toMatchObject({
      connectionsStarted: 3,
      connectionsCompleted: 1,
      connectionsLive: 2,
      packetsIn: 18,
      bytesIn: 1200,
      packetsOut: 12,
      bytesOut: 900,
    });
    // The source end reports too (both are local), with no sample of its own: an empty trace.
    expect(r1.find((r) => r.reporter === 'Src')).toMatchObject({
      connectionsStarted: 3,
      packetsOut: 18,
      policies: { enforced: [] },
    });
    // Next interval: the TIME_WAIT entry is still listed (not counted again); 2 ends with its DESTROY.
    g.onConntrack([ct('destroy', 2, { packetsOrig: 8, bytesOrig: 500, packetsReply: 5, bytesReply: 350 })]);
    const r2 = g.flush([ct('dump', 1, { ...acct, tcpState: 7 }), ct('dump', 3, { ...acct, tcpState: 3 })]);
    expect(r2.find((r) => r.reporter === 'Dst')).toMatchObject({
      connectionsStarted: 0,
      connectionsCompleted: 1,
      connectionsLive: 1,
      packetsIn: 2,
      bytesIn: 100,
    });
  });

  it('counts denied packets from their samples and names outside addresses', () => {
    const g = agg();
    g.onNflog([sample('np1 D I -1 eop', A, B), sample('np1 D I -1 eop', A, B)]);
    g.onNflog([sample('np1 A E 0 0123456789ab', A, '203.0.113.2'), sample('np1 A E 0 0123456789ab', A, '192.168.7.7')]);
    g.onNflog([sample('np1 A E 0 ffffffffffff', A, B)]); // a ref the table does not know
    const r = g.flush();
    const deny = r.find((x) => x.action === 'Deny')!;
    expect(deny).toMatchObject({ reporter: 'Dst', packetsIn: 2, bytesIn: 120, connectionsStarted: 0 });
    expect(deny.policies.enforced[0]).toMatchObject({ kind: 'EndOfTier', ruleIndex: -1 });
    expect(
      r
        .filter((x) => x.dest.type === 'net')
        .map((x) => x.dest.name)
        .sort(),
    ).toEqual(['pub', 'pvt']);
    expect(g.unknownTags).toBe(1);
    expect(isPrivateAddress('100.64.1.1')).toBe(true);
    expect(isPrivateAddress('::ffff:10.1.2.3')).toBe(true);
    expect(isPrivateAddress('198.51.100.174')).toBe(false);
  });
});
