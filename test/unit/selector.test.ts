import { describe, expect, it } from 'vitest';
import { parseSelector, SelectorParseError } from '../../src/selector/index.js';

const labels = {
  zone: 'a',
  'kubernetes.io/hostname': 'node-1',
  'node-role.kubernetes.io/worker': '',
  tier_x: 'db',
  quote: "it's",
};

describe('selector: match vectors', () => {
  const cases: Array<[string, boolean]> = [
    ['all()', true],
    ['', true],
    ['   ', true],
    ["zone == 'a'", true],
    ['zone == "a"', true],
    ["zone == 'b'", false],
    ["zone != 'b'", true],
    ["zone != 'a'", false],
    // != and not in match when the label is absent
    ["missing != 'x'", true],
    ["missing == 'x'", false],
    ["zone in {'a','b'}", true],
    ["zone in {'b', 'c'}", false],
    ['zone in {}', false],
    ["zone not in {'b'}", true],
    ["zone not in {'a','b'}", false],
    ["missing in {'a'}", false],
    ["missing not in {'a'}", true],
    ['has(zone)', true],
    ['has(missing)', false],
    ['!has(missing)', true],
    ['!has(zone)', false],
    ["kubernetes.io/hostname == 'node-1'", true],
    ['has(node-role.kubernetes.io/worker)', true],
    ["node-role.kubernetes.io/worker == ''", true],
    ["tier_x == 'db'", true],
    [`quote == "it's"`, true],
    ["zone == 'a' && tier_x == 'db'", true],
    ["zone == 'a' && tier_x == 'web'", false],
    ["zone == 'b' || tier_x == 'db'", true],
    ["zone == 'b' || tier_x == 'web'", false],
    // && binds tighter than ||
    ["zone == 'b' && tier_x == 'web' || has(zone)", true],
    ["zone == 'b' && (tier_x == 'web' || has(zone))", false],
    ["!(zone == 'a')", false],
    ["!zone == 'a'", false],
    ["!!(zone == 'a')", true],
    ["  ( ( zone=='a' ) )  ", true],
    ['all() && !has(missing)', true],
    // 'has', 'all', 'in', 'not' are ordinary keys when not used as functions/operators
    ["has == 'x'", false],
    ["in != 'x'", true],
  ];
  for (const [expr, want] of cases) {
    it(`${JSON.stringify(expr)} -> ${want}`, () => {
      const s = parseSelector(expr);
      expect(s.matches(labels)).toBe(want);
      // the canonical text re-parses to an equivalent selector
      expect(parseSelector(s.toString()).matches(labels)).toBe(want);
      expect(parseSelector(s.toString()).toString()).toBe(s.toString());
    });
  }

  it('matches against empty labels (a Node without labels)', () => {
    expect(parseSelector("zone == 'a'").matches({})).toBe(false);
    expect(parseSelector("zone != 'a'").matches({})).toBe(true);
    expect(parseSelector('all()').matches({})).toBe(true);
  });

  it('canonical forms', () => {
    expect(parseSelector('zone=="a"').toString()).toBe("zone == 'a'");
    expect(parseSelector("a=='1'||b=='2'&&c=='3'").toString()).toBe("a == '1' || b == '2' && c == '3'");
    expect(parseSelector("(a=='1'||b=='2')&&c=='3'").toString()).toBe("(a == '1' || b == '2') && c == '3'");
    expect(parseSelector("!a=='1'").toString()).toBe("!(a == '1')");
    expect(parseSelector('k in {\'x\',"y"}').toString()).toBe("k in {'x', 'y'}");
    expect(parseSelector(`k == "it's"`).toString()).toBe(`k == "it's"`);
  });
});

describe('selector: parse errors carry the position and a caret', () => {
  const cases: Array<[string, number, RegExp]> = [
    ["zone == 'a' & b", 12, /'&&'/],
    ["zone == 'a' && && b", 15, /unexpected '&&' at 15: expected a label key/],
    ["zone = 'a'", 5, /expected '=='/],
    ['zone == a', 8, /expected a quoted value/],
    ['zone', 4, /unexpected end of selector at 4: expected '==', '!=', 'in' or 'not in'/],
    ["zone == 'a", 8, /unterminated string at 8/],
    ['has(zone', 8, /expected '\)'/],
    ['has()', 4, /expected a label key/],
    ['all(x)', 4, /all\(\) takes no argument/],
    ["(zone == 'a'", 12, /expected '\)'/],
    ["zone == 'a')", 11, /unexpected '\)' at 11/],
    ["zone in {'a' 'b'}", 13, /expected ',' or '}'/],
    ["zone in 'a'", 8, /expected '\{'/],
    ["zone not {'a'}", 9, /'in' after 'not'/],
    ['!', 1, /unexpected end of selector at 1: expected a label key/],
    ["zone == 'a' zone", 12, /expected '&&', '\|\|' or the end/],
    ['zone == @', 8, /unexpected '@' at 8/],
  ];
  for (const [expr, pos, msg] of cases) {
    it(JSON.stringify(expr), () => {
      let err: unknown;
      try {
        parseSelector(expr);
      } catch (e) {
        err = e;
      }
      expect(err).toBeInstanceOf(SelectorParseError);
      const pe = err as SelectorParseError;
      expect(pe.position).toBe(pos);
      expect(pe.message).toMatch(msg);
      const lines = pe.message.split('\n');
      expect(lines[1]).toBe(`  ${expr}`);
      expect(lines[2]).toBe(`  ${' '.repeat(pos)}^`);
    });
  }
});
