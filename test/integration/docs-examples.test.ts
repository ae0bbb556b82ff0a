// The examples in README.md and docs/*.md, as a reader copies them:
// - every fenced json netconf, conflist and netconf fragment goes through the plugin's own netconf
//   parser (a fragment merged into a minimal netconf);
// - a readiness gate on the agent's health port is probed, with the plugin's gate code, on a real
//   agent: the path must be one the agent answers 2xx to;
// - the pod annotation examples go through the annotation parser, every key a known one;
// - fenced yaml resources (netplugin.org/v3) are applied with the built netpluginctl to a
//   throwaway etcd;
// - the documented netpluginctl commands that only read or write the datastore (datastore init,
//   apply, get, ipam show/check/release, version, installation render) run against that etcd
//   with the examples' files, and must succeed.
// Commands that install on the host (install-cni, uninstall-cni) or lock the datastore (migrate)
// are covered by their own suites.
import { copyFileSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseAllDocuments } from 'yaml';
import { parseNetconf } from '../../src/config/index.js';
import { DEFAULT_HEALTH_ADDR } from '../../src/agent/health.js';
import { parseWorkloadAnnotations } from '../../src/workload/annotations.js';
import { waitForReadinessGates } from '../../src/workload/readiness.js';
import { startEtcd, type EtcdServer } from '../support/etcd.js';
import { requireBuiltCtl, runBuiltCtl } from '../support/ctl.js';
import { startAgent, type Agent } from '../support/plugin-harness.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const PAGES = [
  'README.md',
  ...readdirSync(join(ROOT, 'docs'))
    .filter((f) => f.endsWith('.md'))
    .map((f) => `docs/${f}`),
];

interface Block {
  page: string;
  line: number;
  lang: string;
  text: string;
}

const BLOCKS: Block[] = PAGES.flatMap((page) => {
  const out: Block[] = [];
  const lines = readFileSync(join(ROOT, page), 'utf8').split('\n');
  for (let i = 0; i < lines.length; i++) {
    const m = /^```(\w+)\s*$/.exec(lines[i]!);
    if (!m) continue;
    const start = i;
    const body: string[] = [];
    for (i++; i < lines.length && !/^```\s*$/.test(lines[i]!); i++) body.push(lines[i]!);
    out.push({ page, line: start + 1, lang: m[1]!, text: body.join('\n') });
  }
  return out;
});
const at = (b: Block) => `${b.page}:${b.line}`;

const BASE = {
  name: 'k8s-pod-network',
  cniVersion: '1.0.0',
  type: 'netplugin',
  etcd_endpoints: 'http://127.0.0.1:2379',
  ipam: { type: 'netplugin-ipam' },
};

/** The netconfs a json block documents: whole ones, a conflist's netplugin entries, or a fragment merged into BASE. */
function netconfsOf(b: Block): Array<Record<string, unknown>> {
  let v: unknown;
  try {
    v = JSON.parse(b.text);
  } catch {
    try {
      v = { ...BASE, ...(JSON.parse(`{${b.text.trim().replace(/,\s*$/, '')}}`) as object) };
    } catch {
      return [];
    }
  }
  const o = v as Record<string, any>;
  if (Array.isArray(o.plugins))
    return o.plugins
      .filter((p: any) => p.type === 'netplugin')
      .map((p: any) => ({ name: o.name, cniVersion: o.cniVersion, ...p }));
  return o.type === 'netplugin' ? [o] : [];
}

describe('netconf examples', () => {
  const netconfs = BLOCKS.filter((b) => b.lang === 'json').flatMap((b) => netconfsOf(b).map((n) => ({ b, n })));

  it('finds the documented netconfs (whole, conflists and fragments)', () => {
    expect(netconfs.length).toBeGreaterThanOrEqual(8);
    expect(new Set(netconfs.map(({ b }) => b.page))).toEqual(
      new Set([
        'README.md',
        'docs/addresses-and-annotations.md',
        'docs/datastore.md',
        'docs/install.md',
        'docs/netconf.md',
      ]),
    );
  });

  it('the plugin accepts every one', () => {
    for (const { b, n } of netconfs)
      expect(() => parseNetconf(n, { pluginType: 'netplugin', warn: () => undefined }), at(b)).not.toThrow();
  });

  describe('readiness gates on the agent port', () => {
    let agent: Agent;
    let tmp: string;
    let port: number;
    beforeAll(async () => {
      tmp = mkdtempSync(join(tmpdir(), `docs-examples-agent-${process.pid}-`));
      agent = await startAgent(join(tmp, 'cni.sock'), ['--log-format', 'json']);
      const deadline = Date.now() + 30_000;
      while (!/serving \/healthz/.test(agent.log()) && Date.now() < deadline)
        await new Promise((r) => setTimeout(r, 100));
      const line = agent
        .log()
        .split('\n')
        .find((l) => l.includes('serving /healthz'));
      if (!line) throw new Error(`the agent did not serve its health address:\n${agent.log()}`);
      port = Number((JSON.parse(line) as { addr: string }).addr.split(':').pop());
    });
    afterAll(async () => {
      await agent?.stop();
      if (tmp) rmSync(tmp, { recursive: true, force: true });
    });

    it("every gate on the agent's default health port names a path the agent answers 2xx to", async () => {
      const defaultPort = DEFAULT_HEALTH_ADDR.split(':').pop();
      const gates = netconfs.flatMap(({ b, n }) =>
        ((n.readiness_gates as string[] | undefined) ?? []).map((g) => ({ b, url: new URL(g) })),
      );
      const onAgent = gates.filter(({ url }) => url.port === defaultPort);
      expect(onAgent.length).toBeGreaterThanOrEqual(2);
      for (const { b, url } of onAgent) {
        url.port = String(port);
        await expect(
          waitForReadinessGates([url], { deadlineMs: 3000 }),
          `${at(b)}: ${url.pathname}`,
        ).resolves.toBeUndefined();
      }
    });
  });
});

