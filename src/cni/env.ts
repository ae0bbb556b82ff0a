// Validation of the CNI_* environment. Every problem is collected so one
// error (code 4) names each bad variable at once.
import { statSync } from 'node:fs';
import { ipFamily } from '../net/cidr.js';
import { CniError, ErrorCodes } from '../errors.js';
import type { CniArgs, CniCommand } from './types.js';

const COMMANDS: readonly CniCommand[] = ['ADD', 'DEL', 'CHECK', 'VERSION', 'STATUS', 'GC'];

const KNOWN_ARGS = [
  'K8S_POD_NAMESPACE',
  'K8S_POD_NAME',
  'K8S_POD_INFRA_CONTAINER_ID',
  'K8S_POD_UID',
  'IP',
  'IgnoreUnknown',
] as const;

type Var = 'CNI_CONTAINERID' | 'CNI_NETNS' | 'CNI_IFNAME' | 'CNI_PATH';

/**
 * Required variables per command, as the CNI spec (1.1, "Input" of each
 * operation) lists them. DEL tolerates a missing netns because the runtime may
 * have destroyed it already and the plugin must still release resources.
 */
const REQUIRED: Record<CniCommand, readonly Var[]> = {
  ADD: ['CNI_CONTAINERID', 'CNI_NETNS', 'CNI_IFNAME'],
  CHECK: ['CNI_CONTAINERID', 'CNI_NETNS', 'CNI_IFNAME'],
  DEL: ['CNI_CONTAINERID', 'CNI_IFNAME'],
  VERSION: [],
  STATUS: [],
  GC: ['CNI_PATH'],
};
/** Variables that matter to the command; only these are validated when present. */
const USED: Record<CniCommand, readonly Var[]> = {
  ADD: ['CNI_CONTAINERID', 'CNI_NETNS', 'CNI_IFNAME', 'CNI_PATH'],
  CHECK: ['CNI_CONTAINERID', 'CNI_NETNS', 'CNI_IFNAME', 'CNI_PATH'],
  DEL: ['CNI_CONTAINERID', 'CNI_NETNS', 'CNI_IFNAME', 'CNI_PATH'],
  VERSION: [],
  STATUS: ['CNI_PATH'],
  GC: ['CNI_PATH'],
};

interface CniEnv {
  command: CniCommand;
  containerId: string;
  netns: string;
  ifname: string;
  path: string[];
  args: CniArgs;
}

const CONTAINER_ID = /^[A-Za-z0-9][A-Za-z0-9_.-]*$/;
/**
 * Pod names and namespaces as runtimes send them: Kubernetes' DNS-1123 names,
 * and container names from runtimes that reuse the same keys (podman passes
 * its container names, such as `romantic_nobel` or `Web.1`). Starts with a
 * letter or digit; letters, digits, '_', '.', '-'; at most 253 characters.
 * Never a '/', whitespace, a control character or a name that is `.`/`..`.
 */
const POD_NAME_RE = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,252}$/;

function show(v: string): string {
  return JSON.stringify(v.length > 80 ? v.slice(0, 80) + '...' : v);
}

/** The command alone (VERSION needs nothing else). Throws code 4 when missing or unknown. */
export function parseCommand(env: Record<string, string | undefined>): CniCommand {
  const c = env['CNI_COMMAND'];
  if (c === undefined || c === '') {
    throw new CniError(ErrorCodes.InvalidEnvironment, `CNI_COMMAND is not set; expected one of ${COMMANDS.join(', ')}`);
  }
  if (!(COMMANDS as readonly string[]).includes(c)) {
    throw new CniError(
      ErrorCodes.InvalidEnvironment,
      `CNI_COMMAND: unknown command ${show(c)}; expected one of ${COMMANDS.join(', ')}`,
    );
  }
  return c as CniCommand;
}

/**
 * The CNI spec sets no length; runtimes use 64 hex characters. The cap keeps
 * handle IDs, datastore keys and log lines bounded (a 5000-character ID was
 * accepted and written everywhere).
 */
const MAX_CONTAINER_ID = 255;

