// The dispatcher over injected IO, with a small recording plugin: the handlers
// are the seam under test's consumers, the dispatcher is the real code.
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { MAX_NESTING, MAX_STDIN, dispatch, validAttachments } from '../../src/cni/dispatch.js';
import {
  SUPPORTED_VERSIONS,
  type CniContext,
  type CniHandlers,
  type CniResult,
  type PluginSpec,
} from '../../src/cni/types.js';
import { parseNetconf, type Netconf } from '../../src/config/netconf.js';
import { createPluginRuntime, type PluginRuntime } from '../../src/plugins/main/runtime.js';
import { CniError, DatastoreError } from '../../src/errors.js';

const tmp = mkdtempSync(join(tmpdir(), `cni-dispatch-${process.pid}-`));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

const RESULT: CniResult = {
  interfaces: [{ name: 'eth0', mac: '02:00:00:00:00:01', mtu: 1450, sandbox: '/var/run/netns/t' }],
  ips: [{ address: '10.0.0.5/32', gateway: '169.254.1.1', interface: 0 }],
  routes: [{ dst: '0.0.0.0/0', gw: '169.254.1.1', table: 254 }],
};

function recorder(
  behaviour: Partial<
    Record<'add' | 'del' | 'check' | 'status' | 'gc', (ctx: CniContext<Netconf>) => Promise<unknown>>
  > = {},
) {
  const calls: Array<{ cmd: string; ctx: CniContext<Netconf> }> = [];
  let loads = 0;
  const h = (cmd: 'add' | 'del' | 'check' | 'status' | 'gc') => async (ctx: CniContext<Netconf>) => {
    calls.push({ cmd, ctx });
    return (await behaviour[cmd]?.(ctx)) ?? (cmd === 'add' ? RESULT : undefined);
  };
  const handlers: CniHandlers<Netconf> = {
    parse: (raw) => parseNetconf(raw, { pluginType: 'netplugin' }),
    add: h('add') as CniHandlers<Netconf>['add'],
    del: h('del') as CniHandlers<Netconf>['del'],
    check: h('check') as CniHandlers<Netconf>['check'],
    status: h('status') as CniHandlers<Netconf>['status'],
    gc: h('gc') as CniHandlers<Netconf>['gc'],
  };
  const plugin: PluginSpec<Netconf> = {
    name: 'netplugin',
    load: async () => {
      loads++;
      return handlers;
    },
  };
  return { plugin, calls, loads: () => loads };
}

async function run(plugin: PluginSpec<Netconf>, env: Record<string, string | undefined>, stdin: unknown) {
  let stdout = '';
  let stderr = '';
  const code = await dispatch(
    {
      env,
      stdin: typeof stdin === 'string' ? stdin : stdin === undefined ? '' : JSON.stringify(stdin),
      stdout: (s) => (stdout += s),
      stderr: (s) => (stderr += s),
    },
    plugin,
  );
  return { code, stdout, stderr, json: stdout.trim() ? JSON.parse(stdout) : undefined };
}

const conf = (v: string, extra: Record<string, unknown> = {}) => ({
  cniVersion: v,
  name: 'net1',
  type: 'netplugin',
  ipam: { type: 'netplugin-ipam' },
  ...extra,
});
const ENV = {
  CNI_COMMAND: 'ADD',
  CNI_CONTAINERID: 'c0ffee',
  CNI_NETNS: '/var/run/netns/t',
  CNI_IFNAME: 'eth0',
  CNI_PATH: '/opt/cni/bin',
  CNI_ARGS: 'IgnoreUnknown=1;K8S_POD_NAMESPACE=ns1;K8S_POD_NAME=pod1',
};

