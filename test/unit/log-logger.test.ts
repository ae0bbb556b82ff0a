import { mkdtempSync, readFileSync, rmSync, existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { createLogger, loggerOptionsFromConf } from '../../src/log/logger.js';
import { redact, redactString, REDACTED } from '../../src/log/redact.js';

const dir = mkdtempSync(join(tmpdir(), `log-unit-${process.pid}-`));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function capture(opts: Parameters<typeof createLogger>[0] = {}) {
  const lines: string[] = [];
  const log = createLogger({ ...opts, stderr: (s) => lines.push(s) });
  return { log, lines };
}

describe('line format', () => {
  it('has time, level, pid, container, pod, message and fields', () => {
    const { log, lines } = capture({ context: { containerId: 'abc123', podNamespace: 'default', podName: 'web-0' } });
    log.info('assigned address', { ip: '10.0.0.5/32', n: 3, ok: true, obj: { a: 1 }, s: 'two words' });
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatch(
      new RegExp(
        `^\\d{4}-\\d\\d-\\d\\dT\\d\\d:\\d\\d:\\d\\d\\.\\d{3}Z INFO    \\[${process.pid}\\] cid=abc123 ` +
          `pod=default/web-0 assigned address ip=10.0.0.5/32 n=3 ok=true obj=\\{"a":1\\} s="two words"\\n$`,
      ),
    );
  });
  it('child adds context', () => {
    const { log, lines } = capture();
    log.child({ containerId: 'c1' }).child({ podNamespace: 'ns', podName: 'p', command: 'ADD' }).warn('x');
    expect(lines[0]).toContain('WARNING [');
    expect(lines[0]).toContain('cid=c1 pod=ns/p command=ADD x');
  });
  it('writes a stack on indented lines after the fields', () => {
    const { log, lines } = capture();
    log.error('boom', { code: 999, stack: 'Error: boom\n    at f (x.js:1:1)' });
    expect(lines[0]).toMatch(/boom code=999\n {4}Error: boom\n {8}at f \(x\.js:1:1\)\n$/);
  });
});

describe('levels', () => {
  const cases: Array<[string | undefined, string[]]> = [
    ['ERROR', ['ERROR']],
    ['warning', ['ERROR', 'WARNING']],
    ['Info', ['ERROR', 'WARNING', 'INFO']],
    ['DEBUG', ['ERROR', 'WARNING', 'INFO', 'DEBUG']],
    [undefined, ['ERROR', 'WARNING', 'INFO']],
    ['bogus', ['ERROR', 'WARNING', 'INFO']],
  ];
  it.each(cases)('level %s writes %j', (level, expected) => {
    const { log, lines } = capture({ level });
    log.error('e');
    log.warn('w');
    log.info('i');
    log.debug('d');
    expect(lines.map((l) => l.split(' ')[1])).toEqual(expected);
  });
});

describe('file output', () => {
  it('appends to the file (creating its directory) as well as stderr', () => {
    const file = join(dir, 'a', 'b', 'cni.log');
    const { log, lines } = capture({ filePath: file });
    log.info('one');
    log.info('two');
    log.close();
    expect(readFileSync(file, 'utf8')).toBe(lines.join(''));
  });
  it('buffered mode writes batches on flush', async () => {
    const file = join(dir, 'buffered.log');
    const { log } = capture({ filePath: file, buffered: true });
    log.info('one');
    log.info('two');
    expect(existsSync(file)).toBe(false);
    await new Promise((r) => setImmediate(r));
    expect(readFileSync(file, 'utf8').match(/one|two/g)).toEqual(['one', 'two']);
    log.info('three');
    log.close();
    expect(readFileSync(file, 'utf8')).toContain('three');
  });
  it('an unwritable file disables file logging with one warning, never throws', () => {
    const { log, lines } = capture({ filePath: '/proc/version/nope.log' });
    log.info('still logged');
    log.info('again');
    expect(lines.filter((l) => l.includes('log file disabled'))).toHaveLength(1);
    expect(lines.filter((l) => l.includes('still logged') || l.includes('again'))).toHaveLength(2);
  });
  it('no file when log_file_path is absent or empty', () => {
    expect(loggerOptionsFromConf({}).filePath).toBeUndefined();
    expect(loggerOptionsFromConf({ log_file_path: '' }).filePath).toBeUndefined();
    expect(
      loggerOptionsFromConf({ log_file_path: '/var/log/x.log', log_level: 'debug', log_file_max_size: 5 }),
    ).toMatchObject({
      filePath: '/var/log/x.log',
      level: 'debug',
      maxSizeMB: 5,
      maxAgeDays: 30,
      maxCount: 10,
    });
  });
});

describe('secret redaction', () => {
  const PEM = '-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEAsecretkeymaterial\n-----END RSA PRIVATE KEY-----';
  const KUBECONFIG =
    `apiVersion: v1\nusers:\n- name: np\n  user:\n    token: eyJhbGciOiJSUzI1NiJ9.secret-token\n    ` +
    `client-key-data: LS0tLS1CRUdJTi1zZWNyZXQ=\n`;
  const fields: Array<[string, Record<string, unknown>, string[]]> = [
    ['token field', { token: 'abc-secret-1' }, ['abc-secret-1']],
    ['password field', { password: 'hunter2-secret' }, ['hunter2-secret']],
    [
      'nested Authorization header',
      { headers: { Authorization: 'Bearer xyz-secret-2', Accept: 'json' } },
      ['xyz-secret-2'],
    ],
    ['client-key-data', { user: { 'client-key-data': 'LS0tsecret3' } }, ['LS0tsecret3']],
    ['key-data', { 'key-data': 'sekrit4' }, ['sekrit4']],
    ['inline kubeconfig', { kubeconfig: KUBECONFIG }, ['secret-token', 'LS0tLS1CRUdJTi1zZWNyZXQ=']],
    ['etcd key file content', { etcdKey: PEM }, ['secretkeymaterial']],
    ['secret in an array', { list: [{ auth_token: 't0ken-secret5' }] }, ['t0ken-secret5']],
    [
      'token inside a message-like string',
      { err: 'request failed: Authorization: Bearer abc.def.secret6' },
      ['abc.def.secret6'],
    ],
    ['yaml token inside a string', { text: KUBECONFIG }, ['secret-token', 'LS0tLS1CRUdJTi1zZWNyZXQ=']],
  ];
  it.each(fields)('%s never reaches stderr or the file', (_n, f, secrets) => {
    const file = join(dir, `redact-${Math.random().toString(36).slice(2)}.log`);
    const { log, lines } = capture({ filePath: file });
    log.info('request', f);
    log.error(`failed with ${JSON.stringify(f)}`);
    log.close();
    const out = lines.join('') + readFileSync(file, 'utf8');
    for (const s of secrets) expect(out).not.toContain(s);
    expect(out).toContain(REDACTED);
  });
  it('keeps harmless values (paths, names)', () => {
    expect(
      redact({
        kubeconfig: '/etc/cni/net.d/kubeconfig',
        etcd_key_file: '/etc/etcd/key.pem',
        key: '/netplugin/ipam/v2/x',
        name: 'web',
      }),
    ).toEqual({
      kubeconfig: '/etc/cni/net.d/kubeconfig',
      etcd_key_file: '/etc/etcd/key.pem',
      key: '/netplugin/ipam/v2/x',
      name: 'web',
    });
    expect(redactString('assigned 10.0.0.5 to web-0')).toBe('assigned 10.0.0.5 to web-0');
  });
  it('survives cycles', () => {
    const a: Record<string, unknown> = { name: 'a' };
    a['self'] = a;
    expect(redact(a)).toEqual({ name: 'a', self: '[...]' });
  });
});

describe('json format (log_format: json, --log-format json)', () => {
  it('writes one parseable object per line with context, fields, a stack, and redaction', () => {
    const lines: string[] = [];
    const log = createLogger({
      format: 'json',
      level: 'debug',
      stderr: (s) => lines.push(s),
      context: { containerId: 'c1', podNamespace: 'ns', podName: 'web' },
    });
    const e = new Error('boom');
    log.child({ command: 'ADD' }).error('ADD failed "quoted"\nsecond line', {
      code: 7,
      password: 'hunter2',
      stack: e.stack,
      msg: 'a field named msg',
    });
    log.debug('plain');
    expect(lines).toHaveLength(2);
    for (const l of lines) expect(l.endsWith('\n') && !l.slice(0, -1).includes('\n')).toBe(true);
    const o = JSON.parse(lines[0]!);
    expect(o).toMatchObject({
      level: 'ERROR',
      pid: process.pid,
      msg: 'ADD failed "quoted"\nsecond line',
      containerId: 'c1',
      podNamespace: 'ns',
      podName: 'web',
      command: 'ADD',
      code: 7,
      password: REDACTED,
      field_msg: 'a field named msg',
    });
    expect(o.stack).toContain('Error: boom');
    expect(Date.parse(o.time)).not.toBeNaN();
    expect(JSON.parse(lines[1]!)).toMatchObject({ level: 'DEBUG', msg: 'plain' });
  });

  it('is chosen by the netconf log_format, text otherwise', () => {
    expect(loggerOptionsFromConf({ log_format: 'json' }).format).toBe('json');
    expect(loggerOptionsFromConf({}).format).toBe('text');
    const lines: string[] = [];
    createLogger({ ...loggerOptionsFromConf({ log_format: 'text' }), stderr: (s) => lines.push(s) }).info('hi', {
      a: 1,
    });
    expect(lines[0]).toMatch(/^\S+ INFO +\[\d+\] hi a=1\n$/);
  });
});