function checkContainerId(v: string): string | undefined {
  if (v.length > MAX_CONTAINER_ID) {
    return (
      `CNI_CONTAINERID: got ${show(v)} (${v.length} characters); a container ID is at most ${MAX_CONTAINER_ID} ` +
      `characters (runtimes use 64)`
    );
  }
  if (!CONTAINER_ID.test(v)) {
    return (
      `CNI_CONTAINERID: got ${show(v)}; a container ID must start with a letter or digit followed by letters, ` +
      `digits, '_', '.' or '-'`
    );
  }
  return undefined;
}

/** Linux interface name rules (dev_valid_name in net/core/dev.c) as the CNI spec restates them. */
function checkIfname(v: string): string | undefined {
  const bad = (why: string) => `CNI_IFNAME: got ${show(v)}; ${why}`;
  // IFNAMSIZ is 16 bytes including the NUL terminator.
  if (Buffer.byteLength(v) > 15)
    return bad(`an interface name is at most 15 bytes (this one is ${Buffer.byteLength(v)})`);
  if (v === '.' || v === '..') return bad("'.' and '..' are not valid interface names");
  if (/[/:\s]/.test(v)) return bad("an interface name must not contain '/', ':' or whitespace");
  // The kernel expands `%d` in a name it is asked to create (eth%d -> eth0), so the link made would not be the one
  // named.
  if (v.includes('%')) return bad("an interface name must not contain '%' (the kernel would pick the name itself)");
  return undefined;
}

function checkNetns(v: string): string | undefined {
  if (!v.startsWith('/'))
    return (
      `CNI_NETNS: got ${show(v)}; expected an absolute path to a network namespace, e.g. /var/run/netns/<name> ` +
      `or /proc/<pid>/ns/net`
    );
  if (v.includes('\0')) return `CNI_NETNS: got a path containing a NUL byte`;
  return undefined;
}

const OWN_NETNS = ['/proc/self/ns/net', '/proc/1/ns/net'];
let ownNetns: Array<[string, string | undefined]> | undefined;

function nsId(p: string): string | undefined {
  try {
    const st = statSync(p);
    return `${st.dev}:${st.ino}`;
  } catch {
    return undefined;
  }
}

/**
 * CNI_NETNS must be a sandbox's namespace, never the node's own nor the one
 * the plugin runs in: ADD would install a default route and set ip_forward on
 * the node, DEL would delete the node link named CNI_IFNAME. Compared by the
 * namespace's identity (device and inode of the nsfs file), so any path to it
 * (/proc/<pid>/ns/net, a bind mount) is caught. A path that cannot be stat'ed
 * is left to the command (DEL tolerates a namespace that is already gone).
 */
function checkNotHostNetns(netns: string): string | undefined {
  const target = nsId(netns);
  if (target === undefined) return undefined;
  // The two namespaces are a process's for its life: stat'ed once (the agent checks every request).
  ownNetns ??= OWN_NETNS.map((p) => [p, nsId(p)]);
  for (const [p, own] of ownNetns) {
    if (own === target) {
      return (
        `CNI_NETNS: ${show(netns)} is the ${p.includes('/1/') ? "node's own" : "plugin's own"} network ` +
        `namespace, not a sandbox's; refusing to change it (the runtime must pass the pod's namespace)`
      );
    }
  }
  return undefined;
}

/**
 * CNI_ARGS: `K=V;K=V`. Unknown keys are an error unless IgnoreUnknown is 1/true,
 * the same contract as libcni's args loader (kubelet always sends IgnoreUnknown=1).
 */
