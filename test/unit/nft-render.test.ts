// The nftables renderer: what it writes for each typed value, and what it
// refuses (identifiers outside the closed alphabet, interface names the model
// cannot hold, numbers out of range); free text is reduced to a safe alphabet
// and bounded.
import { describe, expect, it } from 'vitest';
import {
  checkAddr,
  checkIdent,
  checkIfname,
  ifnameProblem,
  NftModelError,
  safeText,
} from '../../src/dataplane/nft/model.js';
import {
  baseChainCommands,
  chainCommands,
  elementCommands,
  mapElementCommands,
  renderRule,
  setCommand,
} from '../../src/dataplane/nft/render.js';

describe('nft model values', () => {
  it('takes identifiers of the closed alphabet and refuses the rest', () => {
    for (const ok of ['to-npi0123456789a', 'pol-in-abc', 'a', 'x.y_z-1']) expect(checkIdent(ok)).toBe(ok);
    for (const bad of ['', '-x', '1abc', 'a b', 'a"b', 'a\nb', 'a;b', 'a/b', 'a'.repeat(64), 'é'])
      expect(() => checkIdent(bad)).toThrow(NftModelError);
  });

  it('takes interface names of 1-15 bytes of the alphabet, refuses quotes, spaces, newlines, "/", "." and ".."', () => {
    expect(checkIfname('npi0123456789ab')).toBe('npi0123456789ab');
    for (const bad of ['', '.', '..', 'a/b', 'a"b', 'a b', 'a\nb', 'x'.repeat(16), 'a:b', 'ä']) {
      expect(ifnameProblem(bad), bad).toBeDefined();
      expect(() => checkIfname(bad)).toThrow(/interface name/);
    }
  });

  it('reduces free text to printable ASCII without quote, backslash or $, bounded in bytes', () => {
    expect(safeText('a"b\\c$d\ne\u00e9f')).toBe('a?b?c?d?e?f');
    expect(Buffer.byteLength(safeText('\u{1F600}'.repeat(200)))).toBe(127);
    expect(safeText('x'.repeat(500), 20)).toBe('x'.repeat(20));
  });

  it('canonicalises addresses and refuses what is not one', () => {
    expect(checkAddr('fd00:0::1')).toBe('fd00::1');
    for (const bad of ['10.0.0.256', '10.0.0.0/8', '1.2.3.4"', 'x', ''])
      expect(() => checkAddr(bad)).toThrow(NftModelError);
  });
});