describe('VERSION', () => {
  it.each(SUPPORTED_VERSIONS)('answers in %s without loading handlers', async (v) => {
    const r = recorder();
    const out = await run(r.plugin, { CNI_COMMAND: 'VERSION' }, { cniVersion: v });
    expect(out.code).toBe(0);
    expect(out.json).toEqual({ cniVersion: v, supportedVersions: [...SUPPORTED_VERSIONS] });
    expect(r.loads()).toBe(0);
  });
  it('works with empty stdin', async () => {
    const out = await run(recorder().plugin, { CNI_COMMAND: 'VERSION' }, '');
    expect(out).toMatchObject({ code: 0, json: { cniVersion: '1.1.0', supportedVersions: [...SUPPORTED_VERSIONS] } });
  });
  it('answers a newer runtime in our newest version', async () => {
    expect((await run(recorder().plugin, { CNI_COMMAND: 'VERSION' }, { cniVersion: '1.2.0' })).json.cniVersion).toBe(
      '1.1.0',
    );
  });
  it('honours cniVersions', async () => {
    expect(
      (await run(recorder().plugin, { CNI_COMMAND: 'VERSION' }, { cniVersions: ['0.4.0', '1.0.0'] })).json.cniVersion,
    ).toBe('1.0.0');
  });
  it('refuses 0.2.0 with code 1', async () => {
    const out = await run(recorder().plugin, { CNI_COMMAND: 'VERSION' }, { cniVersion: '0.2.0' });
    expect(out.code).toBe(1);
    expect(out.json).toMatchObject({ cniVersion: '0.2.0', code: 1 });
    expect(out.json.msg).toContain('"0.2.0"');
    expect(out.json.msg).toContain('0.3.0, 0.3.1, 0.4.0, 1.0.0, 1.1.0');
  });
});

describe('ADD', () => {
  it.each(SUPPORTED_VERSIONS)('%s: builds the context and prints the result in that version', async (v) => {
    const r = recorder();
    const out = await run(r.plugin, ENV, conf(v));
    expect(out.code).toBe(0);
    expect(out.json.cniVersion).toBe(v);
    expect(out.json.ips[0].address).toBe('10.0.0.5/32');
    expect('version' in out.json.ips[0]).toBe(v.startsWith('0.'));
    expect('mtu' in out.json.interfaces[0]).toBe(v === '1.1.0');
    const ctx = r.calls[0]!.ctx;
    expect(ctx).toMatchObject({
      command: 'ADD',
      cniVersion: v,
      containerId: 'c0ffee',
      netns: '/var/run/netns/t',
      ifname: 'eth0',
      path: ['/opt/cni/bin'],
      args: { K8S_POD_NAMESPACE: 'ns1', K8S_POD_NAME: 'pod1' },
    });
    expect(ctx.conf.num_queues).toBe(1);
    expect(ctx.rawConf).toEqual(conf(v));
    expect(ctx.prevResult).toBeUndefined();
  });
  it('converts prevResult of an older version for a chained call', async () => {
    const r = recorder();
    const prev = {
      cniVersion: '0.3.1',
      interfaces: [{ name: 'eth0' }],
      ips: [{ version: '4', address: '10.1.0.2/24', interface: 0 }],
    };
    const out = await run(r.plugin, ENV, conf('1.0.0', { prevResult: prev }));
    expect(out.code).toBe(0);
    expect(r.calls[0]!.ctx.prevResult).toEqual({
      interfaces: [{ name: 'eth0' }],
      ips: [{ address: '10.1.0.2/24', interface: 0 }],
    });
  });
  it('reports a bad prevResult as code 7 naming the field', async () => {
    const out = await run(
      recorder().plugin,
      ENV,
      conf('1.0.0', { prevResult: { cniVersion: '1.0.0', ips: [{ address: 'nope' }] } }),
    );
    expect(out.json).toMatchObject({ code: 7 });
    expect(out.json.msg).toContain('prevResult.ips[0].address');
  });
  it('reports netconf errors as code 7 (after env checks)', async () => {
    const out = await run(recorder().plugin, ENV, conf('1.0.0', { num_queues: 0 }));
    expect(out.code).toBe(1);
    expect(out.json).toMatchObject({ cniVersion: '1.0.0', code: 7 });
    expect(out.json.msg).toContain('num_queues: got number 0');
  });
});