export function parseCniArgs(s: string | undefined, problems: string[]): CniArgs {
  const out: CniArgs = {};
  if (!s) return out;
  const unknown: string[] = [];
  for (const part of s.split(';')) {
    if (part === '') continue;
    const eq = part.indexOf('=');
    if (eq <= 0) {
      problems.push(`CNI_ARGS: ${show(part)} is not KEY=VALUE; write pairs like K8S_POD_NAME=web-0 separated by ';'`);
      continue;
    }
    const k = part.slice(0, eq);
    const v = part.slice(eq + 1);
    if (!/^[A-Za-z0-9_]+$/.test(k)) {
      problems.push(`CNI_ARGS: key ${show(k)} is not alphanumeric`);
      continue;
    }
    out[k] = v;
    if (!(KNOWN_ARGS as readonly string[]).includes(k)) unknown.push(k);
  }
  const ignore = out.IgnoreUnknown;
  if (ignore !== undefined && !['1', 'true', '0', 'false'].includes(ignore.toLowerCase())) {
    problems.push(`CNI_ARGS: IgnoreUnknown=${show(ignore)}; expected 1, true, 0 or false`);
  }
  const ignoring = ignore !== undefined && ['1', 'true'].includes(ignore.toLowerCase());
  if (unknown.length && !ignoring) {
    problems.push(
      `CNI_ARGS: unknown key${unknown.length > 1 ? 's' : ''} ${unknown.join(', ')}; known keys are ` +
        `${KNOWN_ARGS.join(', ')} (add IgnoreUnknown=1 to pass others)`,
    );
  }
  // Pod name and namespace become datastore keys, object names, veth name
  // input and log fields, so `..`, '/', whitespace or a newline must not reach
  // any of them (one rule for both: a superset of Kubernetes' names that also
  // admits runtimes' container names).
  for (const key of ['K8S_POD_NAMESPACE', 'K8S_POD_NAME'] as const) {
    const v = out[key];
    if (v !== undefined && !POD_NAME_RE.test(v)) {
      problems.push(
        `CNI_ARGS: ${key}=${show(v)} is not a valid ${key === 'K8S_POD_NAME' ? 'pod' : 'namespace'} name: at most ` +
          `253 characters of letters, digits, '_', '.' and '-', starting with a letter or digit (Kubernetes names ` +
          `and container names both fit)`,
      );
    }
  }
  if (out.IP !== undefined) {
    const ips = out.IP.split(',').map((x) => x.trim());
    const fams = ips.map((ip) => ipFamily(ip));
    const badIps = ips.filter((_, i) => fams[i] === 0);
    if (badIps.length) {
      problems.push(
        `CNI_ARGS: IP=${show(out.IP)}: ${badIps.map(show).join(', ')} is not an IP address; write IP=10.0.0.5 or ` +
          `IP=10.0.0.5,fd00::5`,
      );
    } else if (fams.filter((f) => f === 4).length > 1 || fams.filter((f) => f === 6).length > 1) {
      problems.push(`CNI_ARGS: IP=${show(out.IP)}: at most one IPv4 and one IPv6 address may be requested`);
    }
  }
  return out;
}

/** Validates every variable the command needs; throws one code-4 error naming each bad one. */
export function parseEnv(env: Record<string, string | undefined>): CniEnv {
  const command = parseCommand(env);
  const problems: string[] = [];
  const get = (k: Var) => env[k] ?? '';
  for (const k of REQUIRED[command]) {
    if (get(k) === '') problems.push(`${k} is not set (required for ${command})`);
  }
  const used = USED[command];
  const present = (k: Var) => used.includes(k) && get(k) !== '';
  if (present('CNI_CONTAINERID')) {
    const p = checkContainerId(get('CNI_CONTAINERID'));
    if (p) problems.push(p);
  }
  if (present('CNI_NETNS')) {
    const p = checkNetns(get('CNI_NETNS')) ?? checkNotHostNetns(get('CNI_NETNS'));
    if (p) problems.push(p);
  }
  if (present('CNI_IFNAME')) {
    const p = checkIfname(get('CNI_IFNAME'));
    if (p) problems.push(p);
  }
  const args =
    command === 'ADD' || command === 'DEL' || command === 'CHECK' ? parseCniArgs(env['CNI_ARGS'], problems) : {};
  if (problems.length) {
    throw new CniError(ErrorCodes.InvalidEnvironment, problems.join('; '));
  }
  return {
    command,
    containerId: get('CNI_CONTAINERID'),
    netns: used.includes('CNI_NETNS') ? get('CNI_NETNS') : '',
    ifname: used.includes('CNI_IFNAME') ? get('CNI_IFNAME') : '',
    path: get('CNI_PATH')
      .split(':')
      .filter((p) => p !== ''),
    args,
  };
}
