// The shim <-> agent frames (src/agent/protocol.ts; layout in docs/agent.md).
// The native shim's side of the response is tested in test/integration/shim.test.ts.
import { describe, expect, it } from 'vitest';
import {
  MAX_RESPONSE,
  PROTOCOL_VERSION,
  ProtocolError,
  RESPONSE_HEADER_LEN,
  decodeResponse,
  encodeResponse,
} from '../../src/agent/protocol.js';

describe('response frame', () => {
  it('lays out magic, version, exit status, stdout length, stderr length, stdout, stderr', () => {
    const f = encodeResponse({ code: 7, stdout: 'out é', stderr: 'err' });
    const head = Buffer.alloc(RESPONSE_HEADER_LEN);
    head.write('NPR', 0, 'latin1');
    head[3] = PROTOCOL_VERSION;
    head[4] = 7;
    head.writeUInt32BE(6, 5); // 'out é' is 6 bytes of UTF-8
    head.writeUInt32BE(3, 9);
    expect(f).toEqual(Buffer.concat([head, Buffer.from('out é'), Buffer.from('err')]));
  });

  it('decodes what it encodes, leaving out an empty stderr', () => {
    expect(decodeResponse(encodeResponse({ code: 1, stdout: '{"code":11}\n', stderr: 'log\n' }))).toEqual({
      code: 1,
      stdout: '{"code":11}\n',
      stderr: 'log\n',
    });
    expect(decodeResponse(encodeResponse({ code: 0, stdout: '' }))).toEqual({ code: 0, stdout: '' });
  });

  for (const code of [-1, 256, 1.5, Number.NaN]) {
    it(`sends exit status ${code}, which no process can have, as 1`, () => {
      expect(encodeResponse({ code, stdout: '' })[4]).toBe(1);
    });
  }

  it('sends a lone surrogate as U+FFFD', () => {
    expect(decodeResponse(encodeResponse({ code: 0, stdout: 'a\ud800b' })).stdout).toBe('a\ufffdb');
  });

  it('refuses to frame more than the shim takes', () => {
    expect(() => encodeResponse({ code: 0, stdout: 'x'.repeat(MAX_RESPONSE), stderr: 'y' })).toThrow(
      new ProtocolError(`response of ${MAX_RESPONSE + 1} bytes exceeds the shim's ${MAX_RESPONSE}-byte limit`),
    );
  });

  const good = encodeResponse({ code: 0, stdout: '{}', stderr: 'e' });
  const patched = (i: number, v: number) => {
    const f = Buffer.from(good);
    f[i] = v;
    return f;
  };
  for (const [what, frame, msg] of [
    ['a wrong magic', patched(2, 0x43), 'not a netplugin agent response (bad magic)'],
    [
      'a wrong version',
      patched(3, PROTOCOL_VERSION + 1),
      `agent speaks protocol version ${PROTOCOL_VERSION + 1}, this side speaks ${PROTOCOL_VERSION}`,
    ],
    ['a short header', good.subarray(0, 12), 'response of 12 bytes is shorter than its 13-byte header'],
    [
      'a truncated body',
      good.subarray(0, good.length - 1),
      `response is truncated: ${good.length - 1} of ${good.length} bytes`,
    ],
    ['an oversized length', patched(5, 0xff), `exceeds the ${MAX_RESPONSE}-byte limit`],
  ] as const) {
    it(`rejects ${what}`, () => {
      expect(() => decodeResponse(frame)).toThrow(ProtocolError);
      expect(() => decodeResponse(frame)).toThrow(msg);
    });
  }
});