describe('runtime', () => {
  it("hands every handler the spec's runtime as ctx.runtime (one object per process, not per call)", async () => {
    const rt = createPluginRuntime();
    const seen: PluginRuntime[] = [];
    const record = async (ctx: CniContext<Netconf, PluginRuntime>) => void seen.push(ctx.runtime);
    const handlers: CniHandlers<Netconf, PluginRuntime> = {
      parse: (raw) => parseNetconf(raw, { pluginType: 'netplugin' }),
      add: async (ctx) => (seen.push(ctx.runtime), RESULT),
      del: record,
      check: record,
      status: record,
      gc: record,
    };
    const plugin: PluginSpec<Netconf, PluginRuntime> = { name: 'netplugin', load: async () => handlers, runtime: rt };
    for (const cmd of ['ADD', 'DEL']) {
      let stdout = '';
      const code = await dispatch(
        {
          env: { ...ENV, CNI_COMMAND: cmd },
          stdin: JSON.stringify(conf('1.0.0')),
          stdout: (s) => (stdout += s),
          stderr: () => undefined,
        },
        plugin,
      );
      expect(code, stdout).toBe(0);
    }
    expect(seen).toHaveLength(2);
    expect(seen[0]).toBe(rt);
    expect(seen[1]).toBe(rt);
  });
});

describe('env and input errors', () => {
  it('bad env is code 4 naming each variable, in the conf version', async () => {
    const out = await run(recorder().plugin, { CNI_COMMAND: 'ADD', CNI_IFNAME: 'x'.repeat(20) }, conf('0.4.0'));
    expect(out.json).toMatchObject({ cniVersion: '0.4.0', code: 4 });
    for (const v of ['CNI_CONTAINERID', 'CNI_NETNS', 'CNI_IFNAME']) expect(out.json.msg).toContain(v);
  });
  it('missing CNI_COMMAND is code 4', async () => {
    expect((await run(recorder().plugin, {}, conf('1.0.0'))).json).toMatchObject({
      code: 4,
      msg: expect.stringContaining('CNI_COMMAND'),
    });
  });
  it('invalid JSON is code 6', async () => {
    const out = await run(recorder().plugin, ENV, '{"cniVersion": ');
    expect(out.json).toMatchObject({ code: 6 });
    expect(out.json.msg).toContain('not valid JSON');
  });
  it('a JSON array is code 6', async () => {
    expect((await run(recorder().plugin, ENV, '[1]')).json).toMatchObject({ code: 6 });
  });
  it('empty stdin for ADD is code 6', async () => {
    expect((await run(recorder().plugin, ENV, '')).json).toMatchObject({
      code: 6,
      msg: expect.stringContaining('no network configuration'),
    });
  });
  it('unsupported cniVersion is code 1', async () => {
    const out = await run(recorder().plugin, ENV, conf('0.2.0'));
    expect(out.json).toMatchObject({ cniVersion: '0.2.0', code: 1 });
  });
});

describe('CHECK, STATUS, GC gating and calls', () => {
  const envFor = (cmd: string) =>
    cmd === 'STATUS'
      ? { CNI_COMMAND: cmd }
      : cmd === 'GC'
        ? { CNI_COMMAND: cmd, CNI_PATH: '/opt/cni/bin' }
        : { ...ENV, CNI_COMMAND: cmd };
  for (const cmd of ['CHECK', 'STATUS', 'GC'] as const) {
    for (const v of SUPPORTED_VERSIONS) {
      const allowed = cmd === 'CHECK' ? v >= '0.4.0' : v === '1.1.0';
      it(`${cmd} at ${v}: ${allowed ? 'runs the handler, prints nothing' : 'code 1'}`, async () => {
        const r = recorder();
        const out = await run(
          r.plugin,
          envFor(cmd),
          conf(v, cmd === 'CHECK' ? { prevResult: { cniVersion: v, ips: [{ address: '10.0.0.5/32' }] } } : {}),
        );
        if (allowed) {
          expect(out.code).toBe(0);
          expect(out.stdout).toBe('');
          expect(r.calls.map((c) => c.cmd)).toEqual([cmd.toLowerCase()]);
        } else {
          expect(out.code).toBe(1);
          expect(out.json).toMatchObject({
            cniVersion: v,
            code: 1,
            msg: expect.stringContaining(`does not allow ${cmd}`),
          });
          expect(r.calls).toEqual([]);
        }
      });
    }
  }
  it('STATUS not ready is code 50 from the handler', async () => {
    const r = recorder({
      status: async () => {
        throw new CniError(50, 'datastore not reachable');
      },
    });
    const out = await run(r.plugin, { CNI_COMMAND: 'STATUS' }, conf('1.1.0'));
    expect(out.json).toEqual({ cniVersion: '1.1.0', code: 50, msg: 'datastore not reachable' });
  });
  it('GC hands over the valid attachments', async () => {
    let seen: unknown;
    const r = recorder({
      gc: async (ctx) => {
        seen = validAttachments(ctx.rawConf);
      },
    });
    const list = [{ containerID: 'a1', ifname: 'eth0' }];
    const out = await run(
      r.plugin,
      { CNI_COMMAND: 'GC', CNI_PATH: '/opt/cni/bin' },
      conf('1.1.0', { 'cni.dev/valid-attachments': list }),
    );
    expect(out.code).toBe(0);
    expect(seen).toEqual(list);
  });
  it('DEL without netns reaches the handler with netns ""', async () => {
    const r = recorder();
    const out = await run(r.plugin, { ...ENV, CNI_COMMAND: 'DEL', CNI_NETNS: undefined }, conf('1.0.0'));
    expect(out.code).toBe(0);
    expect(r.calls[0]!.ctx.netns).toBe('');
  });
});

