// Host endpoints: validation of the fields (GlobalNetworkPolicy's host
// endpoint flags, HostEndpoint, AgentConfiguration) on the way in and in the
// CRDs, the merged agent settings, and the compiled nftables content (which
// chains a host endpoint gets and what the dispatch chains hold).
import { describe, expect, it } from 'vitest';
import { MemoryDatastore } from '../../src/datastore/memory.js';
import { runCtl } from '../../src/ctl/index.js';
import { crdFor } from '../../src/datastore/crds.js';
import { resourceProblem } from '../../src/datastore/schemas.js';
import { API_VERSION } from '../../src/model/resources.js';
import { agentSettings, DEFAULT_FAILSAFE_INBOUND } from '../../src/model/agent-config.js';
import { PolicyCompiler, type CompileInput, type HostInput } from '../../src/agent/policy/compile.js';
import { renderRule } from '../../src/dataplane/nft/render.js';
import { fullScript } from '../../src/agent/policy/nft-script.js';
import type { PolicyInput } from '../../src/model/policy-eval.js';

async function ctl(argv: string[], stdin: string): Promise<{ code: number; out: string; err: string }> {
  let out = '';
  let err = '';
  const ds = new MemoryDatastore();
  const code = await runCtl(argv, {
    env: { ETCD_ENDPOINTS: 'http://127.0.0.1:2379' },
    stdin,
    stdout: (s) => (out += s),
    stderr: (s) => (err += s),
    openDatastore: async () => ds,
  });
  return { code, out, err };
}
const doc = (kind: string, name: string, spec: unknown) =>
  JSON.stringify({ apiVersion: API_VERSION, kind, metadata: { name }, spec });