describe('pod annotation examples', () => {
  it('every cni.netplugin.org annotation in a yaml example parses, and each key is one the plugin reads', () => {
    let seen = 0;
    for (const b of BLOCKS.filter((b) => b.lang === 'yaml')) {
      for (const d of parseAllDocuments(b.text)) {
        const ann = ((d.toJS() as any)?.metadata?.annotations ?? {}) as Record<string, string>;
        const ours = Object.fromEntries(Object.entries(ann).filter(([k]) => k.startsWith('cni.netplugin.org/')));
        if (!Object.keys(ours).length) continue;
        const opts = parseWorkloadAnnotations(ours, {});
        const read = Object.values(opts.source).map((s) => s!.key);
        expect(read.sort(), `${at(b)}: annotations the plugin does not read`).toEqual(Object.keys(ours).sort());
        seen++;
      }
    }
    expect(seen).toBeGreaterThanOrEqual(5);
  });
});

describe('resources and netpluginctl commands against a throwaway etcd', () => {
  let etcd: EtcdServer;
  let dir: string;
  let env: Record<string, string>;
  beforeAll(async () => {
    requireBuiltCtl();
    etcd = await startEtcd();
    dir = mkdtempSync(join(tmpdir(), `docs-examples-${process.pid}-`));
    env = { ETCD_ENDPOINTS: etcd.endpoint, DATASTORE_TYPE: 'etcdv3' };
    // The files the commands name: the README's pool as pools.yaml, the shipped Installation, a conflist.
    const pool = BLOCKS.find((b) => b.page === 'README.md' && b.lang === 'yaml' && /kind: IPPool/.test(b.text))!;
    writeFileSync(join(dir, 'pools.yaml'), pool.text + '\n');
    mkdirSync(join(dir, 'deploy'));
    copyFileSync(join(ROOT, 'deploy/installation-example.yaml'), join(dir, 'deploy/installation-example.yaml'));
    writeFileSync(
      join(dir, '10-netplugin.conflist'),
      JSON.stringify({
        name: 'k8s-pod-network',
        cniVersion: '1.0.0',
        plugins: [{ ...BASE, etcd_endpoints: etcd.endpoint }],
      }),
    );
  });
  afterAll(async () => {
    await etcd?.stop();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('netpluginctl applies every netplugin.org/v3 resource in a yaml example', async () => {
    const docs = BLOCKS.filter((b) => b.lang === 'yaml').flatMap((b) =>
      parseAllDocuments(b.text)
        .map((d) => ({ b, o: d.toJS() as any }))
        .filter(({ o }) => o?.apiVersion === 'netplugin.org/v3' && o.kind !== 'NetpluginAPIConfig'),
    );
    expect(new Set(docs.map(({ o }) => o.kind))).toEqual(
      new Set([
        'IPPool',
        'IPAMConfig',
        'KubeControllersConfiguration',
        'NetworkPolicy',
        'BGPConfiguration',
        'BGPPeer',
        'StagedNetworkPolicy',
        'StagedGlobalNetworkPolicy',
        'StagedKubernetesNetworkPolicy',
        'HostEndpoint',
        'AgentConfiguration',
      ]),
    );
    for (const { b, o } of docs) {
      const r = await runBuiltCtl(['apply', '-f', '-'], { env, input: JSON.stringify(o), cwd: dir });
      expect(r.code, `${at(b)} ${o.kind}/${o.metadata?.name}: ${r.err}`).toBe(0);
    }
  });

  it('the documented datastore commands run as written', async () => {
    const runnable =
      /^netpluginctl (?:--config \S+ )?(?:datastore init|apply|get|ipam (?:show|check|release)|version|installation render)\b/;
    const commands: Array<{ b: Block; cmd: string }> = [];
    for (const b of BLOCKS.filter((b) => ['sh', 'bash', 'console'].includes(b.lang))) {
      const joined = b.text.replace(/\\\n\s*/g, ' ');
      for (let l of joined.split('\n')) {
        l = l
          .replace(/\s+#.*$/, '')
          .replace(/^sudo\s+/, '')
          .trim();
        if (runnable.test(l)) commands.push({ b, cmd: l });
      }
    }
    expect(commands.length).toBeGreaterThanOrEqual(12);
    for (const { b, cmd } of commands) {
      const args = cmd
        .split(/\s+/)
        .slice(1)
        .map((a) =>
          a === '/etc/cni/net.d/10-netplugin.conflist'
            ? join(dir, '10-netplugin.conflist')
            : a.startsWith('/tmp/')
              ? join(dir, a.slice(5))
              : a,
        );
      // --config names the datastore itself; otherwise the environment does.
      const r = await runBuiltCtl(args, { env: args[0] === '--config' ? {} : env, cwd: dir });
      expect(r.code, `${at(b)}: ${cmd}\n${r.out}${r.err}`).toBe(0);
    }
  });
});
