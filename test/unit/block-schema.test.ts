// The IPAMBlock check every ADD and DEL runs before writing its block
// (src/datastore/schemas.ts, resourceProblem): a hand-written pass over the
// spec stands in for zod's when it accepts. It must never accept what the zod
// schema (specSchemas.IPAMBlock) refuses: each variant below, valid or not, gets
// the same verdict from both, and a refused one still names its field.
import { describe, expect, it } from 'vitest';
import { resourceProblem, specSchemas } from '../../src/datastore/schemas.js';

const block = (spec: Record<string, unknown>, meta: Record<string, unknown> = { name: '10-70-0-0-26' }) => ({
  apiVersion: 'netplugin.org/v3',
  kind: 'IPAMBlock',
  metadata: meta,
  spec,
});

const valid = (): Record<string, unknown> => ({
  cidr: '10.70.0.0/26',
  affinity: 'host:node-a',
  allocations: [0, 1, null, null],
  unallocated: [2, 3],
  attributes: [
    { handle_id: 'k8s-pod-network.abc', secondary: { namespace: 'default', pod: 'web-0' } },
    { handle_id: null },
  ],
  sequenceNumber: 4,
});

type Edit = [string, (s: Record<string, unknown>) => void];
const sparse = (): unknown[] => {
  const a: unknown[] = [0];
  a[2] = 1;
  return a;
};
const edits: Edit[] = [
  ['as is', () => undefined],
  ['affinity null', (s) => (s['affinity'] = null)],
  ['deleted true', (s) => (s['deleted'] = true)],
  ['an extra field (passthrough)', (s) => (s['extra'] = { any: 1 })],
  ['no secondary', (s) => (s['attributes'] = [{ handle_id: 'h' }])],
  ['empty arrays', (s) => Object.assign(s, { allocations: [], unallocated: [], attributes: [] })],
  ['sequenceNumber Infinity', (s) => (s['sequenceNumber'] = Number.POSITIVE_INFINITY)],
  ['cidr missing', (s) => delete s['cidr']],
  ['cidr not a CIDR', (s) => (s['cidr'] = '10.70.0.0')],
  ['cidr a number', (s) => (s['cidr'] = 10)],
  ['affinity missing', (s) => delete s['affinity']],
  ['affinity a number', (s) => (s['affinity'] = 1)],
  ['allocations missing', (s) => delete s['allocations']],
  ['allocations an object', (s) => (s['allocations'] = { 0: 0 })],
  ['a negative slot', (s) => (s['allocations'] = [0, -1])],
  ['a fractional slot', (s) => (s['allocations'] = [0.5])],
  ['a string slot', (s) => (s['allocations'] = ['0'])],
  ['a hole in allocations', (s) => (s['allocations'] = sparse())],
  ['a null in unallocated', (s) => (s['unallocated'] = [null])],
  ['a hole in unallocated', (s) => (s['unallocated'] = sparse())],
  ['NaN in unallocated', (s) => (s['unallocated'] = [Number.NaN])],
  ['attributes missing', (s) => delete s['attributes']],
  ['an attribute null', (s) => (s['attributes'] = [null])],
  ['an attribute an array', (s) => (s['attributes'] = [[]])],
  ['handle_id missing', (s) => (s['attributes'] = [{}])],
  ['handle_id a number', (s) => (s['attributes'] = [{ handle_id: 7 }])],
  ['secondary an array', (s) => (s['attributes'] = [{ handle_id: 'h', secondary: ['x'] }])],
  ['secondary null', (s) => (s['attributes'] = [{ handle_id: 'h', secondary: null }])],
  ['a secondary value a number', (s) => (s['attributes'] = [{ handle_id: 'h', secondary: { pod: 1 } }])],
  ['secondary a Date', (s) => (s['attributes'] = [{ handle_id: 'h', secondary: new Date(0) }])],
  ['an attribute a Map', (s) => (s['attributes'] = [new Map([['handle_id', 'h']])])],
  ['deleted a string', (s) => (s['deleted'] = 'yes')],
  ['sequenceNumber NaN', (s) => (s['sequenceNumber'] = Number.NaN)],
  ['sequenceNumber a string', (s) => (s['sequenceNumber'] = '4')],
];

describe('the IPAMBlock check before a write', () => {
  it.each(edits)('%s: the same verdict as the zod schema', (_what, edit) => {
    const spec = valid();
    edit(spec);
    const zodOk = specSchemas.IPAMBlock.safeParse(spec).success;
    const problem = resourceProblem('IPAMBlock', block(spec));
    expect(problem === undefined).toBe(zodOk);
    if (!zodOk) expect(problem).toMatch(/^spec\./);
  });

  it('a valid spec under a bad envelope is still refused (metadata, apiVersion)', () => {
    expect(resourceProblem('IPAMBlock', block(valid(), { name: '' }))).toMatch(/^metadata\.name/);
    expect(resourceProblem('IPAMBlock', { ...block(valid()), apiVersion: 'v1' })).toMatch(/^apiVersion/);
    expect(resourceProblem('IPAMBlock', { ...block(valid()), spec: undefined })).toMatch(/^spec/);
  });
});
