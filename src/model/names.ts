// Resource names for IPAM objects. They must be valid Kubernetes object names
// (lower-case alphanumerics, '-' and '.'), and the etcd backend derives its keys
// (/netplugin/ipam/v2/assignment/ipv4/block/10.0.0.0-26,
//  /netplugin/ipam/v2/host/<node>/ipv4/block/10.0.0.0-26) from them. Also the
// host veth name of a workload (hostVethName).
import { createHash } from 'node:crypto';

/** `10.0.0.0/26` -> `10.0.0.0-26`; `fd00::40/122` -> `fd00--40-122` */
export function blockName(cidr: string): string {
  return cidr.toLowerCase().replace(/[/:]/g, '-');
}

function familyOf(cidr: string): 4 | 6 {
  return cidr.includes(':') ? 6 : 4;
}

/** `<node>-ipv4-10.0.0.0-26`: parseable from the right, since block names never contain `-ipv4-`/`-ipv6-`. */
export function affinityName(node: string, cidr: string): string {
  return `${node}-ipv${familyOf(cidr)}-${blockName(cidr)}`;
}

export function parseAffinityName(name: string): { node: string; family: 4 | 6; block: string } | undefined {
  const m = /^(.+)-ipv([46])-([0-9a-f.-]+)$/.exec(name);
  if (!m) return undefined;
  return { node: m[1]!, family: Number(m[2]) as 4 | 6, block: m[3]! };
}

/** Block names encode the family: IPv6 ones contain `--` or more than one `-`. */
export function blockFamily(name: string): 4 | 6 {
  return /^\d+\.\d+\.\d+\.\d+-\d+$/.test(name) ? 4 : 6;
}

/**
 * WorkloadEndpoint names: `<node>-<orchestrator>-<workload>-<endpoint>` with
 * every '-' inside a part doubled (workload/workload.ts builds them; this splits
 * them back: `node--1-k8s-web--0-eth0` -> node-1, k8s, web-0, eth0).
 */
/**
 * `<node>-<orchestrator>-<workload>-<ifname>` with every '-' inside a part
 * doubled, so the name splits back unambiguously on single dashes
 * (node `a-b`, pod `c` -> `a--b-k8s-c-eth0`). Workload: the pod name for k8s,
 * the container ID for plain CNI.
 */
export function workloadEndpointName(
  node: string,
  orchestrator: 'k8s' | 'cni' | string,
  workload: string,
  ifname: string,
): string {
  return [node, orchestrator, workload, ifname].map((p) => p.replace(/-/g, '--')).join('-');
}

export function parseWorkloadEndpointName(
  name: string,
): { node: string; orchestrator: string; workload: string; endpoint: string } | undefined {
  // '--' is an escaped '-' inside a part; a single '-' separates parts.
  const parts: string[] = [];
  let cur = '';
  for (let i = 0; i < name.length; i++) {
    const ch = name[i]!;
    if (ch !== '-') {
      cur += ch;
    } else if (name[i + 1] === '-') {
      cur += '-';
      i++;
    } else {
      parts.push(cur);
      cur = '';
    }
  }
  parts.push(cur);
  if (parts.length !== 4 || parts.some((p) => p === '')) return undefined;
  const [node, orchestrator, workload, endpoint] = parts as [string, string, string, string];
  return { node, orchestrator, workload, endpoint };
}

// Kubernetes' metadata rules (apimachinery validation), applied to every
// netplugin.org/v3 object on its way in, so an object stored in etcd can move
// to the Kubernetes datastore unchanged.
const DNS1123_SUBDOMAIN = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;
const QUALIFIED_NAME = /^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$/;

/** Why `name` is not a DNS-1123 subdomain (an object name), or undefined when it is one. */
export function objectNameProblem(name: string): string | undefined {
  if (name.length > 253) return 'must be at most 253 characters';
  if (!DNS1123_SUBDOMAIN.test(name)) {
    const hint = name
      .toLowerCase()
      .replace(/[^a-z0-9.-]+/g, '-')
      .replace(/^[-.]+|[-.]+$/g, '');
    return (
      `must consist of lower-case letters, digits, '-' and '.', and start and end with a letter or ` +
      `digit${hint && hint !== name ? ` (e.g. ${JSON.stringify(hint)})` : ''}`
    );
  }
  return undefined;
}

/**
 * Why `key` is not a label (or annotation) key: an optional DNS subdomain prefix and '/', then a name of up to 63
 * characters.
 */
export function labelKeyProblem(key: string): string | undefined {
  const slash = key.lastIndexOf('/');
  const prefix = slash >= 0 ? key.slice(0, slash) : undefined;
  const name = slash >= 0 ? key.slice(slash + 1) : key;
  if (prefix !== undefined && (prefix.length > 253 || !DNS1123_SUBDOMAIN.test(prefix)))
    return `its prefix ${JSON.stringify(prefix)} must be a DNS subdomain (lower-case, e.g. example.com)`;
  if (!name) return 'the name part must not be empty';
  if (name.length > 63) return 'the name part must be at most 63 characters';
  if (!QUALIFIED_NAME.test(name))
    return "the name part must consist of letters, digits, '-', '_' and '.', and start and end with a letter or digit";
  return undefined;
}

/**
 * Why `value` is not a label value: empty, or up to 63 letters, digits, '-', '_', '.', starting and ending with a
 * letter or digit.
 */
export function labelValueProblem(value: string): string | undefined {
  if (value.length > 63) return 'must be at most 63 characters';
  if (value && !QUALIFIED_NAME.test(value))
    return "must be empty or consist of letters, digits, '-', '_' and '.', and start and end with a letter or digit";
  return undefined;
}

// The host veth of a workload: named from the workload's identity, so the plugin (ADD, GC) and the
// policy evaluation derive the same interface without reading one back.

/** Linux IFNAMSIZ - 1. */
const MAX_IFNAME = 15;
const HASH_CHARS = 11;

/**
 * The host-side veth name: `prefix` + the first 11 hex chars of sha1(key), where key is
 * `<namespace>.<pod>` for Kubernetes pods and the container ID otherwise. Stable across
 * restarts of the same pod, so a re-ADD finds (and replaces) a stale veth.
 */
export function hostVethName(prefix: string, key: string): string {
  if (typeof prefix !== 'string' || !/^[A-Za-z0-9_-]{1,4}$/.test(prefix)) {
    throw new TypeError(
      `hostVethName: prefix must be 1-${MAX_IFNAME - HASH_CHARS} characters of [A-Za-z0-9_-] (so the name fits in ` +
        `${MAX_IFNAME} bytes), got ${JSON.stringify(prefix)}; use the default 'npi'`,
    );
  }
  if (typeof key !== 'string' || key === '') {
    throw new TypeError(
      `hostVethName: key must be a non-empty string ('<namespace>.<pod>' or the container ID), got ` +
        `${JSON.stringify(key)}`,
    );
  }
  return prefix + createHash('sha1').update(key).digest('hex').slice(0, HASH_CHARS);
}

/**
 * The key of a workload's host veth name (hostVethName): `<namespace>.<pod>` for a Kubernetes
 * pod, the container ID otherwise. Whoever needs a workload's host veth (ADD, GC, the policy
 * agent) derives it from the workload's identity with this, never from a recorded name.
 */
export function hostVethKey(w: {
  orchestrator: string;
  namespace?: string | undefined;
  pod?: string | undefined;
  containerID: string;
}): string {
  return w.orchestrator === 'k8s' && w.pod && w.namespace ? `${w.namespace}.${w.pod}` : w.containerID;
}