describe('validAttachments', () => {
  it('reads the older cni.dev/attachments spelling too', () => {
    expect(validAttachments({ 'cni.dev/attachments': [{ containerID: 'x', ifname: 'eth0' }] })).toEqual([
      { containerID: 'x', ifname: 'eth0' },
    ]);
    expect(validAttachments({})).toEqual([]);
  });
  it('rejects malformed entries with code 7', () => {
    expect(() => validAttachments({ 'cni.dev/valid-attachments': [{ containerID: 1 }] })).toThrow(
      /cni.dev\/valid-attachments\[0\]/,
    );
  });
});

describe('handler failures', () => {
  it('a datastore outage is code 11', async () => {
    const r = recorder({
      add: async () => {
        throw new DatastoreError('Unavailable', 'etcd: context deadline exceeded');
      },
    });
    const out = await run(r.plugin, ENV, conf('1.0.0'));
    expect(out.json).toMatchObject({ code: 11, msg: expect.stringContaining('try again later') });
  });
  it('an unexpected exception is code 999, one line on stdout, stack on stderr only', async () => {
    const r = recorder({
      add: async () => {
        throw new Error('kaboom\nmore detail');
      },
    });
    const out = await run(r.plugin, ENV, conf('1.0.0'));
    expect(out.code).toBe(1);
    expect(out.json).toEqual({ cniVersion: '1.0.0', code: 999, msg: 'internal error: kaboom' });
    expect(out.stdout).not.toContain('    at ');
    expect(out.stderr).toContain('    at ');
    expect(out.stderr).toContain('cid=c0ffee pod=ns1/pod1');
  });
  it('writes the log file named by the netconf, closed afterwards', async () => {
    const file = join(tmp, 'sub', 'cni.log');
    const r = recorder({
      add: async (ctx) => {
        ctx.log.info('hello from add', { token: 's3cr3t' });
      },
    });
    await run(r.plugin, ENV, conf('1.0.0', { log_file_path: file, log_level: 'debug' }));
    const text = readFileSync(file, 'utf8');
    expect(text).toContain('hello from add token=[REDACTED]');
    expect(text).not.toContain('s3cr3t');
    expect(text).toContain('DEBUG');
  });
});

