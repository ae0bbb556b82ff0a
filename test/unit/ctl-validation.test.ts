// Validation on the way in (apply, create, replace, validate, patch, label):
// metadata as the API server validates it, unknown fields refused everywhere
// with their path and a "did you mean", every problem of an object reported at
// once, and messages in the project's words instead of the schema library's.
import { describe, expect, it } from 'vitest';
import { MemoryDatastore } from '../../src/datastore/memory.js';
import { runCtl } from '../../src/ctl/index.js';
import { API_VERSION } from '../../src/model/resources.js';

async function ctl(
  ds: MemoryDatastore,
  argv: string[],
  stdin?: string,
): Promise<{ code: number; out: string; err: string }> {
  let out = '';
  let err = '';
  const code = await runCtl(argv, {
    env: { ETCD_ENDPOINTS: 'http://127.0.0.1:2379' },
    stdin,
    stdout: (s) => (out += s),
    stderr: (s) => (err += s),
    openDatastore: async () => ds,
  });
  return { code, out, err };
}
const doc = (o: Record<string, unknown>) => JSON.stringify({ apiVersion: API_VERSION, ...o });

describe('validation on the way in', () => {
  it('refuses names and labels the Kubernetes API server would refuse, so nothing is stored', async () => {
    const ds = new MemoryDatastore();
    for (const name of ['Bad_Name', 'UPPER', 'trailing-', 'a/b']) {
      const r = await ctl(
        ds,
        ['apply', '-f', '-'],
        doc({ kind: 'IPPool', metadata: { name }, spec: { cidr: '10.0.0.0/16' } }),
      );
      expect(r.code, name).toBe(1);
      expect(r.err).toContain(
        `metadata.name: ${JSON.stringify(name)} is not a valid name: it must consist of lower-case letters, digits, ` +
          `'-' and '.'`,
      );
    }
    expect(
      (
        await ctl(
          ds,
          ['apply', '-f', '-'],
          doc({ kind: 'IPPool', metadata: { name: 'Bad_Name' }, spec: { cidr: '10.0.0.0/16' } }),
        )
      ).err,
    ).toContain('(e.g. "bad-name")');
    expect((await ds.list('IPPool')).items).toEqual([]);
    const labels = await ctl(
      ds,
      ['apply', '-f', '-'],
      doc({
        kind: 'Profile',
        metadata: {
          name: 'p',
          labels: { 'Bad Key': 'x', ok: 'not ok!', 'UPPER.com/x': 'y' },
          annotations: { '/x': 'any value at all' },
        },
        spec: {},
      }),
    );
    expect(labels.err).toContain('metadata.labels: key "Bad Key" is not valid');
    expect(labels.err).toContain('metadata.labels.ok: value "not ok!" is not valid');
    expect(labels.err).toContain(
      'metadata.labels: key "UPPER.com/x" is not valid: its prefix "UPPER.com" must be a DNS subdomain',
    );
    expect(labels.err).toContain('metadata.annotations: key "/x" is not valid');
    expect(labels.err).toMatch(/4 problems: /);
  });

  it('refuses unknown fields everywhere, including metadata and nested rules, with the path and a suggestion', async () => {
    const ds = new MemoryDatastore();
    const r = await ctl(
      ds,
      ['apply', '-f', '-'],
      doc({
        kind: 'GlobalNetworkPolicy',
        metadata: { name: 'gnp', labelz: { a: 'b' } },
        spec: { selector: 'all()', ingress: [{ action: 'Allow', source: { selectr: 'all()' } }], egres: [] },
        sepc: {},
      }),
    );
    expect(r.code).toBe(1);
    expect(r.err).toContain('metadata.labelz: unknown field; did you mean labels?');
    expect(r.err).toContain('spec.ingress[0].source.selectr: unknown field; did you mean selector?');
    expect(r.err).toContain('spec.egres: unknown field; did you mean egress?');
    expect(r.err).toContain('sepc: unknown field; did you mean spec?');
    expect(r.err.trim().split('\n')).toHaveLength(1);
    // Kubernetes metadata from kubectl get -o yaml is accepted and not stored.
    const k = await ctl(
      ds,
      ['apply', '-f', '-'],
      doc({
        kind: 'Profile',
        metadata: { name: 'from-kubectl', generation: 3, managedFields: [{}], finalizers: [] },
        spec: {},
      }),
    );
    expect(k.err).toBe('');
    expect(Object.keys((await ds.get('Profile', 'from-kubectl')).metadata).sort()).toEqual(
      expect.not.arrayContaining(['generation', 'managedFields']),
    );
  });

  it('reports every problem at once in its own words: types, enums, ranges', async () => {
    const ds = new MemoryDatastore();
    const r = await ctl(
      ds,
      ['validate', '-f', '-'],
      doc({
        kind: 'IPPool',
        metadata: { name: 'p' },
        spec: { cidr: '10.0.0.0/16', ipipMode: 'always', natOutgoing: 'yes', allowedUses: ['Workloads'] },
      }),
    );
    expect(r.code).toBe(1);
    expect(r.err).toContain('3 problems');
    expect(r.err).toContain('spec.ipipMode: "always" is not one of Never, Always, CrossSubnet; did you mean Always?');
    expect(r.err).toContain('spec.natOutgoing: expected true or false, got a string "yes"');
    expect(r.err).toContain('spec.allowedUses[0]: "Workloads" is not one of Workload, Tunnel; did you mean Workload?');
    expect(r.err).not.toMatch(/Invalid enum value|Expected boolean/);
    const pol = await ctl(
      ds,
      ['validate', '-f', '-'],
      doc({
        kind: 'NetworkPolicy',
        metadata: { name: 'np', namespace: 'Shop' },
        spec: { ingress: [{ action: 'Alow' }] },
      }),
    );
    expect(pol.err).toContain(
      'spec.ingress[0].action: "Alow" is not one of Allow, Deny, Pass, Log; did you mean Allow?',
    );
    expect(pol.err).toContain('metadata.namespace: "Shop" is not a valid namespace');
  });

  it('a wrong type in a patch is a validation error naming the field, for merge and json patches', async () => {
    const ds = new MemoryDatastore();
    await ctl(
      ds,
      ['apply', '-f', '-'],
      doc({ kind: 'IPPool', metadata: { name: 'p' }, spec: { cidr: '10.0.0.0/16' } }),
    );
    const m = await ctl(ds, ['patch', 'ippool', 'p', '-p', '{"spec":{"disabled":"yes"}}']);
    expect(m.code).toBe(1);
    expect(m.err).toContain('ippool/p (IPPool "p"): spec.disabled: expected true or false, got a string "yes"');
    expect(m.err).not.toContain('corrupt');
    const j = await ctl(ds, [
      'patch',
      'ippool',
      'p',
      '--type',
      'json',
      '-p',
      '[{"op":"add","path":"/spec/blockSiz","value":24}]',
    ]);
    expect(j.err).toContain('spec.blockSiz: unknown field; did you mean blockSize?');
    const l = await ctl(ds, ['patch', 'ippool', 'p', '-p', '{"metadata":{"labels":{"zone":"a b"}}}']);
    expect(l.err).toContain('metadata.labels.zone: value "a b" is not valid');
    expect((await ds.get('IPPool', 'p')).spec.disabled).toBeUndefined();
  });
});
