// The layer rules of docs/architecture.md, checked on src/'s import statements
// so they cannot drift back. A rule names a layer and the layers allowed to
// import it; add a row when docs/architecture.md states a new rule.
import { describe, expect, it } from 'vitest';
import { importGraph, importsOf, SRC_ROOT, violations, type LayerRule } from '../support/import-graph.js';

const RULES: LayerRule[] = [
  {
    target: 'native/',
    allowedFrom: ['native/', 'dataplane/'],
    why: 'dataplane/ is the node kernel layer: everything above it reaches the addon through dataplane/',
  },
];

describe('layer rules of src/', () => {
  const graph = importGraph(SRC_ROOT);

  it('sees the imports of src/ (the graph is not empty)', () => {
    // dataplane/ is the one user of the addon: if the walk found nothing, every rule would hold vacuously.
    expect(graph.some((a) => a.from.startsWith('dataplane/') && a.to.startsWith('native/'))).toBe(true);
  });

  for (const rule of RULES) {
    it(`${rule.target} is imported only from ${rule.allowedFrom.join(', ')}`, () => {
      expect(violations(graph, rule), rule.why).toEqual([]);
    });
  }
});

describe('the import reader', () => {
  const rule = RULES[0]!;
  it('counts static, type-only, re-export and dynamic imports, multi-line ones too', () => {
    const src = [
      "import type { Netlink } from '../native/index.js';",
      "export { nftRun } from '../native/nft.js';",
      'const m = await import(',
      "  '../native/index.js');",
      'import {',
      '  netlink,',
      "} from '../native/index.js';",
    ].join('\n');
    expect(violations(importsOf('agent/x.ts', src), rule)).toEqual([
      'agent/x.ts:1 imports ../native/index.js',
      'agent/x.ts:2 imports ../native/nft.js',
      'agent/x.ts:4 imports ../native/index.js',
      'agent/x.ts:7 imports ../native/index.js',
    ]);
  });

  it('ignores comments and strings that look like imports, and allowed importers', () => {
    const src = "// import { x } from '../native/index.js'\nconst s = \"import('../native/nft.js')\";\n";
    expect(violations(importsOf('agent/x.ts', src), rule)).toEqual([]);
    expect(violations(importsOf('dataplane/x.ts', "import '../native/index.js';"), rule)).toEqual([]);
  });

  it('resolves a specifier against the importer, not by its text', () => {
    // src/agent/native/... would not be the addon layer; ../../native from agent/routes/ is.
    expect(violations(importsOf('agent/x.ts', "import './native/y.js';"), rule)).toEqual([]);
    expect(violations(importsOf('agent/routes/x.ts', "import '../../native/y.js';"), rule)).toHaveLength(1);
  });
});