// Issue 11, finding 8: stdin is bounded, must be UTF-8, and may not nest
// without limit; each is a clean code-6 error, never a 999 with a stack.
describe('stdin hardening (code 6)', () => {
  const realPlugin: PluginSpec<Netconf, PluginRuntime> = {
    name: 'netplugin',
    load: async () => (await import('../../src/plugins/main/index.js')).handlers,
    runtime: createPluginRuntime(),
  };
  async function runBuf(stdin: Buffer | string) {
    let stdout = '';
    let stderr = '';
    const code = await dispatch(
      { env: ENV, stdin, stdout: (s) => (stdout += s), stderr: (s) => (stderr += s) },
      realPlugin,
    );
    return { code, json: JSON.parse(stdout), stderr };
  }
  it('more than 1 MiB', async () => {
    const r = await runBuf(JSON.stringify(conf('1.0.0', { pad: 'x'.repeat(MAX_STDIN) })));
    expect(r.json).toMatchObject({ code: 6 });
    expect(r.json.msg).toContain(`larger than ${MAX_STDIN} bytes`);
  });
  it('invalid UTF-8 is refused, not silently replaced', async () => {
    const bytes = Buffer.concat([
      Buffer.from(JSON.stringify(conf('1.0.0')).slice(0, -1) + ',"x":"'),
      Buffer.from([0xc3, 0x28]),
      Buffer.from('"}'),
    ]);
    const r = await runBuf(bytes);
    expect(r.json).toMatchObject({ code: 6 });
    expect(r.json.msg).toContain('not valid UTF-8');
  });
  it('deep nesting inside a delegated ipam', async () => {
    const deep = '['.repeat(20000) + ']'.repeat(20000);
    const text = JSON.stringify(conf('1.0.0', { ipam: { type: 'host-local', ranges: '@' } })).replace('"@"', deep);
    const r = await runBuf(text);
    expect(r.json).toMatchObject({ code: 6 });
    expect(r.json.msg).toContain(`deeper than ${MAX_NESTING} levels`);
    expect(r.stderr).not.toMatch(/\n\s+at /);
  });
  it('ordinary nesting and multi-byte UTF-8 still parse', async () => {
    const r = await runBuf(
      Buffer.from(
        JSON.stringify(
          conf('1.0.0', { ipam: { type: 'host-local', ranges: [[{ subnet: '10.1.0.0/16' }]], note: 'größe ✓' } }),
        ),
      ),
    );
    expect(r.json.msg ?? '').not.toMatch(/UTF-8|nests deeper/);
  });
});

describe('a resident plugin (the agent)', () => {
  function counting(resident: boolean) {
    const r = recorder();
    let parses = 0;
    const plugin: PluginSpec<Netconf> = {
      ...r.plugin,
      resident,
      load: async () => {
        const h = await r.plugin.load();
        return { ...h, parse: (raw, cmd) => (parses++, h.parse(raw, cmd)) };
      },
    };
    return { plugin, calls: r.calls, parses: () => parses };
  }

  it('parses each distinct netconf once and hands later requests the same frozen one', async () => {
    const p = counting(true);
    const stdin = JSON.stringify(conf('1.0.0'));
    expect((await run(p.plugin, ENV, stdin)).code).toBe(0);
    expect((await run(p.plugin, { ...ENV, CNI_CONTAINERID: 'c2' }, stdin)).code).toBe(0);
    expect(p.parses()).toBe(1);
    const [a, b] = p.calls.map((c) => c.ctx);
    expect(b!.conf).toBe(a!.conf);
    expect(Object.isFrozen(a!.conf)).toBe(true);
    expect(Object.isFrozen(a!.rawConf['ipam'])).toBe(true);
    // Another command, or other bytes on stdin, is parsed on its own.
    expect((await run(p.plugin, { ...ENV, CNI_COMMAND: 'DEL' }, stdin)).code).toBe(0);
    expect((await run(p.plugin, ENV, JSON.stringify(conf('1.0.0', { mtu: 1400 })))).code).toBe(0);
    expect(p.parses()).toBe(3);
    expect(p.calls[3]!.ctx.conf.mtu).toBe(1400);
  });

  it('keeps no invalid netconf: every request with it fails with its error', async () => {
    const p = counting(true);
    const bad = JSON.stringify(conf('1.0.0', { mtu: 'big' }));
    for (let i = 0; i < 2; i++) {
      const r = await run(p.plugin, ENV, bad);
      expect(r.code).toBe(1);
      expect(r.json.code).toBe(7);
    }
    expect(p.parses()).toBe(2);
  });

  it('a per-exec plugin parses every time and gets objects of its own', async () => {
    const p = counting(false);
    const stdin = JSON.stringify(conf('1.0.0'));
    await run(p.plugin, ENV, stdin);
    await run(p.plugin, ENV, stdin);
    expect(p.parses()).toBe(2);
    expect(Object.isFrozen(p.calls[0]!.ctx.conf)).toBe(false);
  });
});
