import { describe, expect, it } from 'vitest';
import {
  addressOf,
  hostPrefix,
  blockAt,
  blockCount,
  canonicalIP,
  cidrSize,
  containsCidr,
  containsIP,
  enclosing,
  formatCidr,
  formatIP,
  lastAddress,
  nthAddress,
  ordinalOf,
  overlaps,
  parseCidr,
  parseIP,
  splitBlocks,
  tryParseIP,
  CidrError,
} from '../../src/net/cidr.js';

describe('addresses', () => {
  it('parses and formats IPv4', () => {
    expect(parseIP('10.0.0.5')).toEqual({ family: 4, value: 0x0a000005n });
    expect(formatIP(parseIP('255.255.255.255'))).toBe('255.255.255.255');
    expect(formatIP(4, 0n)).toBe('0.0.0.0');
  });

  for (const bad of [
    '10.0.0',
    '10.0.0.256',
    '010.0.0.1',
    '1.2.3.4.5',
    '1..2.3',
    '',
    'a.b.c.d',
    '10.0.0.-1',
    ' 1.2.3.4x',
  ]) {
    it(`refuses IPv4 ${JSON.stringify(bad)}`, () => {
      expect(tryParseIP(bad)).toBeUndefined();
      expect(() => parseIP(bad)).toThrow(CidrError);
    });
  }

  // RFC 5952 canonical text
  const v6: Array<[string, string]> = [
    ['2001:0db8:0000:0000:0000:0000:0000:0001', '2001:db8::1'],
    ['2001:DB8::1', '2001:db8::1'],
    ['0:0:0:0:0:0:0:0', '::'],
    ['0:0:0:0:0:0:0:1', '::1'],
    ['1:0:0:0:0:0:0:0', '1::'],
    // a single zero group is not compressed
    ['2001:db8:0:1:1:1:1:1', '2001:db8:0:1:1:1:1:1'],
    // the longest run wins
    ['2001:0:0:1:0:0:0:1', '2001:0:0:1::1'],
    // on a tie the first run wins
    ['2001:db8:0:0:1:0:0:1', '2001:db8::1:0:0:1'],
    ['fd00::40', 'fd00::40'],
    ['::ffff:10.1.2.3', '::ffff:10.1.2.3'],
    ['::ffff:0a01:0203', '::ffff:10.1.2.3'],
    ['::10.1.2.3', '::a01:203'],
    ['1:2:3:4:5:6:1.2.3.4', '1:2:3:4:5:6:102:304'],
    ['ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff', 'ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff'],
  ];
  for (const [input, want] of v6) {
    it(`IPv6 ${input} -> ${want}`, () => {
      expect(canonicalIP(input)).toBe(want);
      expect(canonicalIP(want)).toBe(want);
    });
  }

  for (const bad of [
    '1:2:3:4:5:6:7',
    '1:2:3:4:5:6:7:8:9',
    '1::2::3',
    ':1::',
    '1:::2',
    '12345::',
    'g::1',
    'fe80::1%eth0',
    '1:2:3:4:5:6:7::8',
    '::1.2.3',
  ]) {
    it(`refuses IPv6 ${JSON.stringify(bad)}`, () => {
      expect(tryParseIP(bad)).toBeUndefined();
    });
  }
});