describe('nft renderer', () => {
  const T = 'inet t';
  it('writes rules from typed matches, statements, verdicts and a quoted comment', () => {
    expect(
      renderRule({
        matches: [
          { m: 'l4proto', proto: 6 },
          {
            m: 'ports',
            dir: 'd',
            ranges: [
              [80, 80],
              [8000, 8100],
            ],
          },
        ],
        verdict: { v: 'accept' },
        comment: 'NetworkPolicy x/p ingress rule 0',
      }),
    ).toBe('meta l4proto tcp th dport { 80, 8000-8100 } accept comment "NetworkPolicy x/p ingress rule 0"');
    expect(
      renderRule({
        matches: [{ m: 'nets', family: 6, dir: 's', nets: ['fd00::/8', 'fd01::1'], neg: true }],
        stmts: [{ s: 'counter' }],
        verdict: { v: 'drop' },
      }),
    ).toBe('ip6 saddr != { fd00::/8, fd01::1 } counter drop');
    expect(
      renderRule({
        matches: [{ m: 'addrProtoPortSet', family: 4, dir: 'd', set: 'np4-abc' }],
        verdict: { v: 'jump', chain: 'pol-in-x' },
      }),
    ).toBe('ip daddr . meta l4proto . th dport @np4-abc jump pol-in-x');
    expect(
      renderRule({
        matches: [{ m: 'markAny', mask: 0x02000000 }],
        stmts: [{ s: 'markSet', op: 'or', value: 1 }],
        verdict: { v: 'return' },
      }),
    ).toBe('meta mark and 0x02000000 != 0 meta mark set meta mark or 0x00000001 return');
    expect(
      renderRule({
        matches: [
          { m: 'ifname', dir: 'in', name: 'npi', prefix: true },
          { m: 'ifnameSet', dir: 'in', set: 'wl-known', neg: true },
        ],
        verdict: { v: 'drop' },
      }),
    ).toBe('iifname "npi*" iifname != @wl-known drop');
    expect(renderRule({ matches: [], stmts: [{ s: 'log', prefix: 'netplugin "$x": ' }], comment: 'a"b\nc' })).toBe(
      'log prefix "netplugin ??x?: " comment "a?b?c"',
    );
  });

  it('refuses values it cannot write, before any command exists', () => {
    expect(() =>
      renderRule({ matches: [{ m: 'ports', dir: 'd', ranges: [[70000, 70000]] }], verdict: { v: 'accept' } }),
    ).toThrow(/port 70000/);
    expect(() =>
      renderRule({ matches: [{ m: 'ports', dir: 'd', ranges: [[90, 80]] }], verdict: { v: 'accept' } }),
    ).toThrow(NftModelError);
    expect(() => renderRule({ matches: [{ m: 'l4proto', proto: 256 }] })).toThrow(/protocol 256/);
    expect(() => renderRule({ matches: [], verdict: { v: 'jump', chain: 'x y' } })).toThrow(/chain/);
    expect(() => renderRule({ matches: [{ m: 'nets', family: 4, dir: 's', nets: ['fd00::/8'] }] })).toThrow(/IPv4/);
    expect(() => renderRule({ matches: [{ m: 'ifname', dir: 'in', name: 'a"b' }] })).toThrow(/interface name/);
    expect(() => renderRule({ matches: [] })).toThrow(NftModelError);
    expect(() => elementCommands(T, 'add', 's', ['ipv4_addr'], [['10.0.0.1"']])).toThrow(NftModelError);
    expect(() => mapElementCommands(T, 'add', 'to-wl', ['ifname'], [[['a b'], 'to-x']])).toThrow(/interface name/);
  });

  it('writes chains, base chains, sets and elements', () => {
    expect(
      chainCommands(T, 'c-1', {
        comment: 'Profile kns.x ingress',
        owner: { kind: 'Profile', name: 'kns.x' },
        rules: [{ matches: [], verdict: { v: 'accept' } }],
      }),
    ).toEqual(['add chain inet t c-1 { comment "Profile kns.x ingress"; }', 'add rule inet t c-1 accept']);
    expect(
      baseChainCommands(T, {
        name: 'fw',
        hook: 'forward',
        priority: 'filter',
        policy: 'accept',
        comment: 'c',
        rules: [],
      }),
    ).toEqual(['add chain inet t fw { type filter hook forward priority filter; policy accept; comment "c"; }']);
    expect(setCommand(T, 's', { type: ['ipv4_addr', 'inet_proto', 'inet_service'], elements: new Map() })).toBe(
      'add set inet t s { type ipv4_addr . inet_proto . inet_service; }',
    );
    expect(elementCommands(T, 'add', 's', ['ipv4_addr', 'inet_proto', 'inet_service'], [['10.0.0.1', 6, 80]])).toEqual([
      'add element inet t s { 10.0.0.1 . tcp . 80 }',
    ]);
    expect(mapElementCommands(T, 'add', 'to-wl', ['ifname'], [[['npiab'], 'to-npiab']])).toEqual([
      'add element inet t to-wl { "npiab" : jump to-npiab }',
    ]);
    expect(
      elementCommands(
        T,
        'add',
        's',
        ['ipv4_addr'],
        Array.from({ length: 1001 }, (_, i) => [`10.0.${i >> 8}.${i & 255}`]),
      ),
    ).toHaveLength(3);
  });
});
