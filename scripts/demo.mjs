#!/usr/bin/env node
// `npm run demo`: netplugin end to end on one machine, as a node would run it.
// A throwaway etcd, a pool, install-cni into temp dirs, the node agent, three
// "pods" (network namespaces) networked by exec'ing the installed plugin
// exactly as a container runtime does, pings, a host port through the real
// portmap plugin, a second node, a top-of-rack router (FRR's bgpd) learning
// the pod block from the agent's BIRD over BGP, IPAM inspection, then DEL of
// everything and proof that nothing is left.
//
// It must run inside a throwaway network namespace that plays the node
// (scripts/in-netns, which `npm run demo` uses): the host-side veths, /32
// routes, sysctls and portmap's NAT rules then live there, never in the
// machine's real root namespace.
import { execFileSync, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import {
  chmodSync,
  existsSync,
  mkdtempSync,
  readFileSync,
  readdirSync,
  rmSync,
  rmdirSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import {
  block,
  bold,
  cmd,
  dim,
  elapsedS,
  fail,
  green,
  line,
  note,
  ok,
  red,
  silence,
  step,
  yellow,
} from './demo/print.mjs';
import { DemoError, cniExec, run, runOk, startAgent, startEtcd, startPodServer, stopChild } from './demo/proc.mjs';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');
const CTL = join(ROOT, 'dist/netpluginctl.mjs');
const AGENT = join(ROOT, 'dist/netplugin-node.mjs');
const NODE = process.execPath;
const SYSTEM_CNI_DIR = '/usr/lib/cni';
const POOL_CIDR = '10.88.0.0/24';
const NODE_NAME = 'demo-node';
const K8S_NAMESPACE = 'demo';
const HOST_PORT = 8080;
/** TEST-NET-3 (RFC 5737): never routed, so it cannot clash with a real network. On lo: some kernels lack the dummy link type. */
const NODE_IP = '203.0.113.10';
// The plugin notes the holder of its host-wide IPAM lock in <dir>/ipam.lock (default ipam_lock_file); see cleanup().
const LOCK_DIR = '/var/run/netplugin';

// The link between the demo node and its second node (TEST-NET-2 would do too; a private /24 is clearer).
const NODE1_LINK_IP = '10.201.0.1';
const NODE2_LINK_IP = '10.201.0.2';
const NODE2_NAME = 'demo-node-2';
// The link to the top-of-rack router (the node's address is its --node-ip, which BIRD peers from, on
// the subnet the second node used), and the router's AS (the node's is the default 64512).
const TOR_LINK_NODE_IP = NODE1_LINK_IP;
const TOR_IP = '10.201.0.254';
const TOR_AS = 65000;

const suffix = randomBytes(3).toString('hex');
let interrupted = false;
const state = {
  tmp: undefined,
  etcd: undefined,
  agent: undefined,
  agent2: undefined,
  server: undefined,
  frr: [],
  frrDir: undefined,
  netns: [],
  nodeIp: false,
  lockDirExisted: existsSync(LOCK_DIR),
  cleaned: undefined,
};

// ---------------------------------------------------------------- preflight

function preflight() {
  if (process.getuid?.() !== 0)
    throw new DemoError('the demo creates network namespaces and veths: run it as root (sudo npm run demo)');
  const nsName = process.env.NETPLUGIN_HOST_NETNS;
  const fix =
    'run it as `npm run demo` (or `bash scripts/in-netns node scripts/demo.mjs`), which gives it a throwaway node namespace';
  if (!nsName) throw new DemoError(`not inside a throwaway network namespace (NETPLUGIN_HOST_NETNS is unset); ${fix}`);
  let named;
  try {
    named = statSync(`/var/run/netns/${nsName}`);
  } catch {
    throw new DemoError(`NETPLUGIN_HOST_NETNS=${nsName} but /var/run/netns/${nsName} does not exist; ${fix}`);
  }
  const self = statSync('/proc/self/ns/net');
  if (named.ino !== self.ino || named.dev !== self.dev)
    throw new DemoError(`NETPLUGIN_HOST_NETNS=${nsName} is not the namespace the demo runs in; ${fix}`);
  for (const f of [CTL, AGENT, join(ROOT, 'dist/netplugin.mjs')]) {
    if (!existsSync(f)) throw new DemoError(`${f} is missing: run 'npm run build' first (npm run demo does)`);
  }
  for (const b of ['portmap']) {
    if (!existsSync(join(SYSTEM_CNI_DIR, b)))
      throw new DemoError(
        `${SYSTEM_CNI_DIR}/${b} is missing: run 'bash scripts/setup' (installs containernetworking-plugins)`,
      );
  }
  return nsName;
}

// ---------------------------------------------------------------- helpers

function ctlEnv() {
  return { ...process.env, ETCD_ENDPOINTS: state.etcd.endpoint, NODE_EXTRA_CA_CERTS: '' };
}

/** Runs netpluginctl, printing the command line and its output. */
async function ctl(args, { input, quiet = false, heredoc } = {}) {
  if (!quiet) {
    if (heredoc) {
      cmd(`netpluginctl ${args.join(' ')} <<'EOF'`);
      block(input.replace(/\s+$/, '') + '\nEOF', '  ');
    } else cmd(`netpluginctl ${args.join(' ')}`);
  }
  const r = await runOk(NODE, [CTL, ...args], { env: ctlEnv(), input, what: `netpluginctl ${args.join(' ')}` });
  // A few commands report "nothing found" on stderr, with an empty stdout.
  if (!quiet) block(r.stdout.trim() ? r.stdout : r.stderr);
  return r.stdout;
}

function sh(file, args) {
  // After Ctrl-C, cleanup() owns the state: the steps still in flight must not add to it.
  if (interrupted) throw new DemoError('interrupted');
  try {
    return execFileSync(file, args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
  } catch (e) {
    throw new DemoError(`${file} ${args.join(' ')} failed: ${String(e.stderr || e.message).trim()}`);
  }
}

function ms(x) {
  return `${x < 10 ? x.toFixed(1) : Math.round(x)} ms`;
}

/** Pretty JSON for display, with a long prevResult collapsed to a label. */
function showJson(obj, prevLabel) {
  const copy = prevLabel && obj.prevResult ? { ...obj, prevResult: '__PREV__' } : obj;
  let s = JSON.stringify(copy, null, 2);
  if (prevLabel) s = s.replace('"__PREV__"', `{ ${prevLabel} }`);
  return s;
}

function cniError(what, r) {
  const msg = r.json?.msg
    ? `${r.json.msg}${r.json.details ? ` (${r.json.details})` : ''} [CNI code ${r.json.code}]`
    : (r.stderr || r.stdout).trim();
  return new DemoError(`${what} failed (exit ${r.code}): ${msg}`);
}

function fetchText(url) {
  return fetch(url, { signal: AbortSignal.timeout(3000) }).then(
    async (res) => (await res.text()).trim(),
    (e) => `no answer (${e.cause?.code ?? e.message})`,
  );
}

// ---------------------------------------------------------------- the demo

async function main() {
  const nsName = preflight();
  process.stdout.write(
    `${bold('netplugin demo')}: a node, a datastore, three pods, a second node, a BGP top-of-rack router, a host port, and a clean teardown.\n`,
  );
  process.stdout.write(
    `The node is the throwaway network namespace "${nsName}" (scripts/in-netns): host veths, /32 routes, sysctls and NAT rules go there, never into your real root namespace.\n`,
  );
  state.tmp = mkdtempSync(join(tmpdir(), 'netplugin-demo-'));
  const binDir = join(state.tmp, 'opt-cni-bin');
  const confDir = join(state.tmp, 'etc-cni-net.d');
  const socket = join(state.tmp, 'cni.sock');
  const cniLog = join(state.tmp, 'cni.log');
  const agentLog = join(state.tmp, 'agent.log');
  const cniPath = `${binDir}:${SYSTEM_CNI_DIR}`;

  step('The node: give the throwaway namespace an address of its own');
  cmd(`ip addr add ${NODE_IP}/32 dev lo`);
  sh('ip', ['addr', 'add', `${NODE_IP}/32`, 'dev', 'lo']);
  state.nodeIp = true;
  note(
    `It has only 127.0.0.1 otherwise; ${NODE_IP} (TEST-NET-3) stands in for the node's IP: the source of node-to-pod traffic and a host-port target.`,
  );

  step('A throwaway etcd on 127.0.0.1');
  state.etcd = await startEtcd(state.tmp);
  cmd(`etcd ${state.etcd.args.join(' ').replace(state.tmp, '$TMP')}`);
  ok(`etcd is healthy at ${state.etcd.endpoint}   ${dim(`(TMP=${state.tmp})`)}`);

  step('Initialise the datastore and create an IP pool');
  note('netpluginctl is `node dist/netpluginctl.mjs`; it finds etcd through the environment:');
  cmd(`export ETCD_ENDPOINTS=${state.etcd.endpoint}`);
  await ctl(['datastore', 'init']);
  const poolYaml = `apiVersion: netplugin.org/v3\nkind: IPPool\nmetadata:\n  name: demo-pool\nspec:\n  cidr: ${POOL_CIDR}\n  blockSize: 28\n  natOutgoing: true\n`;
  await ctl(['apply', '-f', '-'], { input: poolYaml, heredoc: true });
  await ctl(['get', 'ippool', '-o', 'wide']);

  step('Install the plugin the way a node does (into temp dirs instead of /opt/cni/bin and /etc/cni/net.d)');
  await ctl([
    'install-cni',
    '--bin-dir',
    binDir,
    '--conf-dir',
    confDir,
    '--etcd-endpoints',
    state.etcd.endpoint,
    '--nodename',
    NODE_NAME,
    '--log-file-path',
    cniLog,
  ]);
  const conflistPath = join(confDir, '10-netplugin.conflist');
  const conflist = JSON.parse(readFileSync(conflistPath, 'utf8'));
  cmd(`cat ${conflistPath}`);
  block(readFileSync(conflistPath, 'utf8'));
  cmd(`cat ${join(binDir, 'netplugin.fallback')}`);
  block(readFileSync(join(binDir, 'netplugin.fallback'), 'utf8'));
  note(
    'netplugin and netplugin-ipam are the static native shim; netplugin.fallback tells it how to run the plugin without the agent.',
  );
  note(
    `--nodename ${NODE_NAME}: the name the plugin records on blocks and endpoints; it must be the name the node agent registered with.`,
  );
  note('Without it the plugin reads /var/lib/netplugin/nodename, else uses the lower-cased hostname.');

  const entryOf = (type) => {
    const e = conflist.plugins.find((p) => p.type === type);
    if (!e) throw new DemoError(`${conflistPath} has no '${type}' entry`);
    // libcni gives each plugin its entry plus the list's name and cniVersion.
    return { cniVersion: conflist.cniVersion, name: conflist.name, ...e };
  };
  const mainEntry = entryOf('netplugin');
  const portmapEntry = entryOf('portmap');
  const runtimeEnv = { NETPLUGIN_AGENT_SOCKET: socket };

  const pods = ['pod-a', 'pod-b', 'pod-c'].map((pod) => ({
    pod,
    netns: `${pod}-${suffix}`,
    containerId: randomBytes(32).toString('hex'),
    args: `IgnoreUnknown=1;K8S_POD_NAMESPACE=${K8S_NAMESPACE};K8S_POD_NAME=${pod}`,
  }));
  const [podA, podB, podC] = pods;

  const addPod = async (p, path, showFull) => {
    sh('ip', ['netns', 'add', p.netns]);
    state.netns.push(p.netns);
    const call = {
      command: 'ADD',
      entry: mainEntry,
      containerId: p.containerId,
      netns: `/var/run/netns/${p.netns}`,
      args: p.args,
      cniPath,
      extraEnv: runtimeEnv,
    };
    if (showFull) {
      cmd(`ip netns add ${p.netns}`);
      note(
        'The runtime execs the first entry of the conflist with the CNI environment, and the entry (plus name and cniVersion) on stdin:',
      );
      const envShown = [
        'CNI_COMMAND=ADD',
        `CNI_CONTAINERID=${p.containerId.slice(0, 12)}...`,
        `CNI_NETNS=${call.netns}`,
        'CNI_IFNAME=eth0',
        `CNI_ARGS='${p.args}'`,
        `CNI_PATH=${cniPath}`,
        `NETPLUGIN_AGENT_SOCKET=${socket}`,
      ];
      cmd(`${envShown.join(' \\\n      ')} \\\n      ${binDir}/netplugin < entry.json`);
      block(showJson(mainEntry), '    ');
      note(
        `(NETPLUGIN_AGENT_SOCKET only because this agent listens in $TMP; a node uses the default /var/run/netplugin/cni.sock)`,
      );
    }
    const r = await cniExec(call);
    if (r.code !== 0) throw cniError(`ADD of ${p.pod}`, r);
    p.result = r.json;
    const eth = r.json.interfaces?.find((i) => i.sandbox);
    const host = r.json.interfaces?.find((i) => !i.sandbox);
    p.ip = String(r.json.ips?.[0]?.address ?? '').split('/')[0];
    if (!p.ip) throw new DemoError(`ADD of ${p.pod} returned no address: ${r.stdout}`);
    if (showFull) {
      note(`Result (CNI ${r.json.cniVersion}):`);
      block(JSON.stringify(r.json, null, 2));
    }
    line(
      `${bold(p.pod.padEnd(6))} ${eth?.name ?? 'eth0'} ${green(r.json.ips[0].address.padEnd(15))} mac ${eth?.mac ?? '?'}  host veth ${host?.name ?? '?'}  ${yellow(ms(r.ms).padStart(7))} ${dim(`(${path})`)}`,
    );
  };

  step('One pod before the agent runs: the shim falls back to the per-exec plugin');
  await addPod(podC, 'shim -> per-exec node dist/netplugin.mjs', false);
  note(
    'No agent answers on the socket, so the shim ran `node dist/netplugin.mjs` with the same input: correct, but it pays a Node start.',
  );

  step('Start the node agent (the fast path)');
  const agentArgs = [
    '--socket',
    socket,
    '--config',
    conflistPath,
    '--node-ip',
    `${NODE1_LINK_IP}/24`,
    '--mtu-file',
    join(state.tmp, 'mtu'),
  ];
  cmd(`netplugin-node ${agentArgs.join(' ')} 2>$TMP/agent.log &`);
  state.agent = await startAgent(NODE, AGENT, agentArgs, socket, agentLog, 'node ready');
  ok(`listening on ${socket} (mode ${(statSync(socket).mode & 0o777).toString(8)}, root only)`);
  note(
    "With --config it opens the conflist's datastore at start (kept warm for requests) and initialises ClusterInformation:",
  );
  block(
    shortLog(
      readFileSync(agentLog, 'utf8')
        .split('\n')
        .filter((l) => /datastore initialised|node ready/.test(l)),
    ),
    '    ',
  );
  note(
    'On a node it is a systemd unit (deploy/netplugin-node.service) or a DaemonSet (deploy/netplugin-node-daemonset.yaml).',
  );

  step("Two pods through the shim and the warm agent, exec'd exactly as a runtime does");
  await addPod(podA, 'shim -> agent', true);
  await addPod(podB, 'shim -> agent', false);
  const served = readFileSync(agentLog, 'utf8')
    .split('\n')
    .filter((l) => l.includes('CNI request served'));
  note(`agent log (${served.length} requests served):`);
  block(shortLog(served), '    ');
  note('The agent loads the plugin code on its first request; later requests find it warm.');

  step('Ping pod to pod, and node to pod');
  cmd('ip route');
  block(sh('ip', ['route']));
  cmd(`ip netns exec ${podA.netns} ip route`);
  block(sh('ip', ['netns', 'exec', podA.netns, 'ip', 'route']));
  note(
    'Each pod is a /32 route to its host veth on the node; a pod routes everything via 169.254.1.1, which its host veth answers (proxy ARP).',
  );
  const pings = [
    [podA, podB],
    [podB, podC],
    [podC, podA],
    [null, podA],
  ];
  for (const [from, to] of pings) {
    const argv = [...(from ? ['ip', 'netns', 'exec', from.netns] : []), 'ping', '-c1', '-w5', to.ip];
    const r = await run(argv[0], argv.slice(1));
    const shown = argv.join(' ');
    const rtt = /time=([\d.]+ ms)/.exec(r.stdout)?.[1];
    if (r.code !== 0) {
      cmd(shown);
      throw new DemoError(
        `${from ? from.pod : 'the node'} cannot ping ${to.pod} (${to.ip}): ${(r.stdout + r.stderr).trim().split('\n').pop()}`,
      );
    }
    line(
      `${dim('$')} ${shown.padEnd(56)} ${green('reply')} ${rtt ?? ''}  ${dim(`(${from ? from.pod : 'node'} -> ${to.pod})`)}`,
    );
  }

  await secondNode({ conflist, podA, binDir, cniPath });
  await torLearns({ agentArgs, socket, podA });

  step(`A host port: portmap chained after netplugin maps node port ${HOST_PORT} to pod-a:80`);
  cmd(`ip netns exec ${podA.netns} node -e "require('http').createServer(...).listen(80)" &`);
  state.server = await startPodServer(podA.netns, NODE, 'pod-a');
  line(`before portmap: GET http://${NODE_IP}:${HOST_PORT}/ -> ${await fetchText(`http://${NODE_IP}:${HOST_PORT}/`)}`);
  const mappings = [{ hostPort: HOST_PORT, containerPort: 80, protocol: 'tcp' }];
  // As libcni chains: the capability's runtimeConfig, and the previous plugin's result.
  const pmIn = { ...portmapEntry, runtimeConfig: { portMappings: mappings }, prevResult: podA.result };
  note(
    "libcni runs the second entry with runtimeConfig.portMappings (from the pod spec) and netplugin's result as prevResult:",
  );
  cmd(
    `CNI_COMMAND=ADD CNI_CONTAINERID=${podA.containerId.slice(0, 12)}... CNI_NETNS=/var/run/netns/${podA.netns} ... ${SYSTEM_CNI_DIR}/portmap <<'EOF'`,
  );
  block(showJson(pmIn, "...netplugin's ADD result for pod-a..."), '    ');
  const pm = await cniExec({
    command: 'ADD',
    entry: pmIn,
    containerId: podA.containerId,
    netns: `/var/run/netns/${podA.netns}`,
    args: podA.args,
    cniPath,
    extraEnv: runtimeEnv,
  });
  if (pm.code !== 0) throw cniError('portmap ADD for pod-a', pm);
  podA.portmapResult = pm.json;
  ok(`portmap ADD ${ms(pm.ms)}; its NAT rules for the port (iptables-save -t nat | grep ${HOST_PORT}):`);
  block(natLines().join('\n'), '      ');
  for (const host of ['127.0.0.1', NODE_IP]) {
    const url = `http://${host}:${HOST_PORT}/`;
    const reply = await fetchText(url);
    if (!reply.startsWith('hello from pod-a')) throw new DemoError(`GET ${url} through the host port: ${reply}`);
    line(`GET ${url.padEnd(30)} ${green(reply)}`);
  }
  note(
    '127.0.0.1 works because netplugin sets route_localnet on the host veth and portmap (snat: true) masquerades it.',
  );

  step('Look at the allocations');
  await ctl(['ipam', 'show']);
  await ctl(['ipam', 'show', '--show-blocks']);
  await ctl(['get', 'workloadendpoints', '-A']);

  step('Delete every pod, as a runtime does: DEL in reverse chain order, with the cached result as prevResult');
  await stopChild(state.server);
  state.server = undefined;
  const del = async (p, entry, label) => {
    const prev = p.portmapResult ?? p.result;
    const r = await cniExec({
      command: 'DEL',
      entry: { ...entry, prevResult: prev },
      containerId: p.containerId,
      netns: `/var/run/netns/${p.netns}`,
      args: p.args,
      cniPath,
      extraEnv: runtimeEnv,
    });
    if (r.code !== 0) throw cniError(`${label} DEL of ${p.pod}`, r);
    line(`${bold(p.pod.padEnd(6))} ${label.padEnd(9)} DEL ${green('ok')} ${yellow(ms(r.ms).padStart(7))}`);
  };
  await del(podA, { ...portmapEntry, runtimeConfig: { portMappings: mappings } }, 'portmap');
  for (const p of [podA, podB, podC]) await del(p, mainEntry, 'netplugin');
  for (const p of pods) {
    sh('ip', ['netns', 'del', p.netns]);
    state.netns = state.netns.filter((n) => n !== p.netns);
  }
  line(`${dim('$')} ip netns del ${pods.map((p) => p.netns).join(' ')}`);

  step('Proof that nothing is left');
  const problems = [];
  const links = JSON.parse(sh('ip', ['-j', 'link', 'show'])).map((l) => l.ifname);
  const extra = links.filter((n) => n !== 'lo');
  (extra.length ? fail : ok)(
    `links in the node namespace: ${links.join(', ')}${extra.length ? `  (left over: ${extra.join(', ')})` : ''}`,
  );
  if (extra.length) problems.push(`links left: ${extra.join(', ')}`);
  const routes = sh('ip', ['-4', 'route', 'show']).trim().split('\n').filter(Boolean);
  const podRoutes = routes.filter(
    (r) => r.startsWith(POOL_CIDR.split('.').slice(0, 3).join('.') + '.') || / dev npi/.test(r),
  );
  (podRoutes.length ? fail : ok)(`pod /32 routes: ${podRoutes.length ? podRoutes.join('; ') : 'none'}`);
  if (podRoutes.length) problems.push(`routes left: ${podRoutes.join('; ')}`);
  const nat = natLines();
  const nft = sh('nft', ['list', 'ruleset'])
    .split('\n')
    .filter((l) => l.includes(String(HOST_PORT)));
  (nat.length || nft.length ? fail : ok)(
    `NAT rules for port ${HOST_PORT}: iptables-save ${nat.length}, nft list ruleset ${nft.length}`,
  );
  if (nat.length || nft.length) problems.push(`NAT rules for ${HOST_PORT} left`);
  const show = JSON.parse(await ctl(['ipam', 'show', '-o', 'json'], { quiet: true }));
  const allocated = show.pools.reduce((n, p) => n + Number(p.allocated), 0);
  await ctl(['ipam', 'show']);
  if (allocated !== 0) problems.push(`${allocated} addresses still allocated`);
  const weps = JSON.parse(await ctl(['get', 'workloadendpoints', '-A', '-o', 'json'], { quiet: true })).items;
  await ctl(['get', 'workloadendpoints', '-A']);
  if (weps.length) problems.push(`${weps.length} workload endpoints left`);
  await ctl(['ipam', 'check']);
  if (problems.length) throw new DemoError(`the teardown left state behind: ${problems.join('; ')}`);

  step('Stop the agent and etcd, remove the temp dirs');
  await cleanup();
  ok(`agent and etcd stopped, ${dim('$TMP')} removed; scripts/in-netns removes the node namespace on exit`);
}

/**
 * A second node: a network namespace linked to this one, with its own agent
 * (--nodename, --node-ip) and a pod; the two agents route each other's blocks
 * (same subnet, pool mode Never: a direct route via the other node's address),
 * and pods ping across. Then the pod, the agent and the node go again, the node
 * through `netpluginctl delete node`, which releases its IPAM state.
 */
async function secondNode({ conflist, podA, binDir, cniPath }) {
  step(`A second node: ${NODE2_NAME}, its own agent, and a ping from pod to pod across the nodes`);
  const node2 = `demo-node2-${suffix}`;
  sh('ip', ['netns', 'add', node2]);
  state.netns.push(node2);
  const run2 = (args) => sh('ip', ['netns', 'exec', node2, ...args]);
  cmd(`ip netns add ${node2}; ip link add np-node2 type veth peer name eth0 netns ${node2}`);
  sh('ip', ['link', 'add', 'np-node2', 'type', 'veth', 'peer', 'name', 'eth0', 'netns', node2]);
  sh('ip', ['addr', 'add', `${NODE1_LINK_IP}/24`, 'dev', 'np-node2']);
  sh('ip', ['link', 'set', 'np-node2', 'up']);
  run2(['ip', 'link', 'set', 'lo', 'up']);
  run2(['ip', 'link', 'set', 'eth0', 'up']);
  run2(['ip', 'addr', 'add', `${NODE2_LINK_IP}/24`, 'dev', 'eth0']);
  run2(['sysctl', '-qw', 'net.ipv4.ip_forward=1']);
  note(
    `This node is ${NODE1_LINK_IP} on np-node2 (its agent runs with --node-ip ${NODE1_LINK_IP}/24); ${NODE2_NAME} is ${NODE2_LINK_IP} on its eth0, in namespace ${node2}.`,
  );
  // Node 2's conflist: its own name, and etcd over the link.
  const etcd2 = `http://${NODE1_LINK_IP}:${state.etcd.clientPort}`;
  const conf2 = JSON.parse(JSON.stringify(conflist));
  const entry2 = conf2.plugins.find((p) => p.type === 'netplugin');
  Object.assign(entry2, {
    etcd_endpoints: etcd2,
    nodename: NODE2_NAME,
    nodename_file: join(state.tmp, 'node2.nodename'),
    mtu_file: join(state.tmp, 'node2.mtu'),
  });
  const conf2Path = join(state.tmp, 'node2.conflist');
  writeFileSync(conf2Path, JSON.stringify(conf2, null, 2));
  const socket2 = join(state.tmp, 'node2.sock');
  const log2 = join(state.tmp, 'agent2.log');
  const args2 = [
    '--socket',
    socket2,
    '--config',
    conf2Path,
    '--nodename',
    NODE2_NAME,
    '--node-ip',
    `${NODE2_LINK_IP}/24`,
  ];
  cmd(`ip netns exec ${node2} netplugin-node ${args2.join(' ').replaceAll(state.tmp, '$TMP')} 2>$TMP/agent2.log &`);
  state.agent2 = await startAgent(
    'ip',
    'netns',
    ['exec', node2, NODE, AGENT, ...args2],
    socket2,
    log2,
    'pod network controllers started',
  );
  ok(`${NODE2_NAME}'s agent registered the node and watches pools, blocks and nodes`);

  const podD = {
    pod: 'pod-d',
    netns: `pod-d-${suffix}`,
    containerId: randomBytes(32).toString('hex'),
    args: `IgnoreUnknown=1;K8S_POD_NAMESPACE=${K8S_NAMESPACE};K8S_POD_NAME=pod-d`,
  };
  sh('ip', ['netns', 'add', podD.netns]);
  state.netns.push(podD.netns);
  const entryD = { cniVersion: conf2.cniVersion, name: conf2.name, ...entry2 };
  const execOnNode2 = (command) => {
    const env = {
      PATH: '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin',
      CNI_COMMAND: command,
      CNI_CONTAINERID: podD.containerId,
      CNI_NETNS: `/var/run/netns/${podD.netns}`,
      CNI_IFNAME: 'eth0',
      CNI_PATH: cniPath,
      CNI_ARGS: podD.args,
      NETPLUGIN_AGENT_SOCKET: socket2,
    };
    return run('ip', ['netns', 'exec', node2, join(binDir, 'netplugin')], { env, input: JSON.stringify(entryD) });
  };
  const add = await execOnNode2('ADD');
  if (add.code !== 0) throw new DemoError(`ADD of pod-d on ${NODE2_NAME} failed: ${add.stdout}${add.stderr}`);
  podD.ip = String(JSON.parse(add.stdout).ips[0].address).split('/')[0];
  line(
    `${bold('pod-d '.padEnd(6))} on ${NODE2_NAME}: eth0 ${green(podD.ip)}  ${dim(`(ip netns exec ${node2} ${binDir}/netplugin, through ${NODE2_NAME}'s agent)`)}`,
  );

  // Each agent routes the other node's block once it sees it; wait for both routes.
  const routeTo = (ip, inNode2) =>
    (inNode2 ? run2(['ip', 'route', 'show', 'proto', '80']) : sh('ip', ['route', 'show', 'proto', '80'])).includes(
      `via ${ip}`,
    );
  const deadline = Date.now() + 15_000;
  while (!(routeTo(NODE2_LINK_IP, false) && routeTo(NODE1_LINK_IP, true))) {
    if (Date.now() > deadline)
      throw new DemoError(
        `the agents did not route each other's blocks: ${sh('ip', ['route'])} / ${run2(['ip', 'route'])}`,
      );
    await new Promise((r) => setTimeout(r, 100));
  }
  cmd("ip route show proto 80                      # on this node (protocol 80: the agent's routes)");
  block(sh('ip', ['route', 'show', 'proto', '80']));
  cmd(`ip netns exec ${node2} ip route show proto 80    # on ${NODE2_NAME}`);
  block(run2(['ip', 'route', 'show', 'proto', '80']));
  note(
    "Each agent routes the blocks affine to the other node via that node's address, and blackholes its own block so an unused address of it never leaves through the default route.",
  );
  note(
    'The pool is vxlanMode/ipipMode Never, and both nodes share a subnet, so the routes are direct; docs/networking.md shows VXLAN and CrossSubnet.',
  );
  for (const [from, to] of [
    [podD, podA],
    [podA, podD],
  ]) {
    const argv = ['ip', 'netns', 'exec', from.netns, 'ping', '-c1', '-w5', to.ip];
    const r = await run(argv[0], argv.slice(1));
    if (r.code !== 0)
      throw new DemoError(
        `${from.pod} cannot ping ${to.pod} (${to.ip}) across the nodes: ${(r.stdout + r.stderr).trim().split('\n').pop()}`,
      );
    line(
      `${dim('$')} ${argv.join(' ').padEnd(56)} ${green('reply')} ${/time=([\d.]+ ms)/.exec(r.stdout)?.[1] ?? ''}  ${dim(`(${from.pod} -> ${to.pod}, across nodes)`)}`,
    );
  }

  note(`${NODE2_NAME} leaves: its pod is deleted, its agent stops, and the node is deleted with its IPAM state:`);
  const del = await execOnNode2('DEL');
  if (del.code !== 0) throw new DemoError(`DEL of pod-d failed: ${del.stdout}${del.stderr}`);
  await stopChild(state.agent2);
  state.agent2 = undefined;
  await ctl(['delete', 'node', NODE2_NAME]);
  for (const n of [podD.netns, node2]) {
    sh('ip', ['netns', 'del', n]);
    state.netns = state.netns.filter((x) => x !== n);
  }
  const gone = Date.now() + 15_000;
  while (routeTo(NODE2_LINK_IP, false)) {
    if (Date.now() > gone)
      throw new DemoError(`the route to ${NODE2_NAME}'s block stayed: ${sh('ip', ['route', 'show', 'proto', '80'])}`);
    await new Promise((r) => setTimeout(r, 100));
  }
  ok(`the route to ${NODE2_NAME}'s block is gone from this node; ip netns del ${node2} took the link with it`);
}

/**
 * A top-of-rack router: a namespace linked to this node running FRR's bgpd (an
 * independent BGP implementation, with zebra to install what it learns), AS
 * 65000. A BGPPeer makes this node peer with it; the agent restarts with
 * --bgp on and runs BIRD, and the ToR learns the node's pod block and reaches
 * pod-a by its own address. Then the ToR goes again.
 */
async function torLearns({ agentArgs, socket, podA }) {
  step(`A top-of-rack router learns the pod routes over BGP (BIRD on this node, FRR's bgpd on the ToR, AS ${TOR_AS})`);
  const tor = `demo-tor-${suffix}`;
  sh('ip', ['netns', 'add', tor]);
  state.netns.push(tor);
  const runT = (args) => sh('ip', ['netns', 'exec', tor, ...args]);
  cmd(`ip netns add ${tor}; ip link add np-tor type veth peer name eth0 netns ${tor}`);
  sh('ip', ['link', 'add', 'np-tor', 'type', 'veth', 'peer', 'name', 'eth0', 'netns', tor]);
  sh('ip', ['addr', 'add', `${TOR_LINK_NODE_IP}/24`, 'dev', 'np-tor']);
  sh('ip', ['link', 'set', 'np-tor', 'up']);
  runT(['ip', 'link', 'set', 'lo', 'up']);
  runT(['ip', 'link', 'set', 'eth0', 'up']);
  runT(['ip', 'addr', 'add', `${TOR_IP}/24`, 'dev', 'eth0']);
  // FRR drops to its own user: its directory is its own and reachable.
  state.frrDir = mkdtempSync(join(tmpdir(), 'netplugin-demo-frr-'));
  chmodSync(state.frrDir, 0o755);
  const bgpd = [
    'frr defaults traditional',
    `router bgp ${TOR_AS}`,
    ` bgp router-id ${TOR_IP}`,
    ' no bgp ebgp-requires-policy',
    ` neighbor ${TOR_LINK_NODE_IP} remote-as 64512`,
    ` neighbor ${TOR_LINK_NODE_IP} timers connect 1`,
    '',
  ].join('\n');
  writeFileSync(join(state.frrDir, 'bgpd.conf'), bgpd);
  writeFileSync(join(state.frrDir, 'zebra.conf'), '');
  sh('chown', ['-R', 'frr:frr', state.frrDir]);
  cmd(`cat bgpd.conf    # the ToR's FRR configuration`);
  block(bgpd);
  const common = [
    '--vty_socket',
    state.frrDir,
    '-z',
    join(state.frrDir, 'zserv.api'),
    '-u',
    'frr',
    '-g',
    'frr',
    '-P',
    '0',
  ];
  for (const d of ['zebra', 'bgpd']) {
    cmd(`ip netns exec ${tor} /usr/lib/frr/${d} -f ${d}.conf ... &`);
    const child = spawn(
      'ip',
      [
        'netns',
        'exec',
        tor,
        `/usr/lib/frr/${d}`,
        '-f',
        join(state.frrDir, `${d}.conf`),
        '-i',
        join(state.frrDir, `${d}.pid`),
        ...common,
      ],
      { stdio: 'ignore' },
    );
    state.frr.push(child);
    if (d === 'zebra') await new Promise((r) => setTimeout(r, 300));
  }
  const peerYaml = `apiVersion: netplugin.org/v3\nkind: BGPPeer\nmetadata:\n  name: tor\nspec:\n  peerIP: ${TOR_IP}\n  asNumber: ${TOR_AS}\n`;
  await ctl(['apply', '-f', '-'], { input: peerYaml, heredoc: true });
  note('The pool has no encapsulation (vxlanMode/ipipMode Never): with --bgp on, BGP carries its routes.');
  await stopChild(state.agent);
  const birdDir = join(state.tmp, 'bird');
  const bgpArgs = [...agentArgs, '--bgp', 'on', '--bird-run-dir', birdDir];
  cmd(
    `netplugin-node ${bgpArgs.join(' ').replaceAll(state.tmp, '$TMP')} 2>$TMP/agent-bgp.log &    # restarted with --bgp on`,
  );
  state.agent = await startAgent(
    NODE,
    AGENT,
    bgpArgs,
    socket,
    join(state.tmp, 'agent-bgp.log'),
    'pod network controllers started',
  );
  ok(
    "the agent renders BIRD's configuration from the BGPPeer, the node and its blocks, checks it with bird -p and runs BIRD",
  );
  const block26 = POOL_CIDR.split('.').slice(0, 3).join('.') + '.';
  const torRoutes = () => runT(['ip', 'route', 'show', 'proto', 'bgp']);
  const deadline = Date.now() + 20_000;
  while (!torRoutes().includes(block26)) {
    if (Date.now() > deadline)
      throw new DemoError(`the ToR did not learn the pod block: ${torRoutes() || '(no BGP routes)'}`);
    await new Promise((r) => setTimeout(r, 200));
  }
  await ctl(['node', 'status', '--bird-run-dir', birdDir]);
  cmd(`ip netns exec ${tor} ip route show proto bgp    # on the ToR: this node's block, via the node`);
  block(torRoutes());
  const argv = ['ip', 'netns', 'exec', tor, 'ping', '-c1', '-w5', podA.ip];
  const r = await run(argv[0], argv.slice(1));
  if (r.code !== 0)
    throw new DemoError(`the ToR cannot ping pod-a (${podA.ip}): ${(r.stdout + r.stderr).trim().split('\n').pop()}`);
  line(
    `${dim('$')} ${argv.join(' ').padEnd(56)} ${green('reply')} ${/time=([\d.]+ ms)/.exec(r.stdout)?.[1] ?? ''}  ${dim('(ToR -> pod-a, no NAT, no overlay)')}`,
  );
  note('docs/bgp.md: node-to-node mesh, route reflectors, passwords, graceful restart and troubleshooting.');
  for (const c of state.frr.splice(0)) await stopChild(c);
  sh('ip', ['netns', 'del', tor]);
  state.netns = state.netns.filter((x) => x !== tor);
  rmSync(state.frrDir, { recursive: true, force: true });
  state.frrDir = undefined;
  ok(`the ToR is gone (FRR stopped, ip netns del ${tor} took np-tor with it)`);
}

/** Agent log lines without the timestamp and pid, and with container IDs shortened. */
function shortLog(lines) {
  return lines
    .map((l) => l.replace(/^\S+\s+(\w+)\s+\[\d+\]\s+/, '$1 ').replace(/([0-9a-f]{12})[0-9a-f]{52}/g, '$1...'))
    .join('\n');
}

function natLines() {
  return sh('iptables-save', ['-t', 'nat'])
    .split('\n')
    .filter((l) => l.includes(`--dport ${HOST_PORT}`) || l.includes(`:${HOST_PORT}`));
}

// ---------------------------------------------------------------- cleanup

/** Undoes whatever was set up so far; safe to call twice and after any failure. */
function cleanup() {
  state.cleaned ??= (async () => {
    const errors = [];
    const attempt = async (what, fn) => {
      try {
        await fn();
      } catch (e) {
        errors.push(`${what}: ${e.message}`);
      }
    };
    await attempt('pod server', () => stopChild(state.server, 1000));
    // Deleting a pod's namespace also destroys its veth pair, host end included.
    for (const n of state.netns.splice(0)) await attempt(`ip netns del ${n}`, () => run('ip', ['netns', 'del', n]));
    if (state.nodeIp)
      await attempt(`ip addr del ${NODE_IP}/32 dev lo`, () => run('ip', ['addr', 'del', `${NODE_IP}/32`, 'dev', 'lo']));
    await attempt('agent', () => stopChild(state.agent));
    // BIRD exits with the agent; one left by an agent that had to be killed goes by its pid file.
    await attempt('BIRD', () => {
      const pidFile = state.tmp && join(state.tmp, 'bird', 'bird.pid');
      if (pidFile && existsSync(pidFile)) {
        try {
          const pid = Number(readFileSync(pidFile, 'utf8'));
          // Only that BIRD: a stale pid file may name a reused pid.
          if (readFileSync(`/proc/${pid}/cmdline`, 'utf8').includes(state.tmp)) process.kill(pid, 'SIGKILL');
        } catch {
          // already gone
        }
      }
    });
    await attempt('agent of the second node', () => stopChild(state.agent2));
    for (const c of state.frr.splice(0)) await attempt('FRR on the ToR', () => stopChild(c));
    if (state.frrDir)
      await attempt(`rm -rf ${state.frrDir}`, () => rmSync(state.frrDir, { recursive: true, force: true }));
    await attempt('etcd', () => stopChild(state.etcd?.child));
    if (state.tmp) await attempt(`rm -rf ${state.tmp}`, () => rmSync(state.tmp, { recursive: true, force: true }));
    // The plugin writes the IPAM lock holder's pid to its default ipam_lock_file:
    // remove it (and the directory) only if this run created the directory and
    // nothing else lives there.
    if (!state.lockDirExisted && existsSync(LOCK_DIR)) {
      await attempt(`rm ${LOCK_DIR}`, () => {
        const entries = readdirSync(LOCK_DIR);
        if (entries.every((e) => e === 'ipam.lock')) {
          rmSync(join(LOCK_DIR, 'ipam.lock'), { force: true });
          rmdirSync(LOCK_DIR);
        }
      });
    }
    if (errors.length) process.stderr.write(`${red('cleanup:')} ${errors.join('; ')}\n`);
  })();
  return state.cleaned;
}

for (const [sig, code] of [
  ['SIGINT', 130],
  ['SIGTERM', 143],
]) {
  process.on(sig, () => {
    if (interrupted) return;
    interrupted = true;
    silence();
    process.stderr.write(`\n${yellow(`${sig}: cleaning up...`)}\n`);
    cleanup().finally(() => {
      process.stderr.write('cleaned up: pods, agent, etcd and temp dirs removed\n');
      process.exit(code);
    });
  });
}

try {
  await main();
  process.stdout.write(`\n${green(bold('demo OK'))} in ${elapsedS().toFixed(1)} s\n`);
  process.exitCode = 0;
} catch (e) {
  const msg = e instanceof DemoError ? e.message : (e?.stack ?? String(e));
  if (!interrupted) process.stderr.write(`\n${red(bold('demo failed:'))} ${msg}\n`);
  process.exitCode = 1;
} finally {
  if (!interrupted) await cleanup();
}