describe('CIDRs', () => {
  it('parses strictly and names the masked form', () => {
    expect(formatCidr(parseCidr('10.0.0.0/16'))).toBe('10.0.0.0/16');
    expect(() => parseCidr('10.0.0.1/16')).toThrow("'10.0.0.1/16' has host bits set: the network is 10.0.0.0/16");
    expect(() => parseCidr('fd00::1/64')).toThrow('the network is fd00::/64');
    expect(formatCidr(parseCidr('10.0.0.1/16', { strict: false }))).toBe('10.0.0.0/16');
    expect(formatCidr(parseCidr('FD00:0::/64'))).toBe('fd00::/64');
  });

  for (const bad of [
    '10.0.0.0',
    '10.0.0.0/33',
    '10.0.0.0/-1',
    '10.0.0.0/',
    'x/24',
    '::/129',
    '10.0.0.0/08',
    '10.0.0.0/2 4',
  ]) {
    it(`refuses CIDR ${JSON.stringify(bad)}`, () => {
      expect(() => parseCidr(bad)).toThrow(CidrError);
    });
  }

  it('/32 and /128', () => {
    const h4 = parseCidr('10.1.2.3/32');
    expect(cidrSize(h4)).toBe(1n);
    expect(formatIP(nthAddress(h4, 0))).toBe('10.1.2.3');
    expect(() => nthAddress(h4, 1)).toThrow(CidrError);
    expect(containsIP(h4, parseIP('10.1.2.3'))).toBe(true);
    expect(containsIP(h4, parseIP('10.1.2.4'))).toBe(false);
    const h6 = parseCidr('fd00::7/128');
    expect(cidrSize(h6)).toBe(1n);
    expect(ordinalOf(h6, parseIP('fd00::7'))).toBe(0);
    expect([...splitBlocks(h6, 128)].map(formatCidr)).toEqual(['fd00::7/128']);
    expect(formatCidr(parseCidr('0.0.0.0/0'))).toBe('0.0.0.0/0');
    expect(cidrSize(parseCidr('::/0'))).toBe(1n << 128n);
  });

  it('contains / overlaps', () => {
    const a = parseCidr('10.0.0.0/16');
    const b = parseCidr('10.0.4.0/24');
    const c = parseCidr('10.1.0.0/16');
    expect(containsCidr(a, b)).toBe(true);
    expect(containsCidr(b, a)).toBe(false);
    expect(containsCidr(a, a)).toBe(true);
    expect(overlaps(a, b) && overlaps(b, a)).toBe(true);
    expect(overlaps(a, c)).toBe(false);
    expect(overlaps(a, parseCidr('fd00::/8'))).toBe(false);
    expect(containsIP(a, parseIP('10.0.255.255'))).toBe(true);
    expect(containsIP(a, parseIP('10.1.0.0'))).toBe(false);
    // families never mix, even when the bits would
    expect(containsIP(parseCidr('::/96'), parseIP('0.0.0.1'))).toBe(false);
  });

  it('nth address and ordinals', () => {
    const blk = parseCidr('10.0.0.64/26');
    expect(formatIP(nthAddress(blk, 0))).toBe('10.0.0.64');
    expect(formatIP(nthAddress(blk, 63))).toBe('10.0.0.127');
    expect(() => nthAddress(blk, 64)).toThrow(CidrError);
    expect(() => nthAddress(blk, -1)).toThrow(CidrError);
    expect(ordinalOf(blk, parseIP('10.0.0.100'))).toBe(36);
    expect(() => ordinalOf(blk, parseIP('10.0.0.128'))).toThrow('10.0.0.128 is not inside 10.0.0.64/26');
    expect(formatIP(4, lastAddress(blk))).toBe('10.0.0.127');
    expect(formatCidr(enclosing(parseIP('10.0.0.100'), 26))).toBe('10.0.0.64/26');
    expect(formatCidr(enclosing(parseIP('fd00::1:2:3'), 122))).toBe('fd00::1:2:0/122');
  });

  it('splits a pool into blocks', () => {
    const pool = parseCidr('10.0.0.0/24');
    expect(blockCount(pool, 26)).toBe(4n);
    expect([...splitBlocks(pool, 26)].map(formatCidr)).toEqual([
      '10.0.0.0/26',
      '10.0.0.64/26',
      '10.0.0.128/26',
      '10.0.0.192/26',
    ]);
    expect([...splitBlocks(pool, 24)].map(formatCidr)).toEqual(['10.0.0.0/24']);
    expect(formatCidr(blockAt(pool, 29, 31n))).toBe('10.0.0.248/29');
    expect(() => blockAt(pool, 29, 32n)).toThrow(CidrError);
  });

  it('a pool smaller than one block is an error', () => {
    expect(() => blockCount(parseCidr('10.0.0.0/28'), 26)).toThrow(
      'pool 10.0.0.0/28 is smaller than one /26 block: use a block size of at least 28',
    );
    expect(() => [...splitBlocks(parseCidr('fd00::/124'), 122)]).toThrow(CidrError);
    expect(() => blockCount(parseCidr('10.0.0.0/24'), 33)).toThrow(CidrError);
  });

  it('IPv6 /122 blocks, lazily, in a huge pool', () => {
    const pool = parseCidr('fd00:10:244::/64');
    expect(blockCount(pool, 122)).toBe(1n << 58n);
    const it = splitBlocks(pool, 122);
    const first = [it.next().value!, it.next().value!, it.next().value!].map(formatCidr);
    expect(first).toEqual(['fd00:10:244::/122', 'fd00:10:244::40/122', 'fd00:10:244::80/122']);
    const last = blockAt(pool, 122, (1n << 58n) - 1n);
    expect(formatCidr(last)).toBe('fd00:10:244:0:ffff:ffff:ffff:ffc0/122');
    expect(cidrSize(last)).toBe(64n);
    expect(formatIP(nthAddress(last, 63))).toBe('fd00:10:244:0:ffff:ffff:ffff:ffff');
  });
});

describe('hostPrefix and addressOf', () => {
  it('hostPrefix makes a one-address prefix of either family', () => {
    expect(hostPrefix('10.0.0.5')).toBe('10.0.0.5/32');
    expect(hostPrefix('fd00::5')).toBe('fd00::5/128');
  });
  it('addressOf takes the address of addr/len, and leaves a bare address alone', () => {
    expect(addressOf('10.0.0.5/24')).toBe('10.0.0.5');
    expect(addressOf('fd00::5/128')).toBe('fd00::5');
    expect(addressOf('10.0.0.5')).toBe('10.0.0.5');
    expect(addressOf(hostPrefix('fd00::7'))).toBe('fd00::7');
  });
});
