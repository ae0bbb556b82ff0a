// deploy/crds/ is generated from the zod schemas the code validates with
// (src/datastore/crds.ts): this fails when a file drifts from them, checks
// the printer columns and short names, and runs sample IPPools through the
// generated OpenAPI schema the way the API server's structural validation
// would (types, enums, ranges, patterns, required fields). kubectl reads them
// in test/integration/deploy-manifests.test.ts.
import { spawnSync } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { z } from 'zod';
import { CRD_KINDS, crdFor, renderCrds, toOpenApi, type OpenApi } from '../../src/datastore/crds.js';
import { specSchemas } from '../../src/datastore/schemas.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const DIR = join(ROOT, 'deploy/crds');

/** A small structural validator: what the API server checks before CEL. Returns the problems. */
function check(schema: OpenApi, v: unknown, path = 'spec'): string[] {
  const out: string[] = [];
  if (v === null) return schema.nullable ? [] : [`${path}: null`];
  const t = schema.type as string | undefined;
  if (t === 'object') {
    if (typeof v !== 'object' || Array.isArray(v)) return [`${path}: not an object`];
    for (const r of (schema.required as string[] | undefined) ?? [])
      if (!(r in (v as object))) out.push(`${path}.${r}: Required`);
    for (const [k, sub] of Object.entries((schema.properties as Record<string, OpenApi> | undefined) ?? {}))
      if (k in (v as object)) out.push(...check(sub, (v as Record<string, unknown>)[k], `${path}.${k}`));
  } else if (t === 'array') {
    if (!Array.isArray(v)) return [`${path}: not an array`];
    v.forEach((x, i) => out.push(...check(schema.items as OpenApi, x, `${path}[${i}]`)));
  } else if (t === 'integer' || t === 'number') {
    if (typeof v !== 'number' || (t === 'integer' && !Number.isInteger(v))) return [`${path}: not an ${t}`];
    if (schema.minimum !== undefined && v < (schema.minimum as number)) out.push(`${path}: below ${schema.minimum}`);
    if (schema.maximum !== undefined && v > (schema.maximum as number)) out.push(`${path}: above ${schema.maximum}`);
  } else if (t === 'string') {
    if (typeof v !== 'string') return [`${path}: not a string`];
    if (schema.pattern && !new RegExp(schema.pattern as string).test(v))
      out.push(`${path}: does not match ${schema.pattern}`);
    if (schema.minLength !== undefined && v.length < (schema.minLength as number)) out.push(`${path}: too short`);
  } else if (t === 'boolean' && typeof v !== 'boolean') return [`${path}: not a boolean`];
  if (schema.enum && !(schema.enum as unknown[]).includes(v))
    out.push(`${path}: not one of ${(schema.enum as unknown[]).join(', ')}`);
  return out;
}

describe('CRDs generated from the zod schemas', () => {
  it('deploy/crds/ is exactly what the schemas generate (regenerate: node scripts/gen-crds.mjs)', async () => {
    const files = await renderCrds();
    // netplugin.org kinds; operator.netplugin.org CRDs have their own source.
    expect(
      readdirSync(DIR)
        .filter((f) => f.startsWith('netplugin.org_'))
        .sort(),
    ).toEqual(Object.keys(files).sort());
    for (const [name, text] of Object.entries(files))
      expect(readFileSync(join(DIR, name), 'utf8'), `${name} drifted`).toBe(text);
    expect(
      spawnSync(process.execPath, [join(ROOT, 'scripts/gen-crds.mjs'), '--check'], { encoding: 'utf8' }).status,
    ).toBe(0);
  });

  it('a schema change shows up in the generated CRD', () => {
    const before = toOpenApi(specSchemas.IPPool);
    const changed = toOpenApi((specSchemas.IPPool as z.AnyZodObject).extend({ mtu: z.number().int().min(68) }));
    expect(changed).not.toEqual(before);
    expect((changed.properties as Record<string, OpenApi>).mtu).toEqual({ type: 'integer', minimum: 68 });
  });

  it('names, short names and printer columns are usable by kubectl', () => {
    const shorts = new Set<string>();
    for (const kind of CRD_KINDS) {
      const crd = parse(
        readFileSync(
          join(DIR, `netplugin.org_${(crdFor(kind as never).metadata as { name: string }).name.split('.')[0]}.yaml`),
          'utf8',
        ),
      );
      for (const s of crd.spec.names.shortNames) {
        expect(shorts.has(s), `short name ${s} used twice`).toBe(false);
        shorts.add(s);
      }
      const v = crd.spec.versions[0];
      const spec = v.schema.openAPIV3Schema.properties.spec;
      for (const c of v.additionalPrinterColumns) {
        const m = /^\.spec\.(\w+)$/.exec(c.jsonPath);
        if (m) expect(spec.properties?.[m[1]!], `${kind} column ${c.name} -> ${c.jsonPath}`).toBeDefined();
        else expect(c.jsonPath).toBe('.metadata.creationTimestamp');
      }
    }
    expect([...shorts]).toEqual(expect.arrayContaining(['ipp', 'ba', 'hep', 'gnp', 'kcc']));
  });

  it('the IPPool schema rejects what the code rejects and accepts a valid pool', () => {
    const crd = parse(readFileSync(join(DIR, 'netplugin.org_ippools.yaml'), 'utf8'));
    const spec = crd.spec.versions[0].schema.openAPIV3Schema.properties.spec as OpenApi;
    expect(
      check(spec, {
        cidr: '10.244.0.0/16',
        blockSize: 26,
        ipipMode: 'Never',
        natOutgoing: true,
        allowedUses: ['Workload'],
      }),
    ).toEqual([]);
    expect(check(spec, { blockSize: 26 })).toEqual(['spec.cidr: Required']);
    expect(check(spec, { cidr: 'ten-dot-0', blockSize: 26 })[0]).toMatch(/spec\.cidr: does not match/);
    expect(check(spec, { cidr: '10.0.0.0/8', blockSize: 'big' })).toEqual(['spec.blockSize: not an integer']);
    expect(check(spec, { cidr: '10.0.0.0/8', blockSize: 8 })).toEqual(['spec.blockSize: below 20']);
    expect(check(spec, { cidr: '10.0.0.0/8', ipipMode: 'Sometimes' })).toEqual([
      'spec.ipipMode: not one of Never, Always, CrossSubnet',
    ]);
    // The same samples through zod agree.
    expect(specSchemas.IPPool.safeParse({ cidr: '10.0.0.0/8', ipipMode: 'Sometimes' }).success).toBe(false);
    expect(specSchemas.IPPool.safeParse({ cidr: '10.244.0.0/16', blockSize: 26 }).success).toBe(true);
    // Rules across fields are CEL, with the ranges the IPAM code enforces.
    const rules = (spec['x-kubernetes-validations'] as Array<{ rule: string }>).map((r) => r.rule);
    expect(rules[0]).toContain('self.blockSize >= 20 && self.blockSize <= 32');
    expect(rules[0]).toContain('self.blockSize >= 116 && self.blockSize <= 128');
    expect(rules.some((r) => r.includes('self.cidr == oldSelf.cidr'))).toBe(true);
  });
});