describe('host endpoint validation', () => {
  it.each([
    [
      'preDNAT without applyOnForward',
      { preDNAT: true, ingress: [] },
      /spec\.applyOnForward: must be true with preDNAT/,
    ],
    ['doNotTrack without applyOnForward', { doNotTrack: true }, /spec\.applyOnForward: must be true with doNotTrack/],
    [
      'preDNAT and doNotTrack',
      { preDNAT: true, doNotTrack: true, applyOnForward: true },
      /spec\.preDNAT: preDNAT and doNotTrack cannot both be true/,
    ],
    [
      'preDNAT with egress rules',
      { preDNAT: true, applyOnForward: true, egress: [{ action: 'Allow' }] },
      /spec\.egress: a preDNAT policy has ingress rules only/,
    ],
    [
      'preDNAT with types Egress',
      { preDNAT: true, applyOnForward: true, types: ['Egress'] },
      /spec\.types: a preDNAT policy has ingress rules only/,
    ],
  ])('refuses a GlobalNetworkPolicy with %s, naming the field', async (_what, spec, msg) => {
    const r = await ctl(['apply', '-f', '-'], doc('GlobalNetworkPolicy', 'p', spec));
    expect(r.code).toBe(1);
    expect(r.err).toMatch(msg);
  });

  it('takes valid host endpoint policies and the CRD carries the same rules', async () => {
    for (const spec of [
      { applyOnForward: true },
      { preDNAT: true, applyOnForward: true, ingress: [{ action: 'Deny' }] },
      { doNotTrack: true, applyOnForward: true },
    ]) {
      const r = await ctl(['apply', '-f', '-'], doc('GlobalNetworkPolicy', 'p', spec));
      expect(r.code, r.err).toBe(0);
    }
    const text = JSON.stringify(crdFor('GlobalNetworkPolicy'));
    for (const m of [
      'spec.applyOnForward: must be true with preDNAT',
      'spec.preDNAT: preDNAT and doNotTrack',
      'spec.egress: a preDNAT policy',
    ])
      expect(text).toContain(m);
  });

  it('refuses hostile interface names and addresses of a HostEndpoint', () => {
    const hep = (spec: unknown) => ({ apiVersion: API_VERSION, kind: 'HostEndpoint', metadata: { name: 'h' }, spec });
    expect(
      resourceProblem('HostEndpoint', hep({ node: 'a', interfaceName: 'eth0', expectedIPs: ['10.0.0.1'] })),
    ).toBeUndefined();
    expect(resourceProblem('HostEndpoint', hep({ node: 'a', interfaceName: '*' }))).toBeUndefined();
    expect(resourceProblem('HostEndpoint', hep({ node: 'a', interfaceName: 'eth0" accept; #' }))).toMatch(
      /interfaceName: expected an interface name/,
    );
    expect(resourceProblem('HostEndpoint', hep({ node: 'a', interfaceName: 'averyveryverylongname' }))).toMatch(
      /interfaceName/,
    );
    expect(resourceProblem('HostEndpoint', hep({ node: 'a', expectedIPs: ['10.0.0.0/8'] }))).toMatch(
      /expectedIPs\.0: expected an IP address/,
    );
  });

  it('AgentConfiguration: names, fields, all the CLI names of the kind', async () => {
    expect((await ctl(['apply', '-f', '-'], doc('AgentConfiguration', 'rack1', {}))).err).toMatch(
      /metadata\.name: AgentConfiguration name "rack1" is invalid: use "default" or "node.<node name>"/,
    );
    const bad = await ctl(
      ['apply', '-f', '-'],
      doc('AgentConfiguration', 'default', {
        failsafeInboundHostPorts: [{ protocol: 'ICMP', port: 70000 }],
        defaultEndpointToHostAction: 'Reject',
        flowLogsAggregator: 'http://x',
        flowLogsFlushInterval: 'soon',
      }),
    );
    expect(bad.code).toBe(1);
    for (const f of [
      'failsafeInboundHostPorts[0].protocol',
      'failsafeInboundHostPorts[0].port',
      'defaultEndpointToHostAction',
      'flowLogsAggregator',
      'flowLogsFlushInterval',
    ])
      expect(bad.err).toContain(`spec.${f}: `);
    const ds = new MemoryDatastore();
    const run = async (argv: string[], stdin = '') => {
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
    };
    const ok = await run(
      ['apply', '-f', '-'],
      doc('AgentConfiguration', 'node.n1', {
        failsafeInboundHostPorts: [{ protocol: 'TCP', port: 22, net: '10.0.0.0/8' }],
        defaultEndpointToHostAction: 'Drop',
        flowLogsAggregator: 'https://flows:7443',
        flowLogsFlushInterval: '30s',
      }),
    );
    expect(ok.code, ok.err).toBe(0);
    for (const name of ['agentconfiguration', 'agentconfigurations', 'agentconfig', 'agentconfigs']) {
      const g = await run(['get', name, 'node.n1', '-o', 'json']);
      expect(g.code, g.err).toBe(0);
      expect(JSON.parse(g.out).spec.defaultEndpointToHostAction).toBe('Drop');
    }
  });

  it('merges node.<name> over default over the built-in defaults, field by field', () => {
    const c = (name: string, spec: object) => ({ metadata: { name }, spec });
    expect(agentSettings('n1', []).failsafeInbound).toEqual(DEFAULT_FAILSAFE_INBOUND);
    expect(agentSettings('n1', []).endpointToHost).toBe('Accept');
    expect(agentSettings('n1', []).flowLogsFlushInterval).toBe('15s');
    const s = agentSettings('n1', [
      c('default', { failsafeInboundHostPorts: [{ protocol: 'TCP', port: 1 }], defaultEndpointToHostAction: 'Drop' }),
      c('node.n1', { failsafeInboundHostPorts: [] }),
      c('node.n2', { defaultEndpointToHostAction: 'Return' }),
    ]);
    expect(s.failsafeInbound).toEqual([]);
    expect(s.endpointToHost).toBe('Drop');
    expect(
      agentSettings('n2', [c('default', { failsafeInboundHostPorts: [{ protocol: 'TCP', port: 1 }] })]).failsafeInbound,
    ).toEqual([{ protocol: 'TCP', port: 1 }]);
  });
});

