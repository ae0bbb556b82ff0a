// Issue 11, finding 6: one redaction for every output, including the CNI
// error JSON on stdout; credentials in URLs are refused as configuration.
import { describe, expect, it } from 'vitest';
import { redactString } from '../../src/log/redact.js';
import { errorResult } from '../../src/cni/errors.js';
import { dispatch } from '../../src/cni/dispatch.js';
import { CniError } from '../../src/errors.js';
import { handlers } from '../../src/plugins/main/index.js';
import { createPluginRuntime } from '../../src/plugins/main/runtime.js';

const plugin = { name: 'netplugin', load: async () => handlers, runtime: createPluginRuntime() };

const JWT = 'eyJhbGciOiJSUzI1NiIsImtpZCI6IjEifQ.eyJzdWIiOiJzeXN0ZW06c2VydmljZWFjY291bnQifQ.c2lnbmF0dXJlLXBhcnQ';

describe('redactString', () => {
  it.each([
    ['URL userinfo', 'dial https://admin:hunter2@10.0.0.1:2379 failed', 'hunter2'],
    ['lower-case bearer', 'header authorization: bearer abc.def-ghi', 'abc.def-ghi'],
    ['upper-case BEARER', 'sent BEARER s3cr3tt0ken', 's3cr3tt0ken'],
    ['a bare JWT', `token was ${JWT} here`, JWT],
    ['a password field', '{"password":"pw-value-1"}', 'pw-value-1'],
  ])('%s', (_what, text, secret) => {
    const out = redactString(text);
    expect(out).not.toContain(secret);
    expect(out).toContain('[REDACTED]');
  });
  it('keeps ordinary text', () => {
    expect(redactString('dial https://10.0.0.1:2379 failed: connection refused')).toBe(
      'dial https://10.0.0.1:2379 failed: connection refused',
    );
  });
});

describe('CNI error JSON', () => {
  it('is redacted (msg and details)', () => {
    const r = errorResult(
      '1.0.0',
      new CniError(7, `bad value https://u:pw-in-msg@h:1 and ${JWT}`, 'Bearer pw-in-details'),
    );
    expect(JSON.stringify(r)).not.toMatch(/pw-in-msg|pw-in-details|eyJzdWIi/);
  });

  it.each([
    ['etcd_endpoints', { etcd_endpoints: 'https://root:etcdpass@127.0.0.1:2379' }, 'etcd_cert_file'],
    [
      'kubernetes.k8s_api_root',
      { datastore_type: 'kubernetes', kubernetes: { k8s_api_root: 'https://admin:kubepass@127.0.0.1:6443' } },
      'kubeconfig',
    ],
  ])('credentials in %s are refused (code 7), saying where they go, and never printed', async (field, extra, where) => {
    let out = '';
    let err = '';
    const code = await dispatch(
      {
        env: {
          CNI_COMMAND: 'ADD',
          CNI_CONTAINERID: 'c1',
          CNI_NETNS: '/var/run/netns/nonexistent-x',
          CNI_IFNAME: 'eth0',
          CNI_PATH: '/opt/cni/bin',
        },
        stdin: JSON.stringify({
          cniVersion: '1.0.0',
          name: 'n',
          type: 'netplugin',
          ipam: { type: 'netplugin-ipam' },
          ...extra,
        }),
        stdout: (s) => (out += s),
        stderr: (s) => (err += s),
      },
      plugin,
    );
    expect(code).toBe(1);
    const r = JSON.parse(out);
    expect(r.code).toBe(7);
    expect(r.msg).toContain(field);
    expect(r.msg).toContain('credentials in the URL');
    expect(r.msg).toContain(where);
    expect(out + err).not.toMatch(/etcdpass|kubepass/);
  });
});
