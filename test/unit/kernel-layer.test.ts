// The layer rules of docs/architecture.md, checked on src/'s import statements
// so they cannot drift back. A rule names a layer and the layers allowed to
// import it; add a row when docs/architecture.md states a new rule.
import { describe, expect, it } from 'vitest';
import { describeRule, importGraph, importsOf, SRC_ROOT, violations, type LayerRule } from '../support/import-graph.js';

const RULES: LayerRule[] = [
  {
    kind: 'only-from',
    target: 'native/',
    allowedFrom: ['native/', 'dataplane/'],
    why: 'dataplane/ is the node kernel layer: everything above it reaches the addon through dataplane/',
  },
  {
    kind: 'imports-only',
    from: 'dataplane/',
    allowed: ['dataplane/', 'native/', 'net/', 'log/'],
    why: 'the kernel layer takes plain desired state (never Kubernetes or datastore types) and calls nothing above it',
  },
  {
    kind: 'never',
    from: 'k8s/',
    target: 'datastore/',
    why: 'datastore/ may use k8s/ (the kubernetes backend), not the reverse',
  },
  { kind: 'never', from: 'ipam/', target: 'hostlock/', why: 'the IPAM runs under the IpamHostLock its caller passes' },
];

describe('layer rules of src/', () => {
  const graph = importGraph(SRC_ROOT);

  it('sees the imports of src/ (the graph is not empty)', () => {
    // dataplane/ is the one user of the addon: if the walk found nothing, every rule would hold vacuously.
    expect(graph.some((a) => a.from.startsWith('dataplane/') && a.to.startsWith('native/'))).toBe(true);
  });

  for (const rule of RULES) {
    it(describeRule(rule), () => {
      expect(violations(graph, rule), rule.why).toEqual([]);
    });
  }
});

describe('the import reader', () => {
  const rule = RULES[0]!;
  const at = (from: string, src: string, r: LayerRule) => violations(importsOf(from, src), r);
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

  it('applies each kind of rule', () => {
    const [, upward, never] = RULES as [LayerRule, LayerRule, LayerRule];
    expect(at('dataplane/x.ts', "import { a } from '../k8s/pod.js';", upward)).toEqual([
      'dataplane/x.ts:1 imports ../k8s/pod.js',
    ]);
    expect(at('dataplane/nft/x.ts', "import { a } from '../../net/cidr.js';", upward)).toEqual([]);
    expect(at('k8s/x.ts', "import type { D } from '../datastore/types.js';", never)).toHaveLength(1);
    expect(at('datastore/x.ts', "import { k } from '../k8s/client.js';", never)).toEqual([]);
  });

  it('resolves a specifier against the importer, not by its text', () => {
    // src/agent/native/... would not be the addon layer; ../../native from agent/routes/ is.
    expect(violations(importsOf('agent/x.ts', "import './native/y.js';"), rule)).toEqual([]);
    expect(violations(importsOf('agent/routes/x.ts', "import '../../native/y.js';"), rule)).toHaveLength(1);
  });
});
