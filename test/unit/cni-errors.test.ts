import { describe, expect, it } from 'vitest';
import { errorResult, toCniError } from '../../src/cni/errors.js';
import { CniError, DatastoreError, type DatastoreErrorKind } from '../../src/errors.js';

describe('toCniError', () => {
  it('passes CniError through', () => {
    const e = new CniError(7, 'bad', 'fix it');
    expect(toCniError(e)).toBe(e);
  });
  const kinds: Array<[DatastoreErrorKind, number]> = [
    ['Unavailable', 11],
    ['Conflict', 11],
    ['NotFound', 102],
    ['AlreadyExists', 102],
    ['Unauthorized', 102],
    ['Invalid', 7],
  ];
  it.each(kinds)('DatastoreError %s -> %d', (kind, code) => {
    const e = toCniError(new DatastoreError(kind, 'etcd said no\nsecond line'));
    expect(e.code).toBe(code);
    expect(e.message).toContain(`datastore ${kind}: etcd said no`);
    expect(e.message).not.toContain('second line');
  });
  it('says "try again later" for an unavailable datastore', () => {
    expect(toCniError(new DatastoreError('Unavailable', 'connect ECONNREFUSED 127.0.0.1:2379')).message).toContain(
      'try again later',
    );
  });
  it('maps a NetlinkError-like object to 101 naming op and subject', () => {
    const nl = Object.assign(new Error('File exists (extack: route already present)'), {
      name: 'NetlinkError',
      code: 'EEXIST',
      errno: 17,
      op: 'RTM_NEWROUTE',
      subject: '10.0.0.5/32',
    });
    const e = toCniError(nl);
    expect(e.code).toBe(101);
    expect(e.message).toBe(
      'netlink RTM_NEWROUTE 10.0.0.5/32 failed: EEXIST: File exists (extack: route already present)',
    );
    expect(e.details).toBe('errno 17');
  });
  it('maps a Node system error to 5', () => {
    const sys = Object.assign(new Error("EACCES: permission denied, open '/etc/x'"), {
      code: 'EACCES',
      syscall: 'open',
      path: '/etc/x',
    });
    const e = toCniError(sys);
    expect(e.code).toBe(5);
    expect(e.message).toBe('I/O failure: open /etc/x: EACCES');
  });
  it('maps anything else to 999 internal error with one line and flags it for stack logging', () => {
    const e = toCniError(new TypeError("Cannot read properties of undefined (reading 'x')\n    at foo (bar.js:1:1)"));
    expect(e.code).toBe(999);
    expect(e.message).toBe("internal error: Cannot read properties of undefined (reading 'x')");
    expect(e.internal).toBe(true);
    expect(toCniError('boom').message).toBe('internal error: boom');
  });
});

describe('errorResult', () => {
  it('has the CNI error shape', () => {
    expect(errorResult('1.0.0', new CniError(7, 'msg', 'det'))).toEqual({
      cniVersion: '1.0.0',
      code: 7,
      msg: 'msg',
      details: 'det',
    });
    expect(errorResult('0.3.1', new CniError(4, 'm'))).toEqual({ cniVersion: '0.3.1', code: 4, msg: 'm' });
  });
});
