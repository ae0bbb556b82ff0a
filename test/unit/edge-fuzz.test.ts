// Issue 11: random (seeded, so reproducible) inputs at the edge. Pod names,
// namespaces and delegated IPAM configurations either pass the documented
// rules or get a clean CNI error naming the field: never a crash, a 999 or a
// stack trace.
import { describe, expect, it } from 'vitest';
import { parseEnv } from '../../src/cni/env.js';
import { dispatch } from '../../src/cni/dispatch.js';
import { CniError } from '../../src/errors.js';
import { handlers } from '../../src/plugins/main/index.js';
import { createPluginRuntime } from '../../src/plugins/main/runtime.js';

/** mulberry32: a small deterministic PRNG. */
function prng(seed: number): () => number {
  return () => {
    seed = (seed + 0x6d2b79f5) | 0;
    let t = seed;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const ALPHABET = [
  'a',
  'z',
  '0',
  '9',
  '-',
  '.',
  '/',
  '\n',
  '\r',
  ' ',
  'A',
  'Z',
  '_',
  '%',
  '..',
  'é',
  '\u0000',
  ';',
  '=',
  '\u202e',
];
function randomName(r: () => number): string {
  const len = r() < 0.05 ? 200 + Math.floor(r() * 200) : Math.floor(r() * 20);
  let s = '';
  for (let i = 0; i < len; i++) s += ALPHABET[Math.floor(r() * ALPHABET.length)]!;
  return s;
}

// The documented rule (docs/security.md), written out again here rather than imported.
const NAME = /^[A-Za-z0-9][A-Za-z0-9_.-]*$/;
const ENV = {
  CNI_COMMAND: 'ADD',
  CNI_CONTAINERID: 'abc123',
  CNI_NETNS: '/var/run/netns/x',
  CNI_IFNAME: 'eth0',
  CNI_PATH: '/opt/cni/bin',
};

describe('edge fuzz', () => {
  it('pod names and namespaces: accepted only when valid names, else code 4 naming the field', () => {
    const r = prng(11);
    for (let i = 0; i < 2000; i++) {
      const ns = r() < 0.3 ? 'default' : randomName(r);
      const name = r() < 0.3 ? 'web-0' : randomName(r);
      if (ns.includes(';') || name.includes(';')) continue; // the CNI_ARGS separator: another key
      try {
        const e = parseEnv({ ...ENV, CNI_ARGS: `K8S_POD_NAMESPACE=${ns};K8S_POD_NAME=${name}` });
        expect(NAME.test(e.args.K8S_POD_NAMESPACE ?? '') && ns.length <= 253, JSON.stringify(ns)).toBe(true);
        expect(NAME.test(e.args.K8S_POD_NAME ?? '') && name.length <= 253, JSON.stringify(name)).toBe(true);
      } catch (err) {
        expect(err).toBeInstanceOf(CniError);
        expect((err as CniError).code).toBe(4);
        expect((err as CniError).message).toMatch(/K8S_POD_NAMESPACE|K8S_POD_NAME|CNI_ARGS/);
      }
    }
  });

  it('delegated IPAM configurations of random shape and depth: a clean CNI error, never 999', async () => {
    const r = prng(7);
    const value = (depth: number): unknown => {
      const k = r();
      if (depth > 90 || k < 0.3) return [1, 'x', true, null, -1.5, '10.0.0.0/24', {}][Math.floor(r() * 7)];
      if (k < 0.6) return Array.from({ length: 1 + Math.floor(r() * 2) }, () => value(depth + 1));
      return Object.fromEntries(
        Array.from({ length: 1 + Math.floor(r() * 2) }, () => [
          ['ranges', 'subnet', 'type', 'routes', '__proto__', 'constructor'][Math.floor(r() * 6)]!,
          value(depth + 1),
        ]),
      );
    };
    const plugin = { name: 'netplugin', load: async () => handlers, runtime: createPluginRuntime() };
    for (let i = 0; i < 200; i++) {
      const ipam = { type: r() < 0.5 ? 'host-local' : 'netplugin-ipam', ...(value(0) as object) };
      let out = '';
      let err = '';
      const code = await dispatch(
        {
          env: { ...ENV, CNI_COMMAND: 'ADD', CNI_NETNS: '/var/run/netns/edge-fuzz-does-not-exist' },
          stdin: JSON.stringify({
            cniVersion: '1.0.0',
            name: 'n',
            type: 'netplugin',
            etcd_endpoints: 'http://127.0.0.1:1',
            nodename: 'n1',
            ipam,
          }),
          stdout: (s) => (out += s),
          stderr: (s) => (err += s),
        },
        plugin,
      );
      expect(code, out).toBe(1);
      const res = JSON.parse(out);
      expect(res.code, out).not.toBe(999);
      expect(typeof res.msg).toBe('string');
      expect(err).not.toMatch(/\n\s+at .*\.(ts|js|mjs):\d+/);
    }
  }, 120_000);
});
