// Exports of src/ modules that nothing imports: not another module of src/, not a test, not a
// script. An export is a promise that someone outside the module uses a name; one nobody uses
// widens the module's surface for nothing (and hides dead code from noUnusedLocals). Read with
// the TypeScript parser: named imports, `export … from`, `import * as`, `import()` (destructured
// names count; any other use counts the whole module) and `import('…').Type` all count.
import { readdirSync, readFileSync } from 'node:fs';
import { join, posix, relative, sep } from 'node:path';
import ts from 'typescript';

function walk(dir: string, ext: RegExp): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((d) => {
    const p = join(dir, d.name);
    if (d.isDirectory()) return d.name === 'node_modules' ? [] : walk(p, ext);
    return ext.test(d.name) && !d.name.endsWith('.d.ts') ? [p] : [];
  });
}

/** A module's exported names (declarations and `export { … }` lists). */
function exportedNames(sf: ts.SourceFile): string[] {
  const out: string[] = [];
  for (const st of sf.statements) {
    if (ts.isExportDeclaration(st) && st.exportClause && ts.isNamedExports(st.exportClause)) {
      for (const e of st.exportClause.elements) out.push(e.name.text);
      continue;
    }
    const mods = ts.canHaveModifiers(st) ? ts.getModifiers(st) : undefined;
    if (!mods?.some((m) => m.kind === ts.SyntaxKind.ExportKeyword)) continue;
    if (mods.some((m) => m.kind === ts.SyntaxKind.DefaultKeyword)) out.push('default');
    else if (ts.isVariableStatement(st)) {
      for (const d of st.declarationList.declarations) if (ts.isIdentifier(d.name)) out.push(d.name.text);
    } else {
      const name = (st as ts.DeclarationStatement).name;
      if (name && ts.isIdentifier(name)) out.push(name.text);
    }
  }
  return out;
}

/** `src/x/y.ts: name` for each export of src/ (entry points under src/bin/ aside) that nobody imports. */
export function deadExports(root: string): string[] {
  const rel = (p: string) => relative(root, p).split(sep).join('/');
  const srcFiles = walk(join(root, 'src'), /\.ts$/);
  const readers = [
    ...srcFiles,
    ...walk(join(root, 'test'), /\.(ts|mts)$/),
    ...walk(join(root, 'scripts'), /\.(mjs|ts)$/),
  ];
  const used = new Map<string, Set<string>>();
  const whole = new Set<string>();
  const exported = new Map<string, string[]>();
  const use = (m: string, n: string) => {
    if (!used.has(m)) used.set(m, new Set());
    used.get(m)!.add(n);
  };
  for (const file of readers) {
    const sf = ts.createSourceFile(file, readFileSync(file, 'utf8'), ts.ScriptTarget.Latest, true);
    const target = (spec: string) =>
      posix.normalize(posix.join(posix.dirname(rel(file)), spec)).replace(/\.js$/, '.ts');
    const visit = (n: ts.Node): void => {
      if ((ts.isImportDeclaration(n) || ts.isExportDeclaration(n)) && n.moduleSpecifier) {
        const spec = (n.moduleSpecifier as ts.StringLiteral).text;
        if (spec.startsWith('.')) {
          const t = target(spec);
          if (ts.isImportDeclaration(n)) {
            const c = n.importClause;
            if (c?.name) use(t, 'default');
            const b = c?.namedBindings;
            if (b && ts.isNamespaceImport(b)) whole.add(t);
            if (b && ts.isNamedImports(b)) for (const e of b.elements) use(t, (e.propertyName ?? e.name).text);
          } else if (n.exportClause && ts.isNamedExports(n.exportClause)) {
            for (const e of n.exportClause.elements) use(t, (e.propertyName ?? e.name).text);
          } else whole.add(t);
        }
      }
      if (ts.isCallExpression(n) && n.expression.kind === ts.SyntaxKind.ImportKeyword) {
        const a = n.arguments[0];
        if (a && ts.isStringLiteralLike(a) && a.text.startsWith('.')) {
          const t = target(a.text);
          const p = ts.isAwaitExpression(n.parent) ? n.parent.parent : n.parent;
          if (ts.isVariableDeclaration(p) && ts.isObjectBindingPattern(p.name)) {
            for (const e of p.name.elements) use(t, ((e.propertyName ?? e.name) as ts.Identifier).text);
          } else whole.add(t);
        }
      }
      if (ts.isImportTypeNode(n) && ts.isLiteralTypeNode(n.argument) && ts.isStringLiteral(n.argument.literal)) {
        const spec = n.argument.literal.text;
        if (spec.startsWith('.')) {
          const q = n.qualifier;
          if (!q) whole.add(target(spec));
          else use(target(spec), ts.isIdentifier(q) ? q.text : q.getText().split('.')[0]!);
        }
      }
      ts.forEachChild(n, visit);
    };
    visit(sf);
    if (file.startsWith(join(root, 'src') + sep)) exported.set(rel(file), exportedNames(sf));
  }
  const dead: string[] = [];
  for (const [file, names] of exported) {
    if (file.startsWith('src/bin/') || whole.has(file)) continue;
    for (const n of names) if (!used.get(file)?.has(n)) dead.push(`${file}: ${n}`);
  }
  return dead.sort();
}