describe('host endpoint chains', () => {
  const host = (over: Partial<HostInput> = {}): HostInput => ({
    endpoints: [
      {
        name: 'a-eth0',
        interfaceName: 'eth0',
        labels: { role: 'edge' },
        profiles: [],
        addrs: ['10.0.0.1'],
        local: true,
      },
    ],
    failsafeInbound: [...DEFAULT_FAILSAFE_INBOUND],
    failsafeOutbound: [],
    endpointToHost: 'Accept',
    podPrefixes: ['npi'],
    ...over,
  });
  const gnp = (name: string, spec: PolicyInput['spec']): PolicyInput => ({ kind: 'GlobalNetworkPolicy', name, spec });
  const compile = (input: Partial<CompileInput>) =>
    new PolicyCompiler().compile({ policies: [], profiles: new Map(), endpoints: [], ...input });
  const rules = (d: ReturnType<typeof compile>, chain: string) => (d.chains.get(chain)?.rules ?? []).map(renderRule);

  it('a host endpoint without policy or profile drops; failsafe ports come first; pods go to their node', () => {
    const d = compile({ host: host() });
    const hin = rules(d, 'host-in');
    expect(hin[0]).toBe('iifname "npi*" accept comment "pod to its node: defaultEndpointToHostAction Accept"');
    expect(
      hin.some((r) => r.startsWith('meta l4proto tcp th dport { 22, 179, 2379, 2380, 5473, 6443, 6666, 6667 } accept')),
    ).toBe(true);
    expect(hin.some((r) => r.startsWith('meta l4proto udp th dport { 68 } accept'))).toBe(true);
    const to = hin.find((r) => r.startsWith('iifname "eth0" goto '))!;
    const chain = to.split(' ')[3]!;
    expect(rules(d, chain).at(-1)).toMatch(
      /^counter drop comment "HostEndpoint a-eth0 ingress: end of profiles \(none\)"/,
    );
    // Forwarded traffic: no applyOnForward policy, accepted.
    const fin = rules(d, 'host-fwd-in');
    expect(fin.slice(0, 2)).toEqual([
      'meta mark and 0x04000000 != 0 accept comment "allowed by untracked policy"',
      'iifname "npi*" return comment "pod interface: no host endpoint"',
    ]);
    const fchain = fin.find((r) => r.startsWith('iifname "eth0" goto '))!.split(' ')[3]!;
    expect(rules(d, fchain)).toEqual([expect.stringMatching(/^accept comment ".*no policy decided: accept"/)]);
    expect(rules(d, 'host-pre')).toEqual([]);
    expect(rules(d, 'host-raw-in')).toEqual([]);
  });

  it('no host endpoint: the dispatch chains hold no failsafe or host endpoint rule; Drop still applies to pods', () => {
    const d = compile({ host: host({ endpoints: [], endpointToHost: 'Drop' }) });
    expect(rules(d, 'host-in')).toEqual([
      'iifname "npi*" counter drop comment "pod to its node: defaultEndpointToHostAction Drop"',
    ]);
    expect(rules(d, 'host-out')).toEqual([]);
    expect(compile({}).chains.has('host-in')).toBe(true);
  });

  it('an empty failsafe list turns failsafe off; a net limits a failsafe port', () => {
    expect(rules(compile({ host: host({ failsafeInbound: [] }) }), 'host-in').some((r) => r.includes('failsafe'))).toBe(
      false,
    );
    const d = compile({ host: host({ failsafeInbound: [{ protocol: 'TCP', port: 8080, net: '10.200.1.2/32' }] }) });
    expect(rules(d, 'host-in')).toContain(
      'meta l4proto tcp ip saddr { 10.200.1.2 } th dport { 8080 } accept comment "failsafe port"',
    );
  });

  it('policies by tier: normal, applyOnForward, preDNAT, doNotTrack (notrack and a mark)', () => {
    const d = compile({
      host: host(),
      policies: [
        gnp('normal', {
          selector: "role == 'edge'",
          ingress: [{ action: 'Allow', protocol: 'TCP', destination: { ports: [80] } }],
        }),
        gnp('fwd', { selector: "role == 'edge'", applyOnForward: true, ingress: [{ action: 'Deny' }] }),
        gnp('pre', {
          selector: "role == 'edge'",
          applyOnForward: true,
          preDNAT: true,
          ingress: [{ action: 'Deny', protocol: 'TCP', destination: { ports: [8888] } }],
        }),
        gnp('raw', {
          selector: "role == 'edge'",
          applyOnForward: true,
          doNotTrack: true,
          ingress: [{ action: 'Allow', protocol: 'UDP' }],
        }),
      ],
    });
    const goto = (dispatch: string) =>
      rules(d, dispatch)
        .find((r) => r.startsWith('iifname "eth0" goto '))!
        .split(' ')[3]!;
    const polsOf = (chain: string) =>
      rules(d, `${chain}-pol`)
        .filter((r) => r.startsWith('jump '))
        .map((r) => d.chains.get(r.split(' ')[1]!)!.comment);
    expect(polsOf(goto('host-in'))).toEqual(['GlobalNetworkPolicy fwd ingress', 'GlobalNetworkPolicy normal ingress']);
    expect(polsOf(goto('host-fwd-in'))).toEqual(['GlobalNetworkPolicy fwd ingress']);
    expect(polsOf(goto('host-pre'))).toEqual(['GlobalNetworkPolicy pre ingress']);
    expect(polsOf(goto('host-raw-in'))).toEqual(['GlobalNetworkPolicy raw ingress (untracked)']);
    const raw = [...d.chains.values()].find((c) => c.comment === 'GlobalNetworkPolicy raw ingress (untracked)')!;
    expect(renderRule(raw.rules[0]!)).toBe(
      'meta l4proto udp notrack meta mark set meta mark or 0x04000000 accept comment "GlobalNetworkPolicy raw ingress (untracked) rule 0"',
    );
    expect(rules(d, 'host-in')).toContain('meta mark and 0x04000000 != 0 accept comment "allowed by untracked policy"');
  });

  it('an all-interfaces endpoint comes after named ones and never takes pod interfaces; Return sends pods to it', () => {
    const d = compile({
      host: host({
        endpointToHost: 'Return',
        endpoints: [
          { name: 'auto', interfaceName: '*', labels: {}, profiles: ['allow'], addrs: [], local: true },
          { name: 'a-eth0', interfaceName: 'eth0', labels: {}, profiles: [], addrs: [], local: true },
          { name: 'other-node', interfaceName: 'eth1', labels: {}, profiles: [], addrs: [], local: false },
        ],
      }),
      profiles: new Map([['allow', { name: 'allow', spec: { ingress: [{ action: 'Allow' }] } }]]),
    });
    const hin = rules(d, 'host-in');
    expect(hin[0]).toMatch(
      /^iifname "npi\*" goto hep-[0-9a-f]+-in comment "pod to its node: defaultEndpointToHostAction Return/,
    );
    expect(hin.filter((r) => r.includes('goto'))).toHaveLength(3);
    expect(hin.at(-1)).toMatch(/^goto hep-/);
    expect(hin.some((r) => r.includes('eth1'))).toBe(false);
    expect(rules(d, 'host-fwd-out').slice(1, 2)).toEqual([
      'oifname "npi*" return comment "pod interface: no host endpoint"',
    ]);
  });

  it('refuses a hostile or pod interface name and a second endpoint on one interface, naming each', () => {
    const d = compile({
      host: host({
        endpoints: [
          { name: 'evil', interfaceName: 'eth0" accept', labels: {}, profiles: [], addrs: [], local: true },
          { name: 'pod', interfaceName: 'npi1234', labels: {}, profiles: [], addrs: [], local: true },
          { name: 'a', interfaceName: 'eth0', labels: {}, profiles: [], addrs: [], local: true },
          { name: 'b', interfaceName: 'eth0', labels: {}, profiles: [], addrs: [], local: true },
        ],
      }),
    });
    const why = d.refused.map((r) => `${r.owner.kind}/${r.owner.name}: ${r.reason}`);
    expect(why).toEqual([
      "HostEndpoint/b: interface eth0 is HostEndpoint a's; not enforced",
      expect.stringMatching(/^HostEndpoint\/evil: interfaceName "eth0\\" accept" must be/),
      'HostEndpoint/pod: interfaceName npi1234 is a pod interface; not enforced',
    ]);
    expect(fullScript({ vethPrefixes: ['npi'] }, d)).not.toMatch(/evil|npi1234/);
  });

  it('host endpoints are peers of rules by their expectedIPs and labels', () => {
    const d = compile({
      host: host({
        endpoints: [
          {
            name: 'far',
            interfaceName: 'eth0',
            labels: { role: 'node' },
            profiles: [],
            addrs: ['10.9.9.9'],
            local: false,
          },
        ],
      }),
      endpoints: [{ key: 'w', namespace: 'x', labels: {}, profiles: [], addrs: ['10.1.0.1'], interfaceName: 'npi1' }],
      policies: [
        gnp('from-nodes', {
          selector: 'all()',
          ingress: [{ action: 'Allow', source: { selector: "role == 'node'" } }],
        }),
      ],
    });
    const set = [...d.sets.values()].find(
      (s) => s.comment?.includes('role == "node"') || s.comment?.includes("role == 'node'"),
    )!;
    expect([...set.elements.keys()]).toEqual(['10.9.9.9']);
  });
});

describe('netpluginctl policy explain for a host endpoint', () => {
  it('lists the policies per tier, the failsafe ports, and each decision for a peer', async () => {
    const ds = new MemoryDatastore();
    const put = (kind: string, name: string, spec: unknown, labels?: Record<string, string>) =>
      ds.create({ apiVersion: API_VERSION, kind, metadata: { name, ...(labels ? { labels } : {}) }, spec } as never);
    await put(
      'HostEndpoint',
      'n1-eth0',
      { node: 'n1', interfaceName: 'eth0', expectedIPs: ['10.0.0.1'] },
      { role: 'edge' },
    );
    await put('GlobalNetworkPolicy', 'allow-8080', {
      selector: "role == 'edge'",
      ingress: [
        { action: 'Allow', protocol: 'TCP', source: { nets: ['10.0.0.2/32'] }, destination: { ports: [8080] } },
      ],
    });
    await put('GlobalNetworkPolicy', 'fwd', {
      selector: "role == 'edge'",
      applyOnForward: true,
      ingress: [{ action: 'Deny', protocol: 'TCP', destination: { ports: [80] } }],
    });
    await put('AgentConfiguration', 'node.n1', { failsafeInboundHostPorts: [{ protocol: 'TCP', port: 2222 }] });
    const run = async (argv: string[]) => {
      let out = '';
      let err = '';
      const code = await runCtl(argv, {
        env: { ETCD_ENDPOINTS: 'http://127.0.0.1:2379' },
        stdout: (s) => (out += s),
        stderr: (s) => (err += s),
        openDatastore: async () => ds,
      });
      return { code, out, err };
    };
    const text = await run(['policy', 'explain', 'hep/n1-eth0', '--peer', '10.0.0.2', '--port', '8080']);
    expect(text.code, text.err).toBe(0);
    expect(text.out).toContain('Failsafe inbound: tcp 2222');
    expect(text.out).toContain("the host's own traffic, ingress: allow-8080 (order unset), fwd (order unset)");
    expect(text.out).toContain('forwarded traffic (applyOnForward), ingress: fwd (order unset)');
    const j = async (peer: string, port: string) =>
      JSON.parse(
        (await run(['policy', 'explain', 'hostendpoint/n1-eth0', '--peer', peer, '--port', port, '-o', 'json'])).out,
      ).connection.decisions;
    const d = await j('10.0.0.2', '8080');
    expect(d['normal.ingress']).toMatchObject({
      verdict: 'allow',
      by: 'GlobalNetworkPolicy allow-8080 ingress rule 0 (Allow)',
    });
    expect(d['normal.egress']).toMatchObject({ verdict: 'deny', by: 'no profile allows it' });
    expect(d['forward.ingress']).toMatchObject({ verdict: 'deny' }); // selected by fwd, no rule matched
    expect(d['preDNAT.ingress']).toMatchObject({ verdict: 'allow' });
    expect((await j('10.0.0.9', '8080'))['normal.ingress']).toMatchObject({ verdict: 'deny' });
    expect((await j('10.0.0.9', '2222'))['normal.ingress']).toMatchObject({
      verdict: 'allow',
      by: 'failsafe port TCP/2222',
    });
    expect((await run(['policy', 'explain', 'hep/nope'])).err).toContain('no HostEndpoint "nope"');
  });
});

describe('failsafe rules', () => {
  it('match the destination port; the net is the source inbound and the destination outbound', async () => {
    const { failsafeRules } = await import('../../src/agent/policy/compile.js');
    const p = [{ protocol: 'TCP' as const, port: 2379, net: '10.0.0.0/8' }];
    expect(failsafeRules(p, 'in').map(renderRule)).toEqual([
      'meta l4proto tcp ip saddr { 10.0.0.0/8 } th dport { 2379 } accept comment "failsafe port"',
    ]);
    expect(failsafeRules(p, 'out').map(renderRule)).toEqual([
      'meta l4proto tcp ip daddr { 10.0.0.0/8 } th dport { 2379 } accept comment "failsafe port"',
    ]);
  });
});

describe('host endpoint policy changes', () => {
  it('recompile only the host chains, equal to a full compile; a policy selecting a pod goes the full way', () => {
    const host: HostInput = {
      endpoints: [
        {
          name: 'auto',
          interfaceName: '*',
          labels: { edge: 'y' },
          profiles: ['allow'],
          addrs: ['10.0.0.1'],
          local: true,
        },
        { name: 'eth0', interfaceName: 'eth0', labels: { edge: 'y' }, profiles: [], addrs: ['10.0.0.1'], local: true },
      ],
      failsafeInbound: [...DEFAULT_FAILSAFE_INBOUND],
      failsafeOutbound: [],
      endpointToHost: 'Accept',
      podPrefixes: ['npi'],
    };
    const hp = (i: number, gen: number): PolicyInput => ({
      kind: 'GlobalNetworkPolicy',
      name: `h${i}`,
      spec: {
        order: i,
        selector: "edge == 'y'",
        applyOnForward: i % 2 === 0,
        ...(i === 3 ? { doNotTrack: true, applyOnForward: true } : {}),
        ingress: [
          {
            action: 'Allow',
            protocol: 'TCP',
            source: { selector: `peer == 'p${gen}'` },
            destination: { ports: [1000 + gen] },
          },
        ],
      },
    });
    const pods = [
      { key: 'w', namespace: 'x', labels: { peer: 'p1' }, profiles: [], addrs: ['10.1.0.1'], interfaceName: 'npi1' },
    ];
    const podPolicy: PolicyInput = {
      kind: 'GlobalNetworkPolicy',
      name: 'pods',
      spec: { selector: "peer == 'p1'", ingress: [{ action: 'Allow' }] },
    };
    const profiles = new Map([['allow', { name: 'allow', spec: { ingress: [{ action: 'Allow' as const }] } }]]);
    let policies = [podPolicy, ...[0, 1, 2, 3].map((i) => hp(i, 0))];
    const c = new PolicyCompiler();
    c.compile({ policies, profiles, endpoints: pods, host });
    const text = (d: ReturnType<PolicyCompiler['compile']>) =>
      [...d.chains].map(([n, ch]) => `${n}: ${ch.rules.map(renderRule).join(' | ')}`).sort();
    for (let gen = 1; gen <= 4; gen++) {
      policies = policies.slice();
      policies[1 + (gen % 4)] = hp(gen % 4, gen);
      const inc = c.compile({ policies, profiles, endpoints: pods, host });
      expect(c.lastMode).toBe('incremental');
      const full = new PolicyCompiler().compile({ policies, profiles, endpoints: pods, host });
      expect(text(inc)).toEqual(text(full));
      for (const [n, s] of full.sets) expect([...inc.sets.get(n)!.elements.keys()]).toEqual([...s.elements.keys()]);
    }
    policies = policies.slice();
    policies[0] = { ...podPolicy, spec: { ...podPolicy.spec, ingress: [] } };
    c.compile({ policies, profiles, endpoints: pods, host });
    expect(c.lastMode).toBe('full');
  });
});
